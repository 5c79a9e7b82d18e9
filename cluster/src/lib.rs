//! holdfast-cluster: what both binaries read from the cluster and keep watched.
//!
//! - [`queues`]: Kueue's LocalQueues, ClusterQueues and AdmissionChecks, so that a hold call
//!   (controller) and the admission of a managed TrainJob (webhook) can tell whether a
//!   Workload goes through holdfast's readmission gate.
//! - [`held_workloads`]: which TrainJobs own a Workload carrying a hold's marks, from a
//!   metadata-only watch (controller, plain mode: whether a call must read Workloads;
//!   webhook: a TrainJob's Workloads found by owner when Kueue's label finds none).
//! - [`runtime_kinds`]: the runtime kinds the cluster serves, found by API discovery and
//!   cached (controller: to snapshot and watch a runtime; webhook: to read one at admission).
//! - [`resources`]: the one definition of each API resource (TrainJob, Workload, the queues,
//!   Jobs, JobSets, Pods, Nodes) every crate reads and writes through.
#![forbid(unsafe_code)]

pub mod held_workloads;
pub mod queues;
pub mod resources;
pub mod runtime_kinds;

pub use held_workloads::HeldWorkloads;
pub use queues::Queues;
pub use runtime_kinds::{KindError, RuntimeKind, RuntimeKinds};
