#![forbid(unsafe_code)]
use clap::Parser;

fn main() -> anyhow::Result<()> {
    let args = holdfast_webhook::Args::parse();
    holdfast_webhook::run(args)
}
