//! What every sequence runs against, started once per test binary on a runtime of its own
//! (so it outlives each test's runtime): the shared local control plane with the real Kueue,
//! holdfast's webhook in both modes — registered as the chart registers it, for the
//! namespaces labelled with that mode — the readmission gate and the snapshot reconciler
//! (acting as holdfast's controller, for every namespace), the readmission AdmissionCheck
//! and two ClusterQueues (one requiring the check, one not).
//!
//! And, per sequence, a fresh namespace: its LocalQueues, two runtimes, the editor's role
//! binding, a ServiceAccount with a Role typical for workloads, a ConfigMap of the editor's.

use super::ops::{QUEUE_MAIN, QUEUE_OTHER, USER_CONFIGMAP};
use crate::registration::{Engine, Namespaces, Registration, Target};
use crate::{ControlPlane, Identity, kueue};
use anyhow::{Context, bail};
use holdfast_controller::readmission::{self, ReadmissionGate, ReadmissionMetrics};
use holdfast_controller::snapshot::{self, SnapshotMetrics, Snapshotter};
use holdfast_core::execution::finalizer::EXECUTION_FINALIZER;
use holdfast_core::mode::Mode;
use holdfast_core::names::{ANN_HOLD_INSTANCE, READMISSION_CONTROLLER};
use k8s_openapi::api::core::v1::{ConfigMap, Namespace, Node, Pod, ServiceAccount};
use k8s_openapi::api::rbac::v1::{PolicyRule, Role, RoleBinding, RoleRef, Subject};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;
use kube::api::{Api, DeleteParams, DynamicObject, ObjectMeta, Patch, PatchParams, PostParams};
use serde_json::json;
use std::collections::BTreeMap;
use std::sync::OnceLock;
use std::time::Duration;
use tokio_util::sync::CancellationToken;

/// The namespace label that selects which mode's webhook judges a namespace.
pub const MODE_LABEL: &str = "adversary.holdfast.test/mode";
/// The readmission AdmissionCheck.
pub const CHECK: &str = "holdfast-readmission";
/// The ClusterQueue requiring [`CHECK`] (LocalQueue `main` of every Kueue-mode namespace).
pub const CQ_GATED: &str = "adversary-gated";
/// A ClusterQueue requiring no AdmissionCheck (LocalQueue `other`).
pub const CQ_UNGATED: &str = "adversary-ungated";
const FLAVOR: &str = "adversary-flavor";
/// The ServiceAccount the pod-identity actor acts as.
pub const SERVICE_ACCOUNT: &str = "workload";

/// The shared services; see the module docs.
pub struct World {
    pub cp: &'static ControlPlane,
}

static WORLD: OnceLock<World> = OnceLock::new();

/// The shared services, started on first use (blocking: call it before the test's work).
pub fn world() -> &'static World {
    WORLD.get_or_init(|| {
        let cp = ControlPlane::shared();
        let (tx, rx) = std::sync::mpsc::channel();
        let spawned = std::thread::Builder::new()
            .name("adversary-services".into())
            .spawn(move || {
                let rt = match tokio::runtime::Builder::new_multi_thread()
                    .worker_threads(2)
                    .enable_all()
                    .build()
                {
                    Ok(rt) => rt,
                    Err(e) => {
                        let _ = tx.send(Err(format!("services runtime: {e}")));
                        return;
                    }
                };
                rt.block_on(async move {
                    match start_services(cp).await {
                        Ok(services) => {
                            let _ = tx.send(Ok(()));
                            // Serve for the rest of the process.
                            let _keep = services;
                            std::future::pending::<()>().await;
                        }
                        Err(e) => {
                            let _ = tx.send(Err(format!("{e:#}")));
                        }
                    }
                });
            });
        if let Err(e) = spawned {
            panic!("the adversary's services thread did not start: {e}");
        }
        match rx.recv() {
            Ok(Ok(())) => World { cp },
            Ok(Err(e)) => panic!("the adversary's services did not start: {e}"),
            Err(_) => panic!("the adversary's services thread ended while starting"),
        }
    })
}

/// Kept alive for the life of the process.
struct Services {
    _webhooks: Vec<crate::in_process_webhook::InProcessWebhook>,
    _stop: CancellationToken,
}

async fn start_services(cp: &'static ControlPlane) -> anyhow::Result<Services> {
    cp.start_kueue().await.context("start Kueue")?;
    let admin = cp.client(Identity::Admin).await?;
    let pp = PatchParams::apply("holdfast-tests").force();
    let apply = |ar: kube::core::ApiResource, obj: serde_json::Value| {
        let admin = admin.clone();
        let pp = pp.clone();
        async move {
            let obj: DynamicObject = serde_json::from_value(obj)?;
            let name = obj.metadata.name.clone().unwrap_or_default();
            Api::<DynamicObject>::all_with(admin, &ar)
                .patch(&name, &pp, &Patch::Apply(&obj))
                .await
                .with_context(|| format!("apply {name}"))?;
            anyhow::Ok(())
        }
    };
    apply(
        holdfast_cluster::resources::admission_check(),
        json!({"apiVersion": kueue::KUEUE_API_VERSION, "kind": "AdmissionCheck",
            "metadata": {"name": CHECK}, "spec": {"controllerName": READMISSION_CONTROLLER}}),
    )
    .await?;
    apply(
        holdfast_cluster::resources::kueue("ResourceFlavor", "resourceflavors"),
        json!({"apiVersion": kueue::KUEUE_API_VERSION, "kind": "ResourceFlavor", "metadata": {"name": FLAVOR}}),
    )
    .await?;
    for (cq, checks) in [(CQ_GATED, vec![CHECK]), (CQ_UNGATED, vec![])] {
        let mut spec = json!({
            "namespaceSelector": {},
            "resourceGroups": [{"coveredResources": ["cpu", "memory"],
                "flavors": [{"name": FLAVOR, "resources": [
                    {"name": "cpu", "nominalQuota": "100000"},
                    {"name": "memory", "nominalQuota": "100000Gi"}]}]}]
        });
        if !checks.is_empty() {
            spec["admissionChecksStrategy"] = json!({"admissionChecks":
                checks.iter().map(|c| json!({"name": c})).collect::<Vec<_>>()});
        }
        apply(
            holdfast_cluster::resources::cluster_queue(),
            json!({"apiVersion": kueue::KUEUE_API_VERSION, "kind": "ClusterQueue",
                "metadata": {"name": cq}, "spec": spec}),
        )
        .await?;
    }

    // holdfast's webhook, one per mode, each for the namespaces labelled with its mode.
    let mut webhooks = Vec::new();
    for mode in [Mode::Plain, Mode::Kueue] {
        let hook = crate::in_process_webhook::InProcessWebhook::start(cp, mode, true).await?;
        let selector = LabelSelector {
            match_labels: Some(BTreeMap::from([(MODE_LABEL.to_owned(), mode.to_string())])),
            match_expressions: None,
        };
        // HOLDFAST_TEST_VALIDATION_ENGINE picks the engine the sequences run against.
        Registration::new(
            format!("holdfast-adversary-{mode}"),
            Target::Url(hook.url()),
            cp.ca_pem().as_bytes().to_vec(),
        )
        .with_mode(mode)
        .with_engine(Engine::from_env())
        .with_namespaces(Namespaces::Selected(selector))
        .install(&admin)
        .await
        .context("register the webhooks and policies")?;
        webhooks.push(hook);
    }

    // The readmission gate and the snapshot reconciler, as holdfast's controller's leader
    // runs them: fed by one TrainJob watch.
    let stop = CancellationToken::new();
    let mut trainjobs =
        holdfast_controller::trainjob::Watch::new(cp.client(Identity::Controller).await?, None);
    let gate_feed = trainjobs.subscribe();
    let snapshot_feed = trainjobs.subscribe();
    tokio::spawn(trainjobs.run(stop.clone()));
    let gate = ReadmissionGate::new(
        cp.client(Identity::Controller).await?,
        readmission::Config {
            namespace: None,
            concurrency: 16,
            retry_min: Duration::from_millis(100),
            retry_max: Duration::from_secs(2),
            resync: Duration::from_secs(5),
            sweep_interval: Duration::from_secs(2),
            ..readmission::Config::default()
        },
        ReadmissionMetrics::default(),
        crate::leader_parts::publisher(&cp.client(Identity::Controller).await?, None),
    );
    let s = stop.clone();
    tokio::spawn(async move {
        if let Err(e) = gate.run_on(gate_feed, s).await {
            eprintln!("adversary: the readmission gate stopped: {e:#}");
        }
    });
    let readiness = holdfast_serve::Readiness::default();
    let snapshotter = Snapshotter::new(
        cp.client(Identity::Controller).await?,
        snapshot::Config {
            namespace: None,
            concurrency: 16,
            retry_min: Duration::from_millis(200),
            retry_max: Duration::from_secs(5),
            drift_interval: Duration::from_secs(10),
            ..snapshot::Config::default()
        },
        SnapshotMetrics::default(),
        readiness.clone(),
        crate::leader_parts::publisher(&cp.client(Identity::Controller).await?, None),
    );
    let s = stop.clone();
    tokio::spawn(async move {
        if let Err(e) = snapshotter.run_on(snapshot_feed, s).await {
            eprintln!("adversary: the snapshot reconciler stopped: {e:?}");
        }
    });
    for _ in 0..300 {
        if readiness.get() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    if !readiness.get() {
        bail!("the snapshot reconciler was not ready within 30 s");
    }

    // The registrations take effect asynchronously: wait until each mode's webhook judges.
    let alice = cp.client(Identity::User).await?;
    for mode in [Mode::Plain, Mode::Kueue] {
        let ns = create_namespace(cp, &admin, mode, "adv-probe").await?;
        let tjs: Api<DynamicObject> =
            Api::namespaced_with(alice.clone(), &ns, &holdfast_cluster::resources::trainjob());
        let mut probe = crate::objects::trainjob("probe", "no-such-runtime");
        probe["metadata"]["annotations"] = json!({ANN_HOLD_INSTANCE: "1"});
        let probe: DynamicObject = serde_json::from_value(probe)?;
        let dry = PostParams {
            dry_run: true,
            ..Default::default()
        };
        let mut effective = false;
        for _ in 0..150 {
            if matches!(tjs.create(&dry, &probe).await,
                Err(kube::Error::Api(s)) if s.code == 403 && s.message.contains(ANN_HOLD_INSTANCE))
            {
                effective = true;
                break;
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
        let _ = Api::<Namespace>::all(admin.clone())
            .delete(&ns, &DeleteParams::default())
            .await;
        if !effective {
            bail!("holdfast's {mode}-mode webhook did not take effect within 30 s");
        }
    }
    // The chart's execution-finalizer policy (every namespace, under either engine), and the
    // node the execution actor binds its pods to and plays the kubelet of.
    let ns = create_namespace(cp, &admin, Mode::Plain, "adv-policy").await?;
    crate::lost_node::register_policy(cp, &ns).await;
    // And the readmission gate's policy (kueue mode's; judged in every namespace): Kueue
    // admits a TrainJob's Workload only with holdfast's check Ready on it.
    crate::readmission_policy::register(cp, &ns).await;
    let _ = Api::<Namespace>::all(admin.clone())
        .delete(&ns, &DeleteParams::default())
        .await;
    let node: Node = serde_json::from_value(json!({"metadata": {"name": super::actor::NODE}}))?;
    let nodes: Api<Node> = Api::all(admin.clone());
    match nodes.create(&PostParams::default(), &node).await {
        Ok(_) => {}
        Err(kube::Error::Api(e)) if e.code == 409 => {}
        Err(e) => return Err(e).context("the actor's node"),
    }
    nodes
        .patch_status(
            super::actor::NODE,
            &PatchParams::default(),
            &Patch::Merge(json!({"status": {"conditions": [{"type": "Ready", "status": "True",
                "reason": "KubeletReady", "message": "the adversary's execution actor plays its kubelet"}]}})),
        )
        .await
        .context("the actor's node's status")?;
    Ok(Services {
        _webhooks: webhooks,
        _stop: stop,
    })
}

/// A ClusterTrainingRuntime's spec: one node requesting `cpu`.
pub fn runtime_spec(cpu: &str) -> serde_json::Value {
    json!({"mlPolicy": {"numNodes": 1, "torch": {}},
        "template": {"spec": {"replicatedJobs": [{"name": "node",
            "template": {"metadata": {"labels": {"trainer.kubeflow.org/trainjob-ancestor-step": "trainer"}},
            "spec": {"template": {"spec": {"containers": [{"name": "node", "image": "pytorch/pytorch:2.10.0",
                "resources": {"requests": {"cpu": cpu}}}]}}}}}]}}})
}

/// The runtimes of namespace `ns`: the main one and a second one.
pub fn runtime_names(ns: &str) -> (String, String) {
    (format!("rt-{ns}"), format!("rt2-{ns}"))
}

fn random_suffix() -> String {
    use rand::RngExt;
    let mut rng = rand::rng();
    (0..8)
        .map(|_| char::from(b"abcdefghijklmnopqrstuvwxyz0123456789"[rng.random_range(0..36)]))
        .collect()
}

fn rule(groups: &[&str], resources: &[&str], verbs: &[&str]) -> PolicyRule {
    PolicyRule {
        api_groups: Some(groups.iter().map(|s| s.to_string()).collect()),
        resources: Some(resources.iter().map(|s| s.to_string()).collect()),
        verbs: verbs.iter().map(|s| s.to_string()).collect(),
        ..Default::default()
    }
}

/// A fresh namespace for one sequence in `mode` (labelled, so that mode's webhook judges
/// it): the editor's role binding, the workload ServiceAccount and its Role, the editor's
/// ConfigMap, the runtimes, and in Kueue mode the LocalQueues `main` (ClusterQueue with the
/// readmission check) and `other` (without).
pub async fn create_namespace(
    cp: &ControlPlane,
    admin: &kube::Client,
    mode: Mode,
    prefix: &str,
) -> anyhow::Result<String> {
    let ns = format!("{prefix}-{mode}-{}", random_suffix());
    Api::<Namespace>::all(admin.clone())
        .create(
            &PostParams::default(),
            &Namespace {
                metadata: ObjectMeta {
                    name: Some(ns.clone()),
                    labels: Some(BTreeMap::from([(MODE_LABEL.to_owned(), mode.to_string())])),
                    ..Default::default()
                },
                ..Default::default()
            },
        )
        .await
        .with_context(|| format!("create namespace {ns}"))?;
    let bind = |name: &str, kind: &str, role: &str, subject: Subject| RoleBinding {
        metadata: ObjectMeta {
            name: Some(name.to_owned()),
            namespace: Some(ns.clone()),
            ..Default::default()
        },
        role_ref: RoleRef {
            api_group: Some("rbac.authorization.k8s.io".into()),
            kind: kind.into(),
            name: role.into(),
        },
        subjects: Some(vec![subject]),
    };
    let rbs = Api::<RoleBinding>::namespaced(admin.clone(), &ns);
    rbs.create(
        &PostParams::default(),
        &bind(
            "test-user",
            "ClusterRole",
            crate::control_plane::TEST_USER_ROLE,
            Subject {
                kind: "User".into(),
                name: Identity::User.username().into(),
                api_group: Some("rbac.authorization.k8s.io".into()),
                ..Default::default()
            },
        ),
    )
    .await?;
    // A pod's ServiceAccount, with what a training workload typically gets.
    Api::<ServiceAccount>::namespaced(admin.clone(), &ns)
        .create(
            &PostParams::default(),
            &ServiceAccount {
                metadata: ObjectMeta {
                    name: Some(SERVICE_ACCOUNT.into()),
                    ..Default::default()
                },
                ..Default::default()
            },
        )
        .await?;
    let all = [
        "get",
        "list",
        "watch",
        "create",
        "update",
        "patch",
        "delete",
        "deletecollection",
    ];
    Api::<Role>::namespaced(admin.clone(), &ns)
        .create(
            &PostParams::default(),
            &Role {
                metadata: ObjectMeta {
                    name: Some(SERVICE_ACCOUNT.into()),
                    ..Default::default()
                },
                rules: Some(vec![
                    rule(&["trainer.kubeflow.org"], &["trainjobs"], &all),
                    rule(&[""], &["configmaps", "pods"], &all),
                    rule(
                        &["kueue.x-k8s.io"],
                        &["workloads"],
                        &["get", "list", "watch"],
                    ),
                ]),
            },
        )
        .await?;
    rbs.create(
        &PostParams::default(),
        &bind(
            SERVICE_ACCOUNT,
            "Role",
            SERVICE_ACCOUNT,
            Subject {
                kind: "ServiceAccount".into(),
                name: SERVICE_ACCOUNT.into(),
                namespace: Some(ns.clone()),
                ..Default::default()
            },
        ),
    )
    .await?;
    let (rt, rt2) = runtime_names(&ns);
    let ctrs = Api::<DynamicObject>::all_with(
        admin.clone(),
        &holdfast_cluster::resources::cluster_training_runtime(),
    );
    for (name, cpu) in [(&rt, "1"), (&rt2, "2")] {
        let obj: DynamicObject = serde_json::from_value(json!({
            "apiVersion": "trainer.kubeflow.org/v1alpha1", "kind": "ClusterTrainingRuntime",
            "metadata": {"name": name, "labels": {"trainer.kubeflow.org/framework": "torch"}},
            "spec": runtime_spec(cpu),
        }))?;
        ctrs.create(&PostParams::default(), &obj).await?;
    }
    if mode == Mode::Kueue {
        let lqs = Api::<DynamicObject>::namespaced_with(
            admin.clone(),
            &ns,
            &holdfast_cluster::resources::local_queue(),
        );
        for (lq, cq) in [(QUEUE_MAIN, CQ_GATED), (QUEUE_OTHER, CQ_UNGATED)] {
            let obj: DynamicObject = serde_json::from_value(json!({
                "apiVersion": kueue::KUEUE_API_VERSION, "kind": "LocalQueue",
                "metadata": {"name": lq, "namespace": ns}, "spec": {"clusterQueue": cq}
            }))?;
            // Under heavy load the create can land and its answer be lost, and the request be
            // sent again (seen once in the long run, whose part then stopped on AlreadyExists):
            // the queue already there is ours if it names the same ClusterQueue.
            match lqs.create(&PostParams::default(), &obj).await {
                Ok(_) => {}
                Err(kube::Error::Api(e)) if e.code == 409 => {
                    let there = lqs.get(lq).await?;
                    anyhow::ensure!(
                        there.data["spec"]["clusterQueue"] == cq,
                        "LocalQueue {lq} in {ns} already exists on another ClusterQueue: {:?}",
                        there.data["spec"]
                    );
                }
                Err(e) => return Err(e.into()),
            }
        }
    }
    let alice = cp.client(Identity::User).await?;
    let note = ConfigMap {
        metadata: ObjectMeta {
            name: Some(USER_CONFIGMAP.into()),
            ..Default::default()
        },
        data: Some(BTreeMap::from([("note".to_owned(), "mine".to_owned())])),
        ..Default::default()
    };
    // The apiserver's RBAC authorizer reads role bindings from a cache: under load, the
    // binding made above can take a moment to take effect (seen as a 403 here, once in
    // 2,000 sequences at 16 at once).
    let configmaps = Api::<ConfigMap>::namespaced(alice, &ns);
    let mut tries = 0;
    loop {
        match configmaps.create(&PostParams::default(), &note).await {
            Ok(_) => break,
            Err(kube::Error::Api(e)) if e.code == 403 && tries < 100 => {
                tries += 1;
                tokio::time::sleep(std::time::Duration::from_millis(100)).await;
            }
            Err(e) => return Err(e.into()),
        }
    }
    // Pods need the namespace's default ServiceAccount (made by its controller).
    let sas = Api::<ServiceAccount>::namespaced(admin.clone(), &ns);
    for _ in 0..100 {
        if sas.get_opt("default").await?.is_some() {
            return Ok(ns);
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    bail!("namespace {ns} got no default ServiceAccount within 10 s")
}

/// Removes what a sequence left: its pods (the execution finalizer taken off by holdfast's
/// controller, as only it may, and each deleted for good: no kubelet is left to end them),
/// finalizers of ours and of the editor's (holdfast's own are the gate's to remove), the
/// runtimes, the namespace. Bounded; errors are ignored.
pub async fn delete_namespace(admin: &kube::Client, controller: &kube::Client, ns: &str) {
    let pods = Api::<Pod>::namespaced(admin.clone(), ns);
    if let Ok(list) = pods.list(&Default::default()).await {
        let as_controller = Api::<Pod>::namespaced(controller.clone(), ns);
        let force = DeleteParams {
            grace_period_seconds: Some(0),
            ..Default::default()
        };
        for p in list.items {
            let name = p.metadata.name.clone().unwrap_or_default();
            if p.metadata
                .finalizers
                .as_ref()
                .is_some_and(|f| f.iter().any(|f| f == EXECUTION_FINALIZER))
            {
                let _ = as_controller
                    .patch(
                        &name,
                        &PatchParams::default(),
                        &Patch::Merge(json!({"metadata": {"finalizers": null}})),
                    )
                    .await;
            }
            let _ = pods.delete(&name, &force).await;
        }
    }
    let (rt, rt2) = runtime_names(ns);
    let ctrs = Api::<DynamicObject>::all_with(
        admin.clone(),
        &holdfast_cluster::resources::cluster_training_runtime(),
    );
    for name in [rt, rt2] {
        let _ = ctrs.delete(&name, &DeleteParams::default()).await;
    }
    let _ = Api::<Namespace>::all(admin.clone())
        .delete(ns, &DeleteParams::default())
        .await;
    for kind in super::history::Kind::ALL {
        let api: Api<DynamicObject> = Api::namespaced_with(admin.clone(), ns, &kind.resource());
        let Ok(list) = api.list(&Default::default()).await else {
            continue;
        };
        for o in list.items {
            let Some(fins) = o.metadata.finalizers.clone() else {
                continue;
            };
            let keep: Vec<String> = fins
                .iter()
                .filter(|f| f.starts_with("holdfast.dev/") || f.starts_with("kueue.x-k8s.io/"))
                .cloned()
                .collect();
            if keep.len() != fins.len() {
                let name = o.metadata.name.clone().unwrap_or_default();
                let _ = api
                    .patch(
                        &name,
                        &PatchParams::default(),
                        &Patch::Merge(json!({"metadata": {"finalizers": keep, "resourceVersion": o.metadata.resource_version}})),
                    )
                    .await;
            }
        }
    }
}
