//! The kube client of both binaries, from the same flag.

use anyhow::Context;
use kube::config::{KubeConfigOptions, Kubeconfig};
use std::path::PathBuf;

/// The client flags, flattened into each binary's `Args`.
#[derive(clap::Args, Clone, Debug, Default, PartialEq, Eq)]
pub struct ClientArgs {
    /// Path to a kubeconfig; when absent, the in-cluster configuration (or, outside a
    /// cluster, the usual kubeconfig lookup).
    #[arg(long, env = "KUBECONFIG")]
    pub kubeconfig: Option<PathBuf>,
}

impl ClientArgs {
    /// The client configuration: the kubeconfig file if given, else inferred.
    pub async fn config(&self) -> anyhow::Result<kube::Config> {
        match &self.kubeconfig {
            Some(path) => {
                let kubeconfig = Kubeconfig::read_from(path)
                    .with_context(|| format!("reading kubeconfig {}", path.display()))?;
                kube::Config::from_custom_kubeconfig(kubeconfig, &KubeConfigOptions::default())
                    .await
                    .with_context(|| format!("loading kubeconfig {}", path.display()))
            }
            None => kube::Config::infer()
                .await
                .context("inferring the kube client configuration"),
        }
    }

    /// A client of [`config`](Self::config).
    pub async fn client(&self) -> anyhow::Result<kube::Client> {
        Ok(kube::Client::try_from(self.config().await?)?)
    }
}
