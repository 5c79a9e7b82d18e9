//! A flood of idle connections against the controller's admin port. The port was plain
//! `axum::serve`: no connection cap, no timeout, so every idle socket a client opened held one
//! of the controller's file descriptors for as long as the client liked. Once they ran out,
//! kubelet's probes went unanswered (the pod restarted, its Lease lost) and the controller
//! could open nothing else. Now the port is served as the API ports are: capped per source
//! address and in all (a connection over a cap is closed at accept, and counted in
//! `holdfast_controller_admin_connections_refused_total`), with a header-read timeout.
//!
//! The real `holdfast-controller` binary runs with 256 file descriptors (`prlimit`), as a
//! small budget a few hundred sockets can exhaust. The flood is bounded: [`FLOOD`]
//! connections from 127.0.0.2 (kubelet and the test read `/readyz` from 127.0.0.1), held for
//! [`HOLD_FOR`], then closed; nothing leaves loopback. The binary must be built first
//! (`cargo build -p holdfast-controller`).

use holdfast_core::names;
use holdfast_tests::holdfast::binary;
use holdfast_tests::objects::{cluster_training_runtime, create_dynamic, trainjob};
use holdfast_tests::process::Supervised;
use holdfast_tests::wait::wait_for;
use holdfast_tests::{ControlPlane, Identity};
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::Api;
use std::path::Path;
use std::time::Duration;

/// Idle connections opened against the admin port, all from one loopback address.
const FLOOD: usize = 300;
/// How long the flood's connections are held before the test closes them.
const HOLD_FOR: Duration = Duration::from_secs(20);
/// The controller's file-descriptor limit.
const NOFILE: u32 = 256;

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

/// The sum of a counter's samples whose line starts with `name` (any labels).
fn counter(metrics: &str, name: &str) -> f64 {
    metrics
        .lines()
        .filter(|l| l.starts_with(name))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_idle_flood_of_the_admin_port_leaves_readyz_answering_and_the_lease_held() {
    let _one = super::ONE_AT_A_TIME.lock().await;
    let cp = ControlPlane::shared();
    let ns = cp.namespace("admin-flood").await.expect("namespace");
    let admin = cp.client(Identity::Admin).await.expect("admin");
    let runtime = format!("torch-{ns}");
    create_dynamic(
        &admin,
        &holdfast_cluster::resources::cluster_training_runtime(),
        None,
        cluster_training_runtime(&runtime, "pytorch/pytorch:2.10.0"),
    )
    .await;

    let port = holdfast_tests::control_plane::free_port().expect("port");
    let api_port = holdfast_tests::control_plane::free_port().expect("port");
    let identity = format!("admin-flood-{}", rand::random::<u32>());
    let controller = binary("holdfast-controller");
    let args = vec![
        format!("--nofile={NOFILE}:{NOFILE}"),
        "--".to_string(),
        controller.display().to_string(),
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
        "holdfast-controller-admin-flood",
        Path::new("/usr/bin/prlimit"),
        args,
        cp.dir(),
        cp.process_group(),
    )
    .expect("start holdfast-controller under prlimit");
    holdfast_tests::holdfast::wait_readyz(&mut ctrl, port, true, Duration::from_secs(60)).await;
    wait_for("the Lease held", Duration::from_secs(30), || async {
        (lease(&admin, &ns).await.0 == identity).then_some(())
    })
    .await;

    // The flood: FLOOD idle connections from 127.0.0.2, held for HOLD_FOR, then closed.
    let mut held = Vec::with_capacity(FLOOD);
    let mut failed = 0usize;
    for _ in 0..FLOOD {
        let connected = async {
            let socket = tokio::net::TcpSocket::new_v4()?;
            socket.bind("127.0.0.2:0".parse().map_err(std::io::Error::other)?)?;
            tokio::time::timeout(
                Duration::from_secs(2),
                socket.connect(
                    format!("127.0.0.1:{port}")
                        .parse()
                        .map_err(std::io::Error::other)?,
                ),
            )
            .await
            .map_err(std::io::Error::other)?
        }
        .await;
        match connected {
            Ok(s) => held.push(s),
            Err(_) => failed += 1,
        }
    }
    let flood_started = tokio::time::Instant::now();
    let (_, renewed_before) = lease(&admin, &ns).await;

    // While it is held: /readyz answers, every time it is asked; the controller still works
    // (a new TrainJob gets its snapshot) and renews its Lease.
    let mut unanswered = Vec::new();
    create_dynamic(
        &admin,
        &holdfast_cluster::resources::trainjob(),
        Some(&ns),
        trainjob("during", &runtime),
    )
    .await;
    while flood_started.elapsed() < HOLD_FOR - Duration::from_secs(2) {
        let at = flood_started.elapsed();
        if !matches!(get(port, "/readyz").await, Some((200, _))) {
            unanswered.push(at);
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    let (holder, renewed_during) = lease(&admin, &ns).await;
    let snapshotted = Api::<ConfigMap>::namespaced(admin.clone(), &ns)
        .get_opt(&names::snapshot_name("during"))
        .await
        .ok()
        .flatten()
        .is_some();
    let metrics = get(port, "/metrics")
        .await
        .map(|(_, m)| m)
        .unwrap_or_default();
    drop(held);

    let log = ctrl.log_tail(30);
    assert!(
        unanswered.is_empty(),
        "/readyz went unanswered during the flood at {unanswered:?} ({failed} of {FLOOD} flood connections failed); log:\n{log}"
    );
    assert_eq!(holder, identity, "the Lease is still held; log:\n{log}");
    assert_ne!(
        renewed_during, renewed_before,
        "the Lease was renewed during the flood; log:\n{log}"
    );
    assert!(
        snapshotted,
        "a TrainJob created during the flood got its snapshot; log:\n{log}"
    );
    // The refused connections are counted, in a metric /metrics exports; and so are the hold
    // API's connection metrics (registered, though this controller serves no hold API).
    let refused = counter(
        &metrics,
        "holdfast_controller_admin_connections_refused_total{reason=\"per_source\"}",
    );
    assert!(
        refused >= (FLOOD - failed).saturating_sub(8) as f64,
        "{refused} refused of {FLOOD}: {metrics}"
    );
    for exported in [
        "holdfast_controller_admin_connections_open",
        "holdfast_controller_hold_api_connections_open",
        "holdfast_controller_hold_api_connections_refused",
        "holdfast_controller_hold_api_tls_handshake_failures",
    ] {
        assert!(
            metrics.contains(exported),
            "{exported} in /metrics: {metrics}"
        );
    }
    // After the flood, still answering.
    holdfast_tests::holdfast::wait_readyz(&mut ctrl, port, true, Duration::from_secs(10)).await;
}
