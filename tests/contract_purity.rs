//! **Architecture invariant: `src/contract/` is pure.** No IO, no clock, no randomness, no async,
//! no database or HTTP crate. This test reads the sources and fails on any such import.

use std::path::{Path, PathBuf};

fn rust_files(dir: &Path, found: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            rust_files(&path, found);
        } else if path.extension().is_some_and(|extension| extension == "rs") {
            found.push(path);
        }
    }
}

const FORBIDDEN: &[&str] = &[
    "sqlx",
    "tokio",
    "axum",
    "tower",
    "hyper",
    "reqwest",
    "std::fs",
    "std::net",
    "std::io",
    "std::process",
    "std::env",
    "std::time",
    "std::thread",
    "SystemTime",
    "Instant",
    "rand::",
    "OsRng",
    "getrandom",
    "async fn",
    ".await",
    "uuid::",
];

#[test]
fn the_contract_layer_does_no_io_and_reads_no_clock() {
    let mut files = Vec::new();
    rust_files(&Path::new(env!("CARGO_MANIFEST_DIR")).join("src").join("contract"), &mut files);
    assert!(files.len() >= 5, "contract sources not found");
    let mut offences = Vec::new();
    for file in &files {
        let text = std::fs::read_to_string(file).unwrap();
        for (number, line) in text.lines().enumerate() {
            let code = line.split("//").next().unwrap_or("");
            for word in FORBIDDEN {
                if code.contains(word) {
                    offences.push(format!("{}:{}: {word}", file.display(), number + 1));
                }
            }
        }
    }
    assert!(offences.is_empty(), "src/contract must stay pure:\n{}", offences.join("\n"));
}

#[test]
fn the_purity_check_catches_an_offending_line() {
    // Guards the guard: the scan above would flag these lines.
    let sample = "use tokio::sync::Mutex;\nlet now = std::time::SystemTime::now();";
    let flagged: Vec<_> = FORBIDDEN.iter().filter(|word| sample.contains(*word)).collect();
    assert!(flagged.len() >= 3);
}
