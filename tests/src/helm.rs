//! helm, built from its Go module by `tests/cluster/helm/build.sh` (cached outside the tree,
//! like the control plane), and the chart rendered with it.

use anyhow::{Context, bail};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;

/// The helm binary.
#[derive(Clone, Debug)]
pub struct Helm {
    pub bin: PathBuf,
    /// Its major version: 4, or 3.
    pub major: u8,
}

/// The chart in the tree.
pub fn chart_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("..")
        .join("charts")
        .join("holdfast")
}

/// Build (or find cached) helm: Helm 4, or Helm 3 where `HOLDFAST_HELM_MAJOR=3` (the
/// chart suite's second pass). `HOLDFAST_HELM` (a path to a helm binary, of that major
/// version) overrides the build.
pub fn ensure() -> anyhow::Result<Helm> {
    static CACHED: OnceLock<Result<Helm, String>> = OnceLock::new();
    CACHED
        .get_or_init(|| build().map_err(|e| format!("{e:#}")))
        .clone()
        .map_err(anyhow::Error::msg)
}

/// The major version the tests run helm at: `HOLDFAST_HELM_MAJOR` (3 or 4), 4 by default.
pub fn major() -> anyhow::Result<u8> {
    match std::env::var("HOLDFAST_HELM_MAJOR").as_deref() {
        Err(_) | Ok("4") => Ok(4),
        Ok("3") => Ok(3),
        Ok(other) => bail!("HOLDFAST_HELM_MAJOR={other}: helm's major version is 3 or 4"),
    }
}

fn build() -> anyhow::Result<Helm> {
    let major = major()?;
    if let Some(bin) = std::env::var_os("HOLDFAST_HELM") {
        return Ok(Helm {
            bin: bin.into(),
            major,
        });
    }
    let script = crate::binaries::cluster_module_dir()
        .join("helm")
        .join("build.sh");
    let dir = crate::binaries::run_build_script_with(&script, &[&major.to_string()])?;
    let bin = dir.join("bin").join("helm");
    if !bin.is_file() {
        bail!("{} did not produce {}", script.display(), bin.display());
    }
    Ok(Helm { bin, major })
}

/// One way to install the chart: a release name, a namespace and `--set` values.
#[derive(Clone, Debug, Default)]
pub struct Install {
    pub release: String,
    pub namespace: String,
    /// `key=value` pairs for `--set`.
    pub set: Vec<String>,
    /// `key=path` pairs for `--set-file`.
    pub set_file: Vec<String>,
}

impl Install {
    pub fn new(release: &str, namespace: &str) -> Self {
        Install {
            release: release.into(),
            namespace: namespace.into(),
            ..Default::default()
        }
    }

    pub fn set(mut self, kv: impl Into<String>) -> Self {
        self.set.push(kv.into());
        self
    }

    pub fn set_file(mut self, kv: impl Into<String>) -> Self {
        self.set_file.push(kv.into());
        self
    }

    fn value_args(&self) -> Vec<String> {
        let mut args = Vec::new();
        for s in &self.set {
            args.push("--set".into());
            args.push(s.clone());
        }
        for s in &self.set_file {
            args.push("--set-file".into());
            args.push(s.clone());
        }
        args
    }
}

impl Helm {
    /// Run helm with `args`; its stdout, or an error carrying stderr.
    pub fn run(&self, args: &[String]) -> anyhow::Result<String> {
        let out = Command::new(&self.bin)
            .args(args)
            // No user configuration, repositories or plugins leak in.
            .env(
                "HELM_CONFIG_HOME",
                std::env::temp_dir().join("holdfast-helm-config"),
            )
            .env(
                "HELM_CACHE_HOME",
                std::env::temp_dir().join("holdfast-helm-cache"),
            )
            .env(
                "HELM_DATA_HOME",
                std::env::temp_dir().join("holdfast-helm-data"),
            )
            .output()
            .with_context(|| format!("running {}", self.bin.display()))?;
        let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
        if !out.status.success() {
            bail!(
                "helm {} failed ({}):\n{}{}",
                args.join(" "),
                out.status,
                String::from_utf8_lossy(&out.stderr),
                stdout
            );
        }
        Ok(stdout)
    }

    /// A real `helm install` of the chart with these values, into the cluster of
    /// `kubeconfig` (a path).
    pub fn install(&self, install: &Install, kubeconfig: &str) -> anyhow::Result<String> {
        let mut args = vec![
            "install".to_string(),
            install.release.clone(),
            chart_dir().display().to_string(),
            "--namespace".into(),
            install.namespace.clone(),
            "--kubeconfig".into(),
            kubeconfig.into(),
        ];
        args.extend(install.value_args());
        self.run(&args)
    }

    /// `helm uninstall` of `install`'s release from the cluster of `kubeconfig` (a path).
    pub fn uninstall(&self, install: &Install, kubeconfig: &str) -> anyhow::Result<String> {
        self.run(&[
            "uninstall".to_string(),
            install.release.clone(),
            "--namespace".into(),
            install.namespace.clone(),
            "--kubeconfig".into(),
            kubeconfig.into(),
        ])
    }

    /// `helm lint --strict` of the chart with these values.
    pub fn lint(&self, install: &Install) -> anyhow::Result<String> {
        let mut args = vec![
            "lint".to_string(),
            "--strict".into(),
            "--namespace".into(),
            install.namespace.clone(),
            chart_dir().display().to_string(),
        ];
        args.extend(install.value_args());
        self.run(&args)
    }

    /// `helm template` of the chart: the manifests `helm install` applies, as YAML (not the
    /// `helm test` hooks, which only `helm test` creates: [`Helm::template_with_tests`]).
    pub fn template(&self, install: &Install) -> anyhow::Result<String> {
        let mut args = self.template_args(install);
        args.push("--skip-tests".into());
        self.run(&args)
    }

    /// `helm template` with the `helm test` hooks.
    pub fn template_with_tests(&self, install: &Install) -> anyhow::Result<String> {
        self.run(&self.template_args(install))
    }

    fn template_args(&self, install: &Install) -> Vec<String> {
        let mut args = vec![
            "template".to_string(),
            install.release.clone(),
            chart_dir().display().to_string(),
            "--namespace".into(),
            install.namespace.clone(),
        ];
        args.extend(install.value_args());
        args
    }

    /// `helm template`, parsed into one JSON value per object.
    pub fn render(&self, install: &Install) -> anyhow::Result<Vec<serde_json::Value>> {
        documents(&self.template(install)?)
    }
}

/// The objects of a multi-document YAML text (empty documents dropped).
pub fn documents(yaml: &str) -> anyhow::Result<Vec<serde_json::Value>> {
    let docs: Vec<serde_json::Value> =
        serde_saphyr::from_multiple(yaml).context("parsing rendered manifests")?;
    Ok(docs.into_iter().filter(|d| d.is_object()).collect())
}

/// `kind/name` of a rendered object.
pub fn id(doc: &serde_json::Value) -> String {
    format!(
        "{}/{}",
        doc["kind"].as_str().unwrap_or("?"),
        doc["metadata"]["name"].as_str().unwrap_or("?")
    )
}

/// The rendered objects of a kind.
pub fn of_kind<'a>(docs: &'a [serde_json::Value], kind: &str) -> Vec<&'a serde_json::Value> {
    docs.iter().filter(|d| d["kind"] == kind).collect()
}
