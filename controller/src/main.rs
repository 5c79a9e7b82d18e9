#![forbid(unsafe_code)]
use clap::Parser;

fn main() -> anyhow::Result<()> {
    holdfast_serve::retired::refuse(holdfast_controller::args::RETIRED_ENV)?;
    let args = holdfast_controller::Args::parse();
    holdfast_controller::run(args)
}
