//! Command-line flags (each also an environment variable).

use holdfast_core::mode::Mode;
use std::{net::SocketAddr, path::PathBuf};

#[derive(clap::Parser, Debug, Clone)]
#[command(
    name = "holdfast-controller",
    version,
    about = "holdfast's snapshot reconciler, hold executor and hold API"
)]
pub struct Args {
    /// plain: holds are spec.suspend on the TrainJob; kueue: holds deactivate the Kueue Workload.
    #[arg(long, env = "HOLDFAST_MODE", default_value = "plain")]
    pub mode: Mode,
    #[command(flatten)]
    pub log: holdfast_serve::LogArgs,
    /// Path to a kubeconfig; in-cluster configuration when absent.
    #[arg(long, env = "KUBECONFIG")]
    pub kubeconfig: Option<PathBuf>,
    /// Address of the hold API (HTTPS).
    #[arg(long, env = "HOLDFAST_API_ADDR", default_value = "0.0.0.0:8443")]
    pub api_addr: SocketAddr,
    /// Address of the admin endpoints: /livez, /readyz, /metrics (plain HTTP).
    #[arg(long, env = "HOLDFAST_ADMIN_ADDR", default_value = "0.0.0.0:9090")]
    pub admin_addr: SocketAddr,
    /// TLS certificate (PEM chain) of the hold API; re-read when it changes.
    #[arg(long, env = "HOLDFAST_TLS_CERT")]
    pub tls_cert: Option<PathBuf>,
    /// TLS private key (PEM) of the hold API.
    #[arg(long, env = "HOLDFAST_TLS_KEY")]
    pub tls_key: Option<PathBuf>,
    /// The apiserver's --request-timeout, in seconds; CallBound is this plus a margin.
    #[arg(long, env = "HOLDFAST_APISERVER_REQUEST_TIMEOUT", default_value_t = 60)]
    pub apiserver_request_timeout_secs: u64,
    /// Namespace of the leader-election Lease.
    #[arg(
        long,
        env = "HOLDFAST_LEASE_NAMESPACE",
        default_value = "holdfast-system"
    )]
    pub lease_namespace: String,
    /// Identity of this replica in the Lease (defaults to the hostname).
    #[arg(long, env = "HOLDFAST_IDENTITY")]
    pub identity: Option<String>,
    /// Webhook certificate management (`--cert-*`).
    #[command(flatten)]
    pub certs: crate::certs::CertArgs,
    /// Name of the leader-election Lease (in --lease-namespace).
    #[arg(
        long,
        env = "HOLDFAST_LEASE_NAME",
        default_value = "holdfast-controller"
    )]
    pub lease_name: String,
    /// Seconds a standby waits after the Lease last changed before taking it over; the
    /// leader renews every third of it and gives up after two thirds without a renewal.
    #[arg(long, env = "HOLDFAST_LEASE_DURATION_SECS", default_value_t = 15)]
    pub lease_duration_secs: u64,
    /// Watch TrainJobs (and their snapshots) in this namespace only; all when absent.
    #[arg(long, env = "HOLDFAST_WATCH_NAMESPACE")]
    pub watch_namespace: Option<String>,
    /// At most this many TrainJobs are snapshotted at once.
    #[arg(long, env = "HOLDFAST_SNAPSHOT_CONCURRENCY", default_value_t = 8)]
    pub snapshot_concurrency: u16,
    /// Hold calls act as though their deadline were this many milliseconds earlier, so that
    /// every request reaches the apiserver before the deadline, not merely leaves before it.
    #[arg(long, env = "HOLDFAST_HOLD_TRANSIT_MARGIN_MS", default_value_t = 50)]
    pub hold_transit_margin_ms: u64,
    /// Runtime kinds besides Trainer's TrainingRuntime and ClusterTrainingRuntime, as
    /// `group/plural` (e.g. `slurm.example.com/slurmruntimes`), comma-separated: only these
    /// are read, watched and snapshotted (the chart passes `runtimes.extra`).
    #[arg(long, env = "HOLDFAST_EXTRA_RUNTIME_RESOURCES", value_delimiter = ',')]
    pub extra_runtime_resources: Vec<String>,
    /// Seconds between preflight probes (the capability of each call is probed again this
    /// often; a call trusts a probe at most twice this old, and probes itself otherwise).
    #[arg(long, env = "HOLDFAST_PREFLIGHT_INTERVAL_SECS", default_value_t = 30)]
    pub preflight_interval_secs: u64,
}
