//! The runtime a TrainJob references, and the TrainJob identity a snapshot must match.

use serde::{Deserialize, Serialize};
use serde_json::Value;
use std::fmt;

use super::{RefField, SnapshotError};
use crate::names;

/// The runtime a TrainJob references: `spec.runtimeRef`, with the CRD's defaults applied.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize, utoipa::ToSchema)]
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
