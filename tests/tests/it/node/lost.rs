//! The seed's own scenario on two real nodes: a node is **lost** — its kubelet frozen, its
//! containers still running under its containerd — and "gone" must mean the processes, not the
//! pod objects. The lost node is an extra node of the tier-3 cluster
//! ([`holdfast_tests::extra_node`]); the survivor is the main node. Whether two executions of a
//! rank overlapped is read from containerd's own records on both nodes: the CRI log lines of
//! the workload's heartbeat (every 0.5 s), timestamped by containerd as it read them. The API's
//! timestamps are no proof here: a frozen kubelet reports nothing.
//!
//! kube-controller-manager runs the taint-eviction controller with a node-monitor grace of
//! [`NODE_MONITOR_GRACE`], and the runtimes here tolerate `unreachable` for 2 s, so a lost
//! node's pods go Terminating about 25 s after the loss rather than the default 350 s.

use super::*;
use holdfast_tests::extra_node::{
    CriLine, EXTRA_NODE_TAINT, ExtraNode, POOL_LABEL, cri_lines, label_main_node, ran,
};
use holdfast_tests::node::{NODE_MONITOR_GRACE, NODE_NAME};
use k8s_openapi::api::core::v1::Node;

const MINUTE: Duration = Duration::from_secs(60);

/// A runtime of the workload image for pool `pool`: its pod must run on a node labelled
/// `POOL_LABEL=pool`, tolerates the extra node's taint, tolerates `unreachable` and
/// `not-ready` for 2 s only, prints a heartbeat every 0.5 s and requests a little (Kueue
/// assigns its flavour, and so its checks, only to a pod set that requests something).
/// `backoff_limit`: the Jobs' `backoffLimit` (`None`: Kubernetes' default, 6).
fn lost_node_runtime(
    name: &str,
    image: &str,
    pool: &str,
    backoff_limit: Option<u32>,
) -> serde_json::Value {
    let mut rt = training_runtime(name, image);
    let job = &mut rt["spec"]["template"]["spec"]["replicatedJobs"][0]["template"]["spec"];
    if let Some(limit) = backoff_limit {
        job["backoffLimit"] = limit.into();
    }
    let pod = &mut job["template"]["spec"];
    pod["tolerations"] = serde_json::json!([
        {"key": EXTRA_NODE_TAINT, "operator": "Exists", "effect": "NoSchedule"},
        {"key": "node.kubernetes.io/unreachable", "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 2},
        {"key": "node.kubernetes.io/not-ready", "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 2}
    ]);
    pod["affinity"] = serde_json::json!({"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
        "nodeSelectorTerms": [{"matchExpressions": [{"key": POOL_LABEL, "operator": "In", "values": [pool]}]}]
    }}});
    let c = &mut pod["containers"][0];
    c["env"]
        .as_array_mut()
        .expect("env")
        .push(serde_json::json!({"name": "WORKLOAD_HEARTBEAT_SECONDS", "value": "0.5"}));
    c["resources"] = serde_json::json!({"requests": {"cpu": "10m", "memory": "16Mi"}});
    rt
}

/// One scene: a namespace, a lost-node runtime `workload` in it, and an extra node of the
/// namespace's pool (the main node joins the pool only when [`Scene::survivor_joins`]).
struct Scene<'a> {
    cluster: &'a NodeCluster,
    ns: String,
    admin: kube::Client,
    pods: Api<Pod>,
    trainjobs: Api<DynamicObject>,
    /// The node to lose (`None`: the scene runs on the main node only).
    extra: Option<ExtraNode<'a>>,
    pool: String,
}

impl<'a> Scene<'a> {
    async fn start(
        cluster: &'a NodeCluster,
        prefix: &str,
        with_extra_node: bool,
        backoff_limit: Option<u32>,
    ) -> Self {
        let ns = cluster.namespace(prefix).await.expect("namespace");
        let admin = cluster.client(Identity::Admin).await.expect("client");
        let pool = ns.clone();
        let extra = match with_extra_node {
            true => Some(cluster.add_node(&pool).await.expect("an extra node")),
            false => None,
        };
        create_runtime(
            &admin,
            &ns,
            lost_node_runtime("workload", cluster.workload_image(), &pool, backoff_limit),
        )
        .await;
        Scene {
            cluster,
            pods: Api::namespaced(admin.clone(), &ns),
            trainjobs: Api::namespaced_with(
                admin.clone(),
                &ns,
                &holdfast_cluster::resources::trainjob(),
            ),
            ns,
            admin,
            extra,
            pool,
        }
    }

    /// Creates TrainJob `tj` of the runtime with `labels`, unsuspended unless a webhook says
    /// otherwise.
    async fn create_trainjob(&self, labels: serde_json::Value) {
        let tj: DynamicObject = serde_json::from_value(serde_json::json!({
            "apiVersion": "trainer.kubeflow.org/v1alpha1", "kind": "TrainJob",
            "metadata": {"name": "tj", "labels": labels},
            "spec": {"runtimeRef": {"name": "workload", "kind": "TrainingRuntime", "apiGroup": "trainer.kubeflow.org"}}
        }))
        .expect("trainjob");
        self.trainjobs
            .create(&PostParams::default(), &tj)
            .await
            .expect("create trainjob");
    }

    /// The execution's one new pod (none of `old`), Running on `node`; the old ones may
    /// still be there, Terminating.
    async fn running_on(&self, node: &str, old: &[String], what: &str) -> Pod {
        let new = wait_for(what, Duration::from_secs(120), || async {
            let ps = running_pods(&self.pods, "tj").await;
            let new: Vec<Pod> = ps.into_iter().filter(|p| !old.contains(&uid(p))).collect();
            (!new.is_empty() && new.iter().all(is_running)).then_some(new)
        })
        .await;
        assert_eq!(new.len(), 1, "one new pod (one node, one rank): {new:?}");
        let p = new.into_iter().next().expect("a pod");
        assert_eq!(
            p.spec.as_ref().and_then(|s| s.node_name.as_deref()),
            Some(node),
            "{what}: on {node}"
        );
        p
    }

    /// The seed's scene up to the hold: dispatch opens TrainJob `tj` (as `alice`), its first
    /// execution runs on the extra node, the survivor joins the pool, the extra node is lost,
    /// and dispatch holds the job (hold 1): its pod goes Terminating on the lost node and stays
    /// so. Returns that pod.
    async fn opened_lost_and_held(&mut self, api: &ServiceHoldApi, alice: &str) -> Pod {
        let (status, answer) = api.call(alice, &self.ns, "tj", "open", None).await;
        assert_eq!(status, 200, "open: {answer}");
        let node = self.node().name.clone();
        let lost = self
            .running_on(&node, &[], "the first execution on the extra node")
            .await;
        let name = lost.metadata.name.clone().expect("name");
        self.survivor_joins().await;
        self.lose_node().await;
        let (status, answer) = api.call(alice, &self.ns, "tj", "hold", Some(1)).await;
        assert_eq!(
            (status, &answer),
            (200, &serde_json::json!({"result": "Ok", "outcome": "Held"}))
        );
        wait_for("the held pod Terminating", MINUTE, || async {
            let p = self.pods.get(&name).await.ok()?;
            p.metadata.deletion_timestamp.is_some().then_some(())
        })
        .await;
        lost
    }

    /// The main node joins the pool: a replacement may run there.
    async fn survivor_joins(&self) {
        label_main_node(self.cluster, Some(&self.pool))
            .await
            .expect("label the main node");
    }

    /// Lose the extra node and wait until the node lifecycle controller sees it
    /// (`Ready: Unknown`).
    async fn lose_node(&mut self) {
        self.node_mut().lose().expect("freeze the kubelet");
        let nodes: Api<Node> = Api::all(self.admin.clone());
        let name = self.node().name.clone();
        wait_for(
            "the lost node's Ready condition Unknown",
            NODE_MONITOR_GRACE + MINUTE,
            || async {
                let n = nodes.get(&name).await.ok()?;
                n.status?
                    .conditions?
                    .iter()
                    .any(|c| c.type_ == "Ready" && c.status == "Unknown")
                    .then_some(())
            },
        )
        .await;
    }

    /// What containerd wrote of pod `p`'s container on `dir`'s node.
    fn cri(&self, p: &Pod, dir: &std::path::Path) -> Vec<CriLine> {
        let name = p.metadata.name.as_deref().expect("name");
        let uid = p.metadata.uid.as_deref().expect("uid");
        cri_lines(dir, &self.ns, name, uid, "node").expect("the container's CRI log")
    }

    /// The lost pod's heartbeats go on (its process runs), read twice 1.5 s apart.
    fn still_beating(&self, lost: &Pod) -> jiff::Timestamp {
        let before = ran(&self.cri(lost, &self.node().pod_logs_dir()))
            .expect("the lost pod's lines")
            .last;
        std::thread::sleep(Duration::from_millis(1500));
        let after = ran(&self.cri(lost, &self.node().pod_logs_dir()))
            .expect("the lost pod's lines")
            .last;
        assert!(
            after > before,
            "the lost node's container still runs (its heartbeat went on: {before} then {after})"
        );
        after
    }

    /// From containerd's records on both nodes: the lost pod's container wrote its last line
    /// before the replacement's container wrote its first. Returns (last, first).
    async fn no_overlap(&self, lost: &Pod, next: &Pod) -> (jiff::Timestamp, jiff::Timestamp) {
        let old = ran(&self.cri(lost, &self.node().pod_logs_dir())).expect("the lost pod's lines");
        // A container Running has not necessarily written its first line yet.
        let new = wait_for(
            "the new pod's first line in containerd's log",
            Duration::from_secs(60),
            || async { ran(&self.cri(next, &self.cluster.pod_logs_dir())) },
        )
        .await;
        assert!(
            old.last < new.first,
            "execution N's container on {} wrote until {}, and execution N+1's on {NODE_NAME} started writing at {}: they overlapped",
            self.node().name,
            old.last,
            new.first
        );
        (old.last, new.first)
    }

    /// Every pod of the TrainJob's JobSet now.
    async fn pods_now(&self) -> Vec<Pod> {
        running_pods(&self.pods, "tj").await
    }

    /// The extra node.
    fn node(&self) -> &ExtraNode<'a> {
        self.extra.as_ref().expect("a scene with an extra node")
    }

    fn node_mut(&mut self) -> &mut ExtraNode<'a> {
        self.extra.as_mut().expect("a scene with an extra node")
    }

    async fn finish(mut self) {
        if let Some(node) = self.extra.as_mut() {
            let _ = node.fence();
            let _ = node.delete_node().await;
        }
        let _ = label_main_node(self.cluster, None).await;
        let _ = self.trainjobs.delete("tj", &DeleteParams::default()).await;
    }
}

fn uid(p: &Pod) -> String {
    p.metadata.uid.clone().expect("uid")
}

/// The control run, without holdfast: Trainer and JobSet leave the Jobs'
/// `podReplacementPolicy` at `TerminatingOrFailed`, so once the lost node's pod is evicted
/// (Terminating, its process still running) the Job controller starts a replacement for the
/// same completion index — rank 0 — on the surviving node, beside it. containerd's records on
/// both nodes show both containers running at once: the hazard is real, and this proof can
/// fail.
#[tokio::test]
#[ignore = "tier 3: run with --ignored (builds and starts a real node)"]
async fn without_holdfast_a_lost_nodes_rank_is_replaced_beside_its_running_process() {
    let cluster = NodeCluster::shared();
    let admin = cluster.client(Identity::Admin).await.expect("client");
    let hooks =
        Api::<k8s_openapi::api::admissionregistration::v1::MutatingWebhookConfiguration>::all(
            admin.clone(),
        )
        .list(&ListParams::default())
        .await
        .expect("mutating webhooks");
    let holdfast: Vec<String> = hooks
        .items
        .iter()
        .filter_map(|h| h.metadata.name.clone())
        .filter(|n| n.contains("holdfast"))
        .collect();
    assert!(
        holdfast.is_empty(),
        "the control run needs holdfast absent: {holdfast:?}"
    );

    let mut scene = Scene::start(cluster, "lost-control", true, None).await;
    scene.create_trainjob(serde_json::json!({})).await;
    let lost = scene
        .running_on(
            &scene.node().name.clone(),
            &[],
            "rank 0 Running on the extra node",
        )
        .await;
    let jobs: Api<Job> = Api::namespaced(admin.clone(), &scene.ns);
    let job = jobs
        .list(&ListParams::default().labels("jobset.sigs.k8s.io/jobset-name=tj"))
        .await
        .expect("jobs")
        .items
        .into_iter()
        .next()
        .expect("the Job");
    assert_eq!(
        job.spec.and_then(|s| s.pod_replacement_policy).as_deref(),
        Some("TerminatingOrFailed"),
        "Trainer and JobSet leave the Job at Kubernetes' default"
    );
    scene.survivor_joins().await;
    scene.lose_node().await;
    let replacement = scene
        .running_on(
            NODE_NAME,
            &[uid(&lost)],
            "the replacement Running on the main node",
        )
        .await;
    let evicted = scene
        .pods
        .get(lost.metadata.name.as_deref().expect("name"))
        .await
        .expect("the lost pod is still there, Terminating");
    assert!(
        evicted.metadata.deletion_timestamp.is_some(),
        "taint eviction made it Terminating"
    );
    // Both are rank 0, by what each container printed at its start (read from containerd's
    // files: a frozen kubelet serves no logs).
    for (p, dir) in [
        (&lost, scene.node().pod_logs_dir()),
        (&replacement, cluster.pod_logs_dir()),
    ] {
        let lines = scene.cri(p, &dir);
        let config: serde_json::Value = lines
            .iter()
            .find_map(|l| l.text.strip_prefix("workload: config "))
            .and_then(|c| serde_json::from_str(c).ok())
            .expect("the workload's config line");
        assert_eq!(config["env"]["JOB_COMPLETION_INDEX"], "0", "{config}");
    }
    let beat = scene.still_beating(&lost);
    let new = ran(&scene.cri(&replacement, &cluster.pod_logs_dir())).expect("replacement lines");
    assert!(
        beat > new.first,
        "rank 0 ran on both nodes at once: the lost container's heartbeat at {beat}, the replacement's first line at {}",
        new.first
    );
    eprintln!(
        "control run: rank 0 replaced on {NODE_NAME} at {} while still running on {} (heartbeat at {beat})",
        new.first,
        scene.node().name
    );
    scene.finish().await;
}

/// holdfast on the node: the chart in `mode`, the fencer role bound to nobody (the admin, a
/// cluster-admin, fences), and alice granted every hold call in the scene's namespace.
async fn holdfast_for(
    scene: &Scene<'_>,
    release: &str,
    mode: &str,
) -> (ChartRelease, ServiceHoldApi) {
    let chart = ChartRelease::install(
        scene.cluster,
        release,
        &format!("{release}-system"),
        &[&format!("mode={mode}")],
    )
    .await;
    holdfast_tests::hold_support::api::grant_alice(
        scene.cluster,
        &scene.ns,
        &["open", "hold", "release", "status"],
        &["create", "get"],
    )
    .await;
    let api = chart.hold_api(scene.cluster).await;
    (chart, api)
}

/// Fences the lost node for real (its processes killed, as by a BMC) and then tells holdfast
/// (`POST /v1/nodes/{node}/fence`, as the admin).
async fn fence_for_real(scene: &mut Scene<'_>, api: &ServiceHoldApi) -> jiff::Timestamp {
    let off = scene.node_mut().fence().expect("power the node off");
    assert!(
        scene.node().killed_processes() > 0,
        "the fence killed the lost node's running containers"
    );
    let admin = scene.cluster.token(Identity::Admin).to_owned();
    let (status, answer) = api.fence(&admin, &scene.node().name).await;
    assert_eq!(status, 200, "fence: {answer}");
    off
}

/// The remaining pods Status lists, as (name, node, nodeState, why).
async fn remaining(
    api: &ServiceHoldApi,
    alice: &str,
    ns: &str,
) -> Vec<(String, String, String, String)> {
    let (status, answer) = api.status(alice, ns, "tj").await;
    assert_eq!(status, 200, "status: {answer}");
    answer["remainingPods"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|p| {
            let s = |k: &str| p[k].as_str().unwrap_or_default().to_owned();
            (s("name"), s("node"), s("nodeState"), s("why"))
        })
        .collect()
}

/// holdfast closes the window before a hold: every Job of a TrainJob's JobSet is created with
/// `podReplacementPolicy: Failed`, so when the lost node's pod is evicted (Terminating, its
/// process still running) the Job controller starts no replacement beside it. Once the node is
/// fenced for real — powered off, holdfast told, and the `out-of-service` taint Kubernetes
/// defines for a node shut down — the pod goes and the replacement starts on the surviving
/// node, after the last line of the old container by containerd's records.
#[tokio::test]
#[ignore = "tier 3: run with --ignored (builds and starts a real node)"]
async fn with_holdfast_a_lost_nodes_rank_is_not_replaced_until_the_node_is_fenced() {
    let cluster = NodeCluster::shared();
    let mut scene = Scene::start(cluster, "lost-window", true, None).await;
    let (chart, api) = holdfast_for(&scene, "hfw", "plain").await;
    scene.create_trainjob(serde_json::json!({})).await;
    let lost = scene
        .running_on(
            &scene.node().name.clone(),
            &[],
            "rank 0 Running on the extra node",
        )
        .await;
    let jobs: Api<Job> = Api::namespaced(scene.admin.clone(), &scene.ns);
    let job = jobs
        .list(&ListParams::default().labels("jobset.sigs.k8s.io/jobset-name=tj"))
        .await
        .expect("jobs")
        .items
        .into_iter()
        .next()
        .expect("the Job");
    assert_eq!(
        job.spec.and_then(|s| s.pod_replacement_policy).as_deref(),
        Some("Failed"),
        "holdfast created the Job with podReplacementPolicy Failed"
    );
    scene.survivor_joins().await;
    scene.lose_node().await;
    let name = lost.metadata.name.clone().expect("name");
    wait_for(
        "taint eviction makes the lost pod Terminating",
        MINUTE,
        || async {
            let p = scene.pods.get(&name).await.ok()?;
            p.metadata.deletion_timestamp.is_some().then_some(())
        },
    )
    .await;
    // The process runs on, and for as long as the Job controller would have taken to replace
    // it (it acts on the pod's update at once), no second pod of rank 0 appears.
    scene.still_beating(&lost);
    tokio::time::sleep(Duration::from_secs(10)).await;
    let now: Vec<String> = scene.pods_now().await.iter().map(uid).collect();
    assert_eq!(
        now,
        vec![uid(&lost)],
        "no replacement beside the lost node's running process"
    );
    scene.still_beating(&lost);

    // Fenced for real: powered off, holdfast told, and the out-of-service taint (pod GC then
    // marks the pod Failed and deletes it; holdfast's finalizer goes with the fence).
    fence_for_real(&mut scene, &api).await;
    Api::<Node>::all(scene.admin.clone())
        .patch(
            &scene.node().name,
            &PatchParams::default(),
            &Patch::Merge(serde_json::json!({"spec": {"taints": [
                {"key": "node.kubernetes.io/out-of-service", "value": "nodeshutdown", "effect": "NoExecute"},
                {"key": EXTRA_NODE_TAINT, "value": "true", "effect": "NoSchedule"}
            ]}})),
        )
        .await
        .expect("the out-of-service taint");
    let next = scene
        .running_on(
            NODE_NAME,
            &[uid(&lost)],
            "the replacement Running on the main node",
        )
        .await;
    let (last, first) = scene.no_overlap(&lost, &next).await;
    eprintln!("window: the lost container's last line {last}, the replacement's first {first}");
    scene.finish().await;
    drop(chart);
}

/// The seed's story in plain mode, on two real nodes: a job runs on the extra node; the node is
/// lost; dispatch holds the job, and its pod stays Terminating there. Release answers
/// `PodsRemain`, and Status lists the pod with its node `notReady`. An admin then deletes the
/// Node without fencing (pod GC marks the pod Failed and deletes it for good), an editor
/// force-deletes it and tries to remove its JobSet label (refused): the pod still counts and
/// Release still answers `PodsRemain`. Once the
/// node is fenced for real, the pod goes, Release resumes the job, and its next execution runs
/// on the surviving node only — and by containerd's records on both nodes, after the last line
/// of the old one.
#[tokio::test]
#[ignore = "tier 3: run with --ignored (builds and starts a real node)"]
async fn plain_a_held_job_on_a_lost_node_runs_again_only_after_the_node_is_fenced() {
    let cluster = NodeCluster::shared();
    let mut scene = Scene::start(cluster, "lost-plain", true, None).await;
    let (chart, api) = holdfast_for(&scene, "hfl", "plain").await;
    let alice = cluster.token(Identity::User).to_owned();
    scene
        .create_trainjob(serde_json::json!({"holdfast.dev/managed": "true"}))
        .await;
    let lost = scene.opened_lost_and_held(&api, &alice).await;
    let name = lost.metadata.name.clone().expect("name");
    let release = |why: &'static str| {
        let (api, alice, ns) = (&api, alice.clone(), scene.ns.clone());
        async move {
            let (status, answer) = api.call(&alice, &ns, "tj", "release", Some(1)).await;
            assert_eq!(
                (status, answer["error"].as_str()),
                (423, Some("PodsRemain")),
                "{why}: {answer}"
            );
        }
    };
    release("while the lost node's pod is Terminating").await;
    let rest = remaining(&api, &alice, &scene.ns).await;
    assert_eq!(rest.len(), 1, "{rest:?}");
    assert_eq!(
        (rest[0].0.as_str(), rest[0].1.as_str()),
        (name.as_str(), scene.node().name.as_str())
    );
    assert_eq!(rest[0].2, "notReady", "{rest:?}");

    // An admin deletes the Node without fencing: pod GC marks the pod Failed and deletes it
    // for good (after its 40 s quarantine of a deleted node's pods), and the pod still counts.
    scene.node().delete_node().await.expect("delete the Node");
    wait_for(
        "pod GC marks the pod of the deleted Node Failed",
        Duration::from_secs(150),
        || async {
            let p = scene.pods.get(&name).await.ok()?;
            let failed = p.status.as_ref()?.phase.as_deref() == Some("Failed");
            failed.then_some(p)
        },
    )
    .await;
    let p = scene
        .pods
        .get(&name)
        .await
        .expect("the pod outlives its Node");
    assert!(
        holdfast_tests::lost_node::carries(&p),
        "held by the execution finalizer"
    );
    release("after the Node was deleted and pod GC acted").await;
    // An editor force-deletes the pod: it stays, Terminating, and still counts.
    let editor: Api<Pod> = Api::namespaced(
        cluster.client(Identity::User).await.expect("alice"),
        &scene.ns,
    );
    editor
        .delete(&name, &holdfast_tests::lost_node::force())
        .await
        .expect("an editor may force-delete a pod");
    scene
        .pods
        .get(&name)
        .await
        .expect("the force-deleted pod is still there");
    release("after a force-delete").await;
    // Removing its JobSet label is refused.
    let relabel = editor
        .patch(
            &name,
            &PatchParams::default(),
            &Patch::Merge(serde_json::json!({"metadata": {"labels": {"jobset.sigs.k8s.io/jobset-name": null}}})),
        )
        .await;
    assert!(
        relabel.is_err(),
        "an editor removed the JobSet label: {relabel:?}"
    );
    release("after a refused relabel").await;
    scene.still_beating(&lost);

    fence_for_real(&mut scene, &api).await;
    holdfast_tests::lost_node::gone(&scene.pods, &name, "the fenced node's pod goes").await;
    let (status, answer) = api.call(&alice, &scene.ns, "tj", "release", Some(1)).await;
    assert_eq!(
        (status, &answer),
        (
            200,
            &serde_json::json!({"result": "Ok", "outcome": "Released", "resumed": true})
        )
    );
    let next = scene
        .running_on(
            NODE_NAME,
            &[uid(&lost)],
            "the next execution on the main node",
        )
        .await;
    let (last, first) = scene.no_overlap(&lost, &next).await;
    eprintln!("plain: the lost container's last line {last}, the next execution's first {first}");
    scene.finish().await;
    drop(chart);
}

/// The state of holdfast's readmission check on the TrainJob's live Workload.
async fn gate_state(admin: &kube::Client, ns: &str, check: &str) -> Option<(String, String)> {
    let workloads: Api<DynamicObject> =
        Api::namespaced_with(admin.clone(), ns, &holdfast_cluster::resources::workload());
    let all = workloads.list(&ListParams::default()).await.ok()?.items;
    let w = all
        .into_iter()
        .map(|w| serde_json::to_value(w).expect("json"))
        .find(|w| w["metadata"].get("deletionTimestamp").is_none())?;
    let (state, message) = w["status"]["admissionChecks"]
        .as_array()?
        .iter()
        .find(|c| c["name"] == check)
        .map(|c| {
            (
                c["state"].as_str().unwrap_or_default().to_owned(),
                c["message"].as_str().unwrap_or_default().to_owned(),
            )
        })?;
    Some((state, message))
}

/// The seed's story in Kueue mode, on two real nodes: a queued job runs on the extra node; the
/// node is lost; dispatch holds it (Kueue evicts it, and the pod stays Terminating on the lost
/// node) and releases it at once: Kueue reserves quota again, and holdfast's readmission gate
/// stays Pending while the pod remains — after an editor force-deletes it too. Once the node is
/// fenced for real the gate turns Ready and the next execution runs on the surviving node only,
/// after the last line of the old one by containerd's records.
#[tokio::test]
#[ignore = "tier 3: run with --ignored (builds and starts a real node)"]
async fn kueue_a_held_job_on_a_lost_node_is_readmitted_only_after_the_node_is_fenced() {
    let cluster = NodeCluster::shared();
    cluster.start_kueue().await.expect("kueue starts");
    let mut scene = Scene::start(cluster, "lost-kueue", true, None).await;
    let (chart, api) = holdfast_for(&scene, "hflq", "kueue").await;
    let check = format!("{}-readmission", chart.fullname());
    holdfast_tests::kueue::create_queues(&scene.admin, &scene.ns, "main", &[check.as_str()])
        .await
        .expect("queues");
    let alice = cluster.token(Identity::User).to_owned();
    scene
        .create_trainjob(serde_json::json!({
            "holdfast.dev/managed": "true", "kueue.x-k8s.io/queue-name": "main"
        }))
        .await;
    wait_for("the Workload at the start gate", MINUTE, || async {
        let (state, message) = gate_state(&scene.admin, &scene.ns, &check).await?;
        (state == "Pending" && message.contains("start gate")).then_some(())
    })
    .await;
    let lost = scene.opened_lost_and_held(&api, &alice).await;
    let name = lost.metadata.name.clone().expect("name");
    let (status, answer) = api.call(&alice, &scene.ns, "tj", "release", Some(1)).await;
    assert_eq!(status, 200, "release: {answer}");
    let pending = |why: &'static str| {
        let (admin, ns, check) = (scene.admin.clone(), scene.ns.clone(), check.clone());
        async move {
            wait_for(why, MINUTE, || async {
                let (state, message) = gate_state(&admin, &ns, &check).await?;
                (state == "Pending" && !message.contains("start gate")).then_some(())
            })
            .await;
        }
    };
    pending("the gate Pending while the lost node's pod remains").await;
    let editor: Api<Pod> = Api::namespaced(
        cluster.client(Identity::User).await.expect("alice"),
        &scene.ns,
    );
    editor
        .delete(&name, &holdfast_tests::lost_node::force())
        .await
        .expect("an editor may force-delete a pod");
    tokio::time::sleep(Duration::from_secs(5)).await;
    scene
        .pods
        .get(&name)
        .await
        .expect("the force-deleted pod is still there");
    pending("the gate still Pending after a force-delete").await;
    let now: Vec<String> = scene.pods_now().await.iter().map(uid).collect();
    assert_eq!(now, vec![uid(&lost)], "no pod of the next execution yet");
    scene.still_beating(&lost);

    fence_for_real(&mut scene, &api).await;
    holdfast_tests::lost_node::gone(&scene.pods, &name, "the fenced node's pod goes").await;
    let next = scene
        .running_on(
            NODE_NAME,
            &[uid(&lost)],
            "the next execution on the main node",
        )
        .await;
    let (state, _) = gate_state(&scene.admin, &scene.ns, &check)
        .await
        .expect("the gate");
    assert_eq!(state, "Ready", "the gate opened");
    let (last, first) = scene.no_overlap(&lost, &next).await;
    eprintln!("kueue: the lost container's last line {last}, the next execution's first {first}");
    scene.finish().await;
    drop(chart);
}

/// Holds never fail a job: a job whose Jobs allow one failure (`backoffLimit: 1`) is held and
/// released three times — `backoffLimit + 2` — on the real node, and still runs after the last
/// release: the pods a hold's suspension deletes are not counted as failures, and the Job's
/// `status.failed` stays 0.
#[tokio::test]
#[ignore = "tier 3: run with --ignored (builds and starts a real node)"]
async fn holds_never_fail_a_job_held_and_released_backoff_limit_plus_two_times() {
    const BACKOFF_LIMIT: u32 = 1;
    let cluster = NodeCluster::shared();
    let scene = Scene::start(cluster, "lost-backoff", false, Some(BACKOFF_LIMIT)).await;
    // This one runs on the main node only: no extra node, the main node in the pool.
    scene.survivor_joins().await;
    let (chart, api) = holdfast_for(&scene, "hfb", "plain").await;
    let alice = cluster.token(Identity::User).to_owned();
    scene
        .create_trainjob(serde_json::json!({"holdfast.dev/managed": "true"}))
        .await;
    let (status, answer) = api.call(&alice, &scene.ns, "tj", "open", None).await;
    assert_eq!(status, 200, "open: {answer}");
    let mut current = scene
        .running_on(NODE_NAME, &[], "the first execution")
        .await;
    let mut seen = vec![uid(&current)];
    for instance in 1..=u64::from(BACKOFF_LIMIT) + 2 {
        let (status, answer) = api
            .call(&alice, &scene.ns, "tj", "hold", Some(instance))
            .await;
        assert_eq!(status, 200, "hold {instance}: {answer}");
        wait_for(
            "the held execution gone",
            Duration::from_secs(90),
            || async { scene.pods_now().await.is_empty().then_some(()) },
        )
        .await;
        let (status, answer) = api
            .call(&alice, &scene.ns, "tj", "release", Some(instance))
            .await;
        assert_eq!(
            (status, &answer["resumed"]),
            (200, &serde_json::json!(true)),
            "release {instance}: {answer}"
        );
        current = scene
            .running_on(NODE_NAME, &seen, "the next execution after a release")
            .await;
        seen.push(uid(&current));
    }
    let jobs: Api<Job> = Api::namespaced(scene.admin.clone(), &scene.ns);
    let job = jobs
        .list(&ListParams::default().labels("jobset.sigs.k8s.io/jobset-name=tj"))
        .await
        .expect("jobs")
        .items
        .into_iter()
        .next()
        .expect("the Job");
    let status = job.status.unwrap_or_default();
    assert_eq!(
        status.failed.unwrap_or(0),
        0,
        "no hold counted as a failure: {status:?}"
    );
    assert!(
        status
            .conditions
            .unwrap_or_default()
            .iter()
            .all(|c| !(c.type_ == "Failed" && c.status == "True")),
        "the Job did not fail"
    );
    let tj = scene.trainjobs.get("tj").await.expect("tj");
    let failed = tj.data["status"]["conditions"]
        .as_array()
        .into_iter()
        .flatten()
        .any(|c| c["type"] == "Failed" && c["status"] == "True");
    assert!(!failed, "the TrainJob did not fail: {}", tj.data["status"]);
    assert!(is_running(&current), "the job runs after the last release");
    scene.finish().await;
    drop(chart);
}
