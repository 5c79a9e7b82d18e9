//! Faults: holdfast's real binaries and the control plane under kill -9, stopped apiservers
//! and etcd, compacted watch history, a flood of slow clients, Kueue restarted. Run the group
//! with `cargo test -p holdfast-tests --test it -- faults:: --test-threads 1` (`tests/run.sh`
//! runs it so, after the other topics).

mod admin_flood;
mod compaction;
mod controller;
mod flood;
mod forged_reviews;
mod hold_api_flood;
mod kueue;
mod snapshot_bombs;
mod webhook_server;

/// One fault test at a time, across the group: each owns a control plane (or restarts the
/// Kueue its file shares) and is timed against it, so two never load the machine at once.
static ONE_AT_A_TIME: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());
