//! Running one sequence in a fresh namespace: the watches first, then the execution actor,
//! then each op in turn — with the invariants checked over the complete history after every
//! step — then a settling time, the final check over the whole history, and clean-up.

use super::actor::ExecutionActor;
use super::actor::NODE;
use super::check::{
    self, Answer, CallKind, CallRecord, Check, LABEL_JOBSET_NAME, LABEL_POD_EXECUTION,
    LABEL_POD_UID, SA_MANAGER, USER_MANAGER, Violation,
};
use super::history::History;
use super::ops::*;
use super::world::{
    self, CQ_GATED, CQ_UNGATED, SERVICE_ACCOUNT, World, runtime_names, runtime_spec,
};
use crate::{ControlPlane, Identity};
use anyhow::Context;
use futures::FutureExt;
use holdfast_controller::hold::{
    ExecutorConfig, HoldExecutor, Hooks, WritePoint, client_without_retry,
};
use holdfast_core::execution::JOB_CONTROLLER_UID_LABEL;
use holdfast_core::hold::CallMeta;
use holdfast_core::mode::Mode;
use holdfast_core::names::{LABEL_MANAGED, LABEL_RUNTIME_SNAPSHOT};
use jiff::Timestamp;
use k8s_openapi::api::core::v1::{ConfigMap, Pod};
use kube::api::{
    Api, DeleteParams, DynamicObject, ListParams, Patch, PatchParams, PostParams, PropagationPolicy,
};
use kube::config::{KubeConfigOptions, Kubeconfig};
use kube::core::ApiResource;
use serde_json::{Map, Value, json};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// The queue label.
pub const QUEUE_LABEL: &str = "kueue.x-k8s.io/queue-name";
pub use super::check::JOB_UID_LABEL;
/// The longest final settling.
const FINAL_SETTLE_MAX: Duration = Duration::from_secs(25);
/// The final settling ends after this long without any event.
const QUIET: Duration = Duration::from_millis(1500);

/// The clients a test's sequences share (bound to the test's runtime).
pub struct Clients {
    pub cp: &'static ControlPlane,
    pub admin: kube::Client,
    pub user: kube::Client,
    pub trainer: kube::Client,
    pub kueue: kube::Client,
    /// holdfast's controller (the only identity that may take the execution finalizer off
    /// a pod: the clean-up's).
    pub controller: kube::Client,
    /// Dispatch's executor per mode, acting as holdfast's controller, kube's retries off.
    pub plain: HoldExecutor,
    pub kueue_exec: HoldExecutor,
}

impl Clients {
    pub async fn new(world: &World) -> anyhow::Result<Clients> {
        let cp = world.cp;
        let kc = Kubeconfig::read_from(cp.kubeconfig(Identity::Controller))?;
        let cfg = kube::Config::from_custom_kubeconfig(kc, &KubeConfigOptions::default()).await?;
        let controller = client_without_retry(cfg)?;
        let config = ExecutorConfig {
            apiserver_request_timeout: crate::control_plane::APISERVER_REQUEST_TIMEOUT,
            ..ExecutorConfig::default()
        };
        Ok(Clients {
            cp,
            admin: cp.client(Identity::Admin).await?,
            user: cp.client(Identity::User).await?,
            trainer: cp.client(Identity::Trainer).await?,
            kueue: cp.client(Identity::Kueue).await?,
            controller: cp.client(Identity::Controller).await?,
            plain: HoldExecutor::new(controller.clone(), Mode::Plain, config.clone()),
            kueue_exec: HoldExecutor::new(controller, Mode::Kueue, config),
        })
    }

    fn executor(&self, mode: Mode) -> &HoldExecutor {
        match mode {
            Mode::Plain => &self.plain,
            Mode::Kueue => &self.kueue_exec,
        }
    }
}

/// What a run found.
#[derive(Debug)]
pub struct Outcome {
    pub namespace: String,
    /// Ops executed.
    pub steps: usize,
    /// The final check's violations.
    pub violations: Vec<Violation>,
    /// Per invariant, the first step after which the per-step check saw it broken.
    pub first_steps: std::collections::BTreeMap<check::Invariant, usize>,
    /// One line per op: what was sent and what came back.
    pub log: Vec<String>,
    /// Anything that made the history incomplete.
    pub gaps: Vec<String>,
    pub took: Duration,
}

struct Ctx<'a> {
    c: &'a Clients,
    mode: Mode,
    ns: String,
    sa: kube::Client,
    calls: Arc<Mutex<Vec<CallRecord>>>,
    background: tokio::task::JoinSet<()>,
    decoys: u32,
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

fn short(e: &kube::Error) -> String {
    let s = match e {
        kube::Error::Api(s) => format!("{} {}", s.code, s.message),
        other => other.to_string(),
    };
    s.chars().take(220).collect()
}

type Step = Result<String, String>;

fn done<T>(r: Result<T, kube::Error>) -> Step {
    r.map(|_| "ok".to_owned()).map_err(|e| short(&e))
}

/// A resourceVersion at least as new as every write that has completed (a quorum list).
async fn fresh_rv(admin: &kube::Client, ns: &str) -> u64 {
    for _ in 0..20 {
        let list = Api::<ConfigMap>::namespaced(admin.clone(), ns)
            .list_metadata(&ListParams::default().limit(1))
            .await;
        if let Ok(l) = list
            && let Some(rv) = l
                .metadata
                .resource_version
                .as_deref()
                .and_then(|s| s.parse().ok())
        {
            return rv;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    0
}

fn strip_nulls(v: &Value) -> Option<Value> {
    match v {
        Value::Null => None,
        Value::Object(m) => {
            let out: Map<String, Value> = m
                .iter()
                .filter_map(|(k, v)| strip_nulls(v).map(|v| (k.clone(), v)))
                .collect();
            Some(Value::Object(out))
        }
        other => Some(other.clone()),
    }
}

fn list_with(cur: &Value, path: &str, name: &str, add: bool) -> Value {
    let mut items: Vec<Value> = cur
        .pointer(path)
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default();
    items.retain(|v| v.as_str() != Some(name));
    if add {
        items.push(Value::from(name));
    }
    if items.is_empty() {
        Value::Null
    } else {
        Value::Array(items)
    }
}

impl Ctx<'_> {
    fn client(&self, by: Actor) -> (kube::Client, &'static str) {
        match by {
            Actor::User => (self.c.user.clone(), USER_MANAGER),
            Actor::ServiceAccount => (self.sa.clone(), SA_MANAGER),
        }
    }

    fn api(&self, client: kube::Client, ar: &ApiResource) -> Api<DynamicObject> {
        Api::namespaced_with(client, &self.ns, ar)
    }

    fn tj_ar() -> ApiResource {
        holdfast_cluster::resources::trainjob()
    }

    /// LocalQueue [`QUEUE_MAIN`] deleted and created again on [`CQ_GATED`] or [`CQ_UNGATED`],
    /// as the namespace's batch-admin (the editor's role has no LocalQueues: the admin
    /// stands in for it).
    async fn swap_local_queue(&self, gated: bool) -> Step {
        let lqs = self.api(
            self.c.admin.clone(),
            &holdfast_cluster::resources::local_queue(),
        );
        done(lqs.delete(QUEUE_MAIN, &DeleteParams::default()).await)?;
        for _ in 0..100 {
            match lqs.get_opt(QUEUE_MAIN).await {
                Ok(None) => break,
                Ok(Some(_)) => tokio::time::sleep(Duration::from_millis(100)).await,
                Err(e) => return Err(short(&e)),
            }
        }
        let cq = if gated { CQ_GATED } else { CQ_UNGATED };
        let lq: DynamicObject = serde_json::from_value(json!({
            "apiVersion": crate::kueue::KUEUE_API_VERSION, "kind": "LocalQueue",
            "metadata": {"name": QUEUE_MAIN}, "spec": {"clusterQueue": cq}
        }))
        .map_err(|e| e.to_string())?;
        done(lqs.create(&PostParams::default(), &lq).await)
    }

    fn wl_ar() -> ApiResource {
        holdfast_cluster::resources::workload()
    }

    fn cm_ar() -> ApiResource {
        ApiResource::erase::<ConfigMap>(&())
    }

    fn pod_ar() -> ApiResource {
        ApiResource::erase::<Pod>(&())
    }

    /// The pod a pod op aims at: among the execution actor's pods of the current TrainJob
    /// (by its label, which no op removes) — or, while there is none, of any TrainJob —
    /// those of the newest execution or the one before it, by name.
    async fn pod_of(&self, choice: PodChoice) -> Result<String, String> {
        let selector = match self.tj_uid().await {
            Some(uid) => format!("{LABEL_POD_UID}={uid}"),
            None => LABEL_POD_UID.to_owned(),
        };
        let list = Api::<Pod>::namespaced(self.c.admin.clone(), &self.ns)
            .list(&ListParams::default().labels(&selector))
            .await
            .map_err(|e| short(&e))?;
        let execution = |p: &Pod| -> u32 {
            p.metadata
                .labels
                .as_ref()
                .and_then(|l| l.get(LABEL_POD_EXECUTION))
                .and_then(|n| n.parse().ok())
                .unwrap_or(0)
        };
        let mut executions: Vec<u32> = list.items.iter().map(execution).collect();
        executions.sort_unstable_by(|a, b| b.cmp(a));
        executions.dedup();
        let want = executions
            .get(usize::from(choice.previous))
            .copied()
            .ok_or(if choice.previous {
                "no previous execution's pod"
            } else {
                "no execution's pod"
            })?;
        let mut names: Vec<String> = list
            .items
            .iter()
            .filter(|p| execution(p) == want)
            .filter_map(|p| p.metadata.name.clone())
            .collect();
        names.sort();
        let i = usize::from(choice.index) % names.len().max(1);
        names.get(i).cloned().ok_or_else(|| "no pod".to_owned())
    }

    async fn trainjob(&self) -> Option<Value> {
        let api = self.api(self.c.admin.clone(), &Self::tj_ar());
        api.get_opt(JOB)
            .await
            .ok()
            .flatten()
            .and_then(|o| serde_json::to_value(o).ok())
    }

    async fn tj_uid(&self) -> Option<String> {
        self.trainjob()
            .await
            .and_then(|t| t["metadata"]["uid"].as_str().map(str::to_owned))
    }

    /// The TrainJob's Workloads (controlled by it, or labelled with its uid), by name.
    async fn workloads(&self) -> Vec<Value> {
        let Some(uid) = self.tj_uid().await else {
            return Vec::new();
        };
        let api = self.api(self.c.admin.clone(), &Self::wl_ar());
        let Ok(list) = api.list(&ListParams::default()).await else {
            return Vec::new();
        };
        let mut out: Vec<Value> = list
            .items
            .into_iter()
            .filter_map(|w| serde_json::to_value(w).ok())
            .filter(|w| {
                w["metadata"]["labels"][JOB_UID_LABEL] == uid.as_str()
                    || w["metadata"]["ownerReferences"]
                        .as_array()
                        .is_some_and(|rs| rs.iter().any(|r| r["uid"] == uid.as_str()))
            })
            .collect();
        out.sort_by_key(|w| {
            w["metadata"]["name"]
                .as_str()
                .unwrap_or_default()
                .to_owned()
        });
        out
    }

    /// The TrainJob's Workloads, waiting up to 5 s for one to exist: an edit of "the
    /// Workload" is made once there is one (Kueue creates it a moment after the TrainJob).
    async fn workloads_waiting(&self) -> Vec<Value> {
        for _ in 0..25 {
            let wls = self.workloads().await;
            if !wls.is_empty() {
                return wls;
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
        Vec::new()
    }

    async fn owner_refs(&self, choice: OwnerChoice) -> Value {
        match choice {
            OwnerChoice::Clear => Value::Null,
            OwnerChoice::UserConfigMap => {
                let uid = Api::<ConfigMap>::namespaced(self.c.admin.clone(), &self.ns)
                    .get_opt(USER_CONFIGMAP)
                    .await
                    .ok()
                    .flatten()
                    .and_then(|c| c.metadata.uid)
                    .unwrap_or_default();
                json!([{"apiVersion": "v1", "kind": "ConfigMap", "name": USER_CONFIGMAP, "uid": uid}])
            }
            OwnerChoice::Dangling => json!([{"apiVersion": "v1", "kind": "ConfigMap",
                "name": "long-gone", "uid": "4a6f6e65-0000-4000-8000-00000000dead"}]),
            OwnerChoice::TrainJob => {
                let uid = self.tj_uid().await.unwrap_or_default();
                json!([{"apiVersion": "trainer.kubeflow.org/v1alpha1", "kind": "TrainJob",
                    "name": JOB, "uid": uid, "controller": true, "blockOwnerDeletion": true}])
            }
        }
    }

    /// An edit of object `name`, sent `how`, as `merge` says (a JSON merge patch computed
    /// from the object as read): merge and strategic send it as it is; JSON patch sends the
    /// difference between the read and the read with `merge` applied; apply sends it less
    /// its nulls (what apply cannot express it leaves out); replace PUTs the changed read.
    async fn edit(
        &self,
        api: &Api<DynamicObject>,
        name: &str,
        how: PatchKind,
        manager: &str,
        merge: impl FnOnce(&Value) -> Value,
    ) -> Step {
        let cur = match api.get(name).await {
            Ok(o) => serde_json::to_value(o).map_err(|e| e.to_string())?,
            Err(e) => return Err(short(&e)),
        };
        let body = merge(&cur);
        let mut new = cur.clone();
        json_patch::merge(&mut new, &body);
        let pp = PatchParams {
            field_manager: Some(manager.to_owned()),
            ..Default::default()
        };
        let r = match how {
            PatchKind::Merge => api.patch(name, &pp, &Patch::Merge(&body)).await,
            PatchKind::Strategic => api.patch(name, &pp, &Patch::Strategic(&body)).await,
            PatchKind::Json => {
                let diff = json_patch::diff(&cur, &new);
                api.patch(name, &pp, &Patch::Json::<()>(diff)).await
            }
            PatchKind::Apply | PatchKind::ApplyForce => {
                let mut cfg = strip_nulls(&body).unwrap_or_else(|| json!({}));
                cfg["apiVersion"] = cur["apiVersion"].clone();
                cfg["kind"] = cur["kind"].clone();
                cfg["metadata"]["name"] = Value::from(name);
                let mut ap = PatchParams::apply(manager);
                if how == PatchKind::ApplyForce {
                    ap = ap.force();
                }
                api.patch(name, &ap, &Patch::Apply(&cfg)).await
            }
            PatchKind::Replace => {
                let obj: DynamicObject = serde_json::from_value(new).map_err(|e| e.to_string())?;
                let pp = PostParams {
                    field_manager: Some(manager.to_owned()),
                    ..Default::default()
                };
                api.replace(name, &pp, &obj).await
            }
        };
        done(r)
    }

    async fn exec_op(&mut self, step: usize, op: &Op) -> Step {
        match op {
            Op::Settle { ms } => {
                tokio::time::sleep(Duration::from_millis(u64::from(*ms))).await;
                Ok("settled".into())
            }
            Op::CreateTrainJob {
                by,
                managed,
                queue,
                suspend,
            } => {
                let (client, manager) = self.client(*by);
                let mut labels = Map::new();
                if *managed {
                    labels.insert(LABEL_MANAGED.into(), "true".into());
                }
                if let Some(q) = queue.and_then(QueueChoice::value) {
                    labels.insert(QUEUE_LABEL.into(), q.into());
                }
                let (rt, _) = runtime_names(&self.ns);
                let mut tj = json!({
                    "apiVersion": "trainer.kubeflow.org/v1alpha1", "kind": "TrainJob",
                    "metadata": {"name": JOB, "labels": labels},
                    "spec": {"runtimeRef": {"name": rt}}
                });
                if let Some(s) = suspend {
                    tj["spec"]["suspend"] = Value::from(*s);
                }
                let obj: DynamicObject = serde_json::from_value(tj).map_err(|e| e.to_string())?;
                let pp = PostParams {
                    field_manager: Some(manager.into()),
                    ..Default::default()
                };
                done(self.api(client, &Self::tj_ar()).create(&pp, &obj).await)
            }
            Op::EditTrainJob { by, how, field } => {
                let (client, manager) = self.client(*by);
                let api = self.api(client, &Self::tj_ar());
                let (rt, rt2) = runtime_names(&self.ns);
                let owners = match field {
                    TrainJobField::OwnerRef(c) => self.owner_refs(*c).await,
                    _ => Value::Null,
                };
                let field = field.clone();
                self.edit(&api, JOB, *how, manager, move |cur| match field {
                    TrainJobField::Suspend(b) => json!({"spec": {"suspend": b}}),
                    TrainJobField::Managed(v) => {
                        json!({"metadata": {"labels": {LABEL_MANAGED: v}}})
                    }
                    TrainJobField::Queue(q) => {
                        json!({"metadata": {"labels": {QUEUE_LABEL: q.value()}}})
                    }
                    TrainJobField::Annotation { key, value } => {
                        json!({"metadata": {"annotations": {key: value}}})
                    }
                    TrainJobField::Finalizer { name, add } => json!({"metadata": {
                        "finalizers": list_with(cur, "/metadata/finalizers", &name, add)}}),
                    TrainJobField::OwnerRef(_) => json!({"metadata": {"ownerReferences": owners}}),
                    TrainJobField::RuntimeRef(r) => {
                        let name = match r {
                            RuntimeChoice::Main => rt,
                            RuntimeChoice::Second => rt2,
                            RuntimeChoice::Missing => "no-such-runtime".to_owned(),
                        };
                        json!({"spec": {"runtimeRef": {"name": name,
                            "apiGroup": "trainer.kubeflow.org", "kind": "ClusterTrainingRuntime"}}})
                    }
                    TrainJobField::Unrelated(v) => {
                        json!({"metadata": {"labels": {"example.com/team": v}}})
                    }
                })
                .await
            }
            Op::ReplaceTrainJobDroppingHoldfast { by } => {
                let (client, manager) = self.client(*by);
                let api = self.api(client, &Self::tj_ar());
                let mut cur = match api.get(JOB).await {
                    Ok(o) => serde_json::to_value(o).map_err(|e| e.to_string())?,
                    Err(e) => return Err(short(&e)),
                };
                if let Some(a) = cur
                    .pointer_mut("/metadata/annotations")
                    .and_then(Value::as_object_mut)
                {
                    a.retain(|k, _| !k.starts_with("holdfast.dev/"));
                }
                let obj: DynamicObject = serde_json::from_value(cur).map_err(|e| e.to_string())?;
                let pp = PostParams {
                    field_manager: Some(manager.into()),
                    ..Default::default()
                };
                done(api.replace(JOB, &pp, &obj).await)
            }
            Op::DeleteTrainJob { by, propagation } => {
                let (client, _) = self.client(*by);
                let dp = DeleteParams {
                    propagation_policy: Some(match propagation {
                        Propagation::Background => PropagationPolicy::Background,
                        Propagation::Foreground => PropagationPolicy::Foreground,
                        Propagation::Orphan => PropagationPolicy::Orphan,
                    }),
                    ..Default::default()
                };
                done(self.api(client, &Self::tj_ar()).delete(JOB, &dp).await)
            }
            Op::DeleteAllTrainJobs { by } => {
                let (client, _) = self.client(*by);
                done(
                    self.api(client, &Self::tj_ar())
                        .delete_collection(&DeleteParams::default(), &ListParams::default())
                        .await,
                )
            }
            Op::EditWorkload { which, how, field } => {
                let wls = self.workloads_waiting().await;
                if wls.is_empty() {
                    return Err("no Workload".into());
                }
                let w = &wls[usize::from(*which) % wls.len()];
                let name = w["metadata"]["name"]
                    .as_str()
                    .unwrap_or_default()
                    .to_owned();
                let api = self.api(self.c.user.clone(), &Self::wl_ar());
                let owners = match field {
                    WorkloadField::OwnerRef(c) => self.owner_refs(*c).await,
                    _ => Value::Null,
                };
                let field = field.clone();
                self.edit(&api, &name, *how, USER_MANAGER, move |cur| match field {
                    WorkloadField::Active(b) => json!({"spec": {"active": b}}),
                    WorkloadField::QueueName(q) => json!({"spec": {"queueName": q.value()}}),
                    WorkloadField::Annotation { key, value } => {
                        json!({"metadata": {"annotations": {key: value}}})
                    }
                    WorkloadField::Finalizer { name, add } => json!({"metadata": {
                        "finalizers": list_with(cur, "/metadata/finalizers", &name, add)}}),
                    WorkloadField::OwnerRef(_) => json!({"metadata": {"ownerReferences": owners}}),
                    WorkloadField::JobUidLabel(v) => {
                        json!({"metadata": {"labels": {JOB_UID_LABEL: v}}})
                    }
                })
                .await
                .map(|s| format!("{s} ({name})"))
            }
            Op::DeleteWorkload { which } => {
                let wls = self.workloads_waiting().await;
                if wls.is_empty() {
                    return Err("no Workload".into());
                }
                let w = &wls[usize::from(*which) % wls.len()];
                let name = w["metadata"]["name"]
                    .as_str()
                    .unwrap_or_default()
                    .to_owned();
                done(
                    self.api(self.c.user.clone(), &Self::wl_ar())
                        .delete(&name, &DeleteParams::default())
                        .await,
                )
                .map(|s| format!("{s} ({name})"))
            }
            Op::CreateDecoyWorkload { owner_ref, active } => {
                let Some(uid) = self.tj_uid().await else {
                    return Err("no TrainJob".into());
                };
                let pod_sets = self
                    .workloads()
                    .await
                    .first()
                    .and_then(|w| w.pointer("/spec/podSets").cloned())
                    .unwrap_or_else(|| {
                        json!([{"name": "node", "count": 1, "template": {"spec": {
                            "restartPolicy": "Never",
                            "containers": [{"name": "node", "image": "pytorch/pytorch:2.10.0",
                                "resources": {"requests": {"cpu": "1"}}}]}}}])
                    });
                self.decoys += 1;
                let mut wl = json!({
                    "apiVersion": crate::kueue::KUEUE_API_VERSION, "kind": "Workload",
                    "metadata": {"name": format!("decoy-{}", self.decoys),
                        "labels": {JOB_UID_LABEL: uid}},
                    "spec": {"active": active, "queueName": QUEUE_MAIN, "podSets": pod_sets}
                });
                if *owner_ref {
                    wl["metadata"]["ownerReferences"] =
                        self.owner_refs(OwnerChoice::TrainJob).await;
                }
                let obj: DynamicObject = serde_json::from_value(wl).map_err(|e| e.to_string())?;
                let pp = PostParams {
                    field_manager: Some(USER_MANAGER.into()),
                    ..Default::default()
                };
                done(
                    self.api(self.c.user.clone(), &Self::wl_ar())
                        .create(&pp, &obj)
                        .await,
                )
            }
            Op::ForceDeletePod { by, pod } => {
                let name = self.pod_of(*pod).await?;
                let (client, _) = self.client(*by);
                let force = DeleteParams {
                    grace_period_seconds: Some(0),
                    ..Default::default()
                };
                done(
                    Api::<Pod>::namespaced(client, &self.ns)
                        .delete(&name, &force)
                        .await,
                )
                .map(|s| format!("{s} ({name})"))
            }
            Op::RelabelPod { by, how, pod } => {
                let name = self.pod_of(*pod).await?;
                let (client, manager) = self.client(*by);
                let api = self.api(client, &Self::pod_ar());
                self.edit(
                    &api,
                    &name,
                    *how,
                    manager,
                    |_| json!({"metadata": {"labels": {LABEL_JOBSET_NAME: null}}}),
                )
                .await
                .map(|s| format!("{s} ({name})"))
            }
            Op::ReownPod { by, how, pod } => {
                let name = self.pod_of(*pod).await?;
                let (client, manager) = self.client(*by);
                let api = self.api(client, &Self::pod_ar());
                self.edit(&api, &name, *how, manager, |_| {
                    json!({"metadata": {"ownerReferences": null,
                        "labels": {JOB_CONTROLLER_UID_LABEL: null}}})
                })
                .await
                .map(|s| format!("{s} ({name})"))
            }
            Op::CreateDecoyPod { by, bound } => {
                let (client, manager) = self.client(*by);
                self.decoys += 1;
                let mut pod = json!({
                    "apiVersion": "v1", "kind": "Pod",
                    "metadata": {"name": format!("decoy-pod-{}", self.decoys),
                        "labels": {LABEL_JOBSET_NAME: JOB}},
                    "spec": {"automountServiceAccountToken": false, "restartPolicy": "Never",
                        "containers": [{"name": "node", "image": "pytorch/pytorch:2.10.0"}]}
                });
                if *bound {
                    pod["spec"]["nodeName"] = json!(NODE);
                }
                let obj: DynamicObject = serde_json::from_value(pod).map_err(|e| e.to_string())?;
                let pp = PostParams {
                    field_manager: Some(manager.into()),
                    ..Default::default()
                };
                done(self.api(client, &Self::pod_ar()).create(&pp, &obj).await)
            }
            Op::CreateSnapshot { by, owner_ref } => {
                let (client, manager) = self.client(*by);
                let mut cm = json!({
                    "apiVersion": "v1", "kind": "ConfigMap",
                    "metadata": {"name": holdfast_core::names::snapshot_name(JOB),
                        "labels": {LABEL_RUNTIME_SNAPSHOT: "true"}},
                    "data": {"runtime": "apiVersion: trainer.kubeflow.org/v1alpha1\nkind: ClusterTrainingRuntime\nmetadata:\n  name: forged\n"}
                });
                if *owner_ref {
                    cm["metadata"]["ownerReferences"] =
                        self.owner_refs(OwnerChoice::TrainJob).await;
                }
                let obj: DynamicObject = serde_json::from_value(cm).map_err(|e| e.to_string())?;
                let pp = PostParams {
                    field_manager: Some(manager.into()),
                    ..Default::default()
                };
                done(self.api(client, &Self::cm_ar()).create(&pp, &obj).await)
            }
            Op::EditSnapshot { by, how, field } => {
                let (client, manager) = self.client(*by);
                let api = self.api(client, &Self::cm_ar());
                let owners = match field {
                    ConfigMapField::OwnerRef(c) => self.owner_refs(*c).await,
                    _ => Value::Null,
                };
                let field = field.clone();
                self.edit(
                    &api,
                    &holdfast_core::names::snapshot_name(JOB),
                    *how,
                    manager,
                    move |cur| match field {
                        ConfigMapField::Data(d) => json!({"data": {"runtime": d}}),
                        ConfigMapField::Label { key, value } => {
                            json!({"metadata": {"labels": {key: value}}})
                        }
                        ConfigMapField::Annotation { key, value } => {
                            json!({"metadata": {"annotations": {key: value}}})
                        }
                        ConfigMapField::OwnerRef(_) => {
                            json!({"metadata": {"ownerReferences": owners}})
                        }
                        ConfigMapField::Finalizer { name, add } => json!({"metadata": {
                            "finalizers": list_with(cur, "/metadata/finalizers", &name, add)}}),
                    },
                )
                .await
            }
            Op::DeleteSnapshot { by } => {
                let (client, _) = self.client(*by);
                done(
                    self.api(client, &Self::cm_ar())
                        .delete(
                            &holdfast_core::names::snapshot_name(JOB),
                            &DeleteParams::default(),
                        )
                        .await,
                )
            }
            Op::DeleteAllSnapshots { by } => {
                let (client, _) = self.client(*by);
                done(
                    self.api(client, &Self::cm_ar())
                        .delete_collection(
                            &DeleteParams::default(),
                            &ListParams::default()
                                .labels(&format!("{LABEL_RUNTIME_SNAPSHOT}=true")),
                        )
                        .await,
                )
            }
            Op::EditRuntime { cpu } => {
                let (rt, _) = runtime_names(&self.ns);
                done(
                    Api::<DynamicObject>::all_with(
                        self.c.admin.clone(),
                        &holdfast_cluster::resources::cluster_training_runtime(),
                    )
                    .patch(
                        &rt,
                        &PatchParams::default(),
                        &Patch::Merge(json!({"spec": runtime_spec(cpu)})),
                    )
                    .await,
                )
            }
            Op::SwapLocalQueue { gated } => self.swap_local_queue(*gated).await,
            Op::SecondCaller { replace } => self.second_caller(*replace).await,
            Op::KueueDeactivate { reason } => {
                let Some(w) = self.workloads_waiting().await.into_iter().next() else {
                    return Err("no Workload".into());
                };
                let name = w["metadata"]["name"]
                    .as_str()
                    .unwrap_or_default()
                    .to_owned();
                let mut conditions = w
                    .pointer("/status/conditions")
                    .and_then(Value::as_array)
                    .cloned()
                    .unwrap_or_default();
                conditions.retain(|c| c["type"] != "DeactivationTarget");
                conditions.push(json!({"type": "DeactivationTarget", "status": "True",
                    "reason": reason, "message": "the adversary plays Kueue",
                    "lastTransitionTime": holdfast_core::rfc3339::seconds(Timestamp::now())}));
                done(
                    self.api(self.c.kueue.clone(), &Self::wl_ar())
                        .patch_status(
                            &name,
                            &PatchParams::default(),
                            &Patch::Merge(json!({"metadata": {"resourceVersion": w["metadata"]["resourceVersion"]},
                                "status": {"conditions": conditions}})),
                        )
                        .await,
                )
            }
            Op::Hold { instance, timing } => {
                self.call(step, CallKind::Hold(*instance), Some(*instance), *timing)
                    .await
            }
            Op::Release { instance, timing } => {
                self.call(step, CallKind::Release(*instance), Some(*instance), *timing)
                    .await
            }
            Op::Open { timing } => self.call(step, CallKind::Open, None, *timing).await,
            Op::Status => {
                let rv_before = fresh_rv(&self.c.admin, &self.ns).await;
                let answer = match self.c.executor(self.mode).status(&self.ns, JOB).await {
                    Ok(s) => Answer::Status(Box::new(s)),
                    Err(e) => Answer::Error(e),
                };
                let rv_after = fresh_rv(&self.c.admin, &self.ns).await;
                let text = answer.describe();
                lock(&self.calls).push(CallRecord {
                    step,
                    kind: CallKind::Status,
                    rv_before,
                    rv_after: Some(rv_after),
                    answer,
                });
                Ok(text)
            }
        }
    }

    /// [`Op::SecondCaller`]: only while none of dispatch's calls is in flight (so the hold
    /// it reads stays in force through its call), and only on a hold that records its holder
    /// (every hold here is dispatch's). Its answer is not a dispatch call's record: a lift or a
    /// replacement it made would be seen by the invariants as one nobody's call covers.
    async fn second_caller(&mut self, replace: bool) -> Step {
        if lock(&self.calls)
            .iter()
            .any(|c| matches!(c.answer, Answer::Pending))
        {
            return Ok("skipped: a call of dispatch's is in flight".to_owned());
        }
        let exec = self.c.executor(self.mode).clone();
        let hold = match exec.status(&self.ns, JOB).await {
            Ok(s) => s.hold,
            Err(e) => return Ok(format!("no status: {e}")),
        };
        let Some((instance, holder)) = hold.and_then(|h| Some((h.instance?, h.holder?))) else {
            return Ok("no hold with a holder in force: nothing to take".to_owned());
        };
        let (kind, target) = if replace {
            (holdfast_core::hold::CallKind::Hold, u64::MAX)
        } else {
            (holdfast_core::hold::CallKind::Release, instance)
        };
        let meta = CallMeta {
            instance: Some(target),
            deadline: Timestamp::now() + jiff::SignedDuration::from_secs(10),
            reason: Some("a second caller".to_owned()),
        };
        let intruder = holdfast_controller::hold::CallerIdentity::new(format!(
            "system:serviceaccount:{}:intruder",
            self.ns
        ));
        match exec.call_as(kind, &self.ns, JOB, meta, &intruder).await {
            Ok(outcome) => Ok(format!(
                "{kind}({target}) of {holder}'s hold {instance} answered {outcome:?}"
            )),
            Err(e) => Ok(format!(
                "{kind}({target}) of {holder}'s hold {instance}: {e}"
            )),
        }
    }

    async fn call(
        &mut self,
        step: usize,
        kind: CallKind,
        instance: Option<u64>,
        timing: CallTiming,
    ) -> Step {
        let mut exec = self.c.executor(self.mode).clone();
        if timing.delay_ms > 0 {
            let delay = Duration::from_millis(u64::from(timing.delay_ms));
            exec = exec.with_hooks(Hooks {
                between_read_and_write: Some(Arc::new(move |wp: WritePoint| {
                    async move {
                        if wp.conflicts == 0 {
                            tokio::time::sleep(delay).await;
                        }
                    }
                    .boxed()
                })),
            });
        }
        let admin = self.c.admin.clone();
        let ns = self.ns.clone();
        let rv_before = fresh_rv(&admin, &ns).await;
        let meta = CallMeta {
            instance,
            deadline: Timestamp::now() + jiff::SignedDuration::from_millis(timing.deadline_ms),
            reason: Some(format!("adversary step {step}")),
        };
        let index = {
            let mut calls = lock(&self.calls);
            calls.push(CallRecord {
                step,
                kind,
                rv_before,
                rv_after: None,
                answer: Answer::Pending,
            });
            calls.len() - 1
        };
        let calls = self.calls.clone();
        let fut = async move {
            let result = match kind {
                CallKind::Hold(_) => exec.hold(&ns, JOB, meta).await,
                CallKind::Release(_) => exec.release(&ns, JOB, meta).await,
                _ => exec.open(&ns, JOB, meta).await,
            };
            let rv_after = fresh_rv(&admin, &ns).await;
            let answer = match result {
                Ok(o) => Answer::Outcome(o),
                Err(e) => Answer::Error(e),
            };
            let text = answer.describe();
            let mut calls = lock(&calls);
            if let Some(c) = calls.get_mut(index) {
                c.rv_after = Some(rv_after);
                c.answer = answer;
            }
            text
        };
        if timing.background {
            self.background.spawn(async move {
                let _ = fut.await;
            });
            Ok("in the background".into())
        } else {
            Ok(fut.await)
        }
    }

    fn check(&self, history: &History, upto: u64, last: bool) -> Vec<Violation> {
        let events = history.events();
        let calls = lock(&self.calls).clone();
        check::check(&Check {
            mode: self.mode,
            events: &events,
            calls: &calls,
            upto,
            last,
        })
    }
}

/// Runs `seq` in a fresh namespace and checks it.
pub async fn run(world: &World, clients: &Clients, seq: &Sequence) -> anyhow::Result<Outcome> {
    let started = Instant::now();
    let ns = world::create_namespace(world.cp, &clients.admin, seq.mode, "adv").await?;
    let result = run_in(clients, seq, &ns, started).await;
    world::delete_namespace(&clients.admin, &clients.controller, &ns).await;
    result
}

async fn run_in(
    clients: &Clients,
    seq: &Sequence,
    ns: &str,
    started: Instant,
) -> anyhow::Result<Outcome> {
    let history = History::start(&clients.admin, ns).await?;
    // What production runs beside: the execution finalizer's keeper, as the leader runs it
    // (the chart's policy guarding it is registered once, with the world).
    let keeper = crate::lost_node::keeper(clients.cp, ns).await;
    let actor = ExecutionActor::start(
        clients.trainer.clone(),
        ns,
        Duration::from_millis(u64::from(seq.linger_ms)),
    );
    let sa = clients
        .cp
        .service_account_client(ns, SERVICE_ACCOUNT)
        .await
        .context("the workload ServiceAccount's client")?;
    let mut ctx = Ctx {
        c: clients,
        mode: seq.mode,
        ns: ns.to_owned(),
        sa,
        calls: Arc::new(Mutex::new(Vec::new())),
        background: tokio::task::JoinSet::new(),
        decoys: 0,
    };
    let mut log = Vec::new();
    let mut first_steps = std::collections::BTreeMap::new();
    for (i, op) in seq.ops.iter().enumerate() {
        let result = ctx.exec_op(i, op).await;
        log.push(format!(
            "{i:>3} {} -> {}",
            op.describe(),
            match &result {
                Ok(s) => s.clone(),
                Err(e) => format!("error: {e}"),
            }
        ));
        // Every step: the invariants over the history as far as it is complete.
        if let Some(upto) = history
            .caught_up(&clients.admin, ns, Duration::from_secs(3))
            .await
        {
            for v in ctx.check(&history, upto, false) {
                first_steps.entry(v.invariant).or_insert(i);
            }
        }
    }
    // Calls still in flight end by their deadlines (at most 10 s plus their delay).
    let bound = tokio::time::Instant::now() + Duration::from_secs(15);
    while !ctx.background.is_empty() && tokio::time::Instant::now() < bound {
        let _ = tokio::time::timeout_at(bound, ctx.background.join_next()).await;
    }
    ctx.background.abort_all();
    // Let everything settle: until nothing happens for a while, and long enough to judge
    // whether Kueue stops a held job.
    let settle_start = Instant::now();
    while settle_start.elapsed() < FINAL_SETTLE_MAX {
        tokio::time::sleep(Duration::from_millis(300)).await;
        let quiet = history.last_seen().is_none_or(|t| t.elapsed() >= QUIET);
        let pending = match history
            .caught_up(&clients.admin, ns, Duration::from_secs(2))
            .await
        {
            Some(upto) => {
                let events = history.events();
                let calls = lock(&ctx.calls).clone();
                check::liveness_pending(&Check {
                    mode: seq.mode,
                    events: &events,
                    calls: &calls,
                    upto,
                    last: true,
                })
                .is_some()
            }
            None => true,
        };
        if quiet && !pending && settle_start.elapsed() >= Duration::from_millis(1500) {
            break;
        }
    }
    let upto = history
        .caught_up(&clients.admin, ns, Duration::from_secs(10))
        .await;
    let violations = match upto {
        Some(upto) => ctx.check(&history, upto, true),
        None => ctx.check(&history, u64::MAX, true),
    };
    if !violations.is_empty()
        && let Some(dir) = std::env::var_os("HOLDFAST_ADVERSARY_DUMP")
    {
        dump(std::path::Path::new(&dir), ns, &history, &lock(&ctx.calls));
    }
    let mut gaps = history.gaps();
    if upto.is_none() {
        gaps.push("the watches did not catch up; judged what they delivered".into());
    }
    actor.stop().await;
    drop(keeper);
    history.stop().await;
    Ok(Outcome {
        namespace: ns.to_owned(),
        steps: seq.ops.len(),
        violations,
        first_steps,
        log,
        gaps,
        took: started.elapsed(),
    })
}

/// Writes a failing run's whole history and call log to `{dir}/{ns}.jsonl`, one event per
/// line in resourceVersion order, for reading by hand (`HOLDFAST_ADVERSARY_DUMP`).
fn dump(dir: &std::path::Path, ns: &str, history: &History, calls: &[CallRecord]) {
    let mut text = String::new();
    for c in calls {
        text.push_str(&format!(
            "{}\n",
            json!({"call": format!("{:?}", c.kind), "step": c.step, "rv_before": c.rv_before,
                "rv_after": c.rv_after, "answer": c.answer.describe()})
        ));
    }
    for e in history.events() {
        text.push_str(&format!(
            "{}\n",
            json!({"rv": e.rv, "kind": format!("{:?}", e.kind), "deleted": e.deleted, "object": e.obj})
        ));
    }
    let _ = std::fs::create_dir_all(dir);
    let _ = std::fs::write(dir.join(format!("{ns}.jsonl")), text);
}
