//! Upgrading holdfast itself with holds in force: from the previous release
//! (`tests/cluster/node/previous-release.env`, built from that commit's own tree) to this
//! tree's chart and image, then `helm rollback` to it, in both modes, on the node, installed
//! from the cluster's registry as a user installs. Dispatch keeps calling through the
//! controller's Service all along.

use super::*;
use holdfast_core::names::ANN_HOLD_INSTANCE;
use holdfast_tests::chart_on_node::{Published, previous_release, publish_previous};
use kube::runtime::watcher;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

/// The previous release installed in plain mode, in a namespace enforcing Pod Security
/// `restricted`, with a running TrainJob dispatch opened, then held (instance 1):
/// `helm upgrade --reuse-values` to this tree's chart fails on a value the previous chart did
/// not have (the trap the upgrade page warns of) and changes nothing; `helm upgrade
/// --reset-then-reuse-values` keeps the install's mode and takes the new defaults; `helm
/// rollback` to the first revision brings the previous image back. Through both rollouts a
/// dispatch loop holds, releases and reads a second TrainJob through the Service, and every
/// answer is true of what the apiserver then holds; the held job's hold annotations never
/// change, no pod of it starts, its TrainJob is never unsuspended, and neither snapshot
/// changes. After the rollback its holder releases it.
#[tokio::test]
#[ignore = "tier 3: run with --ignored (builds and starts a real node)"]
async fn an_upgrade_from_the_previous_release_and_a_rollback_keep_every_hold_and_snapshot_in_plain_mode()
 {
    upgrade_and_roll_back("plain").await;
}

/// [`an_upgrade_from_the_previous_release_and_a_rollback_keep_every_hold_and_snapshot_in_plain_mode`]
/// in kueue mode: the held object is the Workload, which is never made active again, and the
/// queue requires the release's readmission check throughout.
#[tokio::test]
#[ignore = "tier 3: run with --ignored (builds and starts a real node)"]
async fn an_upgrade_from_the_previous_release_and_a_rollback_keep_every_hold_and_snapshot_in_kueue_mode()
 {
    upgrade_and_roll_back("kueue").await;
}

/// What the dispatch loop saw: answers, by kind, and every answer found untrue.
#[derive(Default, Debug)]
struct Calls {
    ok: usize,
    /// Refusals a lost call explains (a Release's StaleHold after its Hold went unanswered).
    refused: Vec<String>,
    /// Refusals nothing explains.
    unexpected: Vec<String>,
    unanswered: Vec<String>,
    untrue: Vec<String>,
    /// Answers (200) that arrived while helm was rolling the release.
    ok_in_rollout: usize,
    /// Answers (200) after helm returned, by call: the rolled-out release's.
    ok_after: std::collections::BTreeMap<&'static str, usize>,
}

/// What a guard makes of an object its watch lists.
enum Guarded {
    /// Not the object it guards (another Workload of the namespace).
    NotMine,
    /// The guarded object, as it must be.
    Fine,
    /// The guarded object, wrong: why.
    Bad(String),
}

/// A guard's reading of an object its watch lists.
type Verdict = Box<dyn Fn(&serde_json::Value) -> Guarded + Send>;

/// Where the release is while the loop calls: before helm runs, while it rolls, after.
const BEFORE: u8 = 0;
const ROLLING: u8 = 1;
const AFTER: u8 = 2;

/// A watch's events as JSON, for guards that read any kind the same way.
fn json_events<K: serde::Serialize>(
    ev: watcher::Result<watcher::Event<K>>,
) -> watcher::Result<watcher::Event<serde_json::Value>> {
    let json = |o: K| serde_json::to_value(o).expect("json");
    ev.map(|e| match e {
        watcher::Event::Apply(o) => watcher::Event::Apply(json(o)),
        watcher::Event::InitApply(o) => watcher::Event::InitApply(json(o)),
        watcher::Event::Delete(o) => watcher::Event::Delete(json(o)),
        watcher::Event::Init => watcher::Event::Init,
        watcher::Event::InitDone => watcher::Event::InitDone,
    })
}

/// The values `values.yaml` sets, as dotted paths to each leaf or list.
fn value_paths(values: &serde_json::Value, prefix: &str, out: &mut Vec<String>) {
    match values.as_object() {
        Some(map) if !map.is_empty() => {
            for (k, v) in map {
                value_paths(v, &format!("{prefix}.{k}"), out);
            }
        }
        _ => out.push(prefix.to_owned()),
    }
}

async fn upgrade_and_roll_back(mode: &'static str) {
    let kueue = mode == "kueue";
    let cluster = NodeCluster::shared();
    if kueue {
        cluster.start_kueue().await.expect("kueue starts");
    }
    let helm = holdfast_tests::helm::ensure().expect("helm");
    let previous = previous_release();
    let old: Published = publish_previous(cluster, &helm);
    let new: Published = publish(cluster, &helm);
    assert_ne!(old.image, new.image, "two builds of two trees");
    eprintln!(
        "previous release {} ({}), image {}",
        previous.version, previous.commit, old.image
    );
    let name = format!("hfup{}", &mode[..1]);
    let system = format!("{name}-system");
    let set_mode = format!("mode={mode}");
    // The release's namespace enforces Pod Security `restricted`: both versions' pods must be
    // admitted there.
    let admin = cluster.client(Identity::Admin).await.expect("client");
    Api::<k8s_openapi::api::core::v1::Namespace>::all(admin.clone())
        .patch(
            &system,
            &PatchParams::apply("holdfast-tests").force(),
            &Patch::Apply(serde_json::json!({
                "apiVersion": "v1", "kind": "Namespace",
                "metadata": {"name": system, "labels": {
                    "pod-security.kubernetes.io/enforce": "restricted",
                    "pod-security.kubernetes.io/enforce-version": "latest"
                }}
            })),
        )
        .await
        .expect("the release's namespace, restricted");
    let mut release =
        ChartRelease::install_published(cluster, &name, &system, &[&set_mode], old.clone()).await;
    let fullname = release.fullname();
    let controller_image = || {
        let admin = admin.clone();
        let system = system.clone();
        let fullname = fullname.clone();
        async move {
            let dep = Api::<k8s_openapi::api::apps::v1::Deployment>::namespaced(admin, &system)
                .get(&format!("{fullname}-controller"))
                .await
                .expect("the controller's Deployment");
            let spec = dep.spec.template.spec.expect("pod spec");
            let c = spec.containers.first().expect("a container");
            let mode = c
                .env
                .iter()
                .flatten()
                .find(|e| e.name == "HOLDFAST_MODE")
                .and_then(|e| e.value.clone());
            (c.image.clone().unwrap_or_default(), mode)
        }
    };
    assert_eq!(
        controller_image().await,
        (old.image.clone(), Some(mode.to_owned()))
    );

    // The jobs: `held` runs, then is held; `busy` is held and released over and over, and
    // never runs: unmanaged, created suspended (in plain mode a Release resumes only a job
    // dispatch opened), and in kueue mode asking more than its queue's quota.
    let ns = cluster
        .namespace(&format!("node-up-{mode}"))
        .await
        .expect("namespace");
    // Both runtimes' pods request resources: Kueue applies a ClusterQueue's AdmissionChecks by
    // the flavors a Workload is assigned, and a pod set requesting nothing is assigned none.
    let runtimes: Api<DynamicObject> = Api::namespaced_with(
        admin.clone(),
        &ns,
        &holdfast_cluster::resources::training_runtime(),
    );
    for (runtime, cpu) in [("small", "10m"), ("huge", "2000")] {
        let mut rt = training_runtime(runtime, cluster.workload_image());
        rt["spec"]["template"]["spec"]["replicatedJobs"][0]["template"]["spec"]["template"]["spec"]
            ["containers"][0]["resources"] =
            serde_json::json!({"requests": {"cpu": cpu, "memory": "16Mi"}});
        runtimes
            .create(
                &PostParams::default(),
                &serde_json::from_value(rt).expect("runtime"),
            )
            .await
            .expect("create runtime");
    }
    let trainjobs: Api<DynamicObject> =
        Api::namespaced_with(admin.clone(), &ns, &holdfast_cluster::resources::trainjob());
    let check = format!("{fullname}-readmission");
    if kueue {
        holdfast_tests::kueue::create_queues(&admin, &ns, "main", &[check.as_str()])
            .await
            .expect("queues");
    }
    // `held` is dispatch's own job: managed, created suspended, opened through the hold API.
    let create = |job: &'static str, runtime: &'static str, managed: bool| {
        let trainjobs = trainjobs.clone();
        async move {
            let mut tj = serde_json::json!({
                "apiVersion": "trainer.kubeflow.org/v1alpha1", "kind": "TrainJob",
                "metadata": {"name": job, "labels": {}},
                "spec": {"runtimeRef": {"name": runtime, "kind": "TrainingRuntime", "apiGroup": "trainer.kubeflow.org"}}
            });
            tj["spec"]["suspend"] = true.into();
            if kueue {
                tj["metadata"]["labels"]["kueue.x-k8s.io/queue-name"] = "main".into();
            }
            if managed {
                tj["metadata"]["labels"]["holdfast.dev/managed"] = "true".into();
            }
            trainjobs
                .create(
                    &PostParams::default(),
                    &serde_json::from_value(tj).expect("trainjob"),
                )
                .await
                .expect("create trainjob")
        }
    };
    let held_uid = create("held", "small", true)
        .await
        .metadata
        .uid
        .expect("uid");
    let busy_uid = create("busy", "huge", false)
        .await
        .metadata
        .uid
        .expect("uid");

    // The held object of a job: its TrainJob (plain), or the Workload it controls (kueue).
    let workloads: Api<DynamicObject> =
        Api::namespaced_with(admin.clone(), &ns, &holdfast_cluster::resources::workload());
    let held_object = {
        let trainjobs = trainjobs.clone();
        let workloads = workloads.clone();
        move |job: &'static str, uid: String| {
            let trainjobs = trainjobs.clone();
            let workloads = workloads.clone();
            async move {
                let object = if kueue {
                    workloads
                        .list(&ListParams::default())
                        .await
                        .ok()?
                        .items
                        .into_iter()
                        .find(|w| {
                            w.metadata.deletion_timestamp.is_none()
                                && w.metadata
                                    .owner_references
                                    .iter()
                                    .flatten()
                                    .any(|o| o.uid == uid && o.controller == Some(true))
                        })?
                } else {
                    trainjobs.get(job).await.ok()?
                };
                Some(serde_json::to_value(object).expect("json"))
            }
        }
    };
    let hold_instance = |o: &serde_json::Value| -> Option<String> {
        o["metadata"]["annotations"][ANN_HOLD_INSTANCE]
            .as_str()
            .map(str::to_owned)
    };
    // Stopped, as the mode stops a job: the TrainJob suspended, or the Workload inactive.
    let stopped = move |o: &serde_json::Value| {
        if kueue {
            o["spec"]["active"] == false
        } else {
            o["spec"]["suspend"] == true
        }
    };
    if kueue {
        wait_for("busy's Workload", Duration::from_secs(60), || {
            held_object("busy", busy_uid.clone())
        })
        .await;
    }

    holdfast_tests::hold_support::api::grant_alice(
        cluster,
        &ns,
        &["open", "hold", "release", "status"],
        &["create", "get"],
    )
    .await;
    let alice = cluster.token(Identity::User).to_owned();
    let api = Arc::new(release.hold_api(cluster).await);
    if kueue {
        // Admitted up to the start gate: quota reserved, holdfast's check Pending.
        wait_for(
            "held's Workload with quota, at the start gate",
            Duration::from_secs(90),
            || async {
                let w = held_object("held", held_uid.clone()).await?;
                let reserved = w["status"]["conditions"]
                    .as_array()?
                    .iter()
                    .any(|c| c["type"] == "QuotaReserved" && c["status"] == "True");
                let pending = w["status"]["admissionChecks"]
                    .as_array()?
                    .iter()
                    .any(|c| c["name"] == check.as_str() && c["state"] == "Pending");
                (reserved && pending).then_some(())
            },
        )
        .await;
    }
    let (status, answer) = api.call(&alice, &ns, "held", "open", None).await;
    assert_eq!(
        (status, &answer["result"]),
        (200, &serde_json::json!("Ok")),
        "{answer}"
    );
    let pods: Api<Pod> = Api::namespaced(admin.clone(), &ns);
    wait_for("held's pod Running", Duration::from_secs(120), || async {
        let ps = running_pods(&pods, "held").await;
        ps.iter().any(is_running).then_some(())
    })
    .await;
    let (status, answer) = api.call(&alice, &ns, "held", "hold", Some(1)).await;
    assert_eq!(
        (status, &answer),
        (200, &serde_json::json!({"result": "Ok", "outcome": "Held"}))
    );
    wait_for("held's pods gone", Duration::from_secs(120), || async {
        running_pods(&pods, "held").await.is_empty().then_some(())
    })
    .await;
    let held_before = held_object("held", held_uid.clone())
        .await
        .expect("held's held object");
    assert_eq!(hold_instance(&held_before).as_deref(), Some("1"));
    assert!(stopped(&held_before), "{held_before}");
    let hold_annotations = |o: &serde_json::Value| -> Vec<(String, String)> {
        o["metadata"]["annotations"]
            .as_object()
            .into_iter()
            .flatten()
            .filter(|(k, _)| k.starts_with("holdfast.dev/hold-"))
            .map(|(k, v)| (k.clone(), v.as_str().unwrap_or_default().to_owned()))
            .collect()
    };
    let cms: Api<k8s_openapi::api::core::v1::ConfigMap> = Api::namespaced(admin.clone(), &ns);
    let snapshots = || async {
        let mut out = Vec::new();
        for job in ["held", "busy"] {
            let cm = wait_for("the snapshot", Duration::from_secs(60), || async {
                cms.get_opt(&format!("{job}-runtime-snapshot"))
                    .await
                    .ok()
                    .flatten()
            })
            .await;
            out.push((job, cm.metadata.uid, cm.metadata.resource_version, cm.data));
        }
        out
    };
    let snapshots_before = snapshots().await;

    // From here on, whatever the release runs: no pod of `held` starts, and its held object is
    // never running again. Each guard reports once its watch has listed (the object guard
    // only once it has seen the held object), and any watch error or end is a violation: a
    // guard that never watched proves nothing.
    let violations = Arc::new(Mutex::new(Vec::<String>::new()));
    let synced = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let guard = |stream: futures::stream::BoxStream<
        'static,
        watcher::Result<watcher::Event<serde_json::Value>>,
    >,
                 what: &'static str,
                 bad: Verdict,
                 must_see: bool| {
        let (v, synced) = (violations.clone(), synced.clone());
        tokio::spawn(async move {
            let mut stream = stream;
            let mut seen = false;
            while let Some(ev) = stream.next().await {
                match ev {
                    Ok(watcher::Event::Apply(o) | watcher::Event::InitApply(o)) => match bad(&o) {
                        Guarded::NotMine => {}
                        Guarded::Fine => seen = true,
                        Guarded::Bad(why) => {
                            seen = true;
                            v.lock().expect("violations").push(format!("{what}: {why}"));
                        }
                    },
                    Ok(watcher::Event::InitDone) => {
                        if must_see && !seen {
                            v.lock()
                                .expect("violations")
                                .push(format!("{what}: the watch listed nothing to guard"));
                        }
                        synced.fetch_add(1, Ordering::SeqCst);
                    }
                    Ok(_) => {}
                    Err(e) => v
                        .lock()
                        .expect("violations")
                        .push(format!("{what}: the watch failed: {e}")),
                }
            }
            v.lock()
                .expect("violations")
                .push(format!("{what}: the watch ended"));
        })
    };
    let pod_events = watcher(
        pods.clone(),
        watcher::Config::default().labels("jobset.sigs.k8s.io/jobset-name=held"),
    )
    .map(json_events)
    .boxed();
    let pod_guard = guard(
        pod_events,
        "a pod of the held job",
        Box::new(|p| Guarded::Bad(format!("exists: {}", p["metadata"]["name"]))),
        false,
    );
    let object_guard = if kueue {
        let held_uid = held_uid.clone();
        let events = watcher(workloads.clone(), watcher::Config::default())
            .map(json_events)
            .boxed();
        guard(
            events,
            "the held Workload",
            Box::new(move |w| {
                let ours = w["metadata"]["ownerReferences"]
                    .as_array()
                    .is_some_and(|os| os.iter().any(|o| o["uid"] == held_uid.as_str()));
                if !ours {
                    Guarded::NotMine
                } else if w["spec"]["active"] != false || hold_instance(w).is_none() {
                    Guarded::Bad(format!(
                        "made active or unheld: {}",
                        w["metadata"]["annotations"]
                    ))
                } else {
                    Guarded::Fine
                }
            }),
            true,
        )
    } else {
        let events = watcher(
            trainjobs.clone(),
            watcher::Config::default().fields("metadata.name=held"),
        )
        .map(json_events)
        .boxed();
        guard(
            events,
            "the held TrainJob",
            Box::new(move |t| {
                if t["spec"]["suspend"] != true || hold_instance(t).is_none() {
                    Guarded::Bad(format!(
                        "unsuspended or unheld: {}",
                        t["metadata"]["annotations"]
                    ))
                } else {
                    Guarded::Fine
                }
            }),
            true,
        )
    };
    let guards = [pod_guard, object_guard];
    wait_for("both guards watching", Duration::from_secs(60), || async {
        (synced.load(Ordering::SeqCst) >= 2).then_some(())
    })
    .await;
    let no_violations = |when: &str| {
        let v = violations.lock().expect("violations");
        assert!(v.is_empty(), "{when}: {v:#?}");
    };

    // Dispatch's loop over `busy`: Hold n, Status, Release n, Status, n rising; each answer
    // checked against the held object read right after it (nobody else writes `busy`'s
    // hold). A call with no answer (a reset, a refused connection while pods roll) claims
    // nothing; the one refusal allowed is a Release's StaleHold in a round whose Hold went
    // unanswered (it did not land). After helm returns, every kind of call must be answered
    // by the release it installed.
    let calls = Arc::new(Mutex::new(Calls::default()));
    let phase = Arc::new(std::sync::atomic::AtomicU8::new(BEFORE));
    let dispatch = |first: u64| {
        let stop = Arc::new(AtomicBool::new(false));
        let task = {
            let (api, alice, ns) = (api.clone(), alice.clone(), ns.clone());
            let (calls, phase, stop) = (calls.clone(), phase.clone(), stop.clone());
            let held_object = held_object.clone();
            let busy_uid = busy_uid.clone();
            tokio::spawn(async move {
                // Bounded: at most 2,000 rounds, or until stopped.
                for n in first..first + 2000 {
                    if stop.load(Ordering::SeqCst) {
                        break;
                    }
                    let mut hold_unanswered = false;
                    for (step, call) in ["hold", "status", "release", "status"]
                        .into_iter()
                        .enumerate()
                    {
                        // Where the release was when the call was sent: an answer counts as
                        // the rolled-out release's only if sent after helm returned.
                        let when = phase.load(Ordering::SeqCst);
                        let answer = if call == "status" {
                            api.try_status(&alice, &ns, "busy").await
                        } else {
                            api.try_call(&alice, &ns, "busy", call, Some(n)).await
                        };
                        let now = held_object("busy", busy_uid.clone()).await;
                        let mut c = calls.lock().expect("calls");
                        match answer {
                            Err(e) => {
                                hold_unanswered |= call == "hold";
                                c.unanswered.push(format!("{call} {n}: {e}"));
                            }
                            Ok((200, body)) => {
                                c.ok += 1;
                                if when == ROLLING {
                                    c.ok_in_rollout += 1;
                                }
                                if when == AFTER {
                                    *c.ok_after.entry(call).or_default() += 1;
                                }
                                let Some(now) = now else {
                                    c.untrue.push(format!("{call} {n}: {body}, no held object"));
                                    continue;
                                };
                                let instance = hold_instance(&now);
                                let truth = match call {
                                    "hold" => {
                                        body["outcome"] == "Held"
                                            && instance == Some(n.to_string())
                                            && stopped(&now)
                                    }
                                    "release" => instance.is_none(),
                                    _ => {
                                        body["hold"]["instance"].as_u64().map(|i| i.to_string())
                                            == instance
                                    }
                                };
                                if !truth {
                                    c.untrue.push(format!(
                                        "{call} {n} (step {step}) answered {body}; the apiserver holds {:?} (active {}, suspend {})",
                                        now["metadata"]["annotations"],
                                        now["spec"]["active"],
                                        now["spec"]["suspend"]
                                    ));
                                }
                            }
                            Ok((status, body)) => {
                                let stale = status == 409 && body["cause"] == "StaleHold";
                                let what = format!("{call} {n}: {status} {body}");
                                if call == "release" && stale && hold_unanswered {
                                    c.refused.push(what);
                                } else {
                                    c.unexpected.push(what);
                                }
                            }
                        }
                    }
                    tokio::time::sleep(Duration::from_millis(100)).await;
                }
            })
        };
        (stop, task)
    };
    let helm = release.helm.clone();
    let run_helm = |args: Vec<String>| {
        let helm = helm.clone();
        let phase = phase.clone();
        async move {
            phase.store(ROLLING, Ordering::SeqCst);
            let started = Instant::now();
            let out = tokio::task::spawn_blocking(move || helm.run(&args))
                .await
                .expect("helm's thread");
            phase.store(AFTER, Ordering::SeqCst);
            (out, started.elapsed())
        }
    };
    let settle = |what: &'static str, stop: Arc<AtomicBool>, task: tokio::task::JoinHandle<()>| {
        let calls = calls.clone();
        let phase = phase.clone();
        async move {
            // Rounds against the rolled-out release until each call was answered by it (a
            // minute at most), then stop.
            let deadline = Instant::now() + Duration::from_secs(60);
            while Instant::now() < deadline {
                let answered = {
                    let c = calls.lock().expect("calls");
                    ["hold", "status", "release"]
                        .iter()
                        .all(|k| c.ok_after.get(k).copied().unwrap_or(0) >= 2)
                };
                if answered {
                    break;
                }
                tokio::time::sleep(Duration::from_millis(500)).await;
            }
            stop.store(true, Ordering::SeqCst);
            task.await.expect("dispatch's loop");
            phase.store(BEFORE, Ordering::SeqCst);
            let mut c = calls.lock().expect("calls");
            eprintln!(
                "{what}: {} answers (200), {} while helm rolled the release, {:?} after it; {} refusals, {} calls unanswered",
                c.ok,
                c.ok_in_rollout,
                c.ok_after,
                c.refused.len(),
                c.unanswered.len()
            );
            for r in c.refused.iter().chain(&c.unanswered).take(10) {
                eprintln!("  {r}");
            }
            assert!(
                c.untrue.is_empty(),
                "{what}: untrue answers: {:#?}",
                c.untrue
            );
            assert!(
                c.unexpected.is_empty(),
                "{what}: refusals no lost call explains: {:#?}",
                c.unexpected
            );
            assert!(
                c.ok_in_rollout > 0,
                "{what}: no call was answered while the release rolled: {c:?}"
            );
            for k in ["hold", "status", "release"] {
                assert!(
                    c.ok_after.get(k).copied().unwrap_or(0) >= 2,
                    "{what}: the rolled-out release answered too few {k} calls: {c:?}"
                );
            }
            *c = Calls::default();
        }
    };

    // The trap: --reuse-values reuses the previous chart's values, which lack values the new
    // templates read; helm refuses to render, naming one of them, and the release is left as
    // it was. (A previous release whose chart already has every value has no trap to show.)
    let values_of = |dir: &std::path::Path| -> Vec<String> {
        let text = std::fs::read_to_string(dir.join("values.yaml")).expect("values.yaml");
        let values: serde_json::Value = serde_saphyr::from_str(&text).expect("values.yaml parses");
        let mut paths = Vec::new();
        value_paths(&values, "", &mut paths);
        paths
    };
    let was = values_of(&previous.chart_dir);
    let added: Vec<String> = values_of(&holdfast_tests::helm::chart_dir())
        .into_iter()
        .filter(|p| !was.contains(p))
        .collect();
    if added.is_empty() {
        eprintln!("the previous chart has every value this one reads: no --reuse-values trap");
    } else {
        let (trap, _) = run_helm(release.upgrade_args(&new, &["--reuse-values"], &[])).await;
        phase.store(BEFORE, Ordering::SeqCst);
        let Err(trap) = trap else {
            panic!(
                "helm upgrade --reuse-values rendered without the values added since: {added:?}"
            );
        };
        let trap = format!("{trap:#}");
        // helm names the value: `at <.Values.a.b.c>: nil pointer evaluating …`.
        let named = trap
            .split_once("<.Values")
            .and_then(|(_, rest)| rest.split_once('>'))
            .map(|(path, _)| path.to_owned())
            .unwrap_or_else(|| panic!("the refusal names no value: {trap}"));
        assert!(
            trap.contains("nil pointer")
                && added
                    .iter()
                    .any(|a| *a == named || a.starts_with(&format!("{named}."))),
            "the refusal names a value added since the previous release ({named}; added: {added:?}): {trap}"
        );
        eprintln!("helm upgrade --reuse-values refused, naming .Values{named}");
        assert_eq!(
            controller_image().await,
            (old.image.clone(), Some(mode.to_owned()))
        );
    }

    // The upgrade, as the upgrade page says: the install's values (the mode) over the new
    // chart's defaults, nothing set again.
    let (stop, task) = dispatch(1);
    let (out, took) =
        run_helm(release.upgrade_args(&new, &["--reset-then-reuse-values"], &[])).await;
    if let Err(e) = out {
        panic!(
            "helm upgrade --reset-then-reuse-values: {e:#}\npods: {:#?}",
            pod_states(&admin, &system).await
        );
    }
    eprintln!("helm upgrade to {} --wait took {took:?}", new.version);
    release.upgraded_to(new.clone());
    assert_eq!(
        controller_image().await,
        (new.image.clone(), Some(mode.to_owned()))
    );
    release.webhook_answers(cluster).await;
    settle("upgrade", stop, task).await;
    let held_now = held_object("held", held_uid.clone()).await.expect("held");
    assert_eq!(hold_annotations(&held_now), hold_annotations(&held_before));
    assert_eq!(snapshots().await, snapshots_before, "no snapshot changed");
    let (status, answer) = api.status(&alice, &ns, "held").await;
    assert_eq!(
        (status, &answer["hold"]["instance"]),
        (200, &serde_json::json!(1)),
        "{answer}"
    );

    // The rollback to the previous release's revision. Under Helm 4's server-side apply a
    // field the controller wrote since (the caBundle, an entry's failurePolicy) and the first
    // revision renders otherwise conflicts: the refusal names the controller, and the
    // rollback is made again taking the fields back, as the upgrade page says.
    let mut rollback = release.rollback_args(1);
    let (stop, task) = dispatch(3000);
    let (mut out, mut took) = run_helm(rollback.clone()).await;
    if release.helm.major >= 4
        && let Err(e) = &out
        && format!("{e:#}").contains("conflict")
    {
        let e = format!("{e:#}");
        // The field manager, quoted as the apiserver names it ("conflict with" one manager,
        // "conflicts with" several): not the release's own objects, named …holdfast-controller.
        assert!(
            e.contains("with \"holdfast-controller\""),
            "a refused rollback names the controller's field manager: {e}"
        );
        eprintln!("helm rollback refused on the controller's fields; again with --force-conflicts");
        // The refused rollback changed nothing: what was answered meanwhile was the upgrade's.
        {
            let mut c = calls.lock().expect("calls");
            c.ok_after.clear();
            c.ok_in_rollout = 0;
        }
        rollback.push("--force-conflicts".into());
        (out, took) = run_helm(rollback).await;
    }
    if let Err(e) = out {
        panic!(
            "helm rollback: {e:#}\npods: {:#?}",
            pod_states(&admin, &system).await
        );
    }
    eprintln!("helm rollback to revision 1 --wait took {took:?}");
    release.upgraded_to(old.clone());
    assert_eq!(
        controller_image().await,
        (old.image.clone(), Some(mode.to_owned()))
    );
    release.webhook_answers(cluster).await;
    settle("rollback", stop, task).await;
    let held_now = held_object("held", held_uid.clone()).await.expect("held");
    assert_eq!(hold_annotations(&held_now), hold_annotations(&held_before));
    assert_eq!(snapshots().await, snapshots_before, "no snapshot changed");
    // What the guards watch, read once more before they stop: an event still on its way to
    // a guard is seen here.
    assert!(
        stopped(&held_now),
        "the held object still stopped: {held_now}"
    );
    assert!(
        running_pods(&pods, "held").await.is_empty(),
        "no pod of the held job"
    );
    for g in guards {
        g.abort();
    }
    no_violations("through the upgrade and the rollback");

    // Its holder lifts the hold, through the previous release again, and the job runs.
    let (status, answer) = api.call(&alice, &ns, "held", "release", Some(1)).await;
    assert_eq!(
        (status, &answer["result"]),
        (200, &serde_json::json!("Ok")),
        "{answer}"
    );
    wait_for(
        "held's pod Running again",
        Duration::from_secs(120),
        || async {
            running_pods(&pods, "held")
                .await
                .iter()
                .any(is_running)
                .then_some(())
        },
    )
    .await;
    release.uninstall().expect("helm uninstall");
}
