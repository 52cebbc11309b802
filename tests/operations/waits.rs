//! How the suite lets time pass: a test waits for what it waits for (`eventually`,
//! `found`, `Postback::wait_quiet`), and lets time pass otherwise only through
//! `support::pace` (an actor's own pace) or `support::hold` (a state whose length is what
//! is tested), so that each such wait is named for why time is the point. The
//! simulation runs on a paused clock, where a sleep costs no time.

use std::path::{Path, PathBuf};

/// Every `.rs` file below `dir`.
fn sources(dir: &Path) -> Vec<PathBuf> {
    let mut found = Vec::new();
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            found.extend(sources(&path));
        } else if path.extension().is_some_and(|e| e == "rs") {
            found.push(path);
        }
    }
    found
}

#[test]
fn tests_let_time_pass_only_through_pace_and_hold() {
    let tests = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests");
    // The helpers themselves, and this file, which names what it looks for.
    let allowed = [
        tests.join("support/mod.rs"),
        tests.join("operations/waits.rs"),
    ];
    // However it is spelt: `tokio::time::sleep`, `thread::sleep`, an imported `sleep`,
    // `sleep_until`.
    let sleep = regex::Regex::new(r"\b(sleep|sleep_until)\s*\(").unwrap();
    let (mut sleeps, mut scanned) = (Vec::new(), 0);
    for file in sources(&tests) {
        if allowed.contains(&file) || file.starts_with(tests.join("simulation")) {
            continue;
        }
        scanned += 1;
        let text = std::fs::read_to_string(&file).unwrap();
        for (n, line) in text.lines().enumerate() {
            if sleep.is_match(line) {
                sleeps.push(format!("{}:{}: {}", file.display(), n + 1, line.trim()));
            }
        }
    }
    assert!(scanned > 40, "{scanned} files scanned");
    assert!(
        sleeps.is_empty(),
        "sleeps not through support::pace or hold:\n{}",
        sleeps.join("\n")
    );
}
