#![allow(clippy::unwrap_used)]

use super::validate;
use crate::mode::Mode;
use crate::names::{
    ANN_ADMITTED_RUNTIME_RESOURCE_VERSION as ADMITTED, ANN_ATTEMPT, ANN_HOLD_HOLDER,
    ANN_HOLD_INSTANCE, ANN_HOLD_MARK, ANN_HOLD_PLACED_AT, ANN_HOLD_REASON, ANN_OPENED,
    HOLD_FINALIZER, LABEL_MANAGED, LABEL_RUNTIME_SNAPSHOT, PREBUILT_WORKLOAD_LABEL as PREBUILT,
};
use crate::policy::testkit::*;
use crate::policy::{Operation, QUEUE_NAME_LABEL, Resource, Verdict};
use serde_json::{Value, json};

const BOTH: &[Mode] = &[Mode::Plain, Mode::Kueue];
const PLAIN: &[Mode] = &[Mode::Plain];
const KUEUE_MODE: &[Mode] = &[Mode::Kueue];
const NOBODY: &[&str] = &[];

const SNAP: &str = "mnist-runtime-snapshot";
const SNAP_LABEL: (&str, &str) = (LABEL_RUNTIME_SNAPSHOT, "true");
const MANAGED: (&str, &str) = (LABEL_MANAGED, "true");
const HOLD: (&str, &str) = (ANN_HOLD_INSTANCE, "3");
const QUEUED: (&str, &str) = (QUEUE_NAME_LABEL, "team-queue");

/// One row: a request, run as every identity in `EVERYONE` in each of `modes`; allowed
/// exactly for the identities in `allowed`.
pub(crate) struct Case {
    pub(crate) name: &'static str,
    pub(crate) modes: &'static [Mode],
    pub(crate) resource: Resource,
    pub(crate) op: Operation,
    pub(crate) subresource: Option<&'static str>,
    pub(crate) old: Option<Value>,
    pub(crate) new: Option<Value>,
    pub(crate) allowed: &'static [&'static str],
}

impl Case {
    /// The case's request, sent by `user`.
    pub(crate) fn input(&self, user: &str) -> crate::policy::AdmissionInput {
        let mut i = input(
            self.resource.clone(),
            self.op,
            user,
            self.old.as_ref(),
            self.new.as_ref(),
        );
        i.subresource = self.subresource.map(str::to_owned);
        i
    }
}

fn case(
    name: &'static str,
    modes: &'static [Mode],
    resource: Resource,
    op: Operation,
    old: Option<Value>,
    new: Option<Value>,
    allowed: &'static [&'static str],
) -> Case {
    Case {
        name,
        modes,
        resource,
        op,
        subresource: None,
        old,
        new,
        allowed,
    }
}

fn ann(v: &Value, k: &str, val: &str) -> Value {
    with(v, |v| v["metadata"]["annotations"][k] = json!(val))
}
fn drop_ann(v: &Value, k: &str) -> Value {
    with(v, |v| {
        v["metadata"]["annotations"]
            .as_object_mut()
            .unwrap()
            .remove(k);
    })
}
fn suspend(v: &Value, s: Option<bool>) -> Value {
    with(v, |v| {
        let spec = v["spec"].as_object_mut().unwrap();
        match s {
            Some(s) => spec.insert("suspend".into(), json!(s)),
            None => spec.remove("suspend"),
        };
    })
}
fn active(v: &Value, a: Option<bool>) -> Value {
    with(v, |v| {
        let spec = v["spec"].as_object_mut().unwrap();
        match a {
            Some(a) => spec.insert("active".into(), json!(a)),
            None => spec.remove("active"),
        };
    })
}

#[rustfmt::skip]
pub(crate) fn table() -> Vec<Case> {
    use Operation::*;
    use Resource::{ConfigMap as CM, TrainJob as TJ, Workload as WL};
    let snap = cm(SNAP, &[SNAP_LABEL]);
    let snap_by_name = cm(SNAP, &[]);
    let snap_by_label = cm("mnist-runtime", &[SNAP_LABEL]);
    let plain_cm = cm("settings", &[("app", "x")]);
    let job = tj(&[], &[], None);
    let held_job = tj(&[HOLD, (ANN_HOLD_REASON, "node lost")], &[], Some(true));
    let gated = tj(&[], &[MANAGED], Some(true));
    let opened = tj(&[(ANN_OPENED, "true")], &[MANAGED], Some(true));
    let queued = tj(&[], &[QUEUED], None);
    let queued_gated = tj(&[], &[MANAGED, QUEUED], Some(true));
    let queued_held = tj(&[HOLD, (ANN_HOLD_REASON, "node lost")], &[QUEUED], Some(true));
    let workload = wl(&[], None);
    let held_wl = wl(&[HOLD], Some(false));
    let owned_wl = with(&workload, |v| {
        v["metadata"]["ownerReferences"] = json!([{"apiVersion": "trainer.kubeflow.org/v1alpha1",
            "kind": "TrainJob", "name": "mnist", "uid": "u-1", "controller": true}])
    });

    vec![
        // --- snapshot ConfigMaps: create
        case("create snapshot (name and label)", BOTH, CM, Create, None, Some(snap.clone()), &[CONTROLLER, TRAINER]),
        case("create snapshot (name only, as Trainer writes it)", BOTH, CM, Create, None, Some(snap_by_name.clone()), &[CONTROLLER, TRAINER]),
        case("create snapshot (label only)", BOTH, CM, Create, None, Some(snap_by_label.clone()), &[CONTROLLER, TRAINER]),
        case("create an ordinary ConfigMap", BOTH, CM, Create, None, Some(plain_cm.clone()), &EVERYONE),
        // --- snapshot ConfigMaps: update
        case("update snapshot metadata (adopt: add provenance)", BOTH, CM, Update, Some(snap_by_name.clone()), Some(with(&snap_by_name, |v| { v["metadata"]["annotations"] = json!({"holdfast.dev/runtime-uid": "r-1"}) })), &[CONTROLLER]),
        case("update snapshot data", BOTH, CM, Update, Some(snap.clone()), Some(with(&snap, |v| { v["data"]["runtime"] = json!("kind: Evil\n") })), NOBODY),
        case("update snapshot binaryData", BOTH, CM, Update, Some(snap.clone()), Some(with(&snap, |v| v["binaryData"] = json!({"x": "AA=="}))), NOBODY),
        case("update snapshot: drop the data", BOTH, CM, Update, Some(snap.clone()), Some(with(&snap, |v| { v.as_object_mut().unwrap().remove("data"); })), NOBODY),
        case("update snapshot: orphan (drop ownerReferences)", BOTH, CM, Update, Some(snap.clone()), Some(with(&snap, |v| { v["metadata"].as_object_mut().unwrap().remove("ownerReferences"); })), &[CONTROLLER, GC, NS]),
        case("update snapshot: remove the foregroundDeletion finalizer", BOTH, CM, Update, Some(with(&snap, |v| { v["metadata"]["finalizers"] = json!(["foregroundDeletion"]) })), Some(snap.clone()), &[CONTROLLER, GC, NS]),
        case("update snapshot: a no-op", BOTH, CM, Update, Some(snap.clone()), Some(snap.clone()), &[CONTROLLER, GC, NS]),
        case("update snapshot: drop the label (name is not a snapshot's)", BOTH, CM, Update, Some(snap_by_label.clone()), Some(cm("mnist-runtime", &[])), &[CONTROLLER]),
        case("update snapshot: add a label", BOTH, CM, Update, Some(snap.clone()), Some(with(&snap, |v| v["metadata"]["labels"]["x"] = json!("y"))), &[CONTROLLER]),
        case("update an ordinary ConfigMap into a labelled snapshot", BOTH, CM, Update, Some(plain_cm.clone()), Some(with(&plain_cm, |v| { v["metadata"]["labels"][LABEL_RUNTIME_SNAPSHOT] = json!("true") })), &[CONTROLLER]),
        case("update an ordinary ConfigMap", BOTH, CM, Update, Some(plain_cm.clone()), Some(with(&plain_cm, |v| v["data"]["runtime"] = json!("x"))), &EVERYONE),
        // --- snapshot ConfigMaps: delete, connect
        case("delete snapshot", BOTH, CM, Delete, Some(snap.clone()), None, &[CONTROLLER, GC, NS]),
        case("delete snapshot (label only)", BOTH, CM, Delete, Some(snap_by_label.clone()), None, &[CONTROLLER, GC, NS]),
        case("delete an orphaned snapshot (its TrainJob deleted with --cascade=orphan)", BOTH, CM, Delete, Some(with(&snap, |v| { v["metadata"].as_object_mut().unwrap().remove("ownerReferences"); })), None, &EVERYONE),
        case("delete a snapshot whose owner is not its controller", BOTH, CM, Delete, Some(with(&snap, |v| v["metadata"]["ownerReferences"][0]["controller"] = json!(false))), None, &EVERYONE),
        case("delete an ordinary ConfigMap", BOTH, CM, Delete, Some(plain_cm.clone()), None, &EVERYONE),
        case("connect to a snapshot", BOTH, CM, Connect, None, None, &EVERYONE),
        // --- snapshot ConfigMaps: malformed
        case("create a ConfigMap without object", BOTH, CM, Create, None, None, &[CONTROLLER, TRAINER]),
        case("update a ConfigMap without oldObject", BOTH, CM, Update, None, Some(plain_cm.clone()), NOBODY),
        case("update a ConfigMap whose oldObject is a number", BOTH, CM, Update, Some(json!(7)), Some(plain_cm.clone()), NOBODY),
        case("delete a ConfigMap without oldObject", BOTH, CM, Delete, None, None, &[CONTROLLER, GC, NS]),
        // --- controller annotations on TrainJobs
        case("add hold-instance to a TrainJob", BOTH, TJ, Update, Some(job.clone()), Some(ann(&job, ANN_HOLD_INSTANCE, "1")), &[CONTROLLER]),
        case("add a new hold-* annotation", BOTH, TJ, Update, Some(job.clone()), Some(ann(&job, "holdfast.dev/hold-by", "me")), &[CONTROLLER]),
        case("change hold-instance", BOTH, TJ, Update, Some(held_job.clone()), Some(ann(&held_job, ANN_HOLD_INSTANCE, "9")), &[CONTROLLER]),
        case("remove hold-reason (not restored)", BOTH, TJ, Update, Some(held_job.clone()), Some(drop_ann(&held_job, ANN_HOLD_REASON)), &[CONTROLLER]),
        case("change attempt", BOTH, TJ, Update, Some(ann(&job, ANN_ATTEMPT, "1")), Some(ann(&job, ANN_ATTEMPT, "2")), &[CONTROLLER]),
        case("add opened", BOTH, TJ, Update, Some(job.clone()), Some(ann(&job, ANN_OPENED, "true")), &[CONTROLLER]),
        case("add admitted-runtime-resource-version after create", BOTH, TJ, Update, Some(job.clone()), Some(ann(&job, ADMITTED, "42")), &[CONTROLLER]),
        case("change admitted-runtime-resource-version", BOTH, TJ, Update, Some(ann(&job, ADMITTED, "41")), Some(ann(&job, ADMITTED, "42")), &[CONTROLLER]),
        case("change someone else's annotation on a held TrainJob", BOTH, TJ, Update, Some(held_job.clone()), Some(ann(&held_job, "example.com/owner", "bob")), &EVERYONE),
        case("add an annotation that only looks like ours", BOTH, TJ, Update, Some(job.clone()), Some(ann(&job, "example.com/hold-instance", "1")), &EVERYONE),
        case("create a TrainJob with a hold", BOTH, TJ, Create, None, Some(held_job.clone()), &[CONTROLLER]),
        case("create a TrainJob already opened", BOTH, TJ, Create, None, Some(ann(&job, ANN_OPENED, "true")), &[CONTROLLER]),
        case("create a TrainJob with an attempt", BOTH, TJ, Create, None, Some(ann(&job, ANN_ATTEMPT, "5")), &[CONTROLLER]),
        case("create a TrainJob with admitted-runtime-resource-version (set by the mutating side)", BOTH, TJ, Create, None, Some(ann(&job, ADMITTED, "42")), &EVERYONE),
        case("create an ordinary TrainJob", BOTH, TJ, Create, None, Some(job.clone()), &EVERYONE),
        case("delete a held TrainJob", BOTH, TJ, Delete, Some(held_job.clone()), None, &EVERYONE),
        case("create a TrainJob that is a number", BOTH, TJ, Create, None, Some(json!(3)), &[CONTROLLER]),
        case("update a TrainJob without oldObject (plain)", PLAIN, TJ, Update, None, Some(job.clone()), &[CONTROLLER]),
        case("kueue: unsuspend a TrainJob marked for a hold on its Workload (Kueue included)", KUEUE_MODE, TJ, Update, Some(tj(&[(ANN_HOLD_MARK, "instance=4 deadline=2026-12-05T00:10:00Z")], &[QUEUED], Some(true))), Some(tj(&[(ANN_HOLD_MARK, "instance=4 deadline=2026-12-05T00:10:00Z")], &[QUEUED], Some(false))), NOBODY),
        case("kueue: suspend a TrainJob marked for a hold (Kueue's own suspend)", KUEUE_MODE, TJ, Update, Some(tj(&[(ANN_HOLD_MARK, "instance=4 deadline=2026-12-05T00:10:00Z")], &[QUEUED], Some(false))), Some(tj(&[(ANN_HOLD_MARK, "instance=4 deadline=2026-12-05T00:10:00Z")], &[QUEUED], Some(true))), &[KUEUE]),
        case("update a TrainJob without oldObject (kueue: even the controller's suspend cannot be checked)", KUEUE_MODE, TJ, Update, None, Some(job.clone()), NOBODY),
        case("update a TrainJob whose object is an array", PLAIN, TJ, Update, Some(job.clone()), Some(json!([job.clone()])), &[CONTROLLER]),
        // --- controller annotations on Workloads
        case("add hold-instance to a Workload", BOTH, WL, Update, Some(workload.clone()), Some(ann(&workload, ANN_HOLD_INSTANCE, "1")), &[CONTROLLER]),
        case("change the hold-holder of a held Workload (take over its hold)", BOTH, WL, Update, Some(ann(&held_wl, ANN_HOLD_HOLDER, "system:serviceaccount:a:dispatch")), Some(ann(&held_wl, ANN_HOLD_HOLDER, "alice")), &[CONTROLLER]),
        case("remove the hold-holder of a held Workload", BOTH, WL, Update, Some(ann(&held_wl, ANN_HOLD_HOLDER, "system:serviceaccount:a:dispatch")), Some(held_wl.clone()), &[CONTROLLER]),
        case("add a hold-holder to a held TrainJob", BOTH, TJ, Update, Some(held_job.clone()), Some(ann(&held_job, ANN_HOLD_HOLDER, "alice")), &[CONTROLLER]),
        case("change hold-placed-at on a Workload", BOTH, WL, Update, Some(ann(&held_wl, ANN_HOLD_PLACED_AT, "2026-11-29T12:00:00Z")), Some(ann(&held_wl, ANN_HOLD_PLACED_AT, "2027-01-01T00:00:00Z")), &[CONTROLLER]),
        case("create a Workload with a hold", BOTH, WL, Create, None, Some(held_wl.clone()), &[CONTROLLER]),
        case("create a Workload with admitted-runtime-resource-version", BOTH, WL, Create, None, Some(ann(&workload, ADMITTED, "1")), &[CONTROLLER]),
        case("create an ordinary Workload", BOTH, WL, Create, None, Some(workload.clone()), &EVERYONE),
        case("create a Workload with the hold finalizer", BOTH, WL, Create, None, Some(with(&workload, |v| v["metadata"]["finalizers"] = json!([HOLD_FINALIZER]))), &[CONTROLLER]),
        case("create a TrainJob with the hold finalizer", BOTH, TJ, Create, None, Some(with(&job, |v| v["metadata"]["finalizers"] = json!([HOLD_FINALIZER]))), &[CONTROLLER]),
        case("add the hold finalizer to a Workload that carries no hold", BOTH, WL, Update, Some(workload.clone()), Some(with(&workload, |v| v["metadata"]["finalizers"] = json!([HOLD_FINALIZER]))), &[CONTROLLER]),
        case("kueue: create a Workload owned by a TrainJob (a decoy)", KUEUE_MODE, WL, Create, None, Some(owned_wl.clone()), &[CONTROLLER, KUEUE]),
        case("kueue: create a Workload owned by a TrainJob, not as controller", KUEUE_MODE, WL, Create, None, Some(with(&owned_wl, |v| v["metadata"]["ownerReferences"][0]["controller"] = json!(false))), &[CONTROLLER, KUEUE]),
        case("kueue: make a Workload a TrainJob's", KUEUE_MODE, WL, Update, Some(workload.clone()), Some(owned_wl.clone()), &[CONTROLLER, KUEUE]),
        case("kueue: point a Workload at another TrainJob", KUEUE_MODE, WL, Update, Some(owned_wl.clone()), Some(with(&owned_wl, |v| v["metadata"]["ownerReferences"][0]["uid"] = json!("u-2"))), &[CONTROLLER, KUEUE]),
        case("kueue: edit a Workload a TrainJob owns, keeping the owner", KUEUE_MODE, WL, Update, Some(owned_wl.clone()), Some(with(&owned_wl, |v| v["spec"]["priority"] = json!(5))), &EVERYONE),
        case("kueue: change the job-uid label of a TrainJob's Workload", KUEUE_MODE, WL, Update, Some(with(&owned_wl, |v| v["metadata"]["labels"]["kueue.x-k8s.io/job-uid"] = json!("u-1"))), Some(with(&owned_wl, |v| v["metadata"]["labels"]["kueue.x-k8s.io/job-uid"] = json!("u-2"))), &[CONTROLLER, KUEUE]),
        case("kueue: remove the job-uid label of a TrainJob's Workload", KUEUE_MODE, WL, Update, Some(with(&owned_wl, |v| v["metadata"]["labels"]["kueue.x-k8s.io/job-uid"] = json!("u-1"))), Some(owned_wl.clone()), &[CONTROLLER, KUEUE]),
        case("kueue: relabel a Workload no TrainJob owns", KUEUE_MODE, WL, Update, Some(with(&workload, |v| v["metadata"]["labels"]["kueue.x-k8s.io/job-uid"] = json!("u-1"))), Some(workload.clone()), &EVERYONE),
        case("kueue: drop the owner of a Workload (it would stop being the TrainJob's; the GC orphans)", KUEUE_MODE, WL, Update, Some(owned_wl.clone()), Some(workload.clone()), &[CONTROLLER, KUEUE, GC, NS]),
        case("plain: create a Workload owned by a TrainJob (Workloads are not held in plain mode)", PLAIN, WL, Create, None, Some(owned_wl.clone()), &EVERYONE),
        case("delete a held Workload", BOTH, WL, Delete, Some(held_wl.clone()), None, &EVERYONE),
        // --- kueue mode: spec.suspend of a queued TrainJob belongs to Kueue
        case("kueue: suspend a queued TrainJob", KUEUE_MODE, TJ, Update, Some(suspend(&queued, Some(false))), Some(suspend(&queued, Some(true))), &[KUEUE]),
        case("kueue: unsuspend a queued TrainJob", KUEUE_MODE, TJ, Update, Some(suspend(&queued, Some(true))), Some(suspend(&queued, Some(false))), &[KUEUE]),
        case("kueue: suspend absent to true", KUEUE_MODE, TJ, Update, Some(queued.clone()), Some(suspend(&queued, Some(true))), &[KUEUE]),
        case("kueue: suspend absent to false is no change", KUEUE_MODE, TJ, Update, Some(queued.clone()), Some(suspend(&queued, Some(false))), &EVERYONE),
        case("kueue: unsuspend a queued managed TrainJob at its gate (nobody, Kueue included: Open first)", KUEUE_MODE, TJ, Update, Some(queued_gated.clone()), Some(suspend(&queued_gated, Some(false))), NOBODY),
        case("kueue: unsuspend a queued managed TrainJob past its gate", KUEUE_MODE, TJ, Update, Some(ann(&queued_gated, ANN_OPENED, "true")), Some(suspend(&ann(&queued_gated, ANN_OPENED, "true"), Some(false))), &[KUEUE]),
        case("kueue: queue the TrainJob while unsuspending it", KUEUE_MODE, TJ, Update, Some(suspend(&job, Some(true))), Some(suspend(&queued, Some(false))), &[KUEUE]),
        case("kueue: drop the queue label while unsuspending", KUEUE_MODE, TJ, Update, Some(suspend(&queued, Some(true))), Some(suspend(&job, Some(false))), &[KUEUE]),
        case("kueue: drop the queue label of a suspended TrainJob (Kueue would then ignore it)", KUEUE_MODE, TJ, Update, Some(suspend(&queued, Some(true))), Some(suspend(&job, Some(true))), &[CONTROLLER, KUEUE]),
        case("kueue: suspend an unqueued TrainJob (still Kueue's field)", KUEUE_MODE, TJ, Update, Some(suspend(&job, Some(false))), Some(suspend(&job, Some(true))), &[KUEUE]),
        case("kueue: unsuspend an unqueued TrainJob (a queue name dropped earlier is no way out)", KUEUE_MODE, TJ, Update, Some(suspend(&job, Some(true))), Some(suspend(&job, Some(false))), &[KUEUE]),
        case("kueue: an empty queue name does not free spec.suspend", KUEUE_MODE, TJ, Update, Some(tj(&[], &[(QUEUE_NAME_LABEL, "")], Some(true))), Some(tj(&[], &[(QUEUE_NAME_LABEL, "")], Some(false))), &[KUEUE]),
        case("kueue: unsuspend an unqueued managed TrainJob at its gate", KUEUE_MODE, TJ, Update, Some(gated.clone()), Some(suspend(&gated, Some(false))), NOBODY),
        case("kueue: create an unsuspended TrainJob", KUEUE_MODE, TJ, Create, None, Some(suspend(&job, Some(false))), &EVERYONE),
        case("kueue: create a managed TrainJob without a queue name", KUEUE_MODE, TJ, Create, None, Some(suspend(&gated, Some(false))), &[CONTROLLER]),
        case("kueue: create a managed TrainJob with an empty queue name", KUEUE_MODE, TJ, Create, None, Some(tj(&[], &[MANAGED, (QUEUE_NAME_LABEL, "")], None)), &[CONTROLLER]),
        case("kueue: create a queued managed TrainJob", KUEUE_MODE, TJ, Create, None, Some(queued_gated.clone()), &EVERYONE),
        case("kueue: change the queue of a suspended TrainJob", KUEUE_MODE, TJ, Update, Some(suspend(&queued, Some(true))), Some(suspend(&tj(&[], &[(QUEUE_NAME_LABEL, "elsewhere")], None), Some(true))), &[CONTROLLER, KUEUE]),
        case("kueue: empty the queue name of a suspended TrainJob", KUEUE_MODE, TJ, Update, Some(suspend(&queued, Some(true))), Some(suspend(&tj(&[], &[(QUEUE_NAME_LABEL, "")], None), Some(true))), &[CONTROLLER, KUEUE]),
        case("kueue: change the queue of a running unmanaged TrainJob (Kueue's own webhook decides)", KUEUE_MODE, TJ, Update, Some(suspend(&queued, Some(false))), Some(suspend(&tj(&[], &[(QUEUE_NAME_LABEL, "elsewhere")], None), Some(false))), &EVERYONE),
        case("kueue: queue a suspended unqueued TrainJob", KUEUE_MODE, TJ, Update, Some(suspend(&job, Some(true))), Some(suspend(&queued, Some(true))), &EVERYONE),
        case("kueue: drop the queue label at the closed gate", KUEUE_MODE, TJ, Update, Some(suspend(&queued_gated, Some(false))), Some(suspend(&gated, Some(false))), &[CONTROLLER, KUEUE]),
        case("kueue: drop the managed label at the closed gate", KUEUE_MODE, TJ, Update, Some(queued_gated.clone()), Some(suspend(&queued, Some(true))), &[CONTROLLER]),
        case("kueue: drop the managed label of a running job at the closed gate", KUEUE_MODE, TJ, Update, Some(suspend(&queued_gated, Some(false))), Some(suspend(&queued, Some(false))), &[CONTROLLER]),
        case("kueue: drop the managed label once opened", KUEUE_MODE, TJ, Update, Some(ann(&queued_gated, ANN_OPENED, "true")), Some(ann(&suspend(&queued, Some(true)), ANN_OPENED, "true")), &EVERYONE),
        case("kueue: label a queued TrainJob managed", KUEUE_MODE, TJ, Update, Some(suspend(&queued, Some(true))), Some(queued_gated.clone()), &EVERYONE),
        case("kueue: label an unqueued TrainJob managed", KUEUE_MODE, TJ, Update, Some(suspend(&job, Some(true))), Some(gated.clone()), &[CONTROLLER, KUEUE]),
        case("kueue: name a prebuilt Workload for a suspended TrainJob", KUEUE_MODE, TJ, Update, Some(suspend(&queued, Some(true))), Some(with(&suspend(&queued, Some(true)), |v| v["metadata"]["labels"][PREBUILT] = json!("decoy"))), &[CONTROLLER, KUEUE]),
        case("kueue: name a prebuilt Workload (annotation) at the closed gate", KUEUE_MODE, TJ, Update, Some(suspend(&queued_gated, Some(false))), Some(ann(&suspend(&queued_gated, Some(false)), PREBUILT, "decoy")), &[CONTROLLER, KUEUE]),
        case("kueue: name a prebuilt Workload for a running unmanaged TrainJob", KUEUE_MODE, TJ, Update, Some(suspend(&queued, Some(false))), Some(with(&suspend(&queued, Some(false)), |v| v["metadata"]["labels"][PREBUILT] = json!("w"))), &EVERYONE),
        case("kueue: controller writes opened without touching suspend", KUEUE_MODE, TJ, Update, Some(gated.clone()), Some(ann(&gated, ANN_OPENED, "true")), &[CONTROLLER]),
        // --- kueue mode: a held Workload stays inactive
        case("kueue: reactivate a held Workload", KUEUE_MODE, WL, Update, Some(held_wl.clone()), Some(active(&held_wl, Some(true))), &[CONTROLLER]),
        case("kueue: reactivate a held Workload by dropping spec.active", KUEUE_MODE, WL, Update, Some(held_wl.clone()), Some(active(&held_wl, None)), &[CONTROLLER]),
        case("kueue: release (reactivate and drop the hold)", KUEUE_MODE, WL, Update, Some(held_wl.clone()), Some(active(&drop_ann(&held_wl, ANN_HOLD_INSTANCE), Some(true))), &[CONTROLLER]),
        case("kueue: other spec edits of a held Workload", KUEUE_MODE, WL, Update, Some(held_wl.clone()), Some(with(&held_wl, |v| v["spec"]["priority"] = json!(5))), &EVERYONE),
        case("kueue: move a held Workload to another queue", KUEUE_MODE, WL, Update, Some(held_wl.clone()), Some(with(&held_wl, |v| v["spec"]["queueName"] = json!("ungated"))), &[CONTROLLER]),
        case("kueue: move a Workload that carries no hold", KUEUE_MODE, WL, Update, Some(workload.clone()), Some(with(&workload, |v| v["spec"]["queueName"] = json!("other"))), &EVERYONE),
        case("kueue: reactivate a Workload Kueue deactivated itself", KUEUE_MODE, WL, Update, Some(active(&workload, Some(false))), Some(active(&workload, Some(true))), &EVERYONE),
        case("kueue: deactivate a Workload", KUEUE_MODE, WL, Update, Some(workload.clone()), Some(active(&workload, Some(false))), &EVERYONE),
        case("kueue: a TrainJob carrying a plain-mode hold is unsuspended by nobody", KUEUE_MODE, TJ, Update, Some(queued_held.clone()), Some(suspend(&queued_held, Some(false))), NOBODY),
        case("kueue: Kueue suspends a TrainJob carrying a plain-mode hold", KUEUE_MODE, TJ, Update, Some(suspend(&queued_held, Some(false))), Some(queued_held.clone()), &[KUEUE]),
        // --- plain mode: holds and the start gate
        case("plain: unsuspend a held TrainJob", PLAIN, TJ, Update, Some(held_job.clone()), Some(suspend(&held_job, Some(false))), &[CONTROLLER]),
        case("plain: unsuspend a held TrainJob by dropping spec.suspend", PLAIN, TJ, Update, Some(held_job.clone()), Some(suspend(&held_job, None)), &[CONTROLLER]),
        case("plain: release a hold (unsuspend, drop annotations)", PLAIN, TJ, Update, Some(held_job.clone()), Some(suspend(&drop_ann(&drop_ann(&held_job, ANN_HOLD_INSTANCE), ANN_HOLD_REASON), Some(false))), &[CONTROLLER]),
        case("plain: other spec edits of a held TrainJob", PLAIN, TJ, Update, Some(held_job.clone()), Some(with(&held_job, |v| v["spec"]["labels"] = json!({"a": "b"}))), &EVERYONE),
        case("plain: suspend a TrainJob", PLAIN, TJ, Update, Some(job.clone()), Some(suspend(&job, Some(true))), &EVERYONE),
        case("plain: unsuspend an unmanaged TrainJob", PLAIN, TJ, Update, Some(suspend(&job, Some(true))), Some(suspend(&job, Some(false))), &EVERYONE),
        case("plain: unsuspend a managed TrainJob at its closed gate", PLAIN, TJ, Update, Some(gated.clone()), Some(suspend(&gated, Some(false))), &[CONTROLLER]),
        case("plain: unsuspend at the gate while dropping the label", PLAIN, TJ, Update, Some(gated.clone()), Some(suspend(&tj(&[], &[], None), Some(false))), &[CONTROLLER]),
        case("plain: unsuspend a suspended TrainJob while labelling it managed", PLAIN, TJ, Update, Some(suspend(&job, Some(true))), Some(suspend(&gated, Some(false))), &[CONTROLLER]),
        case("plain: drop the managed label at the closed gate", PLAIN, TJ, Update, Some(gated.clone()), Some(tj(&[], &[], Some(true))), &[CONTROLLER]),
        case("plain: set the managed label to false at the closed gate", PLAIN, TJ, Update, Some(gated.clone()), Some(tj(&[], &[(LABEL_MANAGED, "false")], Some(true))), &[CONTROLLER]),
        case("plain: drop the managed label of an unsuspended job at the closed gate", PLAIN, TJ, Update, Some(suspend(&gated, Some(false))), Some(suspend(&job, Some(false))), &[CONTROLLER]),
        case("plain: drop the managed label once opened", PLAIN, TJ, Update, Some(opened.clone()), Some(tj(&[(ANN_OPENED, "true")], &[], Some(true))), &EVERYONE),
        case("plain: unsuspend an opened managed TrainJob (suspended by its owner)", PLAIN, TJ, Update, Some(opened.clone()), Some(suspend(&opened, Some(false))), &EVERYONE),
        case("plain: suspend an opened managed TrainJob", PLAIN, TJ, Update, Some(suspend(&opened, Some(false))), Some(opened.clone()), &EVERYONE),
        case("plain: create a managed TrainJob suspended", PLAIN, TJ, Create, None, Some(gated.clone()), &EVERYONE),
        case("plain: create a managed TrainJob unsuspended", PLAIN, TJ, Create, None, Some(suspend(&gated, Some(false))), &[CONTROLLER]),
        case("plain: create a managed TrainJob without spec.suspend", PLAIN, TJ, Create, None, Some(suspend(&gated, None)), &[CONTROLLER]),
        case("plain: a Workload held in kueue mode stays inactive", PLAIN, WL, Update, Some(held_wl.clone()), Some(active(&held_wl, Some(true))), &[CONTROLLER]),
        case("plain: a Workload held in kueue mode stays in its queue", PLAIN, WL, Update, Some(held_wl.clone()), Some(with(&held_wl, |v| v["spec"]["queueName"] = json!("elsewhere"))), &[CONTROLLER]),
        case("plain: a Workload held in kueue mode is made a TrainJob's only by Kueue", PLAIN, WL, Update, Some(held_wl.clone()), Some(with(&held_wl, |v| v["metadata"]["ownerReferences"] = owned_wl["metadata"]["ownerReferences"].clone())), &[CONTROLLER, KUEUE]),
        case("plain: a held Workload keeps its TrainJob owner (the GC orphans)", PLAIN, WL, Update, Some(with(&held_wl, |v| v["metadata"]["ownerReferences"] = owned_wl["metadata"]["ownerReferences"].clone())), Some(held_wl.clone()), &[CONTROLLER, KUEUE, GC, NS]),
        case("plain: a held Workload of a TrainJob keeps its job-uid label", PLAIN, WL, Update, Some(with(&held_wl, |v| { v["metadata"]["ownerReferences"] = owned_wl["metadata"]["ownerReferences"].clone(); v["metadata"]["labels"] = json!({"kueue.x-k8s.io/job-uid": "u-1"}); })), Some(with(&held_wl, |v| { v["metadata"]["ownerReferences"] = owned_wl["metadata"]["ownerReferences"].clone(); v["metadata"]["labels"] = json!({"kueue.x-k8s.io/job-uid": "u-2"}); })), &[CONTROLLER, KUEUE]),
        case("plain: garbage spec.suspend reads as false", PLAIN, TJ, Update, Some(held_job.clone()), Some(with(&held_job, |v| v["spec"]["suspend"] = json!("true"))), &[CONTROLLER]),
        // --- everything else
        case("a Pod", BOTH, Resource::Other { group: "".into(), resource: "pods".into(), }, Create, None, Some(json!({"metadata": {"annotations": {ANN_HOLD_INSTANCE: "1"}}})), &EVERYONE),
        case("a TrainingRuntime edit", BOTH, Resource::Other { group: "trainer.kubeflow.org".into(), resource: "clustertrainingruntimes".into(), }, Update, Some(json!({})), Some(json!({"spec": {}})), &EVERYONE),
        Case { subresource: Some("status"), ..case("status writes (the apiserver keeps metadata and spec)", BOTH, TJ, Update, Some(held_job.clone()), Some(suspend(&drop_ann(&held_job, ANN_HOLD_INSTANCE), Some(false))), &EVERYONE) },
        Case { subresource: Some("status"), ..case("Workload status writes", BOTH, WL, Update, Some(held_wl.clone()), Some(active(&held_wl, Some(true))), &EVERYONE) },
    ]
}

#[test]
fn every_rule_for_every_identity_in_both_modes() {
    let who = who();
    let mut failures = Vec::new();
    let mut checked = 0;
    for c in table() {
        for &mode in c.modes {
            for user in EVERYONE {
                let verdict = validate(&c.input(user), &who, mode);
                let want = c.allowed.contains(&user);
                checked += 1;
                if verdict.is_allowed() != want {
                    failures.push(format!(
                        "{} [{mode}] as {user}: want {}, got {verdict:?}",
                        c.name,
                        if want { "allow" } else { "deny" }
                    ));
                }
                if let Verdict::Deny { field, message, .. } = &verdict {
                    assert!(!field.is_empty(), "{}: empty field", c.name);
                    assert!(
                        message.contains(user),
                        "{}: message does not name {user}: {message}",
                        c.name
                    );
                }
            }
        }
    }
    assert!(checked >= 800, "the table ran only {checked} checks");
    assert!(
        failures.is_empty(),
        "{} of {checked} failed:\n{}",
        failures.len(),
        failures.join("\n")
    );
}

fn verdict(
    resource: Resource,
    op: Operation,
    user: &str,
    mode: Mode,
    old: Option<&Value>,
    new: Option<&Value>,
) -> Verdict {
    validate(&input(resource, op, user, old, new), &who(), mode)
}

fn denied(v: &Verdict) -> (String, String) {
    match v {
        Verdict::Deny { field, message, .. } => (field.clone(), message.clone()),
        Verdict::Allow => panic!("expected a denial"),
    }
}

#[test]
fn plain_user_cannot_delete_snapshot() {
    let s = cm(SNAP, &[SNAP_LABEL]);
    let v = verdict(
        Resource::ConfigMap,
        Operation::Delete,
        ALICE,
        Mode::Plain,
        Some(&s),
        None,
    );
    let (_, message) = denied(&v);
    assert!(
        message.contains(GC) && message.contains(NS) && message.contains(CONTROLLER),
        "{message}"
    );
}

#[test]
fn gc_may_delete_snapshot() {
    let s = cm(SNAP, &[SNAP_LABEL]);
    assert!(
        verdict(
            Resource::ConfigMap,
            Operation::Delete,
            GC,
            Mode::Plain,
            Some(&s),
            None
        )
        .is_allowed()
    );
}

#[test]
fn namespace_controller_may_delete_snapshot() {
    let s = cm(SNAP, &[]);
    assert!(
        verdict(
            Resource::ConfigMap,
            Operation::Delete,
            NS,
            Mode::Kueue,
            Some(&s),
            None
        )
        .is_allowed()
    );
}

#[test]
fn trainer_may_create_snapshot_but_not_rewrite_or_delete_it() {
    let s = cm(SNAP, &[]);
    assert!(
        verdict(
            Resource::ConfigMap,
            Operation::Create,
            TRAINER,
            Mode::Plain,
            None,
            Some(&s)
        )
        .is_allowed()
    );
    let edited = with(&s, |v| v["data"]["runtime"] = json!("kind: Other\n"));
    assert!(
        !verdict(
            Resource::ConfigMap,
            Operation::Update,
            TRAINER,
            Mode::Plain,
            Some(&s),
            Some(&edited)
        )
        .is_allowed()
    );
    assert!(
        !verdict(
            Resource::ConfigMap,
            Operation::Delete,
            TRAINER,
            Mode::Plain,
            Some(&s),
            None
        )
        .is_allowed()
    );
}

#[test]
fn renamed_snapshot_is_still_protected_by_label() {
    // A labelled snapshot whose name does not end in -runtime-snapshot, e.g. one a user
    // copied under another name, or a request that names something else.
    let labelled = cm("mnist-copy", &[SNAP_LABEL]);
    for op in [Operation::Create, Operation::Delete] {
        let (old, new) = match op {
            Operation::Create => (None, Some(&labelled)),
            _ => (Some(&labelled), None),
        };
        let v = verdict(Resource::ConfigMap, op, ALICE, Mode::Plain, old, new);
        assert!(
            denied(&v)
                .1
                .contains("label holdfast.dev/runtime-snapshot=true"),
            "{v:?}"
        );
    }
    let edited = with(&labelled, |v| v["data"]["runtime"] = json!("x"));
    assert!(
        !verdict(
            Resource::ConfigMap,
            Operation::Update,
            ALICE,
            Mode::Plain,
            Some(&labelled),
            Some(&edited)
        )
        .is_allowed()
    );
}

#[test]
fn label_dropped_snapshot_still_protected_by_name() {
    let s = cm(SNAP, &[SNAP_LABEL]);
    let unlabelled = cm(SNAP, &[]);
    let v = verdict(
        Resource::ConfigMap,
        Operation::Update,
        ALICE,
        Mode::Plain,
        Some(&s),
        Some(&unlabelled),
    );
    assert!(denied(&v).1.contains("ends in -runtime-snapshot"), "{v:?}");
    // And the other way: a labelled old object keeps protecting a differently named request.
    let mut i = input(
        Resource::ConfigMap,
        Operation::Update,
        ALICE,
        Some(&cm("x", &[SNAP_LABEL])),
        Some(&cm("x", &[])),
    );
    i.name = "x".into();
    assert!(!validate(&i, &who(), Mode::Plain).is_allowed());
}

#[test]
fn snapshot_is_never_rewritten_even_by_controller() {
    let s = cm(SNAP, &[SNAP_LABEL]);
    let rewritten = with(&s, |v| {
        v["data"]["runtime"] = json!("kind: ClusterTrainingRuntime\nspec: {}\n")
    });
    let (field, message) = denied(&verdict(
        Resource::ConfigMap,
        Operation::Update,
        CONTROLLER,
        Mode::Plain,
        Some(&s),
        Some(&rewritten),
    ));
    assert_eq!(field, "data");
    assert!(message.contains("never rewritten"), "{message}");
}

#[test]
fn controller_may_adopt_a_snapshot_trainer_wrote() {
    let trainers = cm(SNAP, &[]);
    let adopted = with(&trainers, |v| {
        v["metadata"]["labels"][LABEL_RUNTIME_SNAPSHOT] = json!("true");
        v["metadata"]["annotations"] = json!({"holdfast.dev/runtime-sha256": "ab"});
    });
    assert!(
        verdict(
            Resource::ConfigMap,
            Operation::Update,
            CONTROLLER,
            Mode::Plain,
            Some(&trainers),
            Some(&adopted)
        )
        .is_allowed()
    );
}

#[test]
fn gc_may_orphan_a_snapshot_but_not_edit_it() {
    let s = cm(SNAP, &[SNAP_LABEL]);
    let orphaned = with(&s, |v| v["metadata"]["ownerReferences"] = json!([]));
    assert!(
        verdict(
            Resource::ConfigMap,
            Operation::Update,
            GC,
            Mode::Plain,
            Some(&s),
            Some(&orphaned)
        )
        .is_allowed()
    );
    let relabelled = with(&orphaned, |v| v["metadata"]["labels"] = json!({}));
    let (field, _) = denied(&verdict(
        Resource::ConfigMap,
        Operation::Update,
        GC,
        Mode::Plain,
        Some(&s),
        Some(&relabelled),
    ));
    assert_eq!(field, "metadata.labels");
}

#[test]
fn user_cannot_forge_a_hold_on_create() {
    let forged = tj(&[HOLD], &[], Some(true));
    let (field, message) = denied(&verdict(
        Resource::TrainJob,
        Operation::Create,
        ALICE,
        Mode::Plain,
        None,
        Some(&forged),
    ));
    assert_eq!(field, "metadata.annotations[holdfast.dev/hold-instance]");
    assert!(message.contains("may not add it"), "{message}");
}

#[test]
fn deny_message_names_field_and_who_may_change_it() {
    let old = tj(&[HOLD], &[], Some(true));
    let new = tj(&[(ANN_HOLD_INSTANCE, "4")], &[], Some(true));
    let (field, message) = denied(&verdict(
        Resource::TrainJob,
        Operation::Update,
        ALICE,
        Mode::Plain,
        Some(&old),
        Some(&new),
    ));
    assert_eq!(field, "metadata.annotations[holdfast.dev/hold-instance]");
    assert_eq!(
        message,
        "metadata.annotations[holdfast.dev/hold-instance] of TrainJob team-a/mnist is written only by \
         the holdfast controller (system:serviceaccount:holdfast-system:holdfast-controller); \
         user alice may not change it from \"3\" to \"4\" [rule controller-annotation-changed]"
    );
}

#[test]
fn dropped_annotation_that_was_not_restored_is_denied_as_removal() {
    let old = tj(&[(ANN_OPENED, "true")], &[], None);
    let new = tj(&[], &[], None);
    let (_, message) = denied(&verdict(
        Resource::TrainJob,
        Operation::Update,
        KUEUE,
        Mode::Plain,
        Some(&old),
        Some(&new),
    ));
    assert!(message.contains("may not remove it"), "{message}");
}

#[test]
fn kueue_mode_user_cannot_flip_suspend() {
    let old = tj(&[], &[QUEUED], Some(true));
    let new = tj(&[], &[QUEUED], Some(false));
    let (field, message) = denied(&verdict(
        Resource::TrainJob,
        Operation::Update,
        ALICE,
        Mode::Kueue,
        Some(&old),
        Some(&new),
    ));
    assert_eq!(field, "spec.suspend");
    assert!(
        message.contains(KUEUE) && message.contains("is Kueue's"),
        "{message}"
    );
}

#[test]
fn kueue_mode_controller_cannot_flip_suspend() {
    let old = tj(&[], &[QUEUED], Some(false));
    let new = tj(&[], &[QUEUED], Some(true));
    assert!(
        !verdict(
            Resource::TrainJob,
            Operation::Update,
            CONTROLLER,
            Mode::Kueue,
            Some(&old),
            Some(&new)
        )
        .is_allowed()
    );
}

#[test]
fn kueue_may_flip_suspend() {
    let old = tj(&[(ANN_OPENED, "true")], &[MANAGED, QUEUED], Some(true));
    let new = tj(&[(ANN_OPENED, "true")], &[MANAGED, QUEUED], Some(false));
    assert!(
        verdict(
            Resource::TrainJob,
            Operation::Update,
            KUEUE,
            Mode::Kueue,
            Some(&old),
            Some(&new)
        )
        .is_allowed()
    );
    assert!(
        verdict(
            Resource::TrainJob,
            Operation::Update,
            KUEUE,
            Mode::Kueue,
            Some(&new),
            Some(&old)
        )
        .is_allowed()
    );
}

#[test]
fn kueue_may_not_touch_hold_annotations_while_flipping_suspend() {
    let old = tj(&[HOLD], &[QUEUED], Some(false));
    let new = tj(&[], &[QUEUED], Some(true));
    assert!(
        !verdict(
            Resource::TrainJob,
            Operation::Update,
            KUEUE,
            Mode::Kueue,
            Some(&old),
            Some(&new)
        )
        .is_allowed()
    );
}

/// Seam: Kueue lets anyone drop the queue name of a suspended job and then ignores the job,
/// so a suspend rule keyed on the label was lifted in two requests. The rule now holds
/// whatever labels the old and new objects carry; only Kueue flips `spec.suspend`.
#[test]
fn kueue_mode_suspend_is_kueues_whatever_the_labels() {
    let unqueued = |s| tj(&[], &[], Some(s));
    let queued = |s| tj(&[], &[QUEUED], Some(s));
    let managed = |s| tj(&[(ANN_OPENED, "true")], &[MANAGED], Some(s));
    for (o, n) in [
        (unqueued(true), unqueued(false)),
        (unqueued(false), unqueued(true)),
        (queued(true), unqueued(false)),
        (unqueued(true), queued(false)),
        (managed(true), managed(false)),
    ] {
        for user in [ALICE, CONTROLLER, TRAINER] {
            let (field, message) = denied(&verdict(
                Resource::TrainJob,
                Operation::Update,
                user,
                Mode::Kueue,
                Some(&o),
                Some(&n),
            ));
            assert_eq!(field, "spec.suspend");
            assert!(message.contains("whatever labels"), "{message}");
        }
        assert!(
            verdict(
                Resource::TrainJob,
                Operation::Update,
                KUEUE,
                Mode::Kueue,
                Some(&o),
                Some(&n)
            )
            .is_allowed()
        );
    }
}

/// The first of the two requests is refused too: the queue name stays while the job is
/// suspended, and the message says who may change it.
#[test]
fn kueue_mode_queue_name_stays_while_suspended() {
    let (field, message) = denied(&verdict(
        Resource::TrainJob,
        Operation::Update,
        ALICE,
        Mode::Kueue,
        Some(&tj(&[], &[QUEUED], Some(true))),
        Some(&tj(&[], &[], Some(true))),
    ));
    assert_eq!(field, format!("metadata.labels[{QUEUE_NAME_LABEL}]"));
    assert!(
        message.contains("suspended") && message.contains(KUEUE),
        "{message}"
    );
}

/// Seam: a managed TrainJob without a queue name is never gated in Kueue mode; it is refused
/// at admission with what to add.
#[test]
fn kueue_mode_refuses_a_managed_trainjob_without_a_queue() {
    let (field, message) = denied(&verdict(
        Resource::TrainJob,
        Operation::Create,
        ALICE,
        Mode::Kueue,
        None,
        Some(&tj(&[], &[MANAGED], None)),
    ));
    assert_eq!(field, format!("metadata.labels[{QUEUE_NAME_LABEL}]"));
    assert!(
        message.contains(&format!("add {QUEUE_NAME_LABEL}: <local-queue>")),
        "{message}"
    );
}

/// Seam: dropping `holdfast.dev/managed` opened the start gate in Kueue mode.
#[test]
fn kueue_mode_managed_label_stays_at_the_closed_gate() {
    let gated = tj(&[], &[MANAGED, QUEUED], Some(true));
    let (field, message) = denied(&verdict(
        Resource::TrainJob,
        Operation::Update,
        ALICE,
        Mode::Kueue,
        Some(&gated),
        Some(&tj(&[], &[QUEUED], Some(true))),
    ));
    assert_eq!(field, format!("metadata.labels[{LABEL_MANAGED}]"));
    assert!(message.contains("start gate is closed"), "{message}");
}

#[test]
fn held_workload_cannot_be_reactivated() {
    let held = wl(&[HOLD], Some(false));
    let reactivated = wl(&[HOLD], Some(true));
    for user in [ALICE, KUEUE, TRAINER, GC] {
        let (field, message) = denied(&verdict(
            Resource::Workload,
            Operation::Update,
            user,
            Mode::Kueue,
            Some(&held),
            Some(&reactivated),
        ));
        assert_eq!(field, "spec.active");
        assert!(message.contains("hold 3"), "{message}");
    }
    assert!(
        verdict(
            Resource::Workload,
            Operation::Update,
            CONTROLLER,
            Mode::Kueue,
            Some(&held),
            Some(&reactivated)
        )
        .is_allowed()
    );
}

#[test]
fn hold_finalizer_is_written_only_by_the_controller() {
    let with = |fin: bool| {
        let mut w = wl(&[HOLD], Some(false));
        if fin {
            w["metadata"]["finalizers"] = serde_json::json!([
                "kueue.x-k8s.io/resource-in-use",
                crate::names::HOLD_FINALIZER
            ]);
        } else {
            w["metadata"]["finalizers"] = serde_json::json!(["kueue.x-k8s.io/resource-in-use"]);
        }
        w
    };
    for (old, new) in [(true, false), (false, true)] {
        for user in [ALICE, KUEUE, TRAINER, GC] {
            let (field, message) = denied(&verdict(
                Resource::Workload,
                Operation::Update,
                user,
                Mode::Kueue,
                Some(&with(old)),
                Some(&with(new)),
            ));
            assert_eq!(field, "metadata.finalizers");
            assert!(message.contains(crate::names::HOLD_FINALIZER), "{message}");
        }
        assert!(
            verdict(
                Resource::Workload,
                Operation::Update,
                CONTROLLER,
                Mode::Kueue,
                Some(&with(old)),
                Some(&with(new))
            )
            .is_allowed()
        );
    }
    // Kueue dropping its own finalizer while ours stays is none of our business.
    let mut kueue_done = with(true);
    kueue_done["metadata"]["finalizers"] = serde_json::json!([crate::names::HOLD_FINALIZER]);
    assert!(
        verdict(
            Resource::Workload,
            Operation::Update,
            KUEUE,
            Mode::Kueue,
            Some(&with(true)),
            Some(&kueue_done)
        )
        .is_allowed()
    );
}

#[test]
fn plain_mode_held_trainjob_cannot_be_unsuspended() {
    let held = tj(&[HOLD], &[], Some(true));
    let unsuspended = tj(&[HOLD], &[], Some(false));
    for user in [ALICE, KUEUE, TRAINER] {
        let (field, message) = denied(&verdict(
            Resource::TrainJob,
            Operation::Update,
            user,
            Mode::Plain,
            Some(&held),
            Some(&unsuspended),
        ));
        assert_eq!(field, "spec.suspend");
        assert!(message.contains("held (hold 3"), "{message}");
    }
    assert!(
        verdict(
            Resource::TrainJob,
            Operation::Update,
            CONTROLLER,
            Mode::Plain,
            Some(&held),
            Some(&unsuspended)
        )
        .is_allowed()
    );
}

#[test]
fn start_gate_is_opened_only_by_the_controller() {
    let gated = tj(&[], &[MANAGED], Some(true));
    let run = tj(&[], &[MANAGED], Some(false));
    let (_, message) = denied(&verdict(
        Resource::TrainJob,
        Operation::Update,
        ALICE,
        Mode::Plain,
        Some(&gated),
        Some(&run),
    ));
    assert!(
        message.contains("start gate is closed") && message.contains("Open"),
        "{message}"
    );
    let open = tj(&[(ANN_OPENED, "true")], &[MANAGED], Some(false));
    assert!(
        verdict(
            Resource::TrainJob,
            Operation::Update,
            CONTROLLER,
            Mode::Plain,
            Some(&gated),
            Some(&open)
        )
        .is_allowed()
    );
}

#[test]
fn start_gate_label_cannot_be_dropped_to_escape_it() {
    let gated = tj(&[], &[MANAGED], Some(true));
    let unlabelled = tj(&[], &[], Some(true));
    let (field, _) = denied(&verdict(
        Resource::TrainJob,
        Operation::Update,
        ALICE,
        Mode::Plain,
        Some(&gated),
        Some(&unlabelled),
    ));
    assert_eq!(field, "metadata.labels[holdfast.dev/managed]");
}

#[test]
fn subresource_status_is_allowed() {
    let held = tj(&[HOLD], &[], Some(true));
    let mut i = input(
        Resource::TrainJob,
        Operation::Update,
        ALICE,
        Some(&held),
        Some(&tj(&[], &[], Some(false))),
    );
    i.subresource = Some("status".into());
    assert!(validate(&i, &who(), Mode::Plain).is_allowed());
}

#[test]
fn malformed_update_of_a_protected_kind_is_denied_clearly() {
    let (field, message) = denied(&verdict(
        Resource::TrainJob,
        Operation::Update,
        ALICE,
        Mode::Plain,
        Some(&json!("x")),
        Some(&tj(&[], &[], None)),
    ));
    assert_eq!(field, "oldObject");
    assert!(
        message.starts_with("malformed admission request: oldObject is a string"),
        "{message}"
    );
}

#[test]
fn garbage_fields_never_panic() {
    let garbage = [
        json!(null),
        json!(true),
        json!(1),
        json!("s"),
        json!([]),
        json!({}),
        json!({"metadata": 1}),
        json!({"metadata": {"annotations": [1], "labels": "x", "name": 5}}),
        json!({"metadata": {"annotations": {ANN_HOLD_INSTANCE: 3}}, "spec": [true]}),
        json!({"spec": {"suspend": "true", "active": 0}, "data": 1}),
    ];
    let resources = [Resource::ConfigMap, Resource::TrainJob, Resource::Workload];
    for r in &resources {
        for op in [
            Operation::Create,
            Operation::Update,
            Operation::Delete,
            Operation::Connect,
        ] {
            for o in &garbage {
                for n in &garbage {
                    for mode in [Mode::Plain, Mode::Kueue] {
                        for user in ["", ALICE, CONTROLLER] {
                            let _ = validate(
                                &input(r.clone(), op, user, Some(o), Some(n)),
                                &who(),
                                mode,
                            );
                        }
                    }
                }
            }
        }
    }
}

// ---- The cluster-backed checks: which requests need them, and their verdicts -------------

fn uid(v: &Value, u: &str) -> Value {
    with(v, |v| v["metadata"]["uid"] = json!(u))
}

#[test]
fn kueue_unsuspend_is_checked_against_the_workloads_holds() {
    use crate::policy::{unsuspend_check, unsuspend_verdict};
    let old = uid(&tj(&[], &[QUEUED], Some(true)), "u-1");
    let new = uid(&tj(&[], &[QUEUED], Some(false)), "u-1");
    let up = input(
        Resource::TrainJob,
        Operation::Update,
        KUEUE,
        Some(&old),
        Some(&new),
    );
    let check = unsuspend_check(&up, &who(), Mode::Kueue).expect("an unsuspend is checked");
    assert_eq!(
        (
            check.namespace.as_str(),
            check.name.as_str(),
            check.uid.as_str()
        ),
        ("team-a", "mnist", "u-1")
    );
    // Not in plain mode for a job without holdfast state, not a suspension, not a no-op,
    // not a create.
    assert_eq!(unsuspend_check(&up, &who(), Mode::Plain), None);
    let down = input(
        Resource::TrainJob,
        Operation::Update,
        KUEUE,
        Some(&new),
        Some(&old),
    );
    assert_eq!(unsuspend_check(&down, &who(), Mode::Kueue), None);
    let same = input(
        Resource::TrainJob,
        Operation::Update,
        KUEUE,
        Some(&old),
        Some(&old),
    );
    assert_eq!(unsuspend_check(&same, &who(), Mode::Kueue), None);
    let create = input(
        Resource::TrainJob,
        Operation::Create,
        KUEUE,
        None,
        Some(&new),
    );
    assert_eq!(unsuspend_check(&create, &who(), Mode::Kueue), None);

    assert!(unsuspend_verdict(&up, Ok(None)).is_allowed());
    let (field, message) = denied(&unsuspend_verdict(&up, Ok(Some("3".to_owned()))));
    assert_eq!(field, "spec.suspend");
    assert!(message.contains("carries hold 3"), "{message}");
    let (_, message) = denied(&unsuspend_verdict(&up, Err("timed out".to_owned())));
    assert!(
        message.contains("timed out") && message.contains("retry"),
        "{message}"
    );
}

#[test]
fn kueue_queued_trainjob_is_checked_against_its_queue_managed_or_not() {
    use crate::policy::{QueueProblem, queue_check, queue_verdict};
    let plain = tj(&[], &[QUEUED], None);
    let managed = tj(&[], &[QUEUED, MANAGED], None);
    for (obj, is_managed) in [(&plain, false), (&managed, true)] {
        let create = input(
            Resource::TrainJob,
            Operation::Create,
            ALICE,
            None,
            Some(obj),
        );
        let check = queue_check(&create, &who(), Mode::Kueue).expect("checked");
        assert_eq!(check.local_queue, "team-queue");
        assert_eq!(check.managed, is_managed);
        assert!(queue_verdict(&create, &check, None).is_allowed());
        let (field, message) = denied(&queue_verdict(
            &create,
            &check,
            Some(QueueProblem::Ungated("ClusterQueue cq lacks the check")),
        ));
        assert_eq!(field, format!("metadata.labels[{QUEUE_NAME_LABEL}]"));
        assert!(message.contains("cq lacks the check"), "{message}");
        // A queue not known yet keeps only a managed job out: nothing would gate it.
        assert_eq!(
            queue_verdict(
                &create,
                &check,
                Some(QueueProblem::Unresolved("no LocalQueue"))
            )
            .is_allowed(),
            !is_managed
        );
        // The controller's own writes, and plain mode, are not checked.
        let by_controller = input(
            Resource::TrainJob,
            Operation::Create,
            CONTROLLER,
            None,
            Some(obj),
        );
        assert_eq!(queue_check(&by_controller, &who(), Mode::Kueue), None);
        assert_eq!(queue_check(&create, &who(), Mode::Plain), None);
    }
    // An update that keeps the queue is not checked again; one that moves it is.
    let same = input(
        Resource::TrainJob,
        Operation::Update,
        ALICE,
        Some(&plain),
        Some(&plain),
    );
    assert_eq!(queue_check(&same, &who(), Mode::Kueue), None);
    let moved = with(&plain, |v| {
        v["metadata"]["labels"][QUEUE_NAME_LABEL] = json!("other")
    });
    let update = input(
        Resource::TrainJob,
        Operation::Update,
        ALICE,
        Some(&plain),
        Some(&moved),
    );
    assert_eq!(
        queue_check(&update, &who(), Mode::Kueue).map(|c| c.local_queue),
        Some("other".to_owned())
    );
}

#[test]
fn plain_mode_checks_an_unsuspend_of_a_job_with_holdfast_state_against_its_workloads_holds() {
    use crate::policy::unsuspend_check;
    // A job that ran under holdfast (A on it) and was held in kueue mode: the hold is on its
    // Workload, which the TrainJob's fields do not show.
    let old = uid(&tj(&[(ANN_ATTEMPT, "1")], &[QUEUED], Some(true)), "u-1");
    let new = uid(&tj(&[(ANN_ATTEMPT, "1")], &[], Some(false)), "u-1");
    for user in [ALICE, KUEUE, TRAINER] {
        let up = input(
            Resource::TrainJob,
            Operation::Update,
            user,
            Some(&old),
            Some(&new),
        );
        let check = unsuspend_check(&up, &who(), Mode::Plain).expect("checked");
        assert_eq!(check.uid, "u-1", "{user}");
    }
    // The controller's own writes are not (the chart does not send them).
    let up = input(
        Resource::TrainJob,
        Operation::Update,
        CONTROLLER,
        Some(&old),
        Some(&new),
    );
    assert_eq!(unsuspend_check(&up, &who(), Mode::Plain), None);
    // A job without holdfast state is not sent, so not checked.
    let bare_old = uid(&tj(&[], &[], Some(true)), "u-1");
    let bare_new = uid(&tj(&[], &[], Some(false)), "u-1");
    let up = input(
        Resource::TrainJob,
        Operation::Update,
        ALICE,
        Some(&bare_old),
        Some(&bare_new),
    );
    assert_eq!(unsuspend_check(&up, &who(), Mode::Plain), None);
}

#[test]
fn in_kueue_mode_nobody_unsuspends_a_trainjob_carrying_a_plain_mode_hold_kueue_included() {
    let held = tj(
        &[HOLD, (ANN_ATTEMPT, "1"), (ANN_OPENED, "true")],
        &[QUEUED],
        Some(true),
    );
    let running = suspend(&held, Some(false));
    for user in EVERYONE {
        let v = validate(
            &input(
                Resource::TrainJob,
                Operation::Update,
                user,
                Some(&held),
                Some(&running),
            ),
            &who(),
            Mode::Kueue,
        );
        let (field, message) = denied(&v);
        assert_eq!(field, "spec.suspend", "{user}");
        assert!(message.contains(user), "{message}");
    }
    let (_, message) = denied(&validate(
        &input(
            Resource::TrainJob,
            Operation::Update,
            KUEUE,
            Some(&held),
            Some(&running),
        ),
        &who(),
        Mode::Kueue,
    ));
    assert!(
        message.contains("hold 3") && message.contains("plain mode"),
        "{message}"
    );
    // Without the hold, Kueue unsuspends as ever; and Kueue may still suspend a held job.
    let free = drop_ann(&held, ANN_HOLD_INSTANCE);
    let v = validate(
        &input(
            Resource::TrainJob,
            Operation::Update,
            KUEUE,
            Some(&free),
            Some(&suspend(&free, Some(false))),
        ),
        &who(),
        Mode::Kueue,
    );
    assert!(v.is_allowed(), "{v:?}");
    let v = validate(
        &input(
            Resource::TrainJob,
            Operation::Update,
            KUEUE,
            Some(&running),
            Some(&held),
        ),
        &who(),
        Mode::Kueue,
    );
    assert!(v.is_allowed(), "{v:?}");
}

#[test]
fn in_plain_mode_a_workload_held_in_kueue_mode_stays_inactive_in_its_queue_and_its_jobs() {
    let owner = json!([{"apiVersion": "trainer.kubeflow.org/v1alpha1", "kind": "TrainJob",
        "name": "mnist", "uid": "u-1", "controller": true}]);
    let held = with(&wl(&[HOLD], Some(false)), |w| {
        w["metadata"]["ownerReferences"] = owner.clone();
        w["metadata"]["labels"] = json!({"kueue.x-k8s.io/job-uid": "u-1"});
    });
    let edits = [
        ("activated", active(&held, Some(true))),
        (
            "moved",
            with(&held, |w| w["spec"]["queueName"] = json!("elsewhere")),
        ),
        (
            "disowned",
            with(&held, |w| w["metadata"]["ownerReferences"] = json!([])),
        ),
        (
            "unlabelled",
            with(&held, |w| w["metadata"]["labels"] = json!({})),
        ),
    ];
    for (what, edit) in &edits {
        for user in [ALICE, TRAINER] {
            let v = validate(
                &input(
                    Resource::Workload,
                    Operation::Update,
                    user,
                    Some(&held),
                    Some(edit),
                ),
                &who(),
                Mode::Plain,
            );
            assert!(!v.is_allowed(), "{what} by {user}: {v:?}");
        }
        let v = validate(
            &input(
                Resource::Workload,
                Operation::Update,
                CONTROLLER,
                Some(&held),
                Some(edit),
            ),
            &who(),
            Mode::Plain,
        );
        assert!(v.is_allowed(), "{what} by the controller: {v:?}");
    }
    // A Workload without a hold is not holdfast's business in plain mode.
    let free = drop_ann(&held, ANN_HOLD_INSTANCE);
    let v = validate(
        &input(
            Resource::Workload,
            Operation::Update,
            ALICE,
            Some(&free),
            Some(&active(&free, Some(true))),
        ),
        &who(),
        Mode::Plain,
    );
    assert!(v.is_allowed(), "{v:?}");
}

#[test]
fn the_arming_probe_is_denied_only_as_a_dry_run_create() {
    let probe = cm("hf-fences", &[(crate::arming::LABEL_PROBE, "true")]);
    let mut dry = input(
        Resource::ConfigMap,
        Operation::Create,
        CONTROLLER,
        None,
        Some(&probe),
    );
    dry.dry_run = true;
    for mode in BOTH {
        match validate(&dry, &who(), *mode) {
            Verdict::Deny { message, .. } => {
                assert!(message.contains("arming probe"), "{message}")
            }
            Verdict::Allow => panic!("the probe was allowed"),
        }
    }
    // The same create for real is judged as any ConfigMap (not a snapshot: allowed).
    dry.dry_run = false;
    assert_eq!(validate(&dry, &who(), Mode::Plain), Verdict::Allow);
    // Anyone else's labelled dry run is judged as any ConfigMap, not as the probe.
    let plain = cm("hf-fences", &[(crate::arming::LABEL_PROBE, "true")]);
    let mut alice = input(
        Resource::ConfigMap,
        Operation::Create,
        ALICE,
        None,
        Some(&plain),
    );
    alice.dry_run = true;
    assert_eq!(validate(&alice, &who(), Mode::Plain), Verdict::Allow);
}
