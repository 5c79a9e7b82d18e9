//! `kubectl-holdfast`: the same program under kubectl's plugin name, so `kubectl holdfast
//! ...` runs it (kubectl finds `kubectl-*` executables on the PATH).
#![forbid(unsafe_code)]

fn main() -> std::process::ExitCode {
    holdfast_cli::main()
}
