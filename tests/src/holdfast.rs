//! holdfast's own binaries as processes, for the tests that need the real thing (fault
//! tests, the chart's RBAC test): where they are, how to start and probe the controller, and
//! how to run the webhook and register it with the apiserver by URL.

use crate::control_plane::free_port;
use crate::process::Supervised;
use crate::registration::{Namespaces, Registration, Target};
use crate::wait::wait_for;
use crate::{ControlPlane, Identity};
use holdfast_core::names::ANN_HOLD_INSTANCE as HOLD;
use k8s_openapi::api::admissionregistration::v1::{
    MutatingWebhookConfiguration, ValidatingWebhookConfiguration,
};
use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{Api, DynamicObject, PostParams};
use serde_json::json;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

/// A binary of this workspace, built by `cargo build` (debug); panics saying how to build it.
/// Looked up next to the running test binary (`<target>/debug/deps/..`, so a
/// `CARGO_TARGET_DIR` elsewhere is followed), else in the tree's `target/debug`.
pub fn binary(name: &str) -> PathBuf {
    let beside_tests = std::env::current_exe()
        .ok()
        .and_then(|exe| Some(exe.parent()?.parent()?.join(name)))
        .filter(|bin| bin.is_file());
    let bin = beside_tests.unwrap_or_else(|| {
        Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("..")
            .join("target")
            .join("debug")
            .join(name)
    });
    assert!(
        bin.is_file(),
        "{} is missing: build it first with `cargo build -p {name}` \
         (`tests/run.sh` does)",
        bin.display()
    );
    bin
}

/// A control plane of the test's own (for tests that restart or break it), started off the
/// async runtime.
pub async fn owned_control_plane() -> ControlPlane {
    owned_control_plane_with(crate::control_plane::Options::default()).await
}

/// [`owned_control_plane`] with more apiserver configuration.
pub async fn owned_control_plane_with(opts: crate::control_plane::Options) -> ControlPlane {
    match tokio::task::spawn_blocking(move || ControlPlane::start_with(opts)).await {
        Ok(Ok(cp)) => cp,
        Ok(Err(e)) => panic!("start a control plane: {e:#}"),
        Err(e) => panic!("start a control plane: {e}"),
    }
}

/// The controller binary in plain mode as holdfast's controller identity, without TLS (no
/// hold API), its Lease and its watches in `ns`, its admin port (`/readyz`) at `admin_port`;
/// `extra` flags appended (a `--lease-namespace` there replaces `ns` for the Lease).
pub fn start_plain_controller(
    cp: &ControlPlane,
    ns: &str,
    name: &str,
    admin_port: u16,
    extra: &[&str],
) -> Supervised {
    let api_port = crate::control_plane::free_port().expect("port");
    start_plain_controller_on(cp, ns, name, admin_port, api_port, extra)
}

/// [`start_plain_controller`] with the hold API's port chosen by the caller (with
/// `--tls-cert`/`--tls-key` in `extra`, the API is served there).
pub fn start_plain_controller_on(
    cp: &ControlPlane,
    ns: &str,
    name: &str,
    admin_port: u16,
    api_port: u16,
    extra: &[&str],
) -> Supervised {
    let mut args = vec![
        "--mode=plain".to_string(),
        format!(
            "--kubeconfig={}",
            cp.kubeconfig(Identity::Controller).display()
        ),
        format!("--api-addr=127.0.0.1:{api_port}"),
        format!("--admin-addr=127.0.0.1:{admin_port}"),
        format!("--identity={name}-{}", rand::random::<u32>()),
        format!("--watch-namespace={ns}"),
    ];
    // `extra` may name another Lease namespace.
    if !extra.iter().any(|e| e.starts_with("--lease-namespace=")) {
        args.push(format!("--lease-namespace={ns}"));
    }
    args.extend(extra.iter().map(|s| s.to_string()));
    match Supervised::start(
        &format!("holdfast-controller-{name}"),
        &binary("holdfast-controller"),
        args,
        cp.dir(),
        cp.process_group(),
    ) {
        Ok(p) => p,
        Err(e) => panic!("start holdfast-controller: {e:#}"),
    }
}

/// Polls a process's `/readyz` on `port` until it is (or is not) 200; panics with the
/// process's log after `timeout`.
pub async fn wait_readyz(proc: &mut Supervised, port: u16, ready: bool, timeout: Duration) {
    let url = format!("http://127.0.0.1:{port}/readyz");
    let client = match reqwest::Client::builder()
        .timeout(Duration::from_secs(2))
        .build()
    {
        Ok(c) => c,
        Err(e) => panic!("http client: {e}"),
    };
    let deadline = tokio::time::Instant::now() + timeout;
    loop {
        let ok = matches!(client.get(&url).send().await, Ok(r) if r.status().is_success());
        if ok == ready {
            return;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "/readyz was not {} within {timeout:?}; log:\n{}",
            if ready { "200" } else { "non-200" },
            proc.log_tail(30)
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// A serving certificate naming 127.0.0.1 (the apiserver calls `https://127.0.0.1:PORT`),
/// from the control plane's CA, written under the control plane's directory.
pub fn serving_cert(cp: &ControlPlane, name: &str) -> (PathBuf, PathBuf) {
    let cert = cp
        .issue_serving_cert(&["127.0.0.1"], Duration::from_secs(3600))
        .expect("serving certificate");
    let dir = cp.dir().join(format!("{name}-tls"));
    std::fs::create_dir_all(&dir).expect("tls dir");
    let (crt, key) = (dir.join("tls.crt"), dir.join("tls.key"));
    std::fs::write(&crt, &cert.cert_pem).expect("write cert");
    std::fs::write(&key, &cert.key_pem).expect("write key");
    (crt, key)
}

/// One `holdfast-webhook` process, plain mode, as the webhook's identity.
pub struct WebhookReplica {
    pub proc: Supervised,
    pub port: u16,
    pub admin_port: u16,
}

impl WebhookReplica {
    /// Starts it (plain mode, holdfast's identities, `extra` flags appended).
    pub fn start(
        cp: &ControlPlane,
        name: &str,
        cert: &Path,
        key: &Path,
        extra: &[&str],
    ) -> WebhookReplica {
        Self::start_on(cp, name, free_port().expect("port"), cert, key, extra)
    }

    /// [`start`](Self::start) on a port chosen beforehand (e.g. one the apiserver's
    /// admission configuration names).
    pub fn start_on(
        cp: &ControlPlane,
        name: &str,
        port: u16,
        cert: &Path,
        key: &Path,
        extra: &[&str],
    ) -> WebhookReplica {
        Self::start_binary(
            cp,
            name,
            &binary("holdfast-webhook"),
            port,
            cert,
            key,
            extra,
        )
    }

    /// [`start_on`](Self::start_on) with the `holdfast-webhook` binary at `bin` (a benchmark
    /// runs the release build).
    pub fn start_binary(
        cp: &ControlPlane,
        name: &str,
        bin: &Path,
        port: u16,
        cert: &Path,
        key: &Path,
        extra: &[&str],
    ) -> WebhookReplica {
        let admin_port = free_port().expect("port");
        let mut args = vec![
            "--mode=plain".to_string(),
            format!(
                "--kubeconfig={}",
                cp.kubeconfig(Identity::Webhook).display()
            ),
            format!("--addr=127.0.0.1:{port}"),
            format!("--admin-addr=127.0.0.1:{admin_port}"),
            format!("--tls-cert={}", cert.display()),
            format!("--tls-key={}", key.display()),
            format!("--controller-users={}", Identity::Controller.username()),
            format!("--snapshot-creators={}", Identity::Trainer.username()),
            format!("--kueue-users={}", Identity::Kueue.username()),
        ];
        args.extend(extra.iter().map(|s| s.to_string()));
        let proc = Supervised::start(
            &format!("holdfast-webhook-{name}"),
            bin,
            args,
            cp.dir(),
            cp.process_group(),
        )
        .expect("start holdfast-webhook");
        WebhookReplica {
            proc,
            port,
            admin_port,
        }
    }

    pub fn addr(&self) -> SocketAddr {
        SocketAddr::from(([127, 0, 0, 1], self.port))
    }

    pub async fn wait_ready(&mut self) {
        let url = format!("http://127.0.0.1:{}/readyz", self.admin_port);
        let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
        loop {
            if matches!(reqwest::get(&url).await, Ok(r) if r.status().is_success()) {
                return;
            }
            assert!(
                self.proc.running(),
                "{} exited:\n{}",
                self.proc.name,
                self.proc.log_tail(30)
            );
            assert!(
                tokio::time::Instant::now() < deadline,
                "{} not ready within 60 s:\n{}",
                self.proc.name,
                self.proc.log_tail(30)
            );
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }

    /// The text of its `/metrics`.
    pub async fn metrics(&self) -> String {
        let url = format!("http://127.0.0.1:{}/metrics", self.admin_port);
        reqwest::get(&url)
            .await
            .expect("GET /metrics")
            .text()
            .await
            .expect("/metrics body")
    }
}

/// Register the webhook configurations, by URL `https://127.0.0.1:port`, for `ns` alone, with
/// `timeout_seconds`, and wait until the apiserver calls them (dry-run probes, no side
/// effect).
pub async fn register_webhook(cp: &ControlPlane, ns: &str, port: u16, timeout_seconds: i32) {
    let admin = cp.client(Identity::Admin).await.expect("admin");
    let mut registration = Registration::new(
        format!("holdfast-{ns}"),
        Target::Url(format!("https://127.0.0.1:{port}")),
        cp.ca_pem().as_bytes().to_vec(),
    )
    .with_namespaces(Namespaces::Only(vec![ns.to_owned()]));
    registration.timeout_seconds = timeout_seconds;
    Api::<ValidatingWebhookConfiguration>::all(admin.clone())
        .create(&PostParams::default(), &registration.validating())
        .await
        .expect("register the validating webhooks");
    Api::<MutatingWebhookConfiguration>::all(admin)
        .create(&PostParams::default(), &registration.mutating())
        .await
        .expect("register the mutating webhook");

    let alice = cp.client(Identity::User).await.expect("alice");
    let cms = Api::<ConfigMap>::namespaced(alice.clone(), ns);
    let tjs =
        Api::<DynamicObject>::namespaced_with(alice, ns, &holdfast_cluster::resources::trainjob());
    let dry = PostParams {
        dry_run: true,
        ..Default::default()
    };
    wait_for(
        "the webhook configurations to take effect",
        Duration::from_secs(60),
        || async {
            let snapshot = cms.create(&dry, &probe_configmap("probe-runtime-snapshot")).await;
            let snapshot = matches!(&snapshot, Err(kube::Error::Api(s)) if s.code == 403 && s.message.contains("is a runtime snapshot"));
            let held = tjs
                .create(&dry, &probe_trainjob("probe", json!({HOLD: "1"})))
                .await;
            let held = matches!(&held, Err(kube::Error::Api(s)) if s.code == 403 && s.message.contains(HOLD));
            (snapshot && held).then_some(())
        },
    )
    .await;
}

/// A ConfigMap named as a snapshot (the registration probe).
fn probe_configmap(name: &str) -> ConfigMap {
    ConfigMap {
        metadata: kube::api::ObjectMeta {
            name: Some(name.to_owned()),
            ..Default::default()
        },
        ..Default::default()
    }
}

/// A TrainJob carrying `annotations` (the registration probe).
fn probe_trainjob(name: &str, annotations: serde_json::Value) -> DynamicObject {
    let mut tj = crate::objects::trainjob(name, "no-such-runtime");
    tj["metadata"]["annotations"] = annotations;
    match serde_json::from_value(tj) {
        Ok(o) => o,
        Err(e) => panic!("trainjob json: {e}"),
    }
}
