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

use crate::backoff::Backoff;
use crate::events::{Notice, Publisher};
use holdfast_certs::rotation::{self, decide_serving};
use holdfast_certs::{
    Authority, AuthorityDecision, CertError, CertificateInfo, RotationPolicy, ServingDecision,
    StoredAuthority, StoredServing,
};
use holdfast_serve::CertificateExpiry;
use json_patch::{AddOperation, Patch as JsonPatch, PatchOperation, TestOperation};
use jsonptr::PointerBuf;
use k8s_openapi::ByteString;
use k8s_openapi::api::admissionregistration::v1::{
    MutatingWebhookConfiguration, ValidatingWebhookConfiguration,
};
use k8s_openapi::api::core::v1::{ObjectReference, Secret};
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
    /// Where the trust bundle is published for the hold API's clients
    /// ([`crate::hold_api_ca`]); `None`: not published.
    pub hold_api_ca: Option<crate::hold_api_ca::Published>,
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
    /// Whether the hold API's CA ConfigMap was written ([`CertConfig::hold_api_ca`]).
    pub ca_published: bool,
    /// When the current CA expires.
    pub ca_not_after: SystemTime,
    /// When each serving certificate now in its Secret expires, in configuration order.
    pub serving_not_after: Vec<(String, SystemTime)>,
    /// When a decision can next change on its own.
    pub next_change: SystemTime,
    /// The Events of what this reconcile wrote, on the Secrets written (see
    /// [`crate::cert_events`]).
    pub announcements: Vec<(ObjectReference, Notice)>,
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
            || self.ca_published
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

/// Creates or replaces `secret`; the reference of what was written.
async fn write_secret(api: &Api<Secret>, secret: Secret) -> Result<ObjectReference, CertsError> {
    let name = secret.metadata.name.clone().unwrap_or_default();
    let what = format!("Secret {}/{name}", api.namespace().unwrap_or_default());
    let pp = PostParams {
        field_manager: Some(FIELD_MANAGER.into()),
        ..Default::default()
    };
    let written = if secret.metadata.resource_version.is_some() {
        api.replace(&name, &pp, &secret)
            .await
            .map_err(kube_err(what))?
    } else {
        api.create(&pp, &secret).await.map_err(kube_err(what))?
    };
    Ok(ObjectReference {
        api_version: Some("v1".to_owned()),
        kind: Some("Secret".to_owned()),
        namespace: written.metadata.namespace,
        name: written.metadata.name,
        uid: written.metadata.uid,
        ..ObjectReference::default()
    })
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

/// One pass: CA, trust bundle, caBundle injection, the hold API's published CA, serving
/// certificates (in that order).
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
    let mut announcements = Vec::new();
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
        let written = write_secret(&secrets, s).await?;
        if let Some(notice) = crate::cert_events::authority(&decision, authority.info.not_after) {
            announcements.push((written, notice));
        }
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

    // 3. The bundle published for the hold API's clients, before a certificate they would
    // need it for is served. A failure to publish it does not stop the serving certificates
    // below from being renewed: an expired webhook certificate would fail closed every write
    // the webhook guards, while an unpublished bundle only keeps new supervisors from
    // trusting a new CA until it is published (say, a ConfigMap of that name someone made
    // immutable: delete it, and the next reconcile makes it again).
    let ca_published = match &config.hold_api_ca {
        Some(to) => match crate::hold_api_ca::publish(client, to, &bundle_pem).await {
            Ok(written) => written,
            Err(e) => {
                tracing::warn!(
                    namespace = %to.namespace,
                    name = %to.name,
                    error = %e,
                    "the hold API's CA was not published in its ConfigMap; the serving certificates are renewed all the same (if the ConfigMap is immutable or not the controller's, delete it: the next reconcile makes it again)"
                );
                false
            }
        },
        None => false,
    };

    // 4. Serving certificates, from a CA the apiserver (and the hold API's clients) have now
    // been given.
    let mut serving = Vec::new();
    let mut serving_infos = Vec::new();
    let mut serving_not_after = Vec::new();
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
        let mut issued_for = None;
        let (cert, key) = match (&d, stored) {
            (ServingDecision::Issue(reason), _)
            | (ServingDecision::WaitForTrust { reason, .. }, None) => {
                tracing::info!(secret = %want.name, ?reason, "issuing a serving certificate");
                issued_for = Some(reason.clone());
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
            let written = write_secret(&secrets, s).await?;
            if let Some(reason) = &issued_for {
                let notice = crate::cert_events::serving(reason, &want.dns_names, info.not_after);
                announcements.push((written, notice));
            }
        }
        serving_not_after.push((want.name.clone(), info.not_after));
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
        ca_published,
        ca_not_after: authority.info.not_after,
        serving_not_after,
        next_change,
        announcements,
    })
}

/// [`reconcile`] until `shutdown`: again when a decision can change, at least every
/// `check_interval`, with a doubling backoff (from one second) after an error. After each
/// reconcile the CA's and the serving certificates' expiry is exported into `expiry`
/// (`kind` `ca` or `serving`, `source` `secret/<name>`), and what it wrote is announced
/// through `events`, if given.
pub async fn run(
    client: Client,
    config: CertConfig,
    expiry: CertificateExpiry,
    events: Option<Publisher>,
    shutdown: CancellationToken,
) {
    const FIRST_BACKOFF: Duration = Duration::from_secs(1);
    let mut backoff = Backoff::new(FIRST_BACKOFF, config.check_interval).without_jitter();
    loop {
        let wait = match reconcile(&client, &config).await {
            Ok(outcome) => {
                backoff.succeeded();
                expiry.set(
                    "ca",
                    &format!("secret/{}", config.ca_secret),
                    outcome.ca_not_after,
                );
                for (secret, not_after) in &outcome.serving_not_after {
                    expiry.set("serving", &format!("secret/{secret}"), *not_after);
                }
                if let Some(events) = &events {
                    for (secret, notice) in &outcome.announcements {
                        events.publish(secret, notice.clone());
                    }
                }
                let until = outcome
                    .next_change
                    .duration_since(SystemTime::now())
                    .unwrap_or_default();
                until.clamp(FIRST_BACKOFF, config.check_interval)
            }
            Err(e) => {
                tracing::warn!(error = %e, kind = e.metric_label(), "certificate reconcile failed; retrying");
                backoff.failed()
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
