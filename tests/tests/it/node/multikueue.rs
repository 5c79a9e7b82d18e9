//! MultiKueue across two clusters: a manager on a loopback control plane dispatches a
//! TrainJob to the tier-3 node cluster as its worker ([`TwoClusters`]), where the job's pods
//! really run, and holdfast on the manager still refuses to hold it.
//!
//! ```sh
//! flock /tmp/holdfast-node.lock cargo test -p holdfast-tests --test it -- --ignored \
//!     node::multikueue:: --test-threads 1 --nocapture
//! ```

use super::*;
use holdfast_controller::hold::HoldExecutor;
use holdfast_controller::readmission::{self, ReadmissionGate, ReadmissionMetrics};
use holdfast_core::hold::HoldError;
use holdfast_core::mode::Mode;
use holdfast_core::names::{MULTIKUEUE_CONTROLLER, MULTIKUEUE_ORIGIN_LABEL};
use holdfast_tests::hold_support::{client_without_retries, config, meta};
use holdfast_tests::kueue_support::{CHECK, ensure_admission_check};
use holdfast_tests::multikueue_clusters::{MULTIKUEUE_CHECK, QUEUE, TwoClusters, WORKER};
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
    let gate = ReadmissionGate::new(
        controller.clone(),
        readmission::Config {
            namespace: Some(ns.clone()),
            retry_min: Duration::from_millis(100),
            retry_max: Duration::from_secs(2),
            resync: Duration::from_secs(3),
            sweep_interval: Duration::from_secs(2),
            ..readmission::Config::default()
        },
        ReadmissionMetrics::default(),
        holdfast_tests::leader_parts::publisher(&controller, None),
    );
    let stop = CancellationToken::new();
    let feed = holdfast_tests::leader_parts::trainjob_feed(&controller, Some(&ns), &stop);
    let gate_task = tokio::spawn({
        let stop = stop.clone();
        async move { gate.run_on(feed, stop).await }
    });
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
    let trainjobs: Api<DynamicObject> =
        Api::namespaced_with(admin.clone(), &ns, &holdfast_cluster::resources::trainjob());
    let tj: DynamicObject = serde_json::from_value(json!({
        "apiVersion": "trainer.kubeflow.org/v1alpha1", "kind": "TrainJob",
        "metadata": {"name": "tj", "labels": {"kueue.x-k8s.io/queue-name": QUEUE}},
        "spec": {"runtimeRef": {"name": "workload", "kind": "TrainingRuntime", "apiGroup": "trainer.kubeflow.org"}}
    }))
    .expect("trainjob");
    let created = trainjobs
        .create(&PostParams::default(), &tj)
        .await
        .expect("create the TrainJob on the manager");
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
        remote.data["spec"]
            .get("managedBy")
            .is_none_or(Value::is_null),
        "the worker's Trainer runs the copy"
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
        "its spec.managedBy is kueue.x-k8s.io/multikueue",
        "cannot see the worker's pods",
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
