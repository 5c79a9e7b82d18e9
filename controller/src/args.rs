//! Command-line flags (each also an environment variable), and the configuration each part
//! gets from them ([`Args::configs`]). With the wiring, the only module that knows the
//! command line: every part is given its own configuration, never the flags.

use crate::api::ApiLimits;
use crate::hold::{ExecutorConfig, PolicyProbe};
use crate::leader::{self, LeaseConfig};
use crate::webhook_certs::{CertConfig, CertsError, ServingSecret};
use crate::{execution, readmission, snapshot};
use holdfast_certs::RotationPolicy;
use holdfast_core::duration;
use holdfast_core::mode::Mode;
use holdfast_core::snapshot::RuntimeResources;
use holdfast_serve::{AdminArgs, Admission, ClientArgs, ConnectionLimits, LogArgs, TlsArgs};
use std::net::SocketAddr;
use std::time::Duration;

#[derive(clap::Parser, Debug, Clone)]
#[command(
    name = "holdfast-controller",
    version,
    about = "holdfast's snapshot reconciler, hold executor and hold API",
    // The shared TLS flags serve the hold API here; say so in --help (doc comments on a
    // flattened field do not reach it).
    mut_arg("tls_cert", |a| a.help("TLS certificate (PEM chain) of the hold API; re-read when it changes. Without both --tls-cert and --tls-key the hold API is not served")),
    mut_arg("tls_key", |a| a.help("TLS private key (PEM) of the hold API")),
)]
pub struct Args {
    /// plain: holds are spec.suspend on the TrainJob; kueue: holds deactivate the Kueue Workload.
    #[arg(long, env = "HOLDFAST_MODE", default_value = "plain")]
    pub mode: Mode,
    #[command(flatten)]
    pub log: LogArgs,
    #[command(flatten)]
    pub client: ClientArgs,
    /// Address of the hold API (HTTPS).
    #[arg(long, env = "HOLDFAST_API_ADDR", default_value = "0.0.0.0:8443")]
    pub api_addr: SocketAddr,
    #[command(flatten)]
    pub admin: AdminArgs,
    #[command(flatten)]
    pub tls: TlsArgs,
    /// The hold API's bounds and token audiences (`--api-*`, `--token-audiences`).
    #[command(flatten)]
    pub hold_api: HoldApiArgs,
    /// The apiserver's --request-timeout (e.g. 60s); CallBound is this plus a margin.
    #[arg(long, env = "HOLDFAST_APISERVER_REQUEST_TIMEOUT", default_value = "60s", value_parser = duration::parse)]
    pub apiserver_request_timeout: Duration,
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
    pub certs: CertArgs,
    /// Name of the leader-election Lease (in --lease-namespace).
    #[arg(
        long,
        env = "HOLDFAST_LEASE_NAME",
        default_value = "holdfast-controller"
    )]
    pub lease_name: String,
    /// Name of the ConfigMap (in --lease-namespace) where the hold API records fenced nodes.
    #[arg(
        long,
        env = "HOLDFAST_FENCES_CONFIGMAP",
        default_value = "holdfast-fences"
    )]
    pub fences_configmap: String,
    /// holdfast's webhook configurations (validating and mutating, one name) to arm: nothing
    /// is served or written until its webhook has answered the probe through the apiserver
    /// and their protected entries fail closed (`crate::arming`). Unset: not armed here.
    #[arg(long, env = "HOLDFAST_ARM_WEBHOOK_CONFIGURATION")]
    pub arm_webhook_configuration: Option<String>,
    /// How long a standby waits after the Lease last changed before taking it over (at
    /// least 3s); the leader renews every third of it and gives up after two thirds without
    /// a renewal.
    #[arg(long, env = "HOLDFAST_LEASE_DURATION", default_value = "15s", value_parser = duration::parse)]
    pub lease_duration: Duration,
    /// Watch TrainJobs (and their snapshots) in this namespace only; all when absent.
    #[arg(long, env = "HOLDFAST_WATCH_NAMESPACE")]
    pub watch_namespace: Option<String>,
    /// At most this many TrainJobs are snapshotted at once.
    #[arg(long, env = "HOLDFAST_SNAPSHOT_CONCURRENCY", default_value_t = 8)]
    pub snapshot_concurrency: u16,
    /// Hold calls act as though their deadline were this much earlier (e.g. 50ms): nothing is
    /// sent after the deadline, and a request usually reaches the apiserver before it too (not
    /// a bound: the CallBound covers a request already on the wire).
    #[arg(long, env = "HOLDFAST_HOLD_TRANSIT_MARGIN", default_value = "50ms", value_parser = duration::parse)]
    pub hold_transit_margin: Duration,
    /// Runtime kinds besides Trainer's TrainingRuntime and ClusterTrainingRuntime, as
    /// `group/plural` (e.g. `slurm.example.com/slurmruntimes`), comma-separated: only these
    /// are read, watched and snapshotted (the chart passes `runtimes.extra`).
    #[arg(long, env = "HOLDFAST_EXTRA_RUNTIME_RESOURCES", value_delimiter = ',')]
    pub extra_runtime_resources: Vec<String>,
    /// Namespaces the admission webhook and policies do not judge, comma-separated (the chart
    /// passes kube-system, its own namespace and webhook.excludeNamespaces): a Hold there is
    /// answered Unsupported, since nothing keeps anyone from lifting it.
    #[arg(long, env = "HOLDFAST_UNPROTECTED_NAMESPACES", value_delimiter = ',')]
    pub unprotected_namespaces: Vec<String>,
    /// The chart's validation.engine: webhook (the webhook judges holdfast's rules), policy
    /// or both (ValidatingAdmissionPolicies judge them, and preflight proves the apiserver
    /// enforces them: Hold, Release and Open answer Unsupported until it does).
    #[arg(long, env = "HOLDFAST_VALIDATION_ENGINE", default_value = "webhook", value_parser = ["webhook", "policy", "both"])]
    pub validation_engine: String,
    /// Kueue mode: the chart's readmission-gate ValidatingAdmissionPolicy (and binding) name
    /// (`<fullname>-readmission-gate`), read by preflight: Release and Open answer
    /// Unsupported while it is missing or weakened. Unset: not probed.
    #[arg(long, env = "HOLDFAST_READMISSION_GATE_POLICY")]
    pub readmission_gate_policy: Option<String>,
    /// Time between preflight probes while the hold API is in use (the capability of each
    /// call is probed again this often; a call trusts a probe at most twice this old, and
    /// probes itself otherwise). An idle controller, no call for twice this long, sends no
    /// probe: its next call probes first.
    #[arg(long, env = "HOLDFAST_PREFLIGHT_INTERVAL", default_value = "30s", value_parser = duration::parse)]
    pub preflight_interval: Duration,
    /// Kueue mode, in a MultiKueue manager: a worker the readmission gate counts pods in, as
    /// `NAME=PATH` (the worker's MultiKueueCluster name and a kubeconfig file for it),
    /// repeated or comma-separated (the chart passes `multikueue.workers`). Hold, Release and
    /// Open of a TrainJob under MultiKueue go ahead only where these cover every cluster of
    /// its queue's MultiKueueConfig.
    #[arg(
        long = "multikueue-worker",
        env = "HOLDFAST_MULTIKUEUE_WORKERS",
        value_delimiter = ','
    )]
    pub multikueue_workers: Vec<String>,
}

/// The hold API's bounds (what one caller, source or user may hold of it) and the
/// audiences its callers' tokens must carry.
#[derive(clap::Args, Debug, Clone)]
pub struct HoldApiArgs {
    /// Open connections to the hold API, in all; more are refused at accept.
    #[arg(long, env = "HOLDFAST_API_MAX_CONNECTIONS", default_value_t = HOLD_API_LIMITS.max_connections)]
    pub api_max_connections: usize,
    /// Provisional connections (none of whose requests has been allowed yet) from one
    /// source address; over it, the source's oldest idle one is closed to make room.
    #[arg(long, env = "HOLDFAST_API_MAX_CONNECTIONS_PER_IP", default_value_t = HOLD_API_LIMITS.max_connections_per_source)]
    pub api_max_connections_per_ip: usize,
    /// Provisional connections in all (at most --api-max-connections; the rest is kept for
    /// allowed callers); over it, the oldest idle one is closed to make room.
    #[arg(long, env = "HOLDFAST_API_MAX_PROVISIONAL_CONNECTIONS", default_value_t = HOLD_API_ADMISSION.max_provisional)]
    pub api_max_provisional_connections: usize,
    /// Connections of one allowed user name.
    #[arg(long, env = "HOLDFAST_API_MAX_CONNECTIONS_PER_USER", default_value_t = HOLD_API_ADMISSION.max_connections_per_user)]
    pub api_max_connections_per_user: usize,
    /// Requests of one allowed user name in flight at once.
    #[arg(long, env = "HOLDFAST_API_MAX_REQUESTS_PER_USER", default_value_t = ApiLimits::DEFAULT.max_requests_per_user)]
    pub api_max_requests_per_user: usize,
    /// TokenReviews and SubjectAccessReviews in flight to the apiserver, in all.
    #[arg(long, env = "HOLDFAST_API_MAX_REVIEWS_IN_FLIGHT", default_value_t = ApiLimits::DEFAULT.max_reviews_in_flight)]
    pub api_max_reviews_in_flight: usize,
    /// Refused tokens one source address may have reviewed per 10 s; beyond, its requests
    /// are answered 429 unreviewed.
    #[arg(long, env = "HOLDFAST_API_FAILED_REVIEWS_PER_IP", default_value_t = ApiLimits::DEFAULT.failed_reviews_per_source)]
    pub api_failed_reviews_per_ip: u32,
    /// Longest time an allowed request's body may take to arrive (e.g. 5s).
    #[arg(long, env = "HOLDFAST_API_BODY_READ_TIMEOUT", default_value = "5s", value_parser = duration::parse)]
    pub api_body_read_timeout: Duration,
    /// Audiences a caller's token must carry, comma-separated (TokenReview spec.audiences);
    /// empty: the apiserver's own (a caller's full apiserver credential).
    #[arg(long, env = "HOLDFAST_TOKEN_AUDIENCES", value_delimiter = ',')]
    pub token_audiences: Vec<String>,
}

/// The hold API's connection bounds by default: the TLS ports' caps and timeouts, with
/// connections provisional until a request on them is allowed.
pub const HOLD_API_LIMITS: ConnectionLimits = ConnectionLimits {
    admission: Some(HOLD_API_ADMISSION),
    ..ConnectionLimits::DEFAULT
};

/// Of the 512 connections, 384 may be provisional: 128 are always left for allowed callers.
/// 32 connections per user is the per-source cap an allowed caller had before.
pub const HOLD_API_ADMISSION: Admission = Admission {
    max_provisional: 384,
    max_connections_per_user: 32,
};

impl HoldApiArgs {
    /// The hold API's connection bounds and caller bounds (every cap at least 1; the
    /// provisional cap at most the total).
    pub fn limits(&self) -> (ConnectionLimits, ApiLimits) {
        let total = self.api_max_connections.max(1);
        let connections = ConnectionLimits {
            max_connections: total,
            max_connections_per_source: self.api_max_connections_per_ip.max(1),
            admission: Some(Admission {
                max_provisional: self.api_max_provisional_connections.clamp(1, total),
                max_connections_per_user: self.api_max_connections_per_user.max(1),
            }),
            ..HOLD_API_LIMITS
        };
        let api = ApiLimits {
            max_reviews_in_flight: self.api_max_reviews_in_flight.max(1),
            failed_reviews_per_source: self.api_failed_reviews_per_ip.max(1),
            max_requests_per_user: self.api_max_requests_per_user.max(1),
            body_read_timeout: self
                .api_body_read_timeout
                .clamp(Duration::from_millis(100), Duration::from_secs(60)),
        };
        (connections, api)
    }

    /// The token audiences, blanks dropped.
    pub fn audiences(&self) -> Vec<String> {
        self.token_audiences
            .iter()
            .map(|a| a.trim().to_owned())
            .filter(|a| !a.is_empty())
            .collect()
    }
}

/// Who provides the serving certificates.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum CertMode {
    /// The controller makes a CA and serving certificates, keeps them in Secrets, injects the
    /// caBundle and rotates them.
    #[value(name = "self-managed")]
    SelfManaged,
    /// Someone else does (cert-manager, or a Secret the user supplies); nothing is done here.
    External,
}

/// The certificate flags of the controller (each also an environment variable).
#[derive(clap::Args, Debug, Clone)]
pub struct CertArgs {
    /// self-managed: make, store and rotate the webhook's and the hold API's certificates;
    /// external: they come from cert-manager or a user-supplied Secret.
    #[arg(
        long = "cert-mode",
        env = "HOLDFAST_CERT_MODE",
        value_enum,
        default_value = "external"
    )]
    pub cert_mode: CertMode,
    /// Namespace of the certificate Secrets (holdfast's own).
    #[arg(
        long,
        env = "HOLDFAST_CERT_NAMESPACE",
        default_value = "holdfast-system"
    )]
    pub cert_namespace: String,
    /// Secret holding the CA (certificate, key, trust bundle).
    #[arg(long, env = "HOLDFAST_CERT_CA_SECRET", default_value = "holdfast-ca")]
    pub cert_ca_secret: String,
    /// Secret holding the webhook's serving certificate.
    #[arg(
        long,
        env = "HOLDFAST_CERT_WEBHOOK_SECRET",
        default_value = "holdfast-webhook-tls"
    )]
    pub cert_webhook_secret: String,
    /// DNS names (or IP addresses) of the webhook's serving certificate, comma-separated.
    #[arg(long, env = "HOLDFAST_CERT_WEBHOOK_DNS_NAMES", value_delimiter = ',')]
    pub cert_webhook_dns_names: Vec<String>,
    /// Secret holding the hold API's serving certificate (empty: none is made).
    #[arg(long, env = "HOLDFAST_CERT_API_SECRET", default_value = "")]
    pub cert_api_secret: String,
    /// DNS names (or IP addresses) of the hold API's serving certificate, comma-separated.
    #[arg(long, env = "HOLDFAST_CERT_API_DNS_NAMES", value_delimiter = ',')]
    pub cert_api_dns_names: Vec<String>,
    /// MutatingWebhookConfigurations whose caBundle is kept equal to the trust bundle.
    #[arg(long, env = "HOLDFAST_CERT_MUTATING_WEBHOOKS", value_delimiter = ',')]
    pub cert_mutating_webhooks: Vec<String>,
    /// ValidatingWebhookConfigurations whose caBundle is kept equal to the trust bundle.
    #[arg(long, env = "HOLDFAST_CERT_VALIDATING_WEBHOOKS", value_delimiter = ',')]
    pub cert_validating_webhooks: Vec<String>,
    /// Validity of a new CA (e.g. 26280h); it is rotated at two thirds of its life.
    #[arg(long, env = "HOLDFAST_CERT_CA_VALIDITY", default_value = "26280h", value_parser = duration::parse)]
    pub cert_ca_validity: Duration,
    /// Validity of a new serving certificate (e.g. 2160h); re-issued at two thirds of its life.
    #[arg(long, env = "HOLDFAST_CERT_SERVING_VALIDITY", default_value = "2160h", value_parser = duration::parse)]
    pub cert_serving_validity: Duration,
    /// How often the Secrets and the caBundles are checked at most.
    #[arg(long, env = "HOLDFAST_CERT_CHECK_INTERVAL", default_value = "30s", value_parser = duration::parse)]
    pub cert_check_interval: Duration,
    /// The ConfigMap (in --cert-namespace) the hold API's CA is published in, key `ca.crt`,
    /// for supervisors in any namespace. Empty: not published.
    #[arg(long, env = "HOLDFAST_HOLD_API_CA_CONFIGMAP", default_value = "")]
    pub hold_api_ca_configmap: String,
    /// External certificates: the MutatingWebhookConfiguration whose caBundle is the hold
    /// API's CA, copied into --hold-api-ca-configmap every --cert-check-interval.
    #[arg(long, env = "HOLDFAST_HOLD_API_CA_SOURCE", default_value = "")]
    pub hold_api_ca_source: String,
}

/// The configuration of each part, as the flags ask for it.
#[derive(Clone, Debug)]
pub struct Configs {
    pub executor: ExecutorConfig,
    /// How often the hold executor's capability is probed again.
    pub preflight_interval: Duration,
    pub snapshot: snapshot::Config,
    pub readmission: readmission::Config,
    pub execution: execution::Config,
    pub lease: LeaseConfig,
    /// `None` in external certificate mode.
    pub certs: Option<CertConfig>,
    /// `None`: the webhook configurations are not armed by this controller.
    pub arming: Option<crate::arming::ArmingConfig>,
}

impl Args {
    /// Each part's configuration; an error names the flag that is wrong.
    pub fn configs(&self) -> anyhow::Result<Configs> {
        let preflight_interval = self.preflight_interval.max(Duration::from_secs(1));
        let runtime_resources = RuntimeResources::with_extra(&self.extra_runtime_resources)
            .map_err(|e| anyhow::anyhow!("--extra-runtime-resources: {e}"))?;
        let identity = self
            .identity
            .clone()
            .unwrap_or_else(leader::default_identity);
        Ok(Configs {
            executor: ExecutorConfig {
                apiserver_request_timeout: self.apiserver_request_timeout,
                transit_margin: self.hold_transit_margin,
                preflight_max_age: preflight_interval * 2,
                policy_probe: (self.validation_engine != "webhook").then(|| PolicyProbe {
                    namespace: self.lease_namespace.clone(),
                    engine: self.validation_engine.clone(),
                }),
                gate_policy: self
                    .readmission_gate_policy
                    .clone()
                    .filter(|n| !n.is_empty()),
                ..ExecutorConfig::default()
            },
            preflight_interval,
            snapshot: snapshot::Config {
                namespace: self.watch_namespace.clone(),
                concurrency: self.snapshot_concurrency.max(1),
                instance: self.identity.clone(),
                runtime_resources,
                migration_event_lease: Some((
                    self.lease_namespace.clone(),
                    self.lease_name.clone(),
                )),
                ..snapshot::Config::default()
            },
            readmission: readmission::Config {
                namespace: self.watch_namespace.clone(),
                ..readmission::Config::default()
            },
            execution: execution::Config::new(
                self.watch_namespace.clone(),
                &self.lease_namespace,
                &self.fences_configmap,
            ),
            lease: LeaseConfig::new(&self.lease_namespace, &self.lease_name, identity)
                .with_lease_duration(self.lease_duration.max(Duration::from_secs(3))),
            certs: self.certs.config()?,
            arming: self
                .arm_webhook_configuration
                .clone()
                .filter(|n| !n.is_empty())
                .map(|configuration| crate::arming::ArmingConfig {
                    configuration,
                    probe_namespace: self.lease_namespace.clone(),
                    probe_name: self.fences_configmap.clone(),
                }),
        })
    }
}

impl CertArgs {
    /// What certificate management is to do; `None` in external mode.
    pub fn config(&self) -> Result<Option<CertConfig>, CertsError> {
        if self.cert_mode == CertMode::External {
            return Ok(None);
        }
        let mut serving = Vec::new();
        if self.cert_webhook_dns_names.is_empty() {
            return Err(CertsError::Config(
                "--cert-webhook-dns-names is required with --cert-mode self-managed".into(),
            ));
        }
        serving.push(ServingSecret {
            name: self.cert_webhook_secret.clone(),
            dns_names: self.cert_webhook_dns_names.clone(),
        });
        if !self.cert_api_secret.is_empty() {
            if self.cert_api_dns_names.is_empty() {
                return Err(CertsError::Config(
                    "--cert-api-dns-names is required when --cert-api-secret is set".into(),
                ));
            }
            serving.push(ServingSecret {
                name: self.cert_api_secret.clone(),
                dns_names: self.cert_api_dns_names.clone(),
            });
        }
        let policy =
            RotationPolicy::from_validities(self.cert_ca_validity, self.cert_serving_validity);
        policy.check()?;
        Ok(Some(CertConfig {
            namespace: self.cert_namespace.clone(),
            ca_secret: self.cert_ca_secret.clone(),
            ca_common_name: format!("holdfast-ca.{}", self.cert_namespace),
            serving,
            mutating_webhooks: self.cert_mutating_webhooks.clone(),
            validating_webhooks: self.cert_validating_webhooks.clone(),
            policy,
            check_interval: self.cert_check_interval.max(Duration::from_secs(1)),
            hold_api_ca: self.hold_api_ca(),
        }))
    }

    /// Where the hold API's CA is published, if it is.
    pub fn hold_api_ca(&self) -> Option<crate::hold_api_ca::Published> {
        (!self.hold_api_ca_configmap.is_empty()).then(|| crate::hold_api_ca::Published {
            namespace: self.cert_namespace.clone(),
            name: self.hold_api_ca_configmap.clone(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;
    use holdfast_certs::CertError;

    fn parse(args: &[&str]) -> Args {
        let argv = std::iter::once("holdfast-controller").chain(args.iter().copied());
        Args::try_parse_from(argv).unwrap_or_else(|e| panic!("{args:?}: {e}"))
    }

    #[test]
    fn defaults_make_the_documented_configuration() {
        let c = parse(&["--identity=replica-0"]).configs().expect("configs");
        assert_eq!(
            c.executor.apiserver_request_timeout,
            Duration::from_secs(60)
        );
        assert_eq!(c.executor.transit_margin, Duration::from_millis(50));
        assert_eq!(c.preflight_interval, Duration::from_secs(30));
        assert_eq!(c.executor.preflight_max_age, Duration::from_secs(60));
        assert_eq!(c.lease.lease_duration, Duration::from_secs(15));
        assert_eq!(c.lease.renew_deadline, Duration::from_secs(10));
        assert_eq!(c.lease.identity, "replica-0");
        assert_eq!(c.lease.namespace, "holdfast-system");
        assert_eq!(c.lease.name, "holdfast-controller");
        assert_eq!(c.snapshot.concurrency, 8);
        assert_eq!(c.snapshot.instance.as_deref(), Some("replica-0"));
        assert_eq!(c.snapshot.namespace, None);
        assert!(c.certs.is_none());
    }

    #[test]
    fn durations_are_one_format_and_floors_hold() {
        let c = parse(&[
            "--apiserver-request-timeout=1m30s",
            "--hold-transit-margin=20ms",
            "--lease-duration=1s",
            "--preflight-interval=0s",
            "--snapshot-concurrency=0",
            "--watch-namespace=team-a",
        ])
        .configs()
        .expect("configs");
        assert_eq!(
            c.executor.apiserver_request_timeout,
            Duration::from_secs(90)
        );
        assert_eq!(c.executor.transit_margin, Duration::from_millis(20));
        assert_eq!(c.lease.lease_duration, Duration::from_secs(3));
        assert_eq!(c.preflight_interval, Duration::from_secs(1));
        assert_eq!(c.snapshot.concurrency, 1);
        assert_eq!(c.snapshot.namespace.as_deref(), Some("team-a"));
        assert_eq!(c.readmission.namespace.as_deref(), Some("team-a"));
        for bad in [
            "--lease-duration=15",
            "--hold-transit-margin=50",
            "--apiserver-request-timeout=1.5m",
        ] {
            let err = Args::try_parse_from(["holdfast-controller", bad]).expect_err(bad);
            assert!(
                err.to_string().contains("is not a duration"),
                "{bad}: {err}"
            );
        }
        assert!(
            parse(&["--extra-runtime-resources=nogroup"])
                .configs()
                .is_err()
        );
    }

    #[test]
    fn the_hold_api_is_bounded_by_default_and_by_flag() {
        let (connections, api) = parse(&[]).hold_api.limits();
        assert_eq!(connections, HOLD_API_LIMITS);
        assert_eq!(api, ApiLimits::DEFAULT);
        assert!(parse(&[]).hold_api.audiences().is_empty());
        let args = parse(&[
            "--api-max-connections=10",
            "--api-max-provisional-connections=50",
            "--api-max-reviews-in-flight=0",
            "--api-body-read-timeout=1s",
            "--token-audiences=holdfast, ,https://kubernetes.default.svc",
        ]);
        let (connections, api) = args.hold_api.limits();
        assert_eq!(connections.max_connections, 10);
        assert_eq!(
            connections.admission.map(|a| a.max_provisional),
            Some(10),
            "never more provisional than in all"
        );
        assert_eq!(api.max_reviews_in_flight, 1, "a cap of 0 is 1");
        assert_eq!(api.body_read_timeout, Duration::from_secs(1));
        assert_eq!(
            args.hold_api.audiences(),
            ["holdfast", "https://kubernetes.default.svc"]
        );
    }

    #[test]
    fn external_mode_manages_no_certificates() {
        assert!(parse(&[]).certs.config().expect("config").is_none());
    }

    #[test]
    fn self_managed_mode_needs_names_and_a_policy_that_fits() {
        let config = |args: &[&str]| parse(args).certs.config();
        assert!(matches!(
            config(&["--cert-mode", "self-managed"]),
            Err(CertsError::Config(_))
        ));
        let c = config(&[
            "--cert-mode=self-managed",
            "--cert-webhook-dns-names=hook.ns.svc,hook.ns.svc.cluster.local",
            "--cert-api-secret=api-tls",
            "--cert-api-dns-names=api.ns.svc",
            "--cert-validating-webhooks=v1,v2",
        ])
        .expect("config")
        .expect("self-managed");
        assert_eq!(c.serving.len(), 2);
        assert_eq!(
            c.serving[0].dns_names,
            ["hook.ns.svc", "hook.ns.svc.cluster.local"]
        );
        assert_eq!(c.validating_webhooks, ["v1", "v2"]);
        assert_eq!(c.policy, RotationPolicy::default());
        assert_eq!(c.check_interval, Duration::from_secs(30));
        // A serving certificate longer-lived than the CA's renewal window is refused.
        assert!(matches!(
            config(&[
                "--cert-mode=self-managed",
                "--cert-webhook-dns-names=h",
                "--cert-ca-validity=30d",
                "--cert-serving-validity=20d",
            ]),
            Err(CertsError::Cert(CertError::Policy(_)))
        ));
    }
}
