//! Tier 3 smoke tests: a real node (containerd, runc, CNI, kubelet, kube-scheduler,
//! kube-proxy) with the real JobSet and Trainer controllers, one cluster shared by the tests of
//! this module (`NodeCluster::shared`).
//!
//! Opt-in: the node takes minutes to build the first time, so these tests are ignored unless
//! asked for:
//!
//! ```sh
//! cargo test -p holdfast-tests --test it -- --ignored node:: --test-threads 1
//! ```

mod chart;
mod cli;
mod cost;
mod failsafe;
mod go_client;
mod kep;
mod kep_fixture;
mod krew;
mod kueue;
mod lost;
mod multikueue;
mod pods;
mod upgrade;
mod writers;

use futures::{AsyncBufReadExt, StreamExt};
use holdfast_tests::Identity;
use holdfast_tests::node::NodeCluster;
use holdfast_tests::wait::wait_for;
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::Pod;
use kube::api::{
    Api, DeleteParams, DynamicObject, ListParams, LogParams, Patch, PatchParams, PostParams,
};
use std::time::{Duration, Instant};

pub(super) use holdfast_tests::chart_on_node::{
    ChartRelease, ServiceHoldApi, holdfast_image, pod_states, publish,
};
pub(super) use holdfast_tests::node_pods::{config_of, is_running, running_pods, training_runtime};

/// Every pod in `ps` Running, and none of them one of `old` (uids): a new set replaced them.
pub(super) fn all_running_and_new(ps: &[Pod], old: &[String]) -> bool {
    ps.iter().all(is_running)
        && ps
            .iter()
            .all(|p| !old.contains(p.metadata.uid.as_ref().unwrap_or(&String::new())))
}

/// The pods of `jobset`'s next execution, once there are some, all Running and none of `old`
/// (the previous execution's uids; empty for the first); panics after `within`, saying `what`
/// it waited for.
pub(super) async fn next_execution(
    pods: &Api<Pod>,
    jobset: &str,
    old: &[String],
    what: &str,
    within: Duration,
) -> Vec<Pod> {
    wait_for(what, within, || async {
        let ps = running_pods(pods, jobset).await;
        (!ps.is_empty() && all_running_and_new(&ps, old)).then_some(ps)
    })
    .await
}

pub(super) fn owner_kind(meta: &kube::api::ObjectMeta) -> Option<(String, String)> {
    meta.owner_references
        .as_ref()?
        .iter()
        .find(|o| o.controller == Some(true))
        .map(|o| (o.kind.clone(), o.name.clone()))
}

/// Creates `runtime` (a TrainingRuntime as JSON, e.g. [`training_runtime`]'s) in `ns`, as
/// `admin`.
pub(super) async fn create_runtime(admin: &kube::Client, ns: &str, runtime: serde_json::Value) {
    Api::<DynamicObject>::namespaced_with(
        admin.clone(),
        ns,
        &holdfast_cluster::resources::training_runtime(),
    )
    .create(
        &PostParams::default(),
        &serde_json::from_value(runtime).expect("runtime"),
    )
    .await
    .expect("create runtime");
}

/// Creates TrainingRuntime `workload` (the node's workload image) in `ns`, as `admin`; the
/// TrainJobs of `ns`, as `admin`.
pub(super) async fn workload_runtime(
    cluster: &NodeCluster,
    admin: &kube::Client,
    ns: &str,
) -> Api<DynamicObject> {
    create_runtime(
        admin,
        ns,
        training_runtime("workload", cluster.workload_image()),
    )
    .await;
    Api::namespaced_with(admin.clone(), ns, &holdfast_cluster::resources::trainjob())
}

/// Creates TrainingRuntime `name` in `ns` (the node's workload image), as `admin`, whose
/// pods take `secs` seconds to stop after SIGTERM.
pub(super) async fn slow_stop_runtime(
    cluster: &NodeCluster,
    admin: &kube::Client,
    ns: &str,
    name: &str,
    secs: u32,
) {
    let mut runtime = training_runtime(name, cluster.workload_image());
    runtime["spec"]["template"]["spec"]["replicatedJobs"][0]["template"]["spec"]["template"]["spec"]
        ["containers"][0]["env"][0]["value"] = serde_json::json!(secs.to_string());
    create_runtime(admin, ns, runtime).await;
}

/// Waits (a minute at most) until a pod of `jobset`'s is terminating.
pub(super) async fn wait_terminating(pods: &Api<Pod>, jobset: &str) {
    wait_for("the pod terminating", Duration::from_secs(60), || async {
        running_pods(pods, jobset)
            .await
            .iter()
            .any(|p| p.metadata.deletion_timestamp.is_some())
            .then_some(())
    })
    .await;
}

/// Creates TrainJob `name` of runtime `workload` through `trainjobs`, created suspended if
/// `suspend` says so (no `spec.suspend` at all when `None`).
pub(super) async fn create_workload_trainjob(
    trainjobs: &Api<DynamicObject>,
    name: &str,
    suspend: Option<bool>,
) {
    let mut tj = serde_json::json!({
        "apiVersion": "trainer.kubeflow.org/v1alpha1", "kind": "TrainJob",
        "metadata": {"name": name},
        "spec": {"runtimeRef": {"name": "workload", "kind": "TrainingRuntime", "apiGroup": "trainer.kubeflow.org"}}
    });
    if let Some(suspend) = suspend {
        tj["spec"]["suspend"] = suspend.into();
    }
    let tj: DynamicObject = serde_json::from_value(tj).expect("trainjob");
    trainjobs
        .create(&PostParams::default(), &tj)
        .await
        .expect("create trainjob");
}

/// The last lines of each of holdfast's controller pods' logs in `ns`.
pub(super) async fn controller_logs(admin: &kube::Client, ns: &str) -> Vec<String> {
    let pods: Api<Pod> = Api::namespaced(admin.clone(), ns);
    let mut out = Vec::new();
    let list = pods
        .list(&ListParams::default().labels("app.kubernetes.io/component=controller"))
        .await
        .map(|l| l.items)
        .unwrap_or_default();
    for p in list {
        let name = p.metadata.name.unwrap_or_default();
        let log = pods
            .logs(
                &name,
                &LogParams {
                    tail_lines: Some(15),
                    ..Default::default()
                },
            )
            .await
            .unwrap_or_else(|e| format!("no log: {e}"));
        out.push(format!("{name}:\n{log}"));
    }
    out
}

/// A user's edit of job `job`'s snapshot (through `cms`, a user's client) is refused by
/// holdfast's webhook, called by the apiserver through its Service.
pub(super) async fn snapshot_edit_is_refused(
    cms: &Api<k8s_openapi::api::core::v1::ConfigMap>,
    job: &str,
) {
    let edit = cms
        .patch(
            &format!("{job}-runtime-snapshot"),
            &PatchParams::default(),
            &Patch::Merge(serde_json::json!({"metadata": {"labels": {"edited": "yes"}}})),
        )
        .await;
    match edit {
        Err(kube::Error::Api(s)) => assert!(
            s.message
                .contains("validate.holdfast.dev\" denied the request"),
            "refused by holdfast's webhook: {}",
            s.message
        ),
        other => panic!("a user's snapshot edit was not refused: {other:?}"),
    }
}
