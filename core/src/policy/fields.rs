//! Lenient readers of the few fields the policy looks at. Each takes any JSON value and never
//! panics: a field of the wrong type reads as absent, with the defaults SPEC gives
//! (`spec.suspend` absent = false, `spec.active` absent = true).

use crate::names::{
    ANN_HOLD_INSTANCE, ANN_OPENED, HOLD_FINALIZER, LABEL_MANAGED, LABEL_RUNTIME_SNAPSHOT,
    PREBUILT_WORKLOAD_LABEL, QUEUE_NAME_LABEL, SNAPSHOT_SUFFIX, TRAINER_GROUP, TRAINJOB_KIND,
    is_controller_annotation,
};
use serde_json::{Map, Value};
use std::collections::BTreeMap;

/// One side (old or new) of a request, as the policy sees it.
#[derive(Clone, Copy, Debug)]
pub(crate) enum Doc<'a> {
    /// Not sent, or `null`.
    Missing,
    /// Sent, but not a JSON object (the type's name).
    Malformed(&'static str),
    Object(&'a Map<String, Value>),
}

impl<'a> Doc<'a> {
    pub(crate) fn of(v: Option<&'a Value>) -> Self {
        match v {
            None | Some(Value::Null) => Doc::Missing,
            Some(Value::Object(m)) => Doc::Object(m),
            Some(other) => Doc::Malformed(type_name(other)),
        }
    }

    pub(crate) fn object(self) -> Option<&'a Map<String, Value>> {
        match self {
            Doc::Object(m) => Some(m),
            _ => None,
        }
    }

    /// Why this side cannot be read, for a "malformed" message.
    pub(crate) fn problem(self) -> &'static str {
        match self {
            Doc::Missing => "missing",
            Doc::Malformed(t) => t,
            Doc::Object(_) => "an object",
        }
    }
}

pub(crate) fn type_name(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}

fn metadata(obj: &Map<String, Value>) -> Option<&Map<String, Value>> {
    obj.get("metadata").and_then(Value::as_object)
}

fn metadata_map<'a>(obj: &'a Map<String, Value>, key: &str) -> Option<&'a Map<String, Value>> {
    metadata(obj)
        .and_then(|m| m.get(key))
        .and_then(Value::as_object)
}

/// `metadata.name` of any value, if it is an object with a string name.
pub(crate) fn name(v: &Value) -> Option<&str> {
    v.as_object().and_then(object_name)
}

/// `metadata.name` of an object, if it is a string.
pub(crate) fn object_name(obj: &Map<String, Value>) -> Option<&str> {
    metadata(obj)
        .and_then(|m| m.get("name"))
        .and_then(Value::as_str)
}

/// `metadata.annotations` when it is a map.
pub(crate) fn annotations(obj: &Map<String, Value>) -> Option<&Map<String, Value>> {
    metadata_map(obj, "annotations")
}

/// The controller annotations (`hold-*`, `opened`, `attempt`,
/// `admitted-runtime-resource-version`) of an object, with their raw values.
pub(crate) fn controller_annotations(obj: &Map<String, Value>) -> BTreeMap<&str, &Value> {
    annotations(obj)
        .into_iter()
        .flatten()
        .filter(|(k, _)| is_controller_annotation(k))
        .map(|(k, v)| (k.as_str(), v))
        .collect()
}

pub(crate) fn has_annotation(obj: &Map<String, Value>, key: &str) -> bool {
    annotations(obj).is_some_and(|a| a.contains_key(key))
}

/// The hold in force: `holdfast.dev/hold-instance` is present (its presence is the hold).
pub(crate) fn held(obj: &Map<String, Value>) -> bool {
    has_annotation(obj, ANN_HOLD_INSTANCE)
}

/// The hold instance for messages.
pub(crate) fn hold_instance(obj: &Map<String, Value>) -> String {
    match annotations(obj).and_then(|a| a.get(ANN_HOLD_INSTANCE)) {
        Some(Value::String(s)) => s.clone(),
        Some(other) => other.to_string(),
        None => String::new(),
    }
}

pub(crate) fn opened(obj: &Map<String, Value>) -> bool {
    has_annotation(obj, ANN_OPENED)
}

/// A label's value, as any JSON value (absent: `None`).
pub(crate) fn label<'a>(obj: &'a Map<String, Value>, key: &str) -> Option<&'a Value> {
    metadata_map(obj, "labels").and_then(|l| l.get(key))
}

/// A label whose value is exactly the string `"true"`.
pub(crate) fn label_true(obj: &Map<String, Value>, key: &str) -> bool {
    metadata_map(obj, "labels")
        .and_then(|l| l.get(key))
        .is_some_and(|v| v.as_str() == Some("true"))
}

pub(crate) fn managed(obj: &Map<String, Value>) -> bool {
    label_true(obj, LABEL_MANAGED)
}

/// The queue a job is queued in: label `kueue.x-k8s.io/queue-name` with a non-empty string
/// value (Kueue, with its default `manageJobsWithoutQueueName: false`, manages exactly these
/// jobs; an empty queue name counts as none, as in Kueue's own `QueueName`).
pub(crate) fn queue_name(obj: &Map<String, Value>) -> Option<&str> {
    metadata_map(obj, "labels")
        .and_then(|l| l.get(QUEUE_NAME_LABEL))
        .and_then(Value::as_str)
        .filter(|q| !q.is_empty())
}

/// Kueue's prebuilt-Workload name, as label and as annotation (raw JSON values).
pub(crate) fn prebuilt_workload(obj: &Map<String, Value>) -> (Option<&Value>, Option<&Value>) {
    (
        metadata_map(obj, "labels").and_then(|l| l.get(PREBUILT_WORKLOAD_LABEL)),
        annotations(obj).and_then(|a| a.get(PREBUILT_WORKLOAD_LABEL)),
    )
}

pub(crate) fn queued(obj: &Map<String, Value>) -> bool {
    queue_name(obj).is_some()
}

/// A Workload's `spec.queueName` (the LocalQueue it is queued in), as raw JSON.
pub(crate) fn workload_queue(obj: &Map<String, Value>) -> Option<&Value> {
    spec_field(obj, "queueName")
}

/// Whether `metadata.finalizers` holds holdfast's hold finalizer.
pub(crate) fn has_hold_finalizer(obj: &Map<String, Value>) -> bool {
    metadata(obj)
        .and_then(|m| m.get("finalizers"))
        .and_then(Value::as_array)
        .is_some_and(|f| f.iter().any(|v| v.as_str() == Some(HOLD_FINALIZER)))
}

/// Whether any ownerReference of `obj` is a controller (`controller: true`).
pub(crate) fn has_controller(obj: &Map<String, Value>) -> bool {
    metadata(obj)
        .and_then(|m| m.get("ownerReferences"))
        .and_then(Value::as_array)
        .is_some_and(|refs| {
            refs.iter()
                .any(|r| r.get("controller").and_then(Value::as_bool) == Some(true))
        })
}

/// The ownerReferences of `obj` that name a TrainJob (`trainer.kubeflow.org/*`, kind
/// `TrainJob`), as `(uid, controller)`; a malformed entry is skipped.
pub(crate) fn trainjob_owners(obj: &Map<String, Value>) -> Vec<(&str, bool)> {
    metadata(obj)
        .and_then(|m| m.get("ownerReferences"))
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter_map(Value::as_object)
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

pub(crate) fn snapshot_label(obj: &Map<String, Value>) -> bool {
    label_true(obj, LABEL_RUNTIME_SNAPSHOT)
}

pub(crate) fn snapshot_name(name: &str) -> bool {
    name.ends_with(SNAPSHOT_SUFFIX)
}

fn spec_field<'a>(obj: &'a Map<String, Value>, key: &str) -> Option<&'a Value> {
    obj.get("spec")
        .and_then(Value::as_object)
        .and_then(|s| s.get(key))
}

/// `spec.suspend`, absent (or not a boolean) = false.
pub(crate) fn suspended(obj: &Map<String, Value>) -> bool {
    matches!(spec_field(obj, "suspend"), Some(Value::Bool(true)))
}

/// `spec.active`, absent = true; only an explicit `false` is inactive.
pub(crate) fn active(obj: &Map<String, Value>) -> bool {
    !matches!(spec_field(obj, "active"), Some(Value::Bool(false)))
}

/// A top-level or metadata member, with `null` and empty maps/lists read as absent (the
/// apiserver omits empty ones, so `{}` and no field mean the same).
pub(crate) fn normalized(v: Option<&Value>) -> Option<&Value> {
    match v {
        None | Some(Value::Null) => None,
        Some(Value::Object(m)) if m.is_empty() => None,
        Some(Value::Array(a)) if a.is_empty() => None,
        Some(v) => Some(v),
    }
}

pub(crate) fn top<'a>(obj: &'a Map<String, Value>, key: &str) -> Option<&'a Value> {
    normalized(obj.get(key))
}

pub(crate) fn meta<'a>(obj: &'a Map<String, Value>, key: &str) -> Option<&'a Value> {
    normalized(metadata(obj).and_then(|m| m.get(key)))
}
