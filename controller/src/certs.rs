//! Self-managed webhook certificates: the I/O around `holdfast_certs::rotation`.
//!
//! [`reconcile`] reads the CA Secret, decides (pure, in the certs crate), writes the CA Secret
//! if the CA or the trust bundle changed, injects the bundle as `caBundle` into holdfast's own
//! webhook configurations, and only then issues serving certificates into their Secrets, so a
//! serving certificate is never signed by a CA the apiserver has not been given. [`run`]
//! repeats it until shutdown. Every write is preconditioned on the resourceVersion read, so
//! replicas racing each other lose with a 409 and retry: it is safe on every replica, and the
//! CA is generated exactly once.
//!
//! Secrets (in `--cert-namespace`):
//! - the CA (`--cert-ca-secret`, type Opaque): `ca.crt`, `ca.key`, `ca-bundle.crt` (current
//!   CA first, then earlier ones until they expire). Only the controller reads it.
//! - each serving certificate (type `kubernetes.io/tls`): `tls.crt`, `tls.key`, and `ca.crt`
//!   (the trust bundle, for clients such as the CLI). The webhook pods mount theirs and reload
//!   it by content.

use holdfast_certs::rotation::{self, decide_serving};
use holdfast_certs::{
    Authority, AuthorityDecision, CertError, CertificateInfo, RotationPolicy, ServingDecision,
    StoredAuthority, StoredServing,
};
use json_patch::{AddOperation, Patch as JsonPatch, PatchOperation, TestOperation};
use jsonptr::PointerBuf;
use k8s_openapi::ByteString;
use k8s_openapi::api::admissionregistration::v1::{
    MutatingWebhookConfiguration, ValidatingWebhookConfiguration,
};
use k8s_openapi::api::core::v1::Secret;
use kube::Client;
use kube::api::{Api, DynamicObject, ObjectMeta, Patch, PatchParams, PostParams};
use kube::core::ApiResource;
use std::collections::BTreeMap;
use std::path::Path;
use std::time::{Duration, SystemTime};
use tokio_util::sync::CancellationToken;

/// The field manager of every write made here.
pub const FIELD_MANAGER: &str = "holdfast-controller";
/// Label on the Secrets this module writes: `authority` or `serving`.
pub const LABEL_CERTIFICATE: &str = "holdfast.dev/certificate";
/// Annotation on those Secrets: when the certificate in them expires (RFC 3339).
pub const ANN_NOT_AFTER: &str = "holdfast.dev/certificate-not-after";

const CA_CERT: &str = "ca.crt";
const CA_KEY: &str = "ca.key";
const CA_BUNDLE: &str = "ca-bundle.crt";
const TLS_CERT: &str = "tls.crt";
const TLS_KEY: &str = "tls.key";

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
    #[arg(long, env = "HOLDFAST_CERT_CA_VALIDITY", default_value = "26280h", value_parser = parse_duration)]
    pub cert_ca_validity: Duration,
    /// Validity of a new serving certificate (e.g. 2160h); re-issued at two thirds of its life.
    #[arg(long, env = "HOLDFAST_CERT_SERVING_VALIDITY", default_value = "2160h", value_parser = parse_duration)]
    pub cert_serving_validity: Duration,
    /// How often the Secrets and the caBundles are checked at most.
    #[arg(long, env = "HOLDFAST_CERT_CHECK_INTERVAL", default_value = "30s", value_parser = parse_duration)]
    pub cert_check_interval: Duration,
}

/// Parse `90d`, `2160h`, `1h30m`, `45s` (units d, h, m, s; at least one).
pub fn parse_duration(text: &str) -> Result<Duration, String> {
    let mut total = Duration::ZERO;
    let mut number = String::new();
    let mut any = false;
    for c in text.trim().chars() {
        if c.is_ascii_digit() {
            number.push(c);
            continue;
        }
        let unit = match c {
            'd' => 86_400,
            'h' => 3_600,
            'm' => 60,
            's' => 1,
            _ => return Err(format!("{text:?}: unknown unit {c:?} (use d, h, m or s)")),
        };
        let n: u64 = number
            .parse()
            .map_err(|_| format!("{text:?}: a number must come before {c:?}"))?;
        let secs = n
            .checked_mul(unit)
            .ok_or_else(|| format!("{text:?}: too large"))?;
        total = total
            .checked_add(Duration::from_secs(secs))
            .ok_or_else(|| format!("{text:?}: too large"))?;
        number.clear();
        any = true;
    }
    if !number.is_empty() || !any {
        return Err(format!(
            "{text:?}: expected a duration such as 90d, 2160h, 30m or 45s"
        ));
    }
    Ok(total)
}

/// A serving certificate to keep in a Secret.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ServingSecret {
    pub name: String,
    pub dns_names: Vec<String>,
}

/// What [`reconcile`] manages.
#[derive(Clone, Debug)]
pub struct CertConfig {
    pub namespace: String,
    pub ca_secret: String,
    /// Common name of a new CA.
    pub ca_common_name: String,
    pub serving: Vec<ServingSecret>,
    pub mutating_webhooks: Vec<String>,
    pub validating_webhooks: Vec<String>,
    pub policy: RotationPolicy,
    /// Upper bound of the wait between two reconciles in [`run`].
    pub check_interval: Duration,
}

impl CertConfig {
    /// The configuration the flags ask for; `None` in external mode.
    pub fn from_args(a: &CertArgs) -> Result<Option<Self>, CertsError> {
        if a.cert_mode == CertMode::External {
            return Ok(None);
        }
        let mut serving = Vec::new();
        if a.cert_webhook_dns_names.is_empty() {
            return Err(CertsError::Config(
                "--cert-webhook-dns-names is required with --cert-mode self-managed".into(),
            ));
        }
        serving.push(ServingSecret {
            name: a.cert_webhook_secret.clone(),
            dns_names: a.cert_webhook_dns_names.clone(),
        });
        if !a.cert_api_secret.is_empty() {
            if a.cert_api_dns_names.is_empty() {
                return Err(CertsError::Config(
                    "--cert-api-dns-names is required when --cert-api-secret is set".into(),
                ));
            }
            serving.push(ServingSecret {
                name: a.cert_api_secret.clone(),
                dns_names: a.cert_api_dns_names.clone(),
            });
        }
        let policy = RotationPolicy::from_validities(a.cert_ca_validity, a.cert_serving_validity);
        policy.check()?;
        Ok(Some(CertConfig {
            namespace: a.cert_namespace.clone(),
            ca_secret: a.cert_ca_secret.clone(),
            ca_common_name: format!("holdfast-ca.{}", a.cert_namespace),
            serving,
            mutating_webhooks: a.cert_mutating_webhooks.clone(),
            validating_webhooks: a.cert_validating_webhooks.clone(),
            policy,
            check_interval: a.cert_check_interval.max(Duration::from_secs(1)),
        }))
    }
}

/// Why a reconcile did not finish; the next one retries.
#[derive(Debug, thiserror::Error)]
pub enum CertsError {
    #[error("certificate configuration: {0}")]
    Config(String),
    #[error(transparent)]
    Cert(#[from] CertError),
    #[error("{what}: {source}")]
    Kube { what: String, source: kube::Error },
    #[error("{0} changed while it was being written (409); retrying")]
    Conflict(String),
}

impl CertsError {
    /// A bounded label for metrics.
    pub fn metric_label(&self) -> &'static str {
        match self {
            CertsError::Config(_) => "config",
            CertsError::Cert(e) => e.metric_label(),
            CertsError::Kube { .. } => "kube",
            CertsError::Conflict(_) => "conflict",
        }
    }
}

fn kube_err(what: impl Into<String>) -> impl FnOnce(kube::Error) -> CertsError {
    let what = what.into();
    move |source| match &source {
        kube::Error::Api(s) if s.code == 409 => CertsError::Conflict(what),
        _ => CertsError::Kube { what, source },
    }
}

/// What happened to one webhook configuration's caBundle.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Injection {
    Injected,
    Unchanged,
    /// No such configuration (not installed yet, or a wrong name).
    Missing,
}

/// What one reconcile did.
#[derive(Clone, Debug)]
pub struct Outcome {
    pub authority: AuthorityDecision,
    /// Per serving Secret, in configuration order.
    pub serving: Vec<(String, ServingDecision)>,
    /// Per webhook configuration (`mutating/NAME`, `validating/NAME`).
    pub injections: Vec<(String, Injection)>,
    /// The trust bundle now published (PEM, current CA first).
    pub bundle_pem: String,
    /// When a decision can next change on its own.
    pub next_change: SystemTime,
}

impl Outcome {
    /// Whether anything was written.
    pub fn changed(&self) -> bool {
        self.authority != AuthorityDecision::Keep
            || self
                .serving
                .iter()
                .any(|(_, d)| matches!(d, ServingDecision::Issue(_)))
            || self
                .injections
                .iter()
                .any(|(_, i)| *i == Injection::Injected)
    }
}

fn data_str<'a>(s: &'a Secret, key: &str) -> Option<&'a str> {
    s.data
        .as_ref()?
        .get(key)
        .and_then(|b| std::str::from_utf8(&b.0).ok())
}

fn rfc3339(t: SystemTime) -> String {
    // A SystemTime beyond jiff's range (year 9999) cannot come from a certificate we made.
    holdfast_core::rfc3339::seconds(jiff::Timestamp::try_from(t).unwrap_or(jiff::Timestamp::MAX))
}

/// `existing` updated (or a new Secret) with exactly `data`, our labels and annotation.
fn secret_with(
    existing: Option<Secret>,
    namespace: &str,
    name: &str,
    type_: &str,
    role: &str,
    not_after: SystemTime,
    data: BTreeMap<String, String>,
) -> Secret {
    let mut s = existing.unwrap_or_else(|| Secret {
        metadata: ObjectMeta {
            name: Some(name.to_owned()),
            namespace: Some(namespace.to_owned()),
            ..Default::default()
        },
        type_: Some(type_.to_owned()),
        ..Default::default()
    });
    let labels = s.metadata.labels.get_or_insert_with(BTreeMap::new);
    labels.insert("app.kubernetes.io/managed-by".into(), FIELD_MANAGER.into());
    labels.insert(LABEL_CERTIFICATE.into(), role.into());
    s.metadata
        .annotations
        .get_or_insert_with(BTreeMap::new)
        .insert(ANN_NOT_AFTER.into(), rfc3339(not_after));
    s.data = Some(
        data.into_iter()
            .map(|(k, v)| (k, ByteString(v.into_bytes())))
            .collect(),
    );
    s.string_data = None;
    s
}

async fn write_secret(api: &Api<Secret>, secret: Secret) -> Result<(), CertsError> {
    let name = secret.metadata.name.clone().unwrap_or_default();
    let what = format!("Secret {}/{name}", api.namespace().unwrap_or_default());
    let pp = PostParams {
        field_manager: Some(FIELD_MANAGER.into()),
        ..Default::default()
    };
    if secret.metadata.resource_version.is_some() {
        api.replace(&name, &pp, &secret)
            .await
            .map_err(kube_err(what))?;
    } else {
        api.create(&pp, &secret).await.map_err(kube_err(what))?;
    }
    Ok(())
}

/// Make every webhook of a configuration carry `bundle_pem` as its caBundle (one JSON patch,
/// preconditioned on the resourceVersion read).
pub async fn inject_ca_bundle(
    client: &Client,
    resource: &ApiResource,
    name: &str,
    bundle_pem: &str,
) -> Result<Injection, CertsError> {
    let what = format!("{} {name}", resource.kind);
    let api: Api<DynamicObject> = Api::all_with(client.clone(), resource);
    let Some(obj) = api.get_opt(name).await.map_err(kube_err(what.clone()))? else {
        return Ok(Injection::Missing);
    };
    let wanted = serde_json::to_value(ByteString(bundle_pem.as_bytes().to_vec()))
        .map_err(|e| CertsError::Config(format!("encoding the caBundle: {e}")))?;
    let webhooks = obj
        .data
        .get("webhooks")
        .and_then(|w| w.as_array())
        .cloned()
        .unwrap_or_default();
    let mut ops = Vec::new();
    for (i, hook) in webhooks.iter().enumerate() {
        if hook.pointer("/clientConfig/caBundle") != Some(&wanted) {
            let index = i.to_string();
            ops.push(PatchOperation::Add(AddOperation {
                path: PointerBuf::from_tokens([
                    "webhooks",
                    index.as_str(),
                    "clientConfig",
                    "caBundle",
                ]),
                value: wanted.clone(),
            }));
        }
    }
    if ops.is_empty() {
        return Ok(Injection::Unchanged);
    }
    let rv = obj.metadata.resource_version.clone().unwrap_or_default();
    ops.insert(
        0,
        PatchOperation::Test(TestOperation {
            path: PointerBuf::from_tokens(["metadata", "resourceVersion"]),
            value: serde_json::Value::String(rv),
        }),
    );
    let pp = PatchParams {
        field_manager: Some(FIELD_MANAGER.into()),
        ..Default::default()
    };
    match api
        .patch(name, &pp, &Patch::Json::<()>(JsonPatch(ops)))
        .await
    {
        Ok(_) => Ok(Injection::Injected),
        // A failed `test` (someone wrote in between) is refused as invalid: retry.
        Err(kube::Error::Api(s)) if s.code == 409 || s.code == 422 => {
            Err(CertsError::Conflict(what))
        }
        Err(e) => Err(kube_err(what)(e)),
    }
}

/// One pass: CA, trust bundle, caBundle injection, serving certificates (in that order).
pub async fn reconcile(client: &Client, config: &CertConfig) -> Result<Outcome, CertsError> {
    let now = SystemTime::now();
    let policy = &config.policy;
    let secrets: Api<Secret> = Api::namespaced(client.clone(), &config.namespace);

    // 1. The CA and the trust bundle.
    let ca_what = format!("Secret {}/{}", config.namespace, config.ca_secret);
    let ca_secret = secrets
        .get_opt(&config.ca_secret)
        .await
        .map_err(kube_err(ca_what))?;
    let stored = ca_secret.as_ref().and_then(|s| {
        Some(StoredAuthority {
            cert_pem: data_str(s, CA_CERT)?,
            key_pem: data_str(s, CA_KEY)?,
            bundle_pem: data_str(s, CA_BUNDLE),
        })
    });
    let (decision, authority) =
        Authority::next(stored.as_ref(), now, policy, &config.ca_common_name)?;
    let bundle_pem = authority.bundle_pem();
    let stored_bundle = stored.as_ref().and_then(|s| s.bundle_pem);
    if decision != AuthorityDecision::Keep || stored_bundle != Some(bundle_pem.as_str()) {
        if decision != AuthorityDecision::Keep {
            tracing::info!(secret = %config.ca_secret, ?decision, "new webhook CA");
        }
        let data = BTreeMap::from([
            (CA_CERT.to_owned(), authority.ca.cert_pem().to_owned()),
            (CA_KEY.to_owned(), authority.ca.key_pem().to_owned()),
            (CA_BUNDLE.to_owned(), bundle_pem.clone()),
        ]);
        let s = secret_with(
            ca_secret,
            &config.namespace,
            &config.ca_secret,
            "Opaque",
            "authority",
            authority.info.not_after,
            data,
        );
        write_secret(&secrets, s).await?;
    }

    // 2. The caBundle of holdfast's webhook configurations.
    let mut injections = Vec::new();
    let kinds = [
        (
            "mutating",
            ApiResource::erase::<MutatingWebhookConfiguration>(&()),
            &config.mutating_webhooks,
        ),
        (
            "validating",
            ApiResource::erase::<ValidatingWebhookConfiguration>(&()),
            &config.validating_webhooks,
        ),
    ];
    for (label, resource, names) in &kinds {
        for name in names.iter() {
            let i = inject_ca_bundle(client, resource, name, &bundle_pem).await?;
            match i {
                Injection::Injected => {
                    tracing::info!(configuration = %name, kind = label, "caBundle injected")
                }
                Injection::Missing => {
                    tracing::warn!(configuration = %name, kind = label, "webhook configuration not found; caBundle not injected")
                }
                Injection::Unchanged => {}
            }
            injections.push((format!("{label}/{name}"), i));
        }
    }

    // 3. Serving certificates, from a CA the apiserver has now been given.
    let mut serving = Vec::new();
    let mut serving_infos = Vec::new();
    for want in &config.serving {
        let what = format!("Secret {}/{}", config.namespace, want.name);
        let existing = secrets.get_opt(&want.name).await.map_err(kube_err(what))?;
        let stored = existing.as_ref().and_then(|s| {
            Some(StoredServing {
                cert_pem: data_str(s, TLS_CERT)?,
                key_pem: data_str(s, TLS_KEY)?,
            })
        });
        let d = decide_serving(
            stored.as_ref(),
            &want.dns_names,
            &authority.info,
            &authority.bundle,
            now,
            policy,
        );
        let (cert, key) = match (&d, stored) {
            (ServingDecision::Issue(reason), _)
            | (ServingDecision::WaitForTrust { reason, .. }, None) => {
                tracing::info!(secret = %want.name, ?reason, "issuing a serving certificate");
                let issued = authority.issue(&want.dns_names, policy)?;
                (issued.cert_pem, issued.key_pem)
            }
            (_, Some(s)) => (s.cert_pem.to_owned(), s.key_pem.to_owned()),
            (ServingDecision::Keep, None) => {
                // decide_serving never keeps what is not there; issue to be safe.
                let issued = authority.issue(&want.dns_names, policy)?;
                (issued.cert_pem, issued.key_pem)
            }
        };
        let info = CertificateInfo::parse_pem(&cert)?;
        let unchanged = existing.as_ref().is_some_and(|s| {
            data_str(s, TLS_CERT) == Some(cert.as_str())
                && data_str(s, TLS_KEY) == Some(key.as_str())
                && data_str(s, CA_CERT) == Some(bundle_pem.as_str())
        });
        if !unchanged {
            let data = BTreeMap::from([
                (TLS_CERT.to_owned(), cert),
                (TLS_KEY.to_owned(), key),
                (CA_CERT.to_owned(), bundle_pem.clone()),
            ]);
            let s = secret_with(
                existing,
                &config.namespace,
                &want.name,
                "kubernetes.io/tls",
                "serving",
                info.not_after,
                data,
            );
            write_secret(&secrets, s).await?;
        }
        serving_infos.push(info);
        serving.push((want.name.clone(), d));
    }

    let next_change = rotation::next_change(
        now,
        &authority.info,
        &authority.bundle,
        &serving_infos,
        policy,
    );
    Ok(Outcome {
        authority: decision,
        serving,
        injections,
        bundle_pem,
        next_change,
    })
}

/// [`reconcile`] until `shutdown`: again when a decision can change, at least every
/// `check_interval`, with a doubling backoff (from one second) after an error.
pub async fn run(client: Client, config: CertConfig, shutdown: CancellationToken) {
    const FIRST_BACKOFF: Duration = Duration::from_secs(1);
    let mut backoff = FIRST_BACKOFF;
    loop {
        let wait = match reconcile(&client, &config).await {
            Ok(outcome) => {
                backoff = FIRST_BACKOFF;
                let until = outcome
                    .next_change
                    .duration_since(SystemTime::now())
                    .unwrap_or_default();
                until.clamp(FIRST_BACKOFF, config.check_interval)
            }
            Err(e) => {
                tracing::warn!(error = %e, kind = e.metric_label(), "certificate reconcile failed; retrying");
                let w = backoff;
                backoff = (backoff * 2).min(config.check_interval);
                w
            }
        };
        tokio::select! {
            _ = shutdown.cancelled() => return,
            _ = tokio::time::sleep(wait) => {}
        }
    }
}

/// Wait until every path exists and is non-empty (a Secret volume marked optional is filled
/// by kubelet after the Secret is created), or `timeout` passes. Whether they all appeared.
pub async fn wait_for_files(paths: &[&Path], timeout: Duration) -> bool {
    let deadline = tokio::time::Instant::now() + timeout;
    loop {
        let ready = paths
            .iter()
            .all(|p| std::fs::metadata(p).map(|m| m.len() > 0).unwrap_or(false));
        if ready {
            return true;
        }
        if tokio::time::Instant::now() >= deadline {
            return false;
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(clap::Parser)]
    struct Flags {
        #[command(flatten)]
        certs: CertArgs,
    }

    #[test]
    fn durations_parse_like_the_chart_writes_them() {
        assert_eq!(parse_duration("45s"), Ok(Duration::from_secs(45)));
        assert_eq!(
            parse_duration("2160h"),
            Ok(Duration::from_secs(2160 * 3600))
        );
        assert_eq!(parse_duration("1h30m"), Ok(Duration::from_secs(5400)));
        assert_eq!(parse_duration("90d"), Ok(Duration::from_secs(90 * 86400)));
        for bad in ["", "12", "h", "3w", "1.5h", "99999999999999999999d"] {
            assert!(parse_duration(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn external_mode_manages_nothing() {
        let f = Flags::parse_from(["x"]);
        assert!(CertConfig::from_args(&f.certs).expect("config").is_none());
    }

    #[test]
    fn self_managed_mode_needs_names_and_a_policy_that_fits() {
        let f = Flags::parse_from(["x", "--cert-mode", "self-managed"]);
        assert!(matches!(
            CertConfig::from_args(&f.certs),
            Err(CertsError::Config(_))
        ));
        let f = Flags::parse_from([
            "x",
            "--cert-mode=self-managed",
            "--cert-webhook-dns-names=hook.ns.svc,hook.ns.svc.cluster.local",
            "--cert-api-secret=api-tls",
            "--cert-api-dns-names=api.ns.svc",
            "--cert-validating-webhooks=v1,v2",
        ]);
        let c = CertConfig::from_args(&f.certs)
            .expect("config")
            .expect("self-managed");
        assert_eq!(c.serving.len(), 2);
        assert_eq!(
            c.serving[0].dns_names,
            ["hook.ns.svc", "hook.ns.svc.cluster.local"]
        );
        assert_eq!(c.validating_webhooks, ["v1", "v2"]);
        assert_eq!(c.policy, RotationPolicy::default());
        // A serving certificate longer-lived than the CA's renewal window is refused.
        let f = Flags::parse_from([
            "x",
            "--cert-mode=self-managed",
            "--cert-webhook-dns-names=h",
            "--cert-ca-validity=30d",
            "--cert-serving-validity=20d",
        ]);
        assert!(matches!(
            CertConfig::from_args(&f.certs),
            Err(CertsError::Cert(CertError::Policy(_)))
        ));
    }
}
