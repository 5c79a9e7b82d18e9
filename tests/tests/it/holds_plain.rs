//! Holds in plain mode against the real apiserver, one test per rule of the seed
//! (holds-are-workload-deactivation), and the hold API over HTTPS.

use holdfast_tests::hold_support;

use std::{
    sync::{
        Arc,
        atomic::{AtomicBool, AtomicU64, Ordering},
    },
    time::Duration,
};

use futures::FutureExt;
use hold_support::api::*;
use hold_support::*;
use holdfast_controller::hold::{HoldExecutor, Hooks, MetricCall, WritePoint};
use holdfast_core::{
    hold::{HoldError, Outcome, RejectCause},
    names::{ANN_ATTEMPT, ANN_HOLD_INSTANCE, ANN_HOLD_PLACED_AT, ANN_HOLD_REASON, ANN_OPENED},
};
use holdfast_tests::scene::Scene;
use holdfast_tests::{ControlPlane, Identity, execution_owners};
use k8s_openapi::api::{core::v1::Pod, rbac::v1::RoleBinding};
use kube::api::{Api, DeleteParams, Patch, PatchParams, PostParams};
use serde_json::{Value, json};

const MINUTE: Duration = Duration::from_secs(60);

/// The controller's requests on TrainJob `name` (not its pods).
fn on_trainjob<'a>(events: &'a [Value], ns: &str, name: &str) -> Vec<&'a Value> {
    controller_requests(events, ns)
        .into_iter()
        .filter(|e| {
            resource(e) == "trainjobs"
                && e.pointer("/objectRef/name").and_then(Value::as_str) == Some(name)
        })
        .collect()
}

fn updates<'a>(events: &[&'a Value]) -> Vec<&'a Value> {
    events
        .iter()
        .copied()
        .filter(|e| matches!(verb(e), "update" | "patch"))
        .collect()
}

/// An executor whose hook runs `f` between each read and its write.
fn with_hook<F, Fut>(exec: HoldExecutor, f: F) -> HoldExecutor
where
    F: Fn(WritePoint) -> Fut + Send + Sync + 'static,
    Fut: std::future::Future<Output = ()> + Send + 'static,
{
    exec.with_hooks(Hooks {
        between_read_and_write: Some(Arc::new(move |p| f(p).boxed())),
    })
}

#[tokio::test]
async fn hold_lands_with_all_annotations_in_one_update() {
    let s = Scene::new("hold-one").await;
    let ns = &s.ns;
    s.job("mnist", false).await;
    let exec = s.executor().await;

    let mut m = meta(Some(3), MINUTE);
    m.reason = Some("node lost".into());
    let before = jiff::Timestamp::now();
    let outcome = exec.hold(ns, "mnist", m).await.expect("hold");
    assert_eq!(outcome, Outcome::Held);

    let tj = s.read("mnist").await;
    assert!(suspended(&tj), "the hold is spec.suspend: true");
    assert_eq!(annotation(&tj, ANN_HOLD_INSTANCE), Some("3"));
    assert_eq!(annotation(&tj, ANN_HOLD_REASON), Some("node lost"));
    let placed = annotation(&tj, ANN_HOLD_PLACED_AT).expect("placed-at");
    let placed = holdfast_core::rfc3339::parse(placed).expect("RFC 3339");
    assert!(placed.as_second() >= before.as_second() - 1, "{placed}");

    let events = settled_audit(s.cp).await;
    let mine = on_trainjob(&events, ns, "mnist");
    let writes = updates(&mine);
    assert_eq!(
        writes.len(),
        1,
        "exactly one update by the controller: {writes:#?}"
    );
    assert_eq!(verb(writes[0]), "update", "a PUT, preconditioned");
    assert_eq!(code(writes[0]), 200);
    assert_eq!(mine.len(), 2, "one read and one write: {mine:#?}");
}

/// A Workload `name` owned by TrainJob `trainjob` (as Kueue makes one), with `annotations`.
fn owned_workload(name: &str, trainjob: &Value, annotations: Value) -> kube::api::DynamicObject {
    serde_json::from_value(json!({
        "apiVersion": holdfast_tests::kueue::KUEUE_API_VERSION, "kind": "Workload",
        "metadata": {"name": name, "annotations": annotations,
            "ownerReferences": [{"apiVersion": "trainer.kubeflow.org/v1alpha1",
                "kind": "TrainJob", "name": trainjob["metadata"]["name"],
                "uid": trainjob["metadata"]["uid"], "controller": true}]},
        "spec": {"active": false, "queueName": "q", "podSets": [{"name": "node", "count": 1,
            "template": {"spec": {"containers": [{"name": "node", "image": "busybox"}]}}}]}
    }))
    .expect("workload")
}

fn workloads(client: &kube::Client, ns: &str) -> Api<kube::api::DynamicObject> {
    Api::namespaced_with(client.clone(), ns, &holdfast_cluster::resources::workload())
}

/// Plain mode honours a hold left on a Workload from kueue mode, yet a call on a job whose
/// Workloads carry no hold's marks reads no Workload: the executor watches the marks
/// (metadata only), so the call sends the apiserver the TrainJob's GET and its PUT, as a raw
/// read-and-update would, even with a Workload the job owns (as Kueue makes one).
#[tokio::test]
async fn a_hold_on_a_job_whose_workloads_carry_no_hold_sends_only_its_read_and_its_write() {
    let s = Scene::new("hold-pair").await;
    let ns = &s.ns;
    let tj = s.job("mnist", false).await;
    let admin = s.admin.clone();
    workloads(&admin, ns)
        .create(
            &PostParams::default(),
            &owned_workload("unheld", &tj, json!({"other": "x"})),
        )
        .await
        .expect("an unheld Workload the job owns");
    let exec = s.executor().await;
    assert!(exec.workloads_listed(MINUTE).await, "the watch lists");

    assert_eq!(
        exec.hold(ns, "mnist", meta(Some(1), MINUTE)).await,
        Ok(Outcome::Held)
    );
    let events = settled_audit(s.cp).await;
    let calls: Vec<(&str, &str)> = controller_requests(&events, ns)
        .into_iter()
        .map(|e| (verb(e), resource(e)))
        .collect();
    assert_eq!(
        calls,
        [("get", "trainjobs"), ("update", "trainjobs")],
        "the hold's requests in its namespace"
    );
}

/// The watch's other side: a Workload carrying a hold's marks, seen after the watch listed,
/// sends the job's calls to the apiserver for its Workloads, so the hold on it is read fresh
/// and honoured (the call acts in kueue mode, as after a switch, and a stale instance is
/// refused).
#[tokio::test]
async fn a_workload_carrying_a_hold_is_read_fresh_once_the_watch_sees_its_marks() {
    let s = Scene::new("hold-marked").await;
    let ns = &s.ns;
    let tj = s.job("mnist", true).await;
    let exec = s.executor().await;
    assert!(exec.workloads_listed(MINUTE).await, "the watch lists");
    assert_eq!(
        exec.status(ns, "mnist").await.expect("status").mode,
        holdfast_core::mode::Mode::Plain
    );
    // As kueue mode leaves a held Workload (here written by cluster-admin: no webhook runs in
    // this test).
    let admin = s.admin.clone();
    workloads(&admin, ns)
        .create(
            &PostParams::default(),
            &owned_workload("held", &tj, json!({ANN_HOLD_INSTANCE: "4"})),
        )
        .await
        .expect("a held Workload the job owns");
    let status = holdfast_tests::wait::wait_for(
        "the hold on the Workload to be seen",
        Duration::from_secs(30),
        || async {
            let status = exec.status(ns, "mnist").await.expect("status");
            (status.mode == holdfast_core::mode::Mode::Kueue).then_some(status)
        },
    )
    .await;
    assert_eq!(status.hold.and_then(|h| h.instance), Some(4));
    let stale = exec.release(ns, "mnist", meta(Some(3), MINUTE)).await;
    assert_eq!(
        stale.expect_err("stale").cause(),
        Some(RejectCause::StaleHold)
    );
    let events = settled_audit(s.cp).await;
    let listed = controller_requests(&events, ns)
        .into_iter()
        .filter(|e| verb(e) == "list" && resource(e) == "workloads")
        .count();
    assert!(listed >= 1, "the Workloads were read from the apiserver");
}

#[tokio::test]
async fn release_removes_all_hold_annotations() {
    let s = Scene::new("release").await;
    let ns = &s.ns;
    s.job("mnist", true).await;
    let exec = s.executor().await;

    assert_eq!(
        exec.open(ns, "mnist", meta(None, MINUTE)).await,
        Ok(Outcome::Opened { started: true })
    );
    let mut m = meta(Some(1), MINUTE);
    m.reason = Some("node lost".into());
    exec.hold(ns, "mnist", m).await.expect("hold");
    let held = s.read("mnist").await;
    // instance, reason, placed-at and holder
    assert_eq!(hold_annotations(&held).len(), 4, "{held:#}");

    let outcome = exec.release(ns, "mnist", meta(Some(1), MINUTE)).await;
    assert_eq!(outcome, Ok(Outcome::Released { resumed: true }));
    let tj = s.read("mnist").await;
    assert!(
        hold_annotations(&tj).is_empty(),
        "every hold annotation is gone: {tj:#}"
    );
    assert!(!suspended(&tj), "opened and not ended: it runs again");
    assert_eq!(annotation(&tj, ANN_ATTEMPT), Some("2"), "A rose with it");
    assert_eq!(annotation(&tj, ANN_OPENED), Some("true"));

    // The release was one update, with A, the stop and the annotations together.
    let events = settled_audit(s.cp).await;
    let writes = updates(&on_trainjob(&events, ns, "mnist"));
    assert_eq!(writes.len(), 3, "open, hold, release: {writes:#?}");
}

#[tokio::test]
async fn delayed_stale_hold_is_rejected() {
    let s = Scene::new("stale").await;
    let ns = &s.ns;
    let exec = s.executor().await;

    // Hold 1 arrives after hold 2 has landed.
    s.job("late", false).await;
    exec.hold(ns, "late", meta(Some(2), MINUTE))
        .await
        .expect("hold 2");
    let before = s.read("late").await;
    let err = exec
        .hold(ns, "late", meta(Some(1), MINUTE))
        .await
        .expect_err("hold 1 is stale");
    assert_eq!(err.cause(), Some(RejectCause::StaleHold), "{err}");
    assert_eq!(err.http_status(), 409);
    let after = s.read("late").await;
    assert_eq!(annotation(&after, ANN_HOLD_INSTANCE), Some("2"));
    assert_eq!(
        resource_version(&after),
        resource_version(&before),
        "nothing was written"
    );

    // Hold 1 is delayed between its read and its write, and hold 2 lands in between: the
    // precondition fails, and the re-read sees another instance.
    s.job("between", false).await;
    let newer = exec.clone();
    let (ns2, fired) = (ns.clone(), Arc::new(AtomicBool::new(false)));
    let delayed = with_hook(exec.clone(), move |p| {
        let (newer, ns, fired) = (newer.clone(), ns2.clone(), fired.clone());
        async move {
            if p.kind == holdfast_core::hold::CallKind::Hold && !fired.swap(true, Ordering::SeqCst)
            {
                newer
                    .hold(&ns, "between", meta(Some(2), MINUTE))
                    .await
                    .expect("hold 2 lands in between");
            }
        }
    });
    let err = delayed
        .hold(ns, "between", meta(Some(1), MINUTE))
        .await
        .expect_err("hold 1 lost the race");
    assert_eq!(err.cause(), Some(RejectCause::StaleHold), "{err}");
    let tj = s.read("between").await;
    assert_eq!(annotation(&tj, ANN_HOLD_INSTANCE), Some("2"));
    let events = settled_audit(s.cp).await;
    let codes: Vec<i64> = updates(&on_trainjob(&events, ns, "between"))
        .iter()
        .map(|e| code(e))
        .collect();
    assert_eq!(
        codes,
        vec![200, 409],
        "hold 2 landed, hold 1's write was refused by its precondition"
    );
}

#[tokio::test]
async fn conflict_caused_by_a_status_writer_is_retried_and_succeeds() {
    let s = Scene::new("status-conflict").await;
    let ns = &s.ns;
    s.job("mnist", false).await;
    let trainer = s.client(Identity::Trainer).await;
    let ns2 = ns.clone();
    let exec = with_hook(s.executor().await, move |p| {
        let (trainer, ns) = (trainer.clone(), ns2.clone());
        async move {
            if p.conflicts == 0 {
                write_status(&trainer, &ns, "mnist", 1).await;
            }
        }
    });

    let outcome = exec.hold(ns, "mnist", meta(Some(1), MINUTE)).await;
    assert_eq!(outcome, Ok(Outcome::Held));
    let tj = s.read("mnist").await;
    assert_eq!(annotation(&tj, ANN_HOLD_INSTANCE), Some("1"));
    assert!(suspended(&tj));
    assert_eq!(
        tj.pointer("/status/trainerStatus/metrics/0/value"),
        Some(&json!("1")),
        "Trainer's status update is kept"
    );

    let events = settled_audit(s.cp).await;
    let mine = on_trainjob(&events, ns, "mnist");
    let codes: Vec<i64> = updates(&mine).iter().map(|e| code(e)).collect();
    assert_eq!(codes, vec![409, 200], "a real 409, then the retry landed");
    assert_eq!(
        mine.iter().filter(|e| verb(e) == "get").count(),
        2,
        "read again after the conflict"
    );
}

#[tokio::test]
async fn eight_conflicts_fail_with_conflict() {
    let s = Scene::new("conflicts").await;
    let ns = &s.ns;
    s.job("mnist", false).await;
    let trainer = s.client(Identity::Trainer).await;
    let step = Arc::new(AtomicU64::new(0));
    let ns2 = ns.clone();
    let exec = with_hook(s.executor().await, move |_| {
        let (trainer, ns, step) = (trainer.clone(), ns2.clone(), step.clone());
        async move {
            let n = step.fetch_add(1, Ordering::SeqCst) + 1;
            write_status(&trainer, &ns, "mnist", n).await;
        }
    });

    let err = exec
        .hold(ns, "mnist", meta(Some(1), MINUTE))
        .await
        .expect_err("every write loses");
    assert_eq!(err, HoldError::Conflict { tries: 8 });
    assert_eq!(err.http_status(), 503);
    let tj = s.read("mnist").await;
    assert!(hold_annotations(&tj).is_empty(), "nothing was written");
    assert!(!suspended(&tj));

    let events = settled_audit(s.cp).await;
    let mine = on_trainjob(&events, ns, "mnist");
    let writes = updates(&mine);
    assert_eq!(writes.len(), 8, "eight tries, no more");
    assert!(writes.iter().all(|e| code(e) == 409), "{writes:#?}");
    assert_eq!(mine.len(), 16, "each try read first");
}

#[tokio::test]
async fn call_past_its_deadline_sends_nothing() {
    let s = Scene::new("deadline").await;
    let ns = &s.ns;
    s.job("expired", false).await;
    s.job("slow", false).await;
    let exec = s.executor().await;

    // A call whose deadline has passed sends nothing at all.
    let mut m = meta(Some(1), MINUTE);
    m.deadline = jiff::Timestamp::now() - jiff::SignedDuration::from_secs(1);
    let err = exec.hold(ns, "expired", m).await.expect_err("too late");
    assert_eq!(err.cause(), Some(RejectCause::DeadlinePassed), "{err}");

    // A call whose deadline passes between its read and its write sends no write.
    let slow = with_hook(exec.clone(), |_| async {
        tokio::time::sleep(Duration::from_millis(1500)).await;
    });
    let m = meta(Some(1), Duration::from_millis(1000));
    let deadline = m.deadline;
    let err = slow
        .hold(ns, "slow", m)
        .await
        .expect_err("the deadline passed");
    assert_eq!(err.cause(), Some(RejectCause::DeadlinePassed), "{err}");
    assert!(jiff::Timestamp::now() > deadline);

    let events = settled_audit(s.cp).await;
    assert!(
        on_trainjob(&events, ns, "expired").is_empty(),
        "no request for the expired call"
    );
    let slow_requests = on_trainjob(&events, ns, "slow");
    assert_eq!(
        slow_requests.len(),
        1,
        "only the read, made in time: {slow_requests:#?}"
    );
    assert_eq!(verb(slow_requests[0]), "get");
    let after_deadline: Vec<_> = controller_requests(&events, ns)
        .into_iter()
        .filter(|e| received_at(e) > deadline)
        .collect();
    assert!(
        after_deadline.is_empty(),
        "requests received after the deadline: {after_deadline:#?}"
    );
    let tj = s.read("slow").await;
    assert!(hold_annotations(&tj).is_empty());
}

/// A pod of TrainJob `trainjob`'s execution, owned by its Job as the Job controller's are,
/// labelled as JobSet labels it, and kept by a finalizer of the test's once deleted.
async fn pod(cp: &ControlPlane, ns: &str, name: &str, trainjob: &str) -> Pod {
    let admin = cp.client(Identity::Admin).await.expect("admin");
    let tj = read_trainjob(cp, ns, trainjob).await;
    let uid = tj["metadata"]["uid"].as_str().expect("uid");
    let owners = execution_owners::ensure(&admin, ns, trainjob, uid)
        .await
        .expect("the execution's owners");
    serde_json::from_value(execution_owners::pod(
        name,
        trainjob,
        &owners,
        json!({"finalizers": ["holdfast.dev/test-keeps-it"]}),
    ))
    .expect("pod json")
}

/// TrainJob `mnist`, opened, then held (hold 1).
async fn opened_and_held(cp: &ControlPlane, ns: &str) -> HoldExecutor {
    create_trainjob(cp, ns, "mnist", true).await;
    let exec = executor(cp).await;
    exec.open(ns, "mnist", meta(None, MINUTE))
        .await
        .expect("open");
    exec.hold(ns, "mnist", meta(Some(1), MINUTE))
        .await
        .expect("hold");
    exec
}

/// Held, with a running pod of the held execution: Open, Hold, and the pod.
async fn held_with_a_running_pod(cp: &ControlPlane, ns: &str) -> (HoldExecutor, Api<Pod>) {
    let exec = opened_and_held(cp, ns).await;
    let admin = cp.client(Identity::Admin).await.expect("admin");
    let pods: Api<Pod> = Api::namespaced(admin, ns);
    let mut running = pod(cp, ns, "mnist-node-0-0", "mnist").await;
    running.metadata.finalizers = None;
    pods.create(&PostParams::default(), &running)
        .await
        .expect("pod");
    (exec, pods)
}

#[tokio::test]
async fn a_relabelled_pod_of_the_held_execution_still_holds_the_release_back() {
    let s = Scene::new("relabel").await;
    let ns = &s.ns;
    let (exec, pods) = held_with_a_running_pod(s.cp, ns).await;
    // A namespace editor removes JobSet's label from the held execution's pod. Where the
    // chart's execution policy is registered (a lost_nodes test of this control plane did)
    // the relabel is refused; where it is not, ownership still finds the pod.
    let editor = s.client(Identity::User).await;
    if let Err(refused) = Api::<Pod>::namespaced(editor, ns)
        .patch(
            "mnist-node-0-0",
            &PatchParams::default(),
            &execution_owners::without_jobset_label(),
        )
        .await
    {
        assert!(
            refused.to_string().contains("metadata.labels of pod"),
            "{refused}"
        );
    }
    assert_eq!(
        exec.release(ns, "mnist", meta(Some(1), MINUTE)).await,
        Err(HoldError::PodsRemain),
        "the pod is the execution's by ownership, whatever its labels"
    );
    let status = exec.status(ns, "mnist").await.expect("status");
    assert_eq!(
        status
            .remaining_pods
            .iter()
            .map(|p| p.name.as_str())
            .collect::<Vec<_>>(),
        ["mnist-node-0-0"]
    );
    let tj = s.read("mnist").await;
    assert!(suspended(&tj));
    assert_eq!(annotation(&tj, ANN_HOLD_INSTANCE), Some("1"));
    pods.delete("mnist-node-0-0", &DeleteParams::default())
        .await
        .expect("delete pod");
}

#[tokio::test]
async fn a_decoy_pod_carrying_the_jobset_label_does_not_block_the_release() {
    let s = Scene::new("decoy").await;
    let ns = &s.ns;
    let exec = opened_and_held(s.cp, ns).await;
    // `kubectl run blocker --image=pause --labels=jobset.sigs.k8s.io/jobset-name=mnist`
    let editor = s.client(Identity::User).await;
    let blocker: Pod = serde_json::from_value(json!({
        "metadata": {"name": "blocker", "labels": {execution_owners::JOBSET_NAME_LABEL: "mnist"}},
        "spec": {"containers": [{"name": "pause", "image": "registry.k8s.io/pause:3.10"}]}
    }))
    .expect("pod");
    Api::<Pod>::namespaced(editor, ns)
        .create(&PostParams::default(), &blocker)
        .await
        .expect("the editor may create a pod");
    let status = exec.status(ns, "mnist").await.expect("status");
    assert!(status.remaining_pods.is_empty(), "{status:?}");
    assert_eq!(
        exec.release(ns, "mnist", meta(Some(1), MINUTE)).await,
        Ok(Outcome::Released { resumed: true }),
        "a pod that is not the job's is no process of its execution"
    );
}

#[tokio::test]
async fn release_with_pods_remaining_writes_nothing_and_returns_pods_remain() {
    let s = Scene::new("pods").await;
    let ns = &s.ns;
    s.job("mnist", true).await;
    let exec = s.executor().await;
    exec.open(ns, "mnist", meta(None, MINUTE))
        .await
        .expect("open");
    exec.hold(ns, "mnist", meta(Some(1), MINUTE))
        .await
        .expect("hold");

    // A pod of the held execution, being deleted (a finalizer keeps it), and a finished one.
    let admin = s.admin.clone();
    let pods: Api<Pod> = Api::namespaced(admin, ns);
    pods.create(
        &PostParams::default(),
        &pod(s.cp, ns, "mnist-node-0-0", "mnist").await,
    )
    .await
    .expect("pod");
    pods.delete("mnist-node-0-0", &DeleteParams::default())
        .await
        .expect("delete pod");
    let terminating = pods.get("mnist-node-0-0").await.expect("still there");
    assert!(terminating.metadata.deletion_timestamp.is_some());
    let mut done = pod(s.cp, ns, "mnist-node-0-1", "mnist").await;
    done.metadata.finalizers = None;
    pods.create(&PostParams::default(), &done)
        .await
        .expect("pod");
    pods.patch_status(
        "mnist-node-0-1",
        &PatchParams::default(),
        &Patch::Merge(json!({"status": {"phase": "Succeeded"}})),
    )
    .await
    .expect("pod finished");

    let before = s.read("mnist").await;
    let err = exec
        .release(ns, "mnist", meta(Some(1), MINUTE))
        .await
        .expect_err("a pod remains");
    assert_eq!(err, HoldError::PodsRemain);
    assert_eq!(err.http_status(), 423);
    let after = s.read("mnist").await;
    assert_eq!(
        resource_version(&after),
        resource_version(&before),
        "nothing was written"
    );
    assert_eq!(annotation(&after, ANN_HOLD_INSTANCE), Some("1"));

    // Once the pod is gone, the same release lifts the hold and resumes the job.
    pods.patch(
        "mnist-node-0-0",
        &PatchParams::default(),
        &Patch::Merge(json!({"metadata": {"finalizers": null}})),
    )
    .await
    .expect("drop the finalizer");
    let start = std::time::Instant::now();
    while pods
        .get_opt("mnist-node-0-0")
        .await
        .expect("get pod")
        .is_some()
    {
        assert!(start.elapsed() < MINUTE, "the pod was not removed");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(
        exec.release(ns, "mnist", meta(Some(1), MINUTE)).await,
        Ok(Outcome::Released { resumed: true }),
        "a finished pod does not hold the release back"
    );
    let tj = s.read("mnist").await;
    assert!(!suspended(&tj));
    assert_eq!(annotation(&tj, ANN_ATTEMPT), Some("2"));
}

#[tokio::test]
async fn held_before_opened_stays_suspended_after_release() {
    let s = Scene::new("gate").await;
    let ns = &s.ns;
    s.job("mnist", true).await;
    let exec = s.executor().await;

    exec.hold(ns, "mnist", meta(Some(1), MINUTE))
        .await
        .expect("hold");
    assert_eq!(
        exec.release(ns, "mnist", meta(Some(1), MINUTE)).await,
        Ok(Outcome::Released { resumed: false })
    );
    let tj = s.read("mnist").await;
    assert!(suspended(&tj), "back at its start gate");
    assert!(hold_annotations(&tj).is_empty());
    assert_eq!(annotation(&tj, ANN_OPENED), None);
    assert_eq!(annotation(&tj, ANN_ATTEMPT), None, "A did not rise");

    assert_eq!(
        exec.open(ns, "mnist", meta(None, MINUTE)).await,
        Ok(Outcome::Opened { started: true }),
        "Open lets it through"
    );
    let tj = s.read("mnist").await;
    assert!(!suspended(&tj));
    assert_eq!(annotation(&tj, ANN_ATTEMPT), Some("1"));
}

#[tokio::test]
async fn stale_open_does_not_unsuspend_a_held_job() {
    let s = Scene::new("open").await;
    let ns = &s.ns;
    s.job("mnist", true).await;
    let exec = s.executor().await;

    exec.hold(ns, "mnist", meta(Some(4), MINUTE))
        .await
        .expect("hold");
    assert_eq!(
        exec.open(ns, "mnist", meta(None, MINUTE)).await,
        Ok(Outcome::Opened { started: false })
    );
    let tj = s.read("mnist").await;
    assert!(suspended(&tj), "the hold still stops it");
    assert_eq!(
        annotation(&tj, ANN_OPENED),
        Some("true"),
        "only the mark was written"
    );
    assert_eq!(annotation(&tj, ANN_HOLD_INSTANCE), Some("4"));
    assert_eq!(annotation(&tj, ANN_ATTEMPT), None);

    assert_eq!(
        exec.release(ns, "mnist", meta(Some(4), MINUTE)).await,
        Ok(Outcome::Released { resumed: true }),
        "the release, not the Open, lets it run"
    );
    let tj = s.read("mnist").await;
    assert!(!suspended(&tj));
    assert_eq!(annotation(&tj, ANN_ATTEMPT), Some("1"));
}

/// The hold API closes a refused caller's connection after its answer, and says so: an
/// HTTP/1.1 client that pooled the connection would otherwise send its next call on a socket
/// being closed and see a transport error (a lost answer, to a supervisor).
#[tokio::test]
async fn a_refused_callers_answer_says_its_connection_closes() {
    let s = Scene::new("api-close").await;
    let ns = &s.ns;
    let exec = s.executor().await;
    let api = start_api(s.cp, exec).await;
    let http1 = reqwest::Client::builder()
        .add_root_certificate(reqwest::Certificate::from_pem(s.cp.ca_pem().as_bytes()).expect("CA"))
        .http1_only()
        .build()
        .expect("http client");
    let url = format!("{}/v1/namespaces/{ns}/trainjobs/mnist/status", api.base);
    for token in [None, Some("not-a-token")] {
        let mut req = http1.get(&url);
        if let Some(t) = token {
            req = req.bearer_auth(t);
        }
        let resp = req.send().await.expect("an answer");
        assert_eq!(resp.status().as_u16(), 401, "{token:?}");
        assert_eq!(
            resp.headers()
                .get(reqwest::header::CONNECTION)
                .and_then(|v| v.to_str().ok()),
            Some("close"),
            "{token:?}: the refusal says the connection closes"
        );
    }
}

#[tokio::test]
async fn api_refuses_anonymous_and_unauthorised_callers() {
    let s = Scene::new("api-auth").await;
    let ns = &s.ns;
    s.job("mnist", false).await;
    let exec = s.executor().await;
    let metrics = exec.metrics().clone();
    let api = start_api(s.cp, exec).await;
    let path = format!("/v1/namespaces/{ns}/trainjobs/mnist/hold");
    let body = json!({"instance": 1, "deadline": (jiff::Timestamp::now() + jiff::SignedDuration::from_mins(5)).to_string(), "reason": "node lost"});
    let before = s.read("mnist").await;

    let (status, answer) = api.post(&path, None, &body).await;
    assert_eq!(status, 401, "{answer}");
    assert_eq!(answer["error"], "Unauthenticated");
    let (status, answer) = api.post(&path, Some("not-a-token"), &body).await;
    assert_eq!(status, 401, "{answer}");
    let alice = s.cp.token(Identity::User);
    let (status, answer) = api.post(&path, Some(alice), &body).await;
    assert_eq!(status, 403, "{answer}");
    assert_eq!(answer["error"], "Forbidden");
    assert!(
        answer["message"]
            .as_str()
            .is_some_and(|m| m.contains("alice") && m.contains("trainjobs/hold")),
        "{answer}"
    );
    assert_eq!(
        metrics.count(MetricCall::hold, "unauthenticated", "none"),
        2
    );
    assert_eq!(metrics.count(MetricCall::hold, "forbidden", "none"), 1);

    let after = s.read("mnist").await;
    assert_eq!(
        resource_version(&after),
        resource_version(&before),
        "nothing written on refusal"
    );
    let events = settled_audit(s.cp).await;
    assert!(
        on_trainjob(&events, ns, "mnist").is_empty(),
        "not even read on refusal"
    );

    grant_alice(s.cp, ns, &["hold"], &["create"]).await;
    // The API remembers its refusal for REFUSED_TTL (README, "The hold API"): the grant
    // works once that has passed.
    let granted = std::time::Instant::now();
    let answer = loop {
        let (status, answer) = api.post(&path, Some(alice), &body).await;
        if status == 200 {
            break answer;
        }
        assert_eq!(status, 403, "{answer}");
        assert!(
            granted.elapsed()
                < holdfast_controller::api::review_cache::REFUSED_TTL + Duration::from_secs(30),
            "the grant never took effect: {answer}"
        );
        tokio::time::sleep(Duration::from_millis(250)).await;
    };
    assert_eq!(answer, json!({"result": "Ok", "outcome": "Held"}));
    let tj = s.read("mnist").await;
    assert_eq!(annotation(&tj, ANN_HOLD_INSTANCE), Some("1"));
    // Hold was granted, release was not.
    let (status, _) = api
        .post(
            &format!("/v1/namespaces/{ns}/trainjobs/mnist/release"),
            Some(alice),
            &body,
        )
        .await;
    assert_eq!(status, 403);
}

/// `GET /v1/openapi.json` answers the committed contract to any authenticated caller (no
/// SubjectAccessReview: alice holds no grant), and refuses one the TokenReview refuses.
#[tokio::test]
async fn the_contract_is_served_to_authenticated_callers_only() {
    let cp = ControlPlane::shared();
    let exec = executor(cp).await;
    let api = start_api(cp, exec).await;
    let (status, answer) = api.get("/v1/openapi.json", "not-a-token").await;
    assert_eq!(status, 401, "{answer}");
    assert_eq!(answer["error"], "Unauthenticated");

    // alice is granted nothing here: had a SubjectAccessReview been asked, it would refuse.
    let (status, served) = api.get("/v1/openapi.json", cp.token(Identity::User)).await;
    assert_eq!(status, 200, "{served}");
    let committed = std::fs::read_to_string(
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../api/openapi.json"),
    )
    .expect("api/openapi.json");
    let committed: Value = serde_json::from_str(&committed).expect("JSON");
    assert_eq!(
        served, committed,
        "the served contract is the committed one"
    );

    // A caller with a token and no grant is never admitted on the connection by it: the answer
    // closes the connection, so such callers cannot hold the API's connections from the
    // holder by asking again and again on kept-alive ones.
    let http1 = reqwest::Client::builder()
        .add_root_certificate(reqwest::Certificate::from_pem(cp.ca_pem().as_bytes()).expect("CA"))
        .http1_only()
        .build()
        .expect("http client");
    let resp = http1
        .get(format!("{}/v1/openapi.json", api.base))
        .bearer_auth(cp.token(Identity::User))
        .send()
        .await
        .expect("an answer");
    assert_eq!(resp.status().as_u16(), 200);
    assert_eq!(
        resp.headers()
            .get(reqwest::header::CONNECTION)
            .and_then(|v| v.to_str().ok()),
        Some("close"),
        "the contract's answer closes the connection"
    );
}

#[tokio::test]
async fn api_allows_a_caller_granted_one_trainjob_by_name_that_one_only() {
    use k8s_openapi::api::rbac::v1::{PolicyRule, Role, RoleRef, Subject};
    use kube::api::ObjectMeta;
    // The API asks namespace-wide first (one review for a wave over many TrainJobs); a grant
    // limited by resourceNames is refused that and must still be honoured for its TrainJob.
    let s = Scene::new("api-names").await;
    let ns = &s.ns;
    s.job("mine", false).await;
    s.job("theirs", false).await;
    let api = start_api(s.cp, s.executor().await).await;
    let admin = s.admin.clone();
    let meta = || ObjectMeta {
        name: Some("one-trainjob".into()),
        ..Default::default()
    };
    let role = Role {
        metadata: meta(),
        rules: Some(vec![PolicyRule {
            api_groups: Some(vec!["holdfast.dev".into()]),
            resources: Some(vec!["trainjobs/status".into()]),
            resource_names: Some(vec!["mine".into()]),
            verbs: vec!["get".into()],
            ..Default::default()
        }]),
    };
    Api::<Role>::namespaced(admin.clone(), ns)
        .create(&PostParams::default(), &role)
        .await
        .expect("role");
    let binding = RoleBinding {
        metadata: meta(),
        role_ref: RoleRef {
            api_group: Some("rbac.authorization.k8s.io".into()),
            kind: "Role".into(),
            name: "one-trainjob".into(),
        },
        subjects: Some(vec![Subject {
            kind: "User".into(),
            name: Identity::User.username().into(),
            api_group: Some("rbac.authorization.k8s.io".into()),
            ..Default::default()
        }]),
    };
    Api::<RoleBinding>::namespaced(admin, ns)
        .create(&PostParams::default(), &binding)
        .await
        .expect("role binding");
    let alice = s.cp.token(Identity::User);
    let status = |name: &str| format!("/v1/namespaces/{ns}/trainjobs/{name}/status");
    // The authorizer catches up with the new binding (and the API's 2 s memory of a refusal
    // with it): await the first allowed call.
    let granted = std::time::Instant::now();
    loop {
        let (code, answer) = api.get(&status("mine"), alice).await;
        if code == 200 {
            break;
        }
        assert_eq!(code, 403, "{answer}");
        assert!(
            granted.elapsed() < Duration::from_secs(30),
            "the grant on `mine` never took effect: {answer}"
        );
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    let (code, answer) = api.get(&status("theirs"), alice).await;
    assert_eq!(code, 403, "{answer}");
    assert!(
        answer["message"]
            .as_str()
            .is_some_and(|m| m.contains("alice") && m.contains("theirs")),
        "the refusal names the TrainJob: {answer}"
    );
}

#[tokio::test]
async fn api_hold_and_release_round_trip() {
    let s = Scene::new("api").await;
    let ns = &s.ns;
    s.job("mnist", true).await;
    let exec = s.executor().await;
    exec.open(ns, "mnist", meta(None, MINUTE))
        .await
        .expect("open");
    let metrics = exec.metrics().clone();
    let api = start_api(s.cp, exec).await;
    grant_alice(
        s.cp,
        ns,
        &["hold", "release", "status", "open"],
        &["create", "get"],
    )
    .await;
    let alice = s.cp.token(Identity::User);
    let base = format!("/v1/namespaces/{ns}/trainjobs/mnist");
    let deadline = (jiff::Timestamp::now() + jiff::SignedDuration::from_mins(5)).to_string();

    let (status, answer) = api
        .post(
            &format!("{base}/hold"),
            Some(alice),
            &json!({"instance": 7, "deadline": deadline, "reason": "node lost"}),
        )
        .await;
    assert_eq!(
        (status, &answer),
        (200, &json!({"result": "Ok", "outcome": "Held"}))
    );

    let (status, answer) = api.get(&format!("{base}/status"), alice).await;
    assert_eq!(status, 200, "{answer}");
    assert_eq!(answer["hold"]["instance"], 7);
    assert_eq!(answer["hold"]["reason"], "node lost");
    assert_eq!(answer["state"], json!({"kind": "HeldByUs", "instance": 7}));
    assert_eq!(answer["opened"], true);
    assert_eq!(answer["attempt"], 1);

    // Errors are the closed set, with their statuses.
    let (status, answer) = api
        .post(
            &format!("{base}/release"),
            Some(alice),
            &json!({"instance": 7}),
        )
        .await;
    assert_eq!(status, 400, "{answer}");
    assert_eq!(answer["error"], "Invalid");
    let (status, answer) = api
        .post(
            &format!("{base}/release"),
            Some(alice),
            &json!({"instance": 6, "deadline": deadline}),
        )
        .await;
    assert_eq!(status, 409, "{answer}");
    assert_eq!(
        (answer["error"].as_str(), answer["cause"].as_str()),
        (Some("Rejected"), Some("StaleHold"))
    );
    let big = json!({"instance": 7, "deadline": deadline, "reason": "x".repeat(20_000)});
    let (status, answer) = api.post(&format!("{base}/hold"), Some(alice), &big).await;
    assert_eq!(status, 413, "{answer}");
    assert_eq!(answer["error"], "Invalid");

    let (status, answer) = api
        .post(
            &format!("{base}/release"),
            Some(alice),
            &json!({"instance": 7, "deadline": deadline}),
        )
        .await;
    assert_eq!(
        (status, &answer),
        (
            200,
            &json!({"result": "Ok", "outcome": "Released", "resumed": true})
        )
    );
    let (_, answer) = api.get(&format!("{base}/status"), alice).await;
    assert_eq!(answer["hold"], Value::Null);
    assert_eq!(answer["state"]["kind"], "Running");
    assert_eq!(answer["attempt"], 2);

    // Preflight, as the admin (alice was not granted it).
    let admin = s.cp.token(Identity::Admin);
    let (status, answer) = api
        .get(&format!("/v1/preflight?namespace={ns}&name=mnist"), admin)
        .await;
    assert_eq!(status, 200, "{answer}");
    assert_eq!(answer["callBoundSeconds"], 66.0);
    assert_eq!(answer["calls"]["hold"]["supported"], true, "{answer:#}");
    let round_trip = answer["checks"]
        .as_array()
        .and_then(|cs| cs.iter().find(|c| c["probe"] == "hold-round-trip"))
        .expect("round trip check");
    assert_eq!(round_trip["result"], "Passed", "{round_trip}");
    let (status, _) = api.get("/v1/preflight", alice).await;
    assert_eq!(status, 403);

    assert_eq!(metrics.count(MetricCall::hold, "ok", "held"), 1);
    assert_eq!(metrics.count(MetricCall::release, "ok", "resumed"), 1);
    assert_eq!(metrics.count(MetricCall::release, "invalid", "none"), 1);
    assert_eq!(
        metrics.count(MetricCall::release, "rejected", "stale_hold"),
        1
    );
}

/// A hold's reason is printed where people read it (`kubectl holdfast status`, the Event's
/// note): one with a control character is refused as `Invalid`, naming the field and the
/// character's position, and nothing is written.
#[tokio::test]
async fn api_refuses_a_hold_reason_with_a_control_character() {
    let s = Scene::new("api-reason").await;
    let ns = &s.ns;
    s.job("mnist", false).await;
    let exec = s.executor().await;
    let api = start_api(s.cp, exec).await;
    grant_alice(s.cp, ns, &["hold", "status"], &["create", "get"]).await;
    let alice = s.cp.token(Identity::User);
    let base = format!("/v1/namespaces/{ns}/trainjobs/mnist");
    let deadline = (jiff::Timestamp::now() + jiff::SignedDuration::from_mins(5)).to_string();

    let (status, answer) = api
        .post(
            &format!("{base}/hold"),
            Some(alice),
            &json!({"instance": 1, "deadline": deadline,
                "reason": "node lost\u{1b}[2J\nteam-b   llm   plain   9"}),
        )
        .await;
    assert_eq!(status, 400, "{answer}");
    assert_eq!(answer["error"], "Invalid", "{answer}");
    let message = answer["message"].as_str().unwrap_or_default();
    assert!(
        message.contains("reason: character 10 is a control character (U+001B)"),
        "{message}"
    );
    let tj = s.read("mnist").await;
    assert!(hold_annotations(&tj).is_empty(), "nothing written: {tj:#}");

    let (status, answer) = api
        .post(
            &format!("{base}/hold"),
            Some(alice),
            &json!({"instance": 1, "deadline": deadline, "reason": "nœud perdu — rack 3"}),
        )
        .await;
    assert_eq!(status, 200, "{answer}");
    let (_, answer) = api.get(&format!("{base}/status"), alice).await;
    assert_eq!(answer["hold"]["reason"], "nœud perdu — rack 3");
}

/// In a namespace the chart excludes from admission (kube-system, its own namespace,
/// `webhook.excludeNamespaces`) nothing keeps a hold from being lifted by anyone who may edit
/// the TrainJob: Hold answers `Unsupported`, naming why and what to do, and writes nothing. A
/// Release there is answered as anywhere.
#[tokio::test]
async fn a_hold_in_a_namespace_excluded_from_admission_is_unsupported() {
    let s = Scene::new("api-excluded").await;
    let ns = &s.ns;
    s.job("mnist", false).await;
    let exec = s.executor().await;
    let excluded = holdfast_controller::api::Unprotected::new([ns.clone()]);
    let api = start_api_with(s.cp, exec, excluded).await;
    grant_alice(
        s.cp,
        ns,
        &["hold", "release", "preflight"],
        &["create", "get"],
    )
    .await;
    let alice = s.cp.token(Identity::User);
    let base = format!("/v1/namespaces/{ns}/trainjobs/mnist");
    let deadline = (jiff::Timestamp::now() + jiff::SignedDuration::from_mins(5)).to_string();

    let (status, answer) = api
        .post(
            &format!("{base}/hold"),
            Some(alice),
            &json!({"instance": 1, "deadline": deadline}),
        )
        .await;
    assert_eq!(status, 501, "{answer}");
    assert_eq!(answer["error"], "Unsupported", "{answer}");
    let message = answer["message"].as_str().unwrap_or_default();
    assert!(
        message.contains(&format!(
            "namespace {ns} is excluded from holdfast's admission"
        )) && message.contains("webhook.excludeNamespaces"),
        "{message}"
    );
    let tj = s.read("mnist").await;
    assert!(hold_annotations(&tj).is_empty(), "nothing written: {tj:#}");
    // A preflight of the job says so too.
    let (status, report) = api
        .get(&format!("/v1/preflight?namespace={ns}&name=mnist"), alice)
        .await;
    assert_eq!(status, 200, "{report}");
    assert_eq!(report["calls"]["hold"]["supported"], false, "{report}");
    assert!(
        report["calls"]["hold"]["reason"]
            .as_str()
            .is_some_and(|r| r.contains("webhook.excludeNamespaces")),
        "{report}"
    );

    let (status, answer) = api
        .post(
            &format!("{base}/release"),
            Some(alice),
            &json!({"instance": 1, "deadline": deadline}),
        )
        .await;
    assert_ne!(answer["error"], "Unsupported", "{status} {answer}");
}

/// `validation.engine=policy` on an apiserver whose ValidatingAdmissionPolicy admission
/// plugin is off: nothing enforces holdfast's rules, so preflight's dry-run of a write the
/// chart's policy must refuse is let through, and Hold answers `Unsupported`, naming the
/// plugin and what to do. On an apiserver that enforces the policy the same Hold is placed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_the_policy_engine_and_the_admission_plugin_off_a_hold_is_unsupported() {
    use holdfast_controller::hold::{ExecutorConfig, PolicyProbe};
    use holdfast_core::mode::Mode;
    let policy_engine = |ns: &str| ExecutorConfig {
        policy_probe: Some(PolicyProbe {
            namespace: ns.to_owned(),
            engine: "policy".into(),
        }),
        ..config()
    };
    let off = holdfast_tests::holdfast::owned_control_plane_with(
        holdfast_tests::control_plane::Options {
            apiserver_args: vec!["--disable-admission-plugins=ValidatingAdmissionPolicy".into()],
            ..Default::default()
        },
    )
    .await;
    let ns = off.namespace("policy-off").await.expect("namespace");
    // The chart's policy is there; the apiserver does not enforce it.
    apply_controller_policy(&off).await;
    create_trainjob(&off, &ns, "mnist", false).await;
    let exec = HoldExecutor::new(
        client_without_retries(&off, Identity::Controller).await,
        Mode::Plain,
        policy_engine(&ns),
    );
    let refused = exec.hold(&ns, "mnist", meta(Some(1), MINUTE)).await;
    let Err(HoldError::Unsupported { reason }) = &refused else {
        panic!("a hold with nothing enforcing the rules must be Unsupported: {refused:?}");
    };
    assert!(
        reason.contains("admission-policies")
            && reason.contains("admission plugin is off")
            && reason.contains("validation.engine=webhook"),
        "{reason}"
    );
    let tj = read_trainjob(&off, &ns, "mnist").await;
    assert!(hold_annotations(&tj).is_empty(), "nothing written: {tj:#}");
    off.stop();

    // The control: the plugin on (the default), the policy enforced.
    let s = Scene::new("policy-on").await;
    let ns = &s.ns;
    holdfast_tests::controller_policy::register(s.cp, ns).await;
    s.job("mnist", false).await;
    let exec = HoldExecutor::new(
        client_without_retries(s.cp, Identity::Controller).await,
        Mode::Plain,
        policy_engine(ns),
    );
    exec.hold(ns, "mnist", meta(Some(1), MINUTE))
        .await
        .expect("a hold where the policies are enforced");
}

/// The chart's `<fullname>-controller-configmaps` policy and binding, applied as rendered,
/// without waiting for the apiserver to enforce them.
async fn apply_controller_policy(cp: &ControlPlane) {
    let admin = cp.client(Identity::Admin).await.expect("admin");
    let install = holdfast_tests::helm::Install::new(
        holdfast_tests::rbac::RELEASE,
        holdfast_tests::rbac::RELEASE_NAMESPACE,
    );
    let docs = holdfast_tests::helm::ensure()
        .expect("helm")
        .render(&install)
        .expect("render");
    let name = holdfast_tests::controller_policy::name();
    for doc in docs
        .iter()
        .filter(|d| d["metadata"]["name"] == name.as_str())
    {
        holdfast_tests::rbac::apply(&admin, doc, holdfast_tests::rbac::RELEASE_NAMESPACE, false)
            .await
            .expect("apply the policy");
    }
}

#[tokio::test]
async fn api_answers_a_callers_burst_with_one_review_each_and_forgets_a_revoked_grant() {
    use holdfast_controller::api::review_cache::{ACCEPTED_TTL, REFUSED_TTL};
    // A control plane of its own: its audit log counts this test's reviews alone.
    let cp = holdfast_tests::holdfast::owned_control_plane().await;
    let cp = &cp;
    let ns = cp.namespace("api-cache").await.expect("namespace");
    create_trainjob(cp, &ns, "mnist", false).await;
    let api = start_api(cp, executor(cp).await).await;
    grant_alice(cp, &ns, &["status"], &["get"]).await;
    let alice = cp.token(Identity::User);
    let status = format!("/v1/namespaces/{ns}/trainjobs/mnist/status");

    let before = reviews_made(cp).await;
    let burst_started = std::time::Instant::now();
    let burst = burst_started;
    for _ in 0..5 {
        let (code, answer) = api.get(&status, alice).await;
        assert_eq!(code, 200, "{answer}");
    }
    let burst = burst.elapsed();
    let after = reviews_made(cp).await;
    // (A machine so loaded that five calls outlast the memory cannot tell; it says so.)
    if burst < ACCEPTED_TTL {
        assert_eq!(
            (after.0 - before.0, after.1 - before.1),
            (1, 1),
            "five calls in a burst: one TokenReview and one SubjectAccessReview"
        );
    } else {
        println!("the burst took {burst:?}, longer than the memory: not judged");
    }
    // Other TrainJobs of the namespace (existing or not): allowed namespace-wide, so no
    // further review however many TrainJobs a wave names.
    for name in ["a", "b", "c"] {
        let (code, answer) = api
            .get(
                &format!("/v1/namespaces/{ns}/trainjobs/{name}/status"),
                alice,
            )
            .await;
        assert_eq!(code, 404, "{answer}");
    }
    let calls_took = burst_started.elapsed();
    let after_others = reviews_made(cp).await;
    if calls_took < ACCEPTED_TTL {
        assert_eq!(
            after_others, after,
            "calls on other TrainJobs of the namespace: no review"
        );
    }
    let after = after_others;

    // A token the apiserver refuses: refused every time, reviewed once within REFUSED_TTL.
    let started = std::time::Instant::now();
    for _ in 0..3 {
        let (code, _) = api.get(&status, "not-a-token").await;
        assert_eq!(code, 401);
    }
    let bad = reviews_made(cp).await;
    if started.elapsed() < REFUSED_TTL {
        assert_eq!(bad.0 - after.0, 1, "a refused token is reviewed once");
    } else {
        println!("the refused calls outlasted the memory of a refusal: not judged");
    }
    // A name no TrainJob can have: refused before any review (the memory stays small).
    let huge = format!("/v1/namespaces/{ns}/trainjobs/{}/status", "x".repeat(300));
    let (code, answer) = api.get(&huge, alice).await;
    assert_eq!(code, 400, "{answer}");
    assert_eq!(reviews_made(cp).await, bad, "no review for an invalid name");

    // Revoked: refused once the remembered grant expires.
    let admin = cp.client(Identity::Admin).await.expect("admin");
    Api::<RoleBinding>::namespaced(admin, &ns)
        .delete("holdfast-caller", &DeleteParams::default())
        .await
        .expect("revoke");
    let revoked = std::time::Instant::now();
    loop {
        let (code, answer) = api.get(&status, alice).await;
        if code == 403 {
            break;
        }
        assert_eq!(code, 200, "{answer}");
        // Generous: the bound says a revocation takes effect at all, not how fast.
        assert!(
            revoked.elapsed() < ACCEPTED_TTL + Duration::from_secs(30),
            "still allowed {:?} after the RoleBinding went",
            revoked.elapsed()
        );
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
}

/// A ValidatingAdmissionPolicy refusing any TrainJob update in `ns` that carries a hold:
/// the cluster does not allow holds there, and only a real write (or a dry run) can tell.
async fn refuse_holds_in(cp: &ControlPlane, ns: &str) {
    use k8s_openapi::api::admissionregistration::v1::{
        ValidatingAdmissionPolicy, ValidatingAdmissionPolicyBinding,
    };
    let admin = cp.client(Identity::Admin).await.expect("admin");
    let name = format!("no-holds-{ns}");
    let policy: ValidatingAdmissionPolicy = serde_json::from_value(json!({
        "metadata": {"name": name},
        "spec": {
            "failurePolicy": "Fail",
            "matchConstraints": {"resourceRules": [{
                "apiGroups": ["trainer.kubeflow.org"], "apiVersions": ["*"],
                "operations": ["UPDATE"], "resources": ["trainjobs"]
            }]},
            "validations": [{
                "expression": "!has(object.metadata.annotations) || !('holdfast.dev/hold-instance' in object.metadata.annotations)",
                "message": "holds are not allowed here"
            }]
        }
    }))
    .expect("policy");
    Api::<ValidatingAdmissionPolicy>::all(admin.clone())
        .create(&PostParams::default(), &policy)
        .await
        .expect("create policy");
    let binding: ValidatingAdmissionPolicyBinding = serde_json::from_value(json!({
        "metadata": {"name": name},
        "spec": {
            "policyName": name,
            "validationActions": ["Deny"],
            "matchResources": {"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": ns}}}
        }
    }))
    .expect("binding");
    Api::<ValidatingAdmissionPolicyBinding>::all(admin.clone())
        .create(&PostParams::default(), &binding)
        .await
        .expect("create binding");
    // Await the policy taking effect: a dry-run hold by the admin is refused.
    let tjs = trainjobs(&admin, ns);
    let start = std::time::Instant::now();
    loop {
        let mut tj = tjs.get("mnist").await.expect("get");
        tj.metadata
            .annotations
            .get_or_insert_with(Default::default)
            .insert(ANN_HOLD_INSTANCE.into(), "1".into());
        let dry = PostParams {
            dry_run: true,
            ..Default::default()
        };
        if tjs.replace("mnist", &dry, &tj).await.is_err() {
            return;
        }
        assert!(start.elapsed() < MINUTE, "the policy never took effect");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// An untargeted preflight whose dry-run hold an admission policy refuses makes Hold and
/// Release `Unsupported`; a targeted one reports the same refusal to its caller alone.
#[tokio::test]
async fn failed_preflight_makes_hold_and_release_unsupported() {
    use holdfast_controller::hold::preflight::{CheckResult, Gated, Probe};
    // A control plane of its own topic: the only TrainJob the untargeted probe can list is
    // this test's.
    let cp = ControlPlane::shared_by("preflight-refused");
    let ns = cp.namespace("preflight").await.expect("namespace");
    create_trainjob(cp, &ns, "mnist", false).await;
    let exec = executor(cp).await;

    let report = exec.preflight(None).await;
    assert!(report.calls.values().all(|c| c.supported), "{report:#?}");
    refuse_holds_in(cp, &ns).await;

    let targeted = exec.preflight(Some((&ns, "mnist"))).await;
    assert!(!targeted.calls[&Gated::Hold].supported, "{targeted:#?}");
    assert!(
        exec.capability()
            .report()
            .is_some_and(|r| r.calls[&Gated::Hold].supported),
        "a targeted preflight records nothing"
    );

    let report = exec.preflight(None).await;
    let round_trip = report
        .checks
        .iter()
        .find(|c| c.probe == Probe::HoldRoundTrip)
        .expect("round trip");
    assert_eq!(round_trip.result, CheckResult::Failed, "{round_trip:?}");
    assert!(
        report
            .checks
            .iter()
            .filter(|c| c.probe != Probe::HoldRoundTrip)
            .all(|c| c.result == CheckResult::Passed),
        "RBAC and CRDs are fine: {report:#?}"
    );
    assert!(!report.calls[&Gated::Hold].supported);
    assert!(!report.calls[&Gated::Release].supported);
    assert!(report.calls[&Gated::Open].supported);

    for result in [
        exec.hold(&ns, "mnist", meta(Some(1), MINUTE)).await,
        exec.release(&ns, "mnist", meta(Some(1), MINUTE)).await,
    ] {
        let err = result.expect_err("unsupported");
        assert_eq!(err.kind(), "Unsupported", "{err}");
        assert_eq!(err.http_status(), 501);
        assert!(
            err.to_string().contains("holds are not allowed here"),
            "{err}"
        );
    }
    let tj = read_trainjob(cp, &ns, "mnist").await;
    assert!(hold_annotations(&tj).is_empty(), "nothing written");

    // A controller without cluster-wide rights (alice's) is told so by the RBAC probes.
    let alice = client_without_retries(cp, Identity::User).await;
    let weak = HoldExecutor::new(alice, holdfast_core::mode::Mode::Plain, config());
    let report = weak.preflight(None).await;
    let get = report
        .checks
        .iter()
        .find(|c| c.probe == Probe::GetTrainjobs)
        .expect("rbac check");
    assert_eq!(get.result, CheckResult::Failed, "{report:#?}");
    assert!(!report.calls[&Gated::Status].supported);
}

/// A targeted preflight reports on its own target and nothing else: one caller allowed only
/// `get trainjobs/preflight` who names a TrainJob that does not exist (or one not yet made)
/// learns that the dry-run hold could not be made there, and every other caller's Hold and
/// Release on the replica go on working.
#[tokio::test]
async fn a_targeted_preflight_of_a_missing_job_leaves_everyone_elses_holds_working() {
    let s = Scene::new("preflight-missing").await;
    let ns = &s.ns;
    s.job("mnist", false).await;
    let exec = s.executor().await;
    let api = start_api(s.cp, exec.clone()).await;
    grant_alice(s.cp, ns, &["preflight"], &["get"]).await;
    let alice = s.cp.token(Identity::User);

    let (status, answer) = api
        .get(&format!("/v1/preflight?namespace={ns}&name=missing"), alice)
        .await;
    assert_eq!(status, 200, "{answer}");
    let round_trip = answer["checks"]
        .as_array()
        .and_then(|cs| cs.iter().find(|c| c["probe"] == "hold-round-trip"))
        .expect("round trip check");
    assert_eq!(round_trip["result"], "NotChecked", "{round_trip}");
    assert_eq!(
        answer["calls"]["hold"]["supported"], false,
        "the report says what it found for its target: {answer:#}"
    );

    // Everyone else, at once: the capability is what it was.
    let held = exec.hold(ns, "mnist", meta(Some(1), MINUTE)).await;
    assert_eq!(held, Ok(Outcome::Held), "{held:?}");
    let released = exec.release(ns, "mnist", meta(Some(1), MINUTE)).await;
    assert!(released.is_ok(), "{released:?}");
}

/// The untargeted preflight dry-runs its hold on a TrainJob it lists, which a tenant
/// controls: one whose annotations are just under the apiserver's 256 KiB limit, so that the
/// hold's annotations take it over (422 Invalid), in a namespace that sorts first. That says
/// nothing about the cluster, and switches holds off for nobody: the probe tries a TrainJob
/// of another namespace.
#[tokio::test]
async fn a_tenants_oversized_trainjob_does_not_switch_holds_off_for_the_cluster() {
    // A control plane of its own topic: which TrainJob sorts first is this test's alone.
    let cp = ControlPlane::shared_by("preflight-tenants");
    let tenant = cp.namespace("0-tenant").await.expect("namespace");
    let team = cp.namespace("team").await.expect("namespace");
    let admin = cp.client(Identity::Admin).await.expect("admin");
    ensure_runtime(&admin).await;
    let key = "tenant.example/padding";
    let padding = "x".repeat(256 * 1024 - key.len() - 64);
    let oversized: kube::api::DynamicObject = serde_json::from_value(json!({
        "apiVersion": "trainer.kubeflow.org/v1alpha1", "kind": "TrainJob",
        "metadata": {"name": "a", "annotations": {key: padding}},
        "spec": {"runtimeRef": {"name": RUNTIME}, "suspend": false}
    }))
    .expect("trainjob json");
    trainjobs(&admin, &tenant)
        .create(&PostParams::default(), &oversized)
        .await
        .expect("create the tenant's TrainJob");
    create_trainjob(cp, &team, "mnist", false).await;
    let exec = executor(cp).await;

    let report = exec.preflight(None).await;
    assert!(
        report.calls.values().all(|c| c.supported),
        "one tenant's object is no evidence about the cluster: {report:#?}"
    );
    let held = exec.hold(&team, "mnist", meta(Some(1), MINUTE)).await;
    assert_eq!(held, Ok(Outcome::Held), "{held:?}");
    let released = exec.release(&team, "mnist", meta(Some(1), MINUTE)).await;
    assert!(released.is_ok(), "{released:?}");
}

/// Not plain mode, but the I/O it shares: in Kueue mode the executor finds the Workload its
/// TrainJob controls (ownerReference; a Workload that only carries the TrainJob's
/// `kueue.x-k8s.io/job-uid` label is a decoy and is ignored) and holds it (v1beta2), never
/// touching the TrainJob; without a Workload, Hold is `Rejected { cause: NoWorkload }`. (No
/// Kueue controller runs here: the Workload, and the queue that leads through the
/// readmission check, are made by hand. The Kueue-mode suite with the real Kueue is
/// `holds_kueue`.)
#[tokio::test]
async fn kueue_mode_holds_the_workload_its_trainjob_controls() {
    use holdfast_cluster::resources;
    let s = Scene::new("kueue-io").await;
    let ns = &s.ns;
    // The chart's kueue-mode roles: the controller updates Workloads.
    let admin = s.admin.clone();
    holdfast_tests::rbac::install_holdfast_rbac(&admin, "kueue")
        .await
        .expect("kueue-mode RBAC");
    // A queue whose ClusterQueue requires holdfast's readmission check.
    let check: kube::api::DynamicObject = serde_json::from_value(json!({
        "apiVersion": holdfast_tests::kueue::KUEUE_API_VERSION, "kind": "AdmissionCheck",
        "metadata": {"name": "holdfast-readmission"},
        "spec": {"controllerName": holdfast_core::names::READMISSION_CONTROLLER}
    }))
    .expect("admission check");
    Api::<kube::api::DynamicObject>::all_with(
        admin.clone(),
        &holdfast_cluster::resources::admission_check(),
    )
    .patch(
        "holdfast-readmission",
        &PatchParams::apply("holdfast-tests").force(),
        &Patch::Apply(&check),
    )
    .await
    .expect("apply the AdmissionCheck");
    holdfast_tests::kueue::create_queues(&admin, ns, "default", &["holdfast-readmission"])
        .await
        .expect("queues");
    let tj = s.job("mnist", true).await;
    let exec = HoldExecutor::new(
        client_without_retries(s.cp, Identity::Controller).await,
        holdfast_core::mode::Mode::Kueue,
        config(),
    );

    let err = exec
        .hold(ns, "mnist", meta(Some(1), MINUTE))
        .await
        .expect_err("no Workload yet");
    assert_eq!(err.cause(), Some(RejectCause::NoWorkload), "{err}");

    let admin = s.admin.clone();
    let workloads: Api<kube::api::DynamicObject> =
        Api::namespaced_with(admin, ns, &resources::workload());
    let uid = tj["metadata"]["uid"].as_str().expect("uid");
    let workload = |name: &str, owned: bool| {
        let mut w = json!({
            "apiVersion": "kueue.x-k8s.io/v1beta2",
            "kind": "Workload",
            "metadata": {"name": name, "labels": {"kueue.x-k8s.io/job-uid": uid}},
            "spec": {"queueName": "default", "podSets": [{"name": "node", "count": 1,
                "template": {"spec": {"containers": [{"name": "node", "image": "pytorch/pytorch:2.10.0",
                    "resources": {"requests": {"cpu": "1"}}}]}}}]}
        });
        if owned {
            w["metadata"]["ownerReferences"] = json!([{
                "apiVersion": "trainer.kubeflow.org/v1alpha1", "kind": "TrainJob",
                "name": "mnist", "uid": uid, "controller": true}]);
        }
        serde_json::from_value::<kube::api::DynamicObject>(w).expect("workload json")
    };
    workloads
        .create(&PostParams::default(), &workload("trainjob-mnist", true))
        .await
        .expect("create Workload");
    // A decoy, newer, with the label only.
    tokio::time::sleep(Duration::from_millis(1100)).await;
    workloads
        .create(&PostParams::default(), &workload("decoy", false))
        .await
        .expect("create the decoy");
    let tj_before = s.read("mnist").await;

    let mut m = meta(Some(1), MINUTE);
    m.reason = Some("node lost".into());
    assert_eq!(exec.hold(ns, "mnist", m).await, Ok(Outcome::Held));
    let held =
        serde_json::to_value(workloads.get("trainjob-mnist").await.expect("get")).expect("json");
    assert_eq!(held["spec"]["active"], false);
    let decoy = serde_json::to_value(workloads.get("decoy").await.expect("get")).expect("json");
    assert!(
        hold_annotations(&decoy).is_empty() && decoy["spec"]["active"] != false,
        "the decoy is never held: {decoy:#}"
    );
    assert_eq!(annotation(&held, ANN_HOLD_INSTANCE), Some("1"));
    assert_eq!(annotation(&held, ANN_HOLD_REASON), Some("node lost"));
    let status = exec.status(ns, "mnist").await.expect("status");
    assert_eq!(status.hold.and_then(|h| h.instance), Some(1));

    assert_eq!(
        exec.release(ns, "mnist", meta(Some(1), MINUTE)).await,
        Ok(Outcome::Released { resumed: true })
    );
    let released =
        serde_json::to_value(workloads.get("trainjob-mnist").await.expect("get")).expect("json");
    assert_eq!(released["spec"]["active"], true);
    assert!(hold_annotations(&released).is_empty());
    // The TrainJob carried the hold's mark while it was in force, and nothing else changed:
    // after the release its annotations and spec are as before.
    let tj_after = s.read("mnist").await;
    assert_eq!(
        tj_after["metadata"]["annotations"], tj_before["metadata"]["annotations"],
        "the TrainJob keeps no mark after the release"
    );
    assert_eq!(
        tj_after["spec"], tj_before["spec"],
        "the TrainJob's spec is not touched"
    );
}
