//! Lenient readers of the few fields the policy looks at, each through the field list of
//! [`object`](super::object). None panics: a field of the wrong type reads as absent, with the
//! defaults SPEC gives (`spec.suspend` absent = false, `spec.active` absent = true).

use super::object::{
    ACTIVE, ANNOTATIONS, FINALIZERS, Field, LABELS, NAME, OWNER_REFERENCES, Object, QUEUE_NAME,
    SUSPEND,
};
use crate::names::{
    ANN_HOLD_INSTANCE, ANN_OPENED, HOLD_FINALIZER, LABEL_MANAGED, LABEL_RUNTIME_SNAPSHOT,
    PREBUILT_WORKLOAD_LABEL, QUEUE_NAME_LABEL, SNAPSHOT_SUFFIX, TRAINER_GROUP, TRAINJOB_KIND,
    is_controller_annotation,
};
use serde_json::{Map, Value};
use std::collections::BTreeMap;

/// `metadata.name` of an object, if it is a string.
pub(crate) fn object_name(obj: Object<'_>) -> Option<&str> {
    obj.get(NAME).and_then(Value::as_str)
}

/// `metadata.labels` when it is a map.
fn labels(obj: Object<'_>) -> Option<&Map<String, Value>> {
    obj.get(LABELS).and_then(Value::as_object)
}

/// `metadata.annotations` when it is a map.
pub(crate) fn annotations(obj: Object<'_>) -> Option<&Map<String, Value>> {
    obj.get(ANNOTATIONS).and_then(Value::as_object)
}

/// The controller annotations (`hold-*`, `opened`, `attempt`,
/// `admitted-runtime-resource-version`) of an object, with their raw values.
pub(crate) fn controller_annotations(obj: Object<'_>) -> BTreeMap<&str, &Value> {
    annotations(obj)
        .into_iter()
        .flatten()
        .filter(|(k, _)| is_controller_annotation(k))
        .map(|(k, v)| (k.as_str(), v))
        .collect()
}

pub(crate) fn has_annotation(obj: Object<'_>, key: &str) -> bool {
    annotations(obj).is_some_and(|a| a.contains_key(key))
}

/// The hold in force: `holdfast.dev/hold-instance` is present (its presence is the hold).
pub(crate) fn held(obj: Object<'_>) -> bool {
    has_annotation(obj, ANN_HOLD_INSTANCE)
}

/// The hold instance for messages.
pub(crate) fn hold_instance(obj: Object<'_>) -> String {
    match annotations(obj).and_then(|a| a.get(ANN_HOLD_INSTANCE)) {
        Some(Value::String(s)) => s.clone(),
        Some(other) => other.to_string(),
        None => String::new(),
    }
}

pub(crate) fn opened(obj: Object<'_>) -> bool {
    has_annotation(obj, ANN_OPENED)
}

/// A label's value, as any JSON value (absent: `None`).
pub(crate) fn label<'a>(obj: Object<'a>, key: &str) -> Option<&'a Value> {
    labels(obj).and_then(|l| l.get(key))
}

/// A label whose value is exactly the string `"true"`.
pub(crate) fn label_true(obj: Object<'_>, key: &str) -> bool {
    label(obj, key).is_some_and(|v| v.as_str() == Some("true"))
}

pub(crate) fn managed(obj: Object<'_>) -> bool {
    label_true(obj, LABEL_MANAGED)
}

/// The queue a job is queued in: label `kueue.x-k8s.io/queue-name` with a non-empty string
/// value (Kueue, with its default `manageJobsWithoutQueueName: false`, manages exactly these
/// jobs; an empty queue name counts as none, as in Kueue's own `QueueName`).
pub(crate) fn queue_name(obj: Object<'_>) -> Option<&str> {
    label(obj, QUEUE_NAME_LABEL)
        .and_then(Value::as_str)
        .filter(|q| !q.is_empty())
}

/// Kueue's prebuilt-Workload name, as label and as annotation (raw JSON values).
pub(crate) fn prebuilt_workload(obj: Object<'_>) -> (Option<&Value>, Option<&Value>) {
    (
        label(obj, PREBUILT_WORKLOAD_LABEL),
        annotations(obj).and_then(|a| a.get(PREBUILT_WORKLOAD_LABEL)),
    )
}

pub(crate) fn queued(obj: Object<'_>) -> bool {
    queue_name(obj).is_some()
}

/// A Workload's `spec.queueName` (the LocalQueue it is queued in), as raw JSON.
pub(crate) fn workload_queue(obj: Object<'_>) -> Option<&Value> {
    obj.get(QUEUE_NAME)
}

/// Whether `obj` carries holdfast state: a `holdfast.dev/` annotation, label or finalizer
/// (the chart's `holdfast.cel.carries`, which decides what the protected entries are sent).
pub(crate) fn carries_holdfast_state(obj: Object<'_>) -> bool {
    let ours = |k: &str| k.starts_with("holdfast.dev/");
    annotations(obj).is_some_and(|a| a.keys().any(|k| ours(k)))
        || labels(obj).is_some_and(|l| l.keys().any(|k| ours(k)))
        || obj
            .get(FINALIZERS)
            .and_then(Value::as_array)
            .is_some_and(|f| f.iter().filter_map(Value::as_str).any(ours))
}

/// Whether `metadata.finalizers` holds holdfast's hold finalizer.
pub(crate) fn has_hold_finalizer(obj: Object<'_>) -> bool {
    obj.get(FINALIZERS)
        .and_then(Value::as_array)
        .is_some_and(|f| f.iter().any(|v| v.as_str() == Some(HOLD_FINALIZER)))
}

fn owner_references(obj: Object<'_>) -> impl Iterator<Item = &Map<String, Value>> {
    obj.get(OWNER_REFERENCES)
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter_map(Value::as_object)
}

/// Whether any ownerReference of `obj` is a controller (`controller: true`).
pub(crate) fn has_controller(obj: Object<'_>) -> bool {
    owner_references(obj).any(|r| r.get("controller").and_then(Value::as_bool) == Some(true))
}

/// The ownerReferences of `obj` that name a TrainJob (`trainer.kubeflow.org/*`, kind
/// `TrainJob`), as `(uid, controller)`; a malformed entry is skipped.
pub(crate) fn trainjob_owners(obj: Object<'_>) -> Vec<(&str, bool)> {
    owner_references(obj)
        .filter(|r| {
            r.get("kind").and_then(Value::as_str) == Some(TRAINJOB_KIND)
                && r.get("apiVersion")
                    .and_then(Value::as_str)
                    .is_some_and(|v| v.split('/').next() == Some(TRAINER_GROUP))
        })
        .map(|r| {
            (
                r.get("uid").and_then(Value::as_str).unwrap_or_default(),
                r.get("controller").and_then(Value::as_bool) == Some(true),
            )
        })
        .collect()
}

pub(crate) fn snapshot_label(obj: Object<'_>) -> bool {
    label_true(obj, LABEL_RUNTIME_SNAPSHOT)
}

pub(crate) fn snapshot_name(name: &str) -> bool {
    name.ends_with(SNAPSHOT_SUFFIX)
}

/// `spec.suspend`, absent (or not a boolean) = false.
pub(crate) fn suspended(obj: Object<'_>) -> bool {
    matches!(obj.get(SUSPEND), Some(Value::Bool(true)))
}

/// `spec.active`, absent = true; only an explicit `false` is inactive.
pub(crate) fn active(obj: Object<'_>) -> bool {
    !matches!(obj.get(ACTIVE), Some(Value::Bool(false)))
}

/// A field with `null` and empty maps/lists read as absent (the apiserver omits empty ones,
/// so `{}` and no field mean the same).
pub(crate) fn present(obj: Object<'_>, field: Field) -> Option<&Value> {
    match obj.get(field) {
        None | Some(Value::Null) => None,
        Some(Value::Object(m)) if m.is_empty() => None,
        Some(Value::Array(a)) if a.is_empty() => None,
        Some(v) => Some(v),
    }
}
