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
//!
//! Nothing here knows a runtime kind: a `ClusterTrainingRuntime`, a namespaced
//! `TrainingRuntime` and a kind nobody has heard of yet are treated the same.

mod configmap;
mod drift;
mod kinds;
mod read;
mod render;

#[cfg(test)]
mod tests;

use serde::{Deserialize, Serialize};
use serde_json::Value;
use std::fmt;

use crate::names;

pub use configmap::{MAX_CONFIGMAP_DATA_BYTES, snapshot_configmap};
pub use drift::{Drift, MAX_DRIFT_PATHS, admission_race, drift, drifted};
pub use kinds::RuntimeResources;
pub use read::{Integrity, SnapshotRuntime, Source, Writer, read_snapshot};
pub use render::{
    LAST_APPLIED_ANNOTATION, Provenance, Rendered, provenance_annotations, render, snapshot_form,
};

/// The runtime a TrainJob references: `spec.runtimeRef`, with the CRD's defaults applied.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct RuntimeRef {
    /// `spec.runtimeRef.apiGroup`; the CRD defaults it to `trainer.kubeflow.org`.
    pub api_group: String,
    /// `spec.runtimeRef.kind`; the CRD defaults it to `ClusterTrainingRuntime`.
    pub kind: String,
    /// `spec.runtimeRef.name` (required).
    pub name: String,
}

impl RuntimeRef {
    /// Whether an object's `apiVersion` is in this reference's group (any version).
    pub fn matches_api_version(&self, api_version: &str) -> bool {
        api_group_of(api_version) == self.api_group
    }
}

impl fmt::Display for RuntimeRef {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.api_group.is_empty() {
            write!(f, "{}/{}", self.kind, self.name)
        } else {
            write!(f, "{}.{}/{}", self.kind, self.api_group, self.name)
        }
    }
}

/// The group of an `apiVersion`: `trainer.kubeflow.org/v1alpha1` → `trainer.kubeflow.org`,
/// `v1` → `""` (the core group), as Kubernetes parses a GroupVersion.
pub fn api_group_of(api_version: &str) -> &str {
    match api_version.split_once('/') {
        Some((group, _version)) => group,
        None => "",
    }
}

/// Reads `spec.runtimeRef` of a TrainJob, applying the defaults the TrainJob CRD declares
/// (an absent `apiGroup` is `trainer.kubeflow.org`, an absent `kind` is
/// `ClusterTrainingRuntime`). An explicit empty string is kept: the apiserver keeps it too.
pub fn runtime_ref(trainjob: &Value) -> Result<RuntimeRef, SnapshotError> {
    const OBJ: &str = "TrainJob";
    let spec_ref = trainjob
        .pointer("/spec/runtimeRef")
        .ok_or(SnapshotError::MissingField {
            object: OBJ,
            field: "spec.runtimeRef",
        })?;
    if !spec_ref.is_object() {
        return Err(SnapshotError::InvalidField {
            object: OBJ,
            field: "spec.runtimeRef",
            expected: "an object",
        });
    }
    let optional = |key: &str, field: &'static str, default: &str| match spec_ref.get(key) {
        None | Some(Value::Null) => Ok(default.to_owned()),
        Some(Value::String(s)) => Ok(s.clone()),
        Some(_) => Err(SnapshotError::InvalidField {
            object: OBJ,
            field,
            expected: "a string",
        }),
    };
    let api_group = optional("apiGroup", "spec.runtimeRef.apiGroup", names::TRAINER_GROUP)?;
    let kind = optional(
        "kind",
        "spec.runtimeRef.kind",
        names::CLUSTER_TRAINING_RUNTIME_KIND,
    )?;
    let name = required_str(spec_ref, "name", OBJ, "spec.runtimeRef.name")?.to_owned();
    Ok(RuntimeRef {
        api_group,
        kind,
        name,
    })
}

/// Which part of a snapshot's runtime identity disagrees with the TrainJob.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum RefField {
    /// The group of the YAML's `apiVersion` against `spec.runtimeRef.apiGroup`.
    ApiGroup,
    /// The YAML's `kind` against `spec.runtimeRef.kind`.
    Kind,
    /// The YAML's `metadata.name` against `spec.runtimeRef.name`.
    Name,
    /// The YAML's `metadata.namespace` against the TrainJob's namespace (holdfast's check:
    /// a runtime reference carries no namespace, so a namespaced runtime is the TrainJob's).
    Namespace,
}

impl fmt::Display for RefField {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            RefField::ApiGroup => "apiVersion group",
            RefField::Kind => "kind",
            RefField::Name => "metadata.name",
            RefField::Namespace => "metadata.namespace",
        })
    }
}

/// Why a snapshot could not be rendered or its ConfigMap built. Nothing has been written.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum SnapshotError {
    /// A field the snapshot needs is absent.
    #[error("the {object} has no {field}")]
    MissingField {
        object: &'static str,
        field: &'static str,
    },
    /// A field has the wrong JSON type.
    #[error("the {object}'s {field} is not {expected}")]
    InvalidField {
        object: &'static str,
        field: &'static str,
        expected: &'static str,
    },
    /// The rendered runtime is not the one the TrainJob references: a snapshot of it would be
    /// refused by every reader, so it is never written.
    #[error(
        "the runtime is not the one spec.runtimeRef names: its {field} is {found:?}, expected {expected:?}"
    )]
    WrongRuntime {
        field: RefField,
        expected: String,
        found: String,
    },
    /// The YAML serializer failed.
    #[error("rendering the runtime as YAML failed: {0}")]
    Yaml(String),
    /// The apiserver would refuse the ConfigMap: its data may hold at most `limit` bytes.
    #[error("the runtime snapshot is {bytes} bytes; a ConfigMap's data holds at most {limit}")]
    TooLarge { bytes: usize, limit: usize },
}

impl SnapshotError {
    /// A bounded label for metrics.
    pub fn metric_label(&self) -> &'static str {
        match self {
            SnapshotError::MissingField { .. } => "missing_field",
            SnapshotError::InvalidField { .. } => "invalid_field",
            SnapshotError::WrongRuntime { .. } => "wrong_runtime",
            SnapshotError::Yaml(_) => "yaml",
            SnapshotError::TooLarge { .. } => "too_large",
        }
    }
}

/// Why an existing snapshot ConfigMap is not trusted as the TrainJob's runtime. It is never
/// overwritten either: the caller reports it (Warning event, metric) and leaves it be.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum SnapshotFault {
    /// The ConfigMap's controller ownerReference is not this TrainJob (or there is none).
    #[error(
        "the ConfigMap is not controlled by this TrainJob (controller uid: {}); it is not trusted",
        owner.as_deref().unwrap_or("none")
    )]
    Squatted { owner: Option<String> },
    /// No `runtime` data key, or YAML that does not decode to an object.
    #[error("the snapshot is malformed: {reason}")]
    Malformed { reason: String },
    /// The YAML holds another runtime than `spec.runtimeRef` names.
    #[error("the snapshot holds another runtime: its {field} is {found:?}, expected {expected:?}")]
    Mismatch {
        field: RefField,
        expected: String,
        found: String,
    },
    /// The TrainJob itself lacks what the check needs (uid, runtimeRef).
    #[error("the TrainJob cannot be checked against: {0}")]
    TrainJob(#[source] SnapshotError),
}

impl SnapshotFault {
    /// A bounded label for metrics.
    pub fn metric_label(&self) -> &'static str {
        match self {
            SnapshotFault::Squatted { .. } => "squatted",
            SnapshotFault::Malformed { .. } => "malformed",
            SnapshotFault::Mismatch { .. } => "mismatch",
            SnapshotFault::TrainJob(_) => "trainjob_invalid",
        }
    }
}

/// A TrainJob's name, namespace and uid.
pub(crate) struct TrainJobIdentity<'a> {
    pub name: &'a str,
    pub namespace: &'a str,
    pub uid: &'a str,
}

impl<'a> TrainJobIdentity<'a> {
    pub(crate) fn of(trainjob: &'a Value) -> Result<Self, SnapshotError> {
        const OBJ: &str = "TrainJob";
        let meta = trainjob
            .get("metadata")
            .ok_or(SnapshotError::MissingField {
                object: OBJ,
                field: "metadata",
            })?;
        Ok(TrainJobIdentity {
            name: required_str(meta, "name", OBJ, "metadata.name")?,
            namespace: required_str(meta, "namespace", OBJ, "metadata.namespace")?,
            uid: required_str(meta, "uid", OBJ, "metadata.uid")?,
        })
    }
}

/// A non-empty string field of `obj`.
pub(crate) fn required_str<'a>(
    obj: &'a Value,
    key: &str,
    object: &'static str,
    field: &'static str,
) -> Result<&'a str, SnapshotError> {
    match obj.get(key) {
        None | Some(Value::Null) => Err(SnapshotError::MissingField { object, field }),
        Some(Value::String(s)) if s.is_empty() => {
            Err(SnapshotError::MissingField { object, field })
        }
        Some(Value::String(s)) => Ok(s),
        Some(_) => Err(SnapshotError::InvalidField {
            object,
            field,
            expected: "a string",
        }),
    }
}

/// Checks a runtime object's identity against the reference (and, when the object is
/// namespaced, against the TrainJob's namespace). The first disagreement is returned as
/// `(field, expected, found)`. A missing field is found as `""`, as Trainer's reader sees it.
pub(crate) fn check_identity(
    runtime: &Value,
    reference: &RuntimeRef,
    trainjob_namespace: &str,
) -> Result<(), (RefField, String, String)> {
    let text = |v: Option<&Value>| v.and_then(Value::as_str).unwrap_or("").to_owned();
    let api_version = text(runtime.get("apiVersion"));
    let group = api_group_of(&api_version);
    if group != reference.api_group {
        return Err((
            RefField::ApiGroup,
            reference.api_group.clone(),
            group.to_owned(),
        ));
    }
    let kind = text(runtime.get("kind"));
    if kind != reference.kind {
        return Err((RefField::Kind, reference.kind.clone(), kind));
    }
    let name = text(runtime.pointer("/metadata/name"));
    if name != reference.name {
        return Err((RefField::Name, reference.name.clone(), name));
    }
    let namespace = text(runtime.pointer("/metadata/namespace"));
    if !namespace.is_empty() && namespace != trainjob_namespace {
        return Err((
            RefField::Namespace,
            trainjob_namespace.to_owned(),
            namespace,
        ));
    }
    Ok(())
}
