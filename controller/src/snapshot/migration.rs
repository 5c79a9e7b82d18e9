//! Start-up migration (KEP-2599 "Migrations for existing resources"): every TrainJob that
//! exists when the reconciler starts is reconciled once — the controller's initial list
//! queues all of them — so each unfinished one without a snapshot gets one, from its
//! runtime as it is now; a finished one (`Complete` or `Failed` true) gets none. A TrainJob
//! created before a runtime edit and migrated after it captures the edited runtime: the
//! KEP accepts this (it is the configuration the job's next reconcile would have used).
//!
//! This module takes stock, for the log line that says what the start-up will do, and then
//! follows the migration ([`follow`]) until it is complete:
//!
//! - `holdfast_snapshot_migration_pending_trainjobs`: the TrainJobs of the start-up stock
//!   still without a snapshot (recounted every second from the watches' stores: no request);
//!   one finished or deleted meanwhile no longer counts. A job that cannot be snapshotted (its
//!   runtime is missing, say) keeps it above zero, and its failures count in
//!   `holdfast_snapshot_failures_total`.
//! - When it reaches zero, once per leadership: the log line "start-up migration complete"
//!   with its duration (from the reconciler's start) and how many jobs it migrated, and the
//!   Normal Event `MigrationComplete` on the leader-election Lease
//!   (`kubectl describe lease <fullname>-controller -n <release namespace>`): a
//!   migration is the leader's work, and the Lease is the one object that names the leader.

use super::configmaps::ConfigMapIndex;
use super::metrics::SnapshotMetrics;
use crate::trainjob::{TrainJob, Watched, trainjob_ref};
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::ObjectReference;
use kube::Resource;
use kube::runtime::reflector::Store;
use std::time::Duration;
use tokio::time::Instant;

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

fn has_snapshot(configmaps: &ConfigMapIndex, job: &TrainJob) -> bool {
    match (
        job.metadata.namespace.as_deref(),
        job.metadata.name.as_deref(),
    ) {
        (Some(ns), Some(name)) => configmaps.snapshot_of(ns, name).is_some(),
        _ => false,
    }
}

/// Logs the start-up stock once both watches have listed; the TrainJobs to migrate, as the
/// store holds them (shared with it: 100,000 pending jobs cost 100,000 pointers, not copies
/// of their names).
pub fn log_stock(
    jobs: &[std::sync::Arc<Watched>],
    configmaps: &ConfigMapIndex,
) -> Vec<std::sync::Arc<Watched>> {
    let decoded = || jobs.iter().filter_map(|j| j.0.as_ref().ok());
    let s = stock(decoded(), |job| has_snapshot(configmaps, job));
    tracing::info!(
        to_migrate = s.to_migrate,
        with_snapshot = s.with_snapshot,
        finished_without_snapshot = s.finished_without,
        "start-up: TrainJobs without a snapshot are being migrated; finished ones get none"
    );
    jobs.iter()
        .filter(|j| {
            j.0.as_ref()
                .is_ok_and(|job| !job.finished() && !has_snapshot(configmaps, job))
        })
        .cloned()
        .collect()
}

/// How often the pending TrainJobs are recounted.
const RECOUNT: Duration = Duration::from_secs(1);

/// What [`follow`] reads and where it reports.
pub struct Follow {
    pub trainjobs: Store<Watched>,
    pub configmaps: ConfigMapIndex,
    pub metrics: SnapshotMetrics,
    pub events: crate::events::Publisher,
    pub client: kube::Client,
    /// The Lease (namespace, name) the completion Event is published on; none: log only.
    pub lease: Option<(String, String)>,
    /// When the reconciler started.
    pub started: Instant,
}

/// Follows the start-up migration of `pending` until each has a snapshot, finished or is
/// gone (the caller stops it with the reconciler), then says it is complete.
pub async fn follow(f: Follow, mut pending: Vec<std::sync::Arc<Watched>>) {
    let migrating = pending.len();
    loop {
        pending.retain(|listed| {
            let Ok(listed) = &listed.0 else {
                return false;
            };
            let (Some(ns), Some(name)) = (
                listed.metadata.namespace.as_deref(),
                listed.metadata.name.as_deref(),
            ) else {
                return false;
            };
            let Some(job) = f.trainjobs.get(&trainjob_ref(ns, name)) else {
                return false;
            };
            match &job.0 {
                // Another TrainJob of the same name: the one to migrate is gone.
                Ok(job) if job.metadata.uid != listed.metadata.uid => false,
                Ok(job) => !job.finished() && !has_snapshot(&f.configmaps, job),
                Err(_) => false,
            }
        });
        f.metrics
            .migration_pending
            .set(i64::try_from(pending.len()).unwrap_or(i64::MAX));
        if pending.is_empty() {
            break;
        }
        tokio::time::sleep(RECOUNT).await;
    }
    let took = f.started.elapsed();
    tracing::info!(
        migrated = migrating,
        seconds = took.as_secs_f64(),
        "start-up migration complete: every unfinished TrainJob has a snapshot"
    );
    if let Some((namespace, name)) = &f.lease {
        announce(&f, namespace, name, migrating, took).await;
    }
}

async fn announce(f: &Follow, namespace: &str, name: &str, migrated: usize, took: Duration) {
    // The Lease's uid makes `kubectl describe lease` find the Event.
    let lease = match kube::Api::<Lease>::namespaced(f.client.clone(), namespace)
        .get_opt(name)
        .await
    {
        Ok(Some(lease)) => lease,
        Ok(None) => {
            tracing::warn!(
                namespace,
                name,
                "no Lease to publish the migration Event on"
            );
            return;
        }
        Err(e) => {
            tracing::warn!(error = %e, "reading the Lease for the migration Event failed");
            return;
        }
    };
    let reference: ObjectReference = lease.object_ref(&());
    let notice = crate::events::Notice::normal(
        "MigrationComplete",
        "Migrate",
        format!(
            "Start-up migration complete in {:.1} s: {migrated} unfinished TrainJob(s) without \
             a snapshot at start-up now have one (or finished, or were deleted).",
            took.as_secs_f64()
        ),
    );
    f.events.publish(&reference, notice);
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
