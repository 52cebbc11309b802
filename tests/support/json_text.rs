//! JSON texts as producers write them, for the tests of what reaches the merchant: every
//! form of number, escapes, keys out of order, spacing.

use proptest::prelude::*;
use proptest::strategy::ValueTree;
use proptest::test_runner::{Config, RngAlgorithm, TestRng, TestRunner};

/// JSON texts as producers write them, spacing and all: numbers of every form, strings
/// with escapes and characters beyond the BMP, objects with keys out of order (and
/// repeated), nested a few levels.
pub fn json_text() -> impl Strategy<Value = String> {
    let number = prop_oneof![
        "-?(0|[1-9][0-9]{0,40})",
        "-?(0|[1-9][0-9]{0,20})\\.[0-9]{1,20}",
        "-?(0|[1-9][0-9]{0,3})(\\.[0-9]{1,6})?[eE][+-]?[0-9]{1,3}",
        Just("-0".to_string()),
        Just("-0.0".to_string()),
    ];
    let string = proptest::collection::vec(
        prop_oneof![
            "[a-zA-Z0-9 ,.:/_-]",
            Just("\\\"".to_string()),
            Just("\\\\".to_string()),
            Just("\\/".to_string()),
            Just("\\n\\t\\r\\b\\f".to_string()),
            Just("\\u00e9".to_string()),
            Just("\\u001f".to_string()),
            Just("\\ud83d\\ude00".to_string()),
            Just("é€😀".to_string()),
        ],
        0..6,
    )
    .prop_map(|parts| format!("\"{}\"", parts.concat()));
    let space = prop_oneof![Just(""), Just(" "), Just("\n  "), Just("\t")];
    let leaf = prop_oneof![
        number,
        string.clone(),
        Just("true".to_string()),
        Just("false".to_string()),
        Just("null".to_string()),
    ];
    leaf.prop_recursive(4, 24, 5, move |inner| {
        prop_oneof![
            (
                proptest::collection::vec(inner.clone(), 0..5),
                space.clone()
            )
                .prop_map(|(items, s)| format!("[{s}{}{s}]", items.join(&format!(",{s}")))),
            (
                proptest::collection::vec((string.clone(), inner), 0..5),
                space.clone()
            )
                .prop_map(|(fields, s)| {
                    let fields: Vec<String> = fields
                        .iter()
                        .map(|(k, v)| format!("{k}{s}:{s}{v}"))
                        .collect();
                    format!("{{{s}{}{s}}}", fields.join(","))
                }),
        ]
    })
}

/// Bodies drawn from `json_text` (objects and arrays only: a string body is sent as
/// its text), the same for every run.
pub fn sample_bodies(n: usize) -> Vec<String> {
    let rng = TestRng::deterministic_rng(RngAlgorithm::ChaCha);
    let mut runner = TestRunner::new_with_rng(Config::default(), rng);
    let mut bodies = Vec::with_capacity(n);
    while bodies.len() < n {
        let body = json_text().new_tree(&mut runner).unwrap().current();
        if body.starts_with(['{', '[']) {
            bodies.push(body);
        }
    }
    bodies
}
