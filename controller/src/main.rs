#![forbid(unsafe_code)]
use clap::Parser;

fn main() -> anyhow::Result<()> {
    // `check-install`: the chart's `helm test` hook, in the same image (install_check.rs).
    if std::env::args_os()
        .nth(1)
        .is_some_and(|a| a == "check-install")
    {
        return holdfast_controller::install_check::main(std::env::args_os().skip(1));
    }
    let args = holdfast_controller::Args::parse();
    holdfast_controller::run(args)
}
