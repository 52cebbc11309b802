//! What postback reads of JSON it keeps as sent: how deep a document nests
//! (`check_nesting`, so that whatever is accepted can be read back), its canonical
//! text (`canonical_json`), the form an idempotency key's fingerprint is taken of, and
//! its value where a check must read one (`RawJson::value`). Each pass is run on every
//! request with a body, so each is O(n log n) or better for n bytes.
//!
//! The canonical text is the one Postgres writes for a `jsonb`: object keys sorted by
//! length, then bytes, the last of a repeated key kept; `", "` and `": "` between items;
//! numbers as exact decimals without exponent (`1E+2` is `100`, `1.50e1` is `15.0`,
//! `-0` is `0`); strings with only `"`, `\` and control characters escaped. So a request
//! registered through `postback.notify()` (a `jsonb`) and the same request over HTTP have
//! one fingerprint, and spacing or field order never makes a repeat another request.

use std::cmp::Ordering;
use std::fmt::Write;

use serde::{Deserialize, Serialize};
use serde_json::value::RawValue;
use serde_json::Value;
use serde_path_to_error::Segment;

use super::FieldError;

/// How deep a request may nest, its own object counted: well inside what every reader
/// of a stored document reads (serde_json's 128), with room for the few levels a store
/// wraps around what it keeps.
pub const MAX_NESTING: usize = 64;

/// How many times the length of the text its canonical text may be (plus `SLACK`):
/// numbers with large exponents grow when written out, and a text whose canonical form
/// would outgrow this has none (its fingerprint is then of its bytes), so that no
/// request costs memory out of all proportion to its size.
const MAX_GROWTH: usize = 16;
const SLACK: usize = 64 * 1024;

/// Refuses JSON text that nests deeper than `limit` levels, naming the field of the
/// top-level object under which it does (its nearest field path, as `success` or
/// `items`). Text that is not JSON passes: the parser that follows says why. O(n) for
/// n bytes: one pass, looking back only over the spaces before a top-level field name.
pub fn check_nesting(raw: &[u8], limit: usize) -> Result<(), FieldError> {
    let (mut depth, mut in_string, mut escaped) = (0usize, false, false);
    let mut field_start = None;
    let mut field = String::new();
    for (i, &b) in raw.iter().enumerate() {
        if in_string {
            match (escaped, b) {
                (true, _) => escaped = false,
                (false, b'\\') => escaped = true,
                (false, b'"') => {
                    in_string = false;
                    if let Some(start) = field_start.take() {
                        field = String::from_utf8_lossy(&raw[start..i]).into_owned();
                    }
                }
                _ => {}
            }
            continue;
        }
        match b {
            b'"' => {
                in_string = true;
                // A string opened at depth 1 after `{` or `,` is a top-level field name.
                if depth == 1 && previous_token(raw, i).is_some_and(|p| p == b'{' || p == b',') {
                    field_start = Some(i + 1);
                }
            }
            b'{' | b'[' => {
                depth += 1;
                if depth > limit {
                    let field = if field.is_empty() { "body" } else { &field };
                    return Err(FieldError::new(
                        field,
                        format!(
                            "nests deeper than {limit} levels (the request's own object counted)"
                        ),
                    ));
                }
            }
            b'}' | b']' => depth = depth.saturating_sub(1),
            _ => {}
        }
    }
    Ok(())
}

/// The last byte before `i` that is not whitespace.
fn previous_token(raw: &[u8], i: usize) -> Option<u8> {
    raw[..i]
        .iter()
        .rev()
        .find(|b| !b.is_ascii_whitespace())
        .copied()
}

/// `raw`'s canonical text (see the module's doc); `None` when it is not one JSON value.
/// O(n log n) for n bytes: each object's keys are sorted once (`in_key_order`), every
/// byte is otherwise read a few times, and the text written is at most `MAX_GROWTH`
/// times as long (plus `SLACK`).
pub fn canonical_json(raw: &[u8]) -> Option<String> {
    let mut parser = Parser { raw, at: 0 };
    let value = parser.value()?;
    parser.skip_space();
    if parser.at != raw.len() {
        return None;
    }
    let mut out = String::with_capacity(raw.len());
    value.write(&mut out, MAX_GROWTH * raw.len() + SLACK)?;
    Some(out)
}

/// A JSON value as the canonical text needs it: numbers as written.
enum Node<'a> {
    Literal(&'a str),
    Number(&'a str),
    Text(String),
    List(Vec<Node<'a>>),
    Object(Vec<(String, Node<'a>)>),
}

impl Node<'_> {
    /// Writes the node, unless `out` would grow past `budget` bytes.
    fn write(&self, out: &mut String, budget: usize) -> Option<()> {
        match self {
            Self::Literal(text) => out.push_str(text),
            Self::Number(text) => write_number(text, out, budget)?,
            Self::Text(text) => write_string(text, out),
            Self::List(items) => {
                out.push('[');
                for (n, item) in items.iter().enumerate() {
                    if n > 0 {
                        out.push_str(", ");
                    }
                    item.write(out, budget)?;
                }
                out.push(']');
            }
            Self::Object(fields) => {
                out.push('{');
                for (n, (key, value)) in fields.iter().enumerate() {
                    if n > 0 {
                        out.push_str(", ");
                    }
                    write_string(key, out);
                    out.push_str(": ");
                    value.write(out, budget)?;
                }
                out.push('}');
            }
        }
        Some(())
    }
}

struct Parser<'a> {
    raw: &'a [u8],
    at: usize,
}

impl<'a> Parser<'a> {
    fn skip_space(&mut self) {
        while self
            .raw
            .get(self.at)
            .is_some_and(|b| b" \t\n\r".contains(b))
        {
            self.at += 1;
        }
    }

    fn eat(&mut self, b: u8) -> Option<()> {
        self.skip_space();
        (self.raw.get(self.at) == Some(&b)).then(|| self.at += 1)
    }

    fn value(&mut self) -> Option<Node<'a>> {
        self.skip_space();
        match *self.raw.get(self.at)? {
            b'{' => self.object(),
            b'[' => self.list(),
            b'"' => self.string().map(Node::Text),
            b't' | b'f' | b'n' => self.literal(),
            _ => self.number(),
        }
    }

    fn literal(&mut self) -> Option<Node<'a>> {
        let word = ["true", "false", "null"]
            .into_iter()
            .find(|w| self.raw[self.at..].starts_with(w.as_bytes()))?;
        self.at += word.len();
        Some(Node::Literal(word))
    }

    fn number(&mut self) -> Option<Node<'a>> {
        let start = self.at;
        let is_number_byte = |b: &u8| b.is_ascii_digit() || b"+-.eE".contains(b);
        while self.raw.get(self.at).is_some_and(is_number_byte) {
            self.at += 1;
        }
        let text = std::str::from_utf8(&self.raw[start..self.at]).ok()?;
        Decimal::parse(text).map(|_| Node::Number(text))
    }

    fn list(&mut self) -> Option<Node<'a>> {
        self.at += 1;
        let mut items = Vec::new();
        if self.eat(b']').is_some() {
            return Some(Node::List(items));
        }
        loop {
            items.push(self.value()?);
            if self.eat(b']').is_some() {
                return Some(Node::List(items));
            }
            self.eat(b',')?;
        }
    }

    fn object(&mut self) -> Option<Node<'a>> {
        self.at += 1;
        let mut fields: Vec<(String, Node<'a>)> = Vec::new();
        if self.eat(b'}').is_none() {
            loop {
                self.skip_space();
                let key = self.string()?;
                self.eat(b':')?;
                fields.push((key, self.value()?));
                if self.eat(b'}').is_some() {
                    break;
                }
                self.eat(b',')?;
            }
        }
        Some(Node::Object(in_key_order(fields)))
    }

    /// A string's text, its escapes read.
    fn string(&mut self) -> Option<String> {
        if self.raw.get(self.at) != Some(&b'"') {
            return None;
        }
        let start = self.at;
        self.at += 1;
        loop {
            match *self.raw.get(self.at)? {
                b'\\' => self.at += 2,
                b'"' => break,
                _ => self.at += 1,
            }
        }
        self.at += 1;
        let quoted = std::str::from_utf8(self.raw.get(start..self.at)?).ok()?;
        serde_json::from_str(quoted).ok()
    }
}

/// An object's `fields` (as sent) in key order, the last of a repeated key kept: a
/// stable sort, so that a key's repeats stay in the order sent, then the last of each
/// run of one key. O(k log k) comparisons for k fields, each reading no more of a key
/// than its length: O(n log n) for n bytes of keys.
fn in_key_order(mut fields: Vec<(String, Node<'_>)>) -> Vec<(String, Node<'_>)> {
    fields.sort_by(|(a, _), (b, _)| key_order(a, b));
    let mut kept: Vec<(String, Node<'_>)> = Vec::with_capacity(fields.len());
    for field in fields {
        match kept.last_mut() {
            Some(last) if key_order(&last.0, &field.0).is_eq() => *last = field,
            _ => kept.push(field),
        }
    }
    kept
}

/// How the canonical text orders an object's keys: by length, then bytes.
fn key_order(a: &str, b: &str) -> Ordering {
    #[cfg(test)]
    tests::count_comparison(a, b);
    a.len()
        .cmp(&b.len())
        .then_with(|| a.as_bytes().cmp(b.as_bytes()))
}

/// Writes `text` as a JSON string, escaping only what must be.
fn write_string(text: &str, out: &mut String) {
    out.push('"');
    for c in text.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\u{8}' => out.push_str("\\b"),
            '\u{c}' => out.push_str("\\f"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            c if u32::from(c) < 0x20 => {
                let _ = write!(out, "\\u{:04x}", u32::from(c));
            }
            c => out.push(c),
        }
    }
    out.push('"');
}

/// A JSON number as a decimal: its digits without sign or point, and where the point
/// goes (`scale` digits from the right; negative: that many zeros follow).
struct Decimal<'a> {
    negative: bool,
    integer: &'a str,
    fraction: &'a str,
    exponent: i64,
}

impl<'a> Decimal<'a> {
    fn parse(text: &'a str) -> Option<Self> {
        let (negative, rest) = match text.strip_prefix('-') {
            Some(rest) => (true, rest),
            None => (false, text),
        };
        let (mantissa, exponent) = match rest.find(['e', 'E']) {
            Some(at) => (&rest[..at], rest[at + 1..].parse::<i64>().ok()?),
            None => (rest, 0),
        };
        let (integer, fraction) = mantissa.split_once('.').unwrap_or((mantissa, ""));
        let digits = |s: &str| s.bytes().all(|b| b.is_ascii_digit());
        let well_formed = !integer.is_empty()
            && digits(integer)
            && digits(fraction)
            && (!mantissa.contains('.') || !fraction.is_empty())
            && (integer == "0" || !integer.starts_with('0'));
        well_formed.then_some(Self {
            negative,
            integer,
            fraction,
            exponent,
        })
    }
}

/// Writes a number as Postgres's `numeric` writes it: every digit, no exponent, as many
/// decimals as written less the exponent, no sign on zero; `None` when `out` would grow
/// past `budget` bytes. Reckoned in `i128`, where no exponent an `i64` holds overflows.
fn write_number(text: &str, out: &mut String, budget: usize) -> Option<()> {
    let d = Decimal::parse(text)?;
    let exponent = i128::from(d.exponent);
    let scale = (d.fraction.len() as i128 - exponent).max(0);
    // The significant digits, and how many of them stand before the point.
    let all = [d.integer, d.fraction].concat();
    let significant = all.trim_start_matches('0');
    let before = d.integer.len() as i128 + exponent - (all.len() - significant.len()) as i128;
    let whole_len = if significant.is_empty() {
        1
    } else {
        before.max(1)
    };
    let len = whole_len + if scale > 0 { scale + 1 } else { 0 };
    if out.len() as i128 + len > budget as i128 {
        return None;
    }
    if d.negative && !significant.is_empty() {
        out.push('-');
    }
    // Within the budget from here: every count below fits it.
    let zeros = |n: i128| "0".repeat(n.max(0) as usize);
    match (significant.is_empty(), before) {
        (true, _) | (false, i128::MIN..=0) => out.push('0'),
        (false, b) if b as usize >= significant.len() => {
            out.push_str(significant);
            out.push_str(&zeros(b - significant.len() as i128));
        }
        (false, b) => out.push_str(&significant[..b as usize]),
    }
    if scale == 0 {
        return Some(());
    }
    out.push('.');
    let decimals = match (significant.is_empty(), before) {
        (true, _) => String::new(),
        (false, b) if b <= 0 => zeros(-b) + significant,
        (false, b) => significant
            .get(b as usize..)
            .unwrap_or_default()
            .to_string(),
    };
    out.push_str(&decimals);
    out.push_str(&zeros(scale - decimals.len() as i128));
    Some(())
}

/// A JSON value kept as it was sent (an event's body, its topic's example): stored and
/// shown as those bytes, never written out again.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(transparent)]
pub struct RawJson(Box<RawValue>);

impl RawJson {
    /// `raw` as sent, once it is one JSON value.
    pub fn new(raw: Box<RawValue>) -> Self {
        Self(raw)
    }

    pub fn get(&self) -> &str {
        self.0.get()
    }

    pub fn as_raw(&self) -> &RawValue {
        &self.0
    }

    /// The value, read (for a check that needs it read, as a JSON Schema); or, for text
    /// that holds what no value can (a number beyond a double's range, a lone
    /// surrogate), why not, under `field` followed by the JSON pointer of the place
    /// (`body/items/0`).
    pub fn value(&self, field: &str) -> Result<Value, FieldError> {
        let mut text = serde_json::Deserializer::from_str(self.0.get());
        serde_path_to_error::deserialize(&mut text).map_err(|e| {
            let reason = e.inner().to_string();
            let reason = reason.split(" at line ").next().unwrap_or_default();
            FieldError::new(pointer(field, e.path()), reason)
        })
    }
}

/// `field` followed by the JSON pointer (RFC 6901) of `path`.
fn pointer(field: &str, path: &serde_path_to_error::Path) -> String {
    let mut out = field.to_string();
    for segment in path {
        match segment {
            Segment::Seq { index } => {
                let _ = write!(out, "/{index}");
            }
            Segment::Map { key } => {
                let _ = write!(out, "/{}", key.replace('~', "~0").replace('/', "~1"));
            }
            Segment::Enum { .. } | Segment::Unknown => {}
        }
    }
    out
}

impl PartialEq for RawJson {
    fn eq(&self, other: &Self) -> bool {
        self.get() == other.get()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::cell::Cell;

    thread_local! {
        /// Steps of the canonical text counted on this thread (`count_comparison`).
        static STEPS: Cell<u64> = const { Cell::new(0) };
    }

    /// Counts a comparison of two keys: a step, and one per byte it reads.
    pub(super) fn count_comparison(a: &str, b: &str) {
        let read = match a.len() == b.len() {
            true => 1 + a.bytes().zip(b.bytes()).take_while(|(x, y)| x == y).count(),
            false => 0,
        };
        STEPS.with(|steps| steps.set(steps.get() + 1 + read as u64));
    }

    /// The steps the canonical text of `text` takes.
    fn steps_of(text: &str) -> u64 {
        STEPS.with(|steps| steps.set(0));
        assert!(canonical_json(text.as_bytes()).is_some(), "{text:.40}");
        STEPS.with(Cell::get)
    }

    /// Texts of about `n` bytes, each the worst for one way of comparing keys: many
    /// distinct keys, each key twice, one key over and over, long keys that differ only
    /// at their end, and many objects nested as deep as a request may; keys in an order
    /// of chance (one seed: the same every run), since keys sent in order sort at once.
    fn worst_texts(n: usize) -> Vec<(&'static str, String)> {
        let mut chance = fastrand::Rng::with_seed(68);
        let mut object = |mut fields: Vec<String>| {
            chance.shuffle(&mut fields);
            format!("{{{}}}", fields.join(","))
        };
        let distinct = object((0..n / 9).map(|i| format!(r#""{i}":0"#)).collect());
        let twice = (0..n / 9).map(|i| format!(r#""{}":{i}"#, i % (n / 18)));
        let twice = object(twice.collect());
        let one = object(vec![r#""k":0"#.to_string(); n / 6]);
        let prefix = "p".repeat(120);
        let long = object(
            (0..n / 130)
                .map(|i| format!(r#""{prefix}{i:05}":0"#))
                .collect(),
        );
        let mut nested = String::from("0");
        for depth in 0..MAX_NESTING - 1 {
            let mut fields: Vec<String> = (0..n / (MAX_NESTING * 9))
                .map(|i| format!(r#""{i}":0"#))
                .collect();
            fields.push(format!(r#""{depth}x":{nested}"#));
            nested = object(fields);
        }
        vec![
            ("distinct keys", distinct),
            ("each key twice", twice),
            ("one key repeated", one),
            ("long keys alike but for their end", long),
            ("nested objects", nested),
        ]
    }

    /// The canonical text of n bytes takes O(n log n) steps, whatever its keys: at most
    /// 2·n·log2(n) at every size up to the largest body.
    #[test]
    fn the_canonical_text_takes_n_log_n_steps_whatever_the_keys() {
        for n in [4 * 1024, 32 * 1024, 256 * 1024] {
            for (shape, text) in worst_texts(n) {
                let len = text.len() as f64;
                let steps = steps_of(&text);
                let bound = 2.0 * len * len.log2();
                assert!(
                    steps as f64 <= bound,
                    "{shape}, {len} bytes: {steps} steps, more than {bound}"
                );
            }
        }
    }

    fn canonical(raw: &str) -> String {
        canonical_json(raw.as_bytes()).unwrap()
    }

    /// Each pair as Postgres 15 writes `'<left>'::jsonb::text`.
    #[test]
    fn numbers_are_written_as_postgres_writes_a_jsonb() {
        for (written, canonical_form) in [
            ("-0", "0"),
            ("-0.0", "0.0"),
            ("1E+2", "100"),
            ("1.50e1", "15.0"),
            ("1e-3", "0.001"),
            ("-1.5E-7", "-0.00000015"),
            ("0e5", "0"),
            ("0.00e1", "0.0"),
            ("-0.000e-2", "0.00000"),
            ("10.10", "10.10"),
            ("12345678901234567890123", "12345678901234567890123"),
            ("123.456e1", "1234.56"),
            ("5e0", "5"),
            ("0.5", "0.5"),
        ] {
            assert_eq!(canonical(written), canonical_form, "{written}");
        }
    }

    #[test]
    fn objects_sort_keys_by_length_then_bytes_and_keep_the_last_of_a_repeat() {
        let raw =
            r#"{"b":1,"a":2,"aa":[1,{}],"a":3, "s":"\u00e9\u001f\n\/ é \t\b\f\r \u007f \"\\"}"#;
        assert_eq!(
            canonical(raw),
            "{\"a\": 3, \"b\": 1, \"s\": \"é\\u001f\\n/ é \\t\\b\\f\\r \u{7f} \\\"\\\\\", \"aa\": [1, {}]}"
        );
        let repeats =
            r#"{"b":1,"a":2,"b":3,"":0,"a":{"x":1,"x":[2],"x":{"y":1,"y":2}},"":5,"ab":6,"b":7}"#;
        assert_eq!(
            canonical(repeats),
            r#"{"": 5, "a": {"x": {"y": 2}}, "b": 7, "ab": 6}"#
        );
        assert_eq!(canonical(" [ ] "), "[]");
        assert_eq!(canonical("[[],{}]"), "[[], {}]");
        assert_eq!(canonical(r#""\ud83d\ude00""#), "\"😀\"");
    }

    #[test]
    fn what_is_not_one_json_value_has_no_canonical_text() {
        for bad in ["", "{", "[1,]", "01", "1.", "tru", "{} {}", "\"a"] {
            assert!(canonical_json(bad.as_bytes()).is_none(), "{bad}");
        }
    }

    #[test]
    fn a_text_whose_numbers_would_outgrow_it_has_no_canonical_text() {
        assert_eq!(canonical_json(b"[1e999999999]"), None);
        let many = format!("[{}]", vec!["1e999"; 20_000].join(","));
        assert_eq!(canonical_json(many.as_bytes()), None);
        assert_eq!(canonical("0e+427"), "0");
        assert_eq!(canonical("-0.0e+427"), "0");
        assert_eq!(canonical("1e999").len(), 1000);
        assert_eq!(canonical("1e-3"), "0.001");
        // Exponents at the ends of what they are read as.
        assert_eq!(canonical_json(b"1e9223372036854775807"), None);
        assert_eq!(canonical_json(b"-1.5e-9223372036854775808"), None);
        assert_eq!(canonical_json(b"0e-9223372036854775808"), None);
        assert_eq!(canonical("0e9223372036854775807"), "0");
        assert_eq!(canonical_json(b"1e9223372036854775808"), None);
    }

    #[test]
    fn nesting_is_counted_outside_strings_and_named_by_its_top_level_field() {
        let deep = |n: usize| format!("{}1{}", "[".repeat(n), "]".repeat(n));
        let ok = format!(r#"{{"body": {}}}"#, deep(63));
        assert!(check_nesting(ok.as_bytes(), 64).is_ok());
        let bad = format!(r#"{{"url": "[[[[", "success": {}}}"#, deep(64));
        let e = check_nesting(bad.as_bytes(), 64).unwrap_err();
        assert_eq!(e.field, "success");
        assert!(e.message.contains("64"), "{}", e.message);
        let quoted = format!(r#"{{"body": "{}"}}"#, "[".repeat(200));
        assert!(check_nesting(quoted.as_bytes(), 64).is_ok());
        let escaped = format!(r#"{{"a\"b": 1, "body": {}}}"#, deep(64));
        assert_eq!(
            check_nesting(escaped.as_bytes(), 64).unwrap_err().field,
            "body"
        );
    }
}
