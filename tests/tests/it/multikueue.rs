//! MultiKueue, on one control plane: holdfast does not support it yet, and says so. A
//! TrainJob whose ClusterQueue lists MultiKueue's AdmissionCheck (or that MultiKueue manages,
//! `spec.managedBy`) answers `Unsupported` to Hold, Release and Open; preflight lists such
//! queues; the gate leaves a Warning Event and counts them; and in a worker, the copy of a
//! Workload MultiKueue creates keeps holdfast's check Pending with a message saying why.
//!
//! Kueue's MultiKueue objects (the AdmissionCheck of controller `kueue.x-k8s.io/multikueue`,
//! a MultiKueueConfig and a MultiKueueCluster) are created for real on Kueue v0.19.2; no
//! worker cluster exists, so the check is never Active and nothing is dispatched.

use holdfast_tests::hold_support::meta;
use holdfast_tests::kueue_support::{CHECK, Fixture, MINUTE, QUEUE, SETTLE, Setup, check};

use holdfast_core::hold::{HoldError, Outcome};
use holdfast_core::names::{MULTIKUEUE_CONTROLLER, MULTIKUEUE_ORIGIN_LABEL, QUEUE_NAME_LABEL};
use holdfast_tests::kueue;
use k8s_openapi::api::events::v1::Event;
use kube::api::{Api, DynamicObject, Patch, PatchParams, PostParams};
use serde_json::{Value, json};

/// MultiKueue's AdmissionCheck, as a manager cluster has it.
const MULTIKUEUE_CHECK: &str = "multikueue";

/// Applies MultiKueue's AdmissionCheck, its MultiKueueConfig and one MultiKueueCluster
/// (whose kubeconfig Secret does not exist: no worker is reachable). Cluster-scoped, shared
/// by this topic's tests.
async fn ensure_multikueue(admin: &kube::Client) {
    let pp = PatchParams::apply("holdfast-tests").force();
    let objects = [
        (
            "MultiKueueCluster",
            "multikueueclusters",
            json!({"metadata": {"name": "worker-1"}, "spec": {"clusterSource": {"kubeConfig":
                {"locationType": "Secret", "location": "worker-1-kubeconfig"}}}}),
        ),
        (
            "MultiKueueConfig",
            "multikueueconfigs",
            json!({"metadata": {"name": "workers"}, "spec": {"clusters": ["worker-1"]}}),
        ),
        (
            "AdmissionCheck",
            "admissionchecks",
            json!({"metadata": {"name": MULTIKUEUE_CHECK}, "spec": {
                "controllerName": MULTIKUEUE_CONTROLLER,
                "parameters": {"apiGroup": "kueue.x-k8s.io", "kind": "MultiKueueConfig", "name": "workers"}}}),
        ),
    ];
    for (kind, plural, mut object) in objects {
        object["apiVersion"] = json!(kueue::KUEUE_API_VERSION);
        object["kind"] = json!(kind);
        let name = object["metadata"]["name"]
            .as_str()
            .unwrap_or_default()
            .to_owned();
        let object: DynamicObject = serde_json::from_value(object).expect(kind);
        Api::<DynamicObject>::all_with(
            admin.clone(),
            &holdfast_cluster::resources::kueue(kind, plural),
        )
        .patch(&name, &pp, &Patch::Apply(&object))
        .await
        .unwrap_or_else(|e| panic!("apply {kind} {name}: {e}"));
    }
}

/// Makes the fixture's ClusterQueue list MultiKueue's check beside holdfast's.
async fn add_multikueue_to_queue(f: &Fixture) -> String {
    let cq = format!("cq-{}", f.ns);
    Api::<DynamicObject>::all_with(
        f.admin.clone(),
        &holdfast_cluster::resources::cluster_queue(),
    )
    .patch(
        &cq,
        &PatchParams::default(),
        &Patch::Merge(
            json!({"spec": {"admissionChecksStrategy": {"admissionChecks": [
            {"name": CHECK}, {"name": MULTIKUEUE_CHECK}]}}}),
        ),
    )
    .await
    .expect("add MultiKueue's check to the ClusterQueue");
    cq
}

fn unsupported(result: Result<Outcome, HoldError>) -> Option<String> {
    match result {
        Err(HoldError::Unsupported { reason }) => Some(reason),
        _ => None,
    }
}

/// A job held on a queue that then turns MultiKueue's: its Release would let the gate here
/// pass a copy in a worker whose pods it cannot see, so every call refuses, naming the queue,
/// the check and what to configure. (Before, Release answered Released.)
#[tokio::test]
async fn a_multikueue_queue_answers_unsupported_to_hold_release_and_open_naming_what_to_configure()
{
    let f = Fixture::start("mk-calls").await;
    ensure_multikueue(&f.admin).await;
    f.create_job("job", json!({})).await;
    f.open_and_run("job").await;
    assert_eq!(
        f.exec.hold(&f.ns, "job", meta(Some(1), MINUTE)).await,
        Ok(Outcome::Held)
    );
    let cq = add_multikueue_to_queue(&f).await;
    let release = f
        .eventually("release refuses", SETTLE, || async {
            unsupported(f.exec.release(&f.ns, "job", meta(Some(1), MINUTE)).await)
        })
        .await;
    let hold = unsupported(f.exec.hold(&f.ns, "job", meta(Some(2), MINUTE)).await);
    let open = unsupported(f.exec.open(&f.ns, "job", meta(None, MINUTE)).await);
    for (call, why) in [("release", Some(release)), ("hold", hold), ("open", open)] {
        let why = why.unwrap_or_else(|| panic!("{call} answers Unsupported"));
        for needle in [
            format!("{call} is not supported for a TrainJob under MultiKueue yet"),
            format!("ClusterQueue {cq} lists MultiKueue's AdmissionCheck {MULTIKUEUE_CHECK}"),
            "cannot see the worker's pods".to_owned(),
            "ClusterQueue that lists holdfast's readmission AdmissionCheck and no AdmissionCheck of kueue.x-k8s.io/multikueue".to_owned(),
        ] {
            assert!(why.contains(&needle), "{call}: {needle}: {why}");
        }
    }
    f.finish().await;
}

/// `GET /v1/preflight` lists every ClusterQueue that lists MultiKueue's check, and why.
#[tokio::test]
async fn preflight_lists_multikueue_queues() {
    let f = Fixture::start("mk-preflight").await;
    ensure_multikueue(&f.admin).await;
    let cq = add_multikueue_to_queue(&f).await;
    let listed = f
        .eventually("preflight lists the queue", SETTLE, || async {
            let report = f.exec.preflight(None).await;
            report
                .multikueue_cluster_queues
                .into_iter()
                .find(|q| q.name == cq)
        })
        .await;
    assert!(
        listed
            .why
            .starts_with("hold, release and open are not supported")
            && listed.why.contains(MULTIKUEUE_CHECK),
        "{}",
        listed.why
    );
    let report = f.exec.preflight(None).await;
    assert!(
        !report.ungated_cluster_queues.iter().any(|q| q.name == cq),
        "it still requires holdfast's check: not ungated"
    );
    f.finish().await;
}

/// A TrainJob queued where MultiKueue dispatches gets a Warning Event and is counted in
/// `holdfast_readmission_multikueue_trainjobs`; its Open (the start gate) refuses.
#[tokio::test]
async fn a_trainjob_under_multikueue_gets_a_warning_event_and_is_counted() {
    let admin = holdfast_tests::ControlPlane::shared()
        .client(holdfast_tests::Identity::Admin)
        .await
        .expect("admin");
    ensure_multikueue(&admin).await;
    let f = Fixture::start_with(
        "mk-event",
        Setup {
            checks: &[CHECK, MULTIKUEUE_CHECK],
            ..Setup::default()
        },
    )
    .await;
    let tj = f.create_job("job", json!({})).await;
    assert_eq!(
        tj["spec"]["managedBy"], MULTIKUEUE_CONTROLLER,
        "Kueue's webhook hands a job queued where MultiKueue dispatches to MultiKueue"
    );
    let events = Api::<Event>::namespaced(f.admin.clone(), &f.ns);
    let note = f
        .eventually("the Event", SETTLE, || async {
            let list = events.list(&Default::default()).await.expect("events");
            list.items.into_iter().find_map(|e| {
                (e.reason.as_deref() == Some("MultiKueueUnsupported")
                    && e.regarding.as_ref().and_then(|r| r.name.as_deref()) == Some("job"))
                .then_some(e.note)
                .flatten()
            })
        })
        .await;
    assert!(
        note.contains("not supported for a TrainJob under MultiKueue yet")
            // Its queue names the check once Kueue's queues are listed; its managedBy before.
            && (note.contains(&format!("lists MultiKueue's AdmissionCheck {MULTIKUEUE_CHECK}"))
                || note.contains("its spec.managedBy is kueue.x-k8s.io/multikueue"))
            && note.contains("runtime snapshot stays in this cluster"),
        "{note}"
    );
    assert!(f.metrics.multikueue() >= 1);
    let open = unsupported(f.exec.open(&f.ns, "job", meta(None, MINUTE)).await);
    assert!(
        open.as_deref()
            .is_some_and(|why| why.contains("under MultiKueue")),
        "{open:?}"
    );
    f.finish().await;
}

/// In a worker cluster, MultiKueue creates a copy of the manager's Workload with its origin
/// label, without the job-uid label and with no owner (Kueue v0.19 `cloneForCreate`): the
/// gate cannot tell whose pods remain, so its check stays Pending, saying why, with a
/// Warning Event on the Workload. (Before, it stayed Pending with no word.)
#[tokio::test]
async fn a_multikueue_copy_in_a_worker_keeps_the_check_pending_and_says_why() {
    let f = Fixture::start("mk-worker").await;
    let workloads = f.workload_api(&f.admin);
    let copy: DynamicObject = serde_json::from_value(json!({
        "apiVersion": kueue::KUEUE_API_VERSION, "kind": "Workload",
        "metadata": {"name": "trainjob-job-3f2a1", "labels": {
            MULTIKUEUE_ORIGIN_LABEL: "manager-1", QUEUE_NAME_LABEL: QUEUE}},
        "spec": {"queueName": QUEUE, "podSets": [{"name": "node", "count": 1, "template": {"spec": {
            "restartPolicy": "Never",
            "containers": [{"name": "node", "image": "pytorch/pytorch:2.10.0",
                "resources": {"requests": {"cpu": "1"}}}]}}}]}
    }))
    .expect("workload");
    workloads
        .create(&PostParams::default(), &copy)
        .await
        .expect("create the copy");
    let (state, message) = f
        .eventually("the check says why", SETTLE, || async {
            let w: Value =
                serde_json::to_value(workloads.get("trainjob-job-3f2a1").await.ok()?).ok()?;
            let (state, message) = check(&w);
            message
                .contains("MultiKueue's copy")
                .then_some((state, message))
        })
        .await;
    assert_eq!(state, "Pending", "{message}");
    assert!(
        message.contains("manager cluster manager-1")
            && message.contains("does not support MultiKueue worker clusters yet")
            && message.contains(&format!("the ClusterQueue of LocalQueue {}/{QUEUE}", f.ns))
            && message.contains("webhook.excludeNamespaces"),
        "{message}"
    );
    let events = Api::<Event>::namespaced(f.admin.clone(), &f.ns);
    f.eventually("the Event", SETTLE, || async {
        let list = events.list(&Default::default()).await.ok()?;
        list.items
            .iter()
            .any(|e| {
                e.reason.as_deref() == Some("MultiKueueCopyPending")
                    && e.regarding.as_ref().and_then(|r| r.kind.as_deref()) == Some("Workload")
            })
            .then_some(())
    })
    .await;
    assert!(f.metrics.writes("wait_multikueue_copy") >= 1);
    f.finish().await;
}
