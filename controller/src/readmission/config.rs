//! How the readmission gate runs: its configuration, built by the wiring from the flags.

use std::time::Duration;

/// How the gate runs.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Config {
    /// TrainJobs, Workloads and pods of this namespace only; all namespaces when `None`.
    /// AdmissionChecks are cluster-scoped and watched cluster-wide.
    pub namespace: Option<String>,
    /// At most this many TrainJobs reconciled at once.
    pub concurrency: u16,
    /// The field manager of every write.
    pub field_manager: String,
    /// First retry delay of a failed TrainJob; doubles per failure up to `retry_max`.
    pub retry_min: Duration,
    pub retry_max: Duration,
    /// Every TrainJob is looked at again this often even without an event.
    pub resync: Duration,
    /// How often held Workloads of TrainJobs that are gone are swept.
    pub sweep_interval: Duration,
}

impl Default for Config {
    fn default() -> Self {
        Config {
            namespace: None,
            concurrency: 8,
            field_manager: "holdfast-readmission".to_owned(),
            retry_min: Duration::from_millis(200),
            retry_max: Duration::from_secs(60),
            resync: Duration::from_secs(300),
            sweep_interval: Duration::from_secs(60),
        }
    }
}
