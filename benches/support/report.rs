//! What every report bench shares: telling a bench run from `cargo test`, the machine's load,
//! and rewriting the bench's marked section of `docs/benchmarks.md`. Each bench uses what it
//! needs of it.
#![allow(dead_code)]

use std::path::PathBuf;
use std::process::ExitCode;

/// True under `cargo bench`; `cargo test --all-targets` runs bench targets without `--bench`, and
/// a report is not a test.
pub fn is_bench_run() -> bool {
    std::env::args().any(|argument| argument == "--bench")
}

/// The load averages of the last 1, 5 and 15 minutes (`/proc/loadavg`).
pub fn load_average() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .map(|text| text.split_whitespace().take(3).collect::<Vec<_>>().join(" "))
        .unwrap_or_else(|_| "unknown".to_owned())
}

/// The current UTC time as `YYYY-MM-DD HH:MM UTC`, from `date`.
pub fn now_utc() -> String {
    std::process::Command::new("date")
        .args(["-u", "+%Y-%m-%d %H:%M UTC"])
        .output()
        .ok()
        .and_then(|output| String::from_utf8(output.stdout).ok())
        .map(|text| text.trim().to_owned())
        .unwrap_or_else(|| "unknown time".to_owned())
}

/// Replaces the text between `<!-- {name}:begin -->` and `<!-- {name}:end -->` of
/// `docs/benchmarks.md` with `section`; without the markers, appends `heading` and the marked
/// section. Answers the file's path.
pub fn write_marked_section(name: &str, heading: &str, section: &str) -> Result<PathBuf, String> {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("docs").join("benchmarks.md");
    let document = std::fs::read_to_string(&path).map_err(|error| format!("read {}: {error}", path.display()))?;
    let (begin_marker, end_marker) = (format!("<!-- {name}:begin -->"), format!("<!-- {name}:end -->"));
    let block = format!("{begin_marker}\n{}\n{end_marker}", section.trim_end());
    let updated = match (document.find(&begin_marker), document.find(&end_marker)) {
        (Some(begin), Some(end)) if begin < end => {
            format!("{}{block}{}", &document[..begin], &document[end + end_marker.len()..])
        }
        _ => format!("{}\n{heading}\n\n{block}\n", document.trim_end()),
    };
    std::fs::write(&path, updated).map_err(|error| format!("write {}: {error}", path.display()))?;
    Ok(path)
}

/// The `main` of a report bench named `bench`: under `cargo bench`, runs `measure` (given the
/// load average before it) on a multi-threaded runtime, prints the section it answers and writes
/// it between the `name` markers ([`write_marked_section`]); any error fails the run.
pub fn run_report<F>(bench: &str, name: &str, heading: &str, measure: impl FnOnce(String) -> F) -> ExitCode
where
    F: Future<Output = Result<String, String>>,
{
    if !is_bench_run() {
        println!("{bench}: a report, run it with `cargo bench --bench {bench}`");
        return ExitCode::SUCCESS;
    }
    let load_before = load_average();
    let outcome = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .map_err(|error| format!("cannot start the runtime: {error}"))
        .and_then(|runtime| runtime.block_on(measure(load_before)))
        .and_then(|section| {
            println!("{section}");
            write_marked_section(name, heading, &section)
        });
    match outcome {
        Ok(path) => {
            println!("wrote {}", path.display());
            ExitCode::SUCCESS
        }
        Err(error) => {
            eprintln!("error: {error}");
            ExitCode::FAILURE
        }
    }
}
