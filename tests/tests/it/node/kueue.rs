//! The Kueue-mode hold on real pods.

use super::*;

/// What the Kueue-mode flow records, each with the resourceVersion it was written at. One
/// etcd stores every object here, so resourceVersions order writes across kinds: the log,
/// sorted by them, is the order the apiserver wrote things in.
#[derive(Debug, Clone)]
pub(super) enum Written {
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

pub(super) fn resource_version(meta: &kube::api::ObjectMeta) -> u64 {
    meta.resource_version
        .as_deref()
        .and_then(|v| v.parse().ok())
        .expect("a numeric resourceVersion (one etcd)")
}

/// The latest `finishedAt` of a pod's terminated containers.
pub(super) fn finished_at(p: &Pod) -> Option<jiff::Timestamp> {
    p.status
        .as_ref()?
        .container_statuses
        .as_ref()?
        .iter()
        .filter_map(|c| c.state.as_ref()?.terminated.as_ref()?.finished_at.as_ref())
        .map(|t| t.0)
        .max()
}

/// The flow on real pods in Kueue mode (issue #15, item 5): the chart installed in
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
    create_runtime(&admin, &ns, runtime).await;

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
    let workloads: Api<DynamicObject> =
        Api::namespaced_with(admin.clone(), &ns, &holdfast_cluster::resources::workload());
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
                            &holdfast_cluster::resources::kueue(kind, plural),
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
    let trainjobs: Api<DynamicObject> =
        Api::namespaced_with(admin.clone(), &ns, &holdfast_cluster::resources::trainjob());
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
    let first = next_execution(
        &pods,
        "tj",
        &[],
        "the first execution Running",
        Duration::from_secs(120),
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
    let jobsets: Api<DynamicObject> =
        Api::namespaced_with(admin.clone(), &ns, &holdfast_cluster::resources::jobset());
    wait_for(
        "Trainer suspends the JobSet",
        Duration::from_secs(60),
        || async {
            let js = jobsets.get("tj").await.ok()?;
            (js.data["spec"]["suspend"] == true).then_some(())
        },
    )
    .await;
    wait_terminating(&pods, "tj").await;

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
    let second = next_execution(
        &pods,
        "tj",
        &old,
        "the second execution Running",
        Duration::from_secs(150),
    )
    .await;
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
        &holdfast_cluster::resources::admission_check(),
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
    Api::<DynamicObject>::all_with(admin.clone(), &holdfast_cluster::resources::cluster_queue())
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
