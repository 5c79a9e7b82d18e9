//! Eight YAML alias bombs in snapshot-named ConfigMaps, planted where the webhook did not see
//! them (here: no webhook at all), each controlled by its TrainJob as a snapshot Trainer
//! wrote would be, so the controller reads every one in full at start-up. Parsed on the async
//! worker threads, eight at a time, with the YAML parser's default alias budget (a million
//! replayed events each), they starved the Lease renewal: the restarted controller lost its
//! Lease and exited (peak about 384 MiB, `/readyz` failing). Now every read is bounded
//! (`holdfast_core::snapshot::bounds`) and runs on blocking threads, two at a time.
//!
//! The real `holdfast-controller` binary (build it first: `cargo build -p
//! holdfast-controller`), a 3 s Lease, 15 s of watching: bounded in time and memory.

use holdfast_core::names;
use holdfast_tests::holdfast::binary;
use holdfast_tests::objects::{cluster_training_runtime, create_dynamic, trainjob};
use holdfast_tests::process::Supervised;
use holdfast_tests::wait::wait_for;
use holdfast_tests::{ControlPlane, Identity};
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::ConfigMap;
use k8s_openapi::api::events::v1::Event;
use kube::api::{Api, ListParams, PostParams};
use serde_json::json;
use std::time::Duration;

/// How long the controller is watched once it has read the bombs.
const WATCH_FOR: Duration = Duration::from_secs(15);
/// The resident memory the controller must stay under (its default chart limit is higher).
const MAX_RESIDENT_BYTES: f64 = 200.0 * 1024.0 * 1024.0;

/// A billion laughs: `levels` anchors, each a sequence of `fan` aliases of the one before.
fn alias_bomb(levels: usize, fan: usize) -> String {
    let mut yaml = String::from("a0: &a0 [\"lol\"]\n");
    for level in 1..=levels {
        let refs = vec![format!("*a{}", level - 1); fan].join(", ");
        yaml.push_str(&format!("a{level}: &a{level} [{refs}]\n"));
    }
    yaml
}

async fn get(port: u16, path: &str) -> Option<(u16, String)> {
    let client = reqwest::Client::builder()
        .timeout(Duration::from_secs(2))
        .build()
        .ok()?;
    let r = client
        .get(format!("http://127.0.0.1:{port}{path}"))
        .send()
        .await
        .ok()?;
    let status = r.status().as_u16();
    Some((status, r.text().await.unwrap_or_default()))
}

async fn lease(client: &kube::Client, ns: &str) -> (String, Option<String>) {
    let spec = Api::<Lease>::namespaced(client.clone(), ns)
        .get_opt("holdfast-controller")
        .await
        .ok()
        .flatten()
        .and_then(|l| l.spec);
    let holder = spec
        .as_ref()
        .and_then(|s| s.holder_identity.clone())
        .unwrap_or_default();
    let renewed = spec
        .and_then(|s| s.renew_time)
        .map(|t| format!("{:?}", t.0));
    (holder, renewed)
}

fn gauge(metrics: &str, name: &str) -> Option<f64> {
    metrics
        .lines()
        .find(|l| l.starts_with(name))
        .and_then(|l| l.rsplit(' ').next()?.parse().ok())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn eight_alias_bombs_in_snapshot_named_configmaps_leave_the_controller_leading_and_ready() {
    let _one = super::ONE_AT_A_TIME.lock().await;
    let cp = ControlPlane::shared();
    let ns = cp.namespace("snap-bombs").await.expect("namespace");
    let admin = cp.client(Identity::Admin).await.expect("admin");
    let runtime = format!("torch-{ns}");
    create_dynamic(
        &admin,
        &holdfast_cluster::resources::cluster_training_runtime(),
        None,
        cluster_training_runtime(&runtime, "pytorch/pytorch:2.10.0"),
    )
    .await;
    let jobs: Vec<String> = (1..=8).map(|i| format!("bombed-{i}")).collect();
    let cms: Api<ConfigMap> = Api::namespaced(admin.clone(), &ns);
    for job in &jobs {
        let created = create_dynamic(
            &admin,
            &holdfast_cluster::resources::trainjob(),
            Some(&ns),
            trainjob(job, &runtime),
        )
        .await;
        let bomb: ConfigMap = serde_json::from_value(json!({
            "metadata": {
                "name": names::snapshot_name(job),
                "ownerReferences": [{
                    "apiVersion": "trainer.kubeflow.org/v1alpha1", "kind": "TrainJob",
                    "name": job, "uid": created.metadata.uid, "controller": true
                }]
            },
            "data": {"runtime": alias_bomb(9, 9)}
        }))
        .expect("configmap");
        cms.create(&PostParams::default(), &bomb)
            .await
            .expect("plant the bomb");
    }

    let port = holdfast_tests::control_plane::free_port().expect("port");
    let api_port = holdfast_tests::control_plane::free_port().expect("port");
    let identity = format!("snap-bombs-{}", rand::random::<u32>());
    let controller = binary("holdfast-controller");
    let args = vec![
        "--mode=plain".to_string(),
        format!(
            "--kubeconfig={}",
            cp.kubeconfig(Identity::Controller).display()
        ),
        format!("--api-addr=127.0.0.1:{api_port}"),
        format!("--admin-addr=127.0.0.1:{port}"),
        format!("--identity={identity}"),
        format!("--watch-namespace={ns}"),
        format!("--lease-namespace={ns}"),
        "--lease-duration=3s".to_string(),
    ];
    let mut ctrl = Supervised::start(
        "holdfast-controller-snap-bombs",
        &controller,
        args,
        cp.dir(),
        cp.process_group(),
    )
    .expect("start holdfast-controller");
    holdfast_tests::holdfast::wait_readyz(&mut ctrl, port, true, Duration::from_secs(60)).await;

    // Every bomb is refused as invalid, naming the bound, quoting no YAML.
    let events: Api<Event> = Api::namespaced(admin.clone(), &ns);
    wait_for(
        "a SnapshotInvalid Warning on each TrainJob",
        Duration::from_secs(60),
        || async {
            let list = events.list(&ListParams::default()).await.ok()?;
            let warned: Vec<&Event> = list
                .items
                .iter()
                .filter(|e| e.reason.as_deref() == Some("SnapshotInvalid"))
                .collect();
            (warned.len() >= jobs.len()).then_some(())
        },
    )
    .await;
    for e in events
        .list(&ListParams::default())
        .await
        .expect("events")
        .items
    {
        if e.reason.as_deref() == Some("SnapshotInvalid") {
            let note = e.note.unwrap_or_default();
            assert!(note.contains("alias") && note.len() < 2048, "{note}");
            assert!(!note.contains("lol"), "no YAML quoted: {note}");
        }
    }

    // Then: leading, ready, renewing, and small.
    let started = tokio::time::Instant::now();
    let (_, renewed_before) = lease(&admin, &ns).await;
    let mut unanswered = Vec::new();
    let mut peak: f64 = 0.0;
    while started.elapsed() < WATCH_FOR {
        if !matches!(get(port, "/readyz").await, Some((200, _))) {
            unanswered.push(started.elapsed());
        }
        if let Some((_, m)) = get(port, "/metrics").await
            && let Some(rss) = gauge(&m, "process_resident_memory_bytes")
        {
            peak = peak.max(rss);
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    let (holder, renewed_after) = lease(&admin, &ns).await;
    let log = ctrl.log_tail(200);
    assert!(
        unanswered.is_empty(),
        "/readyz went unanswered at {unanswered:?}; log:\n{log}"
    );
    assert_eq!(holder, identity, "the Lease is still held; log:\n{log}");
    assert_ne!(renewed_after, renewed_before, "the Lease was renewed");
    assert!(
        peak > 0.0 && peak < MAX_RESIDENT_BYTES,
        "resident memory peaked at {peak} bytes"
    );
    let longest = log.lines().map(str::len).max().unwrap_or_default();
    assert!(longest < 4096, "a log line of {longest} bytes:\n{log}");
    // And it still works: a new TrainJob gets its snapshot.
    create_dynamic(
        &admin,
        &holdfast_cluster::resources::trainjob(),
        Some(&ns),
        trainjob("after", &runtime),
    )
    .await;
    wait_for(
        "the snapshot of a new job",
        Duration::from_secs(30),
        || async {
            cms.get_opt(&names::snapshot_name("after"))
                .await
                .ok()
                .flatten()
        },
    )
    .await;
}
