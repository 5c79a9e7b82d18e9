//! Client-certificate authentication between the real apiserver and the real webhook.
//!
//! The apiserver is started with an admission configuration (`--admission-control-config-file`,
//! a `WebhookAdmissionConfiguration` for both webhook plugins) whose kubeconfig gives it a
//! client certificate for the webhook's host `127.0.0.1:PORT`, as Kubernetes documents for
//! authenticating apiservers to webhooks. The `holdfast-webhook` binary runs with
//! `--client-ca-file` naming the CA of that certificate. Then:
//!
//! * the apiserver's admissions work: the registration probes are denied by the webhook
//!   itself, the holder's hold lands, a plain user's protected edit is denied with the
//!   webhook's message;
//! * a client without a certificate, or with one from another CA, fails the TLS handshake and
//!   never reaches HTTP (no review is answered for it; the handshake failures are counted);
//! * a client with a certificate from the configured CA is answered;
//! * the CA file is re-read: after it is replaced with another CA, that CA's clients are
//!   served and the old one's refused.
//!
//! The webhook binary must be built first (`cargo build -p holdfast-webhook`).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use holdfast_certs::{CertificateAuthority, IssuedCertificate};
use holdfast_tests::control_plane::free_port;
use holdfast_tests::holdfast::{
    WebhookReplica, owned_control_plane_with, register_webhook as register, serving_cert,
};
use holdfast_tests::objects::trainjob;
use holdfast_tests::registration::DEFAULT_TIMEOUT_SECONDS;
use holdfast_tests::wait::wait_for;
use holdfast_tests::{Identity, control_plane::Options};
use kube::api::{Api, DynamicObject, Patch, PatchParams, PostParams};
use serde_json::json;
use std::time::Duration;

const HOLD: &str = "holdfast.dev/hold-instance";

fn ca(name: &str) -> CertificateAuthority {
    CertificateAuthority::generate(name, Duration::from_secs(3600)).expect("CA")
}

fn client_cert(ca: &CertificateAuthority, name: &str) -> IssuedCertificate {
    ca.issue_client(name, Duration::from_secs(3600))
        .expect("client certificate")
}

/// The apiserver's admission configuration: both webhook plugins read a kubeconfig whose
/// user `127.0.0.1:{port}` (the host and port of the webhook's URL) has a client certificate.
fn apiserver_extras(port: u16, cert: &IssuedCertificate) -> Options {
    let plugin = |name: &str| {
        format!(
            "- name: {name}\n  configuration:\n    apiVersion: apiserver.config.k8s.io/v1\n    kind: WebhookAdmissionConfiguration\n    kubeConfigFile: \"{{dir}}/webhook-kubeconfig.yaml\"\n"
        )
    };
    Options {
        apiserver_files: vec![
            ("webhook-client.crt".into(), cert.cert_pem.clone()),
            ("webhook-client.key".into(), cert.key_pem.clone()),
            (
                "webhook-kubeconfig.yaml".into(),
                format!(
                    "apiVersion: v1\nkind: Config\nusers:\n- name: \"127.0.0.1:{port}\"\n  user:\n    client-certificate: \"{{dir}}/webhook-client.crt\"\n    client-key: \"{{dir}}/webhook-client.key\"\n"
                ),
            ),
            (
                "admission.yaml".into(),
                format!(
                    "apiVersion: apiserver.config.k8s.io/v1\nkind: AdmissionConfiguration\nplugins:\n{}{}",
                    plugin("ValidatingAdmissionWebhook"),
                    plugin("MutatingAdmissionWebhook")
                ),
            ),
        ],
        apiserver_args: vec!["--admission-control-config-file={dir}/admission.yaml".into()],
        ..Options::default()
    }
}

/// A client that trusts the serving CA and presents `identity` (if any); no connection reuse.
fn client(serving_ca: &str, identity: Option<&IssuedCertificate>) -> reqwest::Client {
    holdfast_serve::install_crypto_provider();
    let mut b = reqwest::Client::builder()
        .use_rustls_tls()
        .add_root_certificate(reqwest::Certificate::from_pem(serving_ca.as_bytes()).unwrap())
        .pool_max_idle_per_host(0)
        .timeout(Duration::from_secs(10));
    if let Some(id) = identity {
        let pem = format!("{}{}", id.cert_pem, id.key_pem);
        b = b.identity(reqwest::Identity::from_pem(pem.as_bytes()).unwrap());
    }
    b.build().unwrap()
}

/// A review the webhook answers (a plain user deleting a snapshot: denied).
fn review() -> serde_json::Value {
    json!({
        "apiVersion": "admission.k8s.io/v1",
        "kind": "AdmissionReview",
        "request": {
            "uid": "direct",
            "resource": {"group": "", "version": "v1", "resource": "configmaps"},
            "name": "x-runtime-snapshot",
            "namespace": "default",
            "operation": "DELETE",
            "userInfo": {"username": "alice"},
            "oldObject": {"metadata": {"name": "x-runtime-snapshot", "namespace": "default"}},
        }
    })
}

/// Whether `client` gets an answer (any HTTP status) from the webhook.
async fn answered(client: &reqwest::Client, port: u16) -> Result<u16, String> {
    client
        .post(format!("https://127.0.0.1:{port}/validate"))
        .json(&review())
        .send()
        .await
        .map(|r| r.status().as_u16())
        .map_err(|e| format!("{e:?}"))
}

fn metric(text: &str, name: &str, label: &str) -> f64 {
    text.lines()
        .filter(|l| l.starts_with(name) && l.contains(label))
        .filter_map(|l| l.rsplit_once(' ')?.1.parse::<f64>().ok())
        .sum()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_client_certificates_required_only_certified_clients_reach_the_webhook() {
    let apiserver_ca = ca("apiserver-client-ca");
    let apiserver_cert = client_cert(&apiserver_ca, "kube-apiserver");
    let port = free_port().expect("port");
    let cp = owned_control_plane_with(apiserver_extras(port, &apiserver_cert)).await;
    let ns = cp.namespace("client-auth").await.expect("namespace");
    let client_ca = cp.dir().join("webhook-client-ca.crt");
    std::fs::write(&client_ca, apiserver_ca.cert_pem()).expect("write the client CA");
    let (cert, key) = serving_cert(&cp, "client-auth");
    let ca_flag = format!("--client-ca-file={}", client_ca.display());
    let mut replica = WebhookReplica::start_on(&cp, "client-auth", port, &cert, &key, &[&ca_flag]);
    replica.wait_ready().await;

    // The apiserver authenticates with its certificate: registration's probes are denied by
    // the webhook itself.
    register(&cp, &ns, port, DEFAULT_TIMEOUT_SECONDS).await;
    let admin = cp.client(Identity::Admin).await.expect("admin");
    Api::<DynamicObject>::namespaced_with(admin, &ns, &holdfast_cluster::resources::trainjob())
        .create(
            &PostParams::default(),
            &serde_json::from_value(trainjob("target", "no-such-runtime")).unwrap(),
        )
        .await
        .expect("create a TrainJob");
    let controller = cp.client(Identity::Controller).await.expect("controller");
    let tjs = Api::<DynamicObject>::namespaced_with(
        controller,
        &ns,
        &holdfast_cluster::resources::trainjob(),
    );
    let mut tj = tjs.get("target").await.expect("get");
    tj.metadata
        .annotations
        .get_or_insert_default()
        .insert(HOLD.into(), "1".into());
    tj.data["spec"]["suspend"] = json!(true);
    tjs.replace("target", &PostParams::default(), &tj)
        .await
        .expect("the holder's hold lands through both webhooks");
    let alice = cp.client(Identity::User).await.expect("alice");
    let err =
        Api::<DynamicObject>::namespaced_with(alice, &ns, &holdfast_cluster::resources::trainjob())
            .patch(
                "target",
                &PatchParams::default(),
                &Patch::Merge(json!({"metadata": {"annotations": {HOLD: "2"}}})),
            )
            .await
            .expect_err("a protected edit");
    assert!(
        err.to_string()
            .contains("jobs.validate.holdfast.dev\" denied the request"),
        "{err}"
    );

    // Direct clients: only a certificate from the configured CA gets an answer.
    let before = replica.metrics().await;
    let serving_ca = cp.ca_pem().to_owned();
    let none = answered(&client(&serving_ca, None), port).await;
    assert!(
        none.is_err(),
        "a client without a certificate was answered: {none:?}"
    );
    let stranger_ca = ca("stranger-ca");
    let stranger = client_cert(&stranger_ca, "stranger");
    let other = answered(&client(&serving_ca, Some(&stranger)), port).await;
    assert!(
        other.is_err(),
        "a certificate from another CA was answered: {other:?}"
    );
    let good = answered(
        &client(&serving_ca, Some(&client_cert(&apiserver_ca, "probe"))),
        port,
    )
    .await;
    assert_eq!(good, Ok(200));
    let after = replica.metrics().await;
    let failures = |m: &str| metric(m, "holdfast_webhook_tls_handshake_failures_total", "error");
    let answered_reviews = |m: &str| metric(m, "holdfast_webhook_admissions_total", "ConfigMap");
    println!(
        "no certificate: {none:?}\nanother CA: {other:?}\nhandshake failures counted: {}",
        failures(&after) - failures(&before)
    );
    assert!(failures(&after) - failures(&before) >= 2.0);
    assert_eq!(
        answered_reviews(&after) - answered_reviews(&before),
        1.0,
        "only the certified client's review was answered"
    );

    // The CA file is re-read: swap in the stranger's CA.
    std::fs::write(&client_ca, stranger_ca.cert_pem()).expect("rewrite the client CA");
    wait_for(
        "the webhook to trust the new client CA",
        Duration::from_secs(30),
        || async {
            (answered(&client(&serving_ca, Some(&stranger)), port).await == Ok(200)).then_some(())
        },
    )
    .await;
    let old = answered(&client(&serving_ca, Some(&apiserver_cert)), port).await;
    assert!(
        old.is_err(),
        "the replaced CA's certificate is still accepted: {old:?}"
    );
    drop(replica);
    cp.stop();
}
