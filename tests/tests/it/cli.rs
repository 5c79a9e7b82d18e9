//! The CLI run as a user runs it: the real `kubectl-holdfast` binary (what `kubectl holdfast`
//! executes) as a process, with a kubeconfig of the real apiserver — an exec credential
//! plugin, a static token, a client certificate — against the hold API on loopback.
//! Needs `cargo build -p holdfast-cli` first (`tests/run.sh` builds every binary).

use std::path::{Path, PathBuf};
use std::process::Output;
use std::time::Duration;

use holdfast_core::names::{ANN_HOLD_INSTANCE, ANN_HOLD_PLACED_AT, ANN_HOLD_REASON};
use holdfast_tests::hold_support::api::{grant_alice, start_api};
use holdfast_tests::hold_support::{
    annotation, create_trainjob, executor, hold_annotations, read_trainjob, suspended,
};
use holdfast_tests::holdfast::binary;
use holdfast_tests::scene::Scene;
use holdfast_tests::{ControlPlane, Identity};
use kube::api::{Api, DynamicObject, PostParams};
use serde_json::{Value, json};

/// Runs `kubectl-holdfast` with `kubeconfig` against the hold API at `server` (trusting the
/// control plane's CA), nothing taken from the environment.
pub(crate) async fn holdfast(
    cp: &ControlPlane,
    kubeconfig: &Path,
    server: &str,
    args: &[&str],
) -> Output {
    let ca = cp.dir().join("ca.crt");
    let ca = ca.to_str().expect("a UTF-8 path");
    let mut all = vec!["--server", server, "--ca-file", ca];
    all.extend_from_slice(args);
    kubectl_holdfast(kubeconfig, &all).await
}

/// Runs `kubectl-holdfast --kubeconfig KUBECONFIG ARGS...` with nothing taken from the
/// environment (no `KUBECONFIG`, no `HOLDFAST_*`).
pub(crate) async fn kubectl_holdfast(kubeconfig: &Path, args: &[&str]) -> Output {
    tokio::process::Command::new(binary("kubectl-holdfast"))
        .arg("--kubeconfig")
        .arg(kubeconfig)
        .args(args)
        .env_remove("KUBECONFIG")
        .env_remove("HOLDFAST_SERVER")
        .env_remove("HOLDFAST_CA_FILE")
        .env_remove("HOLDFAST_TOKEN")
        .env_remove("HOLDFAST_NAMESPACE")
        .env_remove("HOLDFAST_RELEASE")
        .output()
        .await
        .expect("run kubectl-holdfast")
}

pub(crate) fn stdout(out: &Output) -> String {
    String::from_utf8_lossy(&out.stdout).into_owned()
}

pub(crate) fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

/// The exit code, with the output in the message if there is none.
pub(crate) fn code(out: &Output) -> i32 {
    out.status
        .code()
        .unwrap_or_else(|| panic!("killed: {}{}", stdout(out), stderr(out)))
}

pub(crate) fn json(out: &Output) -> Value {
    serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("not JSON ({e}): {}{}", stdout(out), stderr(out)))
}

/// A kubeconfig whose user is an exec credential plugin: a script printing an ExecCredential
/// with `token` (expiring in an hour, so kube treats it as refreshable) and appending a line to
/// the returned marker file each time it runs.
pub(crate) fn exec_plugin_kubeconfig(
    cp: &ControlPlane,
    dir: &Path,
    token: &str,
    ns: &str,
) -> (PathBuf, PathBuf) {
    let marker = dir.join("plugin-ran");
    let expiry = jiff::Timestamp::now() + Duration::from_secs(3600);
    let script = dir.join("credential-plugin.sh");
    std::fs::write(
        &script,
        format!(
            "#!/bin/sh\necho ran >> '{marker}'\ncat <<'EOF'\n{{\"apiVersion\":\"client.authentication.k8s.io/v1\",\"kind\":\"ExecCredential\",\"status\":{{\"token\":\"{token}\",\"expirationTimestamp\":\"{expiry}\"}}}}\nEOF\n",
            marker = marker.display(),
            expiry = holdfast_core::rfc3339::seconds(expiry),
        ),
    )
    .expect("write the plugin");
    std::process::Command::new("chmod")
        .arg("+x")
        .arg(&script)
        .status()
        .expect("chmod the plugin");
    let user = format!(
        "    exec:\n      apiVersion: client.authentication.k8s.io/v1\n      command: {}\n      interactiveMode: Never\n",
        script.display()
    );
    let path = dir.join("kubeconfig-exec.yaml");
    std::fs::write(&path, cp.kubeconfig_yaml_with("alice-exec", &user, ns)).expect("write");
    (path, marker)
}

#[tokio::test]
async fn an_exec_plugin_user_holds_and_releases_and_refusals_exit_with_their_codes() {
    let s = Scene::new("cli-exec").await;
    let ns = &s.ns;
    s.job("mnist", true).await;
    let api = start_api(s.cp, s.executor().await).await;
    grant_alice(
        s.cp,
        ns,
        &["hold", "release", "open", "status"],
        &["create", "get"],
    )
    .await;
    let dir = tempfile::tempdir().expect("tempdir");
    let (kubeconfig, marker) =
        exec_plugin_kubeconfig(s.cp, dir.path(), s.cp.token(Identity::User), ns);
    let job = format!("{ns}/mnist");

    let out = holdfast(s.cp, &kubeconfig, &api.base, &["open", &job]).await;
    assert_eq!(code(&out), 0, "{}{}", stdout(&out), stderr(&out));
    assert_eq!(json(&out)["outcome"], "Opened");
    assert!(marker.is_file(), "the exec plugin was not run");
    assert!(!suspended(&s.read("mnist").await));

    let out = holdfast(
        s.cp,
        &kubeconfig,
        &api.base,
        &["hold", &job, "--instance", "1", "--reason", "node lost"],
    )
    .await;
    assert_eq!(code(&out), 0, "{}{}", stdout(&out), stderr(&out));
    assert_eq!(json(&out)["outcome"], "Held");
    let tj = s.read("mnist").await;
    assert_eq!(annotation(&tj, ANN_HOLD_INSTANCE), Some("1"));
    assert!(suspended(&tj));

    let out = holdfast(
        s.cp,
        &kubeconfig,
        &api.base,
        &["release", &job, "--instance", "0"],
    )
    .await;
    assert_eq!(
        code(&out),
        4,
        "a stale release is Rejected: {}{}",
        stdout(&out),
        stderr(&out)
    );
    let body = json(&out);
    assert_eq!(
        (body["error"].as_str(), body["cause"].as_str()),
        (Some("Rejected"), Some("StaleHold"))
    );

    let out = holdfast(
        s.cp,
        &kubeconfig,
        &api.base,
        &["status", &job, "-o", "yaml"],
    )
    .await;
    assert_eq!(code(&out), 0, "{}{}", stdout(&out), stderr(&out));
    let status: Value = serde_saphyr::from_str(&stdout(&out))
        .unwrap_or_else(|e| panic!("not YAML ({e}): {}", stdout(&out)));
    assert_eq!(status["hold"]["instance"], 1, "{status}");
    assert_eq!(status["hold"]["reason"], "node lost", "{status}");

    let bad = format!("{ns}/Not_A_Name");
    let out = holdfast(
        s.cp,
        &kubeconfig,
        &api.base,
        &["hold", &bad, "--instance", "2"],
    )
    .await;
    assert_eq!(
        code(&out),
        3,
        "a name no TrainJob can have is Invalid: {}{}",
        stdout(&out),
        stderr(&out)
    );
    assert_eq!(json(&out)["error"], "Invalid");

    let out = holdfast(
        s.cp,
        &kubeconfig,
        &api.base,
        &["release", &job, "--instance", "1"],
    )
    .await;
    assert_eq!(code(&out), 0, "{}{}", stdout(&out), stderr(&out));
    assert_eq!(json(&out)["outcome"], "Released");
    assert_eq!(json(&out)["resumed"], true);
    let tj = s.read("mnist").await;
    assert!(hold_annotations(&tj).is_empty(), "{tj}");
    assert!(!suspended(&tj));
}

#[tokio::test]
async fn a_static_token_user_lists_every_held_job_with_status_all_namespaces() {
    let s = Scene::new("cli-list").await;
    let ns = &s.ns;
    s.job("held", false).await;
    s.job("free", false).await;
    let api = start_api(s.cp, s.executor().await).await;
    let kubeconfig = s.cp.kubeconfig(Identity::Admin);
    let job = format!("{ns}/held");

    let out = holdfast(
        s.cp,
        &kubeconfig,
        &api.base,
        &[
            "hold",
            &job,
            "--instance",
            "7",
            "--reason",
            "drain",
            "-o",
            "table",
        ],
    )
    .await;
    assert_eq!(code(&out), 0, "{}{}", stdout(&out), stderr(&out));
    assert_eq!(stdout(&out).trim(), format!("{job}: Held"));

    let out = holdfast(s.cp, &kubeconfig, &api.base, &["status", "-A"]).await;
    assert_eq!(code(&out), 0, "{}{}", stdout(&out), stderr(&out));
    let table = stdout(&out);
    let ours: Vec<Vec<&str>> = table
        .lines()
        .map(|l| l.split_whitespace().collect::<Vec<_>>())
        .filter(|cols| cols.first() == Some(&ns.as_str()))
        .collect();
    assert_eq!(ours.len(), 1, "only the held job is listed:\n{table}");
    let row = &ours[0];
    assert_eq!(
        &row[..6],
        [
            ns.as_str(),
            "held",
            "plain",
            "7",
            Identity::Admin.username(),
            "drain"
        ],
        "the holder is the user name that placed it: {table}"
    );
    assert_eq!(row.last(), Some(&"HeldByUs"), "{table}");

    let out = holdfast(
        s.cp,
        &kubeconfig,
        &api.base,
        &["status", "-A", "-o", "json"],
    )
    .await;
    assert_eq!(code(&out), 0, "{}{}", stdout(&out), stderr(&out));
    let listed = json(&out);
    let item = listed["items"]
        .as_array()
        .and_then(|items| items.iter().find(|i| i["namespace"] == ns.as_str()))
        .unwrap_or_else(|| panic!("{ns} is not listed: {listed}"));
    assert_eq!(item["name"], "held");
    assert_eq!(item["hold"]["instance"], 7);
    assert_eq!(item["hold"]["holder"], Identity::Admin.username());
    assert_eq!(item["state"]["kind"], "HeldByUs");
}

#[tokio::test]
async fn a_client_certificate_user_is_told_the_hold_api_needs_a_token() {
    let s = Scene::new("cli-cert").await;
    let ns = &s.ns;
    s.job("mnist", false).await;
    let api = start_api(s.cp, s.executor().await).await;
    let dir = tempfile::tempdir().expect("tempdir");
    let cert =
        s.cp.issue_client_cert("carol", Duration::from_secs(3600))
            .expect("client certificate");
    let (crt, key) = (dir.path().join("carol.crt"), dir.path().join("carol.key"));
    std::fs::write(&crt, &cert.cert_pem).expect("write");
    std::fs::write(&key, &cert.key_pem).expect("write");
    let user = format!(
        "    client-certificate: {}\n    client-key: {}\n",
        crt.display(),
        key.display()
    );
    let kubeconfig = dir.path().join("kubeconfig-cert.yaml");
    std::fs::write(&kubeconfig, s.cp.kubeconfig_yaml_with("carol", &user, ns)).expect("write");
    // A credential the apiserver accepts, as kubectl would use it.
    let kc = kube::config::Kubeconfig::read_from(&kubeconfig).expect("kubeconfig");
    let config = kube::Config::from_custom_kubeconfig(kc, &Default::default())
        .await
        .expect("config");
    kube::Client::try_from(config)
        .expect("client")
        .apiserver_version()
        .await
        .expect("the apiserver accepts carol's certificate");

    let job = format!("{ns}/mnist");
    let out = holdfast(
        s.cp,
        &kubeconfig,
        &api.base,
        &["hold", &job, "--instance", "1"],
    )
    .await;
    assert_eq!(code(&out), 11, "{}{}", stdout(&out), stderr(&out));
    let message = stderr(&out);
    assert!(message.contains("client certificate"), "{message}");
    assert!(message.contains("kubectl create token"), "{message}");
    let tj = s.read("mnist").await;
    assert!(hold_annotations(&tj).is_empty(), "{tj}");
}

#[tokio::test]
async fn status_lists_a_kueue_mode_hold_written_on_the_trainjobs_workload() {
    let s = Scene::new("cli-kueue").await;
    let ns = &s.ns;
    let tj = s.job("job", true).await;
    let uid = tj["metadata"]["uid"].as_str().expect("uid");
    let api = start_api(s.cp, s.executor().await).await;
    // The Workload as Kueue makes it (owned by the TrainJob) and as holdfast holds it in
    // Kueue mode (deactivated, the hold's annotations): written here by the admin.
    let workload: DynamicObject = serde_json::from_value(json!({
        "apiVersion": holdfast_tests::kueue::KUEUE_API_VERSION, "kind": "Workload",
        "metadata": {"name": "trainjob-job-1", "annotations": {
                ANN_HOLD_INSTANCE: "5", ANN_HOLD_REASON: "preempted",
                ANN_HOLD_PLACED_AT: holdfast_core::rfc3339::seconds(jiff::Timestamp::now())},
            "ownerReferences": [{"apiVersion": "trainer.kubeflow.org/v1alpha1",
                "kind": "TrainJob", "name": "job", "uid": uid, "controller": true}]},
        "spec": {"active": false, "queueName": "q", "podSets": [{"name": "node", "count": 1,
            "template": {"spec": {"containers": [{"name": "node", "image": "busybox"}]}}}]}
    }))
    .expect("workload");
    let admin = s.admin.clone();
    Api::<DynamicObject>::namespaced_with(admin, ns, &holdfast_cluster::resources::workload())
        .create(&PostParams::default(), &workload)
        .await
        .expect("create the Workload");

    let kubeconfig = s.cp.kubeconfig(Identity::Admin);
    let out = holdfast(
        s.cp,
        &kubeconfig,
        &api.base,
        &["status", "-n", ns, "-o", "json"],
    )
    .await;
    assert_eq!(code(&out), 0, "{}{}", stdout(&out), stderr(&out));
    let listed = json(&out);
    let items = listed["items"].as_array().expect("items");
    assert_eq!(items.len(), 1, "{listed}");
    assert_eq!(
        (
            &items[0]["name"],
            &items[0]["mode"],
            &items[0]["heldObject"],
            &items[0]["hold"]["instance"],
            &items[0]["hold"]["reason"],
            &items[0]["state"]["kind"]
        ),
        (
            &json!("job"),
            &json!("kueue"),
            &json!("Workload"),
            &json!(5),
            &json!("preempted"),
            &json!("HeldByUs")
        ),
        "{listed}"
    );
}

/// Without `--server` the CLI looks for the release in `--holdfast-namespace`; where there is
/// none it says so and what to pass, exits 12 (nothing was sent), and never reads the token
/// into a request.
#[tokio::test]
async fn without_server_a_namespace_with_no_release_is_an_error_naming_what_to_pass() {
    let s = Scene::new("cli-find").await;
    let ns = &s.ns;
    let job = format!("{ns}/mnist");
    let out = kubectl_holdfast(
        &s.cp.kubeconfig(Identity::Admin),
        &["--holdfast-namespace", ns, "hold", &job, "--instance", "1"],
    )
    .await;
    assert_eq!(code(&out), 12, "{}{}", stdout(&out), stderr(&out));
    let err = stderr(&out);
    assert!(
        err.contains(&format!("no holdfast release in namespace {ns}"))
            && err.contains("--holdfast-namespace")
            && err.contains("nothing was sent"),
        "{err}"
    );
}

/// A running `kubectl-holdfast` whose stderr is read line by line as it comes.
struct Running {
    child: tokio::process::Child,
    stderr: tokio::io::Lines<tokio::io::BufReader<tokio::process::ChildStderr>>,
    seen: String,
}

impl Running {
    /// Starts `kubectl-holdfast --kubeconfig K --server S --ca-file CA ARGS...`.
    fn start(cp: &ControlPlane, kubeconfig: &Path, server: &str, args: &[&str]) -> Running {
        use tokio::io::AsyncBufReadExt;
        let ca = cp.dir().join("ca.crt");
        let mut child = tokio::process::Command::new(binary("kubectl-holdfast"))
            .arg("--kubeconfig")
            .arg(kubeconfig)
            .args(["--server", server, "--ca-file"])
            .arg(ca)
            .args(args)
            .env_remove("KUBECONFIG")
            .env_remove("HOLDFAST_SERVER")
            .env_remove("HOLDFAST_CA_FILE")
            .env_remove("HOLDFAST_TOKEN")
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .kill_on_drop(true)
            .spawn()
            .expect("start kubectl-holdfast");
        let stderr = child.stderr.take().expect("stderr");
        Running {
            child,
            stderr: tokio::io::BufReader::new(stderr).lines(),
            seen: String::new(),
        }
    }

    /// Reads stderr until a line contains `text` (panics with what was read if the program
    /// ends first).
    async fn until_stderr(&mut self, text: &str) {
        loop {
            match self.stderr.next_line().await.expect("read stderr") {
                Some(line) => {
                    self.seen.push_str(&line);
                    self.seen.push('\n');
                    if line.contains(text) {
                        return;
                    }
                }
                None => panic!("ended without printing {text:?}:\n{}", self.seen),
            }
        }
    }

    /// Waits for the end: exit code, stdout, and all of stderr.
    async fn finish(mut self) -> (i32, String, String) {
        while let Some(line) = self.stderr.next_line().await.expect("read stderr") {
            self.seen.push_str(&line);
            self.seen.push('\n');
        }
        let out = self.child.wait_with_output().await.expect("wait");
        (
            out.status.code().expect("exited"),
            String::from_utf8_lossy(&out.stdout).into_owned(),
            self.seen,
        )
    }
}

/// TrainJob `mnist` in a new namespace, opened, a pod of its execution running (no finalizer:
/// deleting it removes it, no kubelet being there to wait for); the hold API and an admin
/// kubeconfig.
async fn running_job_with_a_pod(
    cp: &ControlPlane,
    prefix: &str,
) -> (
    String,
    holdfast_tests::hold_support::api::HoldApi,
    PathBuf,
    Api<k8s_openapi::api::core::v1::Pod>,
) {
    let ns = cp.namespace(prefix).await.expect("namespace");
    create_trainjob(cp, &ns, "mnist", true).await;
    let api = start_api(cp, executor(cp).await).await;
    let kubeconfig = cp.kubeconfig(Identity::Admin);
    let job = format!("{ns}/mnist");
    let out = holdfast(cp, &kubeconfig, &api.base, &["open", &job]).await;
    assert_eq!(code(&out), 0, "{}{}", stdout(&out), stderr(&out));
    let admin = cp.client(Identity::Admin).await.expect("admin");
    let tj = read_trainjob(cp, &ns, "mnist").await;
    let uid = tj["metadata"]["uid"].as_str().expect("uid");
    let owners = holdfast_tests::execution_owners::ensure(&admin, &ns, "mnist", uid)
        .await
        .expect("the execution's owners");
    let pod: k8s_openapi::api::core::v1::Pod = serde_json::from_value(
        holdfast_tests::execution_owners::pod("mnist-node-0-0", "mnist", &owners, json!({})),
    )
    .expect("pod");
    let pods = Api::namespaced(admin, &ns);
    pods.create(&PostParams::default(), &pod)
        .await
        .expect("pod");
    (ns, api, kubeconfig, pods)
}

/// `release --wait` tries again after PodsRemain, printing the pod still there, each try with
/// a deadline of its own: the first try's (1s) has passed when the pod goes, so a try reusing
/// it would be refused `DeadlinePassed` (exit 4). It exits 0 once released.
#[tokio::test]
async fn release_wait_retries_pods_remain_with_a_new_deadline_each_try_until_the_pod_is_gone() {
    let cp = ControlPlane::shared();
    let (ns, api, kubeconfig, pods) = running_job_with_a_pod(cp, "cli-rwait").await;
    let job = format!("{ns}/mnist");
    let out = holdfast(
        cp,
        &kubeconfig,
        &api.base,
        &["hold", &job, "--instance", "1"],
    )
    .await;
    assert_eq!(code(&out), 0, "{}{}", stdout(&out), stderr(&out));

    let started = tokio::time::Instant::now();
    let mut release = Running::start(
        cp,
        &kubeconfig,
        &api.base,
        &[
            "release",
            &job,
            "--instance",
            "1",
            "--deadline-in=1s",
            "--wait=60s",
        ],
    );
    release
        .until_stderr("pods still there: mnist-node-0-0")
        .await;
    // Past the first try's deadline before the pod goes.
    tokio::time::sleep_until(started + Duration::from_millis(1500)).await;
    pods.delete("mnist-node-0-0", &Default::default())
        .await
        .expect("delete the pod");
    let (code, out, err) = release.finish().await;
    assert_eq!(code, 0, "{out}{err}");
    let answer: Value = serde_json::from_str(&out).unwrap_or_else(|e| panic!("{e}: {out}"));
    assert_eq!(answer["outcome"], "Released", "{out}");
    assert!(err.contains("PodsRemain"), "{err}");
    let tj = read_trainjob(cp, &ns, "mnist").await;
    assert!(hold_annotations(&tj).is_empty(), "{tj}");
}

/// `release --wait` that runs out while the pod remains exits 5 with the last answer
/// (PodsRemain) on stdout and the pod named on stderr; the hold stays.
#[tokio::test]
async fn release_wait_that_runs_out_exits_with_the_last_pods_remain_answer() {
    let cp = ControlPlane::shared();
    let (ns, api, kubeconfig, _pods) = running_job_with_a_pod(cp, "cli-rwait-out").await;
    let job = format!("{ns}/mnist");
    let out = holdfast(
        cp,
        &kubeconfig,
        &api.base,
        &["hold", &job, "--instance", "1"],
    )
    .await;
    assert_eq!(code(&out), 0, "{}{}", stdout(&out), stderr(&out));
    let out = holdfast(
        cp,
        &kubeconfig,
        &api.base,
        &["release", &job, "--instance", "1", "--wait=1s"],
    )
    .await;
    assert_eq!(code(&out), 5, "{}{}", stdout(&out), stderr(&out));
    assert_eq!(json(&out)["error"], "PodsRemain");
    let err = stderr(&out);
    assert!(
        err.contains("pods still there: mnist-node-0-0") && err.contains("--wait ran out"),
        "{err}"
    );
    let tj = read_trainjob(cp, &ns, "mnist").await;
    assert_eq!(annotation(&tj, ANN_HOLD_INSTANCE), Some("1"));
}

/// `hold --wait-stopped` places the hold, prints the held execution's pod while Status lists
/// it, and returns 0 once it is gone.
#[tokio::test]
async fn hold_wait_stopped_returns_once_the_held_executions_pods_are_gone() {
    let cp = ControlPlane::shared();
    let (ns, api, kubeconfig, pods) = running_job_with_a_pod(cp, "cli-hwait").await;
    let job = format!("{ns}/mnist");
    let mut hold = Running::start(
        cp,
        &kubeconfig,
        &api.base,
        &["hold", &job, "--instance", "1", "--wait-stopped=60s"],
    );
    hold.until_stderr("pods still there: mnist-node-0-0").await;
    assert_eq!(
        annotation(&read_trainjob(cp, &ns, "mnist").await, ANN_HOLD_INSTANCE),
        Some("1"),
        "held before it waits"
    );
    pods.delete("mnist-node-0-0", &Default::default())
        .await
        .expect("delete the pod");
    let (code, out, err) = hold.finish().await;
    assert_eq!(code, 0, "{out}{err}");
    let answer: Value = serde_json::from_str(&out).unwrap_or_else(|e| panic!("{e}: {out}"));
    assert_eq!(answer["outcome"], "Held", "{out}");
    assert!(err.contains("the held execution's pods are gone"), "{err}");
}

/// `check` against a release laid out as the chart lays it out: the controller's Service in a
/// holdfast namespace of its own, the chart's webhook configurations (and, under the policy
/// engine, its policies) registered as `<fullname>` for the tenant namespace only, served by
/// the real webhook, and the real controller holding the Lease `<fullname>-controller` and
/// serving the hold API. Before the controller runs, `check` fails the leader and serves
/// checks, saying what to do, and exits 14; `check --wait` then passes all four once it has
/// taken the Lease, the protected write refused by holdfast by name.
#[tokio::test]
async fn check_passes_an_install_that_protects_and_serves_and_fails_one_with_no_leader() {
    use holdfast_tests::in_process_webhook::InProcessWebhook;
    use holdfast_tests::registration::{Engine, Namespaces, Registration, Target};
    let s = Scene::new("cli-check").await;
    let ns = &s.ns;
    let hf = s.cp.namespace("cli-check-hf").await.expect("namespace");
    let admin = s.admin.clone();
    let hook = InProcessWebhook::start(s.cp, holdfast_core::mode::Mode::Plain, false)
        .await
        .expect("webhook");
    let fullname = format!("holdfast-{ns}");
    let registration = Registration::new(
        fullname.clone(),
        Target::Url(hook.url()),
        s.cp.ca_pem().as_bytes().to_vec(),
    )
    .with_engine(Engine::from_env())
    .with_namespaces(Namespaces::Only(vec![ns.clone()]));
    registration.install(&admin).await.expect("register");
    let service: k8s_openapi::api::core::v1::Service = serde_json::from_value(json!({
        "metadata": {"name": format!("{fullname}-controller"), "labels": {
            "app.kubernetes.io/part-of": "holdfast", "app.kubernetes.io/component": "controller",
            "app.kubernetes.io/instance": "hf"}},
        "spec": {"selector": {"app.kubernetes.io/component": "controller",
            "app.kubernetes.io/instance": "hf"}, "ports": [{"name": "https", "port": 8443}]}
    }))
    .expect("service");
    Api::namespaced(admin.clone(), &hf)
        .create(&PostParams::default(), &service)
        .await
        .expect("the controller's Service");
    let kubeconfig = s.cp.kubeconfig(Identity::Admin);
    let api_port = holdfast_tests::control_plane::free_port().expect("port");
    let server = format!("https://127.0.0.1:{api_port}");
    let check = |extra: &'static [&'static str]| {
        let (ns, hf, server, kubeconfig) =
            (ns.clone(), hf.clone(), server.clone(), kubeconfig.clone());
        async move {
            let mut args = vec!["--holdfast-namespace", &hf, "-n", &ns, "check"];
            args.extend_from_slice(extra);
            holdfast(s.cp, &kubeconfig, &server, &args).await
        }
    };

    let out = check(&[]).await;
    assert_eq!(code(&out), 14, "{}{}", stdout(&out), stderr(&out));
    let text = stdout(&out);
    for line in [
        "PASS  caBundle",
        "FAIL  leader",
        "PASS  protects",
        "FAIL  serves",
        "what to do:",
    ] {
        assert!(text.contains(line), "{line}:\n{text}");
    }

    // The chart's Role names the Lease of release `holdfast`; this release's is its own.
    let role: k8s_openapi::api::rbac::v1::Role = serde_json::from_value(json!({
        "metadata": {"name": "cli-check-lease"},
        "rules": [{"apiGroups": ["coordination.k8s.io"], "resources": ["leases"],
            "resourceNames": [format!("{fullname}-controller")],
            "verbs": ["get", "update", "patch"]}]
    }))
    .expect("role");
    Api::namespaced(admin.clone(), &hf)
        .create(&PostParams::default(), &role)
        .await
        .expect("the Lease's Role");
    let binding: k8s_openapi::api::rbac::v1::RoleBinding = serde_json::from_value(json!({
        "metadata": {"name": "cli-check-lease"},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "cli-check-lease"},
        "subjects": [{"kind": "User", "apiGroup": "rbac.authorization.k8s.io",
            "name": Identity::Controller.username()}]
    }))
    .expect("binding");
    Api::namespaced(admin.clone(), &hf)
        .create(&PostParams::default(), &binding)
        .await
        .expect("the Lease's RoleBinding");
    let (cert, key) = holdfast_tests::holdfast::serving_cert(s.cp, "cli-check");
    let lease = format!("--lease-name={fullname}-controller");
    let (cert, key) = (
        format!("--tls-cert={}", cert.display()),
        format!("--tls-key={}", key.display()),
    );
    let admin_port = holdfast_tests::control_plane::free_port().expect("port");
    let controller = holdfast_tests::holdfast::start_plain_controller_on(
        s.cp,
        &hf,
        "cli-check",
        admin_port,
        api_port,
        &[&lease, &cert, &key],
    );
    let out = check(&["--wait=60s"]).await;
    assert_eq!(
        code(&out),
        0,
        "{}{}\ncontroller:\n{}",
        stdout(&out),
        stderr(&out),
        controller.log_tail(30)
    );
    let text = stdout(&out);
    assert_eq!(
        text.lines().filter(|l| l.starts_with("PASS")).count(),
        4,
        "{text}"
    );
    assert!(
        text.contains(holdfast_cli_snapshot_refusal(&fullname).0)
            || text.contains(&holdfast_cli_snapshot_refusal(&fullname).1),
        "refused by holdfast, by name: {text}"
    );
    registration.uninstall(&admin).await;
    hook.stop().await.expect("stop the webhook");
}

/// What names holdfast in a refused snapshot write: its webhook entry, or its policy.
fn holdfast_cli_snapshot_refusal(fullname: &str) -> (&'static str, String) {
    (
        "snapshots.validate.holdfast.dev",
        format!("{fullname}-snapshots"),
    )
}
