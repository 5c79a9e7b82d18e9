//! Property tests of the admission policy: arbitrary requests (operations, identities, modes,
//! objects with and without our annotations and labels, garbage where objects belong) never
//! panic, every patch applies, and no forbidden edit is ever allowed.
//!
//! The oracle below is written from SPEC.md's "The webhook" on its own: it does not call the
//! policy's internals or `names::is_controller_annotation`, so a slip in either shows up as a
//! disagreement.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use holdfast_core::mode::Mode;
use holdfast_core::policy::request::{decode_review, prune_object};
use holdfast_core::policy::{
    AdmissionInput, Identities, Operation, QueueProblem, Resource, UserInfo, Verdict, mutate,
    queue_check, queue_verdict, runtime_to_record, unsuspend_check, unsuspend_verdict, validate,
};
use json_patch::PatchOperation;
use proptest::prelude::*;
use proptest::sample::select;
use serde_json::{Map, Value, json};
use std::collections::BTreeMap;

// ---------------------------------------------------------------------------------------------
// Identities

const CONTROLLER: &str = "system:serviceaccount:holdfast-system:holdfast-controller";
const TRAINER: &str = "system:serviceaccount:kubeflow-system:kubeflow-trainer-controller-manager";
const KUEUE: &str = "system:serviceaccount:kueue-system:kueue-controller-manager";
const GC: &str = "system:serviceaccount:kube-system:generic-garbage-collector";
const NS: &str = "system:serviceaccount:kube-system:namespace-controller";
const USERS: [&str; 8] = [
    CONTROLLER,
    TRAINER,
    KUEUE,
    GC,
    NS,
    "alice",
    "",
    "system:admin",
];

fn who() -> Identities {
    Identities::new([CONTROLLER], [TRAINER], [GC, NS], [KUEUE])
}

// ---------------------------------------------------------------------------------------------
// The oracle: SPEC's rules, read directly off the JSON.

const SNAPSHOT_LABEL: &str = "holdfast.dev/runtime-snapshot";
const MANAGED_LABEL: &str = "holdfast.dev/managed";
const HOLD_INSTANCE: &str = "holdfast.dev/hold-instance";
const HOLD_FINALIZER: &str = "holdfast.dev/hold";
const PREBUILT: &str = "kueue.x-k8s.io/prebuilt-workload-name";
const OPENED: &str = "holdfast.dev/opened";
const ADMITTED: &str = "holdfast.dev/admitted-runtime-resource-version";
/// Kueue manages a job with a non-empty queue name (manageJobsWithoutQueueName: false).
const QUEUE_LABEL: &str = "kueue.x-k8s.io/queue-name";

/// SPEC "Names": hold-*, opened, attempt, and the admitted runtime version.
fn is_ours(key: &str) -> bool {
    matches!(
        key,
        "holdfast.dev/opened"
            | "holdfast.dev/attempt"
            | "holdfast.dev/admitted-runtime-resource-version"
    ) || key
        .strip_prefix("holdfast.dev/")
        .is_some_and(|rest| rest.starts_with("hold-"))
}

fn obj(v: Option<&Value>) -> Option<&Map<String, Value>> {
    v.and_then(Value::as_object)
}

fn annotations_of(v: &Map<String, Value>) -> Option<&Map<String, Value>> {
    v.get("metadata")?.get("annotations")?.as_object()
}

fn our_annotations(v: &Map<String, Value>) -> BTreeMap<String, Value> {
    annotations_of(v)
        .map(|a| {
            a.iter()
                .filter(|(k, _)| is_ours(k))
                .map(|(k, v)| (k.clone(), v.clone()))
                .collect()
        })
        .unwrap_or_default()
}

fn annotated(v: &Map<String, Value>, key: &str) -> bool {
    annotations_of(v).is_some_and(|a| a.contains_key(key))
}

fn labelled_true(v: &Map<String, Value>, key: &str) -> bool {
    v.get("metadata")
        .and_then(|m| m.get("labels"))
        .and_then(Value::as_object)
        .and_then(|l| l.get(key))
        == Some(&Value::String("true".into()))
}

fn queue(v: &Map<String, Value>) -> Option<&str> {
    v.get("metadata")
        .and_then(|m| m.get("labels"))
        .and_then(Value::as_object)
        .and_then(|l| l.get(QUEUE_LABEL))
        .and_then(Value::as_str)
        .filter(|q| !q.is_empty())
}

fn queued(v: &Map<String, Value>) -> bool {
    queue(v).is_some()
}

fn meta_get<'a>(v: &'a Map<String, Value>, key: &str) -> Option<&'a Value> {
    v.get("metadata")?.as_object()?.get(key)
}

fn prebuilt(v: &Map<String, Value>) -> (Option<&Value>, Option<&Value>) {
    (
        meta_get(v, "labels").and_then(|l| l.get(PREBUILT)),
        meta_get(v, "annotations").and_then(|a| a.get(PREBUILT)),
    )
}

fn hold_finalizer(v: &Map<String, Value>) -> bool {
    meta_get(v, "finalizers")
        .and_then(Value::as_array)
        .is_some_and(|f| f.contains(&json!(HOLD_FINALIZER)))
}

/// `(uid, controller)` of every ownerReference to a Trainer TrainJob.
fn trainjob_owners(v: &Map<String, Value>) -> Vec<(String, bool)> {
    meta_get(v, "ownerReferences")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter(|r| {
            r.get("kind") == Some(&json!("TrainJob"))
                && r.get("apiVersion")
                    .and_then(Value::as_str)
                    .is_some_and(|a| a.starts_with("trainer.kubeflow.org/"))
        })
        .map(|r| {
            (
                r.get("uid")
                    .and_then(Value::as_str)
                    .unwrap_or("")
                    .to_owned(),
                r.get("controller") == Some(&json!(true)),
            )
        })
        .collect()
}

/// Some ownerReference is a controller: the snapshot still belongs to something.
fn has_controller(v: &Map<String, Value>) -> bool {
    meta_get(v, "ownerReferences")
        .and_then(Value::as_array)
        .is_some_and(|r| r.iter().any(|r| r.get("controller") == Some(&json!(true))))
}

fn queue_of_workload(v: &Map<String, Value>) -> Option<&Value> {
    v.get("spec")?.as_object()?.get("queueName")
}

fn suspended(v: &Map<String, Value>) -> bool {
    v.get("spec")
        .and_then(Value::as_object)
        .and_then(|s| s.get("suspend"))
        == Some(&Value::Bool(true))
}

fn active(v: &Map<String, Value>) -> bool {
    v.get("spec")
        .and_then(Value::as_object)
        .and_then(|s| s.get("active"))
        != Some(&Value::Bool(false))
}

fn name_of(v: Option<&Value>) -> Option<&str> {
    obj(v)?.get("metadata")?.as_object()?.get("name")?.as_str()
}

/// null, {} and [] are "nothing" (the apiserver omits empty members).
fn same(a: Option<&Value>, b: Option<&Value>) -> bool {
    let norm = |v: Option<&Value>| match v {
        None | Some(Value::Null) => None,
        Some(Value::Object(m)) if m.is_empty() => None,
        Some(Value::Array(a)) if a.is_empty() => None,
        Some(v) => Some(v.clone()),
    };
    norm(a) == norm(b)
}

fn is_snapshot(i: &AdmissionInput) -> bool {
    let by_name = |n: &str| n.ends_with("-runtime-snapshot");
    by_name(&i.name)
        || name_of(i.object.as_ref()).is_some_and(by_name)
        || name_of(i.old_object.as_ref()).is_some_and(by_name)
        || obj(i.object.as_ref()).is_some_and(|o| labelled_true(o, SNAPSHOT_LABEL))
        || obj(i.old_object.as_ref()).is_some_and(|o| labelled_true(o, SNAPSHOT_LABEL))
}

/// Why SPEC forbids this request (as the validating webhook sees it, after mutation), if it
/// does.
fn forbidden(i: &AdmissionInput, mode: Mode) -> Option<String> {
    let user = i.user.username.as_str();
    let controller = user == CONTROLLER;
    let old = obj(i.old_object.as_ref());
    let new = obj(i.object.as_ref());
    match i.resource {
        Resource::ConfigMap if is_snapshot(i) => match i.operation {
            Operation::Create if !(controller || user == TRAINER) => Some("snapshot create".into()),
            Operation::Delete
                if !(controller || user == GC || user == NS)
                    && (old.is_none() || old.is_some_and(has_controller)) =>
            {
                Some("snapshot delete".into())
            }
            Operation::Update => {
                if !(controller || user == GC || user == NS) {
                    return Some("snapshot update".into());
                }
                let (Some(o), Some(n)) = (old, new) else {
                    return None;
                };
                for key in ["data", "binaryData"] {
                    if !same(o.get(key), n.get(key)) {
                        return Some(format!("snapshot {key} rewritten"));
                    }
                }
                if !controller {
                    let meta = |v: &Map<String, Value>, k: &str| {
                        v.get("metadata").and_then(|m| m.get(k)).cloned()
                    };
                    for key in ["labels", "annotations"] {
                        if !same(meta(o, key).as_ref(), meta(n, key).as_ref()) {
                            return Some(format!("snapshot metadata.{key} by a deleter"));
                        }
                    }
                }
                None
            }
            _ => None,
        },
        Resource::TrainJob | Resource::Workload if i.subresource.is_none() => {
            let trainjob = i.resource == Resource::TrainJob;
            match i.operation {
                Operation::Create => {
                    let n = new?;
                    if controller {
                        return None;
                    }
                    if let Some(k) = our_annotations(n)
                        .keys()
                        .find(|k| !(trainjob && k.as_str() == ADMITTED))
                    {
                        return Some(format!("create with {k}"));
                    }
                    if hold_finalizer(n) {
                        return Some("hold finalizer added".into());
                    }
                    if mode == Mode::Plain
                        && trainjob
                        && labelled_true(n, MANAGED_LABEL)
                        && !suspended(n)
                    {
                        return Some("managed TrainJob created unsuspended".into());
                    }
                    if mode == Mode::Kueue
                        && trainjob
                        && labelled_true(n, MANAGED_LABEL)
                        && !queued(n)
                    {
                        return Some("managed TrainJob without a queue".into());
                    }
                    if mode == Mode::Kueue
                        && !trainjob
                        && user != KUEUE
                        && !trainjob_owners(n).is_empty()
                    {
                        return Some("Workload made a TrainJob's".into());
                    }
                    None
                }
                Operation::Update => {
                    let (o, n) = (old?, new?);
                    if !controller && our_annotations(o) != our_annotations(n) {
                        return Some("controller annotations changed".into());
                    }
                    if !controller && hold_finalizer(o) != hold_finalizer(n) {
                        return Some("hold finalizer added".into());
                    }
                    if mode == Mode::Kueue
                        && trainjob
                        && user != KUEUE
                        && suspended(o) != suspended(n)
                    {
                        return Some("suspend flipped in kueue mode".into());
                    }
                    if controller {
                        return None;
                    }
                    let gate_closed = !annotated(o, OPENED) && labelled_true(o, MANAGED_LABEL);
                    if trainjob && gate_closed && !labelled_true(n, MANAGED_LABEL) {
                        return Some("managed label dropped at the closed gate".into());
                    }
                    if mode == Mode::Kueue && !trainjob {
                        let before = trainjob_owners(o);
                        if user != KUEUE && trainjob_owners(n).iter().any(|r| !before.contains(r)) {
                            return Some("Workload made a TrainJob's".into());
                        }
                        if annotated(o, HOLD_INSTANCE) && active(o) != active(n) {
                            return Some("held Workload's active flipped".into());
                        }
                        if annotated(o, HOLD_INSTANCE)
                            && queue_of_workload(o) != queue_of_workload(n)
                        {
                            return Some("held Workload moved to another queue".into());
                        }
                    }
                    if mode == Mode::Kueue && trainjob && user != KUEUE {
                        let stopped = suspended(o) || gate_closed;
                        if queue(o).is_some() && queue(o) != queue(n) && stopped {
                            return Some("queue name changed while stopped".into());
                        }
                        if prebuilt(o) != prebuilt(n) && stopped {
                            return Some("prebuilt Workload named while stopped".into());
                        }
                        let unqueued_managed =
                            |v: &Map<String, Value>| labelled_true(v, MANAGED_LABEL) && !queued(v);
                        if unqueued_managed(n) && !unqueued_managed(o) {
                            return Some("managed TrainJob without a queue".into());
                        }
                    }
                    let unsuspends = suspended(o) && !suspended(n);
                    if mode == Mode::Plain && trainjob && unsuspends && annotated(o, HOLD_INSTANCE)
                    {
                        return Some("held TrainJob unsuspended".into());
                    }
                    let gate_closed = !annotated(o, OPENED);
                    let managed =
                        labelled_true(o, MANAGED_LABEL) || labelled_true(n, MANAGED_LABEL);
                    if mode == Mode::Plain && trainjob && unsuspends && gate_closed && managed {
                        return Some("start gate opened by someone else".into());
                    }
                    None
                }
                _ => None,
            }
        }
        _ => None,
    }
}

/// What SPEC says must get through, whoever asks.
fn must_allow(i: &AdmissionInput, mode: Mode) -> Option<&'static str> {
    let objects_present =
        |needed: &[&Option<Value>]| needed.iter().all(|v| obj(v.as_ref()).is_some());
    match (&i.resource, i.operation) {
        (Resource::JobSet | Resource::Other { .. }, _) => Some("not ours"),
        (_, Operation::Connect) => Some("connect"),
        (Resource::TrainJob | Resource::Workload, _) if i.subresource.is_some() => {
            Some("subresource")
        }
        (Resource::TrainJob | Resource::Workload, Operation::Delete) => Some("delete of a job"),
        (Resource::ConfigMap, op) if !is_snapshot(i) => {
            let needed: &[&Option<Value>] = match op {
                Operation::Create => &[&i.object],
                Operation::Update => &[&i.object, &i.old_object],
                _ => &[&i.old_object],
            };
            objects_present(needed).then_some("an ordinary ConfigMap")
        }
        (Resource::TrainJob | Resource::Workload, Operation::Update)
            if i.user.username == CONTROLLER
                && !(mode == Mode::Kueue && i.resource == Resource::TrainJob) =>
        {
            Some("the controller")
        }
        // In kueue mode the controller writes anything of a TrainJob but spec.suspend.
        (Resource::TrainJob, Operation::Update)
            if i.user.username == CONTROLLER
                && mode == Mode::Kueue
                && obj(i.old_object.as_ref())
                    .zip(obj(i.object.as_ref()))
                    .is_some_and(|(o, n)| suspended(o) == suspended(n)) =>
        {
            Some("the controller, leaving spec.suspend to Kueue")
        }
        (Resource::TrainJob | Resource::Workload, Operation::Create)
            if i.user.username == CONTROLLER =>
        {
            Some("the controller")
        }
        _ => None,
    }
}

// ---------------------------------------------------------------------------------------------
// Generators

fn garbage() -> BoxedStrategy<Value> {
    prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::Bool),
        any::<i32>().prop_map(|n| json!(n)),
        "[a-z\\-/]{0,8}".prop_map(Value::String),
        Just(json!([])),
        Just(json!([1, {"a": "b"}])),
    ]
    .boxed()
}

const ANN_KEYS: [&str; 12] = [
    "holdfast.dev/hold-instance",
    "holdfast.dev/hold-found",
    PREBUILT,
    "holdfast.dev/hold-reason",
    "holdfast.dev/hold-placed-at",
    "holdfast.dev/hold-anything",
    "holdfast.dev/opened",
    "holdfast.dev/attempt",
    "holdfast.dev/admitted-runtime-resource-version",
    "holdfast.dev/managed",
    "example.com/hold-instance",
    "team",
];
const LABEL_KEYS: [&str; 6] = [
    SNAPSHOT_LABEL,
    MANAGED_LABEL,
    QUEUE_LABEL,
    PREBUILT,
    "app",
    "holdfast.dev/opened",
];
const NAMES: [&str; 4] = [
    "mnist",
    "mnist-runtime-snapshot",
    "mnist-runtime",
    "-runtime-snapshot",
];

fn string_or_garbage(values: &'static [&'static str]) -> BoxedStrategy<Value> {
    prop_oneof![
        6 => select(values).prop_map(|s| Value::String(s.to_owned())),
        1 => garbage(),
    ]
    .boxed()
}

fn string_map(
    keys: &'static [&'static str],
    values: &'static [&'static str],
) -> BoxedStrategy<Value> {
    prop::collection::btree_map(select(keys), string_or_garbage(values), 0..5)
        .prop_map(|m| Value::Object(m.into_iter().map(|(k, v)| (k.to_owned(), v)).collect()))
        .boxed()
}

/// Absent, a value from `s`, or garbage.
fn member(s: impl Strategy<Value = Value> + 'static) -> BoxedStrategy<Option<Value>> {
    prop_oneof![2 => Just(None), 6 => s.prop_map(Some), 1 => garbage().prop_map(Some)].boxed()
}

fn bool_member() -> BoxedStrategy<Option<Value>> {
    member(any::<bool>().prop_map(Value::Bool)).boxed()
}

fn metadata() -> BoxedStrategy<Value> {
    (
        member(select(&NAMES[..]).prop_map(|s| Value::String(s.to_owned()))),
        member(string_map(&ANN_KEYS, &["1", "2", "true", ""])),
        member(string_map(&LABEL_KEYS, &["true", "false", ""])),
        member(prop_oneof![
            Just(json!([{"kind": "TrainJob", "name": "mnist", "uid": "u", "controller": true}])),
            owners(),
        ]),
        member(finalizers()),
        member(Just(
            json!([{"manager": "kubectl", "fieldsV1": {"f:metadata": {"f:annotations": {}}}}]),
        )),
        member(select(&["u", "v"][..]).prop_map(|u| json!(u))),
    )
        .prop_map(
            |(name, annotations, labels, owners, finalizers, managed_fields, uid)| {
                let mut m = Map::new();
                for (k, v) in [
                    ("name", name),
                    ("uid", uid),
                    ("annotations", annotations),
                    ("labels", labels),
                    ("ownerReferences", owners),
                    ("finalizers", finalizers),
                    ("managedFields", managed_fields),
                ] {
                    if let Some(v) = v {
                        m.insert(k.to_owned(), v);
                    }
                }
                Value::Object(m)
            },
        )
        .boxed()
}

fn owners() -> BoxedStrategy<Value> {
    (select(&["u", "v"][..]), any::<bool>())
        .prop_map(|(uid, controller)| {
            json!([{"apiVersion": "trainer.kubeflow.org/v1alpha1", "kind": "TrainJob",
                "name": "mnist", "uid": uid, "controller": controller}])
        })
        .boxed()
}

const FINALIZER_LISTS: [&[&str]; 3] = [
    &["foregroundDeletion"],
    &[HOLD_FINALIZER],
    &["kueue.x-k8s.io/resource-in-use", HOLD_FINALIZER],
];

fn finalizers() -> BoxedStrategy<Value> {
    select(&FINALIZER_LISTS[..]).prop_map(|f| json!(f)).boxed()
}

fn kube_object() -> BoxedStrategy<Value> {
    (
        member(metadata()),
        member(
            (
                bool_member(),
                bool_member(),
                member(select(&["q", "other"][..]).prop_map(|q| json!(q))),
                member(prop_oneof![
                    Just(json!({"name": "torch"})),
                    Just(json!({"name": "torch", "kind": "TrainingRuntime", "apiGroup": "trainer.kubeflow.org"})),
                    Just(json!({"kind": 7})),
                ]),
            )
                .prop_map(|(suspend, active, queue, runtime)| {
                    let mut spec = Map::new();
                    spec.insert("trainer".into(), json!({"numNodes": 2}));
                    for (k, v) in [
                        ("suspend", suspend),
                        ("active", active),
                        ("queueName", queue),
                        ("runtimeRef", runtime),
                    ] {
                        if let Some(v) = v {
                            spec.insert(k.into(), v);
                        }
                    }
                    Value::Object(spec)
                }),
        ),
        member(string_map(
            &["runtime", "other"],
            &["kind: A\n", "kind: B\n"],
        )),
        member(Just(json!({"bin": "AAE="}))),
        member(Just(
            json!({"conditions": [{"type": "Suspended", "status": "True"}]}),
        )),
    )
        .prop_map(|(metadata, spec, data, binary, status)| {
            let mut m = Map::new();
            for (k, v) in [
                ("metadata", metadata),
                ("spec", spec),
                ("data", data),
                ("binaryData", binary),
                ("status", status),
            ] {
                if let Some(v) = v {
                    m.insert(k.to_owned(), v);
                }
            }
            Value::Object(m)
        })
        .boxed()
}

/// A well-formed object, with each of our annotations and labels present half the time.
fn realistic_object() -> BoxedStrategy<Value> {
    (
        select(&NAMES[..]),
        prop::collection::vec(any::<bool>(), ANN_KEYS.len()),
        prop::collection::vec(any::<bool>(), LABEL_KEYS.len()),
        any::<bool>(),
        any::<bool>(),
    )
        .prop_map(|(name, anns, labels, suspend, active)| {
            let pick = |keys: &[&str], on: &[bool]| -> Map<String, Value> {
                keys.iter()
                    .zip(on)
                    .filter(|(_, on)| **on)
                    .map(|(k, _)| ((*k).to_owned(), json!("1")))
                    .collect()
            };
            let mut labels = pick(&LABEL_KEYS, &labels);
            for v in labels.values_mut() {
                *v = json!("true");
            }
            json!({
                "metadata": {"name": name, "annotations": pick(&ANN_KEYS, &anns), "labels": labels},
                "spec": {"suspend": suspend, "active": active},
                "data": {"runtime": "kind: A\n"},
            })
        })
        .boxed()
}

fn any_object() -> BoxedStrategy<Value> {
    prop_oneof![4 => realistic_object(), 4 => kube_object(), 1 => garbage()].boxed()
}

/// An edit that turns the stored object into the new one (so that most updates change only a
/// little, as real ones do).
#[derive(Clone, Debug)]
enum Edit {
    SetAnnotation(&'static str, Value),
    RemoveAnnotation(&'static str),
    DropAnnotations,
    SetLabel(&'static str, Value),
    RemoveLabel(&'static str),
    SetSpec(&'static str, Option<Value>),
    /// `spec.suspend`/`spec.active` turned from true to false or back.
    Flip(&'static str),
    /// The whole `spec` replaced (by garbage: a spec no patch can go into).
    ReplaceSpec(Value),
    SetData(Option<Value>),
    DropOwners,
    SetOwners(Value),
    SetFinalizers(Option<Value>),
    Replace(Value),
}

fn edit() -> BoxedStrategy<Edit> {
    prop_oneof![
        3 => (select(&ANN_KEYS[..]), string_or_garbage(&["1", "2", "9", "true"])).prop_map(|(k, v)| Edit::SetAnnotation(k, v)),
        3 => select(&ANN_KEYS[..]).prop_map(Edit::RemoveAnnotation),
        2 => Just(Edit::DropAnnotations),
        2 => (select(&LABEL_KEYS[..]), string_or_garbage(&["true", "false"])).prop_map(|(k, v)| Edit::SetLabel(k, v)),
        2 => select(&LABEL_KEYS[..]).prop_map(Edit::RemoveLabel),
        3 => (select(&["suspend", "active"][..]), bool_member()).prop_map(|(k, v)| Edit::SetSpec(k, v)),
        1 => member(select(&["q", "other"][..]).prop_map(|q| json!(q))).prop_map(|v| Edit::SetSpec("queueName", v)),
        1 => owners().prop_map(Edit::SetOwners),
        1 => member(finalizers()).prop_map(Edit::SetFinalizers),
        4 => select(&["suspend", "active"][..]).prop_map(Edit::Flip),
        1 => garbage().prop_map(Edit::ReplaceSpec),
        1 => member(Just(json!({"runtime": "kind: Evil\n"}))).prop_map(Edit::SetData),
        1 => Just(Edit::DropOwners),
        1 => any_object().prop_map(Edit::Replace),
    ]
    .boxed()
}

/// The map at `key` in `parent`, created when absent; `None` when something in the way is
/// not an object.
fn child<'a>(parent: &'a mut Value, key: &str) -> Option<&'a mut Map<String, Value>> {
    let p = parent.as_object_mut()?;
    let c = p.entry(key.to_owned()).or_insert_with(|| json!({}));
    if c.is_null() {
        *c = json!({});
    }
    c.as_object_mut()
}

fn apply_edit(v: &mut Value, e: &Edit) {
    let mut in_meta = |key: &str, f: &mut dyn FnMut(&mut Map<String, Value>)| {
        if let Some(m) = child(v, "metadata") {
            let c = m.entry(key.to_owned()).or_insert_with(|| json!({}));
            if c.is_null() {
                *c = json!({});
            }
            if let Some(c) = c.as_object_mut() {
                f(c);
            }
        }
    };
    match e {
        Edit::SetAnnotation(k, val) => in_meta("annotations", &mut |a| {
            a.insert((*k).to_owned(), val.clone());
        }),
        Edit::RemoveAnnotation(k) => in_meta("annotations", &mut |a| {
            a.remove(*k);
        }),
        Edit::DropAnnotations => {
            if let Some(m) = v.get_mut("metadata").and_then(Value::as_object_mut) {
                m.remove("annotations");
            }
        }
        Edit::SetLabel(k, val) => in_meta("labels", &mut |l| {
            l.insert((*k).to_owned(), val.clone());
        }),
        Edit::RemoveLabel(k) => in_meta("labels", &mut |l| {
            l.remove(*k);
        }),
        Edit::SetSpec(k, val) => {
            if let Some(s) = child(v, "spec") {
                match val {
                    Some(val) => s.insert((*k).to_owned(), val.clone()),
                    None => s.remove(*k),
                };
            }
        }
        Edit::Flip(k) => {
            if let Some(s) = child(v, "spec") {
                let now = s.get(*k) == Some(&Value::Bool(true));
                s.insert((*k).to_owned(), Value::Bool(!now));
            }
        }
        Edit::ReplaceSpec(spec) => {
            if let Some(o) = v.as_object_mut() {
                o.insert("spec".into(), spec.clone());
            }
        }
        Edit::SetData(d) => {
            if let Some(o) = v.as_object_mut() {
                match d {
                    Some(d) => o.insert("data".into(), d.clone()),
                    None => o.remove("data"),
                };
            }
        }
        Edit::DropOwners => {
            if let Some(m) = v.get_mut("metadata").and_then(Value::as_object_mut) {
                m.remove("ownerReferences");
            }
        }
        Edit::SetOwners(o) => {
            if let Some(m) = child(v, "metadata") {
                m.insert("ownerReferences".into(), o.clone());
            }
        }
        Edit::SetFinalizers(f) => {
            if let Some(m) = child(v, "metadata") {
                match f {
                    Some(f) => m.insert("finalizers".into(), f.clone()),
                    None => m.remove("finalizers"),
                };
            }
        }
        Edit::Replace(r) => *v = r.clone(),
    }
}

fn resource() -> BoxedStrategy<Resource> {
    prop_oneof![
        3 => Just(Resource::ConfigMap),
        3 => Just(Resource::TrainJob),
        3 => Just(Resource::Workload),
        1 => Just(Resource::Other { group: "apps".into(), resource: "deployments".into() }),
    ]
    .boxed()
}

fn operation() -> BoxedStrategy<Operation> {
    prop_oneof![
        2 => Just(Operation::Create),
        4 => Just(Operation::Update),
        2 => Just(Operation::Delete),
        1 => Just(Operation::Connect),
    ]
    .boxed()
}

#[derive(Clone, Debug)]
struct Case {
    input: AdmissionInput,
    mode: Mode,
    admitted_rv: Option<String>,
}

fn case() -> BoxedStrategy<Case> {
    (
        (resource(), operation(), select(&USERS[..]), prop_oneof![Just(Mode::Plain), Just(Mode::Kueue)]),
        (any_object(), prop::collection::vec(edit(), 0..4), any::<bool>(), any::<bool>()),
        (
            prop_oneof![8 => Just(None), 1 => Just(Some("status".to_owned())), 1 => Just(Some("scale".to_owned()))],
            prop_oneof![3 => Just(None), 1 => select(&NAMES[..]).prop_map(|s| Some(s.to_owned()))],
            prop_oneof![Just(None), Just(Some("5".to_owned())), Just(Some("77".to_owned()))],
            any::<bool>(),
        ),
    )
        .prop_map(|((resource, operation, user, mode), (old, edits, send_old, send_new), (subresource, name, admitted_rv, dry_run))| {
            let mut new = old.clone();
            for e in &edits {
                apply_edit(&mut new, e);
            }
            // The apiserver's shape, most of the time; anything, sometimes.
            let (old, new) = match operation {
                Operation::Create => (None, Some(new)),
                Operation::Update => (Some(old), Some(new)),
                Operation::Delete => (Some(old), None),
                Operation::Connect => (None, None),
            };
            let old = if send_old || send_new { old } else { None };
            let new = if send_new || send_old { new } else { None };
            let name = name
                .or_else(|| name_of(new.as_ref().or(old.as_ref())).map(str::to_owned))
                .unwrap_or_default();
            Case {
                input: AdmissionInput {
                    operation,
                    resource,
                    subresource,
                    name,
                    namespace: Some("team-a".into()),
                    user: UserInfo::new(user),
                    object: new,
                    old_object: old,
                    dry_run,
                },
                mode,
                admitted_rv,
            }
        })
    .boxed()
}

// ---------------------------------------------------------------------------------------------
// Properties

/// Every value a patch adds is one the request or the stored object already held, `true` for
/// the start gate, or the admitted runtime version.
fn added_values_are_not_invented(case: &Case, patch: &[PatchOperation], patched: &Value) {
    let i = &case.input;
    let original = i.object.as_ref().and_then(Value::as_object);
    let after = patched
        .as_object()
        .expect("a patch applies only to an object");
    let before_anns = original.map(our_annotations).unwrap_or_default();
    for (k, v) in our_annotations(after) {
        if before_anns.get(&k) == Some(&v) {
            continue;
        }
        match i.operation {
            Operation::Update => {
                let old = obj(i.old_object.as_ref())
                    .map(our_annotations)
                    .unwrap_or_default();
                assert_eq!(old.get(&k), Some(&v), "{k} invented by {patch:?}");
            }
            Operation::Create => {
                assert_eq!(k, ADMITTED, "{k} added at create by {patch:?}");
                assert_eq!(
                    Some(&v),
                    case.admitted_rv
                        .as_ref()
                        .map(|s| Value::String(s.clone()))
                        .as_ref()
                );
            }
            _ => panic!("patch {patch:?} on {}", i.operation),
        }
    }
    for op in patch {
        assert!(
            matches!(op, PatchOperation::Add(_) | PatchOperation::Remove(_)),
            "{op:?}"
        );
    }
}

fn check(case: Case) {
    let who = who();
    let Case {
        input,
        mode,
        admitted_rv,
    } = &case;

    let mutation = mutate(input, &who, *mode, admitted_rv.as_deref());
    let patch = &mutation.patch;
    let mut post = input.clone();
    if !patch.is_empty() {
        let mut object = input.object.clone().expect("a patch needs an object");
        json_patch::patch(&mut object, patch)
            .unwrap_or_else(|e| panic!("patch {patch:?} does not apply to {object}: {e}"));
        added_values_are_not_invented(&case, patch, &object);
        post.object = Some(object);
    }

    // The mutating side's own promises.
    if input.user.username != CONTROLLER
        && input.operation == Operation::Update
        && input.subresource.is_none()
        && matches!(input.resource, Resource::TrainJob | Resource::Workload)
    {
        let restorable = obj(input.object.as_ref()).is_some_and(|n| match n.get("metadata") {
            None | Some(Value::Null) => true,
            Some(Value::Object(m)) => matches!(
                m.get("annotations"),
                None | Some(Value::Null | Value::Object(_))
            ),
            Some(_) => false,
        });
        let mut dropped = Vec::new();
        if let (Some(o), Some(n), true) = (
            obj(input.old_object.as_ref()),
            obj(post.object.as_ref()),
            restorable,
        ) {
            let after = our_annotations(n);
            let before: Vec<&String> = obj(input.object.as_ref())
                .and_then(annotations_of)
                .map(|a| a.keys().collect())
                .unwrap_or_default();
            for (k, v) in our_annotations(o) {
                assert!(
                    after.contains_key(&k),
                    "{k}={v} was not restored by {patch:?}"
                );
                if !before.contains(&&k) {
                    dropped.push(k);
                }
            }
        }
        // What mutate says it restored is what the update dropped and the patch put back.
        assert_eq!(mutation.restored, dropped, "{mutation:?}");
        let told = dropped.iter().any(|k| k != ADMITTED);
        assert_eq!(
            mutation
                .warnings
                .iter()
                .any(|w| w.contains("kept annotation")),
            told,
            "{mutation:?}"
        );
        for k in dropped.iter().filter(|k| *k != ADMITTED) {
            assert!(mutation.warnings[0].contains(k.as_str()), "{mutation:?}");
        }
    } else {
        assert!(mutation.restored.is_empty(), "{mutation:?}");
    }
    let mut gate_closed = false;
    if input.operation == Operation::Create
        && input.resource == Resource::TrainJob
        && input.subresource.is_none()
        && let Some(n) = obj(post.object.as_ref())
    {
        let writable = match n.get("metadata") {
            None | Some(Value::Null) => true,
            Some(Value::Object(m)) => matches!(
                m.get("annotations"),
                None | Some(Value::Null | Value::Object(_))
            ),
            Some(_) => false,
        };
        if writable {
            let got = annotations_of(n).and_then(|a| a.get(ADMITTED));
            let want = admitted_rv.as_ref().map(|s| Value::String(s.clone()));
            assert_eq!(got, want.as_ref(), "admitted version after {patch:?}");
        }
        let spec_writable = matches!(n.get("spec"), None | Some(Value::Null | Value::Object(_)));
        if *mode == Mode::Plain && labelled_true(n, MANAGED_LABEL) && spec_writable {
            assert!(
                suspended(n),
                "managed TrainJob left unsuspended by {patch:?}"
            );
            gate_closed = !obj(input.object.as_ref()).is_some_and(suspended);
        }
    }
    // What mutate says about the start gate is what the patch did to it.
    assert_eq!(mutation.gate_closed, gate_closed, "{mutation:?}");
    assert_eq!(
        mutation
            .warnings
            .iter()
            .any(|w| w.contains("spec.suspend: true")),
        gate_closed,
        "{mutation:?}"
    );
    if matches!(input.resource, Resource::ConfigMap | Resource::Other { .. })
        || input.subresource.is_some()
    {
        assert!(patch.is_empty(), "{patch:?}");
    }

    let verdict = validate(&post, &who, *mode);
    if let Some(why) = forbidden(&post, *mode) {
        assert!(
            !verdict.is_allowed(),
            "forbidden ({why}) but allowed: {post:#?}"
        );
    }
    if let Some(why) = must_allow(&post, *mode) {
        assert!(
            verdict.is_allowed(),
            "must allow ({why}) but got {verdict:?}: {post:#?}"
        );
    }
    if let Verdict::Deny { field, message, .. } = &verdict {
        assert!(!field.is_empty() && !message.is_empty());
    }
}

/// The AdmissionReview the apiserver would send for `i`.
fn encode(uid: &str, i: &AdmissionInput) -> Value {
    let (group, resource) = match &i.resource {
        Resource::ConfigMap => ("".to_owned(), "configmaps".to_owned()),
        Resource::TrainJob => ("trainer.kubeflow.org".to_owned(), "trainjobs".to_owned()),
        Resource::Workload => ("kueue.x-k8s.io".to_owned(), "workloads".to_owned()),
        Resource::JobSet => ("jobset.x-k8s.io".to_owned(), "jobsets".to_owned()),
        Resource::Other { group, resource } => (group.clone(), resource.clone()),
    };
    json!({
        "apiVersion": "admission.k8s.io/v1",
        "kind": "AdmissionReview",
        "request": {
            "uid": uid,
            "kind": {"group": group, "version": "v1", "kind": "X"},
            "resource": {"group": group, "version": "v1", "resource": resource},
            "subResource": i.subresource,
            "name": i.name,
            "namespace": i.namespace,
            "operation": i.operation.to_string(),
            "userInfo": {"username": i.user.username, "groups": i.user.groups},
            "object": i.object,
            "oldObject": i.old_object,
            "dryRun": i.dry_run,
        }
    })
}

fn arb_json() -> BoxedStrategy<Value> {
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::Bool),
        any::<i64>().prop_map(|n| json!(n)),
        any::<f64>().prop_map(|f| json!(f)),
        ".{0,12}".prop_map(Value::String),
        select(
            &[
                "admission.k8s.io/v1",
                "AdmissionReview",
                "CREATE",
                "UPDATE",
                "DELETE",
                "uid",
                "configmaps",
                "trainjobs"
            ][..]
        )
        .prop_map(|s| Value::String(s.to_owned())),
    ];
    leaf.prop_recursive(5, 64, 8, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..6).prop_map(Value::Array),
            prop::collection::btree_map(
                select(
                    &[
                        "apiVersion",
                        "kind",
                        "request",
                        "uid",
                        "resource",
                        "group",
                        "operation",
                        "userInfo",
                        "username",
                        "groups",
                        "object",
                        "oldObject",
                        "dryRun",
                        "name",
                        "namespace",
                        "subResource",
                        "x"
                    ][..]
                ),
                inner,
                0..6
            )
            .prop_map(|m| Value::Object(m.into_iter().map(|(k, v)| (k.to_owned(), v)).collect())),
        ]
    })
    .boxed()
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 10_000, failure_persistence: None, ..ProptestConfig::default() })]

    #[test]
    fn no_forbidden_edit_is_ever_allowed(case in case()) {
        check(case);
    }

    #[test]
    fn decode_round_trips_what_the_apiserver_sends(case in case()) {
        let mut sent = case.input.clone();
        // The wire has no difference between absent and null.
        sent.object = sent.object.filter(|v| !v.is_null());
        sent.old_object = sent.old_object.filter(|v| !v.is_null());
        let bytes = serde_json::to_vec(&encode("u-7", &sent)).unwrap();
        let (uid, decoded) = decode_review(&bytes).expect("a well-formed review decodes");
        prop_assert_eq!(uid, "u-7");
        // Of the objects, decode keeps only what the policy reads.
        let mut expected = sent;
        expected.object = expected.object.as_ref().map(prune_object);
        expected.old_object = expected.old_object.as_ref().map(prune_object);
        prop_assert_eq!(decoded, expected);
    }

    /// What `decode_review` drops of the objects never changes a decision: every public
    /// decision of the policy (the mutation, the verdict before and after it, the queue and
    /// unsuspend checks and their verdicts, the runtime to record, the name in messages) is
    /// the same on the pruned objects as on the whole ones.
    #[test]
    fn pruned_objects_get_the_same_decisions(case in case()) {
        let whole = &case.input;
        let mut pruned = whole.clone();
        pruned.object = pruned.object.as_ref().map(prune_object);
        pruned.old_object = pruned.old_object.as_ref().map(prune_object);
        let rv = case.admitted_rv.as_deref();
        let mutation = mutate(whole, &who(), case.mode, rv);
        prop_assert_eq!(&mutate(&pruned, &who(), case.mode, rv), &mutation);
        same_decisions(whole, &pruned, case.mode)?;
        if !mutation.is_empty() {
            let (mut w, mut p) = (whole.clone(), pruned.clone());
            for i in [&mut w, &mut p] {
                let mut o = i.object.clone().expect("a patch needs an object");
                json_patch::patch(&mut o, &mutation.patch).unwrap();
                i.object = Some(o);
            }
            same_decisions(&w, &p, case.mode)?;
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 2000, failure_persistence: None, ..ProptestConfig::default() })]

    #[test]
    fn decode_never_panics_on_bytes(bytes in prop::collection::vec(any::<u8>(), 0..512)) {
        if let Err(e) = decode_review(&bytes) {
            prop_assert!(!e.to_string().is_empty());
        }
    }

    #[test]
    fn decode_never_panics_on_json(v in arb_json()) {
        let bytes = serde_json::to_vec(&v).unwrap();
        run_everything(&bytes);
        // ...nor on that JSON in an otherwise good envelope.
        let mut review = encode("u", &AdmissionInput {
            operation: Operation::Update,
            resource: Resource::TrainJob,
            subresource: None,
            name: "mnist".into(),
            namespace: None,
            user: UserInfo::new("alice"),
            object: None,
            old_object: None,
            dry_run: false,
        });
        for key in ["object", "oldObject", "userInfo", "resource", "operation", "uid", "dryRun"] {
            review["request"][key] = v.clone();
            run_everything(&serde_json::to_vec(&review).unwrap());
        }
    }
}

fn run_everything(bytes: &[u8]) {
    let who = who();
    match decode_review(bytes) {
        Ok((uid, input)) => {
            for mode in [Mode::Plain, Mode::Kueue] {
                let _ = mutate(&input, &who, mode, Some("1"));
                let _ = validate(&input, &who, mode);
                let _ = (
                    queue_check(&input, &who, mode),
                    unsuspend_check(&input, &who, mode),
                );
            }
            let _ = (uid, runtime_to_record(&input));
        }
        Err(e) => {
            assert!(!e.to_string().is_empty());
        }
    }
}

/// The validating side's decisions, and what the webhook reads for them, agree on `whole` and
/// `pruned` (the same request with its objects pruned).
fn same_decisions(
    whole: &AdmissionInput,
    pruned: &AdmissionInput,
    mode: Mode,
) -> Result<(), TestCaseError> {
    let who = who();
    prop_assert_eq!(validate(pruned, &who, mode), validate(whole, &who, mode));
    let check = queue_check(whole, &who, mode);
    prop_assert_eq!(&queue_check(pruned, &who, mode), &check);
    if let Some(check) = &check {
        for problem in [
            None,
            Some(QueueProblem::Ungated("u")),
            Some(QueueProblem::Unresolved("r")),
        ] {
            prop_assert_eq!(
                queue_verdict(pruned, check, problem),
                queue_verdict(whole, check, problem)
            );
        }
    }
    prop_assert_eq!(
        unsuspend_check(pruned, &who, mode),
        unsuspend_check(whole, &who, mode)
    );
    for found in [Ok(None), Ok(Some("h".to_owned())), Err("e".to_owned())] {
        prop_assert_eq!(
            unsuspend_verdict(pruned, found.clone()),
            unsuspend_verdict(whole, found)
        );
    }
    prop_assert_eq!(runtime_to_record(pruned), runtime_to_record(whole));
    prop_assert_eq!(pruned.object_ref(), whole.object_ref());
    Ok(())
}

#[test]
fn deeply_nested_json_is_an_error_not_a_crash() {
    let deep = format!("{}{}", "[".repeat(100_000), "]".repeat(100_000));
    assert!(decode_review(deep.as_bytes()).is_err());
}

/// The oracle is not vacuous: over a fixed sample of generated requests, every one of its
/// rules fires at least once (after mutation, as `check` sees them).
#[test]
fn oracle_covers_every_rule() {
    use proptest::strategy::ValueTree;
    use proptest::test_runner::TestRunner;
    let mut runner = TestRunner::deterministic();
    let strategy = case();
    let who = who();
    let mut seen: BTreeMap<String, usize> = BTreeMap::new();
    let mut allowed = 0;
    let mut kueue_suspend_flips_allowed = 0;
    for _ in 0..40_000 {
        let c = strategy.new_tree(&mut runner).unwrap().current();
        let patch = mutate(&c.input, &who, c.mode, c.admitted_rv.as_deref()).patch;
        let mut post = c.input.clone();
        if let (false, Some(mut o)) = (patch.is_empty(), post.object.clone()) {
            json_patch::patch(&mut o, &patch).unwrap();
            post.object = Some(o);
        }
        if let Some(why) = forbidden(&post, c.mode) {
            let rule = if why.starts_with("create with") {
                "create with ours".into()
            } else {
                why
            };
            *seen.entry(rule).or_default() += 1;
        } else if validate(&post, &who, c.mode).is_allowed() {
            allowed += 1;
            if let (Mode::Kueue, Resource::TrainJob, Operation::Update, None, Some(o), Some(n)) = (
                c.mode,
                &post.resource,
                post.operation,
                &post.subresource,
                obj(post.old_object.as_ref()),
                obj(post.object.as_ref()),
            ) && post.user.username == KUEUE
                && suspended(o) != suspended(n)
            {
                kueue_suspend_flips_allowed += 1;
            }
        }
    }
    for rule in [
        "snapshot create",
        "snapshot delete",
        "snapshot update",
        "snapshot data rewritten",
        "snapshot metadata.labels by a deleter",
        "create with ours",
        "managed TrainJob created unsuspended",
        "controller annotations changed",
        "suspend flipped in kueue mode",
        "held Workload's active flipped",
        "held Workload moved to another queue",
        "Workload made a TrainJob's",
        "hold finalizer added",
        "managed label dropped at the closed gate",
        "managed TrainJob without a queue",
        "queue name changed while stopped",
        "prebuilt Workload named while stopped",
        "held TrainJob unsuspended",
        "start gate opened by someone else",
    ] {
        assert!(
            seen.get(rule).copied().unwrap_or(0) > 0,
            "{rule} never generated: {seen:?}"
        );
    }
    assert!(allowed > 1000, "too few allowed requests: {allowed}");
    assert!(
        kueue_suspend_flips_allowed > 0,
        "no allowed kueue-mode suspend flip by Kueue was generated"
    );
}
