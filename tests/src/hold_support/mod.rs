//! What the hold tests, the race test and the hold benchmark share: an executor acting as the
//! controller, TrainJobs, a status writer acting as Trainer, and the apiserver's audit log.

pub mod api;
pub mod race;

use std::time::Duration;

use crate::{ControlPlane, Identity, control_plane::APISERVER_REQUEST_TIMEOUT};
use holdfast_cluster::resources;
use holdfast_controller::hold::{ExecutorConfig, HoldExecutor, client_without_retry};
use holdfast_core::{hold::CallMeta, mode::Mode};
use jiff::Timestamp;
use kube::{
    api::{Api, DynamicObject, Patch, PatchParams, PostParams},
    config::{KubeConfigOptions, Kubeconfig},
};
use serde_json::{Value, json};

/// A client acting as `id` with kube's own retries off, as the controller's is.
pub async fn client_without_retries(cp: &ControlPlane, id: Identity) -> kube::Client {
    let kc = Kubeconfig::read_from(cp.kubeconfig(id)).expect("kubeconfig");
    let cfg = kube::Config::from_custom_kubeconfig(kc, &KubeConfigOptions::default())
        .await
        .expect("config");
    client_without_retry(cfg).expect("client")
}

/// The executor's configuration against the local control plane.
pub fn config() -> ExecutorConfig {
    ExecutorConfig {
        apiserver_request_timeout: APISERVER_REQUEST_TIMEOUT,
        ..ExecutorConfig::default()
    }
}

/// A plain-mode executor acting as holdfast's controller.
pub async fn executor(cp: &ControlPlane) -> HoldExecutor {
    HoldExecutor::new(
        client_without_retries(cp, Identity::Controller).await,
        Mode::Plain,
        config(),
    )
}

/// A call's meta: `instance` (None for Open), deadline `within` from now.
pub fn meta(instance: Option<u64>, within: Duration) -> CallMeta {
    CallMeta {
        instance,
        deadline: Timestamp::now() + within,
        reason: None,
    }
}

pub fn trainjobs(client: &kube::Client, ns: &str) -> Api<DynamicObject> {
    Api::namespaced_with(client.clone(), ns, &resources::trainjob())
}

/// The ClusterTrainingRuntime every TrainJob here names (Kueue's TrainJob webhook, when Kueue
/// runs on the shared control plane, refuses a TrainJob whose runtime does not exist).
pub const RUNTIME: &str = "torch-distributed";

/// Creates [`RUNTIME`] unless it exists.
pub async fn ensure_runtime(admin: &kube::Client) {
    let rt: DynamicObject = serde_json::from_value(json!({
        "apiVersion": "trainer.kubeflow.org/v1alpha1", "kind": "ClusterTrainingRuntime",
        "metadata": {"name": RUNTIME},
        "spec": {"mlPolicy": {"numNodes": 1, "torch": {}},
            "template": {"spec": {"replicatedJobs": [{"name": "node",
                "template": {"metadata": {"labels": {"trainer.kubeflow.org/trainjob-ancestor-step": "trainer"}},
                "spec": {"template": {"spec": {"containers": [{"name": "node", "image": "pytorch/pytorch:2.10.0"}]}}}}}]}}}
    }))
    .expect("runtime json");
    Api::<DynamicObject>::all_with(
        admin.clone(),
        &holdfast_cluster::resources::cluster_training_runtime(),
    )
    .patch(
        RUNTIME,
        &PatchParams::apply("holdfast-tests"),
        &Patch::Apply(&rt),
    )
    .await
    .expect("the runtime");
}

/// Creates TrainJob `ns/name`, suspended at its start gate or not.
pub async fn create_trainjob(cp: &ControlPlane, ns: &str, name: &str, suspended: bool) -> Value {
    let admin = cp.client(Identity::Admin).await.expect("admin");
    ensure_runtime(&admin).await;
    let tj = crate::objects::TrainJob::named(name)
        .managed()
        .suspended(suspended)
        .object();
    let created = trainjobs(&admin, ns)
        .create(&PostParams::default(), &tj)
        .await
        .expect("create TrainJob");
    serde_json::to_value(created).expect("json")
}

/// The TrainJob as it is now.
pub async fn read_trainjob(cp: &ControlPlane, ns: &str, name: &str) -> Value {
    let admin = cp.client(Identity::Admin).await.expect("admin");
    serde_json::to_value(trainjobs(&admin, ns).get(name).await.expect("get TrainJob"))
        .expect("json")
}

pub fn annotation<'a>(obj: &'a Value, key: &str) -> Option<&'a str> {
    obj.pointer("/metadata/annotations")
        .and_then(|a| a.get(key))
        .and_then(Value::as_str)
}

pub fn hold_annotations(obj: &Value) -> Vec<String> {
    obj.pointer("/metadata/annotations")
        .and_then(Value::as_object)
        .map(|a| {
            a.keys()
                .filter(|k| k.starts_with("holdfast.dev/hold-"))
                .cloned()
                .collect()
        })
        .unwrap_or_default()
}

pub fn suspended(obj: &Value) -> bool {
    obj.pointer("/spec/suspend").and_then(Value::as_bool) == Some(true)
}

pub fn resource_version(obj: &Value) -> String {
    obj.pointer("/metadata/resourceVersion")
        .and_then(Value::as_str)
        .unwrap_or_default()
        .to_owned()
}

/// A status update of the TrainJob as Trainer makes it (a real write: the resourceVersion
/// moves). `step` must differ from the last one written.
pub async fn write_status(trainer: &kube::Client, ns: &str, name: &str, step: u64) {
    let patch = json!({"status": {"trainerStatus": {
        "lastUpdatedTime": holdfast_core::rfc3339::seconds(Timestamp::now()),
        "progressPercentage": step % 101,
        "metrics": [{"name": "step", "value": step.to_string()}]
    }}});
    trainjobs(trainer, ns)
        .patch_status(name, &PatchParams::default(), &Patch::Merge(&patch))
        .await
        .expect("status update as Trainer");
}

/// Every audit event written so far, once every request made before this call has been
/// logged: a sentinel request is made and awaited in the log.
pub async fn settled_audit(cp: &ControlPlane) -> Vec<Value> {
    cp.settled_audit_events().await.expect("audit log")
}

/// The audit events of requests holdfast's controller made in namespace `ns`.
pub fn controller_requests<'a>(events: &'a [Value], ns: &str) -> Vec<&'a Value> {
    events
        .iter()
        .filter(|e| {
            e.pointer("/user/username").and_then(Value::as_str)
                == Some(Identity::Controller.username())
                && e.pointer("/objectRef/namespace").and_then(Value::as_str) == Some(ns)
        })
        .collect()
}

pub fn verb(e: &Value) -> &str {
    e.get("verb").and_then(Value::as_str).unwrap_or_default()
}

pub fn code(e: &Value) -> i64 {
    e.pointer("/responseStatus/code")
        .and_then(Value::as_i64)
        .unwrap_or_default()
}

pub fn resource(e: &Value) -> &str {
    e.pointer("/objectRef/resource")
        .and_then(Value::as_str)
        .unwrap_or_default()
}

pub fn received_at(e: &Value) -> Timestamp {
    let t = e
        .get("requestReceivedTimestamp")
        .and_then(Value::as_str)
        .expect("requestReceivedTimestamp");
    holdfast_core::rfc3339::parse(t).expect("RFC 3339")
}

pub fn user_agent(e: &Value) -> &str {
    e.get("userAgent")
        .and_then(Value::as_str)
        .unwrap_or_default()
}

/// The steps the plain-mode hold tests tell their scenarios in.
impl crate::scene::Scene {
    /// A managed TrainJob `name` in the scene's namespace, suspended or not.
    pub async fn job(&self, name: &str, suspended: bool) -> Value {
        create_trainjob(self.cp, &self.ns, name, suspended).await
    }

    /// TrainJob `name` as stored now.
    pub async fn read(&self, name: &str) -> Value {
        read_trainjob(self.cp, &self.ns, name).await
    }

    /// A plain-mode hold executor as the controller.
    pub async fn executor(&self) -> HoldExecutor {
        executor(self.cp).await
    }
}
