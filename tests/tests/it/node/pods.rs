//! Pods on the node: a workload pod, a TrainJob through Trainer and JobSet, and the
//! plain-mode hold on real pods.

use super::*;

pub(super) fn workload_pod(name: &str, image: &str, grace_seconds: u32, mark: &str) -> Pod {
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

/// Wait until pod `name` is Running and ready; on timeout, panic with what the pod, its events
/// and the node's logs say.
pub(super) async fn wait_running(cluster: &NodeCluster, pods: &Api<Pod>, name: &str) -> Pod {
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

#[tokio::test]
#[ignore = "tier 3: run with --ignored (builds and starts a real node)"]
async fn a_trainjob_runs_suspends_and_resumes_through_trainer_and_jobset() {
    let cluster = NodeCluster::shared();
    let ns = cluster.namespace("node-tj").await.expect("namespace");
    let admin = cluster.client(Identity::Admin).await.expect("client");
    let trainjobs = workload_runtime(cluster, &admin, &ns).await;
    let started = Instant::now();
    create_workload_trainjob(&trainjobs, "tj", None).await;

    // Trainer makes the JobSet, JobSet the Jobs, the Job controller the pods, the node runs them.
    let jobsets: Api<DynamicObject> =
        Api::namespaced_with(admin.clone(), &ns, &holdfast_cluster::resources::jobset());
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
    let first = next_execution(
        &pods,
        "tj",
        &[],
        "the TrainJob's pod Running",
        Duration::from_secs(120),
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
    let second = next_execution(
        &pods,
        "tj",
        &[],
        "new pods Running after resume",
        Duration::from_secs(120),
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

/// A pod event as the watch delivered it, in the apiserver's order.
#[derive(Debug, Clone)]
pub(super) enum PodEvent {
    /// First seen (created).
    Added { uid: String },
    /// Gone from the apiserver (its containers ended and the kubelet let it go).
    Deleted { uid: String },
}

/// The flow on real pods, plain mode (issue #15, item 5): a TrainJob runs through
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
    slow_stop_runtime(cluster, &admin, &ns, "slow-stop", 8).await;

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
    let trainjobs: Api<DynamicObject> =
        Api::namespaced_with(admin.clone(), &ns, &holdfast_cluster::resources::trainjob());
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
    let first = next_execution(
        &pods,
        "tj",
        &[],
        "the first execution Running",
        Duration::from_secs(120),
    )
    .await;

    // Hold: the TrainJob is suspended and its pod starts terminating, slowly.
    assert_eq!(
        exec.hold(&ns, "tj", meta(Some(1))).await.expect("hold"),
        Outcome::Held
    );
    wait_terminating(&pods, "tj").await;
    // Release while it still terminates: refused, nothing written. Compared: the spec (by its
    // generation) and the metadata a Release writes, not the resourceVersion — Trainer patches
    // the TrainJob's status as the JobSet's changes while the pod terminates.
    let written = |tj: &DynamicObject| {
        (
            tj.metadata.generation,
            tj.metadata.annotations.clone(),
            tj.metadata.labels.clone(),
            tj.metadata.finalizers.clone(),
            tj.data["spec"].clone(),
        )
    };
    let before = trainjobs.get("tj").await.expect("tj");
    match exec.release(&ns, "tj", meta(Some(1))).await {
        Err(HoldError::PodsRemain) => {}
        other => panic!("release while a pod terminates: {other:?}"),
    }
    let after = trainjobs.get("tj").await.expect("tj");
    assert_eq!(
        written(&before),
        written(&after),
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
    let second = next_execution(
        &pods,
        "tj",
        &old,
        "the second execution Running",
        Duration::from_secs(120),
    )
    .await;
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
