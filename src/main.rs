//! The `cloudly` binary: see `cloudly --help`.
#![forbid(unsafe_code)]

/// mimalloc rather than the system allocator: a request allocates and frees many small JSON
/// values, which glibc's allocator serves at a markedly higher CPU cost (docs/benchmarks.md).
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() -> std::process::ExitCode {
    cloudly::cli::run()
}
