//! Start-up migration (KEP-2599 "Migrations for existing resources"): every TrainJob that
//! exists when the reconciler starts is reconciled once — the controller's initial list
//! queues all of them — so each unfinished one without a snapshot gets one, from its
//! runtime as it is now; a finished one (`Complete` or `Failed` true) gets none. A TrainJob
//! created before a runtime edit and migrated after it captures the edited runtime: the
//! KEP accepts this (it is the configuration the job's next reconcile would have used).
//!
//! This module only takes stock, for the log line that says what the start-up will do.

use super::configmaps::ConfigMapIndex;
use crate::trainjob::{TrainJob, Watched};

/// What the reconciler found at start-up.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Stock {
    /// Unfinished TrainJobs without a snapshot: they will get one now.
    pub to_migrate: usize,
    /// TrainJobs that already have a snapshot (or a ConfigMap at its name).
    pub with_snapshot: usize,
    /// Finished TrainJobs without a snapshot: they get none.
    pub finished_without: usize,
}

/// Takes stock of `jobs` against the snapshot ConfigMaps that exist.
pub fn stock<'a>(
    jobs: impl IntoIterator<Item = &'a TrainJob>,
    has_snapshot: impl Fn(&TrainJob) -> bool,
) -> Stock {
    let mut s = Stock::default();
    for job in jobs {
        if has_snapshot(job) {
            s.with_snapshot += 1;
        } else if job.finished() {
            s.finished_without += 1;
        } else {
            s.to_migrate += 1;
        }
    }
    s
}

/// Logs the start-up stock once both watches have listed.
pub fn log_stock(jobs: &[std::sync::Arc<Watched>], configmaps: &ConfigMapIndex) {
    let decoded = jobs.iter().filter_map(|j| j.0.as_ref().ok());
    let s = stock(decoded, |job| {
        match (
            job.metadata.namespace.as_deref(),
            job.metadata.name.as_deref(),
        ) {
            (Some(ns), Some(name)) => configmaps.snapshot_of(ns, name).is_some(),
            _ => false,
        }
    });
    tracing::info!(
        to_migrate = s.to_migrate,
        with_snapshot = s.with_snapshot,
        finished_without_snapshot = s.finished_without,
        "start-up: TrainJobs without a snapshot are being migrated; finished ones get none"
    );
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn job(name: &str, condition: Option<(&str, &str)>) -> TrainJob {
        let mut v = json!({
            "metadata": {"name": name, "namespace": "ns"},
            "spec": {"runtimeRef": {"name": "torch"}}
        });
        if let Some((t, s)) = condition {
            v["status"] = json!({"conditions": [{"type": t, "status": s}]});
        }
        serde_json::from_value(v).expect("object")
    }

    #[test]
    fn unfinished_without_snapshot_are_migrated_finished_are_not() {
        let jobs = [
            job("running", None),
            job("suspended", Some(("Suspended", "True"))),
            job("complete", Some(("Complete", "True"))),
            job("failed", Some(("Failed", "True"))),
            job("not-complete", Some(("Complete", "False"))),
            job("has", None),
        ];
        let s = stock(jobs.iter(), |j| j.metadata.name.as_deref() == Some("has"));
        assert_eq!(
            s,
            Stock {
                to_migrate: 3,
                with_snapshot: 1,
                finished_without: 2
            }
        );
    }
}
