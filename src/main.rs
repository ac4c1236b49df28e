//! The `cgperf` binary.

fn main() -> std::process::ExitCode {
    cgperf::cli::main()
}
