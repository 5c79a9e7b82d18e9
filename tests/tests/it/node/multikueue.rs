//! MultiKueue across two clusters: a manager on a loopback control plane dispatches a
//! TrainJob to the tier-3 node cluster as its worker ([`TwoClusters`]), where the job's pods
//! really run, and holdfast on the manager still refuses to hold it.
//!
//! ```sh
//! flock /tmp/holdfast-node.lock cargo test -p holdfast-tests --test it -- --ignored \
//!     node::multikueue:: --test-threads 1 --nocapture
//! ```

use super::kep_fixture::{Jobs, kep_runtime, runtime_yaml};
use super::*;
use holdfast_controller::hold::HoldExecutor;
use holdfast_controller::multikueue::Workers;
use holdfast_controller::readmission::{self, ReadmissionGate, ReadmissionMetrics};
use holdfast_core::hold::HoldError;
use holdfast_core::mode::Mode;
use holdfast_core::names::{MULTIKUEUE_CONTROLLER, MULTIKUEUE_ORIGIN_LABEL};
use holdfast_tests::hold_support::{client_without_retries, config, meta};
use holdfast_tests::kueue_support::{CHECK, ensure_admission_check};
use holdfast_tests::multikueue_clusters::{
    MULTIKUEUE_CHECK, TwoClusters, WORKER, gate_worker, manager_snapshots,
};
use holdfast_tests::node::NODE_NAME;
use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;

/// The state of AdmissionCheck `name` on Workload `w`.
fn check_state<'a>(w: &'a Value, name: &str) -> &'a str {
    w.pointer("/status/admissionChecks")
        .and_then(Value::as_array)
        .and_then(|cs| cs.iter().find(|c| c["name"] == name))
        .and_then(|c| c["state"].as_str())
        .unwrap_or_default()
}

/// The live Workloads of `ns`, as JSON.
async fn live_workloads(workloads: &Api<DynamicObject>) -> Vec<Value> {
    workloads
        .list(&ListParams::default())
        .await
        .map(|l| l.items)
        .unwrap_or_default()
        .into_iter()
        .filter(|w| w.metadata.deletion_timestamp.is_none())
        .map(|w| serde_json::to_value(w).expect("json"))
        .collect()
}

/// holdfast's readmission gate on the manager, in process as its controller, for `ns`,
/// counting pods in `workers` too; stops with `stop`.
fn start_gate(
    controller: &kube::Client,
    ns: &str,
    workers: Workers,
    stop: &CancellationToken,
) -> tokio::task::JoinHandle<anyhow::Result<()>> {
    let gate = ReadmissionGate::new(
        controller.clone(),
        readmission::Config {
            namespace: Some(ns.to_owned()),
            retry_min: Duration::from_millis(100),
            retry_max: Duration::from_secs(2),
            resync: Duration::from_secs(3),
            sweep_interval: Duration::from_secs(2),
            ..readmission::Config::default()
        },
        ReadmissionMetrics::default(),
        holdfast_tests::leader_parts::publisher(controller, None),
    )
    .with_workers(workers);
    let feed = holdfast_tests::leader_parts::trainjob_feed(controller, Some(ns), stop);
    tokio::spawn({
        let stop = stop.clone();
        async move { gate.run_on(feed, stop).await }
    })
}

/// Two clusters and holdfast on the manager as the chart configures it for the worker (a
/// kubeconfig file): its readmission gate (as its controller) beside MultiKueue's check, its
/// snapshot reconciler, and the hold executor, all seeing the worker; a namespace of both
/// clusters with their queues.
struct GateOnManager {
    clusters: TwoClusters,
    ns: String,
    admin: kube::Client,
    worker_admin: kube::Client,
    exec: HoldExecutor,
    stop: CancellationToken,
    gate_task: tokio::task::JoinHandle<anyhow::Result<()>>,
    snapshots: tokio::task::JoinHandle<Result<(), holdfast_controller::snapshot::Error>>,
    _kubeconfig: tempfile::TempDir,
}

impl GateOnManager {
    async fn start(worker: &'static NodeCluster, prefix: &str) -> GateOnManager {
        let clusters = TwoClusters::start(worker).await.expect("two clusters");
        let ns = clusters.namespace(prefix).await.expect("namespace");
        let manager = &clusters.manager;
        let admin = manager
            .client(Identity::Admin)
            .await
            .expect("manager admin");
        let worker_admin = worker.client(Identity::Admin).await.expect("worker admin");
        ensure_admission_check(&admin).await;
        let dir = tempfile::tempdir().expect("tempdir");
        let spec = gate_worker(clusters.worker, dir.path())
            .await
            .expect("the gate's kubeconfig");
        let workers = Workers::from_kubeconfigs(&[spec]).await.expect("workers");
        let controller = manager
            .client(Identity::Controller)
            .await
            .expect("controller");
        let stop = CancellationToken::new();
        let gate_task = start_gate(&controller, &ns, workers.clone(), &stop);
        // The gate carries the manager's snapshot into the worker before the job may go there.
        let snapshots = manager_snapshots(&controller, &ns, &stop);
        let exec = HoldExecutor::new(
            client_without_retries(manager, Identity::Controller).await,
            Mode::Kueue,
            config(),
        )
        .with_workers(workers);
        clusters
            .queues(&ns, &[CHECK, MULTIKUEUE_CHECK])
            .await
            .expect("queues");
        GateOnManager {
            clusters,
            ns,
            admin,
            worker_admin,
            exec,
            stop,
            gate_task,
            snapshots,
            _kubeconfig: dir,
        }
    }

    /// Stops holdfast, prints the time of `test` since `t0`, and deletes the worker's
    /// namespace (the worker is shared; the manager, which would collect its copies, stops).
    async fn finish(self, test: &str, t0: Instant) {
        self.stop.cancel();
        let _ = tokio::time::timeout(Duration::from_secs(15), self.gate_task).await;
        let _ = tokio::time::timeout(Duration::from_secs(15), self.snapshots).await;
        eprintln!(
            "{test}: whole test {:.1?} (set-up {:.1?})",
            t0.elapsed(),
            self.clusters.set_up
        );
        Api::<k8s_openapi::api::core::v1::Namespace>::all(self.worker_admin)
            .delete(&self.ns, &DeleteParams::default())
            .await
            .expect("delete the worker's namespace");
    }
}

/// A TrainJob created on the manager, in a ClusterQueue that lists MultiKueue's check beside
/// holdfast's, is dispatched to the worker: holdfast's check on the manager goes Ready (no
/// pod of it in the manager), MultiKueue's goes Ready naming the worker, and the worker's
/// copy runs real pods on the node. A Hold through the manager then answers `Unsupported`,
/// naming what puts the job under MultiKueue and what to configure, and changes nothing: the
/// manager's Workload stays active and the worker's pods keep running. Prints the set-up's
/// and the test's wall time.
#[tokio::test]
#[ignore = "tier 3: run with --ignored (builds and starts a real node and a manager)"]
async fn multikueue_runs_a_managers_trainjob_on_the_worker_node_and_a_hold_there_answers_unsupported()
 {
    let t0 = Instant::now();
    let worker = NodeCluster::shared();
    let node_up = t0.elapsed();
    let clusters = TwoClusters::start(worker).await.expect("two clusters");
    let ns = clusters.namespace("mk").await.expect("namespace");
    let manager = &clusters.manager;
    let admin = manager
        .client(Identity::Admin)
        .await
        .expect("manager admin");
    let worker_admin = worker.client(Identity::Admin).await.expect("worker admin");

    // holdfast on the manager, in process: its readmission gate (as its controller) beside
    // MultiKueue's check, and the hold executor.
    ensure_admission_check(&admin).await;
    let controller = manager
        .client(Identity::Controller)
        .await
        .expect("controller");
    let stop = CancellationToken::new();
    let gate_task = start_gate(&controller, &ns, Workers::default(), &stop);
    let exec = HoldExecutor::new(
        client_without_retries(manager, Identity::Controller).await,
        Mode::Kueue,
        config(),
    );
    clusters
        .queues(&ns, &[CHECK, MULTIKUEUE_CHECK])
        .await
        .expect("queues");
    clusters
        .runtime(&ns, "workload", 1)
        .await
        .expect("runtimes");

    // An unmanaged TrainJob (no start gate) queued on the manager.
    let created = clusters
        .create_trainjob(&ns, "tj")
        .await
        .expect("the TrainJob on the manager");
    assert_eq!(
        created.data["spec"]["managedBy"], MULTIKUEUE_CONTROLLER,
        "Kueue's webhook hands a job queued where MultiKueue dispatches to MultiKueue"
    );

    // Dispatched: both checks Ready on the manager's Workload, which names the worker.
    let workloads: Api<DynamicObject> =
        Api::namespaced_with(admin.clone(), &ns, &holdfast_cluster::resources::workload());
    let dispatched = wait_for(
        "the manager's Workload admitted with both checks Ready, on the worker",
        Duration::from_secs(120),
        || async {
            live_workloads(&workloads).await.into_iter().find(|w| {
                check_state(w, CHECK) == "Ready"
                    && check_state(w, MULTIKUEUE_CHECK) == "Ready"
                    && w.pointer("/status/clusterName").and_then(Value::as_str) == Some(WORKER)
            })
        },
    )
    .await;
    let workload_name = dispatched["metadata"]["name"]
        .as_str()
        .expect("name")
        .to_owned();

    // The worker's copy runs: its TrainJob MultiKueue's (origin label, managedBy cleared),
    // its pods Running on the node.
    let worker_pods: Api<Pod> = Api::namespaced(worker_admin.clone(), &ns);
    let running = next_execution(
        &worker_pods,
        "tj",
        &[],
        "the worker's pods Running",
        Duration::from_secs(120),
    )
    .await;
    assert!(
        running
            .iter()
            .all(|p| p.spec.as_ref().and_then(|s| s.node_name.as_deref()) == Some(NODE_NAME)),
        "on the node"
    );
    let remote = Api::<DynamicObject>::namespaced_with(
        worker_admin.clone(),
        &ns,
        &holdfast_cluster::resources::trainjob(),
    )
    .get("tj")
    .await
    .expect("the worker's TrainJob");
    assert!(
        remote
            .metadata
            .labels
            .unwrap_or_default()
            .contains_key(MULTIKUEUE_ORIGIN_LABEL),
        "MultiKueue's copy"
    );
    assert!(
        remote.data["spec"]["managedBy"] != MULTIKUEUE_CONTROLLER,
        "the worker's Trainer runs the copy: {}",
        remote.data["spec"]["managedBy"]
    );
    let manager_pods: Api<Pod> = Api::namespaced(admin.clone(), &ns);
    assert!(
        manager_pods
            .list(&ListParams::default())
            .await
            .expect("manager pods")
            .items
            .is_empty(),
        "nothing runs in the manager"
    );

    // holdfast on the manager refuses the hold, saying why and what to configure.
    let hold = exec
        .hold(&ns, "tj", meta(Some(1), Duration::from_secs(60)))
        .await;
    let Err(HoldError::Unsupported { reason }) = hold else {
        panic!("a Hold through the manager answers Unsupported: {hold:?}");
    };
    for needle in [
        "hold is not supported for a TrainJob under MultiKueue yet",
        "lists MultiKueue's AdmissionCheck multikueue",
        "holdfast has no kubeconfig for any MultiKueue worker",
        "ClusterQueue that lists holdfast's readmission AdmissionCheck and no AdmissionCheck of kueue.x-k8s.io/multikueue",
    ] {
        assert!(reason.contains(needle), "{needle}: {reason}");
    }
    // ...and wrote nothing: the Workload is still active, the same pods still run.
    let after = workloads.get(&workload_name).await.expect("the Workload");
    assert_ne!(after.data["spec"]["active"], false, "not deactivated");
    let uids =
        |ps: &[Pod]| -> Vec<String> { ps.iter().filter_map(|p| p.metadata.uid.clone()).collect() };
    let still = running_pods(&worker_pods, "tj").await;
    assert_eq!(uids(&still), uids(&running), "the same pods");
    assert!(still.iter().all(is_running), "still Running");

    stop.cancel();
    let _ = tokio::time::timeout(Duration::from_secs(15), gate_task).await;
    eprintln!(
        "costs: node cluster {node_up:.1?} (0 when already up), manager + both Kueues + MultiKueue Active {:.1?}, whole test {:.1?}",
        clusters.set_up,
        t0.elapsed()
    );
    // The worker is shared: its copy goes with the namespace (the manager, which would
    // collect it, stops with this test).
    Api::<k8s_openapi::api::core::v1::Namespace>::all(worker_admin)
        .delete(&ns, &DeleteParams::default())
        .await
        .expect("delete the worker's namespace");
}

/// One line of what a watch saw: when (since the deactivation), in which cluster, which
/// object, its resourceVersion (one etcd per cluster: ordered within a cluster) and a summary.
#[derive(Clone, Debug)]
struct Seen {
    at: Duration,
    cluster: &'static str,
    object: String,
    rv: u64,
    summary: String,
}

/// Conditions that are True, as `Type(Reason)`.
fn true_conditions(o: &Value) -> String {
    o.pointer("/status/conditions")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter(|c| c["status"] == "True")
        .map(|c| {
            format!(
                "{}({})",
                c["type"].as_str().unwrap_or_default(),
                c["reason"].as_str().unwrap_or_default()
            )
        })
        .collect::<Vec<_>>()
        .join(",")
}

/// What matters of each kind during a hold.
fn summary(kind: &str, o: &Value) -> String {
    let deleting = if o.pointer("/metadata/deletionTimestamp").is_some() {
        " deleting"
    } else {
        ""
    };
    match kind {
        "Workload" => format!(
            "active={} [{}] checks=[{}] clusterName={}{deleting}",
            o["spec"]["active"] != false,
            true_conditions(o),
            o.pointer("/status/admissionChecks")
                .and_then(Value::as_array)
                .into_iter()
                .flatten()
                .map(|c| format!(
                    "{}:{}",
                    c["name"].as_str().unwrap_or_default(),
                    c["state"].as_str().unwrap_or_default()
                ))
                .collect::<Vec<_>>()
                .join(","),
            o.pointer("/status/clusterName")
                .and_then(Value::as_str)
                .unwrap_or("-"),
        ),
        "TrainJob" | "JobSet" => format!(
            "suspend={} [{}]{deleting}",
            o["spec"]["suspend"],
            true_conditions(o)
        ),
        _ => format!(
            "phase={} containers=[{}]{deleting}",
            o.pointer("/status/phase")
                .and_then(Value::as_str)
                .unwrap_or("-"),
            o.pointer("/status/containerStatuses")
                .and_then(Value::as_array)
                .into_iter()
                .flatten()
                .map(
                    |c| match c["state"].as_object().and_then(|s| s.keys().next()) {
                        Some(k) if k == "terminated" => format!(
                            "terminated finishedAt={}",
                            c["state"]["terminated"]["finishedAt"]
                                .as_str()
                                .unwrap_or_default()
                        ),
                        Some(k) => k.clone(),
                        None => "-".into(),
                    }
                )
                .collect::<Vec<_>>()
                .join(",")
        ),
    }
}

/// Records every change of `api`'s objects (by summary) into `log`, from `since`.
fn record(
    api: Api<DynamicObject>,
    cluster: &'static str,
    kind: &'static str,
    since: std::sync::Arc<std::sync::Mutex<Instant>>,
    log: std::sync::Arc<std::sync::Mutex<Vec<Seen>>>,
) -> tokio::task::JoinHandle<()> {
    use kube::runtime::watcher;
    tokio::spawn(async move {
        let mut last = std::collections::HashMap::<String, String>::new();
        let mut stream = std::pin::pin!(watcher(api, watcher::Config::default()));
        while let Some(ev) = stream.next().await {
            let (o, deleted) = match ev {
                Ok(watcher::Event::Apply(o) | watcher::Event::InitApply(o)) => (o, false),
                Ok(watcher::Event::Delete(o)) => (o, true),
                _ => continue,
            };
            let v = serde_json::to_value(&o).expect("json");
            let object = format!("{kind}/{}", o.metadata.name.clone().unwrap_or_default());
            let summary = if deleted {
                "DELETED".to_owned()
            } else {
                summary(kind, &v)
            };
            if last.get(&object) == Some(&summary) {
                continue;
            }
            last.insert(object.clone(), summary.clone());
            let at = since.lock().expect("since").elapsed();
            log.lock().expect("log").push(Seen {
                at,
                cluster,
                object,
                rv: o
                    .metadata
                    .resource_version
                    .as_deref()
                    .and_then(|r| r.parse().ok())
                    .unwrap_or_default(),
                summary,
            });
        }
    })
}

/// Groundwork for a gate that sees the workers: deactivating the manager's Workload (what a
/// Kueue-mode hold writes; holdfast refuses the hold itself here, so the test writes
/// `spec.active: false` as an admin) makes MultiKueue delete the worker's TrainJob and
/// Workload (and Trainer's JobSet goes with them) while the job's pod, 15 s of SIGTERM grace,
/// still terminates: in the worker's own order of writes, the copy is gone before the pod.
/// Prints the timeline both clusters' watches saw (the book's MultiKueue page reads it).
#[tokio::test]
#[ignore = "tier 3: run with --ignored (builds and starts a real node and a manager)"]
async fn deactivating_the_managers_workload_deletes_the_workers_copy_while_its_pod_still_terminates()
 {
    use std::sync::{Arc, Mutex};
    let worker = NodeCluster::shared();
    let clusters = TwoClusters::start(worker).await.expect("two clusters");
    let ns = clusters.namespace("mk-obs").await.expect("namespace");
    let manager = &clusters.manager;
    let admin = manager
        .client(Identity::Admin)
        .await
        .expect("manager admin");
    let worker_admin = worker.client(Identity::Admin).await.expect("worker admin");
    clusters
        .queues(&ns, &[MULTIKUEUE_CHECK])
        .await
        .expect("queues");
    clusters
        .runtime(&ns, "workload", 15)
        .await
        .expect("runtimes");
    clusters
        .create_trainjob(&ns, "tj")
        .await
        .expect("the TrainJob on the manager");
    let worker_pods: Api<Pod> = Api::namespaced(worker_admin.clone(), &ns);
    next_execution(
        &worker_pods,
        "tj",
        &[],
        "the worker's pods Running",
        Duration::from_secs(120),
    )
    .await;

    let since = Arc::new(Mutex::new(Instant::now()));
    let log = Arc::new(Mutex::new(Vec::<Seen>::new()));
    let res = |c: &kube::Client, ar: kube::core::ApiResource| {
        Api::<DynamicObject>::namespaced_with(c.clone(), &ns, &ar)
    };
    use holdfast_cluster::resources as rs;
    let tasks = [
        record(
            res(&admin, rs::workload()),
            "manager",
            "Workload",
            since.clone(),
            log.clone(),
        ),
        record(
            res(&admin, rs::trainjob()),
            "manager",
            "TrainJob",
            since.clone(),
            log.clone(),
        ),
        record(
            res(&worker_admin, rs::workload()),
            "worker",
            "Workload",
            since.clone(),
            log.clone(),
        ),
        record(
            res(&worker_admin, rs::trainjob()),
            "worker",
            "TrainJob",
            since.clone(),
            log.clone(),
        ),
        record(
            res(&worker_admin, rs::jobset()),
            "worker",
            "JobSet",
            since.clone(),
            log.clone(),
        ),
        record(
            res(&worker_admin, rs::pod()),
            "worker",
            "Pod",
            since.clone(),
            log.clone(),
        ),
    ];
    tokio::time::sleep(Duration::from_secs(2)).await;
    let workloads = res(&admin, rs::workload());
    let name = live_workloads(&workloads).await[0]["metadata"]["name"]
        .as_str()
        .expect("name")
        .to_owned();
    *since.lock().expect("since") = Instant::now();
    log.lock().expect("log").push(Seen {
        at: Duration::ZERO,
        cluster: "manager",
        object: format!("Workload/{name}"),
        rv: 0,
        summary: "DEACTIVATED (spec.active: false)".into(),
    });
    workloads
        .patch(
            &name,
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"active": false}})),
        )
        .await
        .expect("deactivate");
    wait_for(
        "the worker's pods and copy gone",
        Duration::from_secs(120),
        || async {
            let pods = running_pods(&worker_pods, "tj").await;
            let copy = res(&worker_admin, rs::trainjob())
                .get_opt("tj")
                .await
                .ok()
                .flatten();
            (pods.is_empty() && copy.is_none()).then_some(())
        },
    )
    .await;
    tokio::time::sleep(Duration::from_secs(20)).await;
    for t in &tasks {
        t.abort();
    }
    let log = log.lock().expect("log").clone();
    for s in &log {
        eprintln!(
            "{:>7.1?} {:<7} rv={:<6} {:<45} {}",
            s.at, s.cluster, s.rv, s.object, s.summary
        );
    }
    let first_deleted = |object: &str| {
        log.iter()
            .filter(|s| s.cluster == "worker" && s.object.starts_with(object))
            .find(|s| s.summary == "DELETED")
            .map(|s| s.rv)
            .unwrap_or_else(|| panic!("the worker's {object} seen deleted: {log:#?}"))
    };
    let pod_gone = first_deleted("Pod/");
    for copy in ["TrainJob/tj", "Workload/"] {
        assert!(
            first_deleted(copy) < pod_gone,
            "the worker's {copy} was deleted only after the pod was gone: {log:#?}"
        );
    }
    Api::<k8s_openapi::api::core::v1::Namespace>::all(worker_admin)
        .delete(&ns, &DeleteParams::default())
        .await
        .expect("delete the worker's namespace");
}

/// The seed's readmission gate across clusters, on the real node: a job dispatched by
/// MultiKueue, held and at once released through the manager, while its pod in the worker
/// takes 20 s to stop after SIGTERM. MultiKueue deletes the worker's copy at the hold, so
/// nothing but the pod shows the held execution; holdfast's gate in the manager, configured
/// with a kubeconfig for the worker (an account allowed only to list pods, Jobs and JobSets),
/// keeps its check Pending while that pod remains and is never Ready before it is gone, and
/// the new execution's container starts after the old one finished, by the kubelet's
/// records. (Before, the Hold answered Unsupported; with it forced, the gate went Ready at
/// once, finding no pod in the manager.)
#[tokio::test]
#[ignore = "tier 3: run with --ignored (builds and starts a real node and a manager)"]
async fn a_release_through_the_manager_waits_until_the_workers_pods_of_the_held_execution_are_gone()
{
    let t0 = Instant::now();
    let on_manager = GateOnManager::start(NodeCluster::shared(), "mk-gate").await;
    let GateOnManager {
        clusters,
        ns,
        admin,
        worker_admin,
        exec,
        ..
    } = &on_manager;
    clusters
        .runtime(ns, "workload", 20)
        .await
        .expect("runtimes");
    clusters
        .create_trainjob(ns, "tj")
        .await
        .expect("the TrainJob on the manager");
    let worker_pods: Api<Pod> = Api::namespaced(worker_admin.clone(), ns);
    let first = next_execution(
        &worker_pods,
        "tj",
        &[],
        "the first execution Running in the worker",
        Duration::from_secs(120),
    )
    .await;
    let old: Vec<String> = first
        .iter()
        .filter_map(|p| p.metadata.uid.clone())
        .collect();

    // Hold and Release through the manager: both go ahead (holdfast sees the worker).
    assert_eq!(
        exec.hold(ns, "tj", meta(Some(1), Duration::from_secs(60)))
            .await,
        Ok(holdfast_core::hold::Outcome::Held)
    );
    let release = exec
        .release(ns, "tj", meta(Some(1), Duration::from_secs(60)))
        .await;
    assert!(
        matches!(release, Ok(holdfast_core::hold::Outcome::Released { .. })),
        "{release:?}"
    );

    // Watch both clusters until the second execution runs: the check read first, then the
    // worker's pods, so a Ready check followed by an old pod still listed is a Ready given
    // while the old pod remained.
    let workloads: Api<DynamicObject> =
        Api::namespaced_with(admin.clone(), ns, &holdfast_cluster::resources::workload());
    let mut pending_on_old = false;
    // The kubelet's finishedAt of each old container, from a watch: the pod object goes
    // moments after its last status.
    let finished = std::sync::Arc::new(std::sync::Mutex::new(std::collections::HashMap::<
        String,
        jiff::Timestamp,
    >::new()));
    let finish_recorder = tokio::spawn({
        use kube::runtime::watcher;
        let finished = finished.clone();
        let api = worker_pods.clone();
        async move {
            let config = watcher::Config::default().labels("jobset.sigs.k8s.io/jobset-name=tj");
            let mut stream = std::pin::pin!(watcher(api, config));
            while let Some(ev) = stream.next().await {
                let Ok(watcher::Event::Apply(p) | watcher::Event::Delete(p)) = ev else {
                    continue;
                };
                let ended = p
                    .status
                    .as_ref()
                    .and_then(|s| s.container_statuses.as_ref())
                    .into_iter()
                    .flatten()
                    .filter_map(|c| c.state.as_ref()?.terminated.as_ref()?.finished_at.as_ref())
                    .map(|t| t.0)
                    .max();
                if let (Some(uid), Some(ended)) = (p.metadata.uid.clone(), ended) {
                    finished.lock().expect("finished").insert(uid, ended);
                }
            }
        }
    });
    let deadline = Instant::now() + Duration::from_secs(180);
    let second = loop {
        assert!(
            Instant::now() < deadline,
            "no second execution within 180 s"
        );
        let live = live_workloads(&workloads).await;
        let checks: Vec<(String, String)> = live
            .iter()
            .map(|w| {
                let c = w
                    .pointer("/status/admissionChecks")
                    .and_then(Value::as_array)
                    .and_then(|cs| cs.iter().find(|c| c["name"] == CHECK));
                let field = |k: &str| c.and_then(|c| c[k].as_str()).unwrap_or_default().to_owned();
                (field("state"), field("message"))
            })
            .collect();
        let listed = worker_pods
            .list(&ListParams::default().labels("jobset.sigs.k8s.io/jobset-name=tj"))
            .await
            .expect("the worker's pods")
            .items;
        let old_left: Vec<&Pod> = listed
            .iter()
            .filter(|p| p.metadata.uid.as_ref().is_some_and(|u| old.contains(u)))
            .collect();
        if !old_left.is_empty() {
            assert!(
                !checks.iter().any(|(state, _)| state == "Ready"),
                "holdfast's check was Ready while the held execution's pod remained in the worker: {checks:?}"
            );
            pending_on_old |= checks.iter().any(|(state, message)| {
                state == "Pending" && message.contains("pods of the previous execution")
            });
        }
        let new: Vec<Pod> = listed
            .iter()
            .filter(|p| p.metadata.uid.as_ref().is_some_and(|u| !old.contains(u)))
            .filter(|p| is_running(p))
            .cloned()
            .collect();
        if old_left.is_empty() && !new.is_empty() {
            break new;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    assert!(
        pending_on_old,
        "holdfast's check seen Pending on the previous execution's pods while they remained"
    );
    // The kubelet's records (whole seconds): each new container started no earlier than
    // the old one finished.
    tokio::time::sleep(Duration::from_secs(1)).await;
    finish_recorder.abort();
    let finished = finished.lock().expect("finished").clone();
    let last_finished = old
        .iter()
        .map(|uid| {
            *finished
                .get(uid)
                .unwrap_or_else(|| panic!("the kubelet's finishedAt of old pod {uid} seen"))
        })
        .max()
        .expect("an old pod");
    for p in &second {
        let started = p
            .status
            .as_ref()
            .and_then(|s| s.container_statuses.as_ref())
            .into_iter()
            .flatten()
            .filter_map(|c| c.state.as_ref()?.running.as_ref()?.started_at.as_ref())
            .map(|t| t.0)
            .min()
            .expect("the new container's startedAt");
        assert!(
            started >= last_finished,
            "pod {:?} started {started}, before the held execution's last container finished ({last_finished})",
            p.metadata.name
        );
    }

    // The real Trainer in the worker ran it from holdfast's copy of the manager's snapshot,
    // handed to the copy of the TrainJob.
    let snapshot =
        Api::<k8s_openapi::api::core::v1::ConfigMap>::namespaced(worker_admin.clone(), ns)
            .get(&holdfast_core::names::snapshot_name("tj"))
            .await
            .expect("the worker's snapshot");
    assert!(
        snapshot
            .metadata
            .annotations
            .as_ref()
            .is_some_and(|a| a.contains_key(holdfast_core::names::ANN_ORIGIN_TRAINJOB_UID)),
        "{snapshot:?}"
    );

    on_manager.finish("a_release_through_the_manager", t0).await;
}

/// The runtime's pod template, as a JSON pointer.
const POD_TEMPLATE: &str = "/spec/template/spec/replicatedJobs/0/template/spec/template";
/// The pod template's annotation the workload's `WORKLOAD_MARK` is read from.
const MARK: &str = "test.holdfast.dev/mark";

/// The pods of `job`'s execution after `old` run the configuration `mark` of runtime
/// `workload` (the KEP runtime's image and command): by the JobSet's template, the pods' spec
/// and annotation, and what each container printed of its argv and env (the kubelet's logs).
async fn runs_mark(jobs: &Jobs, worker: &NodeCluster, old: &[String], mark: &str) -> Vec<String> {
    let original = kep_runtime(worker, "workload");
    let container = original
        .pointer(&format!("{POD_TEMPLATE}/spec/containers/0"))
        .expect("the container");
    let pods = jobs.execution("tj", old).await;
    let js = jobs.jobsets.get("tj").await.expect("the JobSet");
    let template = &js.data["spec"]["replicatedJobs"][0]["template"]["spec"]["template"];
    assert_eq!(
        (
            &template["metadata"]["annotations"][MARK],
            &template["spec"]["containers"][0]["image"],
            &template["spec"]["containers"][0]["command"]
        ),
        (&json!(mark), &container["image"], &container["command"]),
        "the JobSet's pod template"
    );
    for p in &pods {
        let name = p.metadata.name.as_deref().expect("name");
        let spec = &p.spec.as_ref().expect("spec").containers[0];
        assert_eq!(
            (
                p.metadata.annotations.as_ref().and_then(|a| a.get(MARK)),
                json!(spec.image),
                json!(spec.command)
            ),
            (
                Some(&mark.to_owned()),
                container["image"].clone(),
                container["command"].clone()
            ),
            "{name}'s annotation, image and command"
        );
        let config = config_of(&jobs.pods, name, "node").await;
        assert_eq!(
            (&config["argv"], &config["env"]["WORKLOAD_MARK"]),
            (&container["command"], &json!(mark)),
            "{name} runs: {config}"
        );
    }
    pods.iter().filter_map(|p| p.metadata.uid.clone()).collect()
}

/// KEP-2599's e2e line across clusters ("updating TrainingRuntime does not affect a paused
/// TrainJob"): a TrainJob dispatched through the manager runs in the worker; it is held
/// through the manager (its pods gone, MultiKueue's copy deleted), and the runtime is updated
/// in both clusters the same way: the pod template's annotation, from which the container's
/// `WORKLOAD_MARK` is read (the Downward API), so Trainer would put the change into the pods
/// and the kubelet into the process. Released, the next copy (a new uid) owns the manager's
/// original snapshot, carried into the worker by holdfast, and its pods run the original
/// configuration, by the JobSet's template, the pods' spec and what the container printed.
/// The edit leaves the containers alone: Kueue compares a Workload's containers with the
/// live runtime's, and a held job's Workload keeps its quota in the manager (the book's
/// MultiKueue page, "A runtime edit while held"). (Before the carrying, the worker's Trainer
/// snapshotted the worker's runtime when each copy was created: the edited one.)
#[tokio::test]
#[ignore = "tier 3: run with --ignored (builds and starts a real node and a manager)"]
async fn a_held_job_resumes_in_the_worker_with_the_managers_snapshot_after_both_runtimes_are_edited()
 {
    let t0 = Instant::now();
    let worker = NodeCluster::shared();
    let on_manager = GateOnManager::start(worker, "mk-kep").await;
    let GateOnManager {
        clusters,
        ns,
        admin,
        worker_admin,
        exec,
        ..
    } = &on_manager;

    // The KEP's runtime, its mark read from the pod template's annotation, in both clusters.
    let runtimes = |c: &kube::Client| {
        Api::<DynamicObject>::namespaced_with(
            c.clone(),
            ns,
            &holdfast_cluster::resources::training_runtime(),
        )
    };
    let mut runtime = kep_runtime(worker, "workload");
    let template = runtime.pointer_mut(POD_TEMPLATE).expect("the pod template");
    template["metadata"] = json!({"annotations": {MARK: "original"}});
    template["spec"]["containers"][0]["env"][1] = json!({"name": "WORKLOAD_MARK",
        "valueFrom": {"fieldRef": {"fieldPath": format!("metadata.annotations['{MARK}']")}}});
    let runtime: DynamicObject = serde_json::from_value(runtime).expect("runtime");
    for c in [admin, worker_admin] {
        runtimes(c)
            .create(&PostParams::default(), &runtime)
            .await
            .expect("the runtime");
    }
    clusters
        .create_trainjob(ns, "tj")
        .await
        .expect("the TrainJob on the manager");
    let jobs = Jobs::of(worker, ns.clone()).await;
    let first = runs_mark(&jobs, worker, &[], "original").await;
    let first_copy = jobs
        .trainjobs
        .get("tj")
        .await
        .expect("the copy")
        .metadata
        .uid;

    // Held through the manager; the runtime updated in both clusters meanwhile.
    assert_eq!(
        exec.hold(ns, "tj", meta(Some(1), Duration::from_secs(60)))
            .await,
        Ok(holdfast_core::hold::Outcome::Held)
    );
    jobs.pods_gone(worker, "tj").await;
    let edit: json_patch::Patch = serde_json::from_value(json!([{"op": "replace",
        "path": format!("{POD_TEMPLATE}/metadata/annotations/{}", MARK.replace('/', "~1")),
        "value": "edited"}]))
    .expect("patch");
    for c in [admin, worker_admin] {
        runtimes(c)
            .patch(
                "workload",
                &PatchParams::default(),
                &Patch::<()>::Json(edit.clone()),
            )
            .await
            .expect("update the runtime");
    }

    // Released: a new copy, running the original configuration from the manager's snapshot.
    let release = exec
        .release(ns, "tj", meta(Some(1), Duration::from_secs(60)))
        .await;
    assert!(
        matches!(release, Ok(holdfast_core::hold::Outcome::Released { .. })),
        "{release:?}"
    );
    runs_mark(&jobs, worker, &first, "original").await;
    let copy = jobs.trainjobs.get("tj").await.expect("the new copy");
    assert_ne!(copy.metadata.uid, first_copy, "a new copy of the TrainJob");
    let snapshot = jobs.snapshot("tj").await;
    let owners: Vec<_> = snapshot
        .metadata
        .owner_references
        .iter()
        .flatten()
        .map(|o| (o.uid.clone(), o.controller))
        .collect();
    assert_eq!(
        owners,
        vec![(copy.metadata.uid.clone().expect("uid"), Some(true))],
        "the new copy owns the worker's snapshot"
    );
    let stored = runtime_yaml(&snapshot);
    assert!(
        stored.contains("original") && !stored.contains("edited"),
        "the original runtime: {stored}"
    );
    let live = runtimes(worker_admin)
        .get("workload")
        .await
        .expect("the worker's runtime");
    assert_eq!(
        live.data
            .pointer(&format!("{POD_TEMPLATE}/metadata/annotations"))
            .map(|a| &a[MARK]),
        Some(&json!("edited")),
        "the worker's live runtime is the edited one"
    );
    on_manager
        .finish(
            "a_held_job_resumes_in_the_worker_with_the_managers_snapshot",
            t0,
        )
        .await;
}
