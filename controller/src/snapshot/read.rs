//! Reading a snapshot ConfigMap off the async worker threads.
//!
//! Parsing a snapshot's YAML is bounded (`holdfast_core::snapshot::bounds`), but even a
//! bounded parse of a hostile ConfigMap takes milliseconds and megabytes; done on the async
//! worker threads, several at once would starve what shares them, the leader-election Lease's
//! renewal and `/readyz` included. So every read here runs on tokio's blocking pool, at most
//! [`bounds::MAX_CONCURRENT_READS`] at a time.

use holdfast_core::snapshot::{self as core, SnapshotFault, SnapshotRuntime, bounds};
use serde_json::Value;
use tokio::sync::Semaphore;

/// The permits shared by every snapshot read of this process.
static READS: Semaphore = Semaphore::const_new(bounds::MAX_CONCURRENT_READS);

/// [`holdfast_core::snapshot::read_snapshot`], on the blocking pool, bounded in concurrency.
pub async fn read_snapshot(
    configmap: Value,
    trainjob: Value,
) -> Result<SnapshotRuntime, SnapshotFault> {
    let malformed = |reason: &str| SnapshotFault::Malformed {
        reason: reason.to_owned(),
    };
    let _permit = READS
        .acquire()
        .await
        .map_err(|_| malformed("the snapshot reader is shutting down"))?;
    tokio::task::spawn_blocking(move || core::read_snapshot(&configmap, &trainjob))
        .await
        .map_err(|_| malformed("reading the snapshot failed"))?
}
