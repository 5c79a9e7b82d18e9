//! holdfast-cluster: what both binaries read from the cluster and keep watched.
//!
//! - [`queues`]: Kueue's LocalQueues, ClusterQueues and AdmissionChecks, so that a hold call
//!   (controller) and the admission of a managed TrainJob (webhook) can tell whether a
//!   Workload goes through holdfast's readmission gate.
#![forbid(unsafe_code)]

pub mod queues;

pub use queues::{Queues, workload_resource};
