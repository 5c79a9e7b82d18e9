//! Prometheus metrics of the readmission gate. Labels are bounded: a step name, a wait
//! reason, an error label. No object name is ever a label.

use holdfast_serve::Declared;
use prometheus_client::{
    encoding::EncodeLabelSet,
    metrics::{counter::Counter, family::Family, gauge::Gauge},
    registry::Registry,
};

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct StepLabels {
    step: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ErrorLabels {
    error: &'static str,
}

/// The gate's metrics. Cheap to clone; clones share the series.
#[derive(Clone, Debug, Default)]
pub struct ReadmissionMetrics {
    writes: Family<StepLabels, Counter>,
    errors: Family<ErrorLabels, Counter>,
    ungated: Gauge,
    multikueue: Gauge,
}

impl ReadmissionMetrics {
    /// Registers the metrics (`holdfast_readmission_*`) into `registry`.
    pub fn register(&self, registry: &mut Registry) {
        registry.register(
            "holdfast_readmission_writes",
            "Writes of the readmission gate and the hold transfer, by step (claim, raise_attempt, \
             ready, wait_<reason>, wait_multikueue_copy, transfer_mark, transfer_hold, transfer_release, check_active)",
            Declared(self.writes.clone()),
        );
        registry.register(
            "holdfast_readmission_errors",
            "Failed readmission reconciles, by error",
            Declared(self.errors.clone()),
        );
        registry.register(
            "holdfast_readmission_ungated_trainjobs",
            "TrainJobs under holdfast's control (managed, or held) whose Workload is in a \
             ClusterQueue that does not require the readmission AdmissionCheck: they cannot be \
             held, released or opened until it does",
            self.ungated.clone(),
        );
        registry.register(
            "holdfast_readmission_multikueue_trainjobs",
            "TrainJobs under MultiKueue (spec.managedBy, or a ClusterQueue listing MultiKueue's \
             AdmissionCheck): they can be held, released or opened only where holdfast has a \
             kubeconfig for every worker of their queue, and their runtime snapshot does not \
             reach the worker cluster",
            self.multikueue.clone(),
        );
    }

    pub(crate) fn set_multikueue(&self, n: usize) {
        self.multikueue.set(i64::try_from(n).unwrap_or(i64::MAX));
    }

    /// TrainJobs counted as under MultiKueue (for tests).
    pub fn multikueue(&self) -> i64 {
        self.multikueue.get()
    }

    pub(crate) fn set_ungated(&self, n: usize) {
        self.ungated.set(i64::try_from(n).unwrap_or(i64::MAX));
    }

    /// TrainJobs counted as in a queue without the gate (for tests).
    pub fn ungated(&self) -> i64 {
        self.ungated.get()
    }

    pub(crate) fn wrote(&self, step: &'static str) {
        self.writes.get_or_create(&StepLabels { step }).inc();
    }

    pub(crate) fn failed(&self, error: &'static str) {
        self.errors.get_or_create(&ErrorLabels { error }).inc();
    }

    /// How many writes of `step` were made (for tests).
    pub fn writes(&self, step: &'static str) -> u64 {
        self.writes.get_or_create(&StepLabels { step }).get()
    }
}
