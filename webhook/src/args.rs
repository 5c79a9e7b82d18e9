//! Command-line flags (each also an environment variable), and what they make: the
//! identities, limits and connection bounds the server is given. With `lib.rs`, the only
//! module that knows the command line.

use crate::review::Limits;
use crate::server::{ConnectionOptions, ServeOptions};
use holdfast_core::duration;
use holdfast_core::mode::Mode;
use holdfast_core::policy::Identities;
use holdfast_serve::{AdminArgs, ClientArgs, ConnectionLimits, LogArgs, TlsArgs};
use std::{net::SocketAddr, path::PathBuf, time::Duration};

#[derive(clap::Parser, Debug, Clone)]
#[command(
    name = "holdfast-webhook",
    version,
    about = "holdfast's mutating and validating admission webhook",
    // The shared flags, with the webhook's own defaults: its admin port, and the certificate
    // where the chart mounts it.
    mut_arg("admin_addr", |a| a.default_value("0.0.0.0:9091")),
    mut_arg("tls_cert", |a| a.default_value("/etc/holdfast/tls/tls.crt")),
    mut_arg("tls_key", |a| a.default_value("/etc/holdfast/tls/tls.key")),
)]
pub struct Args {
    /// plain or kueue: decides which spec.suspend / spec.active edits are refused.
    #[arg(long, env = "HOLDFAST_MODE", default_value = "plain")]
    pub mode: Mode,
    #[command(flatten)]
    pub log: LogArgs,
    /// The client reads runtimes and Workloads at admission.
    #[command(flatten)]
    pub client: ClientArgs,
    /// Address of the admission endpoints /mutate and /validate (HTTPS only).
    #[arg(long, env = "HOLDFAST_WEBHOOK_ADDR", default_value = "0.0.0.0:9443")]
    pub addr: SocketAddr,
    #[command(flatten)]
    pub admin: AdminArgs,
    #[command(flatten)]
    pub tls: TlsArgs,
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
    /// Longest time for a request body to arrive (e.g. 2s); a slower one gets 408 and its
    /// connection is closed. The apiserver sends a review in one write.
    #[arg(long, env = "HOLDFAST_BODY_READ_TIMEOUT", default_value = "2s", value_parser = duration::parse)]
    pub body_read_timeout: Duration,
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
    /// A connection with no request in flight for this long (e.g. 60s) is closed.
    #[arg(long, env = "HOLDFAST_IDLE_TIMEOUT", default_value = "60s", value_parser = duration::parse)]
    pub idle_timeout: Duration,
    /// Require TLS client certificates signed by a CA in this PEM file (re-read when its
    /// contents change): a client without one fails the handshake. Give the apiserver a
    /// client certificate for the webhook in its admission configuration (see the chart's
    /// README).
    #[arg(long, env = "HOLDFAST_CLIENT_CA_FILE")]
    pub client_ca_file: Option<PathBuf>,
    /// Longest time one admission may take, body read included (e.g. 4s; keep it below the
    /// webhook configurations' timeoutSeconds).
    #[arg(long, env = "HOLDFAST_REQUEST_TIMEOUT", default_value = "4s", value_parser = duration::parse)]
    pub request_timeout: Duration,
    /// Longest time the runtime lookup at TrainJob admission may take (e.g. 2s); on timeout
    /// no admitted-runtime-resource-version is recorded.
    #[arg(long, env = "HOLDFAST_RUNTIME_LOOKUP_TIMEOUT", default_value = "2s", value_parser = duration::parse)]
    pub runtime_lookup_timeout: Duration,
    /// Lookups made at once (the runtime read at a TrainJob CREATE, the Workloads of a
    /// TrainJob being unsuspended), outside the decision permits; more wait their turn within
    /// --runtime-lookup-timeout. A flood of reviews that need a lookup delays only lookups.
    #[arg(long, env = "HOLDFAST_MAX_LOOKUPS", default_value_t = Limits::DEFAULT.max_lookups)]
    pub max_lookups: usize,
    /// On SIGTERM, how long to go on serving (not ready) before closing the listener (e.g.
    /// 5s): the apiserver sends admissions until it sees the endpoint removed.
    #[arg(long, env = "HOLDFAST_SHUTDOWN_DELAY", default_value = "5s", value_parser = duration::parse)]
    pub shutdown_delay: Duration,
}

impl Args {
    /// The identities the policy trusts; refused when a user is listed both as holdfast's
    /// controller and as Kueue ([`Identities::controller_and_kueue`]).
    pub fn identities(&self) -> anyhow::Result<Identities> {
        let who = Identities::new(
            &self.controller_users,
            &self.snapshot_creators,
            &self.snapshot_deleters,
            &self.kueue_users,
        );
        let both = who.controller_and_kueue();
        if !both.is_empty() {
            anyhow::bail!(
                "{} listed both in --controller-users and in --kueue-users (HOLDFAST_CONTROLLER_USERS, HOLDFAST_KUEUE_USERS): holdfast's controller and Kueue must be different identities, or the rules that keep a held or gated TrainJob suspended would let one of them through",
                both.join(", ")
            );
        }
        Ok(who)
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
            request_timeout: self.request_timeout,
            body_read_timeout: self.body_read_timeout,
            runtime_lookup_timeout: self.runtime_lookup_timeout,
            max_lookups: self.max_lookups.max(1),
        }
    }

    /// Where to listen, and the serving certificate.
    pub fn serve_options(&self) -> anyhow::Result<ServeOptions> {
        Ok(ServeOptions {
            addr: self.addr,
            admin_addr: self.admin.admin_addr,
            cert: self
                .tls
                .files()
                .ok_or_else(|| anyhow::anyhow!("the webhook needs --tls-cert and --tls-key"))?,
        })
    }

    /// The bounds on connections to the admission port, and client certificates.
    pub fn connection_options(&self) -> ConnectionOptions {
        ConnectionOptions {
            limits: ConnectionLimits {
                max_connections: self.max_connections.max(1),
                max_connections_per_source: self.max_connections_per_ip.max(1),
                idle_timeout: self.idle_timeout.max(Duration::from_millis(1)),
                ..ConnectionLimits::DEFAULT
            },
            client_ca: self.client_ca_file.clone(),
            admin_limits: self.admin.limits(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    fn parse(args: &[&str]) -> Args {
        let argv = std::iter::once("holdfast-webhook").chain(args.iter().copied());
        Args::try_parse_from(argv).unwrap_or_else(|e| panic!("{args:?}: {e}"))
    }

    #[test]
    fn defaults_are_the_documented_limits_and_paths() {
        let args = parse(&[]);
        assert_eq!(args.limits(), Limits::DEFAULT);
        assert_eq!(args.shutdown_delay, Duration::from_secs(5));
        let connections = args.connection_options();
        assert_eq!(connections.limits, ConnectionLimits::DEFAULT);
        assert_eq!(connections.client_ca, None);
        let serve = args.serve_options().expect("serve options");
        assert_eq!(serve.admin_addr.to_string(), "0.0.0.0:9091");
        assert_eq!(serve.addr.to_string(), "0.0.0.0:9443");
        assert_eq!(
            serve.cert.cert,
            std::path::Path::new("/etc/holdfast/tls/tls.crt")
        );
        assert_eq!(
            serve.cert.key,
            std::path::Path::new("/etc/holdfast/tls/tls.key")
        );
    }

    #[test]
    fn a_user_listed_as_controller_and_as_kueue_is_refused_at_start() {
        let apart = parse(&["--controller-users=c", "--kueue-users=k"]);
        assert!(apart.identities().is_ok());
        let both = parse(&["--controller-users=c,k", "--kueue-users=k"]);
        let err = both.identities().expect_err("k is both");
        assert!(err.to_string().starts_with("k listed both"), "{err}");
    }

    #[test]
    fn durations_are_one_format() {
        let args = parse(&[
            "--request-timeout=800ms",
            "--body-read-timeout=1s",
            "--runtime-lookup-timeout=1500ms",
            "--idle-timeout=0s",
            "--shutdown-delay=0s",
        ]);
        let limits = args.limits();
        assert_eq!(limits.request_timeout, Duration::from_millis(800));
        assert_eq!(limits.body_read_timeout, Duration::from_secs(1));
        assert_eq!(limits.runtime_lookup_timeout, Duration::from_millis(1500));
        assert_eq!(
            args.connection_options().limits.idle_timeout,
            Duration::from_millis(1)
        );
        assert_eq!(args.shutdown_delay, Duration::ZERO);
        let err = Args::try_parse_from(["holdfast-webhook", "--request-timeout=4000"])
            .expect_err("a bare number");
        assert!(err.to_string().contains("is not a duration"), "{err}");
    }
}
