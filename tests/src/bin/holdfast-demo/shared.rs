//! What both walks of the demo use: the step headings, holdfast's CLI, and the binaries'
//! directory.

use anyhow::{Context, bail};
use k8s_openapi::api::core::v1::ConfigMap;
use std::path::PathBuf;
use std::process::Command;

/// A step of the walk, as a heading.
pub fn step(text: &str) {
    println!("\n==> {text}");
}

/// holdfast's CLI (`holdfast`), run as the admin against one hold API.
pub struct HoldCli {
    pub bin: PathBuf,
    pub server: String,
    pub ca_file: PathBuf,
    pub kubeconfig: PathBuf,
}

impl HoldCli {
    /// Run the CLI; print the command and its output, and return the output.
    pub fn run(&self, args: &[&str]) -> anyhow::Result<String> {
        println!("    $ holdfast {}", args.join(" "));
        let text = self.quiet(args)?;
        for line in text.lines() {
            println!("      {line}");
        }
        Ok(text)
    }

    /// Run the CLI; return its output (stdout, then stderr).
    pub fn quiet(&self, args: &[&str]) -> anyhow::Result<String> {
        let out = Command::new(&self.bin)
            .args(args)
            .env("HOLDFAST_SERVER", &self.server)
            .env("HOLDFAST_CA_FILE", &self.ca_file)
            .env("KUBECONFIG", &self.kubeconfig)
            .output()
            .with_context(|| format!("running {}", self.bin.display()))?;
        Ok(format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        ))
    }

    /// The environment that points the CLI at this hold API, as shell lines.
    pub fn exports(&self) -> String {
        format!(
            "  export KUBECONFIG={}\n  export HOLDFAST_SERVER={}\n  export HOLDFAST_CA_FILE={}",
            self.kubeconfig.display(),
            self.server,
            self.ca_file.display()
        )
    }
}

/// The directory of this binary, where `tests/demo.sh` built the CLI and holdfast's binaries.
pub fn bin_dir(needs: &[&str]) -> anyhow::Result<PathBuf> {
    let dir = std::env::current_exe()?
        .parent()
        .context("the demo binary has no directory")?
        .to_owned();
    for b in needs {
        if !dir.join(b).is_file() {
            bail!(
                "{} is missing: run tests/demo.sh (it builds the binaries first)",
                dir.join(b).display()
            );
        }
    }
    Ok(dir)
}

/// A snapshot ConfigMap's `data.runtime` (the runtime as YAML), or nothing.
pub fn snapshot_runtime(cm: &ConfigMap) -> String {
    cm.data
        .as_ref()
        .and_then(|d| d.get("runtime"))
        .cloned()
        .unwrap_or_default()
}
