//! Fault test: the watch history the controller would resume from is compacted away.
//!
//! What is injected: the real holdfast-controller binary (plain mode) is frozen with SIGSTOP
//! after snapshotting some TrainJobs. While it is frozen, the apiserver is restarted (every
//! connection the controller had dies; frozen, it can open no new one, so nothing that follows
//! can reach it as a watch event), then its namespace changes behind its back: many TrainJobs
//! are created, some snapshots are deleted while their TrainJobs stay, some TrainJobs are
//! deleted (their snapshots garbage-collected), and a few hundred ConfigMap writes in another
//! namespace move the revision far on. etcd is then compacted to its current revision and the
//! apiserver restarted again, so its watch cache starts at the compacted revision. The
//! controller is thawed: its watches resume from their old resourceVersion and must get
//! 410 Gone ("too old resource version"), relist, and catch up.
//!
//! What is checked:
//! - the compaction was effective: an exact-resourceVersion list at the freeze's version
//!   succeeds before it (the history is there) and gets 410 after it; etcd refuses a read at
//!   that revision ("compacted"); a watch from that version gets a 410 ERROR event;
//! - the controller really got the 410: its log reports "too old resource version" for the
//!   TrainJob and ConfigMap watches, and it is still running, never restarted (the relist
//!   happened inside the process);
//! - nothing was missed: every TrainJob that exists — the old ones, the new ones, and those
//!   whose snapshot was deleted — ends with exactly one snapshot, read back as holdfast's
//!   reader reads it, with the runtime's content and provenance; the deleted TrainJobs have
//!   none, and none was written for them after the thaw (the controller's TrainJob store
//!   may still hold them when its snapshot ConfigMaps are relisted); the audit log shows one successful create per
//!   snapshot (two for those deleted and written again) and no snapshot ever updated or
//!   patched; the controller is ready again.
//!
//! The controller binary must be built first (`cargo build -p holdfast-controller`).

use futures::StreamExt;
use holdfast_core::names;
use holdfast_core::snapshot::{Integrity, Writer, read_snapshot};
use holdfast_tests::Identity;
use holdfast_tests::audit::ConfigMapWrites;
use holdfast_tests::holdfast::{owned_control_plane, start_plain_controller, wait_readyz};
use holdfast_tests::objects::{
    cluster_training_runtime, create_dynamic, snapshot_configmaps, trainjob,
};
use holdfast_tests::process::Supervised;
use holdfast_tests::wait::wait_for;
use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{
    Api, DeleteParams, DynamicObject, ListParams, Patch, PatchParams, PostParams, VersionMatch,
    WatchEvent, WatchParams,
};
use serde_json::{Value, json};
use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

/// TrainJobs snapshotted before the freeze.
const OLD: usize = 20;
/// Of those, the first `SNAPSHOT_DELETED` lose their snapshot during the freeze (the TrainJob
/// stays), the next `JOB_DELETED` are deleted.
const SNAPSHOT_DELETED: usize = 5;
const JOB_DELETED: usize = 5;
/// TrainJobs created during the freeze.
const NEW: usize = 200;
/// ConfigMap writes in another namespace during the freeze (CHURN_OBJECTS × CHURN_WRITES).
const CHURN_OBJECTS: usize = 10;
const CHURN_WRITES: usize = 30;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn watch_history_compacted_during_a_freeze_is_relisted_and_no_trainjob_is_missed() {
    let _one = super::ONE_AT_A_TIME.lock().await;
    let cp = owned_control_plane().await;
    let ns = cp.namespace("faults-compact").await.expect("namespace");
    let churn_ns = cp.namespace("faults-churn").await.expect("namespace");
    let admin = cp.client(Identity::Admin).await.expect("admin");
    let runtime_name = format!("torch-{ns}");
    let runtime = create_dynamic(
        &admin,
        &holdfast_cluster::resources::cluster_training_runtime(),
        None,
        cluster_training_runtime(&runtime_name, "pytorch/pytorch:2.10.0"),
    )
    .await;

    // Named so that a relist (sorted by name) hands the old TrainJobs to the reconciler
    // first: a TrainJob whose snapshot was deleted is then reconciled as early as it can be,
    // when the snapshot ConfigMaps may not have been relisted yet.
    let old: Vec<String> = (0..OLD).map(|i| format!("before-{i:03}")).collect();
    let new: Vec<String> = (0..NEW).map(|i| format!("during-{i:03}")).collect();
    let snapshot_deleted = &old[..SNAPSHOT_DELETED];
    let job_deleted = &old[SNAPSHOT_DELETED..SNAPSHOT_DELETED + JOB_DELETED];

    // The controller, with a Lease long enough that the freeze does not cost it leadership:
    // the relist must happen inside this one process.
    let admin_port = holdfast_tests::control_plane::free_port().expect("port");
    let mut ctrl =
        start_plain_controller(&cp, &ns, "compact", admin_port, &["--lease-duration=600s"]);
    wait_readyz(&mut ctrl, admin_port, true, Duration::from_secs(60)).await;
    create_trainjobs(&admin, &ns, &runtime_name, &old).await;
    let all_old: BTreeSet<String> = old.iter().map(|j| names::snapshot_name(j)).collect();
    wait_snapshots(&admin, &ns, &all_old, &ctrl, Duration::from_secs(90)).await;

    // Freeze, and note the resourceVersion the controller's watches are at most at.
    ctrl.signal("STOP").expect("SIGSTOP the controller");
    let rv_frozen = trainjobs(&admin, &ns)
        .list(&ListParams::default())
        .await
        .expect("list TrainJobs")
        .metadata
        .resource_version
        .expect("the list's resourceVersion");
    let rv_frozen_n: u64 = rv_frozen.parse().expect("a numeric resourceVersion");
    // Cut every connection the frozen controller has.
    cp.stop_apiserver();
    cp.restart_apiserver().await.expect("restart the apiserver");

    // Behind its back: new TrainJobs, snapshots deleted, TrainJobs deleted, churn elsewhere.
    create_trainjobs(&admin, &ns, &runtime_name, &new).await;
    let cms = Api::<ConfigMap>::namespaced(admin.clone(), &ns);
    for job in snapshot_deleted {
        cms.delete(&names::snapshot_name(job), &DeleteParams::default())
            .await
            .expect("delete a snapshot");
    }
    for job in job_deleted {
        trainjobs(&admin, &ns)
            .delete(job, &DeleteParams::background())
            .await
            .expect("delete a TrainJob");
    }
    let gone: BTreeSet<String> = snapshot_deleted
        .iter()
        .chain(job_deleted)
        .map(|j| names::snapshot_name(j))
        .collect();
    wait_for(
        "the deleted TrainJobs' snapshots to be garbage-collected",
        Duration::from_secs(60),
        || async {
            let now = snapshot_configmaps(&admin, &ns).await;
            gone.iter().all(|n| !now.contains_key(n)).then_some(())
        },
    )
    .await;
    churn(&admin, &churn_ns).await;

    // Control: before compaction the history is still there — an exact list at the freeze's
    // version (served by etcd: the restarted apiserver's cache starts later) returns the old
    // TrainJobs as they were then.
    let then = list_exact(&admin, &ns, &rv_frozen)
        .await
        .unwrap_or_else(|e| panic!("exact list at {rv_frozen} before compaction: {e}"));
    assert_eq!(
        then,
        old.iter().cloned().collect::<BTreeSet<_>>(),
        "the TrainJobs at resourceVersion {rv_frozen}"
    );

    // Compact etcd to its current revision, physically.
    let etcd = cp.etcd_url().to_owned();
    let revision = etcd_revision(&etcd).await;
    assert!(
        revision > rv_frozen_n + (CHURN_OBJECTS * CHURN_WRITES) as u64,
        "the revision moved on: {rv_frozen_n} → {revision}"
    );
    etcd_compact(&etcd, revision).await;
    let refused = etcd_range_at(&etcd, rv_frozen_n).await;
    assert!(
        refused.contains("compacted"),
        "etcd still serves revision {rv_frozen_n} after compacting to {revision}: {refused}"
    );
    println!("etcd compacted to {revision}; a read at {rv_frozen_n}: {refused}");

    // Restart the apiserver: its watch cache starts at the compacted revision.
    cp.stop_apiserver();
    cp.restart_apiserver().await.expect("restart the apiserver");
    match list_exact(&admin, &ns, &rv_frozen).await {
        Err(kube::Error::Api(s)) if s.code == 410 => {
            println!(
                "exact list at {rv_frozen} after compaction: 410 {}",
                s.message
            )
        }
        other => panic!("exact list at {rv_frozen} after compaction: {other:?}"),
    }
    let gone_watch = first_watch_event(&admin, &ns, &rv_frozen).await;
    match &gone_watch {
        WatchEvent::Error(s) if s.code == 410 => {
            println!("watch from {rv_frozen}: 410 {}", s.message)
        }
        other => panic!("a watch from {rv_frozen} got {other:?}, not 410 Gone"),
    }

    // Thaw. Only what the controller logs from now on counts as evidence.
    let log_offset = std::fs::metadata(&ctrl.log).map(|m| m.len()).unwrap_or(0);
    ctrl.signal("CONT").expect("SIGCONT the controller");

    let live: Vec<&String> = old
        .iter()
        .filter(|j| !job_deleted.contains(j))
        .chain(&new)
        .collect();
    let expected: BTreeSet<String> = live.iter().map(|j| names::snapshot_name(j)).collect();
    wait_snapshots(&admin, &ns, &expected, &ctrl, Duration::from_secs(180)).await;

    // The 410 reached the controller, and it relisted in the same process.
    let expired = wait_for(
        "the controller to log its expired watches",
        Duration::from_secs(30),
        || async {
            let e = expired_watches(&ctrl.log, log_offset);
            (e.contains_key("trainjobs") && e.contains_key("configmaps")).then_some(e)
        },
    )
    .await;
    for (watch, error) in &expired {
        println!("controller: watch {watch} expired: {error}");
    }
    for line in log_lines(&ctrl.log, log_offset) {
        if line["fields"]["message"]
            .as_str()
            .is_some_and(|m| m.starts_with("relisted snapshot ConfigMaps"))
        {
            println!("controller: {}", line["fields"]);
        }
    }
    assert!(
        ctrl.running(),
        "the controller exited:\n{}",
        ctrl.log_tail(30)
    );
    wait_readyz(&mut ctrl, admin_port, true, Duration::from_secs(60)).await;

    // Every snapshot: holdfast's, intact, the runtime's content and provenance, owned by the
    // TrainJob of its name as it is now.
    let live_runtime = Api::<DynamicObject>::all_with(
        admin.clone(),
        &holdfast_cluster::resources::cluster_training_runtime(),
    )
    .get(&runtime_name)
    .await
    .expect("the runtime");
    assert_eq!(
        live_runtime.metadata.resource_version, runtime.metadata.resource_version,
        "the runtime was not edited"
    );
    let live_runtime = serde_json::to_value(&live_runtime).expect("json");
    let jobs: BTreeMap<String, DynamicObject> = trainjobs(&admin, &ns)
        .list(&ListParams::default())
        .await
        .expect("list TrainJobs")
        .items
        .into_iter()
        .filter_map(|j| Some((j.metadata.name.clone()?, j)))
        .collect();
    assert_eq!(
        jobs.keys().collect::<BTreeSet<_>>(),
        live.iter().copied().collect::<BTreeSet<_>>()
    );
    let cms_now = snapshot_configmaps(&admin, &ns).await;
    for (name, job) in &jobs {
        let cm = &cms_now[&names::snapshot_name(name)];
        let read = read_snapshot(
            &serde_json::to_value(cm).expect("json"),
            &serde_json::to_value(job).expect("json"),
        )
        .unwrap_or_else(|f| panic!("{name}'s snapshot does not read back: {f:?}"));
        assert_eq!(read.writer, Writer::Holdfast, "{name}");
        assert_eq!(read.integrity, Integrity::Verified, "{name}");
        assert_eq!(read.runtime["spec"], live_runtime["spec"], "{name}");
        assert_eq!(
            read.runtime["metadata"]["name"],
            live_runtime["metadata"]["name"]
        );
        assert_eq!(
            read.resource_version(),
            runtime.metadata.resource_version.as_deref(),
            "{name}"
        );
        assert_eq!(read.source.uid, runtime.metadata.uid, "{name}");
        assert_eq!(cm.immutable, Some(true), "{name}");
    }

    // The audit log: one successful create per snapshot, two for those deleted during the
    // freeze; nothing ever rewrote one.
    let audit = cp.settled_audit_events().await.expect("audit log");
    let writes = ConfigMapWrites::in_namespace(&audit, &ns);
    assert!(
        writes.rewrites.is_empty(),
        "snapshots were rewritten: {:#?}",
        writes.rewrites
    );
    for job in &live {
        let name = names::snapshot_name(job);
        let want = if snapshot_deleted.contains(job) { 2 } else { 1 };
        assert_eq!(
            writes.creates_of(&name),
            want,
            "successful creates of {name}"
        );
    }

    // The TrainJobs deleted during the freeze: each snapshot created once, before it, and
    // none written since (the TrainJob store may still hold them when the snapshot
    // ConfigMaps are relisted).
    for job in job_deleted {
        let name = names::snapshot_name(job);
        assert_eq!(writes.creates_of(&name), 1, "successful creates of {name}");
    }
    let cms_end: BTreeSet<String> = snapshot_configmaps(&admin, &ns).await.into_keys().collect();
    assert_eq!(cms_end, expected);
    drop(ctrl);
    cp.stop();
}

// ---------------------------------------------------------------------------------------
// Helpers
// ---------------------------------------------------------------------------------------

fn trainjobs(client: &kube::Client, ns: &str) -> Api<DynamicObject> {
    Api::namespaced_with(client.clone(), ns, &holdfast_cluster::resources::trainjob())
}

async fn create_trainjobs(client: &kube::Client, ns: &str, runtime: &str, names: &[String]) {
    futures::stream::iter(names)
        .map(|name| async move {
            create_dynamic(
                client,
                &holdfast_cluster::resources::trainjob(),
                Some(ns),
                trainjob(name, runtime),
            )
            .await;
        })
        .buffer_unordered(16)
        .collect::<Vec<()>>()
        .await;
}

/// CHURN_OBJECTS ConfigMaps in `ns`, each written CHURN_WRITES times: the revision moves on.
async fn churn(client: &kube::Client, ns: &str) {
    let api = Api::<ConfigMap>::namespaced(client.clone(), ns);
    for i in 0..CHURN_OBJECTS {
        let cm: ConfigMap = serde_json::from_value(json!({
            "metadata": {"name": format!("churn-{i}")},
            "data": {"n": "0"}
        }))
        .expect("a ConfigMap");
        api.create(&PostParams::default(), &cm)
            .await
            .expect("create a churn ConfigMap");
    }
    futures::stream::iter((0..CHURN_WRITES).flat_map(|n| (0..CHURN_OBJECTS).map(move |i| (i, n))))
        .map(|(i, n)| {
            let api = api.clone();
            async move {
                let patch = json!({"data": {"n": (n + 1).to_string()}});
                api.patch(
                    &format!("churn-{i}"),
                    &PatchParams::default(),
                    &Patch::Merge(&patch),
                )
                .await
                .expect("write a churn ConfigMap");
            }
        })
        .buffer_unordered(CHURN_OBJECTS)
        .collect::<Vec<()>>()
        .await;
}

/// The names of the TrainJobs in `ns` at exactly resourceVersion `rv`.
async fn list_exact(
    client: &kube::Client,
    ns: &str,
    rv: &str,
) -> Result<BTreeSet<String>, kube::Error> {
    let lp = ListParams::default().at(rv).matching(VersionMatch::Exact);
    Ok(trainjobs(client, ns)
        .list(&lp)
        .await?
        .items
        .into_iter()
        .filter_map(|j| j.metadata.name)
        .collect())
}

/// The first event of a watch of `ns`'s TrainJobs from resourceVersion `rv`.
async fn first_watch_event(client: &kube::Client, ns: &str, rv: &str) -> WatchEvent<DynamicObject> {
    let wp = WatchParams::default().timeout(10);
    let stream = trainjobs(client, ns)
        .watch(&wp, rv)
        .await
        .unwrap_or_else(|e| panic!("watch from {rv}: {e}"));
    let mut stream = std::pin::pin!(stream);
    match tokio::time::timeout(Duration::from_secs(20), stream.next()).await {
        Ok(Some(Ok(event))) => event,
        other => panic!("a watch from {rv} yielded no event: {other:?}"),
    }
}

/// POSTs to etcd's JSON gateway; the body as JSON, and whether the status was a success.
async fn etcd_post(etcd: &str, path: &str, body: Value) -> (bool, Value) {
    let resp = reqwest::Client::new()
        .post(format!("{etcd}{path}"))
        .json(&body)
        .timeout(Duration::from_secs(60))
        .send()
        .await
        .unwrap_or_else(|e| panic!("POST {path} to etcd: {e}"));
    let ok = resp.status().is_success();
    let json = resp
        .json::<Value>()
        .await
        .unwrap_or_else(|e| panic!("etcd's answer to {path}: {e}"));
    (ok, json)
}

/// The key `"\0"` (base64 "AA=="): a range of it reads nothing, but its header carries the
/// store's revision.
const NUL_KEY: &str = "AA==";

/// etcd's current revision.
async fn etcd_revision(etcd: &str) -> u64 {
    let (ok, json) = etcd_post(etcd, "/v3/kv/range", json!({"key": NUL_KEY})).await;
    assert!(ok, "etcd range: {json}");
    let rev = &json["header"]["revision"];
    rev.as_str()
        .and_then(|s| s.parse().ok())
        .or_else(|| rev.as_u64())
        .unwrap_or_else(|| panic!("no revision in {json}"))
}

/// Compacts etcd's history up to `revision`, waiting until it is physically gone.
async fn etcd_compact(etcd: &str, revision: u64) {
    let (ok, json) = etcd_post(
        etcd,
        "/v3/kv/compaction",
        json!({"revision": revision.to_string(), "physical": true}),
    )
    .await;
    assert!(ok, "etcd compaction to {revision}: {json}");
}

/// A read at `revision`: etcd's error message (empty if it served the read).
async fn etcd_range_at(etcd: &str, revision: u64) -> String {
    let (ok, json) = etcd_post(
        etcd,
        "/v3/kv/range",
        json!({"key": NUL_KEY, "revision": revision.to_string()}),
    )
    .await;
    if ok { String::new() } else { json.to_string() }
}

/// Waits until the snapshots in `ns` are exactly `expected`; on timeout, says which are
/// missing or extra, with the controller's log.
async fn wait_snapshots(
    client: &kube::Client,
    ns: &str,
    expected: &BTreeSet<String>,
    ctrl: &Supervised,
    timeout: Duration,
) {
    let deadline = tokio::time::Instant::now() + timeout;
    loop {
        let got: BTreeSet<String> = snapshot_configmaps(client, ns).await.into_keys().collect();
        if &got == expected {
            return;
        }
        if tokio::time::Instant::now() >= deadline {
            let missing: Vec<&String> = expected.difference(&got).collect();
            let extra: Vec<&String> = got.difference(expected).collect();
            panic!(
                "after {timeout:?}: missing snapshots {missing:?}, unexpected {extra:?}; \
                 controller log:\n{}",
                ctrl.log_tail(40)
            );
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// The watches the controller's log (from byte `offset`) reports as expired (410: "too old
/// resource version"), with the error it logged.
fn expired_watches(log: &std::path::Path, offset: u64) -> BTreeMap<String, String> {
    log_lines(log, offset)
        .into_iter()
        .filter_map(|l| {
            let fields = l.get("fields")?;
            let error = fields.get("error")?.as_str()?;
            let watch = fields.get("watch")?.as_str()?;
            error
                .contains("too old resource version")
                .then(|| (watch.to_owned(), error.to_owned()))
        })
        .collect()
}

/// The controller's log lines (JSON) from byte `offset` on.
fn log_lines(log: &std::path::Path, offset: u64) -> Vec<Value> {
    let text = std::fs::read(log).unwrap_or_default();
    let from = usize::try_from(offset)
        .unwrap_or(usize::MAX)
        .min(text.len());
    String::from_utf8_lossy(&text[from..])
        .lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .collect()
}
