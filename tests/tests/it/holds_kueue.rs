//! Holds in Kueue mode against the real apiserver and the real Kueue controller (v0.19), and
//! holdfast's readmission gate: one test per rule of the seed's "In Kueue mode, the
//! Workload is held" and of the gate.
//!
//! Each test has its own namespace, ClusterQueue (requiring the readmission AdmissionCheck)
//! and ClusterTrainingRuntime, and runs its own readmission gate scoped to its namespace.
//! No kubelet and no Trainer run here: where an execution's pods matter, the test creates
//! them itself with the label the gate looks them up by, and deletes them as Trainer would.

use holdfast_tests::hold_support;
use holdfast_tests::kueue_support;

use std::time::Duration;

use hold_support::{annotation, meta, settled_audit};
use holdfast_controller::events::{EventMetrics, Publisher, PublisherConfig};
use holdfast_core::{
    hold::classify::{ObjectState, Waiting},
    hold::mark::Mark,
    hold::{Outcome, RejectCause},
    mode::Mode,
    names::{ANN_ATTEMPT, ANN_HOLD_INSTANCE, ANN_HOLD_MARK, ANN_HOLD_REASON, HOLD_FINALIZER},
    readmission::claimed_attempt,
};
use holdfast_tests::Identity;
use holdfast_tests::described::{Described, note};
use kube::api::{Api, DeleteParams, DynamicObject, Patch, PatchParams, PostParams};
use kueue_support::{
    CHECK, Fixture, MINUTE, QUEUE, SETTLE, Setup, Webhook, active, check, condition,
    condition_reason, finalizers, refused, runtime_spec, uid,
};
use serde_json::{Value, json};

/// Asserts the TrainJob stays suspended for `for_` (polling), returning its last version.
async fn stays_suspended(f: &Fixture, job: &str, for_: Duration) -> Value {
    let start = std::time::Instant::now();
    loop {
        let tj = f.trainjob(job).await;
        assert_eq!(
            tj["spec"]["suspend"], true,
            "the job must not run: {:#}",
            tj["metadata"]
        );
        if start.elapsed() >= for_ {
            return tj;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

#[tokio::test]
async fn hold_evicts_release_readmits_and_the_gate_waits_for_the_old_pods_before_a_rises() {
    let mut f = Fixture::start("kq-cycle").await;
    // The executor leaves its Events as the controller's does (the gate always does).
    let controller = f.cp.client(Identity::Controller).await.expect("controller");
    f.exec = f.exec.clone().with_events(Publisher::start(
        controller,
        PublisherConfig::default(),
        EventMetrics::default(),
    ));
    f.create_job("job", json!({})).await;

    // Never opened: the gate keeps the first admission at the start gate.
    let waiting = f
        .workload_when("job", "the gate names the start gate", |w| {
            check(w).1.contains("start gate")
        })
        .await;
    assert_eq!(check(&waiting).0, "Pending");
    stays_suspended(&f, "job", Duration::from_secs(2)).await;

    f.open_and_run("job").await;
    let admitted = f
        .workload_when("job", "admitted", |w| condition(w, "Admitted"))
        .await;
    let (state, message) = check(&admitted);
    assert_eq!(state, "Ready");
    assert_eq!(claimed_attempt(&message), Some(1), "{message}");

    // The execution's pods.
    f.create_pods("job", 2).await;

    // Hold: the TrainJob's mark, then one update of the Workload.
    let mut m = meta(Some(1), MINUTE);
    m.reason = Some("node lost".into());
    assert_eq!(f.exec.hold(&f.ns, "job", m).await, Ok(Outcome::Held));
    let held = f.workload_when("job", "held", |w| !active(w)).await;
    assert_eq!(annotation(&held, ANN_HOLD_INSTANCE), Some("1"));
    assert_eq!(annotation(&held, ANN_HOLD_REASON), Some("node lost"));
    assert!(finalizers(&held).contains(&HOLD_FINALIZER.to_owned()));

    // Kueue evicts it as deactivated, and suspends the TrainJob itself.
    let evicted = f
        .workload_when("job", "Kueue evicts the held Workload", |w| {
            condition_reason(w, "Evicted").is_some_and(|r| r.contains("Deactivated"))
        })
        .await;
    assert_eq!(
        condition_reason(&evicted, "Evicted").as_deref(),
        Some("Deactivated"),
        "a deactivation of ours, not one of Kueue's own reasons"
    );
    f.job_when("job", "Kueue suspends the TrainJob", |tj| {
        tj["spec"]["suspend"] == true
    })
    .await;
    let status = f.exec.status(&f.ns, "job").await.expect("status");
    assert_eq!(
        status.state,
        ObjectState::HeldByUs {
            instance: Some(1),
            underlying: None
        }
    );
    let events = settled_audit(f.cp).await;
    let controller_writes: Vec<&Value> = events
        .iter()
        .filter(|e| {
            e["user"]["username"] == Identity::Controller.username()
                && e["objectRef"]["namespace"] == f.ns.as_str()
                && matches!(e["verb"].as_str(), Some("update" | "patch"))
                && e["responseStatus"]["code"] == 200
        })
        .collect();
    let suspends: Vec<&&Value> = controller_writes
        .iter()
        .filter(|e| e["objectRef"]["resource"] == "trainjobs")
        .collect();
    assert_eq!(
        suspends.len(),
        3,
        "holdfast wrote the TrainJob only for Open, A and the hold's mark: {suspends:#?}"
    );
    let marked = f.trainjob("job").await;
    assert_eq!(
        annotation(&marked, ANN_HOLD_MARK).and_then(|m| Mark::parse(m).map(|m| m.instance)),
        Some(1),
        "the TrainJob carries hold 1's mark"
    );
    assert_eq!(
        annotation(&marked, ANN_HOLD_INSTANCE),
        None,
        "the hold is the Workload's"
    );

    // Release: active again; Kueue re-admits (quota), but the gate waits for the pods.
    assert_eq!(
        f.exec.release(&f.ns, "job", meta(Some(1), MINUTE)).await,
        Ok(Outcome::Released { resumed: true })
    );
    let released = f.workload_when("job", "released", active).await;
    assert!(hold_support::hold_annotations(&released).is_empty());
    assert_eq!(
        annotation(&f.trainjob("job").await, ANN_HOLD_MARK),
        None,
        "the mark goes with the hold"
    );
    assert!(!finalizers(&released).contains(&HOLD_FINALIZER.to_owned()));
    let gated = f
        .workload_when("job", "re-admitted to the gate, waiting for pods", |w| {
            condition(w, "QuotaReserved") && check(w).1.contains("pods of the previous execution")
        })
        .await;
    assert_eq!(check(&gated).0, "Pending");
    let tj = stays_suspended(&f, "job", Duration::from_secs(3)).await;
    assert_eq!(
        annotation(&tj, ANN_ATTEMPT),
        Some("1"),
        "A waits with the gate"
    );

    // The old execution's pods go: the gate opens, A rises, the job runs.
    f.delete_pods("job").await;
    let tj = f
        .job_when("job", "the job runs again", |tj| {
            tj["spec"]["suspend"] == false
        })
        .await;
    assert_eq!(annotation(&tj, ANN_ATTEMPT), Some("2"));
    let readmitted = f
        .workload_when("job", "admitted again", |w| condition(w, "Admitted"))
        .await;
    assert_eq!(check(&readmitted).0, "Ready");
    assert_eq!(claimed_attempt(&check(&readmitted).1), Some(2));
    assert_eq!(f.metrics.writes("raise_attempt"), 2, "A rose exactly twice");

    // What `kubectl describe trainjob` shows: every step on the TrainJob, the hold's too
    // (which wrote the Workload).
    let tj_uid = uid(&tj);
    let job = Described {
        kind: "TrainJob",
        namespace: &f.ns,
        name: "job",
        uid: &tj_uid,
    };
    let workload = held["metadata"]["name"].as_str().expect("name");
    let placed = job.wait(&f.admin, "HoldPlaced", |_| true).await;
    assert_eq!(
        note(&placed),
        format!(
            "Hold 1 is in force (reason: node lost): its Workload {workload} is deactivated \
             (spec.active=false); Kueue evicts it and suspends the TrainJob."
        )
    );
    job.wait(&f.admin, "ReadmissionWaiting", |e| {
        note(e).contains("waiting for the start gate")
    })
    .await;
    job.wait(&f.admin, "StartGateOpened", |_| true).await;
    let waiting = job
        .wait(&f.admin, "ReadmissionWaiting", |e| {
            note(e).contains("job-node-0-0")
        })
        .await;
    assert!(
        note(&waiting).ends_with(": job-node-0-0, job-node-0-1."),
        "names the pods it waits for: {}",
        note(&waiting)
    );
    job.wait(&f.admin, "HoldReleased", |_| true).await;
    job.wait(&f.admin, "ReadmissionPassed", |e| {
        note(e).contains("execution 2 may start")
    })
    .await;
    job.wait(&f.admin, "ReadmissionPassed", |e| {
        note(e).contains("execution 1 may start")
    })
    .await;
    f.finish().await;
}

/// Releases hold 1 of `job` and asserts the gate then keeps it waiting for `what`: Kueue
/// re-admits the Workload, the gate's check stays Pending on the previous execution's pods,
/// and the TrainJob stays suspended.
async fn released_but_gated(f: &Fixture, what: &str) {
    assert_eq!(
        f.exec.release(&f.ns, "job", meta(Some(1), MINUTE)).await,
        Ok(Outcome::Released { resumed: true })
    );
    let gated = f
        .workload_when("job", what, |w| {
            condition(w, "QuotaReserved") && check(w).1.contains("pods of the previous execution")
        })
        .await;
    assert_eq!(check(&gated).0, "Pending");
    stays_suspended(f, "job", Duration::from_secs(3)).await;
}

/// The gate lets `job` through again, and A says it is the second execution.
async fn runs_as_execution_2(f: &Fixture) {
    let tj = f
        .job_when("job", "the job runs again", |tj| {
            tj["spec"]["suspend"] == false
        })
        .await;
    assert_eq!(annotation(&tj, ANN_ATTEMPT), Some("2"));
}

/// Opened, running, two pods of its execution, then held until Kueue suspends it.
async fn held_with_two_pods(f: &Fixture) {
    f.create_job("job", json!({})).await;
    f.open_and_run("job").await;
    f.create_pods("job", 2).await;
    assert_eq!(
        f.exec.hold(&f.ns, "job", meta(Some(1), MINUTE)).await,
        Ok(Outcome::Held)
    );
    f.job_when("job", "Kueue suspends the TrainJob", |tj| {
        tj["spec"]["suspend"] == true
    })
    .await;
}

#[tokio::test]
async fn a_relabelled_pod_of_the_held_execution_keeps_the_gate_pending() {
    let f = Fixture::start("kq-relabel").await;
    held_with_two_pods(&f).await;
    // A namespace editor removes JobSet's label from one of the held execution's pods, and
    // the other pod goes.
    let alice = f.cp.client(Identity::User).await.expect("alice");
    let pods: Api<k8s_openapi::api::core::v1::Pod> = Api::namespaced(alice, &f.ns);
    // Refused where the chart's execution policy is registered (a lost_nodes test of this
    // control plane did); where it is not, ownership still finds the pod.
    if let Err(refused) = pods
        .patch(
            "job-node-0-0",
            &PatchParams::default(),
            &holdfast_tests::execution_owners::without_jobset_label(),
        )
        .await
    {
        assert!(
            refused.to_string().contains("metadata.labels of pod"),
            "{refused}"
        );
    }
    f.delete_pods("job").await;
    released_but_gated(
        &f,
        "re-admitted to the gate, waiting for the relabelled pod",
    )
    .await;
    // Once it is gone, the next execution may start.
    pods.delete("job-node-0-0", &DeleteParams::default())
        .await
        .expect("delete the pod");
    runs_as_execution_2(&f).await;
    f.finish().await;
}

#[tokio::test]
async fn a_decoy_pod_carrying_the_jobset_label_does_not_keep_the_gate_pending() {
    let f = Fixture::start("kq-decoy").await;
    held_with_two_pods(&f).await;
    f.delete_pods("job").await;
    // `kubectl run blocker --image=pause --labels=jobset.sigs.k8s.io/jobset-name=job`
    let alice = f.cp.client(Identity::User).await.expect("alice");
    let blocker: k8s_openapi::api::core::v1::Pod = serde_json::from_value(json!({
        "metadata": {"name": "blocker", "labels": {"jobset.sigs.k8s.io/jobset-name": "job"}},
        "spec": {"containers": [{"name": "pause", "image": "registry.k8s.io/pause:3.10"}]}
    }))
    .expect("pod");
    Api::<k8s_openapi::api::core::v1::Pod>::namespaced(alice, &f.ns)
        .create(&PostParams::default(), &blocker)
        .await
        .expect("alice may create a pod");
    assert_eq!(
        f.exec.release(&f.ns, "job", meta(Some(1), MINUTE)).await,
        Ok(Outcome::Released { resumed: true })
    );
    // The job runs again beside the decoy.
    runs_as_execution_2(&f).await;
    f.finish().await;
}

#[tokio::test]
async fn a_force_deleted_pod_on_a_lost_node_keeps_the_gate_pending_until_the_node_is_fenced() {
    use holdfast_tests::lost_node::{fence, force, gone, keeper, lost_node, running_on};
    let f = Fixture::start("kq-lost").await;
    let node = format!("lost-{}", f.ns);
    lost_node(&f.admin, &node).await;
    f.create_job("job", json!({})).await;
    f.open_and_run("job").await;
    let _keeper = keeper(f.cp, &f.ns).await;
    let pods = running_on(f.cp, &f.ns, "job", &node).await;
    assert_eq!(
        f.exec.hold(&f.ns, "job", meta(Some(1), MINUTE)).await,
        Ok(Outcome::Held)
    );
    f.job_when("job", "Kueue suspends the TrainJob", |tj| {
        tj["spec"]["suspend"] == true
    })
    .await;
    // The node's kubelet is gone; an editor force-deletes the pod it cannot kill.
    let alice = f.cp.client(Identity::User).await.expect("alice");
    Api::<k8s_openapi::api::core::v1::Pod>::namespaced(alice, &f.ns)
        .delete("job-node-0-0", &force())
        .await
        .expect("alice may force-delete a pod");
    released_but_gated(
        &f,
        "re-admitted to the gate, waiting for the lost node's pod",
    )
    .await;
    // Fenced: the pod goes, the gate opens, A rises.
    fence(f.cp, &node).await;
    gone(&pods, "job-node-0-0", "the fenced node's pod goes").await;
    runs_as_execution_2(&f).await;
    f.finish().await;
}

#[tokio::test]
async fn stale_release_is_refused_in_kueue_mode() {
    let f = Fixture::start("kq-stale").await;
    f.create_job("job", json!({})).await;
    f.open_and_run("job").await;
    f.exec
        .hold(&f.ns, "job", meta(Some(2), MINUTE))
        .await
        .expect("hold 2");
    let before = f.workload_when("job", "held", |w| !active(w)).await;

    // A release of an older instance, and a late hold of one, are refused; nothing written.
    let err = f
        .exec
        .release(&f.ns, "job", meta(Some(1), MINUTE))
        .await
        .expect_err("release 1 is stale");
    assert_eq!(err.cause(), Some(RejectCause::StaleHold), "{err}");
    let err = f
        .exec
        .hold(&f.ns, "job", meta(Some(1), MINUTE))
        .await
        .expect_err("hold 1 is stale");
    assert_eq!(err.cause(), Some(RejectCause::StaleHold), "{err}");
    let after = f
        .workloads("job")
        .await
        .into_iter()
        .find(|w| uid(w) == uid(&before))
        .expect("the same Workload");
    assert_eq!(annotation(&after, ANN_HOLD_INSTANCE), Some("2"));
    assert!(!active(&after));
    let events = settled_audit(f.cp).await;
    let workload_writes = events
        .iter()
        .filter(|e| {
            e["user"]["username"] == Identity::Controller.username()
                && e["objectRef"]["namespace"] == f.ns.as_str()
                && e["objectRef"]["resource"] == "workloads"
                && e["objectRef"]["subresource"].is_null()
                && matches!(e["verb"].as_str(), Some("update" | "patch"))
        })
        .count();
    assert_eq!(
        workload_writes, 1,
        "only hold 2 was written to the Workload"
    );

    // The release of the instance in force lifts it.
    assert_eq!(
        f.exec.release(&f.ns, "job", meta(Some(2), MINUTE)).await,
        Ok(Outcome::Released { resumed: true })
    );
    let err = f
        .exec
        .release(&f.ns, "job", meta(Some(2), MINUTE))
        .await
        .expect_err("nothing in force");
    assert_eq!(err.cause(), Some(RejectCause::StaleHold));
    f.job_when("job", "runs again", |tj| tj["spec"]["suspend"] == false)
        .await;
    f.finish().await;
}

#[tokio::test]
async fn hold_without_a_workload_is_rejected() {
    let f = Fixture::start("kq-nowl").await;
    // No queue name: Kueue does not manage it, so it has no Workload.
    let tj: DynamicObject = serde_json::from_value(json!({
        "apiVersion": "trainer.kubeflow.org/v1alpha1", "kind": "TrainJob",
        "metadata": {"name": "loose", "labels": {"holdfast.dev/managed": "true"}},
        "spec": {"runtimeRef": {"name": f.runtime}, "suspend": true}
    }))
    .expect("trainjob");
    f.trainjobs(&f.admin)
        .create(&PostParams::default(), &tj)
        .await
        .expect("create");
    for result in [
        f.exec.hold(&f.ns, "loose", meta(Some(1), MINUTE)).await,
        f.exec.release(&f.ns, "loose", meta(Some(1), MINUTE)).await,
    ] {
        let err = result.expect_err("no Workload");
        assert_eq!(err.cause(), Some(RejectCause::NoWorkload), "{err}");
        assert_eq!(err.kind(), "Rejected");
    }
    f.finish().await;
}

#[tokio::test]
async fn kueue_deactivation_for_its_own_reason_is_classified_as_such_not_as_a_hold() {
    let f = Fixture::start("kq-maxexec").await;
    // A maximum execution time of one second (Kueue copies the label to the Workload spec).
    f.create_job("job", json!({"kueue.x-k8s.io/max-exec-time-seconds": "1"}))
        .await;
    let wl = f
        .workload_when("job", "the Workload", |w| condition(w, "QuotaReserved"))
        .await;
    assert_eq!(wl["spec"]["maximumExecutionTimeSeconds"], 1);
    // It runs for one second only, which polling on a loaded machine can miss: the
    // deactivation below (its time counts only while admitted) and the attempt show it ran.
    f.open_at_gate("job").await;

    let deactivated = f
        .workload_when("job", "Kueue deactivates it for exceeding its time", |w| {
            !active(w)
                && condition_reason(w, "Evicted")
                    .is_some_and(|r| r == "DeactivatedDueToMaximumExecutionTimeExceeded")
        })
        .await;
    assert!(
        hold_support::hold_annotations(&deactivated).is_empty(),
        "no hold of ours"
    );
    assert_eq!(
        annotation(&f.trainjob("job").await, ANN_ATTEMPT),
        Some("1"),
        "admitted once, through the gate"
    );
    let status = f
        .eventually("the status settles", SETTLE, || async {
            let s = f.exec.status(&f.ns, "job").await.expect("status");
            matches!(s.state, ObjectState::DeactivatedByKueue { .. }).then_some(s)
        })
        .await;
    assert_eq!(
        status.state,
        ObjectState::DeactivatedByKueue {
            reason: "DeactivatedDueToMaximumExecutionTimeExceeded".into()
        }
    );
    assert_eq!(status.hold, None);
    f.job_when("job", "Kueue suspends it", |tj| {
        tj["spec"]["suspend"] == true
    })
    .await;
    // And a hold placed on it now is ours, classified as ours, with Kueue's reason under it
    // (which Release leaves in place: see seams.rs).
    f.exec
        .hold(&f.ns, "job", meta(Some(1), MINUTE))
        .await
        .expect("hold");
    let status = f.exec.status(&f.ns, "job").await.expect("status");
    assert_eq!(
        status.state,
        ObjectState::HeldByUs {
            instance: Some(1),
            underlying: Some(
                holdfast_core::hold::classify::Underlying::DeactivatedByKueue {
                    reason: "DeactivatedDueToMaximumExecutionTimeExceeded".into()
                }
            )
        }
    );
    f.finish().await;
}

#[tokio::test]
async fn release_of_a_never_opened_job_leaves_it_at_the_start_gate() {
    let f = Fixture::start("kq-gate").await;
    f.create_job("job", json!({})).await;
    f.workload_when("job", "at the start gate", |w| {
        check(w).1.contains("start gate")
    })
    .await;
    f.exec
        .hold(&f.ns, "job", meta(Some(1), MINUTE))
        .await
        .expect("hold");
    f.workload_when("job", "held", |w| !active(w)).await;
    assert_eq!(
        f.exec.release(&f.ns, "job", meta(Some(1), MINUTE)).await,
        Ok(Outcome::Released { resumed: true })
    );
    // Kueue admits it again, but the gate still holds it at the start gate.
    f.workload_when("job", "re-admitted, waiting at the start gate", |w| {
        active(w) && condition(w, "QuotaReserved") && check(w).1.contains("start gate")
    })
    .await;
    let tj = stays_suspended(&f, "job", Duration::from_secs(3)).await;
    assert_eq!(annotation(&tj, ANN_ATTEMPT), None, "A never rose");
    // Open lets it through.
    f.exec
        .open(&f.ns, "job", meta(None, MINUTE))
        .await
        .expect("open");
    let tj = f
        .job_when("job", "runs", |tj| tj["spec"]["suspend"] == false)
        .await;
    assert_eq!(annotation(&tj, ANN_ATTEMPT), Some("1"));
    f.finish().await;
}

#[tokio::test]
async fn unmanaged_job_passes_the_gate_without_an_opened_mark() {
    let f = Fixture::start("kq-unmanaged").await;
    let tj: DynamicObject = serde_json::from_value(json!({
        "apiVersion": "trainer.kubeflow.org/v1alpha1", "kind": "TrainJob",
        "metadata": {"name": "free", "labels": {"kueue.x-k8s.io/queue-name": QUEUE}},
        "spec": {"runtimeRef": {"name": f.runtime}}
    }))
    .expect("trainjob");
    f.trainjobs(&f.admin)
        .create(&PostParams::default(), &tj)
        .await
        .expect("create");
    let tj = f
        .job_when("free", "runs through the gate", |tj| {
            tj["spec"]["suspend"] == false
        })
        .await;
    assert_eq!(annotation(&tj, ANN_ATTEMPT), Some("1"));
    f.finish().await;
}

#[tokio::test]
async fn a_rises_exactly_once_when_the_gate_crashes_between_its_writes() {
    // The gate is down while the admission waits at it.
    let mut f = Fixture::start_with(
        "kq-crash",
        Setup {
            gate: false,
            ..Setup::default()
        },
    )
    .await;
    f.create_job("job", json!({})).await;
    f.exec
        .open(&f.ns, "job", meta(None, MINUTE))
        .await
        .expect("open");
    let controller = f.cp.client(Identity::Controller).await.expect("controller");

    // Crash 1: the claim was written (attempt=1), A not yet raised.
    let wl = f
        .workload_when("job", "pending at the gate", |w| {
            condition(w, "QuotaReserved") && check(w).0 == "Pending"
        })
        .await;
    write_check(
        &f,
        &controller,
        &wl,
        "Pending",
        "attempt=1: claimed; raising",
    )
    .await;
    f.start_gate().await;
    let tj = f
        .job_when("job", "runs", |tj| tj["spec"]["suspend"] == false)
        .await;
    assert_eq!(
        annotation(&tj, ANN_ATTEMPT),
        Some("1"),
        "A raised to the claim"
    );
    assert_eq!(f.metrics.writes("claim"), 0, "the claim was not made again");
    assert_eq!(f.metrics.writes("raise_attempt"), 1);

    // Crash 2: after a hold and release, the claim (attempt=2) and the raise both landed,
    // Ready did not.
    f.exec
        .hold(&f.ns, "job", meta(Some(1), MINUTE))
        .await
        .expect("hold");
    f.job_when("job", "suspended", |tj| tj["spec"]["suspend"] == true)
        .await;
    f.stop_gate().await;
    f.exec
        .release(&f.ns, "job", meta(Some(1), MINUTE))
        .await
        .expect("release");
    let wl = f
        .workload_when("job", "pending at the gate again", |w| {
            active(w) && condition(w, "QuotaReserved") && check(w).0 == "Pending"
        })
        .await;
    write_check(
        &f,
        &controller,
        &wl,
        "Pending",
        "attempt=2: claimed; raising",
    )
    .await;
    // The gate's own write, as it makes it: an update with the stored resourceVersion.
    let api = f.trainjobs(&controller);
    let mut job = api.get("job").await.expect("job");
    job.metadata
        .annotations
        .get_or_insert_with(Default::default)
        .insert(ANN_ATTEMPT.to_owned(), "2".to_owned());
    api.replace("job", &PostParams::default(), &job)
        .await
        .expect("A raised before the crash");
    let raised_before = f.metrics.writes("raise_attempt");
    f.start_gate().await;
    let tj = f
        .job_when("job", "runs again", |tj| tj["spec"]["suspend"] == false)
        .await;
    assert_eq!(annotation(&tj, ANN_ATTEMPT), Some("2"), "not raised twice");
    assert_eq!(f.metrics.writes("raise_attempt"), raised_before);
    let wl = f
        .workload_when("job", "admitted", |w| condition(w, "Admitted"))
        .await;
    assert_eq!(claimed_attempt(&check(&wl).1), Some(2));
    f.finish().await;
}

/// Writes our check's state and message on Workload `wl` as the controller would have.
async fn write_check(f: &Fixture, client: &kube::Client, wl: &Value, state: &str, message: &str) {
    let api = f.workload_api(client);
    let name = wl["metadata"]["name"].as_str().expect("name").to_owned();
    loop {
        let mut fresh = serde_json::to_value(api.get(&name).await.expect("get")).expect("json");
        if let Some(cs) = fresh
            .pointer_mut("/status/admissionChecks")
            .and_then(Value::as_array_mut)
        {
            for c in cs.iter_mut().filter(|c| c["name"] == CHECK) {
                c["state"] = json!(state);
                c["message"] = json!(message);
            }
        }
        let obj: DynamicObject = serde_json::from_value(fresh).expect("object");
        match api
            .replace_status(&name, &PostParams::default(), &obj)
            .await
        {
            Ok(_) => return,
            Err(kube::Error::Api(s)) if s.code == 409 => continue,
            Err(e) => panic!("writing the check: {e}"),
        }
    }
}

/// Kueue mode: a preflight of a TrainJob that has no Workload (yet: Kueue makes one only for a
/// queued job, moments after its creation; this one is not queued) tells its caller so, and
/// changes nothing Hold and Release of every other job consult.
#[tokio::test]
async fn a_targeted_preflight_of_a_job_without_a_workload_leaves_everyone_elses_holds_working() {
    use holdfast_controller::hold::preflight::{CheckResult, Probe};
    let f = Fixture::start("kq-preflight-target").await;
    f.create_job("job", json!({})).await;
    f.open_and_run("job").await;
    let bare: DynamicObject = serde_json::from_value(json!({
        "apiVersion": "trainer.kubeflow.org/v1alpha1", "kind": "TrainJob",
        "metadata": {"name": "bare"},
        "spec": {"runtimeRef": {"name": f.runtime}, "suspend": true}
    }))
    .expect("trainjob");
    f.trainjobs(&f.admin)
        .create(&PostParams::default(), &bare)
        .await
        .expect("create the unqueued TrainJob");

    let report = f.exec.preflight(Some((&f.ns, "bare"))).await;
    let round_trip = report
        .checks
        .iter()
        .find(|c| c.probe == Probe::HoldRoundTrip)
        .expect("round trip");
    assert_eq!(round_trip.result, CheckResult::NotChecked, "{round_trip:?}");
    assert!(
        round_trip
            .detail
            .as_deref()
            .is_some_and(|d| d.contains("no Kueue Workload")),
        "{round_trip:?}"
    );

    let held = f.exec.hold(&f.ns, "job", meta(Some(1), MINUTE)).await;
    assert_eq!(held, Ok(Outcome::Held), "{held:?}");
    f.finish().await;
}

#[tokio::test]
async fn kueue_preflight_probes_workload_updates_and_the_readmission_check() {
    let f = Fixture::start("kq-preflight").await;
    f.create_job("job", json!({})).await;
    f.workload_when("job", "the Workload waits at the start gate", |w| {
        check(w).1.contains("start gate")
    })
    .await;
    let before = f.workloads("job").await;
    // A dry run that meets one of Kueue's own status writes answers 409 (NotChecked): ask
    // again, as a caller would.
    let report = f
        .eventually(
            "a preflight that could check everything",
            SETTLE,
            || async {
                let r = f.exec.preflight(Some((&f.ns, "job"))).await;
                r.checks
                    .iter()
                    .all(|c| {
                        c.result != holdfast_controller::hold::preflight::CheckResult::NotChecked
                    })
                    .then_some(r)
            },
        )
        .await;
    let failed: Vec<_> = report
        .checks
        .iter()
        .filter(|c| c.result != holdfast_controller::hold::preflight::CheckResult::Passed)
        .collect();
    assert!(failed.is_empty(), "every probe passes: {failed:#?}");
    assert!(
        report
            .checks
            .iter()
            .any(|c| c.probe == holdfast_controller::hold::preflight::Probe::ReadmissionCheck)
    );
    assert!(
        report
            .check(holdfast_controller::hold::preflight::Gated::Hold)
            .is_ok()
    );
    let after = f.workloads("job").await;
    assert_eq!(
        before
            .iter()
            .map(|w| annotation(w, ANN_HOLD_INSTANCE))
            .collect::<Vec<_>>(),
        after
            .iter()
            .map(|w| annotation(w, ANN_HOLD_INSTANCE))
            .collect::<Vec<_>>(),
        "the dry-run hold left nothing behind"
    );
    f.finish().await;
}

#[tokio::test]
async fn workload_recreated_by_kueue_while_held_stays_held() {
    let f = Fixture::start("kq-recreate").await;
    f.create_job("job", json!({})).await;
    f.open_and_run("job").await;
    let trainer_client = f.cp.client(Identity::Trainer).await.expect("trainer");
    let report_active = |active: i32| {
        let api = f.trainjobs(&trainer_client);
        async move {
            api.patch_status(
                "job",
                &PatchParams::default(),
                &Patch::Merge(json!({"status": {"jobsStatus": [{"name": "node",
                    "active": active, "ready": 0, "succeeded": 0, "failed": 0, "suspended": 0}]}})),
            )
            .await
            .expect("status as Trainer");
        }
    };
    // Trainer reports a running child Job: after eviction Kueue keeps the quota until the
    // job's pods are gone.
    report_active(1).await;

    let mut m = meta(Some(1), MINUTE);
    m.reason = Some("node lost".into());
    f.exec.hold(&f.ns, "job", m).await.expect("hold");
    let first = f
        .workload_when("job", "evicted, quota still reserved", |w| {
            !active(w) && condition(w, "Evicted") && condition(w, "QuotaReserved")
        })
        .await;
    f.job_when("job", "suspended", |tj| tj["spec"]["suspend"] == true)
        .await;

    // The runtime changes: the job no longer matches its Workload, and Kueue deletes it.
    Api::<DynamicObject>::all_with(
        f.admin.clone(),
        &holdfast_cluster::resources::cluster_training_runtime(),
    )
    .patch(
        &f.runtime,
        &PatchParams::default(),
        &Patch::Merge(json!({"spec": runtime_spec("2")})),
    )
    .await
    .expect("change the runtime");
    f.trainjobs(&f.admin)
        .patch(
            "job",
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"labels": {"example.com/poke": "1"}}})),
        )
        .await
        .expect("poke the job");
    let deleted = f
        .eventually("Kueue deletes the held Workload", SETTLE, || async {
            f.workloads("job")
                .await
                .into_iter()
                .find(|w| uid(w) == uid(&first) && w["metadata"].get("deletionTimestamp").is_some())
        })
        .await;
    assert_eq!(
        finalizers(&deleted),
        vec![HOLD_FINALIZER.to_owned()],
        "the hold finalizer keeps it, held"
    );
    assert_eq!(annotation(&deleted, ANN_HOLD_INSTANCE), Some("1"));

    // Trainer's pods go. Kueue names a job's Workload after the job, so its replacement
    // cannot be created while the held one still exists: the hold stays in force, on the
    // Workload being deleted, and the job stays suspended.
    report_active(0).await;
    let still = stays_suspended(&f, "job", Duration::from_secs(5)).await;
    assert_eq!(annotation(&still, ANN_ATTEMPT), Some("1"));
    let all = f.workloads("job").await;
    assert_eq!(all.len(), 1, "no active replacement: {all:#?}");
    assert_eq!(uid(&all[0]), uid(&first));
    assert_eq!(annotation(&all[0], ANN_HOLD_INSTANCE), Some("1"));
    assert!(!active(&all[0]));
    let status = f.exec.status(&f.ns, "job").await.expect("status");
    assert_eq!(
        status.state,
        ObjectState::HeldByUs {
            instance: Some(1),
            underlying: None
        }
    );
    let err = f
        .exec
        .hold(&f.ns, "job", meta(Some(0), MINUTE))
        .await
        .expect_err("an older hold is still stale");
    assert_eq!(err.cause(), Some(RejectCause::StaleHold));

    // The hold is lifted where it lives: the old Workload goes, Kueue creates the
    // replacement for the changed runtime, and the job runs again through the gate.
    assert_eq!(
        f.exec.release(&f.ns, "job", meta(Some(1), MINUTE)).await,
        Ok(Outcome::Released { resumed: true })
    );
    let replacement = f
        .workload_when("job", "the replacement", |w| uid(w) != uid(&first))
        .await;
    assert_eq!(
        replacement
            .pointer("/spec/podSets/0/template/spec/containers/0/resources/requests/cpu")
            .and_then(Value::as_str),
        Some("2"),
        "the replacement matches the changed runtime"
    );
    let tj = f
        .job_when("job", "runs again", |tj| tj["spec"]["suspend"] == false)
        .await;
    assert_eq!(annotation(&tj, ANN_ATTEMPT), Some("2"));
    f.finish().await;
}

#[tokio::test]
async fn held_workload_deleted_by_a_user_stays_held_until_released() {
    let f = Fixture::start("kq-userdel").await;
    f.create_job("job", json!({})).await;
    f.open_and_run("job").await;
    f.exec
        .hold(&f.ns, "job", meta(Some(4), MINUTE))
        .await
        .expect("hold");
    let held = f
        .workload_when("job", "evicted", |w| !active(w) && condition(w, "Evicted"))
        .await;
    f.job_when("job", "suspended", |tj| tj["spec"]["suspend"] == true)
        .await;

    let alice = f.cp.client(Identity::User).await.expect("alice");
    f.workload_api(&alice)
        .delete(
            held["metadata"]["name"].as_str().expect("name"),
            &DeleteParams::default(),
        )
        .await
        .expect("alice deletes the held Workload");
    let terminating = f
        .eventually("it stays, terminating and held", SETTLE, || async {
            f.workloads("job")
                .await
                .into_iter()
                .find(|w| w["metadata"].get("deletionTimestamp").is_some())
        })
        .await;
    assert_eq!(annotation(&terminating, ANN_HOLD_INSTANCE), Some("4"));
    stays_suspended(&f, "job", Duration::from_secs(3)).await;
    let all = f.workloads("job").await;
    assert_eq!(all.len(), 1, "Kueue made no replacement while it matches");
    let status = f.exec.status(&f.ns, "job").await.expect("status");
    assert_eq!(
        status.state,
        ObjectState::HeldByUs {
            instance: Some(4),
            underlying: None
        }
    );
    let err = f
        .exec
        .release(&f.ns, "job", meta(Some(3), MINUTE))
        .await
        .expect_err("stale");
    assert_eq!(err.cause(), Some(RejectCause::StaleHold));

    // Release lifts it there: the deleted Workload goes, Kueue makes an active one, and the
    // job runs through the gate.
    assert_eq!(
        f.exec.release(&f.ns, "job", meta(Some(4), MINUTE)).await,
        Ok(Outcome::Released { resumed: true })
    );
    let tj = f
        .job_when("job", "runs again", |tj| tj["spec"]["suspend"] == false)
        .await;
    assert_eq!(annotation(&tj, ANN_ATTEMPT), Some("2"));
    let all = f.workloads("job").await;
    assert_eq!(all.len(), 1);
    assert_ne!(uid(&all[0]), uid(&held), "a new Workload");
    f.finish().await;
}

#[tokio::test]
async fn alice_can_neither_reactivate_a_held_workload_nor_flip_the_trainjobs_suspend() {
    let f = Fixture::start("kq-alice").await;
    let webhook = Webhook::serve(&f).await;
    let alice = f.cp.client(Identity::User).await.expect("alice");

    // Kueue and holdfast work through the webhook: the job is opened and admitted.
    f.create_job("job", json!({})).await;
    f.open_and_run("job").await;
    f.exec
        .hold(&f.ns, "job", meta(Some(1), MINUTE))
        .await
        .expect("hold");
    let held = f
        .workload_when("job", "evicted", |w| !active(w) && condition(w, "Evicted"))
        .await;
    f.job_when("job", "Kueue suspends it", |tj| {
        tj["spec"]["suspend"] == true
    })
    .await;
    let name = held["metadata"]["name"].as_str().expect("name").to_owned();

    let message = refused(
        f.workload_api(&alice)
            .patch(
                &name,
                &PatchParams::default(),
                &Patch::Merge(json!({"spec": {"active": true}})),
            )
            .await,
    );
    assert!(message.contains("spec.active"), "{message}");
    // Dropping the hold's annotation does not lift it either: the webhook refuses it or
    // (a write that merely drops it) restores it.
    match f
        .workload_api(&alice)
        .patch(
            &name,
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"annotations": {ANN_HOLD_INSTANCE: null}}})),
        )
        .await
    {
        Err(kube::Error::Api(s)) if s.code == 403 => {}
        Ok(kept) => assert_eq!(
            kept.metadata
                .annotations
                .as_ref()
                .and_then(|a| a.get(ANN_HOLD_INSTANCE))
                .map(String::as_str),
            Some("1"),
            "restored"
        ),
        Err(e) => panic!("unexpected {e}"),
    }
    let message = refused(
        f.trainjobs(&alice)
            .patch(
                "job",
                &PatchParams::default(),
                &Patch::Merge(json!({"spec": {"suspend": false}})),
            )
            .await,
    );
    assert!(message.contains("spec.suspend"), "{message}");
    let wl = f
        .workloads("job")
        .await
        .into_iter()
        .find(|w| uid(w) == uid(&held))
        .expect("the held Workload");
    assert!(!active(&wl));
    assert_eq!(annotation(&wl, ANN_HOLD_INSTANCE), Some("1"));
    stays_suspended(&f, "job", Duration::from_secs(1)).await;

    // The holder releases it, and Kueue runs it again, through the webhook.
    f.exec
        .release(&f.ns, "job", meta(Some(1), MINUTE))
        .await
        .expect("release");
    let tj = f
        .job_when("job", "runs again", |tj| tj["spec"]["suspend"] == false)
        .await;
    assert_eq!(annotation(&tj, ANN_ATTEMPT), Some("2"));
    webhook.stop().await;
    f.finish().await;
}

#[tokio::test]
async fn status_classifies_what_real_kueue_writes() {
    let f = Fixture::start("kq-status").await;
    let state = |job: &'static str| {
        let f = &f;
        async move { f.exec.status(&f.ns, job).await.expect("status").state }
    };
    f.create_job("job", json!({})).await;
    f.workload_when("job", "at the start gate", |w| {
        check(w).1.contains("start gate")
    })
    .await;
    assert_eq!(state("job").await, ObjectState::AtStartGate);

    // Opened, but the gate waits for pods of an earlier execution: pending.
    f.create_pods("job", 1).await;
    f.exec
        .open(&f.ns, "job", meta(None, MINUTE))
        .await
        .expect("open");
    f.workload_when("job", "the gate waits for pods", |w| {
        check(w).1.contains("pods of the previous execution")
    })
    .await;
    assert_eq!(
        state("job").await,
        ObjectState::Pending {
            waiting_for: Waiting::AdmissionChecks
        }
    );
    f.delete_pods("job").await;
    f.job_when("job", "runs", |tj| tj["spec"]["suspend"] == false)
        .await;
    assert_eq!(state("job").await, ObjectState::Running);

    // Someone else deactivates it (no webhook here): Kueue evicts it as "Deactivated", and
    // without a hold of ours that is someone else's deactivation.
    let wl = f
        .workload_when("job", "admitted", |w| condition(w, "Admitted"))
        .await;
    let alice = f.cp.client(Identity::User).await.expect("alice");
    f.workload_api(&alice)
        .patch(
            wl["metadata"]["name"].as_str().expect("name"),
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"active": false}})),
        )
        .await
        .expect("alice deactivates it");
    f.workload_when("job", "evicted", |w| {
        condition_reason(w, "Evicted").as_deref() == Some("Deactivated")
    })
    .await;
    assert_eq!(state("job").await, ObjectState::DeactivatedBySomeoneElse);
    f.workload_api(&alice)
        .patch(
            wl["metadata"]["name"].as_str().expect("name"),
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"active": true}})),
        )
        .await
        .expect("alice reactivates it");
    f.job_when("job", "runs again", |tj| tj["spec"]["suspend"] == false)
        .await;

    // Trainer reports it complete: finished, whatever else.
    let trainer_client = f.cp.client(Identity::Trainer).await.expect("trainer");
    f.trainjobs(&trainer_client)
        .patch_status(
            "job",
            &PatchParams::default(),
            &Patch::Merge(
                json!({"status": {"conditions": [{"type": "Complete", "status": "True",
                "reason": "JobsCompleted", "message": "done",
                "lastTransitionTime": "2026-11-29T12:00:00Z"}]}}),
            ),
        )
        .await
        .expect("complete");
    f.workload_when("job", "Kueue finishes the Workload", |w| {
        condition(w, "Finished")
    })
    .await;
    assert_eq!(
        state("job").await,
        ObjectState::Finished { succeeded: true }
    );
    f.finish().await;
}

/// The race of `hold_race.rs`, in Kueue mode: the held object is the Workload, and the other
/// writers are the real Kueue evicting and re-admitting it as holds come and go, and the
/// readmission gate (its queue requires the gate: hold calls refuse where it does not). The
/// race's checks count only the hold calls' requests (their User-Agent names a deadline).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_holds_and_releases_in_kueue_mode_never_let_an_older_instance_replace_a_newer_one()
 {
    let f = Fixture::start("kq-race").await;
    f.create_job("race", json!({})).await;
    f.open_and_run("race").await;
    let workload = f
        .workload_when("race", "admitted", |w| condition(w, "Admitted"))
        .await;
    let name = workload["metadata"]["name"]
        .as_str()
        .expect("name")
        .to_owned();
    hold_support::race::run(
        f.cp,
        Mode::Kueue,
        &f.ns,
        "race",
        f.workload_api(&f.admin),
        &name,
        hold_support::race::calls(),
    )
    .await;
    f.finish().await;
}

#[tokio::test]
async fn deleting_a_held_trainjob_lets_its_held_workload_go() {
    let f = Fixture::start("kq-gone").await;
    f.create_job("job", json!({})).await;
    f.open_and_run("job").await;
    f.exec
        .hold(&f.ns, "job", meta(Some(1), MINUTE))
        .await
        .expect("hold");
    let held = f
        .workload_when("job", "evicted", |w| !active(w) && condition(w, "Evicted"))
        .await;
    let name = held["metadata"]["name"].as_str().expect("name").to_owned();
    f.trainjobs(&f.admin)
        .delete("job", &DeleteParams::background())
        .await
        .expect("delete the TrainJob");
    // The garbage collector deletes the Workload; with its TrainJob gone there is nothing
    // left to hold, so the gate removes the hold finalizer and the Workload goes.
    let api = f.workload_api(&f.admin);
    f.eventually("the held Workload is gone", SETTLE, || async {
        api.get_opt(&name)
            .await
            .expect("get workload")
            .is_none()
            .then_some(())
    })
    .await;
    // The Workload can be gone before the controller's task, back from its PUT, counts the
    // write: wait for the count rather than read it once.
    f.eventually("the gate counted its release", SETTLE, || async {
        (f.metrics.writes("transfer_release") >= 1).then_some(())
    })
    .await;
    f.finish().await;
}

/// Metrics (issue #18): kueue mode holds the Workload: the gate's Workload store gives the held gauges (no
/// request), with the Workload's own hold-placed-at as the oldest hold's start.
#[tokio::test]
async fn kueue_mode_counts_held_workloads_from_the_gates_store() {
    let f = Fixture::start("kq-held-gauges").await;
    let gate = f.gate().expect("the gate runs").clone();
    f.create_job("job", json!({})).await;
    f.open_and_run("job").await;
    f.workload_when("job", "admitted", |w| condition(w, "Admitted"))
        .await;
    let none =
        holdfast_tests::wait::wait_for("the gate's store listed", MINUTE, || async { gate.held() })
            .await;
    assert_eq!(none.held, 0);
    assert_eq!(none.oldest_placed, None);

    let meta = meta(Some(3), MINUTE);
    assert_eq!(
        f.exec.hold(&f.ns, "job", meta).await,
        Ok(holdfast_core::hold::Outcome::Held)
    );
    let held = f
        .workload_when("job", "held", |w| {
            w["metadata"]["annotations"][holdfast_core::names::ANN_HOLD_PLACED_AT].is_string()
        })
        .await;
    let placed: jiff::Timestamp = held["metadata"]["annotations"]
        [holdfast_core::names::ANN_HOLD_PLACED_AT]
        .as_str()
        .and_then(|t| t.parse().ok())
        .expect("hold-placed-at");
    let count = holdfast_tests::wait::wait_for("the hold in the gate's store", MINUTE, || async {
        gate.held().filter(|c| c.held == 1)
    })
    .await;
    assert_eq!(count.oldest_placed, Some(placed));
}

/// Open of a managed job without its runtime snapshot writes no opened mark, so the
/// readmission gate keeps its Workload at the start gate; once the snapshot is written, a
/// later Open lets it through. (The executor as the controller wires it: snapshot gate on.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kueue_mode_open_waits_for_the_snapshot_and_the_gate_keeps_the_job_until_then() {
    use holdfast_controller::snapshot::{Config, SnapshotMetrics, Snapshotter};
    let mut f = Fixture::start("kq-nosnap").await;
    f.exec = f.exec.clone().with_snapshot_gate();
    f.create_job("job", json!({})).await;
    f.workload_when("job", "the Workload has quota and waits at the gate", |w| {
        check(w).0 == "Pending" && condition(w, "QuotaReserved")
    })
    .await;

    // No snapshot reconciler yet: Open waits for the snapshot within its deadline, and says
    // what it waited for whichever of its reads met the deadline. The deadline leaves a
    // loaded apiserver time for the fresh executor's preflight and the reads before the
    // first wait (CI's run once met 10 s in a read after the wait, before the answer named
    // the wait).
    let answer = f
        .exec
        .open(&f.ns, "job", meta(None, Duration::from_secs(20)))
        .await;
    let Err(error) = &answer else {
        panic!("Open must wait for the snapshot: {answer:?}");
    };
    assert_eq!(
        error.cause(),
        Some(RejectCause::DeadlinePassed),
        "{error:?}"
    );
    assert!(
        error.body().message.contains("no runtime snapshot yet"),
        "{error:?}"
    );
    assert_eq!(f.exec.metrics().opens_without_snapshot("pending"), 1);
    let job = f.trainjob("job").await;
    assert_eq!(annotation(&job, holdfast_core::names::ANN_OPENED), None);
    // The gate keeps it at the start gate.
    tokio::time::sleep(Duration::from_secs(3)).await;
    let workloads = f.workloads("job").await;
    assert!(
        workloads
            .iter()
            .all(|w| check(w).0 == "Pending" && !condition(w, "Admitted")),
        "{workloads:#?}"
    );
    assert_eq!(f.trainjob("job").await["spec"]["suspend"], true);

    // The snapshot is written: a later Open opens the gate, and the job runs.
    let controller = f.cp.client(Identity::Controller).await.expect("controller");
    let snapshotter = Snapshotter::new(
        controller.clone(),
        Config {
            namespace: Some(f.ns.clone()),
            ..Config::default()
        },
        SnapshotMetrics::default(),
        holdfast_serve::Readiness::default(),
        holdfast_tests::leader_parts::publisher(&controller, None),
    );
    let stop = tokio_util::sync::CancellationToken::new();
    let feed = holdfast_tests::leader_parts::trainjob_feed(&controller, Some(&f.ns), &stop);
    let task = tokio::spawn({
        let stop = stop.clone();
        async move { snapshotter.run_on(feed, stop).await }
    });
    assert_eq!(
        f.exec.open(&f.ns, "job", meta(None, MINUTE)).await,
        Ok(Outcome::Opened { started: false })
    );
    f.job_when("job", "the job runs", |tj| tj["spec"]["suspend"] == false)
        .await;
    stop.cancel();
    let _ = tokio::time::timeout(Duration::from_secs(30), task).await;
    f.finish().await;
}

/// The stale-unsuspend race, on demand. Kueue unsuspends an admitted TrainJob from its cache;
/// the webhook, admitting that write, reads the job's Workloads and finds no hold; the Hold
/// lands right then (staged inside the webhook's lookup, after its read and before its
/// answer); then the apiserver stores the unsuspend. Without a mark on the TrainJob the
/// held job's pods would start until Kueue's eviction suspends it again. With the mark,
/// written before the Workload is deactivated, the unsuspend decided on the unmarked
/// TrainJob cannot be stored (the apiserver stores an update only on the version its
/// admission judged), and every later try is judged on the marked one and refused.
#[tokio::test]
async fn a_hold_landing_between_the_webhooks_read_and_kueues_unsuspend_keeps_the_job_stopped() {
    let f = Fixture::start("kq-stale-unsuspend").await;
    let staged = kueue_support::StagedHolds::default();
    let webhook = Webhook::serve_staged(&f, &staged).await;
    let job_uid = uid(&f.create_job("job", json!({})).await);

    // Hold 1 is placed inside the webhook's lookup for Kueue's first unsuspend of the job.
    let (exec, ns) = (f.exec.clone(), f.ns.clone());
    let placed = staged.arm(&job_uid, move || {
        Box::pin(async move { exec.hold(&ns, "job", meta(Some(1), MINUTE)).await })
    });
    f.open_at_gate("job").await;
    let run = tokio::time::timeout(SETTLE, placed)
        .await
        .expect("Kueue unsuspends the admitted job, and the webhook looks its Workloads up")
        .expect("the staged hold ran");
    assert_eq!(
        run.found,
        Ok(None),
        "the webhook read no hold: the race's window"
    );
    assert_eq!(run.output, Ok(Outcome::Held), "the hold landed inside it");

    // Kueue's unsuspend, in flight while the hold landed, was not stored.
    let staged_write = f
        .eventually("Kueue's staged unsuspend is answered", SETTLE, || async {
            settled_audit(f.cp).await.into_iter().find(|e| {
                let at = |key: &str| {
                    e[key]
                        .as_str()
                        .and_then(|t| t.parse::<jiff::Timestamp>().ok())
                };
                e["user"]["username"] == Identity::Kueue.username()
                    && e["objectRef"]["namespace"] == f.ns.as_str()
                    && e["objectRef"]["resource"] == "trainjobs"
                    && e["objectRef"]["name"] == "job"
                    && e["objectRef"]["subresource"].is_null()
                    && matches!(e["verb"].as_str(), Some("update" | "patch"))
                    && e["stage"] == "ResponseComplete"
                    && at("requestReceivedTimestamp").is_some_and(|t| t < run.started)
                    && at("stageTimestamp").is_some_and(|t| t > run.started)
            })
        })
        .await;
    assert_ne!(
        staged_write["responseStatus"]["code"], 200,
        "Kueue's unsuspend, admitted on a read from before hold 1, was stored after it: the held job would start ({staged_write:#})"
    );

    // Kueue evicts the held Workload; the job never ran, and stays suspended.
    f.workload_when("job", "Kueue evicts the held Workload", |w| {
        !active(w) && condition_reason(w, "Evicted").is_some_and(|r| r.contains("Deactivated"))
    })
    .await;
    stays_suspended(&f, "job", Duration::from_secs(2)).await;
    // Kueue's next try is judged on the marked TrainJob and refused, naming the hold.
    let kueue = f.cp.client(Identity::Kueue).await.expect("kueue");
    let message = refused(
        f.trainjobs(&kueue)
            .patch(
                "job",
                &PatchParams::default(),
                &Patch::Merge(json!({"spec": {"suspend": false}})),
            )
            .await,
    );
    assert!(message.contains(ANN_HOLD_MARK), "{message}");

    // Released, the mark goes with the hold: the job runs again.
    assert_eq!(
        f.exec.release(&f.ns, "job", meta(Some(1), MINUTE)).await,
        Ok(Outcome::Released { resumed: true })
    );
    f.job_when("job", "the job runs again", |tj| {
        tj["spec"]["suspend"] == false
    })
    .await;
    webhook.stop().await;
    f.finish().await;
}

/// The mark's lifetime when a Hold ends between its two writes: the mark is on the TrainJob,
/// the Workload was never deactivated. The sweep keeps the mark while a call that wrote it
/// may still write (its deadline plus the CallBound not passed), and removes it after, with
/// a preconditioned update as the controller's RBAC allows; it keeps the mark of a hold in
/// force however old its call.
#[tokio::test]
async fn a_mark_left_by_a_hold_that_ended_between_its_writes_is_swept_only_once_its_calls_are_over()
{
    let f = Fixture::start("kq-mark-sweep").await;
    f.create_job("job", json!({})).await;
    f.workload_when("job", "Kueue made the Workload", |_| true)
        .await;
    let controller = f.cp.client(Identity::Controller).await.expect("controller");
    let bound = f.exec.call_bound();

    leave_a_stale_mark(&f, "job").await;
    let tj = f.trainjob("job").await;
    let mark = annotation(&tj, ANN_HOLD_MARK).and_then(Mark::parse);
    assert_eq!(
        mark.as_ref().map(|m| m.instance),
        Some(1),
        "{:#}",
        tj["metadata"]
    );
    let wl = f.workload_when("job", "the Workload", |_| true).await;
    assert!(active(&wl) && annotation(&wl, ANN_HOLD_INSTANCE).is_none());

    // Within the CallBound after the deadline a request of the call could still land: kept.
    // The sweep is given the job as the leader's cache would (the marked job, read now).
    let sweep = |bound| {
        let (f, controller) = (&f, &controller);
        async move {
            let marked = holdfast_controller::hold::MarkedJob::of(&f.trainjob("job").await);
            holdfast_controller::hold::sweep_marks(controller, marked, bound).await
        }
    };
    assert_eq!(sweep(bound).await.expect("sweep"), 0);
    assert!(annotation(&f.trainjob("job").await, ANN_HOLD_MARK).is_some());
    // Once it has passed (a CallBound of zero: the deadline is behind), removed.
    assert_eq!(sweep(Duration::ZERO).await.expect("sweep"), 1);
    assert_eq!(annotation(&f.trainjob("job").await, ANN_HOLD_MARK), None);

    // A hold in force keeps its mark, whatever its call's age: the sweep, run once the
    // hold's call's deadline is behind, keeps it. (The deadline leaves a loaded apiserver time for the hold's four
    // requests; 2 s was tight on busy cores.)
    let m = meta(Some(2), Duration::from_secs(10));
    let deadline = m.deadline;
    assert_eq!(f.exec.hold(&f.ns, "job", m).await, Ok(Outcome::Held));
    let left = deadline.duration_since(jiff::Timestamp::now());
    tokio::time::sleep(Duration::try_from(left).unwrap_or_default() + Duration::from_millis(100))
        .await;
    assert_eq!(sweep(Duration::ZERO).await.expect("sweep"), 0);
    let tj = f.trainjob("job").await;
    assert_eq!(
        annotation(&tj, ANN_HOLD_MARK).and_then(|m| Mark::parse(m).map(|m| m.instance)),
        Some(2)
    );
    f.finish().await;
}

/// Hold 1 of `job` stops between its mark and its Workload update, and its deadline passes
/// there: the TrainJob keeps a mark, and no hold is placed.
async fn leave_a_stale_mark(f: &Fixture, job: &str) {
    let stalled = f.exec.clone().with_hooks(holdfast_controller::hold::Hooks {
        between_read_and_write: Some(std::sync::Arc::new(|_| {
            Box::pin(tokio::time::sleep(Duration::from_secs(4)))
        })),
    });
    let err = stalled
        .hold(&f.ns, job, meta(Some(1), Duration::from_secs(2)))
        .await
        .expect_err("the deadline passes before the Workload's update");
    assert_eq!(err.cause(), Some(RejectCause::DeadlinePassed), "{err}");
}

/// The controller sweeps stale marks from the TrainJobs its readmission gate caches (no list of
/// every TrainJob): a mark a Hold left between its two writes is removed through the running
/// gate's store once its calls are over.
#[tokio::test]
async fn a_stale_mark_is_swept_from_the_readmission_gates_trainjob_cache() {
    let f = Fixture::start("kq-mark-cache").await;
    f.create_job("job", json!({})).await;
    f.workload_when("job", "Kueue made the Workload", |_| true)
        .await;
    let controller = f.cp.client(Identity::Controller).await.expect("controller");
    leave_a_stale_mark(&f, "job").await;
    assert!(annotation(&f.trainjob("job").await, ANN_HOLD_MARK).is_some());

    // The sweep as the controller runs it, over the running gate's TrainJob store (a
    // CallBound of zero: the call's deadline is behind).
    let gate = f.gate().expect("the gate runs").clone();
    let stop = tokio_util::sync::CancellationToken::new();
    let sweeping = tokio::spawn(holdfast_controller::hold::sweep_marks_every(
        controller,
        move || gate.trainjobs(),
        Duration::ZERO,
        Duration::from_millis(500),
        stop.clone(),
    ));
    f.eventually(
        "the sweep removed the mark",
        Duration::from_secs(30),
        || async {
            annotation(&f.trainjob("job").await, ANN_HOLD_MARK)
                .is_none()
                .then_some(())
        },
    )
    .await;
    stop.cancel();
    sweeping.await.expect("the sweep stops");
    f.finish().await;
}
