//! The Go client (`clients/go`, its `node` build tag) against holdfast installed by its chart
//! on the real node: a Release while the held execution's pod terminates under a real kubelet.

use super::cli::OnCall;
use super::*;
use std::path::{Path, PathBuf};

/// The Go test this runs (clients/go/node_test.go).
const GO_TEST: &str = "TestNodeAReleaseWhileTheHeldPodTerminatesIsPodsRemainAndNamesIt";

/// The chart installed with the tenant's supervisor (ServiceAccount `dispatch`) in
/// `rbac.holdCallerBindings`; a TrainJob whose pod takes 20 s to stop after SIGTERM, opened,
/// running, then held (instance 1), its pod terminating. The Go test's Release through the Go
/// client, reaching the hold API by its Service's name with the CA the controller issued its
/// certificate from, is `ErrPodsRemain`, a `*PodsRemainError` naming that pod. The pods it
/// names were marked for deletion before the call and are still there, terminating, once it
/// has answered (checked here, at the apiserver, while the Go test waits): so they were
/// terminating when the hold API answered. Then the client's `Retry`, each try with a new
/// deadline, is `Released`, and the held execution's pods are gone from the apiserver.
#[tokio::test]
#[ignore = "tier 3: run with --ignored (builds and starts a real node)"]
async fn a_release_while_the_held_pod_terminates_is_pods_remain_and_names_it() {
    let cluster = NodeCluster::shared();
    let admin = cluster.client(Identity::Admin).await.expect("admin");
    let tns = cluster.namespace("node-go").await.expect("namespace");
    let work = tempfile::tempdir().expect("tempdir");
    // Built first, so the Release is made as soon as the pod terminates.
    let binary = build_go_test(work.path()).await;
    let on_call = OnCall::install(cluster, &admin, &tns, "hfgo").await;
    let token = on_call.token.clone();

    slow_stop_runtime(cluster, &admin, &tns, "workload", 20).await;
    let trainjobs: Api<DynamicObject> = Api::namespaced_with(
        admin.clone(),
        &tns,
        &holdfast_cluster::resources::trainjob(),
    );
    create_workload_trainjob(&trainjobs, "tj", Some(true)).await;
    let pods: Api<Pod> = Api::namespaced(admin.clone(), &tns);
    let api = on_call.release.hold_api(cluster).await;
    let ep = on_call.release.hold_api_endpoint(cluster).await;

    let (status, answer) = api.call(&token, &tns, "tj", "open", None).await;
    assert_eq!(status, 200, "open: {answer}");
    let first = next_execution(
        &pods,
        "tj",
        &[],
        "the first execution Running",
        Duration::from_secs(120),
    )
    .await;
    let held: Vec<String> = first
        .iter()
        .filter_map(|p| p.metadata.name.clone())
        .collect();
    let (status, answer) = api.call(&token, &tns, "tj", "hold", Some(1)).await;
    assert_eq!(status, 200, "hold: {answer}");
    wait_terminating(&pods, "tj").await;

    let file = |name: &str, content: &[u8]| {
        let path = work.path().join(name);
        std::fs::write(&path, content).expect("write");
        path.display().to_string()
    };
    let handshake = work.path().join("handshake");
    std::fs::create_dir(&handshake).expect("dir");
    let env = [
        (
            "HOLDFAST_NODE_URL",
            format!("https://{}:{}", ep.host, ep.local_port),
        ),
        ("HOLDFAST_NODE_DIAL", format!("127.0.0.1:{}", ep.local_port)),
        ("HOLDFAST_NODE_CA_FILE", file("ca.crt", &ep.ca_pem)),
        ("HOLDFAST_NODE_TOKEN_FILE", file("token", token.as_bytes())),
        ("HOLDFAST_NODE_NAMESPACE", tns.clone()),
        ("HOLDFAST_NODE_TRAINJOB", "tj".to_owned()),
        ("HOLDFAST_NODE_INSTANCE", "1".to_owned()),
        ("HOLDFAST_NODE_PODS", held.join(",")),
        ("HOLDFAST_NODE_HANDSHAKE", handshake.display().to_string()),
    ];
    let mut go = tokio::process::Command::new(&binary)
        .args([
            "-test.run",
            &format!("^{GO_TEST}$"),
            "-test.v",
            "-test.count=1",
            "-test.timeout=5m",
        ])
        .envs(env)
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .expect("run the Go test");

    // The pods the PodsRemain answer named, once the Go test has it (or it has ended).
    let named = handshake.join("pods-remain");
    let mut ended = None;
    while !named.is_file() {
        if let Some(status) = go.try_wait().expect("the Go test") {
            ended = Some(status);
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    if ended.is_none() {
        let names = std::fs::read_to_string(&named).expect("the pods named");
        for name in names.lines() {
            assert!(
                held.iter().any(|h| h == name),
                "the PodsRemain answer named {name}, not a pod of the held execution {held:?}"
            );
            let pod = pods.get_opt(name).await.expect("read the pod");
            assert!(
                pod.as_ref()
                    .is_some_and(|p| p.metadata.deletion_timestamp.is_some()),
                "pod {name}, named by the PodsRemain answer, was not terminating right after it: {:?}",
                pod.map(|p| p.metadata)
            );
        }
        std::fs::write(handshake.join("go-on"), "").expect("go on");
    }
    let out = go.wait_with_output().await.expect("the Go test's output");
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    println!("{GO_TEST}:\n{text}");
    assert!(
        ended.is_none() && out.status.success() && text.contains(&format!("--- PASS: {GO_TEST}")),
        "the Go test failed:\n{text}\ncontroller:\n{}",
        controller_logs(&admin, on_call.release.namespace())
            .await
            .join("\n")
    );
    for name in &held {
        assert!(
            pods.get_opt(name).await.expect("read the pod").is_none(),
            "the Go client's Release succeeded while pod {name} of the held execution was still there"
        );
    }
    drop(on_call);
}

/// `go test -c -tags node` of clients/go into `dir`: the test binary's path.
async fn build_go_test(dir: &Path) -> PathBuf {
    let module = Path::new(env!("CARGO_MANIFEST_DIR")).join("../clients/go");
    let binary = dir.join("holdfast-go-node.test");
    let out = tokio::process::Command::new("go")
        .current_dir(&module)
        .args(["test", "-c", "-tags", "node", "-o"])
        .arg(&binary)
        .env("GOFLAGS", "-mod=mod")
        .output()
        .await
        .unwrap_or_else(|e| panic!("go test -c in {}: {e} (is Go installed?)", module.display()));
    assert!(
        out.status.success(),
        "go test -c -tags node:\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    binary
}
