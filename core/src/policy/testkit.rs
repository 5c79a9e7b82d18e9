//! Fixtures shared by the policy's unit tests.
#![allow(clippy::unwrap_used)]

use super::identities::{GARBAGE_COLLECTOR, NAMESPACE_CONTROLLER};
use super::{AdmissionInput, Identities, Operation, Resource, UserInfo};
use json_patch::PatchOperation;
use serde_json::{Map, Value, json};

pub const CONTROLLER: &str = "system:serviceaccount:holdfast-system:holdfast-controller";
pub const TRAINER: &str =
    "system:serviceaccount:kubeflow-system:kubeflow-trainer-controller-manager";
pub const KUEUE: &str = "system:serviceaccount:kueue-system:kueue-controller-manager";
pub const GC: &str = GARBAGE_COLLECTOR;
pub const NS: &str = NAMESPACE_CONTROLLER;
pub const ALICE: &str = "alice";

/// Every identity the tables run each case as.
pub const EVERYONE: [&str; 6] = [CONTROLLER, TRAINER, KUEUE, GC, NS, ALICE];

/// The chart's defaults.
pub fn who() -> Identities {
    Identities::new([CONTROLLER], [TRAINER], [GC, NS], [KUEUE])
}

pub fn input(
    resource: Resource,
    operation: Operation,
    user: &str,
    old: Option<&Value>,
    new: Option<&Value>,
) -> AdmissionInput {
    let name = new
        .or(old)
        .and_then(|o| o.pointer("/metadata/name"))
        .and_then(Value::as_str)
        .unwrap_or("")
        .to_owned();
    AdmissionInput {
        operation,
        resource,
        subresource: None,
        name,
        namespace: Some("team-a".to_owned()),
        user: UserInfo::new(user),
        object: new.cloned(),
        old_object: old.cloned(),
        dry_run: false,
    }
}

fn map(pairs: &[(&str, &str)]) -> Value {
    Value::Object(
        pairs
            .iter()
            .map(|(k, v)| ((*k).to_owned(), Value::String((*v).to_owned())))
            .collect::<Map<_, _>>(),
    )
}

/// A ConfigMap with labels and one data item.
pub fn cm(name: &str, labels: &[(&str, &str)]) -> Value {
    json!({
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {
            "name": name,
            "namespace": "team-a",
            "labels": map(labels),
            "ownerReferences": [{
                "apiVersion": "trainer.kubeflow.org/v1alpha1", "kind": "TrainJob", "name": "mnist",
                "uid": "u-1", "controller": true, "blockOwnerDeletion": true
            }],
        },
        "data": { "runtime": "apiVersion: trainer.kubeflow.org/v1alpha1\nkind: ClusterTrainingRuntime\n" },
    })
}

/// A TrainJob with annotations, labels and (optionally) `spec.suspend`.
pub fn tj(annotations: &[(&str, &str)], labels: &[(&str, &str)], suspend: Option<bool>) -> Value {
    let mut spec = json!({ "runtimeRef": { "name": "torch-distributed" } });
    if let Some(s) = suspend {
        spec["suspend"] = Value::Bool(s);
    }
    json!({
        "apiVersion": "trainer.kubeflow.org/v1alpha1",
        "kind": "TrainJob",
        "metadata": {
            "name": "mnist",
            "namespace": "team-a",
            "annotations": map(annotations),
            "labels": map(labels),
        },
        "spec": spec,
    })
}

/// A Workload with annotations and (optionally) `spec.active`.
pub fn wl(annotations: &[(&str, &str)], active: Option<bool>) -> Value {
    let mut spec = json!({ "queueName": "q" });
    if let Some(a) = active {
        spec["active"] = Value::Bool(a);
    }
    json!({
        "apiVersion": "kueue.x-k8s.io/v1beta1",
        "kind": "Workload",
        "metadata": {
            "name": "trainjob-mnist-1a2b",
            "namespace": "team-a",
            "annotations": map(annotations),
        },
        "spec": spec,
    })
}

/// `v` with `f` applied to a copy.
pub fn with(v: &Value, f: impl FnOnce(&mut Value)) -> Value {
    let mut v = v.clone();
    f(&mut v);
    v
}

/// Applies a patch as the apiserver would; panics (in tests) if it does not apply.
pub fn apply(v: &Value, patch: &[PatchOperation]) -> Value {
    let mut v = v.clone();
    json_patch::patch(&mut v, patch).unwrap();
    v
}
