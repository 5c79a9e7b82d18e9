//! Switching mode (`helm upgrade --set mode=…`, plain ↔ kueue) with a hold in force, against
//! the real apiserver and the real Kueue (the chart README: "Switching mode"). The switch is
//! what the upgrade changes for a job: the chart's webhook configurations (and, under
//! `validation.engine` policy, its admission policies) of the new mode replace the old ones,
//! and the controller's hold API and readmission gate run in the new mode. Each test holds a
//! running job in one mode, switches, tries the permitted requests that would start it again
//! (as a cluster admin and as Kueue), then releases it through the new mode's hold API: a
//! stale instance is refused, the hold's own instance lifts it, and the job runs again.

use holdfast_tests::objects::TrainJob;
use std::time::Duration;

use holdfast_controller::hold::HoldExecutor;
use holdfast_core::hold::{HeldObject, Outcome, RejectCause};
use holdfast_core::mode::Mode;
use holdfast_core::names::{ANN_ATTEMPT, ANN_HOLD_INSTANCE, HOLD_FINALIZER};
use holdfast_tests::hold_support::{self, annotation, meta, suspended};
use holdfast_tests::kueue_support::{
    Fixture, MINUTE, QUEUE, SETTLE, Webhook, active, condition, finalizers, refused,
};
use holdfast_tests::{ControlPlane, Identity};
use kube::api::{Api, DynamicObject, Patch, PatchParams, PostParams};
use serde_json::{Value, json};

/// A plain-mode executor acting as holdfast's controller.
async fn plain_executor(cp: &ControlPlane) -> HoldExecutor {
    hold_support::executor(cp).await
}

/// The job, resumed: `spec.suspend: false`.
fn resume() -> Patch<Value> {
    Patch::Merge(json!({"spec": {"suspend": false}}))
}

/// A dry run of `patch` on `name`, refused (by the webhook or an admission policy) with a
/// message containing `why`: polled until it is, since a registration takes effect
/// asynchronously, and the old mode's leaves the apiserver's cache on its own (under the
/// policy engine, each policy). Then made for real and refused again; the message.
async fn refused_once_in_effect(
    f: &Fixture,
    api: &Api<DynamicObject>,
    name: &str,
    patch: &Patch<Value>,
    why: &str,
) -> String {
    let dry = PatchParams {
        dry_run: true,
        ..Default::default()
    };
    f.eventually(
        &format!("the new mode's admission refuses {patch:?} on {name}"),
        Duration::from_secs(30),
        || async {
            matches!(api.patch(name, &dry, patch).await,
                Err(kube::Error::Api(s)) if s.code == 403 && s.message.contains(why))
            .then_some(())
        },
    )
    .await;
    let message = refused(api.patch(name, &PatchParams::default(), patch).await);
    assert!(message.contains(why), "{message}");
    message
}

/// Whether Kueue sent an update of TrainJob `ns/name` that admission refused (the audit log).
async fn kueue_was_refused(cp: &ControlPlane, ns: &str, name: &str) -> bool {
    hold_support::settled_audit(cp).await.iter().any(|e| {
        e.pointer("/user/username").and_then(Value::as_str) == Some(Identity::Kueue.username())
            && e.pointer("/objectRef/namespace").and_then(Value::as_str) == Some(ns)
            && e.pointer("/objectRef/name").and_then(Value::as_str) == Some(name)
            && hold_support::resource(e) == "trainjobs"
            && matches!(hold_support::verb(e), "update" | "patch")
            && hold_support::code(e) == 403
    })
}

/// Plain mode → kueue mode. In plain mode a managed, unqueued job is opened and held (hold 3:
/// `spec.suspend` and the hold's marks on the TrainJob). After the switch nobody may unsuspend
/// it: a cluster admin is refused (Kueue's field), and once queued — the switch's own step —
/// Kueue admits its Workload through the readmission gate and is refused the unsuspend (the
/// TrainJob carries the hold). The kueue-mode hold API reads hold 3 from the TrainJob, refuses
/// a stale Release and lifts it with its instance; Kueue then starts the job.
#[tokio::test]
async fn a_plain_mode_hold_still_stops_the_job_after_switching_to_kueue_mode_and_releases_with_its_instance()
 {
    let f = Fixture::start("switch-to-kueue").await;
    let cp = f.cp;
    // Plain mode: the chart's plain-mode registration and controller.
    let plain = Webhook::serve_in(&f, Mode::Plain).await;
    let exec = plain_executor(cp).await;
    let jobs = f.trainjobs(&f.admin);
    let tj = TrainJob::named("job")
        .runtime(&f.runtime)
        .managed()
        .suspended(true)
        .object();
    jobs.create(&PostParams::default(), &tj)
        .await
        .expect("create TrainJob");
    assert_eq!(
        exec.open(&f.ns, "job", meta(None, MINUTE)).await,
        Ok(Outcome::Opened { started: true })
    );
    assert_eq!(
        exec.hold(&f.ns, "job", meta(Some(3), MINUTE)).await,
        Ok(Outcome::Held)
    );
    let held = f.trainjob("job").await;
    assert!(suspended(&held));
    assert_eq!(annotation(&held, ANN_HOLD_INSTANCE), Some("3"));

    // `helm upgrade --set mode=kueue`: the kueue-mode configurations replace the plain ones;
    // the controller (f.exec, the gate) runs in kueue mode.
    plain.stop().await;
    let webhook = Webhook::serve(&f).await;

    // A cluster admin may not unsuspend it.
    refused_once_in_effect(&f, &jobs, "job", &resume(), "placed in plain mode").await;
    // Queued (allowed: the queue requires the readmission check), Kueue makes a Workload and
    // admits it through the gate, then is refused the unsuspend: the TrainJob carries hold 3.
    jobs.patch(
        "job",
        &PatchParams::default(),
        &Patch::Merge(json!({"metadata": {"labels": {"kueue.x-k8s.io/queue-name": QUEUE}}})),
    )
    .await
    .expect("queue the job");
    f.workload_when("job", "Kueue admits the Workload", |w| {
        condition(w, "Admitted")
    })
    .await;
    f.eventually("Kueue's unsuspend is refused", SETTLE, || async {
        kueue_was_refused(cp, &f.ns, "job").await.then_some(())
    })
    .await;
    let still = f.trainjob("job").await;
    assert!(suspended(&still), "the held job stays suspended");
    assert_eq!(annotation(&still, ANN_HOLD_INSTANCE), Some("3"));

    // The kueue-mode hold API sees hold 3, on the TrainJob, placed in plain mode.
    let status = f.exec.status(&f.ns, "job").await.expect("status");
    assert_eq!(status.hold.as_ref().and_then(|h| h.instance), Some(3));
    assert_eq!(status.mode, Mode::Plain, "the mode of the hold in force");
    assert_eq!(status.held_object, HeldObject::TrainJob);
    // A stale instance is refused; the hold's own lifts it (its marks only: Kueue owns
    // spec.suspend in kueue mode) and Kueue starts the job.
    let stale = f.exec.release(&f.ns, "job", meta(Some(2), MINUTE)).await;
    assert_eq!(
        stale.expect_err("stale").cause(),
        Some(RejectCause::StaleHold)
    );
    assert_eq!(
        f.exec.release(&f.ns, "job", meta(Some(3), MINUTE)).await,
        Ok(Outcome::Released { resumed: true })
    );
    let running = f
        .job_when("job", "Kueue starts the released job", |tj| {
            tj["spec"]["suspend"] == false
        })
        .await;
    assert_eq!(annotation(&running, ANN_HOLD_INSTANCE), None);
    assert_eq!(
        annotation(&running, ANN_ATTEMPT),
        Some("2"),
        "the gate raised A once"
    );
    // The next hold is a kueue-mode hold, on the Workload.
    assert_eq!(
        f.exec.hold(&f.ns, "job", meta(Some(4), MINUTE)).await,
        Ok(Outcome::Held)
    );
    let w = f
        .workload_when("job", "held in kueue mode", |w| !active(w))
        .await;
    assert!(finalizers(&w).contains(&HOLD_FINALIZER.to_owned()));
    webhook.stop().await;
    f.finish().await;
}

/// Kueue mode: a queued job runs through its start gate and is held (hold 4); then
/// `helm upgrade --set mode=plain`: the plain-mode configurations replace the kueue ones, the
/// readmission gate stops, and the check comes off the queue (README). The plain-mode webhook
/// and controller.
async fn held_in_kueue_mode_then_switched_to_plain(f: &mut Fixture) -> (Webhook, HoldExecutor) {
    let cp = f.cp;
    let webhook = Webhook::serve(f).await;
    f.create_job("job", json!({})).await;
    f.open_and_run("job").await;
    assert_eq!(
        f.exec.hold(&f.ns, "job", meta(Some(4), MINUTE)).await,
        Ok(Outcome::Held)
    );
    f.workload_when("job", "held", |w| !active(w)).await;
    f.job_when("job", "Kueue suspends the held job", suspended)
        .await;

    // `helm upgrade --set mode=plain`: the plain-mode configurations replace the kueue ones,
    // the readmission gate stops, and the check comes off the queue (README).
    webhook.stop().await;
    f.stop_gate().await;
    let queues: Api<DynamicObject> = Api::all_with(
        f.admin.clone(),
        &holdfast_cluster::resources::cluster_queue(),
    );
    queues
        .patch(
            &format!("cq-{}", f.ns),
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"admissionChecksStrategy": null}})),
        )
        .await
        .expect("the check off the ClusterQueue");
    let plain = Webhook::serve_in(f, Mode::Plain).await;
    let exec = plain_executor(cp).await;
    // Calls then go through the watch of held Workloads (it has the hold's marks), not the
    // reads made while it lists.
    assert!(exec.workloads_listed(MINUTE).await, "the watch lists");
    (plain, exec)
}

/// Kueue mode → plain mode. A queued job runs through its start gate and is held in kueue
/// mode (hold 4: the Workload inactive, with the hold's marks and finalizer; Kueue suspends
/// the TrainJob). After the switch (the readmission check taken off the queue, as the README
/// says) nobody may start it: a cluster admin's unsuspend, and Kueue's, are refused (the
/// webhook reads the Workload's hold); the Workload may not be re-activated, moved or
/// disowned. The plain-mode hold API reads hold 4 from the
/// Workload, refuses a stale Release and lifts it with its instance; Kueue then admits the
/// job again and starts it.
#[tokio::test]
async fn a_kueue_mode_hold_still_stops_the_job_after_switching_to_plain_mode_and_releases_with_its_instance()
 {
    let mut f = Fixture::start("switch-to-plain").await;
    let (plain, exec) = held_in_kueue_mode_then_switched_to_plain(&mut f).await;
    let jobs = f.trainjobs(&f.admin);
    refused_once_in_effect(&f, &jobs, "job", &resume(), "carries hold 4").await;
    // Kueue, on a stale view of its Workload, is refused too.
    let kueue = f.cp.client(Identity::Kueue).await.expect("kueue");
    let message = refused(
        f.trainjobs(&kueue)
            .patch("job", &PatchParams::default(), &resume())
            .await,
    );
    assert!(message.contains("carries hold 4"), "{message}");
    let workloads = f.workload_api(&f.admin);
    let held = f.workload_when("job", "still held", |w| !active(w)).await;
    let wname = held["metadata"]["name"].as_str().expect("name").to_owned();
    for (what, edit) in [
        ("re-activated", json!({"spec": {"active": true}})),
        ("moved", json!({"spec": {"queueName": "elsewhere"}})),
        ("disowned", json!({"metadata": {"ownerReferences": null}})),
    ] {
        let message =
            refused_once_in_effect(&f, &workloads, &wname, &Patch::Merge(edit), "Workload").await;
        assert!(
            message.contains("hold") || message.contains("owner"),
            "{what}: {message}"
        );
    }
    assert!(suspended(&f.trainjob("job").await));

    // The plain-mode hold API sees hold 4, on the Workload, placed in kueue mode.
    let status = exec.status(&f.ns, "job").await.expect("status");
    assert_eq!(status.hold.as_ref().and_then(|h| h.instance), Some(4));
    assert_eq!(status.mode, Mode::Kueue, "the mode of the hold in force");
    assert_eq!(status.held_object, HeldObject::Workload);
    let stale = exec.release(&f.ns, "job", meta(Some(3), MINUTE)).await;
    assert_eq!(
        stale.expect_err("stale").cause(),
        Some(RejectCause::StaleHold)
    );
    assert_eq!(
        exec.release(&f.ns, "job", meta(Some(4), MINUTE)).await,
        Ok(Outcome::Released { resumed: true })
    );
    let lifted = f.workload_when("job", "re-activated", active).await;
    assert!(!finalizers(&lifted).contains(&HOLD_FINALIZER.to_owned()));
    f.job_when("job", "Kueue admits and starts the released job", |tj| {
        tj["spec"]["suspend"] == false
    })
    .await;
    // The next hold is a plain-mode hold, on the TrainJob.
    assert_eq!(
        exec.hold(&f.ns, "job", meta(Some(5), MINUTE)).await,
        Ok(Outcome::Held)
    );
    let tj = f.trainjob("job").await;
    assert_eq!(annotation(&tj, ANN_HOLD_INSTANCE), Some("5"));
    plain.stop().await;
    f.finish().await;
}

/// Kueue mode → plain mode, and the held Workload deleted: its hold finalizer keeps it (and
/// its hold) while Kueue may make a replacement, so the job stays stopped; no readmission
/// controller moves the hold in plain mode, so the plain-mode hold API finds it on the
/// Workload being deleted and releases it there, and the deletion completes.
#[tokio::test]
async fn deleting_a_workload_held_in_kueue_mode_after_the_switch_neither_starts_the_job_nor_strands_its_hold()
 {
    let mut f = Fixture::start("switch-delete").await;
    let (plain, exec) = held_in_kueue_mode_then_switched_to_plain(&mut f).await;
    let held = f.workload_when("job", "held", |w| !active(w)).await;
    let wname = held["metadata"]["name"].as_str().expect("name").to_owned();
    // Kueue names a job's Workload after the job, so the one it creates once the deleted one
    // is gone has the same name: the deleted one is told by its uid.
    let wuid = held["metadata"]["uid"].as_str().expect("uid").to_owned();
    f.workload_api(&f.admin)
        .delete(&wname, &Default::default())
        .await
        .expect("delete the held Workload");
    let jobs = f.trainjobs(&f.admin);
    refused_once_in_effect(&f, &jobs, "job", &resume(), "carries hold 4").await;
    let status = exec.status(&f.ns, "job").await.expect("status");
    assert_eq!(status.hold.as_ref().and_then(|h| h.instance), Some(4));
    assert_eq!(
        exec.release(&f.ns, "job", meta(Some(4), MINUTE)).await,
        Ok(Outcome::Released { resumed: true })
    );
    f.eventually("the deleted Workload is gone", SETTLE, || async {
        let gone = f
            .workloads("job")
            .await
            .iter()
            .all(|w| w["metadata"]["uid"] != wuid.as_str());
        gone.then_some(())
    })
    .await;
    f.job_when("job", "Kueue admits and starts the released job", |tj| {
        tj["spec"]["suspend"] == false
    })
    .await;
    plain.stop().await;
    f.finish().await;
}
