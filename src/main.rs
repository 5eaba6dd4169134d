//! The `cloudly` binary: see `cloudly --help`.
#![forbid(unsafe_code)]

fn main() -> std::process::ExitCode {
    cloudly::cli::run()
}
