//! Two clusters under MultiKueue (tier 3): a **manager** that queues TrainJobs and a
//! **worker** that runs them on a real node.
//!
//! - The manager is a loopback control plane of its own ([`ControlPlane::start`]: the
//!   Trainer, JobSet and Kueue CRDs) with the real Kueue started as the tier-2 tests start it
//!   ([`ControlPlane::start_kueue`]). Kueue v0.19 runs MultiKueue's controllers by default
//!   (feature gate `MultiKueue`, beta and on since 0.9) and dispatches TrainJobs through them
//!   because `trainer.kubeflow.org/trainjob` is among its `integrations.frameworks`; its
//!   namespace is the default, [`KUEUE_NAMESPACE`]. No Trainer or JobSet controller runs
//!   there: Kueue reads the runtime itself to size the Workload, and the manager's TrainJob is
//!   MultiKueue's (`spec.managedBy`), so nothing there makes pods.
//! - The worker is tier 3's node cluster ([`NodeCluster`]) with its own Kueue, Trainer and
//!   JobSet. Its apiserver runs inside the node's network namespace and is forwarded to the
//!   same port on the host's loopback, which is where the manager's Kueue (a host process)
//!   reaches it; its serving certificate names `127.0.0.1`.
//! - [`connect`] gives the manager's Kueue a credential for the worker: a
//!   ServiceAccount in the worker bound to [`worker_rules`], a TokenRequest token of it, and a
//!   kubeconfig with the worker's CA and that token **inline** (Kueue refuses kubeconfigs that
//!   name a CA file or a token file, use exec or auth-provider plugins, basic auth or skip TLS
//!   verification), in a Secret in the manager's Kueue namespace. Then one
//!   `MultiKueueCluster` ([`WORKER`]), a `MultiKueueConfig` ([`CONFIG`]) listing it, and the
//!   AdmissionCheck [`MULTIKUEUE_CHECK`] of controller `kueue.x-k8s.io/multikueue`.
//! - [`TwoClusters::namespace`] makes a namespace of the same name in both (MultiKueue creates
//!   the worker's copies in the manager's namespace), and [`TwoClusters::queues`] a
//!   ClusterQueue and LocalQueue in each: the manager's lists the checks it is given
//!   (MultiKueue's, and holdfast's readmission check when holdfast runs), the worker's none.

use crate::control_plane::ControlPlane;
use crate::identity::Identity;
use crate::kueue;
use crate::node::NodeCluster;
use anyhow::{Context, bail};
use holdfast_cluster::resources;
use holdfast_core::names::MULTIKUEUE_CONTROLLER;
use kube::api::{Api, DynamicObject, PostParams};
use serde_json::{Value, json};
use std::time::{Duration, Instant};

/// The manager's MultiKueue AdmissionCheck.
pub const MULTIKUEUE_CHECK: &str = "multikueue";
/// The MultiKueueCluster naming the worker (and the Secret holding its kubeconfig).
pub const WORKER: &str = "worker-1";
/// The MultiKueueConfig listing [`WORKER`].
pub const CONFIG: &str = "workers";
/// Kueue's namespace in the manager (its configuration's default): the kubeconfig Secrets of
/// MultiKueueClusters are read from there.
pub const KUEUE_NAMESPACE: &str = "kueue-system";
/// The worker's namespace of the ServiceAccount the manager's Kueue acts as there.
pub const WORKER_ACCOUNT_NAMESPACE: &str = "holdfast-multikueue";
/// That ServiceAccount (and the name of its ClusterRole and binding).
pub const WORKER_ACCOUNT: &str = "multikueue-manager";
/// The LocalQueue of each test namespace, in both clusters.
pub const QUEUE: &str = "main";
/// How long the tokens of [`WORKER_ACCOUNT`] last.
const TOKEN_SECONDS: i64 = 48 * 3600;

/// What MultiKueue's manager does in a worker (Kueue v0.19.2, TrainJob only): creates,
/// watches and deletes the copies of Workloads and TrainJobs it dispatches, writes the
/// copies' status, and reads the worker's queues. Kueue's own end-to-end tests grant the
/// same rules per enabled framework.
pub fn worker_rules() -> Value {
    let all = json!([
        "create", "update", "patch", "delete", "get", "list", "watch"
    ]);
    json!([
        {"apiGroups": ["kueue.x-k8s.io"], "resources": ["workloads"], "verbs": all},
        {"apiGroups": ["kueue.x-k8s.io"], "resources": ["workloads/status"], "verbs": ["get", "patch", "update"]},
        {"apiGroups": ["kueue.x-k8s.io"], "resources": ["clusterqueues", "localqueues"], "verbs": ["get", "list", "watch"]},
        {"apiGroups": ["trainer.kubeflow.org"], "resources": ["trainjobs"], "verbs": all},
        {"apiGroups": ["trainer.kubeflow.org"], "resources": ["trainjobs/status"], "verbs": ["get"]},
    ])
}

/// The account holdfast's readmission gate in the manager reads the worker as.
pub const GATE_ACCOUNT: &str = "holdfast-gate";

/// What holdfast's readmission gate in the manager needs in a worker: to list the pods of a
/// TrainJob's executions, found by ownership (their Jobs and JobSets); to write the
/// manager's runtime snapshot there and hand it to MultiKueue's copy of the TrainJob
/// (ConfigMaps, and `get` on the copy); nothing else.
pub fn gate_rules() -> Value {
    json!([
        {"apiGroups": [""], "resources": ["pods"], "verbs": ["list"]},
        {"apiGroups": ["batch"], "resources": ["jobs"], "verbs": ["list"]},
        {"apiGroups": ["jobset.x-k8s.io"], "resources": ["jobsets"], "verbs": ["list"]},
        {"apiGroups": [""], "resources": ["configmaps"], "verbs": ["get", "create", "delete", "patch"]},
        {"apiGroups": ["trainer.kubeflow.org"], "resources": ["trainjobs"], "verbs": ["get"]},
    ])
}

/// A manager control plane connected to the tier-3 worker through MultiKueue. The manager
/// stops when this is dropped; the worker is shared and stays.
pub struct TwoClusters {
    pub manager: ControlPlane,
    /// The worker's control plane (tier 3's node cluster's).
    pub worker: &'static ControlPlane,
    /// The image the worker's runtime runs.
    workload_image: String,
    /// How long [`TwoClusters::start`] took: the manager up, both Kueues, connected.
    pub set_up: Duration,
}

impl TwoClusters {
    /// Starts the manager and both Kueues, connects them, and returns once MultiKueue's
    /// AdmissionCheck is Active (the worker reachable with the credential).
    pub async fn start(worker: &'static NodeCluster) -> anyhow::Result<TwoClusters> {
        TwoClusters::start_on(worker.control_plane(), worker.workload_image()).await
    }

    /// [`TwoClusters::start`] with `worker` as the worker, whose runtime runs
    /// `workload_image`.
    pub async fn start_on(
        worker: &'static ControlPlane,
        workload_image: &str,
    ) -> anyhow::Result<TwoClusters> {
        let t0 = Instant::now();
        // The control plane starts a runtime of its own: off this one's thread.
        let manager = std::thread::spawn(ControlPlane::start)
            .join()
            .map_err(|_| anyhow::anyhow!("the manager's control plane panicked while starting"))?
            .context("the manager's control plane")?;
        manager.start_kueue().await.context("the manager's Kueue")?;
        worker.start_kueue().await.context("the worker's Kueue")?;
        let clusters = TwoClusters {
            manager,
            worker,
            workload_image: workload_image.to_owned(),
            set_up: Duration::ZERO,
        };
        connect(&clusters.manager, clusters.worker).await?;
        Ok(TwoClusters {
            set_up: t0.elapsed(),
            ..clusters
        })
    }

    /// A namespace `{prefix}-{random}` in the manager (as [`ControlPlane::namespace`] makes
    /// them) and one of the same name in the worker.
    pub async fn namespace(&self, prefix: &str) -> anyhow::Result<String> {
        let ns = self.manager.namespace(prefix).await?;
        let admin = self.worker.client(Identity::Admin).await?;
        crate::rbac::apply(
            &admin,
            &json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}}),
            &ns,
            false,
        )
        .await?;
        Ok(ns)
    }

    /// A ClusterQueue and the LocalQueue [`QUEUE`] in `ns` of each cluster: the manager's
    /// requires `manager_checks`, the worker's nothing.
    pub async fn queues(&self, ns: &str, manager_checks: &[&str]) -> anyhow::Result<()> {
        let manager = self.manager.client(Identity::Admin).await?;
        kueue::create_queues(&manager, ns, QUEUE, manager_checks).await?;
        let worker = self.worker.client(Identity::Admin).await?;
        kueue::create_queues(&worker, ns, QUEUE, &[]).await
    }

    /// Creates, in `ns` of the manager, an unmanaged TrainJob `name` (no start gate) queued
    /// in [`QUEUE`], of the runtime `workload` ([`TwoClusters::runtime`]); returns it as
    /// created (Kueue's webhook hands it to MultiKueue).
    pub async fn create_trainjob(&self, ns: &str, name: &str) -> anyhow::Result<DynamicObject> {
        let admin = self.manager.client(Identity::Admin).await?;
        let tj: DynamicObject = serde_json::from_value(json!({
            "apiVersion": "trainer.kubeflow.org/v1alpha1", "kind": "TrainJob",
            "metadata": {"name": name, "labels": {"kueue.x-k8s.io/queue-name": QUEUE}},
            "spec": {"runtimeRef": {"name": "workload", "kind": "TrainingRuntime", "apiGroup": "trainer.kubeflow.org"}}
        }))?;
        Api::<DynamicObject>::namespaced_with(admin, ns, &resources::trainjob())
            .create(&PostParams::default(), &tj)
            .await
            .with_context(|| format!("create TrainJob {ns}/{name} on the manager"))
    }

    /// TrainingRuntime `name` in `ns` of both clusters: the worker's workload image, whose
    /// pods take `stop_secs` to stop after SIGTERM and request a little CPU and memory (Kueue
    /// applies a ClusterQueue's AdmissionChecks by the flavors a Workload is assigned, and a
    /// pod set requesting nothing is assigned none).
    pub async fn runtime(&self, ns: &str, name: &str, stop_secs: u32) -> anyhow::Result<()> {
        let mut runtime = crate::node_pods::training_runtime(name, &self.workload_image);
        let container = &mut runtime["spec"]["template"]["spec"]["replicatedJobs"][0]["template"]["spec"]
            ["template"]["spec"]["containers"][0];
        container["env"][0]["value"] = json!(stop_secs.to_string());
        container["resources"] = json!({"requests": {"cpu": "10m", "memory": "16Mi"}});
        let runtime: DynamicObject = serde_json::from_value(runtime)?;
        for cp in [&self.manager, self.worker] {
            let admin = cp.client(Identity::Admin).await?;
            Api::<DynamicObject>::namespaced_with(admin, ns, &resources::training_runtime())
                .create(&PostParams::default(), &runtime)
                .await
                .with_context(|| format!("TrainingRuntime {ns}/{name}"))?;
        }
        Ok(())
    }
}

/// The worker's credential in the manager, MultiKueue's objects, and their wait to be
/// Active.
pub async fn connect(manager: &ControlPlane, worker: &ControlPlane) -> anyhow::Result<()> {
    let kubeconfig = worker_kubeconfig(worker, WORKER_ACCOUNT, worker_rules()).await?;
    let admin = manager.client(Identity::Admin).await?;
    let apply = |doc: Value| {
        let admin = admin.clone();
        async move { crate::rbac::apply(&admin, &doc, KUEUE_NAMESPACE, false).await }
    };
    apply(json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": KUEUE_NAMESPACE}}))
        .await?;
    apply(json!({"apiVersion": "v1", "kind": "Secret",
        "metadata": {"name": WORKER, "namespace": KUEUE_NAMESPACE},
        "stringData": {"kubeconfig": kubeconfig}}))
    .await?;
    apply(
        json!({"apiVersion": kueue::KUEUE_API_VERSION, "kind": "MultiKueueCluster",
        "metadata": {"name": WORKER},
        "spec": {"clusterSource": {"kubeConfig": {"locationType": "Secret", "location": WORKER}}}}),
    )
    .await?;
    apply(
        json!({"apiVersion": kueue::KUEUE_API_VERSION, "kind": "MultiKueueConfig",
        "metadata": {"name": CONFIG}, "spec": {"clusters": [WORKER]}}),
    )
    .await?;
    apply(json!({"apiVersion": kueue::KUEUE_API_VERSION, "kind": "AdmissionCheck",
        "metadata": {"name": MULTIKUEUE_CHECK},
        "spec": {"controllerName": MULTIKUEUE_CONTROLLER,
            "parameters": {"apiGroup": "kueue.x-k8s.io", "kind": "MultiKueueConfig", "name": CONFIG}}}))
    .await?;
    let clusters = Api::<DynamicObject>::all_with(
        admin.clone(),
        &resources::kueue("MultiKueueCluster", "multikueueclusters"),
    );
    let checks = Api::<DynamicObject>::all_with(admin.clone(), &resources::admission_check());
    let start = Instant::now();
    loop {
        let cluster = clusters.get(WORKER).await?;
        let check = checks.get(MULTIKUEUE_CHECK).await?;
        if active(&cluster.data) && active(&check.data) {
            return Ok(());
        }
        if start.elapsed() > Duration::from_secs(90) {
            bail!(
                "MultiKueue not Active after 90s: cluster {}, check {}\nmanager's kueue:\n{}",
                cluster.data["status"],
                check.data["status"],
                manager.log_tail("kueue", 30)
            );
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
}

/// In the worker: ServiceAccount `account`, a ClusterRole of `rules` and its binding;
/// returns a kubeconfig for the worker, as that account, with the CA and a token inline.
pub async fn worker_kubeconfig(
    worker: &ControlPlane,
    account: &str,
    rules: Value,
) -> anyhow::Result<String> {
    let admin = worker.client(Identity::Admin).await?;
    let docs = [
        json!({"apiVersion": "v1", "kind": "Namespace",
            "metadata": {"name": WORKER_ACCOUNT_NAMESPACE}}),
        json!({"apiVersion": "v1", "kind": "ServiceAccount",
            "metadata": {"name": account, "namespace": WORKER_ACCOUNT_NAMESPACE}}),
        json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole",
            "metadata": {"name": account}, "rules": rules}),
        json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding",
            "metadata": {"name": account},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": account},
            "subjects": [{"kind": "ServiceAccount", "name": account, "namespace": WORKER_ACCOUNT_NAMESPACE}]}),
    ];
    for doc in &docs {
        crate::rbac::apply(&admin, doc, WORKER_ACCOUNT_NAMESPACE, false).await?;
    }
    let token =
        crate::rbac::mint_token(&admin, WORKER_ACCOUNT_NAMESPACE, account, TOKEN_SECONDS).await?;
    let ca = base64::Engine::encode(
        &base64::engine::general_purpose::STANDARD,
        worker.ca_pem().as_bytes(),
    );
    Ok(format!(
        "apiVersion: v1\nkind: Config\nclusters:\n- name: {WORKER}\n  cluster:\n    server: {server}\n    certificate-authority-data: {ca}\nusers:\n- name: {account}\n  user:\n    token: {token}\ncontexts:\n- name: {WORKER}\n  context:\n    cluster: {WORKER}\n    user: {account}\ncurrent-context: {WORKER}\n",
        server = worker.server,
    ))
}

/// [`WORKER`] as the chart configures holdfast for it: a kubeconfig file in `dir` for an
/// account of `worker` allowed [`gate_rules`] only (what the `kueue.multikueue.workers`
/// Secret holds); returns the `--multikueue-worker` argument, `NAME=PATH`.
pub async fn gate_worker(worker: &ControlPlane, dir: &std::path::Path) -> anyhow::Result<String> {
    let kubeconfig = worker_kubeconfig(worker, GATE_ACCOUNT, gate_rules()).await?;
    let path = dir.join(WORKER);
    std::fs::write(&path, kubeconfig).with_context(|| format!("writing {}", path.display()))?;
    Ok(format!("{WORKER}={}", path.display()))
}

/// Whether an object's condition `Active` is True.
fn active(object: &Value) -> bool {
    object
        .pointer("/status/conditions")
        .and_then(Value::as_array)
        .is_some_and(|cs| {
            cs.iter()
                .any(|c| c["type"] == "Active" && c["status"] == "True")
        })
}

/// holdfast's snapshot reconciler in the manager, in process as its controller, for `ns`
/// (the manager's Trainer leaves a job under MultiKueue alone: holdfast's snapshot is the
/// job's only one, and what its readmission gate carries into the workers); stops with
/// `stop`.
pub fn manager_snapshots(
    controller: &kube::Client,
    ns: &str,
    stop: &tokio_util::sync::CancellationToken,
) -> tokio::task::JoinHandle<Result<(), holdfast_controller::snapshot::Error>> {
    use holdfast_controller::snapshot::{Config, SnapshotMetrics, Snapshotter};
    let snapshotter = Snapshotter::new(
        controller.clone(),
        Config {
            namespace: Some(ns.to_owned()),
            ..Config::default()
        },
        SnapshotMetrics::default(),
        holdfast_serve::Readiness::default(),
        crate::leader_parts::publisher(controller, None),
    );
    let feed = crate::leader_parts::trainjob_feed(controller, Some(ns), stop);
    tokio::spawn({
        let stop = stop.clone();
        async move { snapshotter.run_on(feed, stop).await }
    })
}
