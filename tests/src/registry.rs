//! Tier 3's local OCI registry, which the node's containerd pulls holdfast's image from and
//! helm installs holdfast's chart from, as a user's cluster does from a real registry.
//!
//! It is `crane registry serve` (crane built from go-containerregistry's Go module by
//! `tests/tools/registry/build.sh`, cached outside the tree), run as one of the node's
//! processes: inside the node's network namespace, listening on its loopback `127.0.0.1:P`
//! only, and stopped with the cluster. P is also forwarded from the host's loopback as the
//! same number ([`crate::netns::NetNs::forward_same_port`]), so `127.0.0.1:P/holdfast:TAG`
//! names the same image for the test process's pushes (`crane push`, `helm push`) and for
//! containerd's pulls.
//!
//! Plain HTTP: no packet of it leaves that loopback, and TLS would test nothing of holdfast.
//! containerd is told so explicitly, for that one host, by a `hosts.toml` in the registry
//! configuration directory the node's containerd reads at each pull (`config_path`), as a
//! cluster pulling from a registry of its own is configured.

use crate::control_plane::ControlPlane;
use crate::process::Supervised;
use anyhow::{Context, bail};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;
use std::time::{Duration, Instant};

/// crane, built from its Go module (cached). `HOLDFAST_CRANE` (a path) overrides it.
pub fn crane() -> anyhow::Result<PathBuf> {
    static CACHED: OnceLock<Result<PathBuf, String>> = OnceLock::new();
    CACHED
        .get_or_init(|| {
            if let Some(bin) = std::env::var_os("HOLDFAST_CRANE") {
                return Ok(PathBuf::from(bin));
            }
            let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tools/registry/build.sh");
            // The script prints the binary's path (run_build_script's "directory").
            crate::binaries::run_build_script(&script).map_err(|e| format!("{e:#}"))
        })
        .clone()
        .map_err(anyhow::Error::msg)
}

/// The registry of one running cluster: its `host:port`, the same inside the node's network
/// namespace and on the host's loopback.
#[derive(Clone, Debug)]
pub struct LocalRegistry {
    host: String,
}

impl LocalRegistry {
    /// Start the registry as the process `registry` of `cp` (inside its namespaces), storing
    /// blobs under `cp`'s directory, and write the `hosts.toml` that lets containerd pull from
    /// it over plain HTTP into `hosts_dir` (the node's containerd `config_path`). Returns once
    /// it answers; the caller keeps the process with the cluster's, so it stops with them.
    pub fn start(
        cp: &ControlPlane,
        hosts_dir: &Path,
    ) -> anyhow::Result<(LocalRegistry, Supervised)> {
        let netns = cp
            .netns()
            .context("the local registry runs in the node's network namespace")?;
        let port = netns.forward_same_port()?;
        let host = format!("127.0.0.1:{port}");
        let storage = cp.dir().join("registry");
        std::fs::create_dir_all(&storage)?;
        let crane = crane()?;
        let mut process = cp.spawn(
            "registry",
            &crane,
            vec![
                "registry".into(),
                "serve".into(),
                "--address".into(),
                host.clone(),
                "--disk".into(),
                storage.display().to_string(),
            ],
        )?;
        let dir = hosts_dir.join(&host);
        std::fs::create_dir_all(&dir)?;
        std::fs::write(
            dir.join("hosts.toml"),
            format!(
                "# holdfast's tier-3 registry: plain HTTP on the node's loopback.\n\
                 server = \"http://{host}\"\n\n\
                 [host.\"http://{host}\"]\n  capabilities = [\"pull\", \"resolve\"]\n"
            ),
        )?;
        let registry = LocalRegistry { host };
        let start = Instant::now();
        loop {
            if !process.running() {
                bail!("the registry exited:\n{}", process.log_tail(20));
            }
            if registry.crane(&["catalog", &registry.host]).is_ok() {
                return Ok((registry, process));
            }
            if start.elapsed() > Duration::from_secs(30) {
                bail!(
                    "the registry is not answering on {} after 30s:\n{}",
                    registry.host,
                    process.log_tail(20)
                );
            }
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// `127.0.0.1:P`.
    pub fn host(&self) -> &str {
        &self.host
    }

    /// Push the OCI image archive `archive` (a tarred OCI image layout of one image) as
    /// `<host>/<repository>:<tag>`; returns that reference.
    pub fn push_image(
        &self,
        archive: &Path,
        repository: &str,
        tag: &str,
    ) -> anyhow::Result<String> {
        let layout = tempfile::tempdir()?;
        let out = Command::new("tar")
            .arg("-xf")
            .arg(archive)
            .arg("-C")
            .arg(layout.path())
            .output()?;
        if !out.status.success() {
            bail!(
                "tar -xf {}: {}",
                archive.display(),
                String::from_utf8_lossy(&out.stderr)
            );
        }
        let reference = format!("{}/{repository}:{tag}", self.host);
        let dir = layout.path().display().to_string();
        self.crane(&["push", &dir, &reference])?;
        Ok(reference)
    }

    /// `helm push` of the chart package `package` to `oci://<host>/charts`; returns that
    /// repository (the chart is `<it>/<chart name>`).
    pub fn push_chart(&self, helm: &crate::helm::Helm, package: &Path) -> anyhow::Result<String> {
        let repo = format!("oci://{}/charts", self.host);
        helm.run(&[
            "push".into(),
            package.display().to_string(),
            repo.clone(),
            "--plain-http".into(),
        ])?;
        Ok(repo)
    }

    /// crane with `args`, over plain HTTP; its stdout, or an error with its stderr.
    fn crane(&self, args: &[&str]) -> anyhow::Result<String> {
        let out = Command::new(crane()?)
            .args(args)
            .arg("--insecure")
            .output()
            .context("running crane")?;
        if !out.status.success() {
            bail!(
                "crane {}: {}",
                args.join(" "),
                String::from_utf8_lossy(&out.stderr)
            );
        }
        Ok(String::from_utf8_lossy(&out.stdout).into_owned())
    }
}
