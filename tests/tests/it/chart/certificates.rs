//! Certificates with exactly the chart's RBAC: self-managed ones injected and kept across
//! `helm upgrade` without rotating, and the hold API's CA published for any namespace to read,
//! by the reconcile or, with certificates of your own, copied from the webhook configuration.

use super::*;
use holdfast_certs::CertificateInfo;
use holdfast_controller::webhook_certs::{self as certs, CertConfig, Injection};
use holdfast_tests::wait::wait_for;
use k8s_openapi::api::core::v1::Secret;

/// The controller's certificate configuration, as the rendered Deployment asks for it.
fn cert_config_from_rendered(docs: &[Value]) -> CertConfig {
    controller_args_from_rendered(docs)
        .certs
        .config()
        .expect("config")
        .expect("self-managed")
}

async fn ca_bundles(admin: &kube::Client, name: &str) -> Vec<Option<Vec<u8>>> {
    let mut out = Vec::new();
    if let Some(v) = Api::<ValidatingWebhookConfiguration>::all(admin.clone())
        .get_opt(name)
        .await
        .expect("get vwc")
    {
        for w in v.webhooks.unwrap_or_default() {
            out.push(w.client_config.ca_bundle.map(|b| b.0));
        }
    }
    if let Some(m) = Api::<MutatingWebhookConfiguration>::all(admin.clone())
        .get_opt(name)
        .await
        .expect("get mwc")
    {
        for w in m.webhooks.unwrap_or_default() {
            out.push(w.client_config.ca_bundle.map(|b| b.0));
        }
    }
    out
}

async fn secret_versions(admin: &kube::Client, ns: &str, names: &[&str]) -> Vec<String> {
    let api: Api<Secret> = Api::namespaced(admin.clone(), ns);
    let mut out = Vec::new();
    for n in names {
        let s = api.get(n).await.expect("secret");
        out.push(s.metadata.resource_version.unwrap_or_default());
    }
    out
}

#[tokio::test]
async fn self_managed_certificates_work_with_the_charts_rbac_and_survive_helm_upgrade_without_rotating()
 {
    let _live = LIVE_WEBHOOKS.lock().await;
    // A real `helm install` into the control plane (no kubelet: the pods never run, which
    // does not matter to what is checked here).
    let r = InstalledRelease::install("hf-certs", "crt").await;
    let (admin, ns, name, helm) = (&r.admin, r.ns.as_str(), r.name.as_str(), &r.helm);
    let config = cert_config_from_rendered(&r.docs);
    assert!(
        ca_bundles(admin, name).await.iter().all(Option::is_none),
        "a fresh install has no caBundle until the controller injects it"
    );

    // The certificate reconcile, authenticated as the chart's controller ServiceAccount.
    let ctl = r.controller().await;
    let first = certs::reconcile(&ctl, &config)
        .await
        .expect("reconcile with exactly the chart's RBAC");
    assert!(first.changed());
    assert!(
        first
            .injections
            .iter()
            .all(|(_, i)| *i == Injection::Injected),
        "{:?}",
        first.injections
    );
    let bundle = first.bundle_pem.clone().into_bytes();
    let injected = ca_bundles(admin, name).await;
    assert_eq!(
        injected.len(),
        6,
        "three validating (the probe's among them) and three mutating entries (plain mode)"
    );
    assert!(
        injected
            .iter()
            .all(|b| b.as_deref() == Some(bundle.as_slice()))
    );
    let secrets = [
        "crt-holdfast-ca",
        "crt-holdfast-webhook-tls",
        "crt-holdfast-controller-tls",
    ];
    let tls = Api::<Secret>::namespaced(admin.clone(), ns)
        .get("crt-holdfast-webhook-tls")
        .await
        .expect("webhook secret");
    assert_eq!(tls.type_.as_deref(), Some("kubernetes.io/tls"));
    let cert = tls
        .data
        .as_ref()
        .and_then(|d| d.get("tls.crt"))
        .map(|b| String::from_utf8_lossy(&b.0).into_owned())
        .expect("tls.crt");
    let info = CertificateInfo::parse_pem(&cert).expect("parse");
    assert!(
        info.names
            .contains(&format!("crt-holdfast-webhook.{ns}.svc")),
        "{:?}",
        info.names
    );
    let versions = secret_versions(admin, ns, &secrets).await;

    // A second pass changes nothing.
    let again = certs::reconcile(&ctl, &config).await.expect("reconcile");
    assert!(!again.changed(), "{again:?}");

    // `helm upgrade` with a changed value, then `helm upgrade --force` (which replaces every
    // object): the caBundle stays (merge keeps the injected field; --force re-renders it from
    // the CA Secret by lookup), and the certificates are not rotated.
    r.helm("upgrade", &["--set", "logLevel=debug"])
        .expect("helm upgrade");
    assert_eq!(
        ca_bundles(admin, name).await,
        injected,
        "after helm upgrade"
    );
    // Helm 4 applies server-side, where replacing is refused: its replace is client-side.
    let force: &[&str] = if helm.major >= 4 {
        &["--force-replace", "--server-side=false"]
    } else {
        &["--force"]
    };
    r.helm("upgrade", &[force, &["--set", "logLevel=info"]].concat())
        .expect("helm upgrade --force");
    assert_eq!(
        ca_bundles(admin, name).await,
        injected,
        "after helm upgrade --force"
    );
    let after = certs::reconcile(&ctl, &config).await.expect("reconcile");
    assert!(
        !after.changed(),
        "an upgrade must not rotate anything: {after:?}"
    );
    assert_eq!(secret_versions(admin, ns, &secrets).await, versions);

    // Remove `patch` on webhook configurations from the chart's ClusterRole: injection fails,
    // naming the missing permission.
    let mut vwc = Api::<ValidatingWebhookConfiguration>::all(admin.clone())
        .get(name)
        .await
        .expect("vwc");
    for w in vwc.webhooks.iter_mut().flatten() {
        w.client_config.ca_bundle = Some(k8s_openapi::ByteString(b"stale".to_vec()));
    }
    // (An invalid PEM is refused by nobody: the apiserver only stores the bytes.)
    Api::<ValidatingWebhookConfiguration>::all(admin.clone())
        .replace(name, &PostParams::default(), &vwc)
        .await
        .expect("make the caBundle stale");
    let cut = without_verb(
        &r.docs,
        "ClusterRole",
        "crt-holdfast-controller",
        "validatingwebhookconfigurations",
        "patch",
    );
    rbac::apply(admin, &cut, ns, false)
        .await
        .expect("apply cut role");
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    let err = loop {
        match certs::reconcile(&ctl, &config).await {
            Err(e) => break e,
            Ok(_) => {
                assert!(
                    tokio::time::Instant::now() < deadline,
                    "the cut role never took effect"
                );
                // It may have re-injected before the cut took effect: make it stale again.
                let mut vwc = Api::<ValidatingWebhookConfiguration>::all(admin.clone())
                    .get(name)
                    .await
                    .expect("vwc");
                for w in vwc.webhooks.iter_mut().flatten() {
                    w.client_config.ca_bundle = Some(k8s_openapi::ByteString(b"stale".to_vec()));
                }
                let _ = Api::<ValidatingWebhookConfiguration>::all(admin.clone())
                    .replace(name, &PostParams::default(), &vwc)
                    .await;
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
        }
    };
    let msg = err.to_string();
    assert!(
        msg.contains("cannot patch resource \"validatingwebhookconfigurations\""),
        "{msg}"
    );

    // `helm uninstall` leaves the self-managed Secrets (helm never owned them) and removes
    // the webhook configurations.
    r.uninstall();
    assert!(ca_bundles(admin, name).await.is_empty());
    assert_eq!(secret_versions(admin, ns, &secrets).await.len(), 3);
}

/// The caBundle a CA rotation injects, across `helm upgrade` and `helm rollback`. After a
/// rotation (the controller's reconcile, as the chart's ServiceAccount, forced to rotate) the
/// injected bundle holds both CAs; `helm upgrade` renders that bundle through `lookup` and
/// changes nothing (under Helm 4's server-side apply it shares the field with the
/// `holdfast-controller` field manager: no conflict). A rollback to the revision rendered
/// before the rotation carries the old bundle: Helm 4 stops on the conflict, naming the
/// controller and the caBundle, until `--force-conflicts`; Helm 3 writes it. Either way the
/// old bundle is back only until the controller's next reconcile, which injects the current
/// one again: the window the upgrade page names.
#[tokio::test]
async fn a_rotated_ca_bundle_survives_helm_upgrade_and_a_rollback_to_the_old_one_is_reinjected() {
    let _live = LIVE_WEBHOOKS.lock().await;
    let r = InstalledRelease::install("hf-rot", "rot").await;
    let (admin, name) = (&r.admin, r.name.as_str());
    let config = cert_config_from_rendered(&r.docs);
    let ctl = r.controller().await;
    let every = |bundle: &[u8]| -> Vec<Option<Vec<u8>>> { vec![Some(bundle.to_vec()); 6] };

    // Revision 2: rendered with the first CA's bundle.
    let first = certs::reconcile(&ctl, &config).await.expect("reconcile");
    let old = first.bundle_pem.clone().into_bytes();
    r.helm("upgrade", &["--set", "logLevel=debug"])
        .expect("helm upgrade");
    assert_eq!(ca_bundles(admin, name).await, every(&old), "revision 2");

    // A CA rotation: a CA with less left than the renewal window is rotated.
    let mut rotate = config.clone();
    rotate.policy.ca_renew_before = rotate.policy.ca_validity;
    let rotated = certs::reconcile(&ctl, &rotate).await.expect("rotation");
    let new = rotated.bundle_pem.clone().into_bytes();
    assert_ne!(new, old, "a new CA in the bundle: {rotated:?}");
    assert_eq!(ca_bundles(admin, name).await, every(&new), "injected");

    // Revision 3: helm upgrade after the rotation keeps the injected bundle, no conflict.
    r.helm("upgrade", &["--set", "logLevel=info"])
        .expect("helm upgrade after a rotation");
    assert_eq!(
        ca_bundles(admin, name).await,
        every(&new),
        "after helm upgrade"
    );

    // A rollback to revision 2, rendered with the old bundle.
    r.rollback_over_the_controller(2, "caBundle", || async {
        assert_eq!(
            ca_bundles(admin, name).await,
            every(&new),
            "a refused rollback wrote nothing"
        );
    })
    .await;
    assert_eq!(
        ca_bundles(admin, name).await,
        every(&old),
        "the rollback wrote the old bundle"
    );
    let healed = certs::reconcile(&ctl, &config).await.expect("reconcile");
    assert!(healed.changed(), "{healed:?}");
    assert_eq!(
        ca_bundles(admin, name).await,
        every(&new),
        "the controller's next reconcile injects the current bundle again"
    );

    r.uninstall();
}

/// The hold API's CA is published in the ConfigMap `<fullname>-hold-api-ca`: written by the
/// certificate reconcile with exactly the chart's RBAC, readable by name (and by name only)
/// by a ServiceAccount of another namespace, and its `ca.crt` verifies the hold API's serving
/// certificate (and a client trusting another CA does not).
#[tokio::test]
async fn the_hold_api_ca_is_published_where_any_namespace_can_read_it() {
    let _live = LIVE_WEBHOOKS.lock().await;
    let r = InstalledRelease::install("hf-ca", "pub").await;
    let (cp, admin, ns) = (r.cp, &r.admin, r.ns.as_str());
    let config = cert_config_from_rendered(&r.docs);
    let ctl = r.controller().await;
    let outcome = certs::reconcile(&ctl, &config)
        .await
        .expect("reconcile with exactly the chart's RBAC");
    assert!(outcome.ca_published, "{outcome:?}");

    // dispatch, a ServiceAccount of another namespace, granted nothing but what every
    // authenticated user has.
    let tenant = cp.namespace("hf-ca-tenant").await.expect("namespace");
    let account = k8s_openapi::api::core::v1::ServiceAccount {
        metadata: ObjectMeta {
            name: Some("dispatch".into()),
            ..Default::default()
        },
        ..Default::default()
    };
    Api::namespaced(admin.clone(), &tenant)
        .create(&PostParams::default(), &account)
        .await
        .expect("ServiceAccount");
    let dispatch = cp
        .service_account_client(&tenant, "dispatch")
        .await
        .expect("token");
    let configmaps: Api<ConfigMap> = Api::namespaced(dispatch, ns);
    let published = wait_for("the reader grant", Duration::from_secs(30), || async {
        configmaps.get("pub-holdfast-hold-api-ca").await.ok()
    })
    .await;
    let ca = published
        .data
        .as_ref()
        .and_then(|d| d.get(holdfast_controller::hold_api_ca::KEY))
        .cloned()
        .expect("ca.crt");
    assert_eq!(ca, outcome.bundle_pem);
    let listed = configmaps.list(&Default::default()).await;
    assert!(
        matches!(&listed, Err(kube::Error::Api(e)) if e.code == 403),
        "only the one ConfigMap, by name: {listed:?}"
    );

    // The hold API's serving certificate, served: verified by the published CA only.
    let tls = Api::<Secret>::namespaced(admin.clone(), ns)
        .get("pub-holdfast-controller-tls")
        .await
        .expect("the hold API's Secret");
    let dir = tempfile::tempdir().expect("tempdir");
    let files = holdfast_serve::CertFiles {
        cert: dir.path().join("tls.crt"),
        key: dir.path().join("tls.key"),
    };
    for (key, path) in [("tls.crt", &files.cert), ("tls.key", &files.key)] {
        let bytes = tls
            .data
            .as_ref()
            .and_then(|d| d.get(key))
            .map(|b| b.0.clone())
            .expect(key);
        std::fs::write(path, bytes).expect("write");
    }
    holdfast_serve::install_crypto_provider();
    let server = holdfast_serve::TlsServer::bind("127.0.0.1:0".parse().expect("addr"), files)
        .await
        .expect("bind");
    let addr = server.local_addr().expect("addr");
    let stop = tokio_util::sync::CancellationToken::new();
    tokio::spawn(server.serve(axum::Router::new(), stop.clone()));
    let host = format!("pub-holdfast-controller.{ns}.svc");
    let trusting = |pem: &str| {
        reqwest::Client::builder()
            .add_root_certificate(reqwest::Certificate::from_pem(pem.as_bytes()).expect("PEM"))
            .resolve(&host, addr)
            .build()
            .expect("client")
    };
    let url = format!("https://{host}:{}/v1/openapi.json", addr.port());
    let answer = trusting(&ca).get(&url).send().await;
    assert!(answer.is_ok(), "the published CA verifies it: {answer:?}");
    let other = trusting(cp.ca_pem()).get(&url).send().await;
    assert!(other.is_err(), "another CA does not: {other:?}");
    stop.cancel();
    r.uninstall();
}

/// With certificates of your own (`certs.mode: secret`, and so with cert-manager), the
/// controller copies the caBundle the apiserver was given into the same ConfigMap, with
/// exactly the chart's RBAC and the flags its Deployment passes.
#[tokio::test]
async fn with_external_certificates_the_hold_api_ca_is_copied_from_the_webhook_configuration() {
    let _live = LIVE_WEBHOOKS.lock().await;
    let (_dir, ca_path, ca_pem) = ca_file();
    let r = InstalledRelease::install_with("hf-ca-ext", "ext", |i| {
        i.set("certs.mode=secret")
            .set("certs.secret.webhookSecretName=ext-tls")
            .set_file(format!("certs.secret.caBundle={}", ca_path.display()))
    })
    .await;
    let (admin, ns) = (r.admin.clone(), r.ns.as_str());
    let docs = &r.docs;
    let args = controller_args_from_rendered(docs);
    assert!(args.certs.config().expect("config").is_none(), "external");
    let to = args.certs.hold_api_ca().expect("published");
    assert_eq!(
        (to.namespace.as_str(), to.name.as_str()),
        (ns, "ext-holdfast-hold-api-ca")
    );
    let ctl = r.controller().await;
    let source = args.certs.hold_api_ca_source.clone();
    let written = wait_for(
        "the controller's grants",
        Duration::from_secs(30),
        || async {
            holdfast_controller::hold_api_ca::copy_once(&ctl, &source, &to)
                .await
                .ok()
        },
    )
    .await;
    assert!(written, "the first copy writes the ConfigMap");
    let published = Api::<ConfigMap>::namespaced(admin, ns)
        .get("ext-holdfast-hold-api-ca")
        .await
        .expect("the ConfigMap");
    assert_eq!(
        published
            .data
            .as_ref()
            .and_then(|d| d.get(holdfast_controller::hold_api_ca::KEY)),
        Some(&ca_pem)
    );
    assert!(
        !holdfast_controller::hold_api_ca::copy_once(&ctl, &source, &to)
            .await
            .expect("copy"),
        "an unchanged bundle is not written again"
    );
    r.uninstall();
}
