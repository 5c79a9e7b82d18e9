//! Self-managed certificates rotate with no failed admission, end to end against the real
//! apiserver.
//!
//! The controller's certificate reconcile (`holdfast_controller::webhook_certs::reconcile`) keeps a CA
//! and a serving certificate in Secrets and injects the trust bundle into a real
//! ValidatingWebhookConfiguration registered by URL. A webhook server (holdfast-serve's
//! `TlsServer`, which re-reads its files by content every 5 s, with an allow-all router) serves
//! from files that a stand-in for kubelet keeps equal to the Secret, swapping a `..data`
//! symlink as kubelet does for a Secret volume. With a CA living 60 s and serving
//! certificates 24 s, the serving certificate is re-issued every ~12 s and the CA rotated every
//! ~30 s while ConfigMap creates go through the apiserver and the webhook without pause: not
//! one may fail. A probe also opens a fresh TLS connection every half second trusting only
//! the caBundle then in the configuration: the served certificate must verify every time.

use holdfast_certs::{AuthorityDecision, CertificateInfo, RotationPolicy, ServingDecision};
use holdfast_controller::webhook_certs::{self as certs, CertConfig, ServingSecret};
use holdfast_serve::{CertFiles, ConnectionMetrics, TlsOptions, TlsServer};
use holdfast_tests::{ControlPlane, Identity};
use k8s_openapi::ByteString;
use k8s_openapi::api::admissionregistration::v1::{
    RuleWithOperations, ValidatingWebhook, ValidatingWebhookConfiguration, WebhookClientConfig,
};
use k8s_openapi::api::core::v1::{ConfigMap, Secret};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;
use kube::api::{Api, DeleteParams, ObjectMeta, PostParams};
use serde_json::{Value, json};
use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;
use tokio_util::sync::CancellationToken;

const SEC: Duration = Duration::from_secs(1);

/// How long admissions are driven through rotations.
const RUN_FOR: Duration = Duration::from_secs(75);

/// A CA for 60 s (rotated with 30 s left), serving certificates for 24 s (re-issued with 12 s
/// left), a new CA settles 3 s before serving certificates move to it.
fn policy() -> RotationPolicy {
    let p = RotationPolicy {
        ca_validity: 60 * SEC,
        ca_renew_before: 30 * SEC,
        serving_validity: 24 * SEC,
        serving_renew_before: 12 * SEC,
        ca_settle: 3 * SEC,
    };
    p.check().expect("the test policy fits together");
    p
}

/// Write `files` into `dir` the way kubelet updates a Secret volume: a new timestamped
/// directory, a `..data_tmp` symlink to it renamed over `..data` (atomic), and per-key
/// symlinks `key -> ..data/key` created once.
fn publish_like_kubelet(
    dir: &Path,
    files: &BTreeMap<String, Vec<u8>>,
    n: u64,
) -> std::io::Result<()> {
    let stamp = format!("..{n:06}");
    let target = dir.join(&stamp);
    std::fs::create_dir(&target)?;
    for (k, v) in files {
        std::fs::write(target.join(k), v)?;
    }
    let tmp = dir.join("..data_tmp");
    let _ = std::fs::remove_file(&tmp);
    std::os::unix::fs::symlink(&stamp, &tmp)?;
    std::fs::rename(&tmp, dir.join("..data"))?;
    for k in files.keys() {
        let link = dir.join(k);
        if std::fs::symlink_metadata(&link).is_err() {
            std::os::unix::fs::symlink(format!("..data/{k}"), &link)?;
        }
    }
    for e in std::fs::read_dir(dir)?.flatten() {
        let name = e.file_name().to_string_lossy().into_owned();
        if name.starts_with("..0") && name != stamp {
            let _ = std::fs::remove_dir_all(e.path());
        }
    }
    Ok(())
}

fn secret_files(s: &Secret) -> BTreeMap<String, Vec<u8>> {
    s.data
        .as_ref()
        .map(|d| d.iter().map(|(k, v)| (k.clone(), v.0.clone())).collect())
        .unwrap_or_default()
}

/// An allow-all admission router that counts what it answers.
fn allow_router(seen: Arc<AtomicU64>) -> axum::Router {
    axum::Router::new().route(
        "/validate",
        axum::routing::post(move |axum::Json(review): axum::Json<Value>| {
            let seen = seen.clone();
            async move {
                seen.fetch_add(1, Ordering::SeqCst);
                axum::Json(json!({
                    "apiVersion": "admission.k8s.io/v1",
                    "kind": "AdmissionReview",
                    "response": {"uid": review["request"]["uid"], "allowed": true}
                }))
            }
        }),
    )
}

fn webhook_configuration(name: &str, namespace: &str, port: u16) -> ValidatingWebhookConfiguration {
    ValidatingWebhookConfiguration {
        metadata: ObjectMeta {
            name: Some(name.into()),
            ..Default::default()
        },
        webhooks: Some(vec![ValidatingWebhook {
            name: "rotation.holdfast.dev".into(),
            admission_review_versions: vec!["v1".into()],
            side_effects: "None".into(),
            failure_policy: Some("Fail".into()),
            timeout_seconds: Some(10),
            client_config: WebhookClientConfig {
                url: Some(format!("https://127.0.0.1:{port}/validate")),
                // Injected by the reconcile.
                ca_bundle: None,
                service: None,
            },
            namespace_selector: Some(LabelSelector {
                match_labels: Some(BTreeMap::from([(
                    "kubernetes.io/metadata.name".to_string(),
                    namespace.to_string(),
                )])),
                ..Default::default()
            }),
            rules: Some(vec![RuleWithOperations {
                api_groups: Some(vec!["".into()]),
                api_versions: Some(vec!["v1".into()]),
                operations: Some(vec!["CREATE".into()]),
                resources: Some(vec!["configmaps".into()]),
                scope: Some("Namespaced".into()),
            }]),
            ..Default::default()
        }]),
    }
}

/// A fresh TLS handshake with the server, trusting only `bundle_pem`; the leaf it served.
async fn probe(port: u16, bundle_pem: &[u8]) -> anyhow::Result<Vec<u8>> {
    use rustls::pki_types::{CertificateDer, ServerName, pem::PemObject};
    let mut roots = rustls::RootCertStore::empty();
    for c in CertificateDer::pem_slice_iter(bundle_pem) {
        roots.add(c?)?;
    }
    let cfg = rustls::ClientConfig::builder()
        .with_root_certificates(roots)
        .with_no_client_auth();
    let connector = tokio_rustls::TlsConnector::from(Arc::new(cfg));
    let tcp = tokio::net::TcpStream::connect(("127.0.0.1", port)).await?;
    let name = ServerName::try_from("127.0.0.1")?;
    let tls = tokio::time::timeout(Duration::from_secs(5), connector.connect(name, tcp)).await??;
    let (_, conn) = tls.get_ref();
    let leaf = conn
        .peer_certificates()
        .and_then(|c| c.first())
        .map(|c| c.as_ref().to_vec())
        .ok_or_else(|| anyhow::anyhow!("no peer certificate"))?;
    Ok(leaf)
}

/// The server's connection metrics that moved, one `name{labels} value` each.
fn connection_counters(registry: &prometheus_client::registry::Registry) -> String {
    let mut text = String::new();
    if prometheus_client::encoding::text::encode(&mut text, registry).is_err() {
        return "(not encodable)".into();
    }
    text.lines()
        .filter(|l| !l.starts_with('#') && !l.ends_with(" 0"))
        .collect::<Vec<_>>()
        .join(", ")
}

#[derive(Default)]
struct Tally {
    admitted: AtomicU64,
    failures: std::sync::Mutex<Vec<String>>,
}

#[tokio::test]
async fn webhook_keeps_admitting_across_serving_and_ca_rotations() {
    let _ = rustls::crypto::ring::default_provider().install_default();
    let cp = ControlPlane::shared();
    let ns = cp.namespace("rotation").await.expect("namespace");
    let admin = cp.client(Identity::Admin).await.expect("admin");
    let controller = cp.client(Identity::Controller).await.expect("controller");
    let user = cp.client(Identity::User).await.expect("user");

    // The webhook's port is needed for the configuration; bind it first with a throwaway
    // certificate, then serve from the Secret's files.
    let vol = tempfile::tempdir().expect("tempdir");
    let files = CertFiles {
        cert: vol.path().join("tls.crt"),
        key: vol.path().join("tls.key"),
    };
    // The chart's configuration name: the controller's roles let it patch that one only.
    let config_name = holdfast_tests::rbac::RELEASE.to_owned();
    let config = CertConfig {
        namespace: ns.clone(),
        ca_secret: "holdfast-ca".into(),
        ca_common_name: "holdfast-rotation-test".into(),
        serving: vec![ServingSecret {
            name: "holdfast-webhook-tls".into(),
            dns_names: vec!["127.0.0.1".into()],
        }],
        mutating_webhooks: vec![],
        validating_webhooks: vec![config_name.clone()],
        policy: policy(),
        check_interval: SEC,
        hold_api_ca: None,
    };

    // First pass: the CA and the serving certificate, before the configuration exists.
    let first = certs::reconcile(&controller, &config)
        .await
        .expect("first reconcile");
    assert!(matches!(first.authority, AuthorityDecision::Generate(_)));
    let secrets: Api<Secret> = Api::namespaced(admin.clone(), &ns);
    let mut generation = 0u64;
    let tls = secrets.get("holdfast-webhook-tls").await.expect("secret");
    let mut published = secret_files(&tls);
    publish_like_kubelet(vol.path(), &published, generation).expect("publish");
    // The server's connection counters go into the report: a connection it refused at accept
    // (a cap) or whose handshake failed is what an admission failure here would come from.
    let mut registry = prometheus_client::registry::Registry::default();
    let options = TlsOptions {
        metrics: ConnectionMetrics::register(&mut registry),
        ..TlsOptions::default()
    };
    let server = TlsServer::bind_with("127.0.0.1:0".parse().expect("addr"), files.clone(), options)
        .await
        .expect("bind");
    let port = server.local_addr().expect("addr").port();
    let stop = CancellationToken::new();
    let seen = Arc::new(AtomicU64::new(0));
    tokio::spawn(server.serve(allow_router(seen.clone()), stop.clone()));

    let vwcs: Api<ValidatingWebhookConfiguration> = Api::all(admin.clone());
    vwcs.create(
        &PostParams::default(),
        &webhook_configuration(&config_name, &ns, port),
    )
    .await
    .expect("register the webhook");
    let injected = certs::reconcile(&controller, &config)
        .await
        .expect("inject");
    assert_eq!(
        injected.injections,
        vec![(
            format!("validating/{config_name}"),
            certs::Injection::Injected
        )]
    );

    // Wait until the apiserver calls the webhook.
    let cms: Api<ConfigMap> = Api::namespaced(user.clone(), &ns);
    let cm = |name: String| ConfigMap {
        metadata: ObjectMeta {
            name: Some(name),
            ..Default::default()
        },
        ..Default::default()
    };
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    let mut warm = 0;
    while seen.load(Ordering::SeqCst) == 0 {
        warm += 1;
        let _ = cms
            .create(&PostParams::default(), &cm(format!("warm-{warm}")))
            .await;
        assert!(
            tokio::time::Instant::now() < deadline,
            "the webhook was never called"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let seen_before = seen.load(Ordering::SeqCst);

    // The controller (reconcile every second) and kubelet (sync every second).
    let ca_rotations = Arc::new(AtomicU64::new(0));
    let issued = Arc::new(AtomicU64::new(0));
    let reconcile_errors = Arc::new(std::sync::Mutex::new(Vec::<String>::new()));
    let controller_task = {
        let (stop, config, client) = (stop.clone(), config.clone(), controller.clone());
        let (ca_rotations, issued, errors) = (
            ca_rotations.clone(),
            issued.clone(),
            reconcile_errors.clone(),
        );
        tokio::spawn(async move {
            while !stop.is_cancelled() {
                match certs::reconcile(&client, &config).await {
                    Ok(o) => {
                        if o.authority == AuthorityDecision::Rotate {
                            ca_rotations.fetch_add(1, Ordering::SeqCst);
                        }
                        for (_, d) in &o.serving {
                            if matches!(d, ServingDecision::Issue(_)) {
                                issued.fetch_add(1, Ordering::SeqCst);
                            }
                        }
                    }
                    // A conflict is retried on the next pass; anything else is recorded.
                    Err(certs::CertsError::Conflict(_)) => {}
                    Err(e) => {
                        if let Ok(mut v) = errors.lock() {
                            v.push(e.to_string());
                        }
                    }
                }
                tokio::time::sleep(SEC).await;
            }
        })
    };
    let kubelet_task = {
        let (stop, secrets, dir) = (stop.clone(), secrets.clone(), PathBuf::from(vol.path()));
        tokio::spawn(async move {
            while !stop.is_cancelled() {
                if let Ok(s) = secrets.get("holdfast-webhook-tls").await {
                    let now = secret_files(&s);
                    if now != published {
                        generation += 1;
                        if publish_like_kubelet(&dir, &now, generation).is_ok() {
                            published = now;
                        }
                    }
                }
                tokio::time::sleep(SEC).await;
            }
        })
    };

    // Admissions, continuously, from two clients.
    let tally = Arc::new(Tally::default());
    let mut drivers = Vec::new();
    for w in 0..2 {
        let (stop, cms, tally) = (stop.clone(), cms.clone(), tally.clone());
        drivers.push(tokio::spawn(async move {
            let mut i = 0u64;
            while !stop.is_cancelled() {
                i += 1;
                let obj = ConfigMap {
                    metadata: ObjectMeta {
                        name: Some(format!("c{w}-{i}")),
                        ..Default::default()
                    },
                    ..Default::default()
                };
                match cms.create(&PostParams::default(), &obj).await {
                    Ok(_) => {
                        tally.admitted.fetch_add(1, Ordering::SeqCst);
                    }
                    Err(e) => {
                        if let Ok(mut f) = tally.failures.lock() {
                            f.push(format!("c{w}-{i}: {e}"));
                        }
                    }
                }
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        }));
    }

    // Fresh handshakes trusting only the injected caBundle; which CA signed each served leaf.
    let mut probe_failures = Vec::new();
    let mut served_leaves = BTreeSet::new();
    let mut served_issuers = BTreeSet::new();
    let end = tokio::time::Instant::now() + RUN_FOR;
    while tokio::time::Instant::now() < end {
        let vwc = vwcs.get(&config_name).await.expect("get configuration");
        let bundle = vwc
            .webhooks
            .as_ref()
            .and_then(|w| w.first())
            .and_then(|w| w.client_config.ca_bundle.clone())
            .map(|b: ByteString| b.0)
            .unwrap_or_default();
        match probe(port, &bundle).await {
            Ok(leaf) => {
                let cas = CertificateInfo::parse_pem_all(&String::from_utf8_lossy(&bundle))
                    .unwrap_or_default();
                if let Ok(info) = CertificateInfo::from_der(&leaf)
                    && let Some(ca) = cas.iter().find(|ca| info.is_signed_by(ca))
                {
                    served_issuers.insert(ca.der().to_vec());
                }
                served_leaves.insert(leaf);
            }
            Err(e) => probe_failures.push(format!("{e:#}")),
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    stop.cancel();
    for d in drivers {
        let _ = d.await;
    }
    let _ = controller_task.await;
    let _ = kubelet_task.await;

    let failures = tally.failures.lock().map(|f| f.clone()).unwrap_or_default();
    let admitted = tally.admitted.load(Ordering::SeqCst);
    let called = seen.load(Ordering::SeqCst) - seen_before;
    let errors = reconcile_errors
        .lock()
        .map(|e| e.clone())
        .unwrap_or_default();
    let report = format!(
        "admitted {admitted}, webhook called {called}, failures {}, CA rotations {}, serving certificates issued {}, \
         leaves served {}, CAs behind them {}, probe failures {:?}, reconcile errors {errors:?}, \
         the server's connection counters: {}",
        failures.len(),
        ca_rotations.load(Ordering::SeqCst),
        issued.load(Ordering::SeqCst),
        served_leaves.len(),
        served_issuers.len(),
        probe_failures,
        connection_counters(&registry),
    );
    eprintln!("{report}");
    assert!(
        failures.is_empty(),
        "admissions failed during rotation: {failures:#?}\n{report}"
    );
    assert!(probe_failures.is_empty(), "{report}");
    assert!(errors.is_empty(), "{report}");
    assert!(
        admitted >= 200,
        "too few admissions to mean anything: {report}"
    );
    assert!(
        called >= admitted,
        "every admission went through the webhook: {report}"
    );
    assert!(ca_rotations.load(Ordering::SeqCst) >= 2, "{report}");
    assert!(issued.load(Ordering::SeqCst) >= 5, "{report}");
    assert!(
        served_leaves.len() >= 5,
        "the server really switched certificates: {report}"
    );
    assert!(
        served_issuers.len() >= 3,
        "leaves of at least three CAs were served: {report}"
    );

    let _ = vwcs.delete(&config_name, &DeleteParams::default()).await;
}

/// A ConfigMap of the hold API CA's name that the controller cannot write (made immutable by
/// someone before it, or after deleting the controller's) does not stop the reconcile: the
/// serving certificates are still issued and renewed, since an expired one would fail closed
/// every write the webhook guards; the CA is simply not published until the ConfigMap goes.
#[tokio::test]
async fn a_ca_configmap_the_controller_cannot_write_does_not_stop_the_serving_certificates() {
    let cp = ControlPlane::shared();
    let ns = cp.namespace("ca-squat").await.expect("namespace");
    let admin = cp.client(Identity::Admin).await.expect("admin");
    let controller = cp.client(Identity::Controller).await.expect("controller");
    let name = format!("{}-hold-api-ca", holdfast_tests::rbac::RELEASE);
    let squat = ConfigMap {
        metadata: ObjectMeta {
            name: Some(name.clone()),
            ..Default::default()
        },
        data: Some(BTreeMap::from([(
            "ca.crt".to_owned(),
            "not a CA".to_owned(),
        )])),
        immutable: Some(true),
        ..Default::default()
    };
    let cms: Api<ConfigMap> = Api::namespaced(admin.clone(), &ns);
    cms.create(&PostParams::default(), &squat)
        .await
        .expect("the squat");
    let config = CertConfig {
        namespace: ns.clone(),
        ca_secret: "holdfast-ca".into(),
        ca_common_name: "holdfast-squat-test".into(),
        serving: vec![ServingSecret {
            name: "holdfast-webhook-tls".into(),
            dns_names: vec!["127.0.0.1".into()],
        }],
        mutating_webhooks: vec![],
        validating_webhooks: vec![],
        policy: policy(),
        check_interval: SEC,
        hold_api_ca: Some(holdfast_controller::hold_api_ca::Published {
            namespace: ns.clone(),
            name: name.clone(),
        }),
    };
    let outcome = certs::reconcile(&controller, &config)
        .await
        .expect("the reconcile goes on past the CA it cannot publish");
    assert!(!outcome.ca_published, "nothing was published");
    let secrets: Api<Secret> = Api::namespaced(admin.clone(), &ns);
    let tls = secrets
        .get("holdfast-webhook-tls")
        .await
        .expect("the serving certificate was issued all the same");
    assert!(
        tls.data.is_some_and(|d| d.contains_key("tls.crt")),
        "a certificate in the serving Secret"
    );
    assert_eq!(
        cms.get(&name).await.expect("the squat").data,
        squat.data,
        "the squat is left as it was"
    );
}
