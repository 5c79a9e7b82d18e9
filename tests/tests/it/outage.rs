//! A holdfast outage stops only what holdfast protects (kueue mode, the real apiserver and
//! Kueue v0.19, the chart's webhook configurations).
//!
//! The webhook stops serving while its configurations stay registered, so every call the
//! apiserver makes to it fails at once and each entry's failure policy decides. Then, on jobs
//! that carry no hold, the whole Kueue cycle runs: an editor creates a queued TrainJob, Kueue
//! admits it through holdfast's readmission check and starts it, a higher-priority job
//! preempts it (Kueue suspends it), the preemptor is deleted and Kueue starts the first job
//! again; Trainer writes a job's snapshot and its status; dispatch places a hold. All of it
//! succeeds. Meanwhile every protected write is refused: a held job is not started, its
//! Workload not reactivated, a snapshot neither edited nor deleted. When a webhook serves
//! again, the held job is still held by the same instance and releases as usual: nothing
//! needed repair.

use holdfast_tests::hold_support;
use holdfast_tests::kueue_support;
use holdfast_tests::objects::TrainJob;
use holdfast_tests::registration::{Engine, refused_by_policy};

use hold_support::{annotation, meta};
use holdfast_core::{
    hold::Outcome,
    hold::classify::ObjectState,
    names::{ANN_ADMITTED_RUNTIME_RESOURCE_VERSION, ANN_HOLD_INSTANCE, LABEL_RUNTIME_SNAPSHOT},
};
use holdfast_tests::{Identity, kueue};
use k8s_openapi::api::core::v1::ConfigMap;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;
use kube::api::{Api, DeleteParams, DynamicObject, Patch, PatchParams, PostParams};
use kueue_support::{CHECK, Fixture, MINUTE, Webhook, active, condition};
use serde_json::{Value, json};

/// The queue whose ClusterQueue has room for one job and preempts by priority.
const SMALL: &str = "small";

/// A LocalQueue [`SMALL`] in the fixture's namespace, leading to a ClusterQueue with quota for
/// one job that requires holdfast's readmission check and preempts lower priorities; and two
/// WorkloadPriorityClasses, `{ns}-low` and `{ns}-high`.
async fn small_queue_and_priorities(f: &Fixture) -> (String, String) {
    let pp = PatchParams::apply("holdfast-tests").force();
    let apply = |kind: &str, plural: &str, namespaced: bool, obj: Value| {
        let api: Api<DynamicObject> = if namespaced {
            Api::namespaced_with(
                f.admin.clone(),
                &f.ns,
                &holdfast_cluster::resources::kueue(kind, plural),
            )
        } else {
            Api::all_with(
                f.admin.clone(),
                &holdfast_cluster::resources::kueue(kind, plural),
            )
        };
        let pp = pp.clone();
        async move {
            let obj: DynamicObject = serde_json::from_value(obj).expect("object");
            let name = obj.metadata.name.clone().expect("name");
            api.patch(&name, &pp, &Patch::Apply(&obj))
                .await
                .expect("apply");
        }
    };
    let flavor = format!("flavor-{}", f.ns);
    let cq = format!("small-{}", f.ns);
    apply(
        "ClusterQueue",
        "clusterqueues",
        false,
        json!({"apiVersion": kueue::KUEUE_API_VERSION, "kind": "ClusterQueue",
            "metadata": {"name": cq},
            "spec": {
                "namespaceSelector": {},
                "preemption": {"withinClusterQueue": "LowerPriority"},
                "admissionChecksStrategy": {"admissionChecks": [{"name": CHECK}]},
                "resourceGroups": [{"coveredResources": ["cpu", "memory"],
                    "flavors": [{"name": flavor, "resources": [
                        {"name": "cpu", "nominalQuota": "1"},
                        {"name": "memory", "nominalQuota": "10Gi"}]}]}]}}),
    )
    .await;
    apply(
        "LocalQueue",
        "localqueues",
        true,
        json!({"apiVersion": kueue::KUEUE_API_VERSION, "kind": "LocalQueue",
            "metadata": {"name": SMALL, "namespace": f.ns}, "spec": {"clusterQueue": cq}}),
    )
    .await;
    let (low, high) = (format!("{}-low", f.ns), format!("{}-high", f.ns));
    for (name, value) in [(&low, 10), (&high, 1000)] {
        apply(
            "WorkloadPriorityClass",
            "workloadpriorityclasses",
            false,
            json!({"apiVersion": kueue::KUEUE_API_VERSION, "kind": "WorkloadPriorityClass",
                "metadata": {"name": name}, "value": value}),
        )
        .await;
    }
    (low, high)
}

/// A TrainJob an editor creates in [`SMALL`] with `priority`: no holdfast label.
fn unrelated_job(f: &Fixture, name: &str, priority: &str) -> DynamicObject {
    TrainJob::named(name)
        .runtime(&f.runtime)
        .queued(SMALL)
        .label("kueue.x-k8s.io/priority-class", priority)
        .object()
}

/// A refusal because the webhook could not be called (not the policy's 403) — or, under
/// `validation.engine` policy or both, the admission policies' own refusal: they do not go
/// down with the webhook.
fn refused_by_outage<T: std::fmt::Debug>(what: &str, result: Result<T, kube::Error>) {
    match result {
        Err(kube::Error::Api(s)) if s.message.contains("failed calling webhook") => {}
        Err(kube::Error::Api(s))
            if Engine::from_env().policies() && s.code == 403 && refused_by_policy(&s.message) => {}
        other => panic!("{what}: expected a refusal because the webhook is down, got {other:?}"),
    }
}

/// The snapshot ConfigMap of TrainJob `job` (uid `uid`), owned by it as Trainer and holdfast
/// write one; `labelled`: with holdfast's snapshot label (Trainer writes none).
fn snapshot(job: &str, uid: &str, labelled: bool) -> ConfigMap {
    ConfigMap {
        metadata: kube::api::ObjectMeta {
            name: Some(format!("{job}-runtime-snapshot")),
            labels: labelled
                .then(|| [(LABEL_RUNTIME_SNAPSHOT.to_owned(), "true".to_owned())].into()),
            owner_references: Some(vec![OwnerReference {
                api_version: "trainer.kubeflow.org/v1alpha1".into(),
                kind: "TrainJob".into(),
                name: job.into(),
                uid: uid.into(),
                controller: Some(true),
                block_owner_deletion: Some(true),
            }]),
            ..Default::default()
        },
        data: Some(
            [(
                "runtime".to_owned(),
                "kind: ClusterTrainingRuntime\n".to_owned(),
            )]
            .into(),
        ),
        ..Default::default()
    }
}

fn merge(v: Value) -> Patch<Value> {
    Patch::Merge(v)
}

#[tokio::test]
async fn a_holdfast_outage_stops_only_what_holdfast_protects() {
    let f = Fixture::start("outage").await;
    let (low, high) = small_queue_and_priorities(&f).await;
    let webhook = Webhook::serve(&f).await;
    let alice = f.cp.client(Identity::User).await.expect("alice");
    let trainer = f.cp.client(Identity::Trainer).await.expect("trainer");
    let controller = f.cp.client(Identity::Controller).await.expect("controller");

    // Before the outage: a held job, and a snapshot written by the controller.
    f.create_job("held", json!({})).await;
    f.open_and_run("held").await;
    f.exec
        .hold(&f.ns, "held", meta(Some(1), MINUTE))
        .await
        .expect("hold");
    let held_wl = f
        .workload_when("held", "evicted", |w| !active(w) && condition(w, "Evicted"))
        .await;
    let held_wl = held_wl["metadata"]["name"]
        .as_str()
        .expect("name")
        .to_owned();
    f.job_when("held", "suspended by Kueue", |tj| {
        tj["spec"]["suspend"] == true
    })
    .await;
    let held_uid = f.trainjob("held").await["metadata"]["uid"]
        .as_str()
        .expect("uid")
        .to_owned();
    let held_snapshot = snapshot("held", &held_uid, true);
    Api::<ConfigMap>::namespaced(controller.clone(), &f.ns)
        .create(&PostParams::default(), &held_snapshot)
        .await
        .expect("the controller writes a snapshot");

    assert!(
        annotation(
            &f.trainjob("held").await,
            ANN_ADMITTED_RUNTIME_RESOURCE_VERSION
        )
        .is_some(),
        "the webhook recorded the held job's runtime at its CREATE"
    );

    // The outage.
    let outage = webhook.go_down().await;
    let alice_jobs = f.trainjobs(&alice);
    refused_by_outage(
        "an editor unsuspending the held job",
        alice_jobs
            .patch(
                "held",
                &PatchParams::default(),
                &merge(json!({"spec": {"suspend": false}})),
            )
            .await,
    );

    // The held job carries holdfast state (the hold, the admitted runtime record): an edit
    // that leaves that state, suspend and the queue alone is not the webhook's business.
    alice_jobs
        .patch(
            "held",
            &PatchParams::default(),
            &merge(json!({"metadata": {"labels": {"team": "a"}}})),
        )
        .await
        .expect("an editor labels a held job while the webhook is down");
    refused_by_outage(
        "an editor removing the held job's admitted runtime record",
        alice_jobs
            .patch(
                "held",
                &PatchParams::default(),
                &merge(json!({"metadata": {"annotations": {
                    ANN_ADMITTED_RUNTIME_RESOURCE_VERSION: null}}})),
            )
            .await,
    );

    // An editor creates an unrelated job: not blocked; only the best-effort record is lost.
    let created = alice_jobs
        .create(&PostParams::default(), &unrelated_job(&f, "first", &low))
        .await
        .expect("an unmanaged TrainJob is created while the webhook is down");
    let created = serde_json::to_value(created).expect("json");
    assert_eq!(
        annotation(&created, ANN_ADMITTED_RUNTIME_RESOURCE_VERSION),
        None,
        "the record's webhook (Ignore) was not reached"
    );
    // Kueue admits it through the readmission check and starts it.
    f.job_when("first", "Kueue starts the first job", |tj| {
        tj["spec"]["suspend"] == false
    })
    .await;
    // A higher-priority job preempts it: Kueue suspends the first, starts the second.
    alice_jobs
        .create(&PostParams::default(), &unrelated_job(&f, "second", &high))
        .await
        .expect("the preemptor is created while the webhook is down");
    f.job_when("first", "Kueue preempts the first job", |tj| {
        tj["spec"]["suspend"] == true
    })
    .await;
    f.job_when("second", "Kueue starts the preemptor", |tj| {
        tj["spec"]["suspend"] == false
    })
    .await;
    // The preemptor goes; Kueue resumes the first job.
    alice_jobs
        .delete("second", &DeleteParams::background())
        .await
        .expect("delete the preemptor");
    f.job_when("first", "Kueue resumes the first job", |tj| {
        tj["spec"]["suspend"] == false
    })
    .await;

    // Trainer's writes: the first job's snapshot, and its status.
    let first = f.trainjob("first").await;
    let trainer_snapshot = snapshot(
        "first",
        first["metadata"]["uid"].as_str().expect("uid"),
        false,
    );
    Api::<ConfigMap>::namespaced(trainer.clone(), &f.ns)
        .create(&PostParams::default(), &trainer_snapshot)
        .await
        .expect("Trainer writes a snapshot while the webhook is down");
    f.trainjobs(&trainer)
        .patch_status(
            "first",
            &PatchParams::default(),
            &merge(
                json!({"status": {"conditions": [{"type": "Created", "status": "True",
                "reason": "JobsCreated", "message": "outage test",
                "lastTransitionTime": "2026-01-01T00:00:00Z"}]}}),
            ),
        )
        .await
        .expect("Trainer writes a TrainJob's status while the webhook is down");

    // Dispatch holds the first job: the controller's writes do not need the webhook.
    assert!(
        matches!(
            f.exec.hold(&f.ns, "first", meta(Some(1), MINUTE)).await,
            Ok(Outcome::Held)
        ),
        "a hold is placed while the webhook is down"
    );
    f.job_when("first", "Kueue stops the held first job", |tj| {
        tj["spec"]["suspend"] == true
    })
    .await;

    // Every protected write is refused.
    let alice_workloads = f.workload_api(&alice);
    refused_by_outage(
        "an editor reactivating the held Workload",
        alice_workloads
            .patch(
                &held_wl,
                &PatchParams::default(),
                &merge(json!({"spec": {"active": true}})),
            )
            .await,
    );
    refused_by_outage(
        "an editor removing the hold annotation",
        alice_workloads
            .patch(
                &held_wl,
                &PatchParams::default(),
                &merge(json!({"metadata": {"annotations": {ANN_HOLD_INSTANCE: null}}})),
            )
            .await,
    );
    let alice_cms = Api::<ConfigMap>::namespaced(alice.clone(), &f.ns);
    refused_by_outage(
        "an editor editing a snapshot",
        alice_cms
            .patch(
                "held-runtime-snapshot",
                &PatchParams::default(),
                &merge(json!({"data": {"runtime": "kind: Edited\n"}})),
            )
            .await,
    );
    refused_by_outage(
        "an editor deleting a snapshot",
        alice_cms
            .delete("held-runtime-snapshot", &DeleteParams::default())
            .await,
    );
    refused_by_outage(
        "an editor unsuspending a job dispatch held during the outage",
        alice_jobs
            .patch(
                "first",
                &PatchParams::default(),
                &merge(json!({"spec": {"suspend": false}})),
            )
            .await,
    );
    let held = f.trainjob("held").await;
    assert_eq!(held["spec"]["suspend"], true, "the held job stayed held");
    let wl: Value = serde_json::to_value(
        f.workload_api(&f.admin)
            .get(&held_wl)
            .await
            .expect("held Workload"),
    )
    .expect("json");
    assert!(!active(&wl), "its Workload stayed inactive");
    assert_eq!(annotation(&wl, ANN_HOLD_INSTANCE), Some("1"));

    // The webhook serves again: nothing needs repair.
    outage.end().await;
    let webhook = Webhook::serve(&f).await;
    let status = f.exec.status(&f.ns, "held").await.expect("status");
    assert!(
        matches!(
            status.state,
            ObjectState::HeldByUs {
                instance: Some(1),
                ..
            }
        ),
        "still held by instance 1: {status:?}"
    );
    let refused = alice_jobs
        .patch(
            "held",
            &PatchParams::default(),
            &merge(json!({"spec": {"suspend": false}})),
        )
        .await;
    assert!(
        matches!(&refused, Err(kube::Error::Api(s)) if s.code == 403),
        "the policy refuses again: {refused:?}"
    );
    assert!(
        matches!(
            f.exec.release(&f.ns, "held", meta(Some(1), MINUTE)).await,
            Ok(Outcome::Released { .. })
        ),
        "the hold placed before the outage releases"
    );
    f.job_when("held", "the released job runs", |tj| {
        tj["spec"]["suspend"] == false
    })
    .await;
    assert!(
        matches!(
            f.exec.release(&f.ns, "first", meta(Some(1), MINUTE)).await,
            Ok(Outcome::Released { .. })
        ),
        "the hold placed during the outage releases"
    );
    webhook.stop().await;
    f.finish().await;
}
