//! holdfast-core: the names other programs depend on and every decision holdfast makes,
//! as pure functions of what was read. Nothing here performs I/O.
#![forbid(unsafe_code)]

pub mod arming;
pub mod duration;
pub mod execution;
pub mod hold;
pub mod mode;
pub mod names;
pub mod policy;
pub mod readmission;
pub mod rfc3339;
pub mod snapshot;
pub mod workload_selection;
