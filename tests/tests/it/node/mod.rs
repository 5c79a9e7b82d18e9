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

mod kep;

use futures::{AsyncBufReadExt, StreamExt};
use holdfast_tests::Identity;
use holdfast_tests::node::{NodeCluster, jobset_resource};
use holdfast_tests::objects::trainer_resource;
use holdfast_tests::wait::wait_for;
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::Pod;
use kube::api::{
    Api, DeleteParams, DynamicObject, ListParams, LogParams, Patch, PatchParams, PostParams,
};
use std::time::{Duration, Instant};

fn workload_pod(name: &str, image: &str, grace_seconds: u32, mark: &str) -> Pod {
    serde_json::from_value(serde_json::json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name},
        "spec": {
            "terminationGracePeriodSeconds": 30,
            "containers": [{
                "name": "main",
                "image": image,
                "imagePullPolicy": "Never",
                "args": ["--epochs", "3"],
                "env": [
                    {"name": "WORKLOAD_TERM_GRACE_SECONDS", "value": grace_seconds.to_string()},
                    {"name": "WORKLOAD_MARK", "value": mark}
                ]
            }]
        }
    }))
    .expect("pod")
}

pub(super) fn is_running(p: &Pod) -> bool {
    p.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Running")
        && p.status
            .as_ref()
            .and_then(|s| s.container_statuses.as_ref())
            .is_some_and(|cs| cs.iter().all(|c| c.ready))
}

/// Wait until pod `name` is Running and ready; on timeout, panic with what the pod, its events
/// and the node's logs say.
async fn wait_running(cluster: &NodeCluster, pods: &Api<Pod>, name: &str) -> Pod {
    let deadline = Instant::now() + Duration::from_secs(120);
    loop {
        let pod = pods.get_opt(name).await.ok().flatten();
        if let Some(p) = pod.as_ref().filter(|p| is_running(p)) {
            return p.clone();
        }
        if Instant::now() > deadline {
            let events = Api::<k8s_openapi::api::core::v1::Event>::namespaced(
                pods.clone().into_client(),
                pod.as_ref()
                    .and_then(|p| p.metadata.namespace.as_deref())
                    .unwrap_or("default"),
            )
            .list(&ListParams::default())
            .await
            .map(|l| {
                l.items
                    .iter()
                    .map(|e| {
                        format!(
                            "{:?} {:?}: {:?}",
                            e.reason, e.involved_object.name, e.message
                        )
                    })
                    .collect::<Vec<_>>()
            })
            .unwrap_or_default();
            panic!(
                "pod {name} not Running after 120s: {:#?}\nevents: {events:#?}\nkubelet:\n{}\ncontainerd:\n{}",
                pod.and_then(|p| p.status),
                cluster.log_tail("kubelet", 40),
                cluster.log_tail("containerd", 30)
            );
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
}

/// The `workload: config {...}` line of a pod's log, parsed.
pub(super) async fn config_of(pods: &Api<Pod>, name: &str, container: &str) -> serde_json::Value {
    wait_for(
        "the workload's config line",
        Duration::from_secs(30),
        || async {
            let log = pods
                .logs(
                    name,
                    &LogParams {
                        container: Some(container.into()),
                        ..Default::default()
                    },
                )
                .await
                .ok()?;
            let line = log
                .lines()
                .find_map(|l| l.strip_prefix("workload: config "))?;
            serde_json::from_str(line).ok()
        },
    )
    .await
}

#[tokio::test]
#[ignore = "tier 3: run with --ignored (builds and starts a real node)"]
async fn a_plain_pod_runs_and_terminates_with_its_grace() {
    let cluster = NodeCluster::shared();
    let ns = cluster.namespace("node-pod").await.expect("namespace");
    let admin = cluster.client(Identity::Admin).await.expect("client");
    let pods: Api<Pod> = Api::namespaced(admin, &ns);
    let grace = 6;
    let started = Instant::now();
    pods.create(
        &PostParams::default(),
        &workload_pod("w", cluster.workload_image(), grace, "plain-pod"),
    )
    .await
    .expect("create pod");
    let pod = wait_running(cluster, &pods, "w").await;
    eprintln!("pod Running after {:?}", started.elapsed());
    let ip = pod.status.and_then(|s| s.pod_ip).expect("pod IP");
    assert!(
        ip.starts_with("10.244.0."),
        "pod IP {ip} from the bridge's subnet"
    );

    let config = config_of(&pods, "w", "main").await;
    let argv: Vec<&str> = config["argv"]
        .as_array()
        .expect("argv")
        .iter()
        .filter_map(|a| a.as_str())
        .collect();
    assert_eq!(argv[1..], ["--epochs", "3"], "the pod's args: {config}");
    assert_eq!(config["env"]["WORKLOAD_MARK"], "plain-pod");
    assert_eq!(config["env"]["WORKLOAD_TERM_GRACE_SECONDS"], "6");

    // Follow the log through the deletion: the workload sees SIGTERM and keeps running for
    // its grace, so the pod stays Terminating that long.
    let mut lines = pods
        .log_stream(
            "w",
            &LogParams {
                follow: true,
                container: Some("main".into()),
                ..Default::default()
            },
        )
        .await
        .expect("log stream")
        .lines();
    let follower = tokio::spawn(async move {
        let mut seen = Vec::new();
        while let Some(Ok(l)) = lines.next().await {
            seen.push(l);
        }
        seen
    });
    let deleted = Instant::now();
    pods.delete("w", &DeleteParams::default())
        .await
        .expect("delete");
    let terminating = pods.get("w").await.expect("pod still there");
    assert!(
        terminating.metadata.deletion_timestamp.is_some(),
        "Terminating"
    );
    wait_for("the pod gone", Duration::from_secs(60), || async {
        match pods.get_opt("w").await {
            Ok(None) => Some(()),
            _ => None,
        }
    })
    .await;
    let took = deleted.elapsed();
    eprintln!("pod Terminating for {took:?} (workload grace {grace}s, pod grace 30s)");
    assert!(
        took >= Duration::from_secs(grace as u64 - 1),
        "the pod went after {took:?}, before the workload's {grace}s grace"
    );
    assert!(
        took < Duration::from_secs(25),
        "the pod took {took:?}: the workload did not exit on SIGTERM after its grace"
    );
    let seen = tokio::time::timeout(Duration::from_secs(10), follower)
        .await
        .expect("log stream ended")
        .expect("follower");
    assert!(
        seen.iter()
            .any(|l| l.contains("signal 15 received; exiting in 6s")),
        "the workload logged SIGTERM: {seen:?}"
    );
    assert!(
        seen.iter().any(|l| l.contains("exiting after the grace")),
        "the workload exited after its grace: {seen:?}"
    );
}

pub(super) fn training_runtime(name: &str, image: &str) -> serde_json::Value {
    serde_json::json!({
        "apiVersion": "trainer.kubeflow.org/v1alpha1",
        "kind": "TrainingRuntime",
        "metadata": {"name": name, "labels": {"trainer.kubeflow.org/framework": "torch"}},
        "spec": {
            "mlPolicy": {"numNodes": 1, "torch": {}},
            "template": {"spec": {"replicatedJobs": [{
                "name": "node",
                "template": {
                    "metadata": {"labels": {"trainer.kubeflow.org/trainjob-ancestor-step": "trainer"}},
                    "spec": {"template": {"spec": {
                        "terminationGracePeriodSeconds": 30,
                        "containers": [{
                            "name": "node",
                            "image": image,
                            "imagePullPolicy": "Never",
                            "env": [
                                {"name": "WORKLOAD_TERM_GRACE_SECONDS", "value": "1"},
                                {"name": "WORKLOAD_MARK", "value": format!("runtime-{name}")}
                            ]
                        }]
                    }}}
                }
            }]}}
        }
    })
}

pub(super) async fn running_pods(pods: &Api<Pod>, jobset: &str) -> Vec<Pod> {
    let lp = ListParams::default().labels(&format!("jobset.sigs.k8s.io/jobset-name={jobset}"));
    pods.list(&lp).await.map(|l| l.items).unwrap_or_default()
}

/// Every pod in `ps` Running, and none of them one of `old` (uids): a new set replaced them.
fn all_running_and_new(ps: &[Pod], old: &[String]) -> bool {
    ps.iter().all(is_running)
        && ps
            .iter()
            .all(|p| !old.contains(p.metadata.uid.as_ref().unwrap_or(&String::new())))
}

/// The pods of `jobset`'s next execution, once there are some, all Running and none of `old`
/// (the previous execution's uids); panics after `within`.
pub(super) async fn next_execution(
    pods: &Api<Pod>,
    jobset: &str,
    old: &[String],
    within: Duration,
) -> Vec<Pod> {
    wait_for("the second execution Running", within, || async {
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

#[tokio::test]
#[ignore = "tier 3: run with --ignored (builds and starts a real node)"]
async fn a_trainjob_runs_suspends_and_resumes_through_trainer_and_jobset() {
    let cluster = NodeCluster::shared();
    let ns = cluster.namespace("node-tj").await.expect("namespace");
    let admin = cluster.client(Identity::Admin).await.expect("client");
    let runtimes: Api<DynamicObject> = Api::namespaced_with(
        admin.clone(),
        &ns,
        &trainer_resource("TrainingRuntime", "trainingruntimes"),
    );
    let rt: DynamicObject =
        serde_json::from_value(training_runtime("workload", cluster.workload_image()))
            .expect("runtime");
    runtimes
        .create(&PostParams::default(), &rt)
        .await
        .expect("create runtime");
    let trainjobs: Api<DynamicObject> = Api::namespaced_with(
        admin.clone(),
        &ns,
        &holdfast_tests::objects::trainjob_resource(),
    );
    let tj: DynamicObject = serde_json::from_value(serde_json::json!({
        "apiVersion": "trainer.kubeflow.org/v1alpha1", "kind": "TrainJob",
        "metadata": {"name": "tj"},
        "spec": {"runtimeRef": {"name": "workload", "kind": "TrainingRuntime", "apiGroup": "trainer.kubeflow.org"}}
    }))
    .expect("trainjob");
    let started = Instant::now();
    trainjobs
        .create(&PostParams::default(), &tj)
        .await
        .expect("create trainjob");

    // Trainer makes the JobSet, JobSet the Jobs, the Job controller the pods, the node runs them.
    let jobsets: Api<DynamicObject> = Api::namespaced_with(admin.clone(), &ns, &jobset_resource());
    let js = wait_for("Trainer's JobSet", Duration::from_secs(60), || async {
        jobsets.get_opt("tj").await.ok().flatten()
    })
    .await;
    assert_eq!(
        owner_kind(&js.metadata),
        Some(("TrainJob".into(), "tj".into())),
        "owned by the TrainJob"
    );
    let jobs: Api<Job> = Api::namespaced(admin.clone(), &ns);
    let job = wait_for("JobSet's Job", Duration::from_secs(60), || async {
        let lp = ListParams::default().labels("jobset.sigs.k8s.io/jobset-name=tj");
        jobs.list(&lp).await.ok()?.items.into_iter().next()
    })
    .await;
    assert_eq!(
        owner_kind(&job.metadata),
        Some(("JobSet".into(), "tj".into())),
        "owned by the JobSet"
    );
    let pods: Api<Pod> = Api::namespaced(admin.clone(), &ns);
    let first = wait_for(
        "the TrainJob's pod Running",
        Duration::from_secs(120),
        || async {
            let ps = running_pods(&pods, "tj").await;
            (!ps.is_empty() && ps.iter().all(is_running)).then_some(ps)
        },
    )
    .await;
    eprintln!("TrainJob's pod Running after {:?}", started.elapsed());
    let pod = &first[0];
    let pod_name = pod.metadata.name.clone().expect("name");
    assert_eq!(
        owner_kind(&pod.metadata).map(|o| o.0),
        Some("Job".to_string()),
        "the pod is the Job's"
    );
    let config = config_of(&pods, &pod_name, "node").await;
    assert_eq!(
        config["env"]["WORKLOAD_MARK"], "runtime-workload",
        "{config}"
    );
    // A Job's pod (the Job controller's completion index), named by JobSet.
    assert_eq!(config["env"]["JOB_COMPLETION_INDEX"], "0", "{config}");
    assert_eq!(config["env"]["HOSTNAME"], "tj-node-0-0", "{config}");

    // Suspend: Trainer suspends the JobSet, JobSet the Job, and the Job's pods go.
    let pp = PatchParams::default();
    let suspended = Instant::now();
    trainjobs
        .patch(
            "tj",
            &pp,
            &Patch::Merge(serde_json::json!({"spec": {"suspend": true}})),
        )
        .await
        .expect("suspend");
    wait_for(
        "the pods gone after suspend",
        Duration::from_secs(90),
        || async { running_pods(&pods, "tj").await.is_empty().then_some(()) },
    )
    .await;
    eprintln!("pods gone {:?} after suspend", suspended.elapsed());
    let js = jobsets.get("tj").await.expect("jobset");
    assert_eq!(js.data["spec"]["suspend"], true, "the JobSet is suspended");

    // Resume: new pods, not the old ones.
    let resumed = Instant::now();
    trainjobs
        .patch(
            "tj",
            &pp,
            &Patch::Merge(serde_json::json!({"spec": {"suspend": false}})),
        )
        .await
        .expect("resume");
    let old: Vec<String> = first
        .iter()
        .filter_map(|p| p.metadata.uid.clone())
        .collect();
    let second = wait_for(
        "new pods Running after resume",
        Duration::from_secs(120),
        || async {
            let ps = running_pods(&pods, "tj").await;
            (!ps.is_empty() && ps.iter().all(is_running)).then_some(ps)
        },
    )
    .await;
    eprintln!("pods Running {:?} after resume", resumed.elapsed());
    for p in &second {
        let uid = p.metadata.uid.clone().expect("uid");
        assert!(!old.contains(&uid), "a new pod, not {uid} again");
    }
    trainjobs
        .delete("tj", &DeleteParams::default())
        .await
        .expect("delete trainjob");
}

/// The Dockerfile's final stage as the image promises it: the files it copies to `/`, its
/// user and its entrypoint (parsed here independently of holdfast-image.sh).
fn dockerfile_layout() -> (Vec<String>, String, Vec<String>) {
    let text = std::fs::read_to_string(holdfast_tests::helm::chart_dir().join("../../Dockerfile"))
        .expect("Dockerfile");
    let lines: Vec<&str> = text.lines().collect();
    let last_from = lines
        .iter()
        .rposition(|l| l.trim_start().to_uppercase().starts_with("FROM "))
        .expect("a FROM");
    let (mut files, mut user, mut entrypoint) = (Vec::new(), String::new(), Vec::new());
    for line in lines.iter().skip(last_from + 1) {
        let mut words = line.split_whitespace();
        match words.next() {
            Some("COPY") => {
                let rest: Vec<&str> = words.filter(|w| !w.starts_with("--")).collect();
                assert_eq!(rest.last(), Some(&"/"), "COPY to / in {line}");
                for src in &rest[..rest.len() - 1] {
                    files.push(format!("/{}", src.rsplit('/').next().expect("name")));
                }
            }
            Some("USER") => user = words.collect::<Vec<_>>().join(" "),
            Some("ENTRYPOINT") => {
                entrypoint = serde_json::from_str(line.trim_start()["ENTRYPOINT".len()..].trim())
                    .expect("ENTRYPOINT in exec form")
            }
            _ => {}
        }
    }
    (files, user, entrypoint)
}

fn tar_file(archive: &std::path::Path, member: &str) -> Vec<u8> {
    let out = std::process::Command::new("tar")
        .arg("-xOf")
        .arg(archive)
        .arg(member)
        .output()
        .expect("tar");
    assert!(
        out.status.success(),
        "tar -xOf {} {member}",
        archive.display()
    );
    out.stdout
}

/// The image's config and the paths in its one layer, read from the OCI archive.
fn image_layout(archive: &std::path::Path) -> (serde_json::Value, Vec<String>) {
    let blob = |digest: &str| format!("blobs/sha256/{}", digest.trim_start_matches("sha256:"));
    let index: serde_json::Value =
        serde_json::from_slice(&tar_file(archive, "index.json")).expect("index");
    let manifest: serde_json::Value = serde_json::from_slice(&tar_file(
        archive,
        &blob(
            index["manifests"][0]["digest"]
                .as_str()
                .expect("manifest digest"),
        ),
    ))
    .expect("manifest");
    let config: serde_json::Value = serde_json::from_slice(&tar_file(
        archive,
        &blob(
            manifest["config"]["digest"]
                .as_str()
                .expect("config digest"),
        ),
    ))
    .expect("config");
    let layer = tar_file(
        archive,
        &blob(manifest["layers"][0]["digest"].as_str().expect("layer")),
    );
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("layer.tar");
    std::fs::write(&path, layer).expect("layer");
    let out = std::process::Command::new("tar")
        .args(["-tvf"])
        .arg(&path)
        .output()
        .expect("tar -t");
    let listing = String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(str::to_owned)
        .collect();
    (config, listing)
}

/// The chart installed for real (issue #15, item 4), plain mode: holdfast's image has the
/// Dockerfile's layout; `helm install --wait` brings both Deployments' two replicas Ready on
/// the node; the controller issues the certificates and injects the caBundle; the apiserver
/// calls the webhook through its Service (a user's snapshot edit is refused). The two
/// controller replicas elect one leader (the Lease's holder is one of their pods); deleting
/// that pod moves the Lease to another, which logs that it leads, and a hold through the hold
/// API's Service still holds a TrainJob. `helm upgrade` with another log format
/// replaces every pod (they log plain text now) and admission keeps refusing the edit. `helm
/// uninstall` removes every object of the release's manifest and leaves exactly what the
/// chart README's "Uninstall" lists: the snapshot ConfigMaps, the three certificate Secrets,
/// the Lease, and the hold in force (the TrainJob suspended, its annotations kept).
#[tokio::test]
#[ignore = "tier 3: run with --ignored (builds and starts a real node)"]
async fn the_chart_on_the_node_guards_snapshots_fails_over_upgrades_and_uninstalls_as_documented() {
    use k8s_openapi::api::admissionregistration::v1::ValidatingWebhookConfiguration;
    use k8s_openapi::api::apps::v1::Deployment;
    use k8s_openapi::api::coordination::v1::Lease;
    use k8s_openapi::api::core::v1::{ConfigMap, Secret};

    let cluster = NodeCluster::shared();
    // holdfast's image, built from the Dockerfile's recipe without an engine.
    let (archive, _) = holdfast_image(cluster);

    // The same layout as the Dockerfile promises: files, user, entrypoint.
    let (files, user, entrypoint) = dockerfile_layout();
    let (config, listing) = image_layout(&archive);
    assert_eq!(config["config"]["User"], user, "USER");
    assert_eq!(
        config["config"]["Entrypoint"],
        serde_json::json!(entrypoint),
        "ENTRYPOINT"
    );
    for f in &files {
        let entry = listing
            .iter()
            .find(|l| l.ends_with(&format!(" .{f}")))
            .unwrap_or_else(|| panic!("{f} in the image: {listing:?}"));
        assert!(entry.starts_with("-rwxr-xr-x"), "{f} executable: {entry}");
    }
    assert_eq!(files, ["/holdfast-controller", "/holdfast-webhook"]);
    assert_eq!(user, "65532:65532");

    let ns = "hf-system";
    let mut release = ChartRelease::install(cluster, "hf", ns, &["mode=plain"]).await;
    let fullname = release.fullname();
    let admin = cluster.client(Identity::Admin).await.expect("client");
    for d in ["hf-holdfast-controller", "hf-holdfast-webhook"] {
        let dep = Api::<Deployment>::namespaced(admin.clone(), ns)
            .get(d)
            .await
            .expect("deployment");
        let st = dep.status.expect("status");
        assert_eq!(
            st.ready_replicas,
            Some(2),
            "{d} has both replicas Ready: {st:?}"
        );
    }
    // Self-managed certificates: the controller issued them and injected the CA.
    let vwc = wait_for("the caBundle injected", Duration::from_secs(60), || async {
        let v = Api::<ValidatingWebhookConfiguration>::all(admin.clone())
            .get("hf-holdfast")
            .await
            .ok()?;
        v.webhooks
            .as_ref()?
            .iter()
            .all(|w| {
                w.client_config
                    .ca_bundle
                    .as_ref()
                    .is_some_and(|b| !b.0.is_empty())
            })
            .then_some(v)
    })
    .await;
    assert!(
        vwc.webhooks
            .unwrap_or_default()
            .iter()
            .all(|w| w.client_config.service.is_some())
    );

    // A TrainJob gets its snapshot; a user's edit of it is refused by the webhook, called by
    // the apiserver through its Service.
    let tns = cluster.namespace("node-chart").await.expect("namespace");
    let runtimes: Api<DynamicObject> = Api::namespaced_with(
        admin.clone(),
        &tns,
        &trainer_resource("TrainingRuntime", "trainingruntimes"),
    );
    let rt: DynamicObject =
        serde_json::from_value(training_runtime("workload", cluster.workload_image()))
            .expect("runtime");
    runtimes
        .create(&PostParams::default(), &rt)
        .await
        .expect("create runtime");
    let trainjobs: Api<DynamicObject> = Api::namespaced_with(
        admin.clone(),
        &tns,
        &holdfast_tests::objects::trainjob_resource(),
    );
    let create_trainjob = |name: &'static str| {
        let trainjobs = trainjobs.clone();
        async move {
            let tj: DynamicObject = serde_json::from_value(serde_json::json!({
                "apiVersion": "trainer.kubeflow.org/v1alpha1", "kind": "TrainJob",
                "metadata": {"name": name},
                "spec": {"runtimeRef": {"name": "workload", "kind": "TrainingRuntime", "apiGroup": "trainer.kubeflow.org"}}
            }))
            .expect("trainjob");
            trainjobs
                .create(&PostParams::default(), &tj)
                .await
                .expect("create trainjob");
        }
    };
    let user = cluster.client(Identity::User).await.expect("user");
    let cms: Api<ConfigMap> = Api::namespaced(user, &tns);
    let snapshot_of = |job: &'static str| {
        let cms = cms.clone();
        async move {
            let name = format!("{job}-runtime-snapshot");
            wait_for("the snapshot", Duration::from_secs(60), || async {
                cms.get_opt(&name).await.ok().flatten()
            })
            .await
        }
    };
    let edit_is_refused = |job: &'static str| {
        let cms = cms.clone();
        async move {
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
    };
    create_trainjob("tj").await;
    snapshot_of("tj").await;
    edit_is_refused("tj").await;

    // Leader election between the two controller replicas, inside the cluster: the Lease is
    // held by one of the controller's pods.
    let pods: Api<Pod> = Api::namespaced(admin.clone(), ns);
    let controller_pods = || async {
        pods.list(
            &ListParams::default()
                .labels("app.kubernetes.io/instance=hf,app.kubernetes.io/component=controller"),
        )
        .await
        .expect("controller pods")
        .items
        .into_iter()
        .filter(|p| p.metadata.deletion_timestamp.is_none())
        .filter_map(|p| p.metadata.name)
        .collect::<Vec<String>>()
    };
    let leases: Api<Lease> = Api::namespaced(admin.clone(), ns);
    let lease_name = format!("{fullname}-controller");
    let holder = || async {
        leases
            .get_opt(&lease_name)
            .await
            .ok()
            .flatten()
            .and_then(|l| l.spec?.holder_identity)
    };
    let first = controller_pods().await;
    assert_eq!(first.len(), 2, "two controller replicas: {first:?}");
    let leader = wait_for(
        "a controller pod holds the Lease",
        Duration::from_secs(60),
        || async { holder().await.filter(|h| first.contains(h)) },
    )
    .await;
    let follower = first
        .iter()
        .find(|p| **p != leader)
        .expect("the other")
        .clone();

    // The leader's pod is deleted: the other replica takes the Lease, and what only the
    // leader does (the snapshot of a new TrainJob) and a hold through the API both work.
    let failover = Instant::now();
    pods.delete(&leader, &DeleteParams::default())
        .await
        .expect("delete the leader's pod");
    let successor = wait_for(
        "another controller pod holds the Lease",
        Duration::from_secs(90),
        || async {
            let h = holder().await.filter(|h| *h != leader)?;
            controller_pods().await.contains(&h).then_some(h)
        },
    )
    .await;
    eprintln!(
        "Lease moved from {leader} to {successor} (the survivor was {follower}) in {:?}",
        failover.elapsed()
    );
    let log = pods
        .logs(&successor, &LogParams::default())
        .await
        .expect("the new leader's log");
    assert!(
        log.lines()
            .any(|l| l.contains("became leader") && l.contains(&successor)),
        "{successor} logged that it leads:\n{log}"
    );
    create_trainjob("tj2").await;
    snapshot_of("tj2").await;
    holdfast_tests::hold_support::api::grant_alice(cluster, &tns, &["hold"], &["create"]).await;
    let alice = cluster.token(Identity::User).to_owned();
    let (status, answer) = release
        .hold_api(cluster)
        .await
        .call(&alice, &tns, "tj", "hold", Some(1))
        .await;
    assert_eq!(
        (status, &answer),
        (200, &serde_json::json!({"result": "Ok", "outcome": "Held"}))
    );
    assert_eq!(
        trainjobs.get("tj").await.expect("tj").data["spec"]["suspend"],
        true,
        "the hold suspended the TrainJob"
    );

    // helm upgrade with a changed value (the log format) rolls every pod; the new ones log
    // plain text and admission keeps refusing a user's snapshot edit.
    let log_format = |pod: &Pod| {
        pod.spec
            .as_ref()
            .and_then(|s| s.containers.first())
            .and_then(|c| c.env.as_ref())
            .and_then(|env| env.iter().find(|e| e.name == "HOLDFAST_LOG_FORMAT"))
            .and_then(|e| e.value.clone())
    };
    let first_log_line = |name: String| {
        let pods = pods.clone();
        async move {
            wait_for("a log line", Duration::from_secs(30), || async {
                let log = pods.logs(&name, &LogParams::default()).await.ok()?;
                log.lines().next().map(str::to_owned)
            })
            .await
        }
    };
    let release_pods = || async {
        pods.list(&ListParams::default().labels("app.kubernetes.io/instance=hf"))
            .await
            .expect("pods")
            .items
            .into_iter()
            .filter(|p| p.metadata.deletion_timestamp.is_none())
            .collect::<Vec<Pod>>()
    };
    let before = release_pods().await;
    assert_eq!(before.len(), 4, "two controllers, two webhooks");
    for p in &before {
        assert_eq!(log_format(p).as_deref(), Some("json"));
    }
    let line = first_log_line(successor.clone()).await;
    assert!(line.starts_with('{'), "a JSON log line: {line}");
    let old: Vec<String> = before
        .iter()
        .filter_map(|p| p.metadata.uid.clone())
        .collect();
    let upgraded = Instant::now();
    release
        .upgrade(cluster, &["mode=plain", "logFormat=plain"])
        .await;
    eprintln!("helm upgrade --wait took {:?}", upgraded.elapsed());
    let after = wait_for(
        "every pod replaced, four Running",
        Duration::from_secs(120),
        || async {
            let now = release_pods().await;
            (now.len() == 4 && all_running_and_new(&now, &old)).then_some(now)
        },
    )
    .await;
    for p in &after {
        assert_eq!(
            log_format(p).as_deref(),
            Some("plain"),
            "{:?}",
            p.metadata.name
        );
        let name = p.metadata.name.clone().expect("name");
        let line = first_log_line(name.clone()).await;
        assert!(!line.starts_with('{'), "{name} logs plain text: {line}");
    }
    edit_is_refused("tj2").await;

    // helm uninstall removes what the chart installed and leaves what its README says it
    // leaves: the snapshots, the certificate Secrets, the Lease, and a hold in force.
    let manifest = release
        .helm
        .run(
            &[
                "get",
                "manifest",
                "hf",
                "--namespace",
                ns,
                "--kubeconfig",
                &release.kubeconfig,
            ]
            .map(str::to_owned),
        )
        .expect("helm get manifest");
    let installed = holdfast_tests::helm::documents(&manifest).expect("the release's manifest");
    assert!(installed.len() > 10, "{} objects", installed.len());
    release.uninstall().expect("helm uninstall");
    for doc in &installed {
        let (group, version) = match doc["apiVersion"].as_str().expect("apiVersion") {
            gv if gv.contains('/') => gv.split_once('/').expect("group/version"),
            v => ("", v),
        };
        let kind = doc["kind"].as_str().expect("kind");
        let name = doc["metadata"]["name"].as_str().expect("name");
        let gvk = kube::core::GroupVersionKind::gvk(group, version, kind);
        let (resource, caps) = kube::discovery::pinned_kind(&admin, &gvk)
            .await
            .unwrap_or_else(|e| panic!("{gvk:?}: {e}"));
        let api: Api<DynamicObject> = match caps.scope {
            kube::discovery::Scope::Namespaced => Api::namespaced_with(
                admin.clone(),
                doc["metadata"]["namespace"].as_str().unwrap_or(ns),
                &resource,
            ),
            kube::discovery::Scope::Cluster => Api::all_with(admin.clone(), &resource),
        };
        wait_for(
            "the release's object removed",
            Duration::from_secs(60),
            || async { matches!(api.get_opt(name).await, Ok(None)).then_some(()) },
        )
        .await;
    }
    let secrets: Vec<String> = Api::<Secret>::namespaced(admin.clone(), ns)
        .list(&ListParams::default().labels("holdfast.dev/certificate"))
        .await
        .expect("secrets")
        .items
        .into_iter()
        .filter_map(|s| s.metadata.name)
        .collect();
    let mut expected = ["ca", "webhook-tls", "controller-tls"].map(|s| format!("{fullname}-{s}"));
    expected.sort();
    let mut secrets = secrets;
    secrets.sort();
    assert_eq!(secrets, expected, "the certificate Secrets stay");
    assert!(
        leases.get_opt(&lease_name).await.expect("lease").is_some(),
        "the Lease stays"
    );
    // The snapshots (holdfast's or Trainer's, whichever wrote first) stay with their jobs.
    let left = Api::<ConfigMap>::namespaced(admin.clone(), &tns);
    for job in ["tj", "tj2"] {
        assert!(
            left.get_opt(&format!("{job}-runtime-snapshot"))
                .await
                .expect("get")
                .is_some(),
            "{job}'s snapshot stays"
        );
    }
    let held = trainjobs.get("tj").await.expect("tj");
    assert_eq!(
        held.data["spec"]["suspend"], true,
        "the hold stays in force"
    );
    assert_eq!(
        held.metadata
            .annotations
            .unwrap_or_default()
            .get(holdfast_core::names::ANN_HOLD_INSTANCE),
        Some(&"1".to_owned()),
        "with its annotations"
    );
    for job in ["tj", "tj2"] {
        trainjobs
            .delete(job, &DeleteParams::default())
            .await
            .expect("delete");
    }
}

/// A pod event as the watch delivered it, in the apiserver's order.
#[derive(Debug, Clone)]
enum PodEvent {
    /// First seen (created).
    Added { uid: String },
    /// Gone from the apiserver (its containers ended and the kubelet let it go).
    Deleted { uid: String },
}

/// The issue's flow on real pods, plain mode (issue #15, item 5): a TrainJob runs through
/// Trainer, JobSet and the kubelet; dispatch holds it and its pod really terminates, slowly
/// (the workload honours SIGTERM after 8 s); a Release while that pod is still terminating
/// answers `PodsRemain` and writes nothing; once it is gone, Release resumes the job and a new
/// execution starts. From the pod watch, in the apiserver's own order: no pod of the second
/// execution was created while one of the first remained.
#[tokio::test]
#[ignore = "tier 3: run with --ignored (builds and starts a real node)"]
async fn plain_hold_stops_real_pods_and_release_waits_for_the_last_one_no_overlap() {
    use holdfast_controller::hold::{ExecutorConfig, HoldExecutor, client_without_retry};
    use holdfast_core::hold::{CallMeta, HoldError, Outcome};
    use holdfast_core::mode::Mode;
    use kube::runtime::watcher;

    let cluster = NodeCluster::shared();
    let ns = cluster.namespace("node-hold").await.expect("namespace");
    let admin = cluster.client(Identity::Admin).await.expect("client");
    let kubeconfig = kube::config::Kubeconfig::read_from(
        cluster.control_plane().kubeconfig(Identity::Controller),
    )
    .expect("kubeconfig");
    let config = kube::Config::from_custom_kubeconfig(
        kubeconfig,
        &kube::config::KubeConfigOptions::default(),
    )
    .await
    .expect("config");
    let exec = HoldExecutor::new(
        client_without_retry(config).expect("client"),
        Mode::Plain,
        ExecutorConfig {
            apiserver_request_timeout: holdfast_tests::control_plane::APISERVER_REQUEST_TIMEOUT,
            ..ExecutorConfig::default()
        },
    );
    let meta = |instance: Option<u64>| CallMeta {
        instance,
        deadline: jiff::Timestamp::now() + jiff::SignedDuration::from_secs(60),
        reason: None,
    };

    // A runtime whose pods take 8 s to stop after SIGTERM.
    let mut runtime = training_runtime("slow-stop", cluster.workload_image());
    runtime["spec"]["template"]["spec"]["replicatedJobs"][0]["template"]["spec"]["template"]["spec"]
        ["containers"][0]["env"][0]["value"] = serde_json::json!("8");
    let runtimes: Api<DynamicObject> = Api::namespaced_with(
        admin.clone(),
        &ns,
        &trainer_resource("TrainingRuntime", "trainingruntimes"),
    );
    runtimes
        .create(
            &PostParams::default(),
            &serde_json::from_value(runtime).expect("runtime"),
        )
        .await
        .expect("create runtime");

    // Watch the pods from the start, in the apiserver's order.
    let pods: Api<Pod> = Api::namespaced(admin.clone(), &ns);
    let events = std::sync::Arc::new(std::sync::Mutex::new(Vec::<PodEvent>::new()));
    let recorder = {
        let events = events.clone();
        let mut known = std::collections::BTreeSet::new();
        let deletions = watcher(
            pods.clone(),
            watcher::Config::default().labels("jobset.sigs.k8s.io/jobset-name=tj"),
        );
        tokio::spawn(async move {
            let mut deletions = std::pin::pin!(deletions);
            while let Some(ev) = deletions.next().await {
                let Ok(ev) = ev else { continue };
                let mut out = events.lock().expect("events");
                match ev {
                    watcher::Event::Apply(p) | watcher::Event::InitApply(p) => {
                        let uid = p.metadata.uid.clone().unwrap_or_default();
                        if known.insert(uid.clone()) {
                            out.push(PodEvent::Added { uid });
                        }
                    }
                    watcher::Event::Delete(p) => out.push(PodEvent::Deleted {
                        uid: p.metadata.uid.clone().unwrap_or_default(),
                    }),
                    watcher::Event::Init | watcher::Event::InitDone => {}
                }
            }
        })
    };

    // Created suspended, opened by dispatch: the first execution runs.
    let trainjobs: Api<DynamicObject> = Api::namespaced_with(
        admin.clone(),
        &ns,
        &holdfast_tests::objects::trainjob_resource(),
    );
    let tj: DynamicObject = serde_json::from_value(serde_json::json!({
        "apiVersion": "trainer.kubeflow.org/v1alpha1", "kind": "TrainJob",
        "metadata": {"name": "tj"},
        "spec": {"suspend": true, "runtimeRef": {"name": "slow-stop", "kind": "TrainingRuntime", "apiGroup": "trainer.kubeflow.org"}}
    }))
    .expect("trainjob");
    trainjobs
        .create(&PostParams::default(), &tj)
        .await
        .expect("create trainjob");
    exec.open(&ns, "tj", meta(None)).await.expect("open");
    let first = wait_for(
        "the first execution Running",
        Duration::from_secs(120),
        || async {
            let ps = running_pods(&pods, "tj").await;
            (!ps.is_empty() && ps.iter().all(is_running)).then_some(ps)
        },
    )
    .await;

    // Hold: the TrainJob is suspended and its pod starts terminating, slowly.
    assert_eq!(
        exec.hold(&ns, "tj", meta(Some(1))).await.expect("hold"),
        Outcome::Held
    );
    wait_for("the pod terminating", Duration::from_secs(60), || async {
        running_pods(&pods, "tj")
            .await
            .iter()
            .any(|p| p.metadata.deletion_timestamp.is_some())
            .then_some(())
    })
    .await;
    // Release while it still terminates: refused, nothing written.
    let before = trainjobs.get("tj").await.expect("tj");
    match exec.release(&ns, "tj", meta(Some(1))).await {
        Err(HoldError::PodsRemain) => {}
        other => panic!("release while a pod terminates: {other:?}"),
    }
    let after = trainjobs.get("tj").await.expect("tj");
    assert_eq!(
        before.metadata.resource_version, after.metadata.resource_version,
        "PodsRemain writes nothing"
    );
    // Once the pod is gone, Release resumes it and a new execution starts.
    wait_for(
        "the first execution gone",
        Duration::from_secs(90),
        || async { running_pods(&pods, "tj").await.is_empty().then_some(()) },
    )
    .await;
    match exec.release(&ns, "tj", meta(Some(1))).await {
        Ok(Outcome::Released { resumed: true }) => {}
        other => panic!("release after the pods went: {other:?}"),
    }
    let old: Vec<String> = first
        .iter()
        .filter_map(|p| p.metadata.uid.clone())
        .collect();
    let second = next_execution(&pods, "tj", &old, Duration::from_secs(120)).await;
    recorder.abort();

    // In the watch's order: every first-execution pod was deleted before any second one
    // was created.
    let events = events.lock().expect("events").clone();
    let new: Vec<String> = second
        .iter()
        .filter_map(|p| p.metadata.uid.clone())
        .collect();
    let first_new = events
        .iter()
        .position(|e| matches!(e, PodEvent::Added { uid, .. } if new.contains(uid)))
        .expect("the second execution's pods were seen created");
    for uid in &old {
        let gone = events
            .iter()
            .position(|e| matches!(e, PodEvent::Deleted { uid: u } if u == uid))
            .unwrap_or_else(|| {
                panic!("pod {uid} of the first execution was seen deleted: {events:?}")
            });
        assert!(
            gone < first_new,
            "pod {uid} of the first execution still existed when the second started: {events:?}"
        );
    }
    let status = exec.status(&ns, "tj").await.expect("status");
    assert_eq!(
        status.attempt, 2,
        "A rose once, with the Release: {status:?}"
    );
    trainjobs
        .delete("tj", &DeleteParams::default())
        .await
        .expect("delete trainjob");
}

/// holdfast's image, built from the Dockerfile's recipe (cached) and imported into the node:
/// its archive and its `repository:tag` reference.
pub(super) fn holdfast_image(cluster: &NodeCluster) -> (std::path::PathBuf, String) {
    let script = holdfast_tests::binaries::cluster_module_dir().join("node/holdfast-image.sh");
    let image_dir = holdfast_tests::binaries::run_build_script(&script).expect("holdfast image");
    let archive = image_dir.join("image.tar");
    let reference = std::fs::read_to_string(image_dir.join("image.ref")).expect("ref");
    cluster.import_image(&archive).expect("import");
    (archive, reference.trim().to_owned())
}

/// The pods of namespace `ns`, each with its phase and container states: what a failed
/// install or rollout is explained by.
pub(super) async fn pod_states(admin: &kube::Client, ns: &str) -> Vec<String> {
    let pods: Api<Pod> = Api::namespaced(admin.clone(), ns);
    pods.list(&ListParams::default())
        .await
        .map(|l| {
            l.items
                .iter()
                .map(|p| {
                    format!(
                        "{:?} {:?}",
                        p.metadata.name,
                        p.status.as_ref().map(|s| (&s.phase, &s.container_statuses))
                    )
                })
                .collect()
        })
        .unwrap_or_default()
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

/// A release of the chart installed on the node from the local image (`helm install --wait`).
/// Dropped while still installed, it is uninstalled, so a failing test leaves no webhook of
/// its own guarding the next test's writes.
pub(super) struct ChartRelease {
    helm: holdfast_tests::helm::Helm,
    name: String,
    namespace: String,
    kubeconfig: String,
    image: (String, String),
    installed: bool,
}

impl ChartRelease {
    /// `helm install` of release `name` in `namespace` with `sets` besides the image's.
    pub(super) async fn install(
        cluster: &NodeCluster,
        name: &str,
        namespace: &str,
        sets: &[&str],
    ) -> Self {
        let (_, reference) = holdfast_image(cluster);
        let (repository, tag) = reference.rsplit_once(':').expect("tag");
        let mut release = ChartRelease {
            helm: holdfast_tests::helm::ensure().expect("helm"),
            name: name.to_owned(),
            namespace: namespace.to_owned(),
            kubeconfig: cluster.kubeconfig(Identity::Admin).display().to_string(),
            image: (repository.to_owned(), tag.to_owned()),
            installed: false,
        };
        let started = Instant::now();
        let out = release.helm_run("install", &["--create-namespace"], sets);
        release.installed = out.is_ok();
        release.explain(cluster, "helm install", out).await;
        eprintln!(
            "helm install {name} ({sets:?}) --wait took {:?}",
            started.elapsed()
        );
        release
    }

    /// `helm upgrade` with `sets` (the image's are always set; nothing is reused).
    async fn upgrade(&self, cluster: &NodeCluster, sets: &[&str]) {
        let out = self.helm_run("upgrade", &[], sets);
        self.explain(cluster, "helm upgrade", out).await;
    }

    /// `helm uninstall`, as the chart README says (without `--wait`: a kueue-mode
    /// AdmissionCheck stays until no ClusterQueue names it, Kueue's finalizer says).
    pub(super) fn uninstall(&mut self) -> anyhow::Result<String> {
        self.installed = false;
        self.helm.run(
            &[
                "uninstall",
                &self.name,
                "--namespace",
                &self.namespace,
                "--kubeconfig",
                &self.kubeconfig,
            ]
            .map(str::to_owned),
        )
    }

    fn helm_run(&self, verb: &str, extra: &[&str], sets: &[&str]) -> anyhow::Result<String> {
        let mut args: Vec<String> = [
            verb,
            &self.name,
            &holdfast_tests::helm::chart_dir().display().to_string(),
            "--namespace",
            &self.namespace,
            "--kubeconfig",
            &self.kubeconfig,
            "--wait",
            "--timeout",
            "5m",
        ]
        .map(str::to_owned)
        .to_vec();
        args.extend(extra.iter().map(|s| s.to_string()));
        // The tag is a content hash that can be all digits: as a string, or helm reads a
        // number (which the chart's schema refuses).
        args.push("--set-string".into());
        args.push(format!("image.tag={}", self.image.1));
        let image = [
            format!("image.repository={}", self.image.0),
            "image.pullPolicy=Never".to_owned(),
        ];
        for s in image.iter().map(String::as_str).chain(sets.iter().copied()) {
            args.push("--set".into());
            args.push(s.to_owned());
        }
        self.helm.run(&args)
    }

    /// Panics with the release's pods and the kubelet's log if `out` failed.
    async fn explain(&self, cluster: &NodeCluster, what: &str, out: anyhow::Result<String>) {
        if let Err(e) = out {
            let admin = cluster.client(Identity::Admin).await.expect("client");
            panic!(
                "{what}: {e:#}\npods: {:#?}\nkubelet:\n{}",
                pod_states(&admin, &self.namespace).await,
                cluster.log_tail("kubelet", 30)
            );
        }
    }

    /// The chart's names for this release (`<fullname>`): the release name, or
    /// `<release>-holdfast`.
    pub(super) fn fullname(&self) -> String {
        if self.name.contains("holdfast") {
            self.name.clone()
        } else {
            format!("{}-holdfast", self.name)
        }
    }

    /// A client of the hold API through the controller's Service, as a caller inside the
    /// cluster reaches it: by the Service's DNS name, verified against the CA the controller
    /// issued its serving certificate from.
    pub(super) async fn hold_api(&self, cluster: &NodeCluster) -> ServiceHoldApi {
        use k8s_openapi::api::core::v1::{Secret, Service};
        holdfast_serve::install_crypto_provider();
        let admin = cluster.client(Identity::Admin).await.expect("client");
        let service = format!("{}-controller", self.fullname());
        let svc = Api::<Service>::namespaced(admin.clone(), &self.namespace)
            .get(&service)
            .await
            .expect("the controller's Service");
        let spec = svc.spec.expect("spec");
        let ip: std::net::IpAddr = spec
            .cluster_ip
            .as_deref()
            .expect("cluster IP")
            .parse()
            .expect("an IP");
        let port = spec
            .ports
            .unwrap_or_default()
            .iter()
            .find(|p| p.name.as_deref() == Some("https"))
            .map(|p| p.port)
            .expect("the https port");
        let local = cluster
            .forward(std::net::SocketAddr::new(ip, port as u16))
            .expect("forward");
        let tls = Api::<Secret>::namespaced(admin, &self.namespace)
            .get(&format!("{}-controller-tls", self.fullname()))
            .await
            .expect("the controller's serving Secret");
        let ca = tls
            .data
            .and_then(|d| d.get("ca.crt").cloned())
            .expect("ca.crt");
        let host = format!("{service}.{}.svc", self.namespace);
        let http = reqwest::Client::builder()
            .add_root_certificate(reqwest::Certificate::from_pem(&ca.0).expect("CA"))
            .resolve(&host, std::net::SocketAddr::from(([127, 0, 0, 1], local)))
            .timeout(Duration::from_secs(90))
            .build()
            .expect("http client");
        ServiceHoldApi {
            base: format!("https://{host}:{local}"),
            http,
        }
    }
}

impl Drop for ChartRelease {
    fn drop(&mut self) {
        if !self.installed {
            return;
        }
        if let Err(e) = self.uninstall() {
            eprintln!("helm uninstall {} on drop: {e:#}", self.name);
        }
    }
}

/// The hold API reached through the controller's Service.
pub(super) struct ServiceHoldApi {
    base: String,
    http: reqwest::Client,
}

impl ServiceHoldApi {
    /// `POST .../trainjobs/{name}/{call}` as the holder of `token`; the status and JSON body.
    pub(super) async fn call(
        &self,
        token: &str,
        ns: &str,
        name: &str,
        call: &str,
        instance: Option<u64>,
    ) -> (u16, serde_json::Value) {
        let deadline = jiff::Timestamp::now() + jiff::SignedDuration::from_secs(60);
        let mut body = serde_json::json!({"deadline": deadline.to_string(), "reason": "node lost"});
        if let Some(i) = instance {
            body["instance"] = i.into();
        }
        let resp = self
            .http
            .post(format!(
                "{}/v1/namespaces/{ns}/trainjobs/{name}/{call}",
                self.base
            ))
            .bearer_auth(token)
            .json(&body)
            .send()
            .await
            .unwrap_or_else(|e| panic!("{call} through the Service: {e:#}"));
        let status = resp.status().as_u16();
        (status, resp.json().await.expect("a JSON body"))
    }
}

/// What the Kueue-mode flow records, each with the resourceVersion it was written at. One
/// etcd stores every object here, so resourceVersions order writes across kinds: the log,
/// sorted by them, is the order the apiserver wrote things in.
#[derive(Debug, Clone)]
enum Written {
    /// A pod of the TrainJob created.
    PodAdded { uid: String },
    /// A pod of the TrainJob gone; when its container finished, by the kubelet's account.
    PodDeleted {
        uid: String,
        finished: Option<jiff::Timestamp>,
    },
    /// The Workload as written: active or not, and holdfast's readmission check's state.
    Workload { active: bool, check: String },
}

fn resource_version(meta: &kube::api::ObjectMeta) -> u64 {
    meta.resource_version
        .as_deref()
        .and_then(|v| v.parse().ok())
        .expect("a numeric resourceVersion (one etcd)")
}

/// The latest `finishedAt` of a pod's terminated containers.
fn finished_at(p: &Pod) -> Option<jiff::Timestamp> {
    p.status
        .as_ref()?
        .container_statuses
        .as_ref()?
        .iter()
        .filter_map(|c| c.state.as_ref()?.terminated.as_ref()?.finished_at.as_ref())
        .map(|t| t.0)
        .max()
}

/// The issue's flow on real pods in Kueue mode (issue #15, item 5): the chart installed in
/// kueue mode on the node, Kueue running, a queued TrainJob waits at holdfast's start gate,
/// dispatch Opens it through the hold API (reached through the controller's Service) and its
/// pod runs; dispatch Holds it → Kueue evicts the Workload, suspends the TrainJob, Trainer
/// suspends the JobSet and the pod really terminates, slowly (15 s of SIGTERM grace);
/// dispatch Releases it while that pod still terminates → Kueue reserves quota again but the
/// chart's readmission gate stays Pending until the last pod of the first execution is gone,
/// then Ready; A rises once; the second execution's pods are created only then. Asserted from
/// the apiserver's own order (resourceVersions) and from the pods' own timestamps.
#[tokio::test]
#[ignore = "tier 3: run with --ignored (builds and starts a real node)"]
async fn kueue_hold_evicts_real_pods_and_the_gate_readmits_only_after_the_last_one_is_gone() {
    use holdfast_core::names::ANN_ATTEMPT;
    use holdfast_tests::kueue;
    use kube::runtime::watcher;
    use std::collections::BTreeSet;
    use std::sync::{Arc, Mutex};

    let cluster = NodeCluster::shared();
    cluster.start_kueue().await.expect("kueue starts");
    let release = ChartRelease::install(cluster, "hfq", "hfq-system", &["mode=kueue"]).await;
    let check_name = format!("{}-readmission", release.fullname());
    let ns = cluster.namespace("node-kq").await.expect("namespace");
    let admin = cluster.client(Identity::Admin).await.expect("client");
    kueue::create_queues(&admin, &ns, "main", &[check_name.as_str()])
        .await
        .expect("queues");
    holdfast_tests::hold_support::api::grant_alice(
        cluster,
        &ns,
        &["open", "hold", "release"],
        &["create"],
    )
    .await;
    let api = release.hold_api(cluster).await;
    let alice = cluster.token(Identity::User).to_owned();

    // A runtime whose pods take 15 s to stop after SIGTERM. They request resources: Kueue
    // applies a ClusterQueue's AdmissionChecks by the flavors a Workload is assigned, and a
    // pod set requesting nothing is assigned none — it would be admitted past the gate.
    let mut runtime = training_runtime("slow-stop", cluster.workload_image());
    let container = &mut runtime["spec"]["template"]["spec"]["replicatedJobs"][0]["template"]["spec"]
        ["template"]["spec"]["containers"][0];
    container["env"][0]["value"] = serde_json::json!("15");
    container["resources"] = serde_json::json!({"requests": {"cpu": "10m", "memory": "16Mi"}});
    Api::<DynamicObject>::namespaced_with(
        admin.clone(),
        &ns,
        &trainer_resource("TrainingRuntime", "trainingruntimes"),
    )
    .create(
        &PostParams::default(),
        &serde_json::from_value(runtime).expect("runtime"),
    )
    .await
    .expect("create runtime");

    // Record pods and Workloads from the start.
    let log = Arc::new(Mutex::new(Vec::<(u64, Written)>::new()));
    let pods: Api<Pod> = Api::namespaced(admin.clone(), &ns);
    let pod_recorder = {
        let log = log.clone();
        let stream = watcher(
            pods.clone(),
            watcher::Config::default().labels("jobset.sigs.k8s.io/jobset-name=tj"),
        );
        tokio::spawn(async move {
            let mut known = BTreeSet::new();
            let mut stream = std::pin::pin!(stream);
            while let Some(ev) = stream.next().await {
                let Ok(ev) = ev else { continue };
                let mut out = log.lock().expect("log");
                match ev {
                    watcher::Event::Apply(p) | watcher::Event::InitApply(p) => {
                        let uid = p.metadata.uid.clone().unwrap_or_default();
                        if known.insert(uid.clone()) {
                            out.push((resource_version(&p.metadata), Written::PodAdded { uid }));
                        }
                    }
                    watcher::Event::Delete(p) => out.push((
                        resource_version(&p.metadata),
                        Written::PodDeleted {
                            uid: p.metadata.uid.clone().unwrap_or_default(),
                            finished: finished_at(&p),
                        },
                    )),
                    watcher::Event::Init | watcher::Event::InitDone => {}
                }
            }
        })
    };
    let workloads: Api<DynamicObject> = Api::namespaced_with(
        admin.clone(),
        &ns,
        &kueue::api_resource("Workload", "workloads"),
    );
    let check_of = {
        let check_name = check_name.clone();
        move |w: &serde_json::Value| -> (String, String) {
            w.pointer("/status/admissionChecks")
                .and_then(|c| c.as_array())
                .and_then(|cs| cs.iter().find(|c| c["name"] == check_name.as_str()))
                .map(|c| {
                    (
                        c["state"].as_str().unwrap_or_default().to_owned(),
                        c["message"].as_str().unwrap_or_default().to_owned(),
                    )
                })
                .unwrap_or_default()
        }
    };
    let workload_recorder = {
        let log = log.clone();
        let check_of = check_of.clone();
        let stream = watcher(workloads.clone(), watcher::Config::default());
        tokio::spawn(async move {
            let mut stream = std::pin::pin!(stream);
            while let Some(ev) = stream.next().await {
                let Ok(watcher::Event::Apply(w) | watcher::Event::InitApply(w)) = ev else {
                    continue;
                };
                let value = serde_json::to_value(&w).expect("json");
                log.lock().expect("log").push((
                    resource_version(&w.metadata),
                    Written::Workload {
                        active: value["spec"]["active"] != false,
                        check: check_of(&value).0,
                    },
                ));
            }
        })
    };
    let condition = |w: &serde_json::Value, kind: &str| -> Option<String> {
        w.pointer("/status/conditions")
            .and_then(|c| c.as_array())?
            .iter()
            .find(|c| c["type"] == kind && c["status"] == "True")
            .map(|c| c["reason"].as_str().unwrap_or_default().to_owned())
    };
    let workload_when = |what: &'static str, pred: Box<dyn Fn(&serde_json::Value) -> bool>| {
        let workloads = workloads.clone();
        let admin = admin.clone();
        async move {
            let deadline = Instant::now() + Duration::from_secs(90);
            loop {
                let all: Vec<serde_json::Value> = workloads
                    .list(&ListParams::default())
                    .await
                    .map(|l| l.items)
                    .unwrap_or_default()
                    .into_iter()
                    .map(|w| serde_json::to_value(w).expect("json"))
                    .collect();
                if let Some(w) = all
                    .iter()
                    .find(|w| w["metadata"].get("deletionTimestamp").is_none() && pred(w))
                {
                    return w.clone();
                }
                if Instant::now() > deadline {
                    let cluster_scoped = |kind: &str, plural: &str| {
                        Api::<DynamicObject>::all_with(
                            admin.clone(),
                            &kueue::api_resource(kind, plural),
                        )
                    };
                    let cqs = cluster_scoped("ClusterQueue", "clusterqueues")
                        .list(&ListParams::default())
                        .await
                        .map(|l| serde_json::to_value(l.items).expect("json"))
                        .unwrap_or_default();
                    let acs = cluster_scoped("AdmissionCheck", "admissionchecks")
                        .list(&ListParams::default())
                        .await
                        .map(|l| serde_json::to_value(l.items).expect("json"))
                        .unwrap_or_default();
                    panic!(
                        "{what}: not within 90s\nclusterqueues: {cqs:#}\nadmissionchecks: {acs:#}\nworkloads: {:#}\npods: {:#?}\nkueue:\n{}\nholdfast's controllers: {:#?}",
                        serde_json::Value::from(all),
                        pod_states(&admin, workloads.namespace().unwrap_or_default()).await,
                        cluster.log_tail("kueue", 30),
                        controller_logs(&admin, "hfq-system").await
                    );
                }
                tokio::time::sleep(Duration::from_millis(250)).await;
            }
        }
    };
    // A managed, queued TrainJob: Kueue's webhook suspends it, and holdfast's gate keeps its
    // Workload at the start gate.
    let trainjobs: Api<DynamicObject> = Api::namespaced_with(
        admin.clone(),
        &ns,
        &holdfast_tests::objects::trainjob_resource(),
    );
    let tj: DynamicObject = serde_json::from_value(serde_json::json!({
        "apiVersion": "trainer.kubeflow.org/v1alpha1", "kind": "TrainJob",
        "metadata": {"name": "tj", "labels": {"holdfast.dev/managed": "true", "kueue.x-k8s.io/queue-name": "main"}},
        "spec": {"runtimeRef": {"name": "slow-stop", "kind": "TrainingRuntime", "apiGroup": "trainer.kubeflow.org"}}
    }))
    .expect("trainjob");
    let created = trainjobs
        .create(&PostParams::default(), &tj)
        .await
        .expect("create trainjob");
    assert_eq!(
        created.data["spec"]["suspend"], true,
        "Kueue suspends a queued job"
    );
    {
        let check_of = check_of.clone();
        workload_when(
            "the Workload with quota, Pending at the start gate",
            Box::new(move |w| {
                let (state, message) = check_of(w);
                condition(w, "QuotaReserved").is_some()
                    && state == "Pending"
                    && message.contains("start gate")
            }),
        )
        .await;
    }

    // Open through the hold API: the gate lets the first execution through, A = 1.
    let (status, answer) = api.call(&alice, &ns, "tj", "open", None).await;
    assert_eq!(
        (status, &answer),
        (
            200,
            &serde_json::json!({"result": "Ok", "outcome": "Opened", "started": false})
        )
    );
    let first = wait_for(
        "the first execution Running",
        Duration::from_secs(120),
        || async {
            let ps = running_pods(&pods, "tj").await;
            (!ps.is_empty() && ps.iter().all(is_running)).then_some(ps)
        },
    )
    .await;
    let old: Vec<String> = first
        .iter()
        .filter_map(|p| p.metadata.uid.clone())
        .collect();
    let tj = trainjobs.get("tj").await.expect("tj");
    assert_eq!(tj.data["spec"]["suspend"], false, "Kueue admitted it");
    assert_eq!(
        tj.metadata.annotations.unwrap_or_default().get(ANN_ATTEMPT),
        Some(&"1".to_owned()),
        "A rose at the start gate"
    );

    // Hold: Kueue evicts the deactivated Workload and suspends the TrainJob; Trainer suspends
    // the JobSet; the pod starts terminating.
    let (status, answer) = api.call(&alice, &ns, "tj", "hold", Some(1)).await;
    assert_eq!(
        (status, &answer),
        (200, &serde_json::json!({"result": "Ok", "outcome": "Held"}))
    );
    workload_when(
        "Kueue evicts the held Workload",
        Box::new(move |w| condition(w, "Evicted").as_deref() == Some("Deactivated")),
    )
    .await;
    wait_for(
        "Kueue suspends the TrainJob",
        Duration::from_secs(60),
        || async {
            let tj = trainjobs.get("tj").await.ok()?;
            (tj.data["spec"]["suspend"] == true).then_some(())
        },
    )
    .await;
    let jobsets: Api<DynamicObject> = Api::namespaced_with(admin.clone(), &ns, &jobset_resource());
    wait_for(
        "Trainer suspends the JobSet",
        Duration::from_secs(60),
        || async {
            let js = jobsets.get("tj").await.ok()?;
            (js.data["spec"]["suspend"] == true).then_some(())
        },
    )
    .await;
    wait_for("the pod terminating", Duration::from_secs(60), || async {
        running_pods(&pods, "tj")
            .await
            .iter()
            .any(|p| p.metadata.deletion_timestamp.is_some())
            .then_some(())
    })
    .await;

    // Release while it still terminates: the Workload is active again and Kueue reserves
    // quota, but the gate holds it Pending, naming the remaining pods.
    let (status, answer) = api.call(&alice, &ns, "tj", "release", Some(1)).await;
    assert_eq!(
        (status, &answer),
        (
            200,
            &serde_json::json!({"result": "Ok", "outcome": "Released", "resumed": true})
        )
    );
    let remaining = running_pods(&pods, "tj").await;
    assert!(
        remaining
            .iter()
            .any(|p| old.contains(p.metadata.uid.as_ref().expect("uid"))),
        "the Release must land while a pod of the first execution still terminates"
    );
    {
        let check_of = check_of.clone();
        workload_when(
            "re-admitted to the gate, Pending on the old pods",
            Box::new(move |w| {
                let (state, message) = check_of(w);
                w["spec"]["active"] != false
                    && condition(w, "QuotaReserved").is_some()
                    && state == "Pending"
                    && message.contains("pods of the previous execution")
            }),
        )
        .await;
    }

    // The second execution runs once the first is gone.
    let second = next_execution(&pods, "tj", &old, Duration::from_secs(150)).await;
    let tj = trainjobs.get("tj").await.expect("tj");
    assert_eq!(
        tj.metadata.annotations.unwrap_or_default().get(ANN_ATTEMPT),
        Some(&"2".to_owned()),
        "A rose once more, at the readmission"
    );
    // Let the watches deliver what was written up to now.
    tokio::time::sleep(Duration::from_secs(2)).await;
    pod_recorder.abort();
    workload_recorder.abort();
    let mut log = log.lock().expect("log").clone();
    log.sort_by_key(|(rv, _)| *rv);
    let new: Vec<String> = second
        .iter()
        .filter_map(|p| p.metadata.uid.clone())
        .collect();

    // In the apiserver's order: the Release (the Workload active again after it was not)...
    let held_at = log
        .iter()
        .find(|(_, w)| matches!(w, Written::Workload { active: false, .. }))
        .map(|(rv, _)| *rv)
        .expect("the Workload seen deactivated");
    let released_at = log
        .iter()
        .find(|(rv, w)| *rv > held_at && matches!(w, Written::Workload { active: true, .. }))
        .map(|(rv, _)| *rv)
        .expect("the Workload seen active again");
    // ...came before the last pod of the first execution was gone...
    let gone: Vec<(u64, Option<jiff::Timestamp>)> = old
        .iter()
        .map(|uid| {
            log.iter()
                .find_map(|(rv, w)| match w {
                    Written::PodDeleted { uid: u, finished } if u == uid => Some((*rv, *finished)),
                    _ => None,
                })
                .unwrap_or_else(|| panic!("pod {uid} of the first execution seen deleted: {log:?}"))
        })
        .collect();
    let last_gone = gone.iter().map(|g| g.0).max().expect("a first pod");
    assert!(
        released_at < last_gone,
        "the Release landed after the old pods were gone (nothing staged): {log:?}"
    );
    // ...the gate said Pending meanwhile and never Ready...
    let between: Vec<&str> = log
        .iter()
        .filter(|(rv, _)| *rv > released_at && *rv < last_gone)
        .filter_map(|(_, w)| match w {
            Written::Workload { check, .. } => Some(check.as_str()),
            _ => None,
        })
        .collect();
    assert!(
        between.contains(&"Pending"),
        "the gate seen Pending while an old pod remained: {log:?}"
    );
    assert!(
        !between.contains(&"Ready"),
        "the gate was Ready while a pod of the first execution remained: {log:?}"
    );
    // ...then Ready, and only after that was any pod of the second execution created.
    let ready_at = log
        .iter()
        .find(|(rv, w)| {
            *rv > released_at && matches!(w, Written::Workload { check, .. } if check == "Ready")
        })
        .map(|(rv, _)| *rv)
        .expect("the gate seen Ready after the Release");
    assert!(ready_at > last_gone, "{log:?}");
    let first_new = log
        .iter()
        .find(|(_, w)| matches!(w, Written::PodAdded { uid } if new.contains(uid)))
        .map(|(rv, _)| *rv)
        .expect("the second execution's pods seen created");
    assert!(
        first_new > ready_at,
        "a pod of the second execution was created before the gate was Ready: {log:?}"
    );

    eprintln!(
        "resourceVersions: released {released_at}, last old pod gone {last_gone}, gate Ready {ready_at}, first new pod {first_new}"
    );

    // From the pods' own timestamps (whole seconds): each pod of the second execution was
    // created, and its container started, no earlier than the last container of the first
    // finished.
    let last_finished = gone
        .iter()
        .map(|g| {
            g.1.expect("the kubelet recorded when the old container finished")
        })
        .max()
        .expect("a first pod");
    for p in &second {
        let created = p
            .metadata
            .creation_timestamp
            .as_ref()
            .expect("creationTimestamp")
            .0;
        let started = p
            .status
            .as_ref()
            .and_then(|s| s.container_statuses.as_ref())
            .into_iter()
            .flatten()
            .filter_map(|c| c.state.as_ref()?.running.as_ref()?.started_at.as_ref())
            .map(|t| t.0)
            .min()
            .expect("the new container's startedAt");
        assert!(
            created >= last_finished && started >= last_finished,
            "pod {:?} (created {created}, started {started}) overlapped the first execution (last finished {last_finished})",
            p.metadata.name
        );
    }

    // Uninstalled while a ClusterQueue still names the chart's AdmissionCheck, the check
    // stays (Terminating, Kueue's finalizer) until no ClusterQueue names it, as the chart
    // README's "Uninstall" says.
    trainjobs
        .delete("tj", &DeleteParams::default())
        .await
        .expect("delete trainjob");
    let mut release = release;
    release.uninstall().expect("helm uninstall");
    let checks: Api<DynamicObject> = Api::all_with(
        admin.clone(),
        &kueue::api_resource("AdmissionCheck", "admissionchecks"),
    );
    let terminating = wait_for(
        "the AdmissionCheck Terminating",
        Duration::from_secs(30),
        || async {
            checks
                .get_opt(&check_name)
                .await
                .ok()
                .flatten()
                .filter(|c| c.metadata.deletion_timestamp.is_some())
        },
    )
    .await;
    assert!(
        terminating
            .metadata
            .finalizers
            .unwrap_or_default()
            .contains(&"kueue.x-k8s.io/resource-in-use".to_owned()),
        "held by Kueue's finalizer"
    );
    Api::<DynamicObject>::all_with(
        admin.clone(),
        &kueue::api_resource("ClusterQueue", "clusterqueues"),
    )
    .delete(&format!("cq-{ns}"), &DeleteParams::default())
    .await
    .expect("delete the ClusterQueue");
    wait_for(
        "the AdmissionCheck gone with the ClusterQueue",
        Duration::from_secs(60),
        || async { matches!(checks.get_opt(&check_name).await, Ok(None)).then_some(()) },
    )
    .await;
}

/// Restarts Trainer when dropped, if it is not running.
pub(super) struct TrainerBack(pub(super) &'static NodeCluster);

impl Drop for TrainerBack {
    fn drop(&mut self) {
        let restarted =
            self.0.with_process(
                "trainer",
                |p| {
                    if p.running() { Ok(()) } else { p.restart() }
                },
            );
        if let Some(Err(e)) = restarted {
            eprintln!("restarting Trainer: {e:#}");
        }
    }
}

/// Set `failurePolicy` on every webhook of Trainer's two webhook configurations (as the
/// harness registers them from its manifests).
pub(super) async fn trainer_webhooks_failure_policy(admin: &kube::Client, policy: &str) {
    use k8s_openapi::api::admissionregistration::v1::{
        MutatingWebhookConfiguration, ValidatingWebhookConfiguration,
    };
    let mutating: Api<MutatingWebhookConfiguration> = Api::all(admin.clone());
    let validating: Api<ValidatingWebhookConfiguration> = Api::all(admin.clone());
    let ops = |n: usize| {
        serde_json::from_value::<json_patch::Patch>(serde_json::Value::from(
            (0..n)
                .map(|i| {
                    serde_json::json!({"op": "replace", "path": format!("/webhooks/{i}/failurePolicy"), "value": policy})
                })
                .collect::<Vec<_>>(),
        ))
        .expect("patch")
    };
    let name = "defaulter.trainer.kubeflow.org";
    let n = mutating
        .get(name)
        .await
        .expect("Trainer's mutating webhooks")
        .webhooks
        .unwrap_or_default()
        .len();
    mutating
        .patch(name, &PatchParams::default(), &Patch::<()>::Json(ops(n)))
        .await
        .expect("patch");
    let name = "validator.trainer.kubeflow.org";
    let n = validating
        .get(name)
        .await
        .expect("Trainer's validating webhooks")
        .webhooks
        .unwrap_or_default()
        .len();
    validating
        .patch(name, &PatchParams::default(), &Patch::<()>::Json(ops(n)))
        .await
        .expect("patch");
}

/// Trainer's snapshot writer (v2.3.0) and holdfast's both run on the node (issue #15, item
/// 5). Trainer first (holdfast's controller scaled to 0): Trainer writes the snapshot and the
/// pod runs the runtime's image; the runtime is edited; holdfast's controller comes back and
/// accepts Trainer's snapshot unchanged; a resumed execution still runs the snapshot's image,
/// not the edited one. holdfast first (Trainer stopped): holdfast writes the snapshot; the
/// runtime is edited; Trainer comes back, reads holdfast's snapshot and runs its image, not
/// the edited one. The admission race (both writers stopped): the TrainJob is admitted, then
/// its runtime edited, then holdfast snapshots the edited version and flags it
/// (`RuntimeChangedSinceAdmission`); the pod runs exactly what the snapshot holds. While
/// Trainer is stopped its webhooks are set to `Ignore` (they would refuse every TrainJob and
/// runtime write), and restored after. Every snapshot read here, Trainer's or holdfast's, has
/// KEP-2599's structure and ownerReference ([`kep::assert_snapshot_structure`]).
#[tokio::test]
#[ignore = "tier 3: run with --ignored (builds and starts a real node)"]
async fn snapshot_writers_in_both_orders_and_the_admission_race_run_the_snapshots_image() {
    use k8s_openapi::api::apps::v1::Deployment;
    use k8s_openapi::api::core::v1::ConfigMap;

    let cluster = NodeCluster::shared();
    let release = ChartRelease::install(cluster, "hfs", "hfs-system", &["mode=plain"]).await;
    let admin = cluster.client(Identity::Admin).await.expect("client");
    let ns = cluster.namespace("node-snap").await.expect("namespace");
    let original = cluster.workload_image().to_owned();
    let edited = "localhost/holdfast/workload-edited:1";
    cluster.tag_image(&original, edited).expect("tag");

    let runtimes: Api<DynamicObject> = Api::namespaced_with(
        admin.clone(),
        &ns,
        &trainer_resource("TrainingRuntime", "trainingruntimes"),
    );
    let trainjobs: Api<DynamicObject> = Api::namespaced_with(
        admin.clone(),
        &ns,
        &holdfast_tests::objects::trainjob_resource(),
    );
    let pods: Api<Pod> = Api::namespaced(admin.clone(), &ns);
    let cms: Api<ConfigMap> = Api::namespaced(admin.clone(), &ns);
    let controller: Api<Deployment> = Api::namespaced(admin.clone(), "hfs-system");
    let controller_name = format!("{}-controller", release.fullname());
    for job in ["trainer-first", "holdfast-first", "race"] {
        let rt: DynamicObject =
            serde_json::from_value(training_runtime(job, &original)).expect("runtime");
        runtimes
            .create(&PostParams::default(), &rt)
            .await
            .expect("create runtime");
    }
    let create = |job: &'static str| {
        let trainjobs = trainjobs.clone();
        async move {
            let tj: DynamicObject = serde_json::from_value(serde_json::json!({
                "apiVersion": "trainer.kubeflow.org/v1alpha1", "kind": "TrainJob",
                "metadata": {"name": job},
                "spec": {"runtimeRef": {"name": job, "kind": "TrainingRuntime", "apiGroup": "trainer.kubeflow.org"}}
            }))
            .expect("trainjob");
            trainjobs
                .create(&PostParams::default(), &tj)
                .await
                .expect("create trainjob");
        }
    };
    let edit = |job: &'static str| {
        let runtimes = runtimes.clone();
        async move {
            let container =
                "/spec/template/spec/replicatedJobs/0/template/spec/template/spec/containers/0";
            let patch: json_patch::Patch = serde_json::from_value(serde_json::json!([
                {"op": "replace", "path": format!("{container}/image"), "value": edited},
                {"op": "replace", "path": format!("{container}/env/1/value"), "value": "edited"}
            ]))
            .expect("patch");
            runtimes
                .patch(job, &PatchParams::default(), &Patch::<()>::Json(patch))
                .await
                .expect("edit the runtime");
        }
    };
    // The snapshot once it exists: which image it holds, and who created it; whoever wrote
    // it, its structure and ownerReference are the KEP's.
    let snapshot = |job: &'static str| {
        let cms = cms.clone();
        let trainjobs = trainjobs.clone();
        async move {
            let cm = wait_for("the snapshot", Duration::from_secs(60), || async {
                cms.get_opt(&format!("{job}-runtime-snapshot"))
                    .await
                    .ok()
                    .flatten()
            })
            .await;
            let tj = trainjobs.get(job).await.expect("the TrainJob");
            kep::assert_snapshot_structure(&cm, &tj, job);
            let yaml = cm
                .data
                .as_ref()
                .and_then(|d| d.get("runtime"))
                .cloned()
                .expect("the runtime key");
            let creator = cm
                .metadata
                .managed_fields
                .as_ref()
                .and_then(|f| f.first())
                .and_then(|f| f.manager.clone())
                .unwrap_or_default();
            (
                yaml,
                creator,
                cm.metadata.resource_version.unwrap_or_default(),
            )
        }
    };
    // The image the job's running pod runs, and the runtime version its container reports
    // from inside (the workload logs its WORKLOAD_MARK: `runtime-<job>`, or `edited` after
    // the edit). containerd reports one name for content with two, so the pod's status
    // cannot tell the two tags apart; the pod's spec and the container's own log can.
    let running_image = |job: &'static str| {
        let pods = pods.clone();
        async move {
            let ps = wait_for(
                "the job's pod Running",
                Duration::from_secs(120),
                || async {
                    let ps = running_pods(&pods, job).await;
                    (!ps.is_empty() && ps.iter().all(is_running)).then_some(ps)
                },
            )
            .await;
            let p = &ps[0];
            let image = p.spec.as_ref().expect("spec").containers[0]
                .image
                .clone()
                .expect("image");
            let config = config_of(&pods, p.metadata.name.as_deref().expect("name"), "node").await;
            let mark = if image == edited {
                "edited".to_owned()
            } else {
                format!("runtime-{job}")
            };
            assert_eq!(
                config["env"]["WORKLOAD_MARK"], mark,
                "the container runs the runtime version its image says: {config}"
            );
            (image, p.metadata.uid.clone().expect("uid"))
        }
    };
    let scale = |replicas: i32| {
        let controller = controller.clone();
        let controller_name = controller_name.clone();
        let pods = Api::<Pod>::namespaced(admin.clone(), "hfs-system");
        async move {
            controller
                .patch(
                    &controller_name,
                    &PatchParams::default(),
                    &Patch::Merge(serde_json::json!({"spec": {"replicas": replicas}})),
                )
                .await
                .expect("scale");
            wait_for("the controller scaled", Duration::from_secs(90), || async {
                let ps = pods
                    .list(&ListParams::default().labels(
                        "app.kubernetes.io/instance=hfs,app.kubernetes.io/component=controller",
                    ))
                    .await
                    .ok()?
                    .items;
                (ps.len() == replicas as usize && ps.iter().all(is_running)).then_some(())
            })
            .await;
        }
    };

    // Trainer first: holdfast's controller is down, Trainer writes the snapshot and runs it.
    scale(0).await;
    create("trainer-first").await;
    let (yaml, creator, version) = snapshot("trainer-first").await;
    assert_eq!(creator, "trainer", "Trainer wrote it");
    assert!(yaml.contains(&original), "{yaml}");
    let (image, first_pod) = running_image("trainer-first").await;
    assert_eq!(image, original);
    edit("trainer-first").await;

    // Trainer stops (its webhooks set to Ignore meanwhile). Should the test fail while it
    // is down, the guard starts it again for the tests after this one.
    cluster
        .with_process("trainer", |p| p.kill())
        .expect("trainer");
    let _trainer_back = TrainerBack(cluster);
    trainer_webhooks_failure_policy(&admin, "Ignore").await;

    // The admission race: both writers down; admitted against the original runtime, which
    // is then edited before any snapshot exists.
    create("race").await;
    let admitted = trainjobs.get("race").await.expect("race");
    assert!(
        admitted.metadata.annotations.as_ref().is_some_and(
            |a| a.contains_key(holdfast_core::names::ANN_ADMITTED_RUNTIME_RESOURCE_VERSION)
        ),
        "the webhook recorded the runtime it admitted against: {:?}",
        admitted.metadata.annotations
    );
    edit("race").await;

    // holdfast's controller back: Trainer's snapshot is kept as it is; the race job's
    // snapshot is of the edited runtime, and flagged.
    scale(2).await;
    let (_, creator, race_version) = snapshot("race").await;
    assert_eq!(
        creator, "holdfast",
        "holdfast wrote the race job's snapshot"
    );
    let (race_yaml, _, _) = snapshot("race").await;
    assert!(race_yaml.contains(edited), "{race_yaml}");
    let events: Api<k8s_openapi::api::events::v1::Event> = Api::namespaced(admin.clone(), &ns);
    wait_for(
        "the admission race flagged",
        Duration::from_secs(60),
        || async {
            events
                .list(&ListParams::default())
                .await
                .ok()?
                .items
                .into_iter()
                .find(|e| {
                    e.reason.as_deref() == Some("RuntimeChangedSinceAdmission")
                        && e.regarding.as_ref().and_then(|r| r.name.as_deref()) == Some("race")
                })
        },
    )
    .await;

    // holdfast first: Trainer is still down; holdfast writes the snapshot; then the edit.
    create("holdfast-first").await;
    let (yaml, creator, _) = snapshot("holdfast-first").await;
    assert_eq!(creator, "holdfast", "holdfast wrote it");
    assert!(yaml.contains(&original), "{yaml}");
    edit("holdfast-first").await;

    // Trainer back: it reads holdfast's snapshots and runs what they hold.
    cluster
        .with_process("trainer", |p| p.restart())
        .expect("trainer")
        .expect("restart");
    trainer_webhooks_failure_policy(&admin, "Fail").await;
    let (image, _) = running_image("holdfast-first").await;
    assert_eq!(image, original, "the snapshot's image, not the edited one");
    let (image, _) = running_image("race").await;
    assert_eq!(image, edited, "exactly the race job's snapshot");

    // Trainer's snapshot survived holdfast's controller unchanged, and a new execution of
    // its job still runs the snapshot's image.
    let (_, _, now) = snapshot("trainer-first").await;
    assert_eq!(now, version, "Trainer's snapshot was not rewritten");
    let pp = PatchParams::default();
    trainjobs
        .patch(
            "trainer-first",
            &pp,
            &Patch::Merge(serde_json::json!({"spec": {"suspend": true}})),
        )
        .await
        .expect("suspend");
    wait_for("the pod gone", Duration::from_secs(90), || async {
        running_pods(&pods, "trainer-first")
            .await
            .is_empty()
            .then_some(())
    })
    .await;
    trainjobs
        .patch(
            "trainer-first",
            &pp,
            &Patch::Merge(serde_json::json!({"spec": {"suspend": false}})),
        )
        .await
        .expect("resume");
    let (image, pod) = running_image("trainer-first").await;
    assert_ne!(pod, first_pod, "a new execution");
    assert_eq!(image, original, "the snapshot's image, not the edited one");
    let (_, _, now) = snapshot("race").await;
    assert_eq!(
        now, race_version,
        "the race job's snapshot was not rewritten"
    );

    for job in ["trainer-first", "holdfast-first", "race"] {
        trainjobs
            .delete(job, &DeleteParams::default())
            .await
            .expect("delete");
    }
    drop(release);
}
