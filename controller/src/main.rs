#![forbid(unsafe_code)]
use clap::Parser;

fn main() -> anyhow::Result<()> {
    let args = holdfast_controller::Args::parse();
    holdfast_controller::run(args)
}
