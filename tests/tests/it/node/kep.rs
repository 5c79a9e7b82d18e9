//! KEP-2599's own test plan (issue #16), run on the real node with holdfast installed by its
//! chart: each test is named after the KEP line it runs.

use super::{
    ChartRelease, ServiceHoldApi, config_of, is_running, next_execution, running_pods,
    snapshot_edit_is_refused, training_runtime,
};
use holdfast_tests::Identity;
use holdfast_tests::kueue;
use holdfast_tests::node::{NodeCluster, TrainerRelease, jobset_resource};
use holdfast_tests::objects::{trainer_resource, trainjob_resource};
use holdfast_tests::wait::wait_for;
use k8s_openapi::api::core::v1::{ConfigMap, Pod};
use kube::api::{Api, DeleteParams, DynamicObject, ListParams, Patch, PatchParams, PostParams};
use serde_json::{Value, json};
use std::time::Duration;

/// The runtime's one container, as a JSON pointer.
const CONTAINER: &str =
    "/spec/template/spec/replicatedJobs/0/template/spec/template/spec/containers/0";

/// The image the runtime is edited to: the workload's content under a second name.
pub(super) const EDITED_IMAGE: &str = "localhost/holdfast/workload-kep-edited:1";

/// A runtime's configuration as the KEP's e2e test names it: image, command, env (the
/// workload's `WORKLOAD_MARK`) and numNodes.
#[derive(Clone, Debug, PartialEq)]
pub(super) struct Config {
    image: String,
    command: Vec<String>,
    mark: String,
    num_nodes: i64,
}

impl Config {
    pub(super) fn original(cluster: &NodeCluster, runtime: &str) -> Config {
        Config {
            image: cluster.workload_image().to_owned(),
            command: vec!["/workload".into(), "original".into()],
            mark: format!("runtime-{runtime}"),
            num_nodes: 1,
        }
    }

    pub(super) fn edited() -> Config {
        Config {
            image: EDITED_IMAGE.to_owned(),
            command: vec!["/workload".into(), "edited".into()],
            mark: "edited".into(),
            num_nodes: 2,
        }
    }
}

/// `training_runtime` with an explicit command and resource requests (Kueue assigns a
/// flavor, and so the ClusterQueue's AdmissionChecks, only to pod sets that request some).
fn kep_runtime(cluster: &NodeCluster, name: &str) -> Value {
    let original = Config::original(cluster, name);
    let mut rt = training_runtime(name, &original.image);
    let c = rt.pointer_mut(CONTAINER).expect("the runtime's container");
    c["command"] = json!(original.command);
    c["resources"] = json!({"requests": {"cpu": "10m", "memory": "16Mi"}});
    rt
}

/// One namespace's TrainJobs, runtimes, JobSets, pods and snapshots.
pub(super) struct Jobs {
    pub(super) ns: String,
    runtimes: Api<DynamicObject>,
    pub(super) trainjobs: Api<DynamicObject>,
    jobsets: Api<DynamicObject>,
    pub(super) pods: Api<Pod>,
    pub(super) snapshots: Api<ConfigMap>,
}

impl Jobs {
    async fn new(cluster: &NodeCluster, prefix: &str) -> Jobs {
        let ns = cluster.namespace(prefix).await.expect("namespace");
        let admin = cluster.client(Identity::Admin).await.expect("client");
        Jobs {
            runtimes: Api::namespaced_with(
                admin.clone(),
                &ns,
                &trainer_resource("TrainingRuntime", "trainingruntimes"),
            ),
            trainjobs: Api::namespaced_with(admin.clone(), &ns, &trainjob_resource()),
            jobsets: Api::namespaced_with(admin.clone(), &ns, &jobset_resource()),
            pods: Api::namespaced(admin.clone(), &ns),
            snapshots: Api::namespaced(admin, &ns),
            ns,
        }
    }

    pub(super) async fn create_runtime(&self, cluster: &NodeCluster, name: &str) {
        let rt: DynamicObject =
            serde_json::from_value(kep_runtime(cluster, name)).expect("runtime");
        self.runtimes
            .create(&PostParams::default(), &rt)
            .await
            .expect("create runtime");
    }

    /// A TrainJob of runtime `runtime` with `labels`; returns it as created (after admission).
    pub(super) async fn create_trainjob(
        &self,
        name: &str,
        runtime: &str,
        labels: Value,
    ) -> DynamicObject {
        let tj: DynamicObject = serde_json::from_value(json!({
            "apiVersion": "trainer.kubeflow.org/v1alpha1", "kind": "TrainJob",
            "metadata": {"name": name, "labels": labels},
            "spec": {"runtimeRef": {"name": runtime, "kind": "TrainingRuntime", "apiGroup": "trainer.kubeflow.org"}}
        }))
        .expect("trainjob");
        self.trainjobs
            .create(&PostParams::default(), &tj)
            .await
            .expect("create trainjob")
    }

    /// The KEP's update of the runtime: image, command, env and numNodes, all at once.
    pub(super) async fn edit_runtime(&self, name: &str) {
        let edited = Config::edited();
        let patch: json_patch::Patch = serde_json::from_value(json!([
            {"op": "replace", "path": format!("{CONTAINER}/image"), "value": edited.image},
            {"op": "replace", "path": format!("{CONTAINER}/command"), "value": edited.command},
            {"op": "replace", "path": format!("{CONTAINER}/env/1/value"), "value": edited.mark},
            {"op": "replace", "path": "/spec/mlPolicy/numNodes", "value": edited.num_nodes}
        ]))
        .expect("patch");
        self.runtimes
            .patch(name, &PatchParams::default(), &Patch::<()>::Json(patch))
            .await
            .expect("update the runtime");
    }

    /// `spec.suspend` of the TrainJob (the KEP's pause without holdfast's hold).
    pub(super) async fn suspend(&self, job: &str, suspend: bool) {
        self.trainjobs
            .patch(
                job,
                &PatchParams::default(),
                &Patch::Merge(json!({"spec": {"suspend": suspend}})),
            )
            .await
            .expect("spec.suspend");
    }

    /// The job's pods, once there are some, all Running and none of `old`.
    async fn execution(&self, job: &str, old: &[String]) -> Vec<Pod> {
        next_execution(
            &self.pods,
            job,
            old,
            "an execution of the job Running",
            Duration::from_secs(150),
        )
        .await
    }

    /// Wait until the job's pods are gone; on timeout, panic with the JobSet's state and
    /// Trainer's log.
    pub(super) async fn pods_gone(&self, cluster: &NodeCluster, job: &str) {
        let deadline = std::time::Instant::now() + Duration::from_secs(90);
        while !running_pods(&self.pods, job).await.is_empty() {
            if std::time::Instant::now() > deadline {
                let js = self.jobsets.get_opt(job).await.ok().flatten();
                panic!(
                    "{job}'s pods not gone after 90s; JobSet suspend: {:?}\ntrainer:\n{}",
                    js.map(|j| j.data["spec"]["suspend"].clone()),
                    cluster.log_tail("trainer", 15)
                );
            }
            tokio::time::sleep(Duration::from_millis(250)).await;
        }
    }

    /// Trainer's log lines saying its update of this job's JobSet was rejected.
    fn refusals(&self, cluster: &NodeCluster, job: &str) -> usize {
        let ns = format!("\"namespace\":\"{}\"", self.ns);
        let name = format!("\"name\":\"{job}\"");
        cluster
            .log_tail("trainer", 100_000)
            .lines()
            .filter(|l| {
                l.contains("Reconciler error")
                    && l.contains(&ns)
                    && l.contains(&name)
                    // v2.2.1 says `patch jobsets...`; v2.3.0 quotes JobSet's webhook.
                    && (l.contains("patch jobsets") || l.contains("webhook \\\"vjobset.kb.io\\\" denied"))
            })
            .count()
    }

    /// A pause (`pause`: `spec.suspend`, or a hold) that does not take, where the JobSet
    /// Trainer computes differs from the one the job runs: JobSet refuses a change of a
    /// JobSet's pod template (shown with a dry-run of the same change); after the pause the
    /// TrainJob is suspended, Trainer's update of the JobSet is refused (its log says so), and
    /// the JobSet stays unsuspended, its pods (`running`) running.
    async fn pause_refused(
        &self,
        cluster: &NodeCluster,
        job: &str,
        running: &[String],
        pause: impl std::future::Future<Output = ()>,
    ) {
        let dry = PatchParams {
            dry_run: true,
            ..Default::default()
        };
        let change: json_patch::Patch = serde_json::from_value(json!([
            {"op": "add", "path": "/spec/suspend", "value": true},
            {"op": "replace", "path": "/spec/replicatedJobs/0/template/spec/template/spec/containers/0/image", "value": "changed"}
        ]))
        .expect("patch");
        match self
            .jobsets
            .patch(job, &dry, &Patch::<()>::Json(change))
            .await
        {
            Err(kube::Error::Api(s)) => assert!(
                s.message.contains("immutable"),
                "JobSet's refusal: {}",
                s.message
            ),
            other => panic!("JobSet accepted a pod template change: {other:?}"),
        }
        let before = self.refusals(cluster, job);
        pause.await;
        wait_for(
            "the TrainJob suspended",
            Duration::from_secs(60),
            || async {
                let tj = self.trainjobs.get(job).await.ok()?;
                (tj.data["spec"]["suspend"] == true).then_some(())
            },
        )
        .await;
        let deadline = std::time::Instant::now() + Duration::from_secs(60);
        while self.refusals(cluster, job) <= before {
            assert!(
                std::time::Instant::now() < deadline,
                "no refusal of Trainer's JobSet patch for {job} in 60s after the pause:\n{}",
                cluster.log_tail("trainer", 8)
            );
            tokio::time::sleep(Duration::from_millis(250)).await;
        }
        let js = self.jobsets.get(job).await.expect("the JobSet");
        assert_ne!(
            js.data["spec"]["suspend"], true,
            "the JobSet is not suspended"
        );
        let now: Vec<String> = running_pods(&self.pods, job)
            .await
            .iter()
            .filter(|p| is_running(p))
            .filter_map(|p| p.metadata.uid.clone())
            .collect();
        assert_eq!(now, running, "the first execution's pods still run");
    }

    /// Delete the job's JobSet (its Jobs and pods go with it) and wait until Trainer has
    /// created it again (suspended, as the TrainJob is).
    async fn recreate_jobset(&self, cluster: &NodeCluster, job: &str) {
        let old = self
            .jobsets
            .get(job)
            .await
            .expect("the JobSet")
            .metadata
            .uid;
        self.jobsets
            .delete(job, &DeleteParams::background())
            .await
            .expect("delete the JobSet");
        self.pods_gone(cluster, job).await;
        wait_for("Trainer's new JobSet", Duration::from_secs(60), || async {
            let js = self.jobsets.get_opt(job).await.ok().flatten()?;
            (js.metadata.uid != old && js.metadata.deletion_timestamp.is_none()).then_some(())
        })
        .await;
    }

    /// The job's snapshot ConfigMap once it exists.
    pub(super) async fn snapshot(&self, job: &str) -> ConfigMap {
        let name = format!("{job}-runtime-snapshot");
        wait_for("the snapshot", Duration::from_secs(60), || async {
            self.snapshots.get_opt(&name).await.ok().flatten()
        })
        .await
    }

    /// Assert what the KEP's e2e test checks: the JobSet's template and the running pods'
    /// image, command and env (from the pod's spec and from the container's own log) are
    /// `want`, and there are numNodes pods. Waits for the execution (new pods, not `old`).
    pub(super) async fn assert_runs(
        &self,
        job: &str,
        old: &[String],
        want: &Config,
    ) -> Vec<String> {
        self.execution(job, old).await;
        // All numNodes pods of the execution (the first one Running may be alone for a moment).
        let pods = wait_for("numNodes pods Running", Duration::from_secs(60), || async {
            let new: Vec<Pod> = running_pods(&self.pods, job)
                .await
                .into_iter()
                .filter(|p| !old.contains(p.metadata.uid.as_ref().unwrap_or(&String::new())))
                .collect();
            (new.len() as i64 >= want.num_nodes && new.iter().all(is_running)).then_some(new)
        })
        .await;
        // The JobSet Trainer wrote for this execution (its pods exist, so it was written).
        let js = self.jobsets.get(job).await.expect("the JobSet");
        let rj = &js.data["spec"]["replicatedJobs"][0]["template"]["spec"];
        let c = &rj["template"]["spec"]["containers"][0];
        let mark = c["env"]
            .as_array()
            .into_iter()
            .flatten()
            .find(|e| e["name"] == "WORKLOAD_MARK")
            .map(|e| e["value"].clone());
        assert_eq!(
            (
                c["image"].as_str(),
                &c["command"],
                mark,
                rj["parallelism"].as_i64()
            ),
            (
                Some(want.image.as_str()),
                &json!(want.command),
                Some(json!(want.mark)),
                Some(want.num_nodes)
            ),
            "{job}: the JobSet's template (image, command, WORKLOAD_MARK, parallelism = numNodes)"
        );
        assert_eq!(pods.len() as i64, want.num_nodes, "{job}: numNodes pods");
        for p in &pods {
            let name = p.metadata.name.as_deref().expect("name");
            let spec = &p.spec.as_ref().expect("spec").containers[0];
            assert_eq!(
                spec.image.as_deref(),
                Some(want.image.as_str()),
                "{name}'s image"
            );
            assert_eq!(
                spec.command.as_ref(),
                Some(&want.command),
                "{name}'s command"
            );
            let config = config_of(&self.pods, name, "node").await;
            assert_eq!(config["argv"], json!(want.command), "{name} runs: {config}");
            assert_eq!(
                config["env"]["WORKLOAD_MARK"], want.mark,
                "{name}'s env: {config}"
            );
        }
        pods.iter().filter_map(|p| p.metadata.uid.clone()).collect()
    }

    pub(super) async fn delete(&self, job: &str) {
        self.trainjobs
            .delete(job, &DeleteParams::default())
            .await
            .expect("delete trainjob");
    }
}

/// holdfast installed by its chart in plain or kueue mode, a namespace for the test's jobs (in
/// kueue mode with a LocalQueue `main` of a ClusterQueue naming the chart's AdmissionCheck),
/// and alice allowed to call the hold API, reached through the controller's Service.
pub(super) struct Installed {
    pub(super) release: ChartRelease,
    pub(super) jobs: Jobs,
    api: ServiceHoldApi,
    alice: String,
    /// The ClusterQueue, in kueue mode.
    cluster_queue: Option<String>,
}

impl Installed {
    pub(super) async fn new(
        cluster: &NodeCluster,
        name: &str,
        kueue_mode: bool,
        prefix: &str,
    ) -> Self {
        let mode = if kueue_mode {
            cluster.start_kueue().await.expect("kueue starts");
            "mode=kueue"
        } else {
            "mode=plain"
        };
        let release =
            ChartRelease::install(cluster, name, &format!("{name}-system"), &[mode]).await;
        let jobs = Jobs::new(cluster, prefix).await;
        let mut cluster_queue = None;
        if kueue_mode {
            let admin = cluster.client(Identity::Admin).await.expect("client");
            let check = format!("{}-readmission", release.fullname());
            kueue::create_queues(&admin, &jobs.ns, "main", &[check.as_str()])
                .await
                .expect("queues");
            cluster_queue = Some(format!("cq-{}", jobs.ns));
        }
        holdfast_tests::hold_support::api::grant_alice(
            cluster,
            &jobs.ns,
            &["open", "hold", "release"],
            &["create"],
        )
        .await;
        Installed {
            api: release.hold_api(cluster).await,
            alice: cluster.token(Identity::User).to_owned(),
            release,
            jobs,
            cluster_queue,
        }
    }

    /// A TrainJob's labels here: queued in kueue mode, and `more`.
    pub(super) fn labels(&self, more: Value) -> Value {
        let mut labels = more;
        if self.cluster_queue.is_some() {
            labels["kueue.x-k8s.io/queue-name"] = json!("main");
        }
        labels
    }

    /// Call the hold API as alice and check its outcome.
    pub(super) async fn call(&self, job: &str, call: &str, instance: Option<u64>, outcome: &str) {
        let (status, answer) = self
            .api
            .call(&self.alice, &self.jobs.ns, job, call, instance)
            .await;
        assert_eq!(
            (status, answer["outcome"].as_str()),
            (200, Some(outcome)),
            "{call}: {answer}"
        );
    }

    /// A managed TrainJob of `runtime`, created and opened; its first execution, checked to
    /// run the runtime's original configuration (uids).
    async fn start(&self, cluster: &NodeCluster, job: &str, runtime: &str) -> Vec<String> {
        let labels = self.labels(json!({"holdfast.dev/managed": "true"}));
        let created = self.jobs.create_trainjob(job, runtime, labels).await;
        self.call(job, "open", None, "Opened").await;
        let first = self
            .jobs
            .assert_runs(job, &[], &Config::original(cluster, runtime))
            .await;
        assert_snapshot_structure(&self.jobs.snapshot(job).await, &created, runtime);
        first
    }

    /// Hold the job (its first hold: instance 1) and wait until its pods are gone. In kueue
    /// mode the hold waits for an admitted Workload first: Kueue v0.19.2 computes a TrainJob's
    /// pod sets from the live runtime (not its snapshot), so after a runtime edit it may
    /// replace the job's Workload (README, "KEP-2599's test plan on the node"), and a hold in
    /// between answers NoWorkload.
    pub(super) async fn hold(&self, cluster: &NodeCluster, job: &str) {
        if self.cluster_queue.is_some() {
            self.admitted_workload(cluster, job, None).await;
        }
        self.call(job, "hold", Some(1), "Held").await;
        self.jobs.pods_gone(cluster, job).await;
    }

    /// Waits for a live Workload of `job` (its TrainJob's controller ownerReference) that
    /// Kueue has admitted, and if `image` is given, whose pod set runs `image` (Kueue builds
    /// a Workload's pod sets from the live runtime: after a runtime edit, the Workload Kueue
    /// keeps).
    pub(super) async fn admitted_workload(
        &self,
        cluster: &NodeCluster,
        job: &str,
        image: Option<&str>,
    ) {
        let admin = cluster.client(Identity::Admin).await.expect("client");
        let workloads: Api<DynamicObject> = Api::namespaced_with(
            admin,
            &self.jobs.ns,
            &kueue::api_resource("Workload", "workloads"),
        );
        wait_for(
            &format!("an admitted Workload of {job}"),
            Duration::from_secs(120),
            || async {
                let list = workloads.list(&ListParams::default()).await.ok()?;
                list.items
                    .iter()
                    .any(|w| {
                        let v = serde_json::to_value(w).unwrap_or_default();
                        let owned = v["metadata"]["ownerReferences"]
                            .as_array()
                            .into_iter()
                            .flatten()
                            .any(|r| {
                                r["kind"] == "TrainJob"
                                    && r["name"] == job
                                    && r["controller"] == true
                            });
                        let admitted = v["status"]["conditions"]
                            .as_array()
                            .into_iter()
                            .flatten()
                            .any(|c| c["type"] == "Admitted" && c["status"] == "True");
                        let runs =
                            v["spec"]["podSets"][0]["template"]["spec"]["containers"][0]["image"]
                                .as_str();
                        owned
                            && admitted
                            && image.is_none_or(|i| runs == Some(i))
                            && v["metadata"]["deletionTimestamp"].is_null()
                    })
                    .then_some(())
            },
        )
        .await;
    }

    /// `helm uninstall`; in kueue mode the ClusterQueue goes too (the chart's AdmissionCheck
    /// stays until no ClusterQueue names it).
    pub(super) async fn uninstall(mut self, cluster: &NodeCluster) {
        self.release.uninstall().expect("helm uninstall");
        if let Some(cq) = self.cluster_queue {
            let admin = cluster.client(Identity::Admin).await.expect("client");
            Api::<DynamicObject>::all_with(
                admin,
                &kueue::api_resource("ClusterQueue", "clusterqueues"),
            )
            .delete(&cq, &DeleteParams::default())
            .await
            .expect("delete the ClusterQueue");
        }
    }
}

/// The KEP's e2e flow with holdfast's hold as the pause: a managed TrainJob is opened, runs,
/// is held (its pods gone), its runtime updated, released; the new execution runs the
/// original configuration.
async fn paused_by_a_hold_keeps_the_original(cluster: &NodeCluster, installed: &Installed) {
    installed.jobs.create_runtime(cluster, "held").await;
    let first = installed.start(cluster, "held", "held").await;
    installed.hold(cluster, "held").await;
    installed.jobs.edit_runtime("held").await;
    installed.call("held", "release", Some(1), "Released").await;
    installed
        .jobs
        .assert_runs("held", &first, &Config::original(cluster, "held"))
        .await;
    installed.jobs.delete("held").await;
}

/// Priority classes for the preemption case (cluster-scoped; applied, so a rerun finds them).
async fn priority_classes(admin: &kube::Client) {
    let api: Api<DynamicObject> = Api::all_with(
        admin.clone(),
        &kueue::api_resource("WorkloadPriorityClass", "workloadpriorityclasses"),
    );
    for (name, value) in [("kep-low", 10), ("kep-high", 1000)] {
        let obj = json!({"apiVersion": kueue::KUEUE_API_VERSION, "kind": "WorkloadPriorityClass",
            "metadata": {"name": name}, "value": value});
        api.patch(
            name,
            &PatchParams::apply("holdfast-tests").force(),
            &Patch::Apply(&obj),
        )
        .await
        .expect("WorkloadPriorityClass");
    }
}

/// KEP-2599, e2e: "updating TrainingRuntime does not affect a paused TrainJob: create runtime
/// + train job, allow train job to start, pause train job, update the runtime, restart the
/// train job. TrainJob should use the original configuration." The update changes image,
/// command, env and numNodes; the check reads the new pods' image, command and env (spec and
/// the container's own log) and the JobSet's template. Plain mode: paused by holdfast's hold
/// (through the hold API's Service). Kueue mode: paused by a hold, and separately by Kueue's
/// own preemption (a higher-priority TrainJob in the same ClusterQueue, whose quota fits one).
#[tokio::test]
#[ignore = "tier 3: run with --ignored (builds and starts a real node)"]
async fn e2e_updating_a_training_runtime_does_not_affect_a_paused_trainjob() {
    let cluster = NodeCluster::shared();
    let admin = cluster.client(Identity::Admin).await.expect("client");
    let workload = cluster.workload_image().to_owned();
    cluster.tag_image(&workload, EDITED_IMAGE).expect("tag");

    // Plain mode: a hold.
    let plain = Installed::new(cluster, "kep", false, "kep-e2e-plain").await;
    paused_by_a_hold_keeps_the_original(cluster, &plain).await;
    plain.uninstall(cluster).await;

    // Kueue mode: a hold, then Kueue's preemption.
    let installed = Installed::new(cluster, "kepq", true, "kep-e2e-kueue").await;
    paused_by_a_hold_keeps_the_original(cluster, &installed).await;
    let jobs = &installed.jobs;
    let cq = installed.cluster_queue.clone().expect("kueue mode");

    // Preemption: the ClusterQueue's CPU (25m) fits the running job (10m) or the
    // higher-priority one (two nodes, 20m), not both: Kueue preempts the running one.
    // Unmanaged jobs: no start gate; the readmission gate still applies. Kueue computes a
    // TrainJob's pod sets from the live runtime, so the preempted job, readmitted after its
    // runtime's update, may ask for 20m: the quota fits that too.
    priority_classes(&admin).await;
    let cqs: Api<DynamicObject> = Api::all_with(
        admin.clone(),
        &kueue::api_resource("ClusterQueue", "clusterqueues"),
    );
    cqs.patch(
        &cq,
        &PatchParams::default(),
        &Patch::Merge(json!({"spec": {
            "preemption": {"withinClusterQueue": "LowerPriority"},
            "resourceGroups": [{
                "coveredResources": ["cpu", "memory"],
                "flavors": [{"name": format!("flavor-{}", jobs.ns), "resources": [
                    {"name": "cpu", "nominalQuota": "25m"},
                    {"name": "memory", "nominalQuota": "1000Gi"}
                ]}]
            }]
        }})),
    )
    .await
    .expect("a small quota with preemption");
    for rt in ["preempted", "preemptor"] {
        jobs.create_runtime(cluster, rt).await;
    }
    // The preemptor runs the updated configuration: two nodes.
    jobs.edit_runtime("preemptor").await;
    let with_priority = |class: &str| json!({"kueue.x-k8s.io/queue-name": "main", "kueue.x-k8s.io/priority-class": class});
    jobs.create_trainjob("preempted", "preempted", with_priority("kep-low"))
        .await;
    let original = Config::original(cluster, "preempted");
    let first = jobs.assert_runs("preempted", &[], &original).await;
    jobs.create_trainjob("preemptor", "preemptor", with_priority("kep-high"))
        .await;
    wait_for(
        "Kueue suspends the preempted TrainJob",
        Duration::from_secs(90),
        || async {
            let tj = jobs.trainjobs.get("preempted").await.ok()?;
            (tj.data["spec"]["suspend"] == true).then_some(())
        },
    )
    .await;
    jobs.pods_gone(cluster, "preempted").await;
    jobs.execution("preemptor", &[]).await;
    jobs.edit_runtime("preempted").await;
    // The preemptor done: its quota frees, Kueue readmits the preempted job.
    jobs.delete("preemptor").await;
    jobs.assert_runs("preempted", &first, &original).await;
    jobs.delete("preempted").await;

    installed.uninstall(cluster).await;
}

/// Switches the node back to the current Trainer when dropped (a failing test must not leave
/// the previous one running for the tests after it).
struct CurrentTrainerBack(&'static NodeCluster);

impl Drop for CurrentTrainerBack {
    fn drop(&mut self) {
        if self.0.trainer_release() == TrainerRelease::Current {
            return;
        }
        if let Err(e) = self.0.replace_trainer(TrainerRelease::Current) {
            eprintln!("switching back to the current Trainer: {e:#}");
        }
    }
}

/// Which field manager created the ConfigMap (its first managedFields entry).
pub(super) fn creator(cm: &ConfigMap) -> String {
    cm.metadata
        .managed_fields
        .as_ref()
        .and_then(|f| f.first())
        .and_then(|f| f.manager.clone())
        .unwrap_or_default()
}

pub(super) fn runtime_yaml(cm: &ConfigMap) -> String {
    cm.data
        .as_ref()
        .and_then(|d| d.get("runtime"))
        .cloned()
        .expect("the snapshot's runtime key")
}

/// No holdfast controller is running anywhere (an earlier test's release is uninstalled
/// without `--wait`; its pods may still be terminating).
async fn no_holdfast_controller(admin: &kube::Client) {
    let pods: Api<Pod> = Api::all(admin.clone());
    wait_for(
        "no holdfast controller pod left",
        Duration::from_secs(90),
        || async {
            let lp = ListParams::default().labels("app.kubernetes.io/component=controller");
            pods.list(&lp).await.ok()?.items.is_empty().then_some(())
        },
    )
    .await;
}

/// The KEP's migration ("a runtime modified after a TrainJob was created but before the
/// upgrade is snapshotted in its modified state"), staged on the real controllers. Control,
/// Trainer alone: v2.2.1 runs a job, its runtime is updated, the controller is upgraded to
/// v2.3.0, which snapshots the *updated* runtime, and the paused and resumed job runs the
/// updated configuration. With holdfast installed while v2.2.1 still runs: the job's snapshot
/// is holdfast's, of the runtime it started from; after the same update and upgrade, the
/// paused and resumed job runs its original configuration.
#[tokio::test]
#[ignore = "tier 3: run with --ignored (builds and starts a real node)"]
async fn upgrade_from_trainer_2_2_with_holdfast_keeps_the_original_configuration_where_trainer_alone_takes_the_updated_runtime()
 {
    let cluster = NodeCluster::shared();
    let admin = cluster.client(Identity::Admin).await.expect("client");
    let workload = cluster.workload_image().to_owned();
    cluster.tag_image(&workload, EDITED_IMAGE).expect("tag");
    let _back = CurrentTrainerBack(cluster);

    // Control: Trainer alone.
    no_holdfast_controller(&admin).await;
    cluster
        .switch_trainer(TrainerRelease::Previous)
        .await
        .expect("Trainer v2.2.1");
    let jobs = Jobs::new(cluster, "kep-upgrade-alone").await;
    jobs.create_runtime(cluster, "rt").await;
    jobs.create_trainjob("alone", "rt", json!({})).await;
    let first = jobs
        .assert_runs("alone", &[], &Config::original(cluster, "rt"))
        .await;
    assert!(
        jobs.snapshots
            .get_opt("alone-runtime-snapshot")
            .await
            .expect("get")
            .is_none(),
        "Trainer v2.2.1 writes no snapshot"
    );
    jobs.edit_runtime("rt").await;
    cluster
        .switch_trainer(TrainerRelease::Current)
        .await
        .expect("Trainer v2.3.0");
    let snap = jobs.snapshot("alone").await;
    assert_eq!(creator(&snap), "trainer", "Trainer's migration wrote it");
    assert!(
        runtime_yaml(&snap).contains(EDITED_IMAGE),
        "Trainer alone snapshots the updated runtime: {}",
        runtime_yaml(&snap)
    );
    // Its JobSet, from the original runtime, differs from the snapshot's: the pause does not
    // take until the JobSet is made again, from the snapshot, and the job then runs the
    // updated configuration.
    jobs.pause_refused(cluster, "alone", &first, jobs.suspend("alone", true))
        .await;
    jobs.recreate_jobset(cluster, "alone").await;
    jobs.suspend("alone", false).await;
    jobs.assert_runs("alone", &first, &Config::edited()).await;
    jobs.delete("alone").await;

    // With holdfast installed before the upgrade, in each mode; paused by a hold.
    for (name, kueue_mode) in [("kepu", false), ("kepuq", true)] {
        let (installed, first, snap) = job_with_holdfast(
            cluster,
            TrainerRelease::Previous,
            (name, kueue_mode),
            "kep-upgrade-holdfast",
            "kept",
        )
        .await;
        let jobs = &installed.jobs;
        assert_eq!(creator(&snap), "holdfast", "holdfast wrote it under v2.2.1");
        assert!(
            runtime_yaml(&snap).contains(&workload) && !runtime_yaml(&snap).contains(EDITED_IMAGE),
            "{}",
            runtime_yaml(&snap)
        );
        jobs.edit_runtime("rt").await;
        cluster
            .switch_trainer(TrainerRelease::Current)
            .await
            .expect("Trainer v2.3.0");
        installed.hold(cluster, "kept").await;
        installed.call("kept", "release", Some(1), "Released").await;
        jobs.assert_runs("kept", &first, &Config::original(cluster, "rt"))
            .await;
        let now = jobs.snapshot("kept").await;
        assert_eq!(
            now.metadata.resource_version, snap.metadata.resource_version,
            "Trainer v2.3.0 used holdfast's snapshot as it was"
        );
        jobs.delete("kept").await;
        installed.uninstall(cluster).await;
    }
}

/// The node on Trainer `trainer`, holdfast installed (release name, kueue mode) and a managed
/// TrainJob `job` of runtime `rt` started: its first execution (uids) and its snapshot.
async fn job_with_holdfast(
    cluster: &NodeCluster,
    trainer: TrainerRelease,
    (name, kueue_mode): (&str, bool),
    prefix: &str,
    job: &str,
) -> (Installed, Vec<String>, ConfigMap) {
    cluster
        .switch_trainer(trainer)
        .await
        .expect("switch Trainer");
    let installed = Installed::new(cluster, name, kueue_mode, prefix).await;
    installed.jobs.create_runtime(cluster, "rt").await;
    let first = installed.start(cluster, job, "rt").await;
    let snap = installed.jobs.snapshot(job).await;
    (installed, first, snap)
}

/// The KEP's rollback ("if the trainer controller is rolled back, TrainJobs reconcile from
/// the runtime again"), with holdfast running, in each mode: Trainer v2.3.0 runs a job from
/// its snapshot, the runtime is updated, the controller is rolled back to v2.2.1, which
/// computes the JobSet from the updated runtime — JobSet refuses that change, so a hold does
/// not stop the job until its JobSet is made again; released, the job runs the updated
/// runtime. The snapshot stays as it was, a user's edit of it is refused, and deleting the
/// TrainJob removes it with the JobSet, Jobs and pods: nothing is orphaned.
#[tokio::test]
#[ignore = "tier 3: run with --ignored (builds and starts a real node)"]
async fn rollback_to_trainer_2_2_reconciles_from_the_runtime_and_holdfasts_snapshots_stay_protected_and_go_with_their_jobs()
 {
    let cluster = NodeCluster::shared();
    let workload = cluster.workload_image().to_owned();
    cluster.tag_image(&workload, EDITED_IMAGE).expect("tag");
    let _back = CurrentTrainerBack(cluster);
    let admin = cluster.client(Identity::Admin).await.expect("client");
    for (name, kueue_mode) in [("kepr", false), ("keprq", true)] {
        let (installed, first, snap) = job_with_holdfast(
            cluster,
            TrainerRelease::Current,
            (name, kueue_mode),
            "kep-rollback",
            "rolled",
        )
        .await;
        let jobs = &installed.jobs;
        jobs.edit_runtime("rt").await;

        // v2.2.1 computes the JobSet from the updated runtime: the pause (a hold) does not
        // take until the JobSet is made again, from the runtime; released, the job runs the
        // updated configuration.
        cluster
            .switch_trainer(TrainerRelease::Previous)
            .await
            .expect("Trainer v2.2.1");
        let hold = installed.call("rolled", "hold", Some(1), "Held");
        jobs.pause_refused(cluster, "rolled", &first, hold).await;
        jobs.recreate_jobset(cluster, "rolled").await;
        installed
            .call("rolled", "release", Some(1), "Released")
            .await;
        jobs.assert_runs("rolled", &first, &Config::edited()).await;
        let now = jobs.snapshot("rolled").await;
        assert_eq!(
            (now.metadata.resource_version, now.data),
            (snap.metadata.resource_version, snap.data),
            "the snapshot stays as it was"
        );
        let user = cluster.client(Identity::User).await.expect("user");
        snapshot_edit_is_refused(&Api::namespaced(user, &jobs.ns), "rolled").await;

        // Deleted, the TrainJob takes its snapshot, JobSet, Jobs and pods along.
        jobs.delete("rolled").await;
        let batch: Api<k8s_openapi::api::batch::v1::Job> = Api::namespaced(admin.clone(), &jobs.ns);
        let snapshots = ListParams::default().labels("holdfast.dev/runtime-snapshot=true");
        let snapshot = "rolled-runtime-snapshot";
        wait_for(
            "nothing left of the TrainJob",
            Duration::from_secs(90),
            || async {
                let all = ListParams::default();
                let left = jobs.trainjobs.list(&all).await.ok()?.items.len()
                    + jobs.snapshots.list(&snapshots).await.ok()?.items.len()
                    + usize::from(jobs.snapshots.get_opt(snapshot).await.ok()?.is_some())
                    + jobs.jobsets.list(&all).await.ok()?.items.len()
                    + batch.list(&all).await.ok()?.items.len()
                    + jobs.pods.list(&all).await.ok()?.items.len();
                (left == 0).then_some(())
            },
        )
        .await;
        installed.uninstall(cluster).await;
    }
    cluster
        .switch_trainer(TrainerRelease::Current)
        .await
        .expect("Trainer v2.3.0 again");
}

/// KEP-2599, integration: "snapshot ConfigMap is created with correct structure and
/// ownerReference" — whoever wrote it (Trainer v2.3.0 or holdfast): named
/// `<trainjob>-runtime-snapshot`, one data key `runtime` holding the runtime `runtime` as YAML
/// (apiVersion, kind, metadata.name, spec), and one ownerReference: the TrainJob, as
/// controller, blocking its owner's deletion.
pub(super) fn assert_snapshot_structure(cm: &ConfigMap, trainjob: &DynamicObject, runtime: &str) {
    let job = trainjob.metadata.name.as_deref().expect("name");
    assert_eq!(
        cm.metadata.name.as_deref(),
        Some(format!("{job}-runtime-snapshot").as_str())
    );
    let data = cm.data.clone().unwrap_or_default();
    assert_eq!(
        data.keys().collect::<Vec<_>>(),
        vec!["runtime"],
        "one data key"
    );
    let stored: Value = serde_saphyr::from_str(&data["runtime"]).expect("the runtime as YAML");
    assert_eq!(
        (
            stored["apiVersion"].as_str(),
            stored["kind"].as_str(),
            stored["metadata"]["name"].as_str(),
            stored["spec"]["template"].is_object()
        ),
        (
            Some("trainer.kubeflow.org/v1alpha1"),
            Some("TrainingRuntime"),
            Some(runtime),
            true
        ),
        "the stored runtime: {stored}"
    );
    let owners = cm.metadata.owner_references.clone().unwrap_or_default();
    assert_eq!(owners.len(), 1, "one ownerReference: {owners:?}");
    let o = &owners[0];
    assert_eq!(
        (
            o.api_version.as_str(),
            o.kind.as_str(),
            o.name.as_str(),
            Some(o.uid.as_str()),
            o.controller,
            o.block_owner_deletion
        ),
        (
            "trainer.kubeflow.org/v1alpha1",
            "TrainJob",
            job,
            trainjob.metadata.uid.as_deref(),
            Some(true),
            Some(true)
        ),
        "the ownerReference"
    );
}
