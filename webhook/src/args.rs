//! Command-line flags (each also an environment variable).

use holdfast_core::mode::Mode;
use std::{net::SocketAddr, path::PathBuf};

#[derive(clap::Parser, Debug, Clone)]
#[command(name = "holdfast-webhook", version, about = "holdfast's mutating and validating admission webhook")]
pub struct Args {
    /// plain or kueue: decides which spec.suspend / spec.active edits are refused.
    #[arg(long, env = "HOLDFAST_MODE", default_value = "plain")]
    pub mode: Mode,
    /// Path to a kubeconfig (used to read runtimes at admission); in-cluster when absent.
    #[arg(long, env = "KUBECONFIG")]
    pub kubeconfig: Option<PathBuf>,
    /// Address of the admission endpoints /mutate and /validate (HTTPS only).
    #[arg(long, env = "HOLDFAST_WEBHOOK_ADDR", default_value = "0.0.0.0:9443")]
    pub addr: SocketAddr,
    /// Address of the admin endpoints: /livez, /readyz, /metrics (plain HTTP).
    #[arg(long, env = "HOLDFAST_ADMIN_ADDR", default_value = "0.0.0.0:9091")]
    pub admin_addr: SocketAddr,
    /// TLS certificate (PEM chain); re-read when the file's contents change.
    #[arg(long, env = "HOLDFAST_TLS_CERT", default_value = "/etc/holdfast/tls/tls.crt")]
    pub tls_cert: PathBuf,
    /// TLS private key (PEM).
    #[arg(long, env = "HOLDFAST_TLS_KEY", default_value = "/etc/holdfast/tls/tls.key")]
    pub tls_key: PathBuf,
    /// Identities (user names) allowed to write controller-owned state.
    #[arg(long, env = "HOLDFAST_CONTROLLER_USERS", value_delimiter = ',', default_value = "system:serviceaccount:holdfast-system:holdfast-controller")]
    pub controller_users: Vec<String>,
    /// Identities allowed to create snapshot ConfigMaps besides the controller (Trainer's controller).
    #[arg(long, env = "HOLDFAST_SNAPSHOT_CREATORS", value_delimiter = ',', default_value = "system:serviceaccount:kubeflow-system:kubeflow-trainer-controller-manager")]
    pub snapshot_creators: Vec<String>,
    /// Identities allowed to delete snapshot ConfigMaps (garbage collector, namespace controller).
    #[arg(long, env = "HOLDFAST_SNAPSHOT_DELETERS", value_delimiter = ',', default_value = "system:serviceaccount:kube-system:generic-garbage-collector,system:serviceaccount:kube-system:namespace-controller")]
    pub snapshot_deleters: Vec<String>,
    /// Identities allowed to change a TrainJob's spec.suspend in kueue mode (Kueue's controller).
    #[arg(long, env = "HOLDFAST_KUEUE_USERS", value_delimiter = ',', default_value = "system:serviceaccount:kueue-system:kueue-controller-manager")]
    pub kueue_users: Vec<String>,
}
