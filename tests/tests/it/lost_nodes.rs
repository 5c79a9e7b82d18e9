//! A lost node, at tier 2: "gone" means the processes, not the pod objects. No kubelet runs
//! here, so a Node object and its pods' statuses are written by the test as a kubelet (or
//! its silence) would leave them; holdfast's execution finalizer keeper runs in process, as
//! the leader runs it, and the chart's execution-finalizer policy is registered as the
//! chart installs it. Tier 3 (`node::`) shows the same on real kubelets.

use std::time::Duration;

use holdfast_controller::hold::HoldExecutor;
use holdfast_core::execution::{NodeState, Why};
use holdfast_core::hold::{HoldError, Outcome};
use holdfast_tests::hold_support::api::start_api;
use holdfast_tests::hold_support::{create_trainjob, executor, meta};
use holdfast_tests::lost_node::{
    FENCES, Keeper, as_kubelet, carries, drop_finalizer, fence, force, gone, keeper, lost_node,
    register_policy, running_on,
};
use holdfast_tests::rbac::{RELEASE, RELEASE_NAMESPACE};
use holdfast_tests::scene::Scene;
use holdfast_tests::wait::wait_for;
use holdfast_tests::{ControlPlane, Identity, execution_owners};
use k8s_openapi::api::core::v1::{ConfigMap, Node, Pod};
use k8s_openapi::api::rbac::v1::ClusterRoleBinding;
use kube::api::{Api, DeleteParams, Patch, PatchParams};
use serde_json::json;

const MINUTE: Duration = Duration::from_secs(60);

/// The seed's scene: TrainJob `mnist`, opened and running with one pod bound to a Node of
/// its own, `{prefix}-{ns}`, whose kubelet has stopped reporting; the keeper running (it put
/// the execution finalizer on the pod); then held by dispatch.
struct Held {
    exec: HoldExecutor,
    pods: Api<Pod>,
    node: String,
    keeper: Keeper,
}

/// The node is fenced: its pod goes, and the release lifts the hold and resumes the job.
async fn fenced_then_released(
    cp: &ControlPlane,
    exec: &HoldExecutor,
    pods: &Api<Pod>,
    node: &str,
    ns: &str,
) {
    fence(cp, node).await;
    gone(pods, "mnist-node-0-0", "the fenced node's pod goes").await;
    assert_eq!(
        exec.release(ns, "mnist", meta(Some(1), MINUTE)).await,
        Ok(Outcome::Released { resumed: true })
    );
}

async fn held_on_a_lost_node(cp: &ControlPlane, ns: &str, prefix: &str) -> Held {
    let admin = cp.client(Identity::Admin).await.expect("admin");
    let node = format!("{prefix}-{ns}");
    lost_node(&admin, &node).await;
    create_trainjob(cp, ns, "mnist", true).await;
    let exec = executor(cp).await;
    exec.open(ns, "mnist", meta(None, MINUTE))
        .await
        .expect("open");
    let keeper = keeper(cp, ns).await;
    let pods = running_on(cp, ns, "mnist", &node).await;
    exec.hold(ns, "mnist", meta(Some(1), MINUTE))
        .await
        .expect("hold");
    Held {
        exec,
        pods,
        node,
        keeper,
    }
}

#[tokio::test]
async fn a_force_deleted_pod_on_a_lost_node_holds_the_release_back_until_the_node_is_fenced() {
    let s = Scene::new("force").await;
    let ns = &s.ns;
    // The node is lost and dispatch holds the job; the keeper that saw the pod stops (a new
    // leader comes later).
    let Held {
        exec,
        pods,
        node,
        keeper: keeper_1,
    } = held_on_a_lost_node(s.cp, ns, "lost").await;
    drop(keeper_1);

    // Anyone with edit force-deletes the pod while no keeper runs.
    let alice: Api<Pod> = Api::namespaced(s.client(Identity::User).await, ns);
    alice
        .delete("mnist-node-0-0", &force())
        .await
        .expect("alice may force-delete a pod");
    let left = pods
        .get("mnist-node-0-0")
        .await
        .expect("the pod object stays");
    assert!(left.metadata.deletion_timestamp.is_some());

    // A new leader's keeper: nothing was forgotten, the pod object is the record.
    let _keeper_2 = keeper(s.cp, ns).await;
    assert_eq!(
        exec.release(ns, "mnist", meta(Some(1), MINUTE)).await,
        Err(HoldError::PodsRemain),
        "its process may still run on the lost node"
    );
    let status = exec.status(ns, "mnist").await.expect("status");
    let pod = status.remaining_pods.first().expect("a remaining pod");
    assert_eq!(pod.name, "mnist-node-0-0");
    assert_eq!(pod.node.as_deref(), Some(node.as_str()));
    assert_eq!(pod.node_state, Some(NodeState::NotReady));
    assert_eq!(pod.why, Why::Terminating);
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert!(
        carries(&pods.get("mnist-node-0-0").await.expect("still there")),
        "no report and no fence: the finalizer stays"
    );

    fenced_then_released(s.cp, &exec, &pods, &node, ns).await;
}

#[tokio::test]
async fn a_deleted_pod_whose_kubelet_reports_its_containers_ended_goes_without_a_fence() {
    let s = Scene::new("reported").await;
    let ns = &s.ns;
    let admin = &s.admin;
    let node = format!("alive-{ns}");
    lost_node(admin, &node).await;
    s.job("mnist", true).await;
    let _keeper = keeper(s.cp, ns).await;
    let pods = running_on(s.cp, ns, "mnist", &node).await;
    pods.delete("mnist-node-0-0", &DeleteParams::default())
        .await
        .expect("delete");
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert!(
        pods.get_opt("mnist-node-0-0").await.expect("get").is_some(),
        "until its kubelet reports, the pod stays"
    );
    // The kubelet kills the container and reports it, then deletes the pod.
    // (A pod of JobSet's Jobs restarts nothing once the kubelet has made it terminal.)
    pods.patch_status(
        "mnist-node-0-0",
        &as_kubelet(),
        &Patch::Merge(json!({"status": {"phase": "Failed", "containerStatuses": [
            {"name": "node", "image": "pytorch/pytorch:2.10.0", "imageID": "", "ready": false,
             "restartCount": 0, "state": {"terminated": {"exitCode": 143, "reason": "Error",
                "startedAt": "2026-12-03T10:00:00Z", "finishedAt": "2026-12-03T10:05:00Z"}}}]}})),
    )
    .await
    .expect("the kubelet's report");
    wait_for(
        "the keeper releases the finalizer on the kubelet's report",
        MINUTE,
        || async {
            let p = pods.get("mnist-node-0-0").await.ok()?;
            (!carries(&p)).then_some(())
        },
    )
    .await;
    // The kubelet's last word: the delete with no grace left, which now removes the pod.
    pods.delete("mnist-node-0-0", &force())
        .await
        .expect("the kubelet's final delete");
    gone(
        &pods,
        "mnist-node-0-0",
        "the pod whose kubelet reported goes",
    )
    .await;
}

#[tokio::test]
async fn deleting_the_node_of_a_held_execution_does_not_make_its_pods_gone() {
    let s = Scene::new("nodedel").await;
    let ns = &s.ns;
    let admin = &s.admin;
    let Held {
        exec,
        pods,
        node,
        keeper: _keeper,
    } = held_on_a_lost_node(s.cp, ns, "deleted").await;
    // An admin deletes the Node without fencing it; pod GC then force-deletes its pods.
    Api::<Node>::all(admin.clone())
        .delete(&node, &DeleteParams::default())
        .await
        .expect("delete the node");
    pods.delete("mnist-node-0-0", &force())
        .await
        .expect("pod GC's delete");
    assert_eq!(
        exec.release(ns, "mnist", meta(Some(1), MINUTE)).await,
        Err(HoldError::PodsRemain)
    );
    let status = exec.status(ns, "mnist").await.expect("status");
    assert_eq!(
        status.remaining_pods.first().and_then(|p| p.node_state),
        Some(NodeState::Gone)
    );
    fenced_then_released(s.cp, &exec, &pods, &node, ns).await;
}

#[tokio::test]
async fn an_editor_may_neither_remove_the_execution_finalizer_nor_the_jobset_label() {
    let s = Scene::new("strip").await;
    let ns = &s.ns;
    register_policy(s.cp, ns).await;
    let admin = &s.admin;
    let node = format!("strip-{ns}");
    lost_node(admin, &node).await;
    s.job("mnist", true).await;
    let keeper = keeper(s.cp, ns).await;
    let _pods = running_on(s.cp, ns, "mnist", &node).await;
    drop(keeper);
    let alice: Api<Pod> = Api::namespaced(s.client(Identity::User).await, ns);
    alice
        .delete("mnist-node-0-0", &force())
        .await
        .expect("alice may delete a pod");
    let stripped = alice
        .patch(
            "mnist-node-0-0",
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"finalizers": null}})),
        )
        .await
        .expect_err("refused");
    let message = stripped.to_string();
    assert!(
        message.contains("metadata.finalizers[holdfast.dev/execution]")
            && message.contains("fence"),
        "{message}"
    );
    let relabelled = alice
        .patch(
            "mnist-node-0-0",
            &PatchParams::default(),
            &execution_owners::without_jobset_label(),
        )
        .await
        .expect_err("refused");
    assert!(
        relabelled
            .to_string()
            .contains("keeps the label of its JobSet"),
        "{relabelled}"
    );
    // Nor may anyone but the controller put it on a pod: a decoy cannot borrow it.
    let decoy: Pod = serde_json::from_value(json!({
        "metadata": {"name": "decoy", "finalizers": [holdfast_core::execution::finalizer::EXECUTION_FINALIZER],
            "labels": {execution_owners::JOBSET_NAME_LABEL: "mnist"}},
        "spec": {"containers": [{"name": "c", "image": "registry.k8s.io/pause:3.10"}]}
    }))
    .expect("pod");
    let refused = alice
        .create(&kube::api::PostParams::default(), &decoy)
        .await
        .expect_err("refused");
    assert!(refused.to_string().contains("may not add it"), "{refused}");
    drop_finalizer(s.cp, ns, "mnist-node-0-0").await;
}

#[tokio::test]
async fn a_pod_carrying_the_execution_finalizer_may_not_be_reowned_and_still_counts() {
    let s = Scene::new("reown").await;
    let ns = &s.ns;
    register_policy(s.cp, ns).await;
    let Held {
        exec,
        pods,
        keeper: _keeper,
        ..
    } = held_on_a_lost_node(s.cp, ns, "reown").await;
    // An editor tries to take the running pod away from its Job (as the Job controller does
    // when its selector no longer matches): by ownership it would be nobody's.
    let alice: Api<Pod> = Api::namespaced(s.client(Identity::User).await, ns);
    let refused = alice
        .patch(
            "mnist-node-0-0",
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"ownerReferences": null}})),
        )
        .await
        .expect_err("only the garbage collector changes the owners of an execution's pod");
    assert!(
        refused
            .to_string()
            .contains("metadata.ownerReferences of pod"),
        "{refused}"
    );
    assert_eq!(
        exec.release(ns, "mnist", meta(Some(1), MINUTE)).await,
        Err(HoldError::PodsRemain),
        "it carries the execution finalizer and the job's label: it counts"
    );
    drop(pods);
    drop_finalizer(s.cp, ns, "mnist-node-0-0").await;
}

#[tokio::test]
async fn only_a_fencer_may_fence_a_node_through_the_hold_api() {
    let s = Scene::new("fencer").await;
    let ns = &s.ns;
    let api = start_api(s.cp, s.executor().await).await;
    let node = format!("fenced-{ns}");
    let path = format!("/v1/nodes/{node}/fence");
    let alice = s.cp.token(Identity::User);
    let (status, body) = api.post(&path, Some(alice), &json!({})).await;
    assert_eq!(status, 403, "{body}");
    assert!(
        body["message"]
            .as_str()
            .is_some_and(|m| m.contains("create holdfast.dev nodes/fence")),
        "{body}"
    );
    // The chart's fencer ClusterRole, bound to alice (as rbac.fencers binds it).
    let admin = &s.admin;
    let docs = holdfast_tests::rbac::render_holdfast_rbac(
        "plain",
        &[
            "rbac.fencers[0].kind=User",
            &format!("rbac.fencers[0].name={}", Identity::User.username()),
        ],
    )
    .expect("render");
    let fencer = format!("{RELEASE}-fencer");
    for doc in docs
        .iter()
        .filter(|d| d["metadata"]["name"] == fencer.as_str())
    {
        holdfast_tests::rbac::apply(admin, doc, RELEASE_NAMESPACE, false)
            .await
            .expect("apply");
    }
    let binding: Api<ClusterRoleBinding> = Api::all(admin.clone());
    assert!(binding.get_opt(&fencer).await.expect("get").is_some());
    let answer = wait_for("alice may fence", MINUTE, || async {
        let (status, body) = api.post(&path, Some(alice), &json!({})).await;
        (status == 200).then_some(body)
    })
    .await;
    assert_eq!(answer["node"], node.as_str());
    let fenced_at = answer["fencedAt"].as_str().expect("fencedAt");
    let cm = Api::<ConfigMap>::namespaced(admin.clone(), RELEASE_NAMESPACE)
        .get(FENCES)
        .await
        .expect("the fences ConfigMap");
    assert_eq!(
        cm.data
            .as_ref()
            .and_then(|d| d.get(&node))
            .map(String::as_str),
        Some(fenced_at)
    );
    let (status, body) = api
        .post(&path, Some(alice), &json!({"node": "another"}))
        .await;
    assert_eq!(status, 400, "a fence's body is {{}}: {body}");
    // Unbind, for the other tests of this control plane.
    let _ = binding.delete(&fencer, &DeleteParams::default()).await;
}

/// Found while teaching the adversary lost-node attacks on pods: a pod of an execution that
/// is bound and running but does not carry the execution finalizer yet — bound while no
/// keeper runs (a leader failover, a controller outage), or in the moment before the keeper
/// reacts — was re-owned by an editor (its ownerReferences and the Job controller's
/// `controller-uid` label stripped), and was nobody's by ownership from then on: the keeper
/// never put the finalizer on it, neither Release nor the readmission gate counted it, and a
/// hold left it running. The chart's execution policy now keeps a pod's owners and those
/// labels while it carries the JobSet label, finalizer or not: the re-own is refused, the
/// keeper puts the finalizer on the pod once back, and the release waits for it.
#[tokio::test]
async fn a_running_pod_reowned_before_the_keeper_saw_it_still_counts() {
    let s = Scene::new("reownearly").await;
    let ns = &s.ns;
    register_policy(s.cp, ns).await;
    let admin = &s.admin;
    let node = format!("early-{ns}");
    lost_node(admin, &node).await;
    s.job("mnist", true).await;
    let exec = s.executor().await;
    exec.open(ns, "mnist", meta(None, MINUTE))
        .await
        .expect("open");
    // No keeper runs: the execution's pod is bound and its container started, as JobSet,
    // the Job controller, the scheduler and the kubelet make it.
    let uid = Api::<kube::api::DynamicObject>::namespaced_with(
        admin.clone(),
        ns,
        &holdfast_cluster::resources::trainjob(),
    )
    .get("mnist")
    .await
    .expect("the TrainJob")
    .metadata
    .uid
    .expect("uid");
    let owners = execution_owners::ensure(admin, ns, "mnist", &uid)
        .await
        .expect("owners");
    let job_uid = owners[0]["uid"].as_str().expect("the Job's uid").to_owned();
    let name = "mnist-node-0-0";
    let mut pod = execution_owners::pod(
        name,
        "mnist",
        &owners,
        json!({"labels": {holdfast_core::execution::JOB_CONTROLLER_UID_LABEL: job_uid}}),
    );
    pod["spec"]["nodeName"] = json!(node);
    pod["spec"]["restartPolicy"] = json!("Never");
    let pods: Api<Pod> = Api::namespaced(admin.clone(), ns);
    pods.create(
        &kube::api::PostParams::default(),
        &serde_json::from_value(pod).expect("pod"),
    )
    .await
    .expect("pod");
    pods.patch_status(
        name,
        &as_kubelet(),
        &Patch::Merge(json!({"status": {"phase": "Running", "containerStatuses": [
            {"name": "node", "image": "pytorch/pytorch:2.10.0", "imageID": "", "ready": true,
             "restartCount": 0, "state": {"running": {"startedAt": "2026-12-03T10:00:00Z"}}}]}})),
    )
    .await
    .expect("pod status");
    // An editor tries to take it away from its Job before any keeper saw it: the owners, the
    // Job controller's label, or both.
    let alice: Api<Pod> = Api::namespaced(s.client(Identity::User).await, ns);
    for (edit, what) in [
        (
            json!({"metadata": {"ownerReferences": null, "labels": {
                holdfast_core::execution::JOB_CONTROLLER_UID_LABEL: null}}}),
            "metadata.ownerReferences of pod",
        ),
        (
            json!({"metadata": {"labels": {
                holdfast_core::execution::JOB_CONTROLLER_UID_LABEL: "another"}}}),
            "metadata.labels of pod",
        ),
        (
            json!({"metadata": {"labels": {execution_owners::JOBSET_NAME_LABEL: null}}}),
            "metadata.labels of pod",
        ),
    ] {
        let refused = alice
            .patch(name, &PatchParams::default(), &Patch::Merge(edit))
            .await
            .expect_err("refused, finalizer or not");
        let message = refused.to_string();
        assert!(
            message.contains(what) && message.contains("kubectl holdfast hold"),
            "{message}"
        );
    }
    // Other labels are hers to change.
    alice
        .patch(
            name,
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"labels": {"team": "a"}}})),
        )
        .await
        .expect("another label");
    // The keeper comes back, and dispatch holds the job; the node is lost, nothing reports.
    let _keeper = keeper(s.cp, ns).await;
    tokio::time::sleep(Duration::from_secs(2)).await;
    exec.hold(ns, "mnist", meta(Some(1), MINUTE))
        .await
        .expect("hold");
    let kept = carries(&pods.get(name).await.expect("the pod runs on"));
    let release = exec.release(ns, "mnist", meta(Some(1), MINUTE)).await;
    let _ = pods.delete(name, &force()).await;
    drop_finalizer(s.cp, ns, name).await;
    assert_eq!(
        (kept, release),
        (true, Err(HoldError::PodsRemain)),
        "a running pod of the held execution, which an editor could not re-own, carries the \
         execution finalizer and still counts"
    );
}

/// The other side of the policy that keeps an execution's owners: Kubernetes' garbage
/// collector still strips them in an orphaning delete of the Job (`kubectl delete job
/// --cascade=orphan`), the Job goes, and the orphan — its JobSet label and the Job
/// controller's `controller-uid` label kept, and no longer changeable — still counts until
/// it ends. Here it runs without the execution finalizer (bound while no keeper ran).
#[tokio::test]
async fn an_orphaning_delete_of_the_job_still_strips_owners_and_the_orphan_still_counts() {
    let s = Scene::new("orphanjob").await;
    let ns = &s.ns;
    register_policy(s.cp, ns).await;
    let admin = &s.admin;
    let node = format!("orphan-{ns}");
    lost_node(admin, &node).await;
    s.job("mnist", true).await;
    let exec = s.executor().await;
    exec.open(ns, "mnist", meta(None, MINUTE))
        .await
        .expect("open");
    let uid = Api::<kube::api::DynamicObject>::namespaced_with(
        admin.clone(),
        ns,
        &holdfast_cluster::resources::trainjob(),
    )
    .get("mnist")
    .await
    .expect("the TrainJob")
    .metadata
    .uid
    .expect("uid");
    let owners = execution_owners::ensure(admin, ns, "mnist", &uid)
        .await
        .expect("owners");
    let job_name = owners[0]["name"].as_str().expect("the Job").to_owned();
    let job_uid = owners[0]["uid"].as_str().expect("the Job's uid").to_owned();
    let name = "mnist-node-0-0";
    let mut pod = execution_owners::pod(
        name,
        "mnist",
        &owners,
        json!({"labels": {holdfast_core::execution::JOB_CONTROLLER_UID_LABEL: job_uid}}),
    );
    pod["spec"]["nodeName"] = json!(node);
    pod["spec"]["restartPolicy"] = json!("Never");
    let pods: Api<Pod> = Api::namespaced(admin.clone(), ns);
    pods.create(
        &kube::api::PostParams::default(),
        &serde_json::from_value(pod).expect("pod"),
    )
    .await
    .expect("pod");
    pods.patch_status(
        name,
        &as_kubelet(),
        &Patch::Merge(json!({"status": {"phase": "Running", "containerStatuses": [
            {"name": "node", "image": "pytorch/pytorch:2.10.0", "imageID": "", "ready": true,
             "restartCount": 0, "state": {"running": {"startedAt": "2026-12-03T10:00:00Z"}}}]}})),
    )
    .await
    .expect("pod status");
    exec.hold(ns, "mnist", meta(Some(1), MINUTE))
        .await
        .expect("hold");

    // `kubectl delete job --cascade=orphan` (by whoever may delete Jobs).
    let jobs = Api::<kube::api::DynamicObject>::namespaced_with(
        admin.clone(),
        ns,
        &holdfast_cluster::resources::job(),
    );
    // Before it, nobody but the garbage collector (not even an admin) unlinks the Job from
    // its JobSet or the JobSet from its TrainJob: either would hide the pod's chain.
    let jobsets = Api::<kube::api::DynamicObject>::namespaced_with(
        admin.clone(),
        ns,
        &holdfast_cluster::resources::jobset(),
    );
    let jobset_name = job_name.trim_end_matches("-node-0").to_owned();
    for (api, object, edit, what) in [
        (
            &jobs,
            &job_name,
            json!({"metadata": {"ownerReferences": null}}),
            "metadata.ownerReferences of Job",
        ),
        (
            &jobs,
            &job_name,
            json!({"metadata": {"labels": {execution_owners::JOBSET_NAME_LABEL: "other"}}}),
            "metadata.labels of Job",
        ),
        (
            &jobsets,
            &jobset_name,
            json!({"metadata": {"ownerReferences": null}}),
            "metadata.ownerReferences of JobSet",
        ),
    ] {
        let refused = api
            .patch(object, &PatchParams::default(), &Patch::Merge(edit))
            .await
            .expect_err("refused");
        assert!(refused.to_string().contains(what), "{refused}");
    }
    jobs.delete(&job_name, &DeleteParams::orphan())
        .await
        .expect("an orphaning delete of the Job");
    wait_for(
        "the garbage collector strips the pod's owners and the Job goes",
        MINUTE,
        || async {
            let p = pods.get(name).await.ok()?;
            let stripped = p
                .metadata
                .owner_references
                .as_ref()
                .is_none_or(Vec::is_empty);
            let job_gone = jobs.get_opt(&job_name).await.ok()?.is_none();
            (stripped && job_gone).then_some(())
        },
    )
    .await;
    let orphan = pods.get(name).await.expect("the orphan runs on");
    let labels = orphan.metadata.labels.clone().unwrap_or_default();
    assert_eq!(
        labels
            .get(execution_owners::JOBSET_NAME_LABEL)
            .map(String::as_str),
        Some("mnist")
    );
    assert_eq!(
        labels
            .get(holdfast_core::execution::JOB_CONTROLLER_UID_LABEL)
            .map(String::as_str),
        Some(job_uid.as_str())
    );
    // Nor may an editor then relabel the orphan, or give it an owner that is no Job.
    let alice = s.client(Identity::User).await;
    let alice_pods: Api<Pod> = Api::namespaced(alice, ns);
    for (edit, what) in [
        (
            json!({"metadata": {"labels": {
                holdfast_core::execution::JOB_CONTROLLER_UID_LABEL: null}}}),
            "metadata.labels of pod",
        ),
        (
            json!({"metadata": {"ownerReferences": [{"apiVersion": "v1", "kind": "ConfigMap",
                "name": "mine", "uid": "00000000-0000-0000-0000-000000000001",
                "controller": true}]}}),
            "metadata.ownerReferences of pod",
        ),
    ] {
        let refused = alice_pods
            .patch(name, &PatchParams::default(), &Patch::Merge(edit))
            .await
            .expect_err("refused");
        assert!(refused.to_string().contains(what), "{refused}");
    }
    assert_eq!(
        exec.release(ns, "mnist", meta(Some(1), MINUTE)).await,
        Err(HoldError::PodsRemain),
        "the orphan carries JobSet's label and the Job controller's: it counts"
    );
    let status = exec.status(ns, "mnist").await.expect("status");
    assert_eq!(
        status
            .remaining_pods
            .iter()
            .map(|p| p.name.as_str())
            .collect::<Vec<_>>(),
        [name]
    );
    // Its kubelet reports it ended: the release goes through.
    pods.patch_status(
        name,
        &as_kubelet(),
        &Patch::Merge(json!({"status": {"phase": "Failed", "containerStatuses": [
            {"name": "node", "image": "pytorch/pytorch:2.10.0", "imageID": "", "ready": false,
             "restartCount": 0, "state": {"terminated": {"exitCode": 143, "reason": "Error",
                "startedAt": "2026-12-03T10:00:00Z", "finishedAt": "2026-12-03T10:05:00Z"}}}]}})),
    )
    .await
    .expect("the kubelet's report");
    assert_eq!(
        exec.release(ns, "mnist", meta(Some(1), MINUTE)).await,
        Ok(Outcome::Released { resumed: true })
    );
    let _ = pods.delete(name, &force()).await;
}

/// A Job of a TrainJob's execution keeps `podReplacementPolicy: Failed`, which holdfast's
/// JobSet mutation gave it: switched back to `TerminatingOrFailed`, the Job controller would
/// replace a lost node's Terminating pod beside its running process. Nobody changes it — not an
/// editor, not a cluster admin — while a Job without it (made before holdfast) stays editable.
#[tokio::test]
async fn nobody_switches_a_trainjobs_job_back_to_terminating_or_failed() {
    let s = Scene::new("keepfailed").await;
    let ns = &s.ns;
    register_policy(s.cp, ns).await;
    let admin = &s.admin;
    let jobs: Api<kube::api::DynamicObject> =
        Api::namespaced_with(admin.clone(), ns, &holdfast_cluster::resources::job());
    let job = |name: &str, policy: &str| {
        serde_json::from_value::<kube::api::DynamicObject>(json!({
            "apiVersion": "batch/v1", "kind": "Job",
            "metadata": {"name": name, "labels": {"jobset.sigs.k8s.io/jobset-name": "mnist"}},
            "spec": {"suspend": true, "podReplacementPolicy": policy,
                "template": {"spec": {"restartPolicy": "Never",
                    "containers": [{"name": "node", "image": "pytorch/pytorch:2.10.0"}]}}}
        }))
        .expect("job")
    };
    let pp = kube::api::PostParams::default();
    jobs.create(&pp, &job("kept", "Failed"))
        .await
        .expect("a Job created with Failed");
    jobs.create(&pp, &job("before", "TerminatingOrFailed"))
        .await
        .expect("a Job made before holdfast");
    let switch = |to: &'static str| Patch::Merge(json!({"spec": {"podReplacementPolicy": to}}));
    match jobs
        .patch(
            "kept",
            &PatchParams::default(),
            &switch("TerminatingOrFailed"),
        )
        .await
    {
        Err(kube::Error::Api(s)) => assert!(
            s.message.contains("spec.podReplacementPolicy of Job")
                && s.message.contains("keeps Failed"),
            "refused by the execution policy, saying why: {}",
            s.message
        ),
        other => panic!("a TrainJob's Job was switched back to TerminatingOrFailed: {other:?}"),
    }
    let kept = jobs.get("kept").await.expect("the Job");
    assert_eq!(kept.data["spec"]["podReplacementPolicy"], "Failed");
    // Other edits of it go on, and a Job that never had Failed is not bound by the rule.
    jobs.patch(
        "kept",
        &PatchParams::default(),
        &Patch::Merge(json!({"metadata": {"labels": {"team": "a"}}})),
    )
    .await
    .expect("another edit of the Job");
    jobs.patch("before", &PatchParams::default(), &switch("Failed"))
        .await
        .expect("a Job without Failed may be given it");
}
