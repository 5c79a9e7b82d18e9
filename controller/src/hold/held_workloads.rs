//! The watch of the Workloads carrying a hold's marks, shared with the webhook: it lives in
//! `holdfast_cluster::held_workloads`. Plain mode's calls ask it whether a job's Workloads must
//! be read at all.

pub(crate) use holdfast_cluster::held_workloads::{HeldWorkloads, Lookup};
