//! holdfast's own binaries as processes, for the tests that need the real thing (fault
//! tests, the chart's RBAC test, the demo): where they are, and how to start and probe the
//! controller.

use crate::process::Supervised;
use crate::{ControlPlane, Identity};
use std::path::{Path, PathBuf};
use std::time::Duration;

/// A binary of this workspace, built by `cargo build` (debug); panics saying how to build it.
pub fn binary(name: &str) -> PathBuf {
    let bin = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("..")
        .join("target")
        .join("debug")
        .join(name);
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
    match tokio::task::spawn_blocking(ControlPlane::start).await {
        Ok(Ok(cp)) => cp,
        Ok(Err(e)) => panic!("start a control plane: {e:#}"),
        Err(e) => panic!("start a control plane: {e}"),
    }
}

/// The controller binary in plain mode as holdfast's controller identity, without TLS (no
/// hold API), its Lease and its watches in `ns`, its admin port (`/readyz`) at `admin_port`;
/// `extra` flags appended.
pub fn start_plain_controller(
    cp: &ControlPlane,
    ns: &str,
    name: &str,
    admin_port: u16,
    extra: &[&str],
) -> Supervised {
    let api_port = crate::control_plane::free_port().expect("port");
    let mut args = vec![
        "--mode=plain".to_string(),
        format!(
            "--kubeconfig={}",
            cp.kubeconfig(Identity::Controller).display()
        ),
        format!("--api-addr=127.0.0.1:{api_port}"),
        format!("--admin-addr=127.0.0.1:{admin_port}"),
        format!("--identity={name}-{}", rand::random::<u32>()),
        format!("--lease-namespace={ns}"),
        format!("--watch-namespace={ns}"),
    ];
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
