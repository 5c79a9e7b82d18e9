//! `holdfast`: the hold API from the command line (see the library, `holdfast_cli`).
#![forbid(unsafe_code)]

fn main() -> std::process::ExitCode {
    holdfast_cli::main()
}
