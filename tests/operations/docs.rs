//! The lists in the documentation are true: the configuration reference names every key
//! of the shipped file's sections and no other (and the README's table only keys that
//! exist), and the README's command table names every command of the binary, each with
//! options it has; every place that says how to make a portal secret says it one way.

use std::collections::BTreeSet;
use std::process::Command;

const CONFIGURATION: &str = include_str!("../../docs/configuration.md");
const SHIPPED: &str = include_str!("../../config/postback.toml");
const README: &str = include_str!("../../README.md");

/// Sections whose keys are names the operator chooses (`[schedules]`: one per schedule),
/// documented by a pattern (`POSTBACK_SCHEDULES_<NAME>`), and those a variable cannot
/// address.
const NAMED: &[&str] = &["schedules", "quotas", "profiles", "tokens", "tenants"];

/// `POSTBACK_<SECTION>_<KEY>` of every key the shipped file sets or shows commented out.
fn shipped_variables() -> BTreeSet<String> {
    let mut section = String::new();
    let mut out = BTreeSet::new();
    for line in SHIPPED.lines() {
        let line = line.trim();
        if let Some(name) = line.strip_prefix('[').and_then(|l| l.strip_suffix(']')) {
            section = name.split('.').next().unwrap_or(name).to_string();
            continue;
        }
        if NAMED.contains(&section.as_str()) || section.is_empty() {
            continue;
        }
        let setting = line.strip_prefix("# ").unwrap_or(line);
        let Some((key, _)) = setting.split_once(" = ") else {
            continue;
        };
        if key.chars().all(|c| c.is_ascii_lowercase() || c == '_') {
            out.insert(format!("POSTBACK_{section}_{key}").to_ascii_uppercase());
        }
    }
    out
}

/// The variables the configuration table's first column names: `POSTBACK_A_B` and, after
/// a `/`, `_C` for `POSTBACK_A_C`.
fn documented_variables(text: &str) -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    for row in text.lines().filter(|l| l.starts_with("| `POSTBACK_")) {
        let first = row.split(" | ").next().unwrap();
        let mut names = first.split('`').filter(|w| w.contains('_'));
        let full = names.next().unwrap().to_string();
        let section = full.splitn(3, '_').take(2).collect::<Vec<_>>().join("_");
        out.extend(names.map(|short| format!("{section}{short}")));
        out.insert(full);
    }
    out.retain(|v| !v.ends_with('>'));
    out
}

#[test]
fn the_configuration_reference_names_every_key_and_no_other() {
    let shipped = shipped_variables();
    assert!(shipped.len() > 40, "read the shipped file: {shipped:?}");
    let documented = documented_variables(CONFIGURATION);
    let missing: Vec<_> = shipped.difference(&documented).collect();
    let unknown: Vec<_> = documented.difference(&shipped).collect();
    assert!(
        missing.is_empty(),
        "not in docs/configuration.md: {missing:?}"
    );
    assert!(unknown.is_empty(), "no such key: {unknown:?}");
    let in_readme = documented_variables(README);
    assert!(in_readme.len() >= 5, "{in_readme:?}");
    let unknown: Vec<_> = in_readme.difference(&shipped).collect();
    assert!(
        unknown.is_empty(),
        "the README names no such key: {unknown:?}"
    );
}

fn help(path: &[&str]) -> String {
    let out = Command::new(env!("CARGO_BIN_EXE_postback"))
        .args(path)
        .arg("--help")
        .output()
        .unwrap();
    assert!(out.status.success(), "{path:?}");
    String::from_utf8(out.stdout).unwrap()
}

/// The subcommands a `--help` lists, but `help`.
fn subcommands(help: &str) -> Vec<String> {
    help.lines()
        .skip_while(|l| *l != "Commands:")
        .skip(1)
        .take_while(|l| !l.is_empty())
        .filter_map(|l| l.split_whitespace().next())
        .filter(|c| *c != "help")
        .map(str::to_string)
        .collect()
}

/// Every command of the binary, as the words that name it (`dlq replay`).
fn commands(path: Vec<String>) -> Vec<Vec<String>> {
    let args: Vec<&str> = path.iter().map(String::as_str).collect();
    let below = subcommands(&help(&args));
    if below.is_empty() {
        return vec![path];
    }
    below
        .into_iter()
        .flat_map(|c| commands([path.clone(), vec![c]].concat()))
        .collect()
}

#[test]
fn the_readme_lists_every_command_with_options_it_has() {
    let rows: Vec<&str> = README
        .lines()
        .filter_map(|l| l.strip_prefix("| `postback "))
        .map(|l| l.split(" | ").next().unwrap())
        .collect();
    for command in commands(Vec::new()) {
        let named = command.join(" ");
        let mine: Vec<&&str> = rows
            .iter()
            .filter(|r| r.starts_with(&named) && !r[named.len()..].starts_with(char::is_alphabetic))
            .collect();
        assert!(
            !mine.is_empty(),
            "the README's table has no `postback {named}`"
        );
        let args: Vec<&str> = command.iter().map(String::as_str).collect();
        let options = help(&args);
        for row in mine {
            for flag in row.split(|c: char| !(c.is_ascii_alphanumeric() || c == '-')) {
                if flag.starts_with("--") {
                    assert!(
                        options.contains(&format!("{flag} "))
                            || options.contains(&format!("{flag}\n")),
                        "`postback {named}` has no {flag}"
                    );
                }
            }
        }
    }
}

/// How to make a `server.portal_secret`: 32 random bytes as 64 hex digits, text that the
/// setting takes as it is (its bytes are the key) and that needs no quoting anywhere.
const NEW_PORTAL_SECRET: &str = "openssl rand -hex 32";

#[test]
fn every_place_says_one_way_to_make_a_portal_secret() {
    let places = [
        ("README.md", README),
        ("docs/configuration.md", CONFIGURATION),
        ("config/postback.toml", SHIPPED),
        (
            "src/config/checks.rs",
            include_str!("../../src/config/checks.rs"),
        ),
    ];
    for (place, text) in places {
        let said: Vec<&str> = text
            .match_indices("openssl rand")
            .map(|(at, _)| &text[at..at + NEW_PORTAL_SECRET.len()])
            .collect();
        assert!(!said.is_empty(), "{place} says no way");
        for way in said {
            assert_eq!(way, NEW_PORTAL_SECRET, "{place}");
        }
    }
}
