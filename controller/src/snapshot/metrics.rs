//! The snapshot reconciler's Prometheus metrics. Labels are bounded: reasons come from
//! `metric_label()`, writers are two, and runtimes are as many as the cluster has runtimes.

use holdfast_serve::Declared;
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;

/// `reason`: a bounded `metric_label()`.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ReasonLabels {
    pub reason: String,
}

/// `writer`: `holdfast` or `trainer`.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct WriterLabels {
    pub writer: String,
}

/// `kind` and `runtime` (`name`, or `namespace/name` for a namespaced kind).
#[derive(Clone, Debug, Hash, PartialEq, Eq, PartialOrd, Ord, EncodeLabelSet)]
pub struct RuntimeLabels {
    pub kind: String,
    pub runtime: String,
}

/// `watch`: `trainjobs`, `configmaps` or `runtimes`.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct WatchLabels {
    pub watch: String,
}

/// The snapshot reconciler's metrics.
#[derive(Clone, Debug)]
pub struct SnapshotMetrics {
    /// Snapshot ConfigMaps this controller created.
    pub created: Counter,
    /// Existing snapshots (not created by this process) checked and accepted, by writer.
    pub accepted: Family<WriterLabels, Counter>,
    /// Reconciliations that ended without a trusted snapshot, by reason.
    pub failures: Family<ReasonLabels, Counter>,
    /// Seconds per reconciliation.
    pub reconcile_duration: Histogram,
    /// Snapshots of another runtime version than the one the TrainJob was admitted against.
    pub admission_races: Counter,
    /// Unfinished TrainJobs whose snapshot differs from the live runtime, by runtime.
    pub drifted: Family<RuntimeLabels, Gauge>,
    /// Errors of the watches the reconciler reads from.
    pub watch_errors: Family<WatchLabels, Counter>,
    /// TrainJobs of the start-up migration still without a snapshot.
    pub migration_pending: Gauge,
}

impl Default for SnapshotMetrics {
    fn default() -> Self {
        SnapshotMetrics {
            created: Counter::default(),
            accepted: Family::default(),
            failures: Family::default(),
            // 1 ms .. ~16 s
            reconcile_duration: Histogram::new(exponential_buckets(0.001, 2.0, 15)),
            admission_races: Counter::default(),
            drifted: Family::default(),
            watch_errors: Family::default(),
            migration_pending: Gauge::default(),
        }
    }
}

impl SnapshotMetrics {
    /// Registers the metrics (`holdfast_snapshot*`) into `registry`.
    pub fn register(&self, registry: &mut Registry) {
        registry.register(
            "holdfast_snapshots_created",
            "Runtime snapshot ConfigMaps created",
            self.created.clone(),
        );
        registry.register(
            "holdfast_snapshots_accepted",
            "Existing runtime snapshots checked and accepted, by writer",
            Declared(self.accepted.clone()),
        );
        registry.register(
            "holdfast_snapshot_failures",
            "Snapshot reconciliations that ended without a trusted snapshot, by reason",
            Declared(self.failures.clone()),
        );
        registry.register(
            "holdfast_snapshot_reconcile_duration_seconds",
            "Time spent per snapshot reconciliation",
            self.reconcile_duration.clone(),
        );
        registry.register(
            "holdfast_snapshot_admission_races",
            "Snapshots of another runtime version than the TrainJob was admitted against",
            self.admission_races.clone(),
        );
        registry.register(
            "holdfast_snapshot_drifted_trainjobs",
            "Unfinished TrainJobs whose runtime snapshot differs from the live runtime",
            Declared(self.drifted.clone()),
        );
        registry.register(
            "holdfast_snapshot_watch_errors",
            "Errors of the watches the snapshot reconciler reads from",
            Declared(self.watch_errors.clone()),
        );
        registry.register(
            "holdfast_snapshot_migration_pending_trainjobs",
            "Unfinished TrainJobs of the start-up migration still without a snapshot",
            self.migration_pending.clone(),
        );
    }

    pub(crate) fn failure(&self, reason: &str) {
        self.failures
            .get_or_create(&ReasonLabels {
                reason: reason.to_owned(),
            })
            .inc();
    }

    pub(crate) fn accepted(&self, writer: &str) {
        self.accepted
            .get_or_create(&WriterLabels {
                writer: writer.to_owned(),
            })
            .inc();
    }

    pub(crate) fn watch_error(&self, watch: &str) {
        self.watch_errors
            .get_or_create(&WatchLabels {
                watch: watch.to_owned(),
            })
            .inc();
    }
}
