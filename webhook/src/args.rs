//! Command-line flags (each also an environment variable).

use holdfast_core::mode::Mode;
use holdfast_core::policy::Identities;
use std::{net::SocketAddr, path::PathBuf, time::Duration};

use crate::review::Limits;
use holdfast_serve::ConnectionLimits;

#[derive(clap::Parser, Debug, Clone)]
#[command(
    name = "holdfast-webhook",
    version,
    about = "holdfast's mutating and validating admission webhook"
)]
pub struct Args {
    /// plain or kueue: decides which spec.suspend / spec.active edits are refused.
    #[arg(long, env = "HOLDFAST_MODE", default_value = "plain")]
    pub mode: Mode,
    #[command(flatten)]
    pub log: holdfast_serve::LogArgs,
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
    #[arg(
        long,
        env = "HOLDFAST_TLS_CERT",
        default_value = "/etc/holdfast/tls/tls.crt"
    )]
    pub tls_cert: PathBuf,
    /// TLS private key (PEM).
    #[arg(
        long,
        env = "HOLDFAST_TLS_KEY",
        default_value = "/etc/holdfast/tls/tls.key"
    )]
    pub tls_key: PathBuf,
    /// Identities (user names) allowed to write controller-owned state.
    #[arg(
        long,
        env = "HOLDFAST_CONTROLLER_USERS",
        value_delimiter = ',',
        default_value = "system:serviceaccount:holdfast-system:holdfast-controller"
    )]
    pub controller_users: Vec<String>,
    /// Identities allowed to create snapshot ConfigMaps besides the controller (Trainer's controller).
    #[arg(
        long,
        env = "HOLDFAST_SNAPSHOT_CREATORS",
        value_delimiter = ',',
        default_value = "system:serviceaccount:kubeflow-system:kubeflow-trainer-controller-manager"
    )]
    pub snapshot_creators: Vec<String>,
    /// Identities allowed to delete snapshot ConfigMaps (garbage collector, namespace controller).
    #[arg(
        long,
        env = "HOLDFAST_SNAPSHOT_DELETERS",
        value_delimiter = ',',
        default_value = "system:serviceaccount:kube-system:generic-garbage-collector,system:serviceaccount:kube-system:namespace-controller"
    )]
    pub snapshot_deleters: Vec<String>,
    /// Identities allowed to change a queued TrainJob's spec.suspend in kueue mode (Kueue's controller).
    #[arg(
        long,
        env = "HOLDFAST_KUEUE_USERS",
        value_delimiter = ',',
        default_value = "system:serviceaccount:kueue-system:kueue-controller-manager"
    )]
    pub kueue_users: Vec<String>,
    /// Runtime kinds besides Trainer's TrainingRuntime and ClusterTrainingRuntime, as
    /// `group/plural`, comma-separated: only these are looked up at a TrainJob's admission
    /// (the chart passes `runtimes.extra`).
    #[arg(long, env = "HOLDFAST_EXTRA_RUNTIME_RESOURCES", value_delimiter = ',')]
    pub extra_runtime_resources: Vec<String>,
    /// Largest AdmissionReview body accepted, in bytes (object and oldObject of an UPDATE);
    /// larger ones get 413.
    #[arg(long, env = "HOLDFAST_MAX_BODY_BYTES", default_value_t = Limits::DEFAULT.max_body_bytes)]
    pub max_body_bytes: usize,
    /// Decisions made at once (a permit is taken once the body has been read); more are shed
    /// at once with 503 and Retry-After: 1 (the apiserver retries within the webhook's
    /// timeoutSeconds, then applies its failurePolicy).
    #[arg(long, env = "HOLDFAST_MAX_CONCURRENT", default_value_t = Limits::DEFAULT.max_concurrent)]
    pub max_concurrent: usize,
    /// Longest time for a request body to arrive, in milliseconds; a slower one gets 408 and
    /// its connection is closed. The apiserver sends a review in one write.
    #[arg(
        long,
        env = "HOLDFAST_BODY_READ_TIMEOUT_MS",
        default_value_t = Limits::DEFAULT.body_read_timeout.as_millis() as u64
    )]
    pub body_read_timeout_ms: u64,
    /// Open connections to the admission port, in all; more are closed at accept.
    #[arg(
        long,
        env = "HOLDFAST_MAX_CONNECTIONS",
        default_value_t = ConnectionLimits::DEFAULT.max_connections
    )]
    pub max_connections: usize,
    /// Open connections to the admission port from one source address; more are closed at
    /// accept, so one client (one pod) cannot take them all.
    #[arg(
        long,
        env = "HOLDFAST_MAX_CONNECTIONS_PER_IP",
        default_value_t = ConnectionLimits::DEFAULT.max_connections_per_source
    )]
    pub max_connections_per_ip: usize,
    /// A connection with no request in flight for this long is closed, in milliseconds.
    #[arg(
        long,
        env = "HOLDFAST_IDLE_TIMEOUT_MS",
        default_value_t = ConnectionLimits::DEFAULT.idle_timeout.as_millis() as u64
    )]
    pub idle_timeout_ms: u64,
    /// Require TLS client certificates signed by a CA in this PEM file (re-read when its
    /// contents change): a client without one fails the handshake. Give the apiserver a
    /// client certificate for the webhook in its admission configuration (see the chart's
    /// README).
    #[arg(long, env = "HOLDFAST_CLIENT_CA_FILE")]
    pub client_ca_file: Option<PathBuf>,
    /// Longest time one admission may take, body read included, in milliseconds (keep it
    /// below the webhook configurations' timeoutSeconds).
    #[arg(long, env = "HOLDFAST_REQUEST_TIMEOUT_MS", default_value_t = 4000)]
    pub request_timeout_ms: u64,
    /// Longest time the runtime lookup at TrainJob admission may take, in milliseconds; on
    /// timeout no admitted-runtime-resource-version is recorded.
    #[arg(
        long,
        env = "HOLDFAST_RUNTIME_LOOKUP_TIMEOUT_MS",
        default_value_t = 2000
    )]
    pub runtime_lookup_timeout_ms: u64,
    /// On SIGTERM, how long to go on serving (not ready) before closing the listener, in
    /// milliseconds: the apiserver sends admissions until it sees the endpoint removed.
    #[arg(long, env = "HOLDFAST_SHUTDOWN_DELAY_MS", default_value_t = 5000)]
    pub shutdown_delay_ms: u64,
}

impl Args {
    /// The identities the policy trusts.
    pub fn identities(&self) -> Identities {
        Identities::new(
            &self.controller_users,
            &self.snapshot_creators,
            &self.snapshot_deleters,
            &self.kueue_users,
        )
    }

    /// The runtime kinds the webhook may look up.
    pub fn runtime_resources(&self) -> anyhow::Result<holdfast_core::snapshot::RuntimeResources> {
        holdfast_core::snapshot::RuntimeResources::with_extra(&self.extra_runtime_resources)
            .map_err(anyhow::Error::msg)
    }

    /// The request limits.
    pub fn limits(&self) -> Limits {
        Limits {
            max_body_bytes: self.max_body_bytes,
            max_concurrent: self.max_concurrent.max(1),
            request_timeout: Duration::from_millis(self.request_timeout_ms),
            body_read_timeout: Duration::from_millis(self.body_read_timeout_ms),
            runtime_lookup_timeout: Duration::from_millis(self.runtime_lookup_timeout_ms),
        }
    }

    /// The bounds on connections to the admission port.
    pub fn connection_limits(&self) -> ConnectionLimits {
        ConnectionLimits {
            max_connections: self.max_connections.max(1),
            max_connections_per_source: self.max_connections_per_ip.max(1),
            idle_timeout: Duration::from_millis(self.idle_timeout_ms.max(1)),
            ..ConnectionLimits::DEFAULT
        }
    }
}
