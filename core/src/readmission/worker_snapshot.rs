//! The runtime snapshot goes with a job MultiKueue dispatches: holdfast in the manager writes
//! the manager's snapshot into every worker before the job may be dispatched, and hands it to
//! the worker's copy of the TrainJob once MultiKueue has created that copy.
//!
//! The manager's Trainer leaves a TrainJob under MultiKueue alone, so holdfast's snapshot in
//! the manager is the job's only one. In a worker, Trainer reads `{trainjob}-runtime-snapshot`
//! as the copy's runtime if a controller ownerReference names the copy's uid; if the
//! ConfigMap is there but not the copy's, Trainer refuses the copy and builds nothing; if it
//! is missing, Trainer snapshots the worker's runtime. MultiKueue creates the copy (with a new
//! uid every time) only after the manager's checks, holdfast's among them, are `Ready`. So:
//!
//! 1. before holdfast's check turns `Ready`, every worker of the Workload's MultiKueueConfig
//!    holds an **unowned** copy of the manager's snapshot, marked with the manager
//!    TrainJob's uid ([`ANN_ORIGIN_TRAINJOB_UID`]), and no TrainJob of the job's name that
//!    is not being deleted ([`decide_worker`]): a copy dispatched there finds a snapshot
//!    Trainer refuses until it is the copy's, so nothing runs from the worker's own runtime,
//!    and a TrainJob someone created there beforehand (which MultiKueue would take for its
//!    copy) is never handed the manager's snapshot;
//! 2. once the copy exists, holdfast makes the copy its controller owner ([`decide_adoption`])
//!    and deletes the unowned ones in the other workers ([`leftover`]).

use serde_json::{Map, Value, json};

use crate::names::{
    ANN_ORIGIN_TRAINJOB_UID, ANN_RUNTIME_GENERATION, ANN_RUNTIME_RESOURCE_VERSION,
    ANN_RUNTIME_SHA256, ANN_RUNTIME_UID, LABEL_RUNTIME_SNAPSHOT, MULTIKUEUE_ORIGIN_LABEL,
    TRAINER_GROUP, TRAINER_VERSION, TRAINJOB_KIND, snapshot_name,
};

/// What to do about the snapshot in one worker before the job may be dispatched.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum WorkerStep {
    /// Create this ConfigMap in the worker.
    Write(Value),
    /// The worker holds the manager's snapshot, unowned: nothing to do.
    Carried,
    /// A snapshot holdfast wrote for an earlier copy that no longer exists: delete it
    /// (preconditioned on `uid`), then decide again. The check stays `Pending` meanwhile.
    Replace { uid: String },
    /// The check stays `Pending`: why, naming the worker and the ConfigMap, and what to do.
    Wait(String),
}

/// What to do about the snapshot in the worker MultiKueue dispatched the copy to.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Adoption {
    /// The copy of the TrainJob is not in the worker yet: look again shortly.
    NoCopyYet,
    /// Merge-patch the worker's ConfigMap with this (its resourceVersion is the precondition):
    /// the copy becomes its controller owner.
    Patch(Value),
    /// The copy owns the manager's snapshot: done.
    Adopted,
    /// Nothing holdfast may do: why (the copy may run something else than the manager's
    /// snapshot, or nothing at all).
    Refuse(String),
}

/// The ConfigMap holdfast writes into a worker for TrainJob `trainjob` (uid `origin_uid`) of
/// the manager, from its snapshot `snapshot` in the manager (as read): the same data, label
/// and provenance, `immutable`, the origin uid, and no owner. `Err`: why there is none to
/// write (no snapshot of this TrainJob in the manager yet).
pub fn worker_copy(
    trainjob: &str,
    origin_uid: &str,
    snapshot: Option<&Value>,
) -> Result<Value, String> {
    let name = snapshot_name(trainjob);
    let not_yet = |why: &str| {
        format!(
            "the manager has no runtime snapshot of TrainJob {trainjob} to carry to the workers yet ({why}); it is written at the job's first reconcile"
        )
    };
    let Some(snapshot) = snapshot else {
        return Err(not_yet(&format!("ConfigMap {name} does not exist")));
    };
    if controller_uid(snapshot) != Some(origin_uid) {
        return Err(not_yet(&format!(
            "ConfigMap {name} is not controlled by the TrainJob"
        )));
    }
    let Some(data) = snapshot.get("data").and_then(Value::as_object) else {
        return Err(not_yet(&format!("ConfigMap {name} has no data")));
    };
    let mut annotations = Map::new();
    for key in [
        ANN_RUNTIME_UID,
        ANN_RUNTIME_RESOURCE_VERSION,
        ANN_RUNTIME_GENERATION,
        ANN_RUNTIME_SHA256,
    ] {
        if let Some(v) = snapshot
            .pointer("/metadata/annotations")
            .and_then(|a| a.get(key))
        {
            annotations.insert(key.to_owned(), v.clone());
        }
    }
    annotations.insert(ANN_ORIGIN_TRAINJOB_UID.to_owned(), origin_uid.into());
    Ok(json!({
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {
            "name": name,
            "labels": { LABEL_RUNTIME_SNAPSHOT: "true" },
            "annotations": annotations,
        },
        "immutable": true,
        "data": data,
    }))
}

/// What to do in worker `worker` before the job may be dispatched: `wanted` is the
/// [`worker_copy`] (or why there is none), `found` the worker's ConfigMap of that name (as
/// read), `trainjob` the worker's TrainJob of the job's name (as read), if there is one.
///
/// A TrainJob of the job's name keeps the check `Pending`: MultiKueue would take it for its
/// copy (it creates none where one exists, and copies its status to the manager's, even one
/// being deleted), and holdfast would hand it the manager's snapshot. Anyone who may create
/// TrainJobs in the worker's namespace could plant one so; one kept from going by a finalizer
/// would otherwise pass as "being deleted".
pub fn decide_worker(
    worker: &str,
    wanted: &Result<Value, String>,
    found: Option<&Value>,
    trainjob: Option<&Value>,
) -> WorkerStep {
    let wanted = match wanted {
        Ok(w) => w,
        Err(why) => return WorkerStep::Wait(why.clone()),
    };
    if let Some(t) = trainjob {
        let s = |p: &str| t.pointer(p).and_then(Value::as_str).unwrap_or_default();
        let what = if terminating(t) {
            "is being deleted; waiting for it to go (MultiKueue would take it for its copy while it is there): if it stays, remove its finalizers there"
        } else {
            "exists before the job is dispatched: delete it there. MultiKueue would take it for its copy and holdfast would hand it the manager's snapshot (a copy of an earlier dispatch, MultiKueue deletes itself)"
        };
        return WorkerStep::Wait(format!(
            "in MultiKueue worker {worker}, TrainJob {}/{} (uid {}) {what}",
            s("/metadata/namespace"),
            s("/metadata/name"),
            s("/metadata/uid"),
        ));
    }
    let Some(found) = found else {
        return WorkerStep::Write(wanted.clone());
    };
    let what = describe(worker, wanted);
    match (owner_of(found), carries(found, wanted)) {
        (None, true) => WorkerStep::Carried,
        (Some(owner), _) if owner.trainjob && ours(found) => WorkerStep::Replace {
            uid: uid(found).to_owned(),
        },
        (Some(owner), _) => WorkerStep::Wait(format!(
            "{what} is controlled by {} {} (uid {}), which does not exist there, and was not written by holdfast; the worker's garbage collector deletes it with its owner gone: if it stays, delete it in the worker",
            owner.kind, owner.name, owner.uid
        )),
        (None, false) => WorkerStep::Wait(format!(
            "{what} exists, unowned, and is not holdfast's copy of this TrainJob's snapshot ({}); holdfast never deletes it. If it is left over from an earlier TrainJob of this name, delete it in the worker; if another manager's job of the same name runs there, use another name or namespace",
            differs(found, wanted)
        )),
    }
}

/// What to do in the worker MultiKueue dispatched the copy to: `wanted` is the
/// [`worker_copy`], `found` the worker's ConfigMap (as read), `copy` the worker's TrainJob of
/// the job's name (its uid), if it exists.
pub fn decide_adoption(
    worker: &str,
    trainjob: &str,
    wanted: &Value,
    found: Option<&Value>,
    copy: Option<&str>,
) -> Adoption {
    let Some(copy_uid) = copy else {
        return Adoption::NoCopyYet;
    };
    let what = describe(worker, wanted);
    let Some(found) = found else {
        return Adoption::Refuse(format!(
            "{what} is missing while the worker's copy of TrainJob {trainjob} (uid {copy_uid}) exists: someone deleted it after holdfast wrote it, and Trainer there snapshots the worker's runtime instead of the manager's"
        ));
    };
    let carries = carries(found, wanted);
    match owner_of(found) {
        Some(owner) if owner.uid == copy_uid && carries => Adoption::Adopted,
        Some(owner) if owner.uid == copy_uid => Adoption::Refuse(format!(
            "{what} belongs to the worker's copy of TrainJob {trainjob} (uid {copy_uid}) but is not the manager's snapshot ({}): the copy runs it",
            differs(found, wanted)
        )),
        None if carries => {
            let rv = found
                .pointer("/metadata/resourceVersion")
                .and_then(Value::as_str)
                .unwrap_or_default();
            Adoption::Patch(json!({"metadata": {
                "resourceVersion": rv,
                "ownerReferences": [{
                    "apiVersion": format!("{TRAINER_GROUP}/{TRAINER_VERSION}"),
                    "kind": TRAINJOB_KIND,
                    "name": trainjob,
                    "uid": copy_uid,
                    "controller": true,
                }],
            }}))
        }
        None => Adoption::Refuse(format!(
            "{what} is not holdfast's copy of this TrainJob's snapshot ({}): Trainer there refuses the worker's copy of TrainJob {trainjob} and runs nothing",
            differs(found, wanted)
        )),
        Some(owner) => Adoption::Refuse(format!(
            "{what} is controlled by {} {} (uid {}), not by the worker's copy of TrainJob {trainjob} (uid {copy_uid}): Trainer there refuses the copy and runs nothing",
            owner.kind, owner.name, owner.uid
        )),
    }
}

/// The uid of MultiKueue's copy of the job in a worker, from the worker's TrainJob of the
/// job's name (as read): one with MultiKueue's origin label that is not being deleted (an
/// earlier copy on its way out is never handed the snapshot).
pub fn copy_uid(trainjob: &Value) -> Option<&str> {
    let labelled = trainjob
        .pointer("/metadata/labels")
        .and_then(|l| l.get(MULTIKUEUE_ORIGIN_LABEL))
        .is_some();
    (labelled && !terminating(trainjob))
        .then(|| uid(trainjob))
        .filter(|u| !u.is_empty())
}

fn terminating(object: &Value) -> bool {
    object
        .pointer("/metadata/deletionTimestamp")
        .is_some_and(|t| !t.is_null())
}

/// The uid of `found`, a ConfigMap in a worker the job was not dispatched to, if it is an
/// unowned snapshot holdfast wrote there for the manager's TrainJob `origin_uid`: it is
/// deleted (preconditioned on that uid) once the copy runs elsewhere.
pub fn leftover<'a>(found: &'a Value, origin_uid: &str) -> Option<&'a str> {
    (owner_of(found).is_none() && ours(found) && origin(found) == Some(origin_uid))
        .then(|| uid(found))
        .filter(|u| !u.is_empty())
}

struct Owner<'a> {
    kind: &'a str,
    name: &'a str,
    uid: &'a str,
    trainjob: bool,
}

/// The controller owner of `object`, or its first owner if none is the controller.
fn owner_of(object: &Value) -> Option<Owner<'_>> {
    let refs = object
        .pointer("/metadata/ownerReferences")
        .and_then(Value::as_array)?;
    let r = refs
        .iter()
        .find(|r| r.get("controller") == Some(&Value::Bool(true)))
        .or_else(|| refs.first())?;
    let s = |k: &str| r.get(k).and_then(Value::as_str).unwrap_or_default();
    Some(Owner {
        kind: s("kind"),
        name: s("name"),
        uid: s("uid"),
        trainjob: s("kind") == TRAINJOB_KIND
            && s("apiVersion").split('/').next() == Some(TRAINER_GROUP),
    })
}

fn controller_uid(object: &Value) -> Option<&str> {
    object
        .pointer("/metadata/ownerReferences")
        .and_then(Value::as_array)?
        .iter()
        .find(|r| r.get("controller") == Some(&Value::Bool(true)))
        .and_then(|r| r.get("uid"))
        .and_then(Value::as_str)
}

fn uid(object: &Value) -> &str {
    object
        .pointer("/metadata/uid")
        .and_then(Value::as_str)
        .unwrap_or_default()
}

fn origin(object: &Value) -> Option<&str> {
    object
        .pointer("/metadata/annotations")
        .and_then(|a| a.get(ANN_ORIGIN_TRAINJOB_UID))
        .and_then(Value::as_str)
}

/// Whether holdfast wrote `object` into a worker: the snapshot label and an origin uid.
fn ours(object: &Value) -> bool {
    let labelled = object
        .pointer("/metadata/labels")
        .and_then(|l| l.get(LABEL_RUNTIME_SNAPSHOT))
        .and_then(Value::as_str)
        == Some("true");
    labelled && origin(object).is_some()
}

/// Whether `found` is `wanted`: holdfast's, of the same origin, the same data, immutable.
fn carries(found: &Value, wanted: &Value) -> bool {
    ours(found)
        && origin(found) == origin(wanted)
        && found.get("data") == wanted.get("data")
        && found.get("binaryData").is_none()
        && found.get("immutable") == Some(&Value::Bool(true))
}

/// How `found` differs from `wanted`, in words.
fn differs(found: &Value, wanted: &Value) -> String {
    if !ours(found) {
        format!(
            "it lacks the label {LABEL_RUNTIME_SNAPSHOT}=true or the annotation {ANN_ORIGIN_TRAINJOB_UID}"
        )
    } else if origin(found) != origin(wanted) {
        format!(
            "its {ANN_ORIGIN_TRAINJOB_UID} is {}, not {}",
            origin(found).unwrap_or_default(),
            origin(wanted).unwrap_or_default()
        )
    } else if found.get("data") != wanted.get("data") || found.get("binaryData").is_some() {
        "its data differ from the manager's snapshot".to_owned()
    } else {
        "it is not immutable".to_owned()
    }
}

fn describe(worker: &str, wanted: &Value) -> String {
    let name = wanted
        .pointer("/metadata/name")
        .and_then(Value::as_str)
        .unwrap_or_default();
    format!("in MultiKueue worker {worker}, ConfigMap {name}")
}

#[cfg(test)]
#[path = "worker_snapshot_tests.rs"]
mod tests;
