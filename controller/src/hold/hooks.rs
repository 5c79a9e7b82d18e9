//! A seam for tests: code that runs between a call's read and its write.
//!
//! The race a resourceVersion precondition defends against is another writer landing between
//! a call's read and its write. Tests make that happen for real (a status update as Trainer
//! makes it, or a newer hold) by installing a [`BetweenReadAndWrite`] hook. Production leaves
//! [`Hooks`] empty.

use std::{fmt, sync::Arc};

use futures::future::BoxFuture;
use holdfast_core::hold::CallKind;

/// Where a call is when the hook runs: it has read, decided to write, and not yet sent the
/// write.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct WritePoint {
    pub kind: CallKind,
    pub namespace: String,
    pub name: String,
    /// How many of this call's writes have already lost to a conflict (0 on the first).
    pub conflicts: u32,
}

/// Runs between a call's read and its write; the call waits for it.
pub type BetweenReadAndWrite = Arc<dyn Fn(WritePoint) -> BoxFuture<'static, ()> + Send + Sync>;

/// The executor's test seams. Empty by default.
#[derive(Clone, Default)]
pub struct Hooks {
    pub between_read_and_write: Option<BetweenReadAndWrite>,
}

impl fmt::Debug for Hooks {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Hooks")
            .field(
                "between_read_and_write",
                &self.between_read_and_write.is_some(),
            )
            .finish()
    }
}
