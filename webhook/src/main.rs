#![forbid(unsafe_code)]
//! `holdfast-webhook`: wires the flags to the server; everything else lives in the library.

use clap::Parser;

fn main() -> anyhow::Result<()> {
    holdfast_serve::install_crypto_provider();
    holdfast_webhook::init_tracing();
    let args = holdfast_webhook::Args::parse();
    holdfast_webhook::run(args)
}
