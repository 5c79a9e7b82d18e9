//! The Go client (`clients/go`) against holdfast's real controller binary and the real
//! apiserver, in both modes: `go test ./...` there, with the hold API's URL, its CA, a
//! ServiceAccount token (the account bound to the chart's hold-caller role through
//! `rbac.holdCallerBindings`) and the TrainJobs its integration tests name. Its tests cover
//! each error class: a stale release (both `ErrStaleHold` and `ErrRejected`), a passed
//! deadline, a TrainJob that does not exist, a release by a caller who is not the holder, Kueue mode's job without a Workload, `Start`
//! waiting for the Workload, and the controller stopped and killed with a Hold written to it
//! (`ErrUnknown`; restarted here, its `Status` after the `CallBound` shows no hold, and the
//! retry of the same instance is `Held`).
//!
//! First, with a token the controller has never seen, every write without a deadline is
//! refused by the client: the apiserver's audit log shows no TokenReview made meanwhile
//! (had a call reached the hold API, its token would have been reviewed).
//!
//! The controller binary must be built first (`cargo build -p holdfast-controller`), and `go`
//! be on the PATH (the control plane is built with it).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use holdfast_tests::control_plane::free_port;
use holdfast_tests::hold_support::{self, RUNTIME, settled_audit};
use holdfast_tests::holdfast::{binary, serving_cert, wait_readyz};
use holdfast_tests::kueue_support::{CHECK, Fixture, SETTLE, Setup};
use holdfast_tests::objects::create_dynamic;
use holdfast_tests::process::Supervised;
use holdfast_tests::rbac::{self, mint_token, render_holdfast_rbac, service_account_user};
use holdfast_tests::readmission_policy;
use holdfast_tests::{ControlPlane, Identity};
use k8s_openapi::api::core::v1::ServiceAccount;
use kube::api::{Api, ObjectMeta, PostParams};
use serde_json::{Value, json};
use tokio::sync::Mutex;

/// The supervisor's ServiceAccount, and a second caller bound the same way.
const SUPERVISOR: &str = "dispatch";
const OTHER: &str = "other";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_go_client_speaks_the_seeds_classes_to_the_real_controller_in_plain_mode() {
    // A control plane of its own: the Kueue-mode test starts Kueue on this file's, whose
    // webhooks would judge these TrainJobs too (and refuse them while Kueue starts).
    let cp = ControlPlane::shared_by(concat!(file!(), " in plain mode"));
    let ns = cp.namespace("go-plain").await.expect("namespace");
    let admin = cp.client(Identity::Admin).await.expect("admin");
    hold_support::ensure_runtime(&admin).await;
    for (name, suspended) in [("stale", false), ("late", true), ("killed", false)] {
        create_dynamic(
            &admin,
            &holdfast_cluster::resources::trainjob(),
            Some(&ns),
            json!({
                "apiVersion": "trainer.kubeflow.org/v1alpha1", "kind": "TrainJob",
                "metadata": {"name": name},
                "spec": {"runtimeRef": {"name": RUNTIME}, "suspend": suspended}
            }),
        )
        .await;
    }
    run_go(cp, &ns, "plain").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_go_client_speaks_the_seeds_classes_to_the_real_controller_in_kueue_mode() {
    let f = Fixture::start_with(
        "go-kueue",
        Setup {
            gate: false,
            checks: &[CHECK],
            settle: SETTLE,
        },
    )
    .await;
    readmission_policy::register(f.cp, &f.ns).await;
    // Queued (Kueue gives them a Workload), and not queued (no Workload until labelled).
    for name in ["stale", "killed"] {
        f.create_job(name, json!({})).await;
    }
    for name in ["noworkload", "late"] {
        create_dynamic(
            &f.admin,
            &holdfast_cluster::resources::trainjob(),
            Some(&f.ns),
            json!({
                "apiVersion": "trainer.kubeflow.org/v1alpha1", "kind": "TrainJob",
                "metadata": {"name": name},
                "spec": {"runtimeRef": {"name": f.runtime}, "suspend": true}
            }),
        )
        .await;
    }
    for name in ["stale", "killed"] {
        f.workload_when(name, "the job has its Workload", |_| true)
            .await;
    }
    run_go(f.cp, &f.ns, "kueue").await;
    f.finish().await;
}

/// Binds the supervisor as the chart does, starts the controller, and runs the Go tests.
async fn run_go(cp: &'static ControlPlane, ns: &str, mode: &str) {
    let admin = cp.client(Identity::Admin).await.expect("admin");
    bind_supervisor(&admin, ns, mode).await;
    // The controller leads with its Lease in `ns`.
    rbac::grant_release_roles_in(&admin, ns)
        .await
        .expect("the chart's release-namespace roles in ns");
    let dir = cp.dir().join(format!("go-client-{ns}"));
    std::fs::create_dir_all(&dir).expect("dir");
    let file = |name: &str, content: &str| {
        let path = dir.join(name);
        std::fs::write(&path, content).expect("write");
        path
    };
    let token = file(
        "token",
        &mint_token(&admin, ns, SUPERVISOR, 3600)
            .await
            .expect("token"),
    );
    let fresh = file(
        "fresh-token",
        &mint_token(&admin, ns, SUPERVISOR, 3600)
            .await
            .expect("token"),
    );
    let other = file(
        "other-token",
        &mint_token(&admin, ns, OTHER, 3600).await.expect("token"),
    );
    let ca = file("ca.crt", cp.ca_pem());
    let kube_token = file("kube-token", cp.token(Identity::Admin));
    let pid_file = dir.join("controller.pid");

    let (cert, key) = serving_cert(cp, &format!("go-{mode}"));
    let (admin_port, api_port) = (free_port().expect("port"), free_port().expect("port"));
    let mut args = vec![
        format!("--mode={mode}"),
        format!(
            "--kubeconfig={}",
            cp.kubeconfig(Identity::Controller).display()
        ),
        format!("--api-addr=127.0.0.1:{api_port}"),
        format!("--admin-addr=127.0.0.1:{admin_port}"),
        format!("--identity=go-{mode}-{}", rand::random::<u32>()),
        format!("--watch-namespace={ns}"),
        format!("--lease-namespace={ns}"),
        format!("--lease-name=go-{mode}"),
        format!("--tls-cert={}", cert.display()),
        format!("--tls-key={}", key.display()),
        // The CallBound follows it: the test waits for it once, so it is short.
        "--apiserver-request-timeout=2s".into(),
    ];
    if mode == "kueue" {
        // As the chart passes it: preflight reads the readmission-gate policy registered above.
        args.push(format!(
            "--readmission-gate-policy={}",
            readmission_policy::name()
        ));
    }
    let mut proc = Supervised::start(
        &format!("holdfast-controller-go-{mode}"),
        &binary("holdfast-controller"),
        args,
        cp.dir(),
        cp.process_group(),
    )
    .expect("start holdfast-controller");
    wait_readyz(&mut proc, admin_port, true, Duration::from_secs(60)).await;
    write_pid(&pid_file, &proc);
    let proc = Arc::new(Mutex::new(proc));
    let keeper = keep_running(proc.clone(), pid_file.clone());

    let env: Vec<(&str, String)> = vec![
        ("HOLDFAST_IT_URL", format!("https://127.0.0.1:{api_port}")),
        ("HOLDFAST_IT_CA_FILE", path(&ca)),
        ("HOLDFAST_IT_TOKEN_FILE", path(&token)),
        ("HOLDFAST_IT_FRESH_TOKEN_FILE", path(&fresh)),
        ("HOLDFAST_IT_OTHER_TOKEN_FILE", path(&other)),
        ("HOLDFAST_IT_NAMESPACE", ns.to_owned()),
        ("HOLDFAST_IT_MODE", mode.to_owned()),
        ("HOLDFAST_IT_KUBE_URL", cp.server.clone()),
        ("HOLDFAST_IT_KUBE_TOKEN_FILE", path(&kube_token)),
        ("HOLDFAST_IT_CONTROLLER_PID_FILE", path(&pid_file)),
        ("HOLDFAST_REQUIRE_OPENAPI", "1".into()),
    ];

    // No deadline: refused before anything is sent, as the audit log shows.
    // (Each mode has a control plane of its own: no other controller reviews tokens there.)
    let before = token_reviews(cp).await;
    go_test(
        &env,
        &["-run", "^TestNoDeadlineIsRefusedBeforeAnythingIsSent$"],
        &proc,
    )
    .await;
    let after = token_reviews(cp).await;
    assert_eq!(
        after, before,
        "{mode}: the hold API reviewed a token while only calls without a deadline were made: one was sent"
    );
    // Everything: the unit tests, the types against api/openapi.json, and the calls.
    go_test(&env, &["./..."], &proc).await;
    assert!(
        token_reviews(cp).await > 0,
        "{mode}: the calls' TokenReviews are in the audit log (what the first check looks for)"
    );
    keeper.abort();
    proc.lock().await.kill();
}

/// The chart's `rbac.holdCallerBindings` for the supervisor in `ns`: its hold-caller
/// RoleBinding, as rendered, applied; then waits until the authorizer allows it.
async fn bind_supervisor(admin: &kube::Client, ns: &str, mode: &str) {
    for name in [SUPERVISOR, OTHER] {
        Api::<ServiceAccount>::namespaced(admin.clone(), ns)
            .create(
                &PostParams::default(),
                &ServiceAccount {
                    metadata: ObjectMeta {
                        name: Some(name.into()),
                        ..Default::default()
                    },
                    ..Default::default()
                },
            )
            .await
            .expect("ServiceAccount");
    }
    let sets = [
        format!("rbac.holdCallerBindings[0].namespace={ns}"),
        "rbac.holdCallerBindings[0].subjects[0].kind=ServiceAccount".to_owned(),
        format!("rbac.holdCallerBindings[0].subjects[0].name={SUPERVISOR}"),
        "rbac.holdCallerBindings[0].subjects[1].kind=ServiceAccount".to_owned(),
        format!("rbac.holdCallerBindings[0].subjects[1].name={OTHER}"),
    ];
    let sets: Vec<&str> = sets.iter().map(String::as_str).collect();
    let docs = render_holdfast_rbac(mode, &sets).expect("render the chart's RBAC");
    let bindings: Vec<&Value> = docs
        .iter()
        .filter(|d| {
            d["kind"] == "RoleBinding"
                && d["metadata"]["namespace"] == ns
                && d["roleRef"]["name"] == format!("{}-hold-caller", rbac::RELEASE)
        })
        .collect();
    assert_eq!(
        bindings.len(),
        1,
        "holdCallerBindings renders one RoleBinding"
    );
    for doc in bindings {
        rbac::apply(admin, doc, ns, false)
            .await
            .expect("apply the RoleBinding");
    }
    rbac::wait_until_may_call(admin, &service_account_user(ns, SUPERVISOR), ns, "hold").await;
}

/// The TokenReviews holdfast's controllers have made, from the audit log.
async fn token_reviews(cp: &ControlPlane) -> usize {
    hold_support::api::reviews_in(&settled_audit(cp).await).0
}

/// Restarts the controller whenever it dies (the Go test kills it), recording its pid.
fn keep_running(proc: Arc<Mutex<Supervised>>, pid_file: PathBuf) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        loop {
            {
                let mut p = proc.lock().await;
                if !p.running() {
                    p.restart().expect("restart the controller");
                    write_pid(&pid_file, &p);
                }
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    })
}

fn write_pid(pid_file: &Path, proc: &Supervised) {
    let pid = proc.pid().expect("a pid");
    std::fs::write(pid_file, pid.to_string()).expect("pid file");
}

fn path(p: &Path) -> String {
    p.display().to_string()
}

/// `go test -count=1 -v ARGS` in clients/go; fails with its output (and the controller's log).
async fn go_test(env: &[(&str, String)], args: &[&str], proc: &Mutex<Supervised>) {
    let module = Path::new(env!("CARGO_MANIFEST_DIR")).join("../clients/go");
    let mut cmd = tokio::process::Command::new("go");
    cmd.current_dir(&module)
        .args(["test", "-count=1", "-v"])
        .args(args)
        .env("GOFLAGS", "-mod=mod")
        .kill_on_drop(true);
    for (k, v) in env {
        cmd.env(k, v);
    }
    let out = match cmd.output().await {
        Ok(out) => out,
        Err(e) => panic!(
            "running `go test` in {}: {e} (install Go: the control plane is built with it)",
            module.display()
        ),
    };
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    println!("go test {args:?}:\n{text}");
    assert!(
        out.status.success(),
        "go test {args:?} failed:\n{text}\ncontroller log:\n{}",
        proc.lock().await.log_tail(40)
    );
    assert!(
        !text.contains("--- SKIP"),
        "a Go test skipped though the harness set its environment:\n{text}"
    );
}
