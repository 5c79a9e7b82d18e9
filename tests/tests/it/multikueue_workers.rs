//! MultiKueue with holdfast configured for the workers, on two tier-2 control planes: this
//! topic's plane is the manager (Kueue with MultiKueue's AdmissionCheck beside holdfast's in
//! the ClusterQueue), and a second plane is the worker (its own Kueue), connected for real
//! (`multikueue_clusters::connect`: a kubeconfig Secret, a MultiKueueCluster, a
//! MultiKueueConfig, the check Active). holdfast reads the worker as an account allowed only
//! to list pods, Jobs and JobSets (`multikueue_clusters::gate_rules`), from a kubeconfig file
//! as the chart mounts it.
//!
//! No kubelet runs at tier 2: the previous execution's pod in the worker is a pod object
//! carrying what its Job controller and JobSet give it (the orphan of a deleted Job), never
//! scheduled, which counts as remaining until it is deleted. The real pods, terminating on a
//! real node, are the node suite's (`node::multikueue::`).

use std::collections::BTreeMap;

use holdfast_controller::multikueue::Workers;
use holdfast_core::hold::{HoldError, Outcome};
use holdfast_core::readmission::WaitReason;
use holdfast_tests::control_plane::ControlPlane;
use holdfast_tests::hold_support::meta;
use holdfast_tests::identity::Identity;
use holdfast_tests::kueue;
use holdfast_tests::kueue_support::{CHECK, Fixture, MINUTE, QUEUE, Setup, check, condition};
use holdfast_tests::multikueue_clusters::{
    MULTIKUEUE_CHECK, WORKER, connect, gate_worker, manager_snapshots,
};
use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, DeleteParams, PostParams};
use serde_json::json;

/// The worker of this topic: a second tier-2 plane, with its own Kueue.
async fn worker() -> &'static ControlPlane {
    let worker = ControlPlane::shared_by("multikueue-worker");
    worker.start_kueue().await.expect("the worker's Kueue");
    worker
}

/// A fixture on the manager whose queue lists holdfast's check and MultiKueue's, the two
/// planes connected, and the namespace and a LocalQueue in the worker too. No gate runs yet.
async fn manager_and_worker(prefix: &str) -> (Fixture, &'static ControlPlane) {
    let f = Fixture::start_with(
        prefix,
        Setup {
            gate: false,
            checks: &[CHECK, MULTIKUEUE_CHECK],
            ..Setup::default()
        },
    )
    .await;
    let worker = worker().await;
    connect(f.cp, worker).await.expect("MultiKueue connected");
    let admin = worker.client(Identity::Admin).await.expect("worker admin");
    holdfast_tests::rbac::apply(
        &admin,
        &json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": f.ns}}),
        &f.ns,
        false,
    )
    .await
    .expect("the namespace in the worker");
    kueue::create_queues(&admin, &f.ns, QUEUE, &[])
        .await
        .expect("the worker's queues");
    (f, worker)
}

/// A worker that cannot be reached: nothing listens on its address.
fn unreachable_worker() -> (String, kube::Client) {
    let config = kube::Config::new("https://127.0.0.1:1".parse().expect("url"));
    (
        "worker-down".to_owned(),
        kube::Client::try_from(config).expect("client"),
    )
}

/// A pod of `job`'s previous execution left in the worker: its Job deleted (no owner), the
/// labels JobSet and the Job controller gave it.
async fn leftover_pod(worker: &ControlPlane, ns: &str, job: &str) -> Api<Pod> {
    let admin = worker.client(Identity::Admin).await.expect("worker admin");
    let pods: Api<Pod> = Api::namespaced(admin, ns);
    let pod: Pod = serde_json::from_value(json!({
        "metadata": {"name": format!("{job}-node-0-0-old"), "labels": {
            "jobset.sigs.k8s.io/jobset-name": job,
            "batch.kubernetes.io/controller-uid": "a-deleted-job"}},
        "spec": {"containers": [{"name": "node", "image": "trainer:old"}]}
    }))
    .expect("pod");
    pods.create(&PostParams::default(), &pod)
        .await
        .expect("the leftover pod");
    pods
}

/// The seed's readmission gate, across clusters: a Workload dispatched through MultiKueue
/// is let through only once no pod of the previous execution remains in any worker
/// holdfast is configured for, not while one of them cannot be read, and not while a worker
/// of its queue's MultiKueueConfig is not configured. (Before, the gate
/// in the manager looked only at the manager, found nothing, and went Ready at once.)
#[tokio::test]
async fn the_managers_gate_waits_for_the_previous_executions_pods_in_a_worker_and_while_a_worker_cannot_be_read()
 {
    let (mut f, worker) = manager_and_worker("mk-gate").await;
    let dir = tempfile::tempdir().expect("tempdir");
    let spec = gate_worker(worker, dir.path())
        .await
        .expect("the gate's kubeconfig");
    let pods = leftover_pod(worker, &f.ns, "job").await;
    let workers = Workers::from_kubeconfigs(std::slice::from_ref(&spec))
        .await
        .expect("workers");
    f.use_workers(workers.clone()).await;
    f.start_gate().await;

    f.create_job("job", json!({})).await;
    // Open goes ahead: holdfast sees every worker of the queue's MultiKueueConfig.
    f.open_at_gate("job").await;
    let waiting = f
        .workload_when("job", "the gate waits for the worker's pod", |w| {
            check(w) == ("Pending".to_owned(), waiting_text(WaitReason::PodsRemain))
        })
        .await;
    assert!(!condition(&waiting, "Admitted"), "not admitted");

    // Workers that do not cover the queue's MultiKueueConfig keep the gate closed, whatever
    // they answer: the worker it does not name may hold the pod.
    let elsewhere = worker.client(Identity::Admin).await.expect("worker client");
    f.use_workers(Workers::new([("elsewhere".to_owned(), elsewhere)].into()))
        .await;
    f.workload_when(
        "job",
        "the gate waits for every worker to be configured",
        |w| {
            check(w)
                == (
                    "Pending".to_owned(),
                    waiting_text(WaitReason::WorkerNotConfigured),
                )
        },
    )
    .await;

    // A worker that cannot be read keeps the gate closed, even once the pod is gone.
    let mut both: BTreeMap<String, kube::Client> = BTreeMap::new();
    both.insert(
        WORKER.to_owned(),
        worker.client(Identity::Admin).await.expect("worker client"),
    );
    let (down, client) = unreachable_worker();
    both.insert(down, client);
    f.use_workers(Workers::new(both)).await;
    pods.delete("job-node-0-0-old", &DeleteParams::default())
        .await
        .expect("the leftover pod deleted");
    f.workload_when("job", "the gate waits to reach every worker", |w| {
        check(w)
            == (
                "Pending".to_owned(),
                waiting_text(WaitReason::WorkerUnreachable),
            )
    })
    .await;

    // Every worker read, no pod left, but no runtime snapshot in the manager to carry into
    // the worker: the copy would run the worker's runtime, so the gate stays closed.
    f.use_workers(workers).await;
    f.workload_when("job", "the gate waits to carry the snapshot", |w| {
        check(w)
            == (
                "Pending".to_owned(),
                waiting_text(WaitReason::SnapshotNotCarried),
            )
    })
    .await;
    // The snapshot written and carried: the execution may start.
    let snapshots = Snapshots::run(&f).await;
    f.workload_when("job", "the gate lets it through", |w| check(w).0 == "Ready")
        .await;
    snapshots.stop().await;
    f.finish().await;
}

/// holdfast's snapshot reconciler in the manager, for the fixture's namespace (the manager's
/// Trainer leaves a job under MultiKueue alone: this snapshot is the job's only one).
struct Snapshots(
    tokio_util::sync::CancellationToken,
    tokio::task::JoinHandle<Result<(), holdfast_controller::snapshot::Error>>,
);

impl Snapshots {
    async fn run(f: &Fixture) -> Snapshots {
        let controller = f.cp.client(Identity::Controller).await.expect("controller");
        let stop = tokio_util::sync::CancellationToken::new();
        let task = manager_snapshots(&controller, &f.ns, &stop);
        Snapshots(stop, task)
    }

    async fn stop(self) {
        self.0.cancel();
        let _ = self.1.await;
    }
}

/// The check's message of a wait for `reason` (no execution claimed yet).
fn waiting_text(reason: WaitReason) -> String {
    holdfast_core::readmission::check_message(None, reason.text())
}

/// Hold, Release and Open of a job under MultiKueue go ahead where holdfast has a
/// kubeconfig for every cluster of the queue's MultiKueueConfig, and answer `Unsupported`
/// elsewhere, naming the worker it lacks and the chart value that gives it. (Before, every
/// call under MultiKueue answered `Unsupported`.)
#[tokio::test]
async fn hold_calls_under_multikueue_go_ahead_only_where_holdfast_has_a_kubeconfig_for_every_worker_of_the_queue()
 {
    let (mut f, worker) = manager_and_worker("mk-calls-cover").await;
    f.create_job("job", json!({})).await;

    // No worker configured.
    let none = f.exec.hold(&f.ns, "job", meta(Some(1), MINUTE)).await;
    let Err(HoldError::Unsupported { reason }) = none else {
        panic!("no worker configured: Unsupported: {none:?}");
    };
    assert!(
        reason.contains("holdfast has no kubeconfig for any MultiKueue worker")
            && reason.contains("multikueue.workers"),
        "{reason}"
    );

    // Only a worker the queue does not dispatch to.
    let (down, client) = unreachable_worker();
    f.use_workers(Workers::new([(down, client)].into())).await;
    let other = f.exec.hold(&f.ns, "job", meta(Some(1), MINUTE)).await;
    let Err(HoldError::Unsupported { reason }) = other else {
        panic!("the queue's worker not configured: Unsupported: {other:?}");
    };
    assert!(
        reason.contains(&format!("cannot see the worker's pods in {WORKER}"))
            && reason.contains("MultiKueueConfig workers lists it"),
        "{reason}"
    );

    // The queue's worker configured: the calls go ahead.
    let client = worker.client(Identity::Admin).await.expect("worker client");
    f.use_workers(Workers::new([(WORKER.to_owned(), client)].into()))
        .await;
    assert_eq!(
        f.exec.hold(&f.ns, "job", meta(Some(1), MINUTE)).await,
        Ok(Outcome::Held)
    );
    let release = f.exec.release(&f.ns, "job", meta(Some(1), MINUTE)).await;
    assert!(
        matches!(release, Ok(Outcome::Released { .. })),
        "{release:?}"
    );
    f.finish().await;
}

/// The snapshot goes with the job: before MultiKueue may dispatch it, holdfast in the manager
/// writes the manager's snapshot, unowned, into the worker; once MultiKueue has created the
/// copy of the TrainJob there, the copy owns it, and Trainer's own reader accepts it for the
/// copy. The runtime edited in both clusters while the job is held, the copy of the next
/// dispatch (a new uid) owns a snapshot with the original data. (Before, nothing was written
/// into the worker, and its Trainer snapshotted the worker's runtime of the moment.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_workers_copy_is_given_the_managers_snapshot_before_dispatch_and_after_a_release() {
    use holdfast_core::names::ANN_ORIGIN_TRAINJOB_UID;
    use k8s_openapi::api::core::v1::ConfigMap;
    use kube::api::{DynamicObject, Patch, PatchParams};

    let (mut f, worker) = manager_and_worker("mk-snap").await;
    let dir = tempfile::tempdir().expect("tempdir");
    let spec = gate_worker(worker, dir.path())
        .await
        .expect("the gate's kubeconfig");
    let workers = Workers::from_kubeconfigs(std::slice::from_ref(&spec))
        .await
        .expect("workers");
    f.use_workers(workers).await;
    f.start_gate().await;
    let worker_admin = worker.client(Identity::Admin).await.expect("worker admin");
    let runtimes = |client: &kube::Client| {
        Api::<DynamicObject>::all_with(
            client.clone(),
            &holdfast_cluster::resources::cluster_training_runtime(),
        )
    };
    // The worker has a runtime of the same name (Kueue there reads it for the copy).
    let mut runtime = runtimes(&f.admin).get(&f.runtime).await.expect("runtime");
    runtime.metadata = kube::api::ObjectMeta {
        name: Some(f.runtime.clone()),
        labels: runtime.metadata.labels.clone(),
        ..Default::default()
    };
    runtimes(&worker_admin)
        .create(&PostParams::default(), &runtime)
        .await
        .expect("the worker's runtime");

    let snapshots = Snapshots::run(&f).await;

    let job = f.create_job("job", json!({})).await;
    let origin = job["metadata"]["uid"].as_str().expect("uid").to_owned();
    let name = holdfast_core::names::snapshot_name("job");
    let manager_cms: Api<ConfigMap> = Api::namespaced(f.admin.clone(), &f.ns);
    let worker_cms: Api<ConfigMap> = Api::namespaced(worker_admin.clone(), &f.ns);
    let original = f
        .eventually("the manager's snapshot", MINUTE, || async {
            manager_cms.get_opt(&name).await.ok().flatten()
        })
        .await;
    f.open_at_gate("job").await;

    // Before dispatch: once the check is Ready (MultiKueue dispatches only then), the worker
    // holds the manager's snapshot, unowned, marked with the manager TrainJob's uid.
    f.workload_when("job", "the gate lets it through", |w| check(w).0 == "Ready")
        .await;
    let before = worker_cms
        .get_opt(&name)
        .await
        .expect("read the worker")
        .expect("the snapshot is in the worker when the check turns Ready");
    assert_eq!(before.data, original.data, "the manager's data");
    assert_eq!(before.immutable, Some(true));
    assert_eq!(
        before
            .metadata
            .annotations
            .as_ref()
            .and_then(|a| a.get(ANN_ORIGIN_TRAINJOB_UID)),
        Some(&origin)
    );

    // Once the copy exists, it owns that very ConfigMap, and Trainer's reader accepts it.
    let first = adopted(&f, &worker_cms, &worker_admin, &name).await;
    assert_eq!(first.1.metadata.uid, before.metadata.uid, "the one written");
    assert_eq!(first.1.data, original.data);
    let read = crate::snapshots::trainer::run(worker, Identity::Admin, &f.ns, "job", "read").await;
    assert!(
        read.get("error").is_none() && read.get("runtime").is_some(),
        "{read}"
    );
    let first_runtime = read["runtime"].clone();

    // Held; the runtime edited in both clusters meanwhile; released.
    assert_eq!(
        f.exec.hold(&f.ns, "job", meta(Some(1), MINUTE)).await,
        Ok(Outcome::Held)
    );
    f.eventually("the worker's copy deleted", MINUTE, || async {
        let copy = worker_trainjob(&worker_admin, &f.ns).await;
        copy.is_none_or(|c| c.metadata.uid != Some(first.0.clone()))
            .then_some(())
    })
    .await;
    let edit = json!({"metadata": {"annotations": {"edited": "while held"}}});
    for client in [&f.admin, &worker_admin] {
        runtimes(client)
            .patch(&f.runtime, &PatchParams::default(), &Patch::Merge(&edit))
            .await
            .expect("runtime edited");
    }
    let release = f.exec.release(&f.ns, "job", meta(Some(1), MINUTE)).await;
    assert!(
        matches!(release, Ok(Outcome::Released { .. })),
        "{release:?}"
    );

    // The next dispatch's copy (a new uid) owns a snapshot with the original data.
    let second = f
        .eventually("a new copy owning the snapshot", MINUTE, || async {
            let (uid, cm) = owned(&worker_cms, &worker_admin, &f.ns, &name).await?;
            (uid != first.0).then_some((uid, cm))
        })
        .await;
    assert_eq!(second.1.data, original.data, "the original configuration");
    let read = crate::snapshots::trainer::run(worker, Identity::Admin, &f.ns, "job", "read").await;
    assert!(read.get("error").is_none(), "{read}");
    assert_eq!(
        read["live"]["metadata"]["annotations"]["edited"],
        "while held"
    );
    assert_eq!(
        read["runtime"], first_runtime,
        "Trainer in the worker reads the original runtime, not the edited one"
    );
    snapshots.stop().await;
    f.finish().await;
}

/// The worker's copy of TrainJob `job` (MultiKueue's: it carries the origin label), if any.
async fn worker_trainjob(worker: &kube::Client, ns: &str) -> Option<kube::api::DynamicObject> {
    let api: Api<kube::api::DynamicObject> =
        Api::namespaced_with(worker.clone(), ns, &holdfast_cluster::resources::trainjob());
    api.get_opt("job").await.ok().flatten().filter(|t| {
        t.metadata
            .labels
            .as_ref()
            .is_some_and(|l| l.contains_key(holdfast_core::names::MULTIKUEUE_ORIGIN_LABEL))
    })
}

/// The copy's uid and the worker's snapshot ConfigMap, once the copy is its controller owner.
async fn owned(
    cms: &Api<k8s_openapi::api::core::v1::ConfigMap>,
    worker: &kube::Client,
    ns: &str,
    name: &str,
) -> Option<(String, k8s_openapi::api::core::v1::ConfigMap)> {
    let copy = worker_trainjob(worker, ns).await?.metadata.uid?;
    let cm = cms.get_opt(name).await.ok().flatten()?;
    let owner = cm
        .metadata
        .owner_references
        .as_ref()?
        .iter()
        .find(|o| o.controller == Some(true))?
        .uid
        .clone();
    (owner == copy).then_some((copy, cm))
}

/// [`owned`], waited for.
async fn adopted(
    f: &Fixture,
    cms: &Api<k8s_openapi::api::core::v1::ConfigMap>,
    worker: &kube::Client,
    name: &str,
) -> (String, k8s_openapi::api::core::v1::ConfigMap) {
    f.eventually("the copy owns the snapshot", MINUTE, || async {
        owned(cms, worker, &f.ns, name).await
    })
    .await
}
