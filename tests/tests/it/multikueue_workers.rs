//! MultiKueue with holdfast configured for the workers, on two tier-2 control planes: this
//! topic's plane is the manager (Kueue with MultiKueue's AdmissionCheck beside holdfast's in
//! the ClusterQueue), and a second plane is the worker (its own Kueue), connected for real
//! (`multikueue_clusters::connect`: a kubeconfig Secret, a MultiKueueCluster, a
//! MultiKueueConfig, the check Active). holdfast reads the worker as an account allowed only
//! to list pods, Jobs and JobSets and the snapshot's ConfigMap and TrainJob verbs
//! (`multikueue_clusters::gate_rules`), from a kubeconfig file as the chart mounts it.
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
use holdfast_tests::hold_support::{annotation, meta};
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
    use kube::api::{Patch, PatchParams};

    let Gated {
        f,
        worker,
        worker_admin,
        snapshots,
        _dir,
    } = gated("mk-snap").await;

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

/// The manager with holdfast's gate reading the worker through the kubeconfig the chart
/// would mount ([`gate_worker`]), the runtime in the worker too, and holdfast's snapshot
/// reconciler running in the manager: the set-up of every test that dispatches for real.
struct Gated {
    f: Fixture,
    worker: &'static ControlPlane,
    worker_admin: kube::Client,
    snapshots: Snapshots,
    /// Holds the gate's kubeconfig file.
    _dir: tempfile::TempDir,
}

async fn gated(prefix: &str) -> Gated {
    let (mut f, worker) = manager_and_worker(prefix).await;
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
    worker_runtime(&f, &worker_admin).await;
    let snapshots = Snapshots::run(&f).await;
    Gated {
        f,
        worker,
        worker_admin,
        snapshots,
        _dir: dir,
    }
}

/// The ClusterTrainingRuntimes of the cluster `client` reaches.
fn runtimes(client: &kube::Client) -> Api<kube::api::DynamicObject> {
    Api::all_with(
        client.clone(),
        &holdfast_cluster::resources::cluster_training_runtime(),
    )
}

/// Gives the worker a runtime of the manager's runtime's name (Kueue there reads it for the
/// copy).
async fn worker_runtime(f: &Fixture, worker_admin: &kube::Client) {
    let mut runtime = runtimes(&f.admin).get(&f.runtime).await.expect("runtime");
    runtime.metadata = kube::api::ObjectMeta {
        name: Some(f.runtime.clone()),
        labels: runtime.metadata.labels.clone(),
        ..Default::default()
    };
    runtimes(worker_admin)
        .create(&PostParams::default(), &runtime)
        .await
        .expect("the worker's runtime");
}

/// The worker's copy of TrainJob `job` (MultiKueue's: it carries the origin label), if any.
async fn worker_trainjob(worker: &kube::Client, ns: &str) -> Option<kube::api::DynamicObject> {
    worker_copy(worker, ns, "job").await
}

/// The worker's copy of TrainJob `name` (MultiKueue's: it carries the origin label), if any.
async fn worker_copy(
    worker: &kube::Client,
    ns: &str,
    name: &str,
) -> Option<kube::api::DynamicObject> {
    let api: Api<kube::api::DynamicObject> =
        Api::namespaced_with(worker.clone(), ns, &holdfast_cluster::resources::trainjob());
    api.get_opt(name).await.ok().flatten().filter(|t| {
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

/// Every copy of a TrainJob MultiKueue created in the worker's namespace, as a watch of the
/// worker saw them (a copy that lives for a second is not missed).
struct Copies {
    seen: std::sync::Arc<std::sync::Mutex<Vec<(String, String)>>>,
    task: tokio::task::JoinHandle<()>,
}

impl Copies {
    fn watch(worker: &kube::Client, ns: &str) -> Copies {
        use futures::StreamExt;
        use kube::runtime::watcher::{self, Event};
        let api: Api<kube::api::DynamicObject> =
            Api::namespaced_with(worker.clone(), ns, &holdfast_cluster::resources::trainjob());
        let seen = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
        let log = seen.clone();
        let task = tokio::spawn(async move {
            let mut events = std::pin::pin!(watcher::watcher(api, watcher::Config::default()));
            while let Some(event) = events.next().await {
                let Ok(Event::Apply(object) | Event::InitApply(object)) = event else {
                    continue;
                };
                let copy = (
                    object.metadata.name.clone().unwrap_or_default(),
                    object.metadata.uid.clone().unwrap_or_default(),
                );
                if let Ok(mut seen) = log.lock()
                    && !seen.contains(&copy)
                {
                    seen.push(copy);
                }
            }
        });
        Copies { seen, task }
    }

    /// The uids of `name`'s copies created so far, in order.
    fn of(&self, name: &str) -> Vec<String> {
        self.seen
            .lock()
            .map(|seen| {
                seen.iter()
                    .filter(|(n, _)| n == name)
                    .map(|(_, uid)| uid.clone())
                    .collect()
            })
            .unwrap_or_default()
    }

    /// Waits until MultiKueue has created a copy of `name` other than those of `before`,
    /// and returns its uid.
    async fn created(&self, f: &Fixture, name: &str, before: &[String]) -> String {
        f.eventually(
            &format!("a new copy of {name} in the worker"),
            MINUTE,
            || async { self.of(name).into_iter().find(|u| !before.contains(u)) },
        )
        .await
    }

    /// Waits until no copy of `name` other than those of `besides` is in the worker (read
    /// there, not from the watch, which a relist may spare a deletion).
    async fn gone(&self, f: &Fixture, worker: &kube::Client, name: &str, besides: &[String]) {
        f.eventually(
            &format!("no copy of {name} in the worker"),
            MINUTE,
            || async {
                let copy = worker_copy(worker, &f.ns, name).await;
                copy.is_none_or(|c| c.metadata.uid.is_some_and(|u| besides.contains(&u)))
                    .then_some(())
            },
        )
        .await;
    }
}

impl Drop for Copies {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// The stale-release rule and the classification of a deactivation that is not a hold, on a
/// job under MultiKueue, through the manager: MultiKueue's own writes on the manager's
/// Workload as it dispatches a copy to the worker and deletes it there (the check's state,
/// `status.clusterName`, the eviction) must not confuse them. Hold 1, then Hold 2; Release 1
/// answers `StaleHold` and leaves hold 2 in force (no copy in the worker, the Workload
/// inactive); Release 2 releases, and a new copy is dispatched. Someone else deactivating the
/// Workload is `DeactivatedBySomeoneElse`, and Kueue's own deactivation for a maximum
/// execution time is `DeactivatedByKueue`, each with no hold reported; a hold placed over
/// either shows it underneath, and its Release leaves it in place (`resumed: false`), as on
/// one cluster (`holds_kueue::stale_release_is_refused_in_kueue_mode`,
/// `holds_kueue::kueue_deactivation_for_its_own_reason_is_classified_as_such_not_as_a_hold`,
/// `holds_kueue::status_classifies_what_real_kueue_writes`,
/// `seams::release_leaves_kueues_own_deactivation_in_place`,
/// `seams::plain_release_leaves_someone_elses_suspend_in_place`). The copies are watched in the
/// worker, so each step is known to follow a real dispatch and deletion there.
/// The classification code is shared with one cluster: this passed without a change to
/// holdfast, as expected; what it pins is that MultiKueue's writes do not change the answers.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn through_the_manager_a_stale_release_is_refused_and_deactivations_not_ours_are_told_apart_from_a_hold()
 {
    use holdfast_core::hold::RejectCause;
    use holdfast_core::hold::classify::{ObjectState, Underlying};
    use holdfast_core::names::ANN_HOLD_INSTANCE;
    use holdfast_tests::kueue_support::{SETTLE, active, condition_reason};
    use kube::api::{Patch, PatchParams};

    let Gated {
        f,
        worker: _,
        worker_admin,
        snapshots,
        _dir,
    } = gated("mk-stale").await;
    let copies = Copies::watch(&worker_admin, &f.ns);
    let status = |job: &'static str| {
        let f = &f;
        async move { f.exec.status(&f.ns, job).await.expect("status") }
    };
    let stale = |result: Result<Outcome, HoldError>, what: &str| {
        let err = result.expect_err(what);
        assert_eq!(err.cause(), Some(RejectCause::StaleHold), "{what}: {err}");
    };
    let held_by_us = |instance: u64, underlying: Option<Underlying>| ObjectState::HeldByUs {
        instance: Some(instance),
        underlying,
    };

    // Two jobs: `job` for the holds, `timed` with a maximum execution time of five seconds,
    // which Kueue in the manager deactivates on its own once it has run that long. Not one
    // second: the worker's copy carries the same limit and starts its clock first (the
    // manager's Workload is admitted only once the worker has admitted the copy), so it may
    // run out first; the manager is then evicted for MultiKueue's retry and keeps the time it
    // was admitted, in whole seconds (`accumulatedPastExecutionTimeSeconds`), and the copy
    // dispatched next starts from zero. With one second the manager kept 0 s each time, and a
    // loaded run went round eight times in 60 s without the manager's limit ever being met;
    // with five, the manager keeps most of it and its limit comes first on a later dispatch.
    f.create_job("job", json!({})).await;
    f.create_job(
        "timed",
        json!({"kueue.x-k8s.io/max-exec-time-seconds": "5"}),
    )
    .await;
    f.open_at_gate("job").await;
    f.open_at_gate("timed").await;
    let first = copies.created(&f, "job", &[]).await;

    // Hold 1: MultiKueue deletes the copy. Hold 2 replaces it.
    assert_eq!(
        f.exec.hold(&f.ns, "job", meta(Some(1), MINUTE)).await,
        Ok(Outcome::Held)
    );
    copies.gone(&f, &worker_admin, "job", &[]).await;
    assert_eq!(
        f.exec.hold(&f.ns, "job", meta(Some(2), MINUTE)).await,
        Ok(Outcome::Held)
    );
    // Release 1 (and a late Hold 1) is stale: hold 2 stays in force, nothing runs.
    stale(
        f.exec.release(&f.ns, "job", meta(Some(1), MINUTE)).await,
        "release 1 is stale",
    );
    stale(
        f.exec.hold(&f.ns, "job", meta(Some(1), MINUTE)).await,
        "hold 1 is stale",
    );
    let held = f.live_workloads("job").await;
    assert!(
        held.iter()
            .all(|w| !active(w) && annotation(w, ANN_HOLD_INSTANCE) == Some("2")),
        "{held:#?}"
    );
    assert!(
        worker_copy(&worker_admin, &f.ns, "job").await.is_none(),
        "no copy in the worker while held"
    );
    assert_eq!(copies.of("job"), vec![first.clone()], "none dispatched");
    let s = status("job").await;
    assert_eq!(s.state, held_by_us(2, None));
    assert_eq!(s.hold.map(|h| h.instance), Some(Some(2)));

    // Release 2 lifts it: MultiKueue dispatches a new copy.
    assert_eq!(
        f.exec.release(&f.ns, "job", meta(Some(2), MINUTE)).await,
        Ok(Outcome::Released { resumed: true })
    );
    stale(
        f.exec.release(&f.ns, "job", meta(Some(2), MINUTE)).await,
        "nothing in force",
    );
    copies.created(&f, "job", &[first]).await;

    // Someone else deactivates the manager's Workload: Kueue evicts it, MultiKueue deletes
    // the copy, and it is someone else's deactivation, not a hold.
    let name = f
        .workload_when("job", "admitted again", |w| condition(w, "Admitted"))
        .await["metadata"]["name"]
        .as_str()
        .expect("name")
        .to_owned();
    let alice = f.cp.client(Identity::User).await.expect("alice");
    f.workload_api(&alice)
        .patch(
            &name,
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"active": false}})),
        )
        .await
        .expect("alice deactivates it");
    f.workload_when("job", "evicted", |w| {
        condition_reason(w, "Evicted").as_deref() == Some("Deactivated")
    })
    .await;
    copies.gone(&f, &worker_admin, "job", &[]).await;
    let s = status("job").await;
    assert_eq!(s.state, ObjectState::DeactivatedBySomeoneElse);
    assert_eq!(s.hold, None);
    stale(
        f.exec.release(&f.ns, "job", meta(Some(3), MINUTE)).await,
        "no hold of ours to release",
    );
    // A hold over it shows it underneath; its Release leaves it in place.
    assert_eq!(
        f.exec.hold(&f.ns, "job", meta(Some(3), MINUTE)).await,
        Ok(Outcome::Held)
    );
    assert_eq!(
        status("job").await.state,
        held_by_us(3, Some(Underlying::DeactivatedBySomeoneElse))
    );
    assert_eq!(
        f.exec.release(&f.ns, "job", meta(Some(3), MINUTE)).await,
        Ok(Outcome::Released { resumed: false })
    );
    let s = status("job").await;
    assert_eq!(s.state, ObjectState::DeactivatedBySomeoneElse);
    assert_eq!(s.hold, None);
    assert!(f.live_workloads("job").await.iter().all(|w| !active(w)));
    assert!(worker_copy(&worker_admin, &f.ns, "job").await.is_none());

    // Kueue's own deactivation, after MultiKueue dispatched the timed job and ran it (the
    // worker's copy carries the same limit: it may be dispatched more than once before).
    const OWN: &str = "DeactivatedDueToMaximumExecutionTimeExceeded";
    copies.created(&f, "timed", &[]).await;
    // Kueue says why in the Evicted condition, unless the Workload was already evicted for
    // another reason (the worker's copy, which carries the same limit, evicted first: the
    // manager's Workload is then evicted for MultiKueue's Retry, and that reason stays).
    // holdfast can then tell only that someone deactivated it, not that it was Kueue.
    // Which of the two holdfast reports can also change while MultiKueue still writes the
    // Workload (a Retry eviction replaced by Kueue's own, or the other way round), so either
    // is accepted at each read: both say the deactivation is not a hold of ours.
    f.workload_when("timed", "Kueue deactivates it for its time", |w| {
        !active(w) && condition_reason(w, "Evicted").is_some()
    })
    .await;
    let not_ours = |s: &ObjectState| {
        *s == ObjectState::DeactivatedBySomeoneElse
            || *s == ObjectState::DeactivatedByKueue { reason: OWN.into() }
    };
    let underneath = |s: &ObjectState| match s {
        ObjectState::HeldByUs {
            instance: Some(1),
            underlying: Some(u),
        } => {
            *u == Underlying::DeactivatedBySomeoneElse
                || *u == Underlying::DeactivatedByKueue { reason: OWN.into() }
        }
        _ => false,
    };
    copies.gone(&f, &worker_admin, "timed", &[]).await;
    let dispatched = copies.of("timed");
    let s = f
        .eventually("the status settles", SETTLE, || async {
            let s = status("timed").await;
            not_ours(&s.state).then_some(s)
        })
        .await;
    assert_eq!(s.hold, None);
    stale(
        f.exec.release(&f.ns, "timed", meta(Some(1), MINUTE)).await,
        "no hold of ours to release",
    );
    assert_eq!(
        f.exec.hold(&f.ns, "timed", meta(Some(1), MINUTE)).await,
        Ok(Outcome::Held)
    );
    let s = status("timed").await.state;
    assert!(
        underneath(&s),
        "held by us over a deactivation not ours: {s:?}"
    );
    assert_eq!(
        f.exec.release(&f.ns, "timed", meta(Some(1), MINUTE)).await,
        Ok(Outcome::Released { resumed: false })
    );
    let s = status("timed").await.state;
    assert!(not_ours(&s), "{s:?}");
    assert!(f.live_workloads("timed").await.iter().all(|w| !active(w)));
    assert_eq!(copies.of("timed"), dispatched, "not dispatched again");
    snapshots.stop().await;
    f.finish().await;
}

/// A snapshot that cannot be handed to the worker's copy (here deleted in the worker once the
/// copy owned it) is warned of once per Workload and cause: the gate meets it again at every
/// reconcile, and publishes nothing more. Its reads of the worker's ConfigMap, in the worker's
/// audit log, show the reconciles that came after the Warning. (Before, each reconcile
/// published it again, and the Event's series counted them.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_snapshot_the_workers_copy_cannot_be_given_is_warned_of_once_not_at_every_reconcile() {
    use k8s_openapi::api::core::v1::ConfigMap;
    use k8s_openapi::api::events::v1::Event;

    const REASON: &str = "MultiKueueSnapshotNotAdopted";
    let Gated {
        f,
        worker,
        worker_admin,
        snapshots,
        _dir,
    } = gated("mk-warn-once").await;
    f.create_job("job", json!({})).await;
    f.open_at_gate("job").await;
    let name = holdfast_core::names::snapshot_name("job");
    let worker_cms: Api<ConfigMap> = Api::namespaced(worker_admin.clone(), &f.ns);
    adopted(&f, &worker_cms, &worker_admin, &name).await;

    worker_cms
        .delete(&name, &DeleteParams::default())
        .await
        .expect("someone deletes the worker's snapshot");
    let events: Api<Event> = Api::namespaced(f.admin.clone(), &f.ns);
    let warnings = || async {
        let list = events.list(&Default::default()).await.expect("events");
        list.items
            .into_iter()
            .filter(|e| e.reason.as_deref() == Some(REASON))
            .collect::<Vec<_>>()
    };
    f.eventually("the Warning", MINUTE, || async {
        (!warnings().await.is_empty()).then_some(())
    })
    .await;
    // The gate's reads of the worker's snapshot: one per reconcile.
    let reads = || async {
        worker
            .settled_audit_events()
            .await
            .expect("the worker's audit log")
            .iter()
            .filter(|e| {
                e["verb"] == "get"
                    && e["objectRef"]["resource"] == "configmaps"
                    && e["objectRef"]["namespace"] == f.ns.as_str()
                    && e["objectRef"]["name"] == name.as_str()
                    && e["user"]["username"] != Identity::Admin.username()
            })
            .count()
    };
    let seen = reads().await;
    f.eventually("three more reconciles", MINUTE, || async {
        (reads().await >= seen + 3).then_some(())
    })
    .await;
    let warnings = warnings().await;
    assert_eq!(warnings.len(), 1, "{warnings:#?}");
    assert_eq!(
        warnings[0].series, None,
        "published once: {:#?}",
        warnings[0]
    );
    snapshots.stop().await;
    f.finish().await;
}

/// A job held through the manager gives back its quota there once no worker runs it. The
/// test plays the worker's Trainer: the copy reports a Job active, and MultiKueue copies
/// that to the manager's TrainJob. Hold: MultiKueue deletes the copy, and with holdfast's
/// check `Pending` through the hold it sends none again, so nothing would report the job
/// inactive and Kueue would keep the quota. The gate, having read the worker (no copy, no
/// pod), writes the manager's `jobsStatus` to no Job active or ready, and Kueue releases the
/// quota. Release dispatches the job again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_held_job_gives_back_its_quota_in_the_manager_once_no_worker_runs_it() {
    use holdfast_tests::kueue_support::active;
    use kube::api::{Patch, PatchParams};

    let Gated {
        f,
        worker: _,
        worker_admin,
        snapshots,
        _dir,
    } = gated("mk-quota").await;
    let copies = Copies::watch(&worker_admin, &f.ns);

    f.create_job("job", json!({})).await;
    f.open_at_gate("job").await;
    let first = copies.created(&f, "job", &[]).await;
    // The worker's Trainer reports the copy's Job running; MultiKueue copies it over.
    f.trainjobs(&worker_admin)
        .patch_status(
            "job",
            &PatchParams::default(),
            &Patch::Merge(json!({"status": {"jobsStatus": [{"name": "node",
                "active": 1, "ready": 1, "succeeded": 0, "failed": 0, "suspended": 0}]}})),
        )
        .await
        .expect("status as the worker's Trainer");
    let running = |tj: &serde_json::Value| tj["status"]["jobsStatus"][0]["active"] == 1;
    f.job_when("job", "the copy's report in the manager", running)
        .await;

    assert_eq!(
        f.exec.hold(&f.ns, "job", meta(Some(1), MINUTE)).await,
        Ok(Outcome::Held)
    );
    copies.gone(&f, &worker_admin, "job", &[]).await;
    f.workload_when("job", "held, its quota given back", |w| {
        !active(w)
            && !condition(w, "QuotaReserved")
            && w["status"].get("admission").is_none_or(|a| a.is_null())
    })
    .await;
    let tj = f
        .job_when("job", "no Job reported running", |tj| !running(tj))
        .await;
    for job in tj["status"]["jobsStatus"].as_array().expect("jobsStatus") {
        assert_eq!(
            (&job["active"], &job["ready"]),
            (&json!(0), &json!(0)),
            "{tj:#}"
        );
    }
    assert_eq!(
        copies.of("job"),
        vec![first.clone()],
        "none dispatched while held"
    );

    assert_eq!(
        f.exec.release(&f.ns, "job", meta(Some(1), MINUTE)).await,
        Ok(Outcome::Released { resumed: true })
    );
    copies.created(&f, "job", &[first]).await;
    snapshots.stop().await;
    f.finish().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_trainjob_planted_in_a_worker_before_dispatch_keeps_the_check_pending_until_deleted() {
    use k8s_openapi::api::core::v1::ConfigMap;
    use k8s_openapi::api::events::v1::Event;

    let Gated {
        f,
        worker: _,
        worker_admin,
        snapshots,
        _dir,
    } = gated("mk-planted").await;

    // A worker user creates TrainJob `job` there first: MultiKueue would take it for its copy,
    // and it must not be handed the manager's snapshot. (Without MultiKueue's origin label,
    // which would let the manager's Kueue collect it as an orphan at any moment.)
    let trainjobs: Api<kube::api::DynamicObject> = Api::namespaced_with(
        worker_admin.clone(),
        &f.ns,
        &holdfast_cluster::resources::trainjob(),
    );
    let planted: kube::api::DynamicObject = serde_json::from_value(json!({
        "apiVersion": "trainer.kubeflow.org/v1alpha1", "kind": "TrainJob",
        "metadata": {"name": "job"},
        "spec": {"runtimeRef": {"name": f.runtime}, "suspend": true}
    }))
    .expect("trainjob");
    let planted = trainjobs
        .create(&PostParams::default(), &planted)
        .await
        .expect("the planted TrainJob");
    let planted_uid = planted.metadata.uid.clone().expect("uid");

    f.create_job("job", json!({})).await;
    let name = holdfast_core::names::snapshot_name("job");
    let manager_cms: Api<ConfigMap> = Api::namespaced(f.admin.clone(), &f.ns);
    f.eventually("the manager's snapshot", MINUTE, || async {
        manager_cms.get_opt(&name).await.ok().flatten()
    })
    .await;
    f.open_at_gate("job").await;
    let events: Api<Event> = Api::namespaced(f.admin.clone(), &f.ns);
    let said = format!(
        "in MultiKueue worker {WORKER}, TrainJob {}/job (uid {planted_uid}) exists before the job is dispatched: delete it there",
        f.ns
    );
    f.eventually("the wait naming the planted TrainJob", MINUTE, || async {
        let list = events.list(&Default::default()).await.ok()?;
        list.items
            .iter()
            .any(|e| e.note.as_deref().is_some_and(|n| n.contains(&said)))
            .then_some(())
    })
    .await;
    f.workload_when("job", "the gate waits to carry the snapshot", |w| {
        check(w)
            == (
                "Pending".to_owned(),
                waiting_text(WaitReason::SnapshotNotCarried),
            )
    })
    .await;
    let worker_cms: Api<ConfigMap> = Api::namespaced(worker_admin.clone(), &f.ns);
    let cm = worker_cms.get_opt(&name).await.expect("read the worker");
    assert!(
        cm.as_ref()
            .is_none_or(|c| c.metadata.owner_references.is_none()),
        "never handed to the planted TrainJob: {cm:?}"
    );

    // Deleted: the check turns Ready, and MultiKueue's own copy is given the snapshot.
    trainjobs
        .delete("job", &DeleteParams::default())
        .await
        .expect("the planted TrainJob deleted");
    let (copy, _) = adopted(&f, &worker_cms, &worker_admin, &name).await;
    assert_ne!(copy, planted_uid);
    snapshots.stop().await;
    f.finish().await;
}
