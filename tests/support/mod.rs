//! Shared helpers of the integration tests.
#![allow(dead_code)]

use serde_json::Value;
use std::path::PathBuf;

/// The project's copy of the golden vectors.
pub fn vectors_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests").join("vectors")
}

/// Reads one vector file as JSON.
pub fn load_vector(file: &str) -> Value {
    let path = vectors_dir().join(file);
    let text = std::fs::read_to_string(&path).unwrap_or_else(|error| panic!("read {}: {error}", path.display()));
    serde_json::from_str(&text).unwrap_or_else(|error| panic!("parse {}: {error}", path.display()))
}

/// The entries of `file`'s list member `key`, as (name, entry) pairs.
pub fn cases<'a>(vector: &'a Value, key: &str) -> Vec<(String, &'a Value)> {
    vector[key]
        .as_array()
        .unwrap_or_else(|| panic!("vector list {key} missing"))
        .iter()
        .enumerate()
        .map(|(index, case)| (case["name"].as_str().map_or_else(|| format!("{key}[{index}]"), str::to_owned), case))
        .collect()
}
/// Runs one async test body on both backends: `mod $name { fn postgres, fn sqlite }`, each a
/// multi-threaded tokio test calling `$body(Backend::…)` (`Backend` must be in scope). Every test
/// that runs on both stores is written with it. `on_both_stores!(run => story_a, story_b)` is the
/// same for each story, with the body `|backend| run(backend, story)`.
#[allow(unused_macros)]
macro_rules! on_both_stores {
    ($runner:path => $($story:ident),+ $(,)?) => {
        $( on_both_stores!($story, |backend| $runner(backend, $story)); )+
    };
    ($name:ident, $body:expr) => {
        mod $name {
            use super::*;

            #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
            async fn postgres() {
                ($body)(Backend::Postgres).await;
            }

            #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
            async fn sqlite() {
                ($body)(Backend::Sqlite).await;
            }
        }
    };
}

pub mod bench;
pub mod database;
pub mod ingress;
pub mod node_agent;
pub mod private_postgres;
pub mod process;
pub mod service;
