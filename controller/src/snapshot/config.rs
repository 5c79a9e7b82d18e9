//! How the snapshot reconciler runs: its configuration, built by the wiring from the flags.

use std::time::Duration;

/// How the reconciler runs.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Config {
    /// Only TrainJobs, snapshot ConfigMaps and namespaced runtimes of this namespace; all
    /// namespaces when `None`. Cluster-scoped runtimes are watched cluster-wide either way.
    pub namespace: Option<String>,
    /// At most this many TrainJobs reconciled at once.
    pub concurrency: u16,
    /// The field manager of the ConfigMaps created.
    pub field_manager: String,
    /// Events' reporting controller.
    pub reporter: String,
    /// Events' reporting instance (the pod name).
    pub instance: Option<String>,
    /// First retry delay of a failed TrainJob; doubles per failure up to `retry_max`.
    pub retry_min: Duration,
    pub retry_max: Duration,
    /// How often the drift gauge is recomputed (also shortly after any runtime changes).
    pub drift_interval: Duration,
    /// The kinds that are runtimes: only these are read, watched and snapshotted.
    pub runtime_resources: holdfast_core::snapshot::RuntimeResources,
    /// The leader-election Lease (namespace, name): the start-up migration's completion
    /// Event is published on it. None: the completion is only logged.
    pub migration_event_lease: Option<(String, String)>,
}

impl Default for Config {
    fn default() -> Self {
        Config {
            namespace: None,
            concurrency: 8,
            field_manager: "holdfast".to_owned(),
            reporter: "holdfast-controller".to_owned(),
            instance: None,
            retry_min: Duration::from_millis(500),
            retry_max: Duration::from_secs(300),
            drift_interval: Duration::from_secs(10),
            runtime_resources: holdfast_core::snapshot::RuntimeResources::default(),
            migration_event_lease: None,
        }
    }
}
