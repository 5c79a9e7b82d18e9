use serde_json::{Value, json};

use super::*;

const ORIGIN: &str = "manager-uid";

fn manager_snapshot() -> Value {
    json!({"metadata": {"name": "job-runtime-snapshot", "namespace": "ns",
        "labels": {LABEL_RUNTIME_SNAPSHOT: "true"},
        "annotations": {ANN_RUNTIME_UID: "rt", ANN_RUNTIME_RESOURCE_VERSION: "7",
            ANN_RUNTIME_SHA256: "abc", "other": "x"},
        "ownerReferences": [{"apiVersion": "trainer.kubeflow.org/v1alpha1", "kind": "TrainJob",
            "name": "job", "uid": ORIGIN, "controller": true, "blockOwnerDeletion": true}]},
        "immutable": true,
        "data": {"runtime": "kind: TrainingRuntime\n"}})
}

fn wanted() -> Value {
    worker_copy("job", ORIGIN, Some(&manager_snapshot())).expect("a copy")
}

/// `wanted` as the worker's apiserver returns it, with `edit` applied.
fn found(edit: impl FnOnce(&mut Value)) -> Value {
    let mut v = wanted();
    v["metadata"]["uid"] = json!("cm-uid");
    v["metadata"]["resourceVersion"] = json!("42");
    edit(&mut v);
    v
}

/// The worker's TrainJob of the job's name, as read: `uid`, being deleted or not, with
/// MultiKueue's origin label or not.
fn trainjob(uid: &str, terminating: bool, labelled: bool) -> Value {
    let mut t = json!({"metadata": {"name": "job", "namespace": "ns", "uid": uid}});
    if terminating {
        t["metadata"]["deletionTimestamp"] = json!("2026-01-01T00:00:00Z");
    }
    if labelled {
        t["metadata"]["labels"] = json!({MULTIKUEUE_ORIGIN_LABEL: "multikueue"});
    }
    t
}

fn live(uid: &str) -> Option<Value> {
    Some(trainjob(uid, false, true))
}

fn leaving(uid: &str) -> Option<Value> {
    Some(trainjob(uid, true, true))
}

fn owned_by(uid: &str) -> impl FnOnce(&mut Value) + '_ {
    move |v| {
        v["metadata"]["ownerReferences"] = json!([{"apiVersion": "trainer.kubeflow.org/v1alpha1",
            "kind": "TrainJob", "name": "job", "uid": uid, "controller": true}]);
    }
}

#[test]
fn the_workers_copy_is_the_managers_data_label_and_provenance_with_the_origin_and_no_owner() {
    let w = wanted();
    assert_eq!(w["data"], manager_snapshot()["data"]);
    assert_eq!(w["immutable"], true);
    assert_eq!(w["metadata"]["name"], "job-runtime-snapshot");
    assert_eq!(w["metadata"]["labels"][LABEL_RUNTIME_SNAPSHOT], "true");
    assert_eq!(
        w["metadata"]["annotations"],
        json!({ANN_RUNTIME_UID: "rt", ANN_RUNTIME_RESOURCE_VERSION: "7",
            ANN_RUNTIME_SHA256: "abc", ANN_ORIGIN_TRAINJOB_UID: ORIGIN})
    );
    assert!(w["metadata"].get("ownerReferences").is_none());
    assert!(
        w["metadata"].get("namespace").is_none(),
        "set by the caller's Api"
    );
}

#[test]
fn before_dispatch_each_worker_is_brought_to_hold_the_managers_snapshot_unowned() {
    let other_data = |v: &mut Value| v["data"]["runtime"] = json!("kind: Edited\n");
    let other_origin = |v: &mut Value| {
        v["metadata"]["annotations"][ANN_ORIGIN_TRAINJOB_UID] = json!("another-manager-job")
    };
    let not_ours = |v: &mut Value| {
        v["metadata"]["labels"] = json!({});
        v["metadata"]["annotations"] = json!({});
    };
    let trainers_own_of_a_gone_copy = |v: &mut Value| {
        not_ours(v);
        owned_by("old-copy")(v);
    };
    let some_other_owner = |v: &mut Value| {
        v["metadata"]["ownerReferences"] = json!([{"apiVersion": "v1", "kind": "Pod",
            "name": "p", "uid": "pod-uid", "controller": true}]);
    };
    let no_snapshot = worker_copy("job", ORIGIN, None);
    let not_the_jobs = worker_copy("job", "other", Some(&manager_snapshot()));
    let ok = Ok(wanted());
    type Case<'a> = (
        &'a str,
        &'a Result<Value, String>,
        Option<Value>,
        Option<Value>,
        Expect,
    );
    enum Expect {
        Step(WorkerStep),
        /// A wait whose message names the worker and says this.
        Wait(&'static str),
    }
    let waits = Expect::Wait;
    let table: Vec<Case<'_>> = vec![
        (
            "absent: written",
            &ok,
            None,
            None,
            Expect::Step(WorkerStep::Write(wanted())),
        ),
        (
            "unowned, same data and origin: carried",
            &ok,
            Some(found(|_| {})),
            None,
            Expect::Step(WorkerStep::Carried),
        ),
        (
            "owned by a copy that no longer exists: replaced",
            &ok,
            Some(found(owned_by("old-copy"))),
            None,
            Expect::Step(WorkerStep::Replace {
                uid: "cm-uid".into(),
            }),
        ),
        (
            "owned by an earlier copy while a TrainJob being deleted is there: waits for it to go",
            &ok,
            Some(found(owned_by("old-copy"))),
            leaving("newer-copy"),
            waits("(uid newer-copy) is being deleted; waiting for it to go"),
        ),
        (
            "owned by the copy being deleted: waits for it to go",
            &ok,
            Some(found(owned_by("leaving-copy"))),
            leaving("leaving-copy"),
            waits("(uid leaving-copy) is being deleted; waiting for it to go"),
        ),
        (
            "absent, a TrainJob being deleted there (MultiKueue would take even it for its copy): waits, naming its finalizers",
            &ok,
            None,
            leaving("leaving-copy"),
            waits("if it stays, remove its finalizers there"),
        ),
        (
            "a TrainJob of the job's name planted before dispatch: waits, naming it, delete it",
            &ok,
            None,
            Some(trainjob("planted", false, false)),
            waits(
                "TrainJob ns/job (uid planted) exists before the job is dispatched: delete it there. MultiKueue would take it for its copy and holdfast would hand it the manager's snapshot",
            ),
        ),
        (
            "a planted TrainJob with MultiKueue's origin label, snapshot carried: waits",
            &ok,
            Some(found(|_| {})),
            live("planted"),
            waits("(uid planted) exists before"),
        ),
        (
            "the live copy of an earlier dispatch owning it: waits, delete it or MultiKueue does",
            &ok,
            Some(found(owned_by("live-copy"))),
            live("live-copy"),
            waits("a copy of an earlier dispatch, MultiKueue deletes itself"),
        ),
        (
            "other data: waits, never deleted",
            &ok,
            Some(found(other_data)),
            None,
            waits("its data differ"),
        ),
        (
            "another origin: waits, never deleted",
            &ok,
            Some(found(other_origin)),
            None,
            waits("another-manager-job"),
        ),
        (
            "not holdfast's: waits, never deleted",
            &ok,
            Some(found(not_ours)),
            None,
            waits("holdfast never deletes it"),
        ),
        (
            "Trainer's own of a gone copy: waits for the garbage collector",
            &ok,
            Some(found(trainers_own_of_a_gone_copy)),
            None,
            waits("garbage collector"),
        ),
        (
            "owned by something else: waits",
            &ok,
            Some(found(some_other_owner)),
            None,
            waits("Pod p"),
        ),
        (
            "no manager snapshot yet: waits",
            &no_snapshot,
            None,
            None,
            waits("does not exist"),
        ),
        (
            "a manager ConfigMap the job does not control: waits",
            &not_the_jobs,
            None,
            None,
            waits("not controlled by the TrainJob"),
        ),
    ];
    for (name, wanted, found, copy, expect) in table {
        let step = decide_worker("worker-1", wanted, found.as_ref(), copy.as_ref());
        let ok = match expect {
            Expect::Step(s) => step == s,
            Expect::Wait(needle) => {
                matches!(&step, WorkerStep::Wait(m) if m.contains(needle) && (m.contains("worker-1") || m.contains("manager has no")))
            }
        };
        assert!(ok, "{name}: {step:?}");
    }
}

#[test]
fn once_dispatched_the_copy_is_made_owner_of_the_managers_snapshot_and_nothing_else() {
    let w = wanted();
    let adopt = |found: Option<Value>, copy: Option<&str>| {
        decide_adoption("worker-1", "job", &w, found.as_ref(), copy)
    };
    assert_eq!(adopt(Some(found(|_| {})), None), Adoption::NoCopyYet);
    let Adoption::Patch(patch) = adopt(Some(found(|_| {})), Some("copy")) else {
        panic!("unowned and the manager's: patched");
    };
    assert_eq!(
        patch,
        json!({"metadata": {"resourceVersion": "42", "ownerReferences": [{
            "apiVersion": "trainer.kubeflow.org/v1alpha1", "kind": "TrainJob",
            "name": "job", "uid": "copy", "controller": true}]}})
    );
    assert_eq!(
        adopt(Some(found(owned_by("copy"))), Some("copy")),
        Adoption::Adopted
    );
    let refused = |a: Adoption, needle: &str| {
        assert!(
            matches!(&a, Adoption::Refuse(m) if m.contains(needle) && m.contains("worker-1")),
            "{needle}: {a:?}"
        );
    };
    refused(adopt(None, Some("copy")), "is missing");
    refused(
        adopt(
            Some(found(|v| v["data"]["runtime"] = json!("worker's\n"))),
            Some("copy"),
        ),
        "its data differ",
    );
    refused(
        adopt(
            Some(found(|v| {
                owned_by("copy")(v);
                v["data"]["runtime"] = json!("worker's\n");
            })),
            Some("copy"),
        ),
        "the copy runs it",
    );
    refused(
        adopt(Some(found(owned_by("old-copy"))), Some("copy")),
        "Trainer there refuses the copy",
    );
}

#[test]
fn a_terminating_copy_or_an_unlabelled_trainjob_is_never_taken_for_multikueues_copy() {
    assert_eq!(copy_uid(&trainjob("copy", false, true)), Some("copy"));
    assert_eq!(copy_uid(&trainjob("old-copy", true, true)), None);
    assert_eq!(copy_uid(&trainjob("someones", false, false)), None);
}

#[test]
fn only_holdfasts_unowned_copy_of_this_job_is_left_over_in_the_other_workers() {
    assert_eq!(leftover(&found(|_| {}), ORIGIN), Some("cm-uid"));
    assert_eq!(leftover(&found(|_| {}), "another"), None);
    assert_eq!(leftover(&found(owned_by("copy")), ORIGIN), None);
    assert_eq!(
        leftover(&found(|v| v["metadata"]["labels"] = json!({})), ORIGIN),
        None
    );
}
