//! Where the control-plane binaries are: built once by `tests/cluster/build.sh`, cached by
//! version outside the tree.

use anyhow::{Context, bail};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;

/// The cached build: `bin/{etcd,kube-apiserver,kube-controller-manager}` and `crds/*/`.
#[derive(Clone, Debug)]
pub struct Binaries {
    pub dir: PathBuf,
}

impl Binaries {
    pub fn bin(&self, name: &str) -> PathBuf {
        self.dir.join("bin").join(name)
    }
    pub fn crd_dir(&self) -> PathBuf {
        self.dir.join("crds")
    }
}

/// The tree's `tests/cluster` directory.
pub fn cluster_module_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("cluster")
}

/// Run one of the `build.sh` scripts (they build once, cache outside the tree, and print
/// the cache directory) and return that directory.
pub fn run_build_script(script: &Path) -> anyhow::Result<PathBuf> {
    run_build_script_with(script, &[])
}

/// [`run_build_script`] with `args` passed to the script.
pub fn run_build_script_with(script: &Path, args: &[&str]) -> anyhow::Result<PathBuf> {
    let out = Command::new("bash")
        .arg(script)
        .args(args)
        .stderr(std::process::Stdio::inherit())
        .output()
        .with_context(|| format!("running {}", script.display()))?;
    if !out.status.success() {
        bail!("{} failed with {}", script.display(), out.status);
    }
    let dir = String::from_utf8(out.stdout).context("build.sh printed a non-UTF-8 path")?;
    Ok(PathBuf::from(dir.trim()))
}

/// Build (or find cached) binaries. `HOLDFAST_CLUSTER_DIR` overrides the lookup entirely.
pub fn ensure() -> anyhow::Result<Binaries> {
    static CACHED: OnceLock<Result<Binaries, String>> = OnceLock::new();
    CACHED
        .get_or_init(|| build().map_err(|e| format!("{e:#}")))
        .clone()
        .map_err(anyhow::Error::msg)
}

fn build() -> anyhow::Result<Binaries> {
    if let Some(dir) = std::env::var_os("HOLDFAST_CLUSTER_DIR") {
        return Ok(Binaries { dir: dir.into() });
    }
    let script = cluster_module_dir().join("build.sh");
    let dir = run_build_script(&script)?;
    for b in ["etcd", "kube-apiserver", "kube-controller-manager", "kueue"] {
        if !dir.join("bin").join(b).is_file() {
            bail!(
                "{} did not produce {b} in {}",
                script.display(),
                dir.display()
            );
        }
    }
    Ok(Binaries { dir })
}
