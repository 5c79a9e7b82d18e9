#![forbid(unsafe_code)]
//! `holdfast-webhook`: wires the flags to the server; everything else lives in the library.

use clap::Parser;

/// mimalloc: admissions allocate many small JSON nodes on every worker thread at once, where
/// glibc's arenas contend (see the README's webhook benchmark).
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() -> anyhow::Result<()> {
    let args = holdfast_webhook::Args::parse();
    holdfast_webhook::run(args)
}
