//! Runtime snapshots (KEP-2599), as pure functions.
//!
//! A TrainJob's first reconciliation copies the runtime its `spec.runtimeRef` names into a
//! ConfigMap `{trainjob}-runtime-snapshot` (data key `runtime`), owned by the TrainJob as
//! controller. Every later use reads the runtime back from there, never from the live object.
//!
//! Upstream Kubeflow Trainer v2.3 writes and reads the same ConfigMap
//! (`pkg/runtime/core/snapshot.go`, kubeflow/trainer#3580). Its reader trusts a snapshot only
//! if the ConfigMap's controller ownerReference has the TrainJob's UID, the `runtime` key is
//! present, the YAML decodes, and the decoded object's apiVersion group, kind and
//! `metadata.name` equal `spec.runtimeRef`'s. Its writer copies the whole typed object
//! (`sigs.k8s.io/yaml`, so managedFields, uid and resourceVersion included) with no labels or
//! annotations. This module writes snapshots that reader accepts, and accepts the ones it
//! writes:
//!
//! - [`render`] turns the runtime as the apiserver returned it into the snapshot YAML plus its
//!   [`Provenance`]; [`snapshot_configmap`] wraps that in the ConfigMap to create.
//! - [`read_snapshot`] is the reader: the same checks as Trainer's, and one more (namespace).
//! - [`drift`] / [`drifted`] compare a snapshot with the live runtime;
//!   [`admission_race`] compares the version admitted with the version snapshotted.
//! - [`step`] decides a TrainJob's reconciliation, one request at a time, for the
//!   controller's reconciler to drive.
//!
//! Nothing here knows a runtime kind: a `ClusterTrainingRuntime`, a namespaced
//! `TrainingRuntime` and a kind nobody has heard of yet are treated the same.

pub mod bounds;
mod configmap;
mod drift;
mod error;
mod kinds;
mod open;
mod read;
mod reference;
mod render;
pub mod step;

#[cfg(test)]
mod step_table;
#[cfg(test)]
mod tests;

pub use bounds::MAX_CONFIGMAP_DATA_BYTES;
pub use configmap::snapshot_configmap;
pub use drift::{Drift, MAX_DRIFT_PATHS, admission_race, drift, drifted};
pub use error::{RefField, SnapshotError, SnapshotFault};
pub use kinds::RuntimeResources;
pub use open::{OpenGate, SnapshotPresence, Snapshottable, open_gate, unsnapshottable_reason};
pub use read::{Integrity, SnapshotRuntime, Source, Writer, read_snapshot};
pub use reference::{RuntimeRef, api_group_of, runtime_ref};
pub(crate) use reference::{TrainJobIdentity, check_identity, required_str};
pub use render::{
    LAST_APPLIED_ANNOTATION, Provenance, Rendered, provenance_annotations, render, snapshot_form,
};
