//! `kubectl holdfast` on a real cluster with nothing configured but a kubeconfig whose user is
//! an exec credential plugin: the CLI finds the hold API itself (no --server, no --ca-file).

use super::*;
use k8s_openapi::api::core::v1::ServiceAccount;

/// Runs `kubectl-holdfast` as a newcomer would: `--kubeconfig` and the command, nothing from
/// the environment; the exit code, stdout and stderr.
async fn kubectl_holdfast(kubeconfig: &std::path::Path, args: &[&str]) -> (i32, String, String) {
    let out = crate::cli::kubectl_holdfast(kubeconfig, args).await;
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// A release of the chart in `holdfast-system` whose `rbac.holdCallerBindings` name the
/// tenant's supervisor, ServiceAccount `dispatch` of `tns`, and that supervisor's kubeconfig:
/// an exec plugin printing its token (`marker` is written when the plugin runs), and that
/// token. The release is uninstalled when this is dropped.
pub(super) struct OnCall {
    kubeconfig: std::path::PathBuf,
    marker: std::path::PathBuf,
    /// The supervisor's ServiceAccount token (an hour).
    pub(super) token: String,
    _dir: tempfile::TempDir,
    pub(super) release: ChartRelease,
}

impl OnCall {
    pub(super) async fn install(
        cluster: &NodeCluster,
        admin: &kube::Client,
        tns: &str,
        name: &str,
    ) -> Self {
        let sets = [
            format!("rbac.holdCallerBindings[0].namespace={tns}"),
            "rbac.holdCallerBindings[0].subjects[0].kind=ServiceAccount".to_owned(),
            "rbac.holdCallerBindings[0].subjects[0].name=dispatch".to_owned(),
            format!("rbac.holdCallerBindings[0].subjects[0].namespace={tns}"),
        ];
        let sets: Vec<&str> = sets.iter().map(String::as_str).collect();
        let release = ChartRelease::install(cluster, name, "holdfast-system", &sets).await;
        let sa: ServiceAccount =
            serde_json::from_value(serde_json::json!({"metadata": {"name": "dispatch"}}))
                .expect("sa");
        Api::<ServiceAccount>::namespaced(admin.clone(), tns)
            .create(&PostParams::default(), &sa)
            .await
            .expect("create the supervisor's ServiceAccount");
        let token = holdfast_tests::rbac::mint_token(admin, tns, "dispatch", 3600)
            .await
            .expect("token");
        let dir = tempfile::tempdir().expect("tempdir");
        let (kubeconfig, marker) =
            crate::cli::exec_plugin_kubeconfig(cluster, dir.path(), &token, tns);
        OnCall {
            kubeconfig,
            marker,
            token,
            _dir: dir,
            release,
        }
    }
}

/// The chart installed in `holdfast-system` with a tenant's supervisor (ServiceAccount
/// `dispatch` of the tenant's namespace) in `rbac.holdCallerBindings`; the supervisor's
/// kubeconfig runs an exec plugin that prints its token. With no `--server` and no
/// `--ca-file`, `kubectl holdfast` lists the release's Service and pods, port-forwards to the
/// Lease holder's hold API port through the apiserver, verifies its certificate against the
/// webhook configuration's caBundle, and holds, lists and releases the tenant's TrainJob.
/// Looking for a release where the supervisor may not list Services is exit 10, nothing sent.
#[tokio::test]
#[ignore = "tier 3: run with --ignored (builds and starts a real node)"]
async fn kubectl_holdfast_with_an_exec_plugin_kubeconfig_finds_the_hold_api_and_holds_lists_and_releases()
 {
    let cluster = NodeCluster::shared();
    let admin = cluster.client(Identity::Admin).await.expect("admin");
    let tns = cluster.namespace("node-cli").await.expect("namespace");
    let on_call = OnCall::install(cluster, &admin, &tns, "hfcli").await;
    let (kubeconfig, marker) = (on_call.kubeconfig.clone(), on_call.marker.clone());

    // A TrainJob of a real runtime, created suspended: the hold and release act on it alone.
    let trainjobs = workload_runtime(cluster, &admin, &tns).await;
    create_workload_trainjob(&trainjobs, "mnist", Some(true)).await;
    let target = format!("{tns}/mnist");

    let (code, out, err) = kubectl_holdfast(
        &kubeconfig,
        &[
            "hold",
            &target,
            "--instance",
            "7",
            "--reason",
            "node lost",
            "-o",
            "json",
        ],
    )
    .await;
    assert_eq!(code, 0, "hold through the found hold API: {out}{err}");
    let answer: serde_json::Value = serde_json::from_str(&out).expect("the API's JSON answer");
    assert_eq!(answer["result"], "Ok", "{answer}");
    assert!(marker.is_file(), "the exec plugin was not run");
    let held = trainjobs.get("mnist").await.expect("trainjob");
    assert_eq!(
        held.metadata
            .annotations
            .as_ref()
            .and_then(|a| a.get(holdfast_core::names::ANN_HOLD_INSTANCE))
            .map(String::as_str),
        Some("7"),
        "the hold is on the TrainJob"
    );

    let (code, out, err) = kubectl_holdfast(&kubeconfig, &["status", &target]).await;
    assert_eq!(code, 0, "status: {out}{err}");
    assert!(out.contains("mnist") && out.contains("node lost"), "{out}");
    let (code, out, err) = kubectl_holdfast(&kubeconfig, &["status", "-n", &tns]).await;
    assert_eq!(code, 0, "status -n: {out}{err}");
    assert!(out.contains("mnist") && out.contains('7'), "{out}");

    let (code, out, err) =
        kubectl_holdfast(&kubeconfig, &["release", &target, "--instance", "6"]).await;
    assert_eq!(code, 4, "a stale release is Rejected: {out}{err}");
    let (code, out, err) =
        kubectl_holdfast(&kubeconfig, &["release", &target, "--instance", "7"]).await;
    assert_eq!(code, 0, "release: {out}{err}");
    let released = trainjobs.get("mnist").await.expect("trainjob");
    assert!(
        released
            .metadata
            .annotations
            .as_ref()
            .is_none_or(|a| !a.contains_key(holdfast_core::names::ANN_HOLD_INSTANCE)),
        "the hold is lifted: {:?}",
        released.metadata.annotations
    );

    let (code, out, err) = kubectl_holdfast(
        &kubeconfig,
        &[
            "hold",
            &target,
            "--instance",
            "8",
            "--holdfast-namespace",
            &tns,
        ],
    )
    .await;
    assert_eq!(
        code, 10,
        "the supervisor may not look for a release there: {out}{err}"
    );
    assert!(
        err.contains(&format!("listing holdfast's Services in namespace {tns}"))
            && err.contains("nothing was sent"),
        "{err}"
    );
    drop(on_call);
}

/// `kubectl holdfast release --wait` on the real node, as someone on call would use it: the
/// held execution's pod takes 8 s to stop after SIGTERM; the release is tried while it still
/// terminates (answered `PodsRemain`), the CLI prints the pod while it waits and tries again,
/// each time with a new deadline, and exits 0 only once the pod is gone from the apiserver.
#[tokio::test]
#[ignore = "tier 3: run with --ignored (builds and starts a real node)"]
async fn release_wait_exits_zero_only_after_the_terminating_pod_is_gone_and_prints_it() {
    let cluster = NodeCluster::shared();
    let admin = cluster.client(Identity::Admin).await.expect("admin");
    let tns = cluster.namespace("node-wait").await.expect("namespace");
    let on_call = OnCall::install(cluster, &admin, &tns, "hfwait").await;
    let kubeconfig = on_call.kubeconfig.clone();

    // A runtime whose pod takes 8 s to stop after SIGTERM; its TrainJob created suspended.
    slow_stop_runtime(cluster, &admin, &tns, "workload", 8).await;
    let trainjobs: Api<DynamicObject> = Api::namespaced_with(
        admin.clone(),
        &tns,
        &holdfast_cluster::resources::trainjob(),
    );
    create_workload_trainjob(&trainjobs, "tj", Some(true)).await;
    let target = format!("{tns}/tj");
    let pods: Api<Pod> = Api::namespaced(admin.clone(), &tns);

    let (code, out, err) = kubectl_holdfast(&kubeconfig, &["open", &target]).await;
    assert_eq!(code, 0, "open: {out}{err}");
    let first = next_execution(
        &pods,
        "tj",
        &[],
        "the first execution Running",
        Duration::from_secs(120),
    )
    .await;
    let first_names: Vec<String> = first
        .iter()
        .filter_map(|p| p.metadata.name.clone())
        .collect();

    let (code, out, err) = kubectl_holdfast(
        &kubeconfig,
        &["hold", &target, "--instance", "1", "--reason", "node lost"],
    )
    .await;
    assert_eq!(code, 0, "hold: {out}{err}");
    wait_terminating(&pods, "tj").await;

    let (code, out, err) = kubectl_holdfast(
        &kubeconfig,
        &["release", &target, "--instance", "1", "--wait=120s"],
    )
    .await;
    assert_eq!(code, 0, "release --wait: {out}{err}");
    assert!(
        first_names.iter().any(|n| err.contains(n.as_str())),
        "the terminating pod ({first_names:?}) is printed while the release waits: {err}"
    );
    for name in &first_names {
        assert!(
            pods.get_opt(name).await.expect("read the pod").is_none(),
            "release --wait exited 0 while pod {name} of the held execution was still there"
        );
    }
    drop(on_call);
}
