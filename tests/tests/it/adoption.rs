//! The removal walkthroughs of the chart README ("Uninstall": lifting the holds left in
//! force), step by step against the real apiserver and, in kueue mode, the real Kueue: the
//! writes the README's kubectl commands make (made through the API here), and that they bring
//! the held job back.

use std::time::Duration;

use holdfast_core::hold::Outcome;
use holdfast_core::names::{ANN_HOLD_INSTANCE, ANN_HOLD_MARK, HOLD_FINALIZER};
use holdfast_tests::hold_support::{
    self, annotation, create_trainjob, executor, hold_annotations, meta, read_trainjob, suspended,
};
use holdfast_tests::kueue_support::{CHECK, Fixture, MINUTE, Webhook, active, finalizers, refused};
use holdfast_tests::{ControlPlane, Identity};
use kube::api::{Api, DynamicObject, Patch, PatchParams};
use serde_json::{Value, json};

/// The chart README's by-hand lift of a hold left on `obj` after holdfast is gone: remove
/// the hold's `holdfast.dev/hold-*` annotations and the `holdfast.dev/hold` finalizer (a JSON patch that
/// tests each position, so no other finalizer is touched), then the documented `spec` change.
fn lift_by_hand(obj: &Value, spec: Value) -> (Patch<Value>, Patch<Value>) {
    let mut ops = Vec::new();
    for key in hold_annotations(obj) {
        let path = format!(
            "/metadata/annotations/{}",
            key.replace('~', "~0").replace('/', "~1")
        );
        ops.push(json!({"op": "remove", "path": path}));
    }
    if let Some(i) = finalizers(obj).iter().position(|f| f == HOLD_FINALIZER) {
        ops.push(json!({"op": "test", "path": format!("/metadata/finalizers/{i}"), "value": HOLD_FINALIZER}));
        ops.push(json!({"op": "remove", "path": format!("/metadata/finalizers/{i}")}));
    }
    let marks = serde_json::from_value(Value::from(ops)).expect("a JSON patch");
    (Patch::Json(marks), Patch::Merge(json!({ "spec": spec })))
}

/// The README's step for a ClusterQueue: the readmission check taken out of whichever list
/// names it (`spec.admissionChecks`, or `spec.admissionChecksStrategy.admissionChecks`), every
/// other check kept (a list left empty goes: Kueue refuses an empty one); a merge patch.
fn without_check(queue: &Value, check: &str) -> Value {
    let spec = &queue["spec"];
    let mut patch = json!({"spec": {}});
    if let Some(list) = spec["admissionChecks"].as_array() {
        let kept: Vec<&Value> = list.iter().filter(|c| c.as_str() != Some(check)).collect();
        patch["spec"]["admissionChecks"] = if kept.is_empty() {
            Value::Null
        } else {
            json!(kept)
        };
    }
    if let Some(list) = spec["admissionChecksStrategy"]["admissionChecks"].as_array() {
        let kept: Vec<&Value> = list
            .iter()
            .filter(|c| c["name"].as_str() != Some(check))
            .collect();
        // Kueue refuses an empty strategy list: the strategy goes with its last check.
        patch["spec"]["admissionChecksStrategy"] = if kept.is_empty() {
            Value::Null
        } else {
            json!({"admissionChecks": kept})
        };
    }
    assert_ne!(
        patch,
        json!({"spec": {}}),
        "the ClusterQueue names the check: {queue:#}"
    );
    patch
}

/// Plain mode: holdfast removed with a hold in force leaves the TrainJob suspended with the
/// hold's annotations; the README's commands (annotations off, `spec.suspend: false`) start it
/// again. The suspension is the TrainJob's own field, so nothing else needs undoing.
#[tokio::test]
async fn removing_holdfast_in_plain_mode_leaves_the_hold_until_its_marks_and_suspend_are_lifted_by_hand()
 {
    let cp = ControlPlane::shared();
    // The kueue walkthrough shares this control plane: Kueue's TrainJob webhook must answer
    // before a TrainJob can be created at all.
    cp.start_kueue().await.expect("kueue starts");
    let ns = cp.namespace("adopt-plain").await.expect("namespace");
    create_trainjob(cp, &ns, "job", false).await;
    assert_eq!(
        executor(cp)
            .await
            .hold(&ns, "job", meta(Some(3), Duration::from_secs(60)))
            .await,
        Ok(Outcome::Held)
    );
    // holdfast is gone (this topic registers no webhook): the hold stays in force.
    let held = read_trainjob(cp, &ns, "job").await;
    assert!(suspended(&held));
    assert_eq!(annotation(&held, ANN_HOLD_INSTANCE), Some("3"));

    let admin = cp.client(Identity::Admin).await.expect("admin");
    let trainjobs = hold_support::trainjobs(&admin, &ns);
    let (marks, resume) = lift_by_hand(&held, json!({"suspend": false}));
    let pp = PatchParams::default();
    trainjobs
        .patch("job", &pp, &marks)
        .await
        .expect("annotations off");
    trainjobs.patch("job", &pp, &resume).await.expect("resume");
    let lifted = read_trainjob(cp, &ns, "job").await;
    assert!(!suspended(&lifted), "the job runs again");
    assert!(hold_annotations(&lifted).is_empty(), "{lifted:#}");
}

/// Kueue mode: a hold in force is the Workload's `spec.active: false`, its annotations and the
/// `holdfast.dev/hold` finalizer. While holdfast is installed the by-hand lift is refused (only
/// the controller writes hold state). Uninstalled, the README's steps — take the readmission
/// check off the ClusterQueue (nothing would pass it any more), then the marks and the
/// finalizer off the Workload and `spec.active: true` — let Kueue admit it again and unsuspend
/// the TrainJob; the Workload then deletes like any other.
#[tokio::test]
async fn removing_holdfast_in_kueue_mode_needs_the_check_off_the_queue_and_the_workload_lifted_by_hand()
 {
    let mut f = Fixture::start("adopt-kueue").await;
    f.create_job("job", json!({})).await;
    f.open_and_run("job").await;
    let mut m = meta(Some(4), MINUTE);
    m.reason = Some("drain".into());
    assert_eq!(f.exec.hold(&f.ns, "job", m).await, Ok(Outcome::Held));
    let held = f.workload_when("job", "held", |w| !active(w)).await;
    assert!(finalizers(&held).contains(&HOLD_FINALIZER.to_owned()));
    let workloads = f.workload_api(&f.admin);
    let pp = PatchParams::default();
    // As the README finds it: by the TrainJob's uid in Kueue's job-uid label.
    let job_uid = f.trainjob("job").await["metadata"]["uid"]
        .as_str()
        .expect("uid")
        .to_owned();
    let found = workloads
        .list(
            &kube::api::ListParams::default().labels(&format!("kueue.x-k8s.io/job-uid={job_uid}")),
        )
        .await
        .expect("the Workloads of the job");
    let names: Vec<String> = found
        .items
        .iter()
        .filter_map(|w| w.metadata.name.clone())
        .collect();
    assert_eq!(
        names.len(),
        1,
        "one Workload by the job-uid label: {names:?}"
    );
    let name = names[0].clone();
    assert_eq!(held["metadata"]["name"].as_str(), Some(name.as_str()));

    // Installed, the by-hand lift is refused, to a cluster admin too.
    let webhook = Webhook::serve(&f).await;
    let (marks, resume) = lift_by_hand(&held, json!({"active": true}));
    let message = refused(workloads.patch(&name, &pp, &marks).await);
    assert!(message.contains("holdfast"), "{message}");

    // `helm uninstall`: the webhook and the controller (its readmission gate) go.
    webhook.stop().await;
    f.stop_gate().await;
    // The apiserver drops each removed configuration and admission policy from its cache on
    // its own (validation.engine policy: a moment later): wait until the lift is no longer
    // refused (a dry run).
    let dry = PatchParams {
        dry_run: true,
        ..Default::default()
    };
    f.eventually(
        "holdfast's admission is gone",
        Duration::from_secs(30),
        || async { workloads.patch(&name, &dry, &marks).await.ok().map(|_| ()) },
    )
    .await;
    // Step 1: the ClusterQueue no longer requires the readmission check.
    let queues: Api<DynamicObject> = Api::all_with(
        f.admin.clone(),
        &holdfast_cluster::resources::cluster_queue(),
    );
    let cq = format!("cq-{}", f.ns);
    let queue = queues.get(&cq).await.expect("the ClusterQueue");
    queues
        .patch(&cq, &pp, &Patch::Merge(without_check(&queue.data, CHECK)))
        .await
        .expect("the check off the ClusterQueue");
    // Step 2: the hold's marks and finalizer off the Workload, then active again.
    workloads
        .patch(&name, &pp, &marks)
        .await
        .expect("marks and finalizer off");
    workloads.patch(&name, &pp, &resume).await.expect("active");
    let tj = f
        .job_when("job", "Kueue admits it again and it runs", |tj| {
            tj["spec"]["suspend"] == false
        })
        .await;
    // The TrainJob keeps only the hold's mark (inert without holdfast); the book's step 3
    // takes it off too.
    assert_eq!(
        hold_annotations(&tj),
        vec![ANN_HOLD_MARK.to_owned()],
        "{tj:#}"
    );
    let (unmark, _) = lift_by_hand(&tj, json!({}));
    f.trainjobs(&f.admin)
        .patch("job", &pp, &unmark)
        .await
        .expect("the mark off the TrainJob");
    let tj = f.trainjob("job").await;
    assert!(hold_annotations(&tj).is_empty(), "{tj:#}");
    let lifted = f.workload_when("job", "admitted, no hold", active).await;
    assert!(
        !finalizers(&lifted).contains(&HOLD_FINALIZER.to_owned()),
        "{:#}",
        lifted["metadata"]
    );
    assert!(hold_annotations(&lifted).is_empty());
    f.finish().await;
}
