//! A write staged between the webhook's read of a TrainJob's Workload holds and the
//! apiserver storing the write that read was for.
//!
//! The webhook's unsuspend rule reads the Workloads of a TrainJob Kueue unsuspends, while
//! the apiserver waits for its answer. [`StagedHolds`] wraps that lookup: once armed for a
//! TrainJob, the next lookup for it reads as usual, then runs the staged future (a Hold, say)
//! to its end, and only then answers the webhook, which answers the apiserver. What the
//! future writes therefore lands after the webhook's read and before the apiserver stores
//! the unsuspend: the window of the stale-unsuspend race, opened on demand.

use std::sync::{Arc, Mutex, PoisonError};

use futures::future::BoxFuture;
use holdfast_webhook::workload_holds::WorkloadHolds;
use jiff::Timestamp;
use tokio::sync::oneshot;

type Stage = Box<dyn FnOnce(Lookup) -> BoxFuture<'static, ()> + Send>;

/// What the staged lookup read, and when the staged future began.
#[derive(Clone, Debug)]
struct Lookup {
    found: Result<Option<String>, String>,
    started: Timestamp,
}

/// What one staged run saw and did.
#[derive(Debug)]
pub struct StagedRun<T> {
    /// What the webhook's lookup read, before the staged future ran.
    pub found: Result<Option<String>, String>,
    /// When the staged future began (after the read, before the webhook answered).
    pub started: Timestamp,
    /// What the staged future returned.
    pub output: T,
}

/// The webhook's Workload-hold lookup with a stage that can be armed per TrainJob uid.
/// Cheap to clone; clones share their stages.
#[derive(Clone, Default)]
pub struct StagedHolds {
    stages: Arc<Mutex<Vec<(String, Stage)>>>,
}

impl StagedHolds {
    /// Runs `stage` inside the next lookup for TrainJob `uid`, after its read and before its
    /// answer; what it returns, with what the lookup read, arrives on the receiver.
    pub fn arm<T, F>(&self, uid: &str, stage: F) -> oneshot::Receiver<StagedRun<T>>
    where
        T: Send + 'static,
        F: FnOnce() -> BoxFuture<'static, T> + Send + 'static,
    {
        let (tx, rx) = oneshot::channel();
        let run: Stage = Box::new(move |lookup: Lookup| {
            Box::pin(async move {
                let output = stage().await;
                let _ = tx.send(StagedRun {
                    found: lookup.found,
                    started: lookup.started,
                    output,
                });
            })
        });
        self.stages
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .push((uid.to_owned(), run));
        rx
    }

    /// `inner`, with this stage around it.
    pub fn wrapping(&self, inner: Arc<dyn WorkloadHolds>) -> Arc<dyn WorkloadHolds> {
        Arc::new(Staged {
            inner,
            stages: self.clone(),
        })
    }

    fn take(&self, uid: &str) -> Option<Stage> {
        let mut stages = self.stages.lock().unwrap_or_else(PoisonError::into_inner);
        let at = stages.iter().position(|(u, _)| u == uid)?;
        Some(stages.remove(at).1)
    }
}

struct Staged {
    inner: Arc<dyn WorkloadHolds>,
    stages: StagedHolds,
}

impl WorkloadHolds for Staged {
    fn hold_of<'a>(
        &'a self,
        namespace: &'a str,
        uid: &'a str,
    ) -> BoxFuture<'a, Result<Option<String>, String>> {
        Box::pin(async move {
            let found = self.inner.hold_of(namespace, uid).await;
            if let Some(stage) = self.stages.take(uid) {
                stage(Lookup {
                    found: found.clone(),
                    started: Timestamp::now(),
                })
                .await;
            }
            found
        })
    }
}
