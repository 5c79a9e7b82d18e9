//! What KEP-2599's tests on the node are built from (issue #16): a runtime's configuration as
//! the KEP's e2e test names it ([`Config`]), one namespace's jobs and how to read what they
//! run ([`Jobs`]), holdfast installed by its chart with a caller of its hold API
//! ([`Installed`]), and the snapshot's structure as the KEP states it. The tests are in
//! `kep.rs` and `writers.rs`.

use super::{
    ChartRelease, ServiceHoldApi, config_of, is_running, next_execution, running_pods,
    training_runtime,
};
use holdfast_tests::Identity;
use holdfast_tests::kueue;
use holdfast_tests::node::NodeCluster;
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
pub(super) fn kep_runtime(cluster: &NodeCluster, name: &str) -> Value {
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
    pub(super) runtimes: Api<DynamicObject>,
    pub(super) trainjobs: Api<DynamicObject>,
    pub(super) jobsets: Api<DynamicObject>,
    pub(super) pods: Api<Pod>,
    pub(super) snapshots: Api<ConfigMap>,
}

impl Jobs {
    pub(super) async fn new(cluster: &NodeCluster, prefix: &str) -> Jobs {
        let ns = cluster.namespace(prefix).await.expect("namespace");
        Jobs::of(cluster, ns).await
    }

    /// The jobs of namespace `ns`, which exists.
    pub(super) async fn of(cluster: &NodeCluster, ns: String) -> Jobs {
        let admin = cluster.client(Identity::Admin).await.expect("client");
        Jobs {
            runtimes: Api::namespaced_with(
                admin.clone(),
                &ns,
                &holdfast_cluster::resources::training_runtime(),
            ),
            trainjobs: Api::namespaced_with(
                admin.clone(),
                &ns,
                &holdfast_cluster::resources::trainjob(),
            ),
            jobsets: Api::namespaced_with(
                admin.clone(),
                &ns,
                &holdfast_cluster::resources::jobset(),
            ),
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
    pub(super) async fn execution(&self, job: &str, old: &[String]) -> Vec<Pod> {
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
    pub(super) fn refusals(&self, cluster: &NodeCluster, job: &str) -> usize {
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
    pub(super) async fn pause_refused(
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
    pub(super) async fn recreate_jobset(&self, cluster: &NodeCluster, job: &str) {
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
    pub(super) api: ServiceHoldApi,
    pub(super) alice: String,
    /// The ClusterQueue, in kueue mode.
    pub(super) cluster_queue: Option<String>,
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
    pub(super) async fn start(
        &self,
        cluster: &NodeCluster,
        job: &str,
        runtime: &str,
    ) -> Vec<String> {
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
            &holdfast_cluster::resources::workload(),
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
            Api::<DynamicObject>::all_with(admin, &holdfast_cluster::resources::cluster_queue())
                .delete(&cq, &DeleteParams::default())
                .await
                .expect("delete the ClusterQueue");
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
