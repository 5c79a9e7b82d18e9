//! A lost node at tiers 1-2, where no kubelet runs: a Node object whose kubelet has stopped
//! reporting, pods bound to it with the statuses a kubelet last wrote, holdfast's execution
//! finalizer keeper run in process as the leader runs it, fences recorded as the hold API
//! records them, and the chart's execution-finalizer policy registered as the chart
//! installs it.

use std::time::Duration;

use holdfast_controller::execution::{self, ExecutionTracker};
use holdfast_core::execution::finalizer::EXECUTION_FINALIZER;
use k8s_openapi::api::core::v1::{Node, Pod};
use kube::api::{Api, DeleteParams, DynamicObject, Patch, PatchParams, PostParams};
use serde_json::json;
use tokio_util::sync::CancellationToken;

use crate::rbac::{RELEASE, RELEASE_NAMESPACE};
use crate::wait::wait_for;
use crate::{ControlPlane, Identity, execution_owners};

const MINUTE: Duration = Duration::from_secs(60);
/// The chart's fences ConfigMap for the harness's release.
pub const FENCES: &str = "holdfast-fences";

/// The keeper of the execution finalizer, scoped to `ns`, until dropped.
pub struct Keeper(CancellationToken);

impl Drop for Keeper {
    fn drop(&mut self) {
        self.0.cancel();
    }
}

pub async fn keeper(cp: &ControlPlane, ns: &str) -> Keeper {
    let client = cp.client(Identity::Controller).await.expect("controller");
    let mut config = execution::Config::new(Some(ns.to_owned()), RELEASE_NAMESPACE, FENCES);
    config.unresolved_retry = Duration::from_millis(200);
    let token = CancellationToken::new();
    let tracker = ExecutionTracker::new(client, config);
    let stop = token.clone();
    tokio::spawn(async move { tracker.run(stop).await });
    Keeper(token)
}

/// The chart's execution-finalizer policy, registered as the chart installs it for the
/// harness's release, once per control plane; waits until the apiserver enforces it.
pub async fn register_policy(cp: &ControlPlane, ns: &str) {
    let admin = cp.client(Identity::Admin).await.expect("admin");
    let install = crate::helm::Install::new(RELEASE, RELEASE_NAMESPACE);
    let docs = crate::helm::ensure()
        .expect("helm")
        .render(&install)
        .expect("render");
    let name = format!("{RELEASE}-execution-finalizer");
    for doc in docs
        .iter()
        .filter(|d| d["metadata"]["name"] == name.as_str())
    {
        crate::rbac::apply(&admin, doc, RELEASE_NAMESPACE, false)
            .await
            .expect("apply the policy");
    }
    // A probe pod the controller puts the finalizer on (nobody else may): the policy is in
    // force once alice's dry-run removal of it is refused.
    let pods: Api<Pod> = Api::namespaced(admin.clone(), ns);
    let probe: Pod = serde_json::from_value(json!({
        "metadata": {"name": "policy-probe"},
        "spec": {"containers": [{"name": "c", "image": "registry.k8s.io/pause:3.10"}]}
    }))
    .expect("pod");
    pods.create(&PostParams::default(), &probe)
        .await
        .expect("probe pod");
    let controller = cp.client(Identity::Controller).await.expect("controller");
    Api::<Pod>::namespaced(controller, ns)
        .patch(
            "policy-probe",
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"finalizers": [EXECUTION_FINALIZER]}})),
        )
        .await
        .expect("the controller puts the finalizer on the probe");
    let alice: Api<Pod> = Api::namespaced(cp.client(Identity::User).await.expect("alice"), ns);
    let dry = PatchParams {
        dry_run: true,
        ..Default::default()
    };
    wait_for(
        "the execution-finalizer policy is enforced",
        MINUTE,
        || async {
            alice
                .patch(
                    "policy-probe",
                    &dry,
                    &Patch::Merge(json!({"metadata": {"finalizers": null}})),
                )
                .await
                .is_err()
                .then_some(())
        },
    )
    .await;
    drop_finalizer(cp, ns, "policy-probe").await;
}

/// Takes every finalizer off `pod` as holdfast's controller (the only identity the chart's
/// policy lets remove the execution finalizer), so the test leaves nothing stuck.
pub async fn drop_finalizer(cp: &ControlPlane, ns: &str, pod: &str) {
    let controller = cp.client(Identity::Controller).await.expect("controller");
    let _ = Api::<Pod>::namespaced(controller, ns)
        .patch(
            pod,
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"finalizers": null}})),
        )
        .await;
}

/// A Node object named `name`, as a kubelet registers it, whose kubelet has stopped
/// reporting (`Ready` `Unknown`).
pub async fn lost_node(admin: &kube::Client, name: &str) {
    let node: Node = serde_json::from_value(json!({"metadata": {"name": name}})).expect("node");
    let nodes: Api<Node> = Api::all(admin.clone());
    nodes
        .create(&PostParams::default(), &node)
        .await
        .expect("node");
    nodes
        .patch_status(
            name,
            &PatchParams::default(),
            &Patch::Merge(json!({"status": {"conditions": [{"type": "Ready", "status": "Unknown",
                "reason": "NodeStatusUnknown", "message": "Kubelet stopped posting node status."}]}})),
        )
        .await
        .expect("node status");
}

/// One pod of TrainJob `trainjob`'s execution, `{trainjob}-node-0-0`, bound to `node`, its
/// container running as its kubelet last reported; returns once the keeper has put the
/// execution finalizer on it.
pub async fn running_on(cp: &ControlPlane, ns: &str, trainjob: &str, node: &str) -> Api<Pod> {
    let admin = cp.client(Identity::Admin).await.expect("admin");
    let tj = Api::<DynamicObject>::namespaced_with(
        admin.clone(),
        ns,
        &holdfast_cluster::resources::trainjob(),
    )
    .get(trainjob)
    .await
    .expect("the TrainJob");
    let uid = tj.metadata.uid.clone().expect("uid");
    let owners = execution_owners::ensure(&admin, ns, trainjob, &uid)
        .await
        .expect("owners");
    let name = format!("{trainjob}-node-0-0");
    let mut pod = execution_owners::pod(&name, trainjob, &owners, json!({}));
    pod["spec"]["nodeName"] = json!(node);
    let pods: Api<Pod> = Api::namespaced(admin.clone(), ns);
    pods.create(
        &PostParams::default(),
        &serde_json::from_value(pod).expect("pod"),
    )
    .await
    .expect("pod");
    pods.patch_status(
        &name,
        &as_kubelet(),
        &Patch::Merge(json!({"status": {"phase": "Running", "containerStatuses": [
            {"name": "node", "image": "pytorch/pytorch:2.10.0", "imageID": "", "ready": true,
             "restartCount": 0, "state": {"running": {"startedAt": "2026-12-03T10:00:00Z"}}}]}})),
    )
    .await
    .expect("pod status");
    wait_for(
        "the keeper puts the execution finalizer on the bound pod",
        MINUTE,
        || async {
            let p = pods.get(&name).await.ok()?;
            carries(&p).then_some(())
        },
    )
    .await;
    pods
}

pub fn carries(pod: &Pod) -> bool {
    pod.metadata
        .finalizers
        .as_ref()
        .is_some_and(|f| f.iter().any(|f| f == EXECUTION_FINALIZER))
}

pub fn force() -> DeleteParams {
    DeleteParams {
        grace_period_seconds: Some(0),
        ..Default::default()
    }
}

pub async fn fence(cp: &ControlPlane, node: &str) {
    let controller = cp.client(Identity::Controller).await.expect("controller");
    execution::record_fence(
        &controller,
        RELEASE_NAMESPACE,
        FENCES,
        node,
        jiff::Timestamp::now(),
    )
    .await
    .expect("record the fence");
}

pub async fn gone(pods: &Api<Pod>, name: &str, what: &str) {
    wait_for(what, MINUTE, || async {
        pods.get_opt(name).await.ok()?.is_none().then_some(())
    })
    .await;
}

/// Writes as the kubelet's field manager does (a pod's status is the kubelet's).
pub fn as_kubelet() -> PatchParams {
    PatchParams {
        field_manager: Some(holdfast_core::execution::finalizer::KUBELET_MANAGER.to_owned()),
        ..Default::default()
    }
}
