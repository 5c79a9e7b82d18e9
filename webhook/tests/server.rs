//! The webhook as the apiserver reaches it: over TLS on a real socket, with the admin port,
//! certificate reload through a Secret volume's symlink swap, and graceful drain.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use futures::future::BoxFuture;
use holdfast_certs::CertificateAuthority;
use holdfast_core::mode::Mode;
use holdfast_core::policy::Identities;
use holdfast_core::snapshot::RuntimeRef;
use holdfast_serve::CertFiles;
use holdfast_webhook::metrics::Metrics;
use holdfast_webhook::runtime_lookup::{LookupError, RuntimeLookup};
use holdfast_webhook::{Admission, ConnectionOptions, Limits, RunningWebhook, ServeOptions};
use prometheus_client::registry::Registry;
use serde_json::{Value, json};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// A runtime read that takes `wait` and finds version "42".
struct SlowRuntimes {
    wait: Duration,
}

impl RuntimeLookup for SlowRuntimes {
    fn resource_version<'a>(
        &'a self,
        _namespace: Option<&'a str>,
        _runtime: &'a RuntimeRef,
    ) -> BoxFuture<'a, Result<Option<String>, LookupError>> {
        Box::pin(async move {
            tokio::time::sleep(self.wait).await;
            Ok(Some("42".to_owned()))
        })
    }
}

/// A Secret volume as kubelet writes it: `tls.crt -> ..data/tls.crt`, `..data -> ..v1`.
struct SecretVolume {
    dir: tempfile::TempDir,
    version: usize,
}

impl SecretVolume {
    fn new(cert: &str, key: &str) -> Self {
        let mut v = SecretVolume {
            dir: tempfile::tempdir().unwrap(),
            version: 0,
        };
        v.write(cert, key);
        std::os::unix::fs::symlink("..data/tls.crt", v.dir.path().join("tls.crt")).unwrap();
        std::os::unix::fs::symlink("..data/tls.key", v.dir.path().join("tls.key")).unwrap();
        v
    }

    /// Write a new timestamped directory and swap `..data` to it atomically (a rename).
    fn write(&mut self, cert: &str, key: &str) {
        self.version += 1;
        let name = format!(
            "..2026_11_29_12_00_0{}.{}",
            self.version,
            1000 + self.version
        );
        let data = self.dir.path().join(&name);
        std::fs::create_dir(&data).unwrap();
        std::fs::write(data.join("tls.crt"), cert).unwrap();
        std::fs::write(data.join("tls.key"), key).unwrap();
        let tmp = self.dir.path().join("..data_tmp");
        std::os::unix::fs::symlink(&name, &tmp).unwrap();
        std::fs::rename(&tmp, self.dir.path().join("..data")).unwrap();
    }

    fn files(&self) -> CertFiles {
        CertFiles {
            cert: self.path("tls.crt"),
            key: self.path("tls.key"),
        }
    }

    fn path(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }
}

fn ca() -> CertificateAuthority {
    CertificateAuthority::generate("webhook-test-ca", Duration::from_secs(3600)).unwrap()
}

async fn start(files: CertFiles, runtimes: Arc<dyn RuntimeLookup>) -> RunningWebhook {
    holdfast_serve::install_crypto_provider();
    let mut registry = Registry::default();
    let metrics = Metrics::register(&mut registry);
    let admission = Arc::new(Admission::new(
        Mode::Plain,
        Identities::new(["controller"], ["trainer"], ["gc"], ["kueue"]),
        runtimes,
        metrics,
        Limits::DEFAULT,
    ));
    RunningWebhook::start(
        ServeOptions {
            addr: "127.0.0.1:0".parse().unwrap(),
            admin_addr: "127.0.0.1:0".parse().unwrap(),
            cert: files,
        },
        admission,
        registry,
    )
    .await
    .expect("start the webhook")
}

fn client(ca: &CertificateAuthority) -> reqwest::Client {
    holdfast_serve::install_crypto_provider();
    reqwest::Client::builder()
        .use_rustls_tls()
        .add_root_certificate(reqwest::Certificate::from_pem(ca.cert_pem().as_bytes()).unwrap())
        .tls_info(true)
        .pool_max_idle_per_host(0)
        .build()
        .unwrap()
}

fn snapshot_delete_review() -> Value {
    json!({
        "apiVersion": "admission.k8s.io/v1",
        "kind": "AdmissionReview",
        "request": {
            "uid": "u-1",
            "resource": {"group": "", "version": "v1", "resource": "configmaps"},
            "name": "mnist-runtime-snapshot",
            "namespace": "team-a",
            "operation": "DELETE",
            "userInfo": {"username": "alice"},
            "oldObject": {"metadata": {"name": "mnist-runtime-snapshot", "namespace": "team-a",
                "ownerReferences": [{"apiVersion": "trainer.kubeflow.org/v1alpha1", "kind": "TrainJob",
                    "name": "mnist", "uid": "u-9", "controller": true}]}},
        }
    })
}

fn trainjob_create_review() -> Value {
    json!({
        "apiVersion": "admission.k8s.io/v1",
        "kind": "AdmissionReview",
        "request": {
            "uid": "u-2",
            "resource": {"group": "trainer.kubeflow.org", "version": "v1alpha1", "resource": "trainjobs"},
            "name": "mnist",
            "namespace": "team-a",
            "operation": "CREATE",
            "userInfo": {"username": "alice"},
            "object": {"metadata": {"name": "mnist"}, "spec": {"runtimeRef": {"name": "torch"}}},
        }
    })
}

async fn served_cert(client: &reqwest::Client, addr: std::net::SocketAddr) -> Vec<u8> {
    let resp = client
        .post(format!("https://127.0.0.1:{}/validate", addr.port()))
        .json(&snapshot_delete_review())
        .send()
        .await
        .expect("TLS request");
    let info = resp
        .extensions()
        .get::<reqwest::tls::TlsInfo>()
        .expect("tls info");
    info.peer_certificate().expect("peer certificate").to_vec()
}

fn der(pem: &str) -> Vec<u8> {
    holdfast_certs::CertificateInfo::parse_pem(pem)
        .unwrap()
        .der()
        .to_vec()
}

#[tokio::test]
async fn serves_admission_over_tls_with_h2_and_http1() {
    let ca = ca();
    let leaf = ca
        .issue_serving(&["127.0.0.1".into()], Duration::from_secs(600))
        .unwrap();
    let vol = SecretVolume::new(&leaf.cert_pem, &leaf.key_pem);
    let hook = start(
        vol.files(),
        Arc::new(SlowRuntimes {
            wait: Duration::ZERO,
        }),
    )
    .await;
    let url = format!("https://127.0.0.1:{}/validate", hook.addr().port());

    // h2 by ALPN, as the apiserver negotiates it.
    let resp = client(&ca)
        .post(&url)
        .json(&snapshot_delete_review())
        .send()
        .await
        .unwrap();
    assert_eq!(resp.version(), reqwest::Version::HTTP_2);
    assert_eq!(resp.status(), 200);
    let body: Value = resp.json().await.unwrap();
    assert_eq!(body["response"]["allowed"], false);
    assert_eq!(body["response"]["uid"], "u-1");

    // HTTP/1.1 over TLS 1.2 works as well.
    let http1 = reqwest::Client::builder()
        .use_rustls_tls()
        .add_root_certificate(reqwest::Certificate::from_pem(ca.cert_pem().as_bytes()).unwrap())
        .http1_only()
        .max_tls_version(reqwest::tls::Version::TLS_1_2)
        .build()
        .unwrap();
    let resp = http1
        .post(&url)
        .json(&snapshot_delete_review())
        .send()
        .await
        .unwrap();
    assert_eq!(resp.version(), reqwest::Version::HTTP_11);
    assert_eq!(resp.status(), 200);

    // Plain HTTP on the TLS port gets nothing.
    let plain = reqwest::Client::new()
        .post(format!("http://127.0.0.1:{}/validate", hook.addr().port()))
        .json(&snapshot_delete_review())
        .timeout(Duration::from_secs(5))
        .send()
        .await;
    assert!(
        plain.is_err() || !plain.unwrap().status().is_success(),
        "plain HTTP must not be served"
    );
    hook.stop().await.unwrap();
}

#[tokio::test]
async fn admin_port_reports_liveness_readiness_and_metrics() {
    let ca = ca();
    let leaf = ca
        .issue_serving(&["127.0.0.1".into()], Duration::from_secs(600))
        .unwrap();
    let vol = SecretVolume::new(&leaf.cert_pem, &leaf.key_pem);
    let hook = start(
        vol.files(),
        Arc::new(SlowRuntimes {
            wait: Duration::ZERO,
        }),
    )
    .await;
    assert!(hook.ready());
    let admin = format!("http://{}", hook.admin_addr());
    let plain = reqwest::Client::new();
    for path in ["/livez", "/healthz", "/readyz"] {
        let r = plain.get(format!("{admin}{path}")).send().await.unwrap();
        assert_eq!(r.status(), 200, "{path}");
    }
    served_cert(&client(&ca), hook.addr()).await;
    let text = plain
        .get(format!("{admin}/metrics"))
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    assert!(
        text.contains("holdfast_webhook_admissions_total{endpoint=\"validate\",kind=\"ConfigMap\",operation=\"DELETE\",verdict=\"denied\"} 1"),
        "{text}"
    );
    assert!(
        text.contains("holdfast_webhook_admission_duration_seconds_bucket"),
        "{text}"
    );
    hook.stop().await.unwrap();
}

#[tokio::test]
async fn a_missing_certificate_stops_the_start() {
    let dir = tempfile::tempdir().unwrap();
    holdfast_serve::install_crypto_provider();
    let admission = Arc::new(Admission::new(
        Mode::Plain,
        Identities::default(),
        Arc::new(SlowRuntimes {
            wait: Duration::ZERO,
        }),
        Metrics::unregistered(),
        Limits::DEFAULT,
    ));
    let err = RunningWebhook::start(
        ServeOptions {
            addr: "127.0.0.1:0".parse().unwrap(),
            admin_addr: "127.0.0.1:0".parse().unwrap(),
            cert: CertFiles {
                cert: dir.path().join("tls.crt"),
                key: dir.path().join("tls.key"),
            },
        },
        admission,
        Registry::default(),
    )
    .await
    .expect_err("no certificate, no webhook");
    assert!(err.to_string().contains("tls.crt"), "{err}");
}

#[tokio::test]
async fn certificate_is_reloaded_when_the_secret_volume_symlink_is_swapped() {
    let ca = ca();
    let first = ca
        .issue_serving(&["127.0.0.1".into()], Duration::from_secs(600))
        .unwrap();
    let mut vol = SecretVolume::new(&first.cert_pem, &first.key_pem);
    let hook = start(
        vol.files(),
        Arc::new(SlowRuntimes {
            wait: Duration::ZERO,
        }),
    )
    .await;
    assert_eq!(
        served_cert(&client(&ca), hook.addr()).await,
        der(&first.cert_pem)
    );

    // kubelet's update: new files in a new directory, `..data` swapped by rename. The
    // `tls.crt` symlink itself never changes.
    let second = ca
        .issue_serving(&["127.0.0.1".into()], Duration::from_secs(600))
        .unwrap();
    let link_before = std::fs::read_link(vol.path("tls.crt")).unwrap();
    vol.write(&second.cert_pem, &second.key_pem);
    assert_eq!(
        std::fs::read_link(vol.path("tls.crt")).unwrap(),
        link_before
    );
    assert_eq!(
        std::fs::read_to_string(vol.path("tls.crt")).unwrap(),
        second.cert_pem
    );

    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        // A fresh client each time: a resumed TLS session presents no certificate.
        let served = served_cert(&client(&ca), hook.addr()).await;
        if served == der(&second.cert_pem) {
            break;
        }
        assert_eq!(
            served,
            der(&first.cert_pem),
            "neither the old nor the new certificate"
        );
        assert!(
            Instant::now() < deadline,
            "the new certificate was not served within 20s"
        );
        tokio::time::sleep(Duration::from_millis(250)).await;
    }

    // A half-written pair (new certificate, old key) is not swapped in: the good one stays.
    let third = ca
        .issue_serving(&["127.0.0.1".into()], Duration::from_secs(600))
        .unwrap();
    vol.write(&third.cert_pem, &second.key_pem);
    tokio::time::sleep(Duration::from_secs(7)).await;
    assert_eq!(
        served_cert(&client(&ca), hook.addr()).await,
        der(&second.cert_pem)
    );
    hook.stop().await.unwrap();
}

#[tokio::test]
async fn stop_drains_in_flight_admissions_and_refuses_new_connections() {
    let ca = ca();
    let leaf = ca
        .issue_serving(&["127.0.0.1".into()], Duration::from_secs(600))
        .unwrap();
    let vol = SecretVolume::new(&leaf.cert_pem, &leaf.key_pem);
    let hook = start(
        vol.files(),
        Arc::new(SlowRuntimes {
            wait: Duration::from_millis(1000),
        }),
    )
    .await;
    let port = hook.addr().port();
    let c = client(&ca);
    let in_flight = {
        let c = c.clone();
        tokio::spawn(async move {
            c.post(format!("https://127.0.0.1:{port}/mutate"))
                .json(&trainjob_create_review())
                .send()
                .await
        })
    };
    tokio::time::sleep(Duration::from_millis(300)).await;
    let stopped = Instant::now();
    hook.stop().await.unwrap();
    assert!(
        stopped.elapsed() >= Duration::from_millis(400),
        "stop returned before the in-flight admission finished"
    );
    let resp = in_flight
        .await
        .unwrap()
        .expect("the in-flight admission completes");
    assert_eq!(resp.status(), 200);
    let body: Value = resp.json().await.unwrap();
    assert_eq!(body["response"]["allowed"], true);
    assert!(body["response"]["patch"].is_string(), "{body}");
    let after = c
        .post(format!("https://127.0.0.1:{port}/validate"))
        .json(&snapshot_delete_review())
        .send()
        .await;
    assert!(after.is_err(), "a stopped webhook accepts no connection");
}

#[tokio::test]
async fn on_shutdown_it_turns_unready_but_keeps_answering_for_the_delay() {
    let ca = ca();
    let leaf = ca
        .issue_serving(&["127.0.0.1".into()], Duration::from_secs(600))
        .unwrap();
    let vol = SecretVolume::new(&leaf.cert_pem, &leaf.key_pem);
    let hook = start(
        vol.files(),
        Arc::new(SlowRuntimes {
            wait: Duration::ZERO,
        }),
    )
    .await;
    let (addr, admin) = (hook.addr(), hook.admin_addr());
    let stopping = tokio::spawn(hook.stop_after(Duration::from_millis(1500)));
    tokio::time::sleep(Duration::from_millis(300)).await;
    let ready = reqwest::get(format!("http://{admin}/readyz"))
        .await
        .unwrap();
    assert_eq!(ready.status(), 503, "not ready once shutdown begins");
    let live = reqwest::get(format!("http://{admin}/livez")).await.unwrap();
    assert_eq!(live.status(), 200);
    // Admissions the apiserver still routes here are answered.
    served_cert(&client(&ca), addr).await;
    stopping.await.unwrap().unwrap();
    assert!(
        client(&ca)
            .post(format!("https://127.0.0.1:{}/validate", addr.port()))
            .json(&snapshot_delete_review())
            .send()
            .await
            .is_err()
    );
}

// ---------------------------------------------------------------------------------------------
// Connection bounds

async fn start_bounded(
    files: CertFiles,
    limits: holdfast_serve::ConnectionLimits,
    admission_limits: Limits,
) -> RunningWebhook {
    holdfast_serve::install_crypto_provider();
    let mut registry = Registry::default();
    let metrics = Metrics::register(&mut registry);
    let admission = Arc::new(Admission::new(
        Mode::Plain,
        Identities::new(["controller"], ["trainer"], ["gc"], ["kueue"]),
        Arc::new(SlowRuntimes {
            wait: Duration::ZERO,
        }),
        metrics,
        admission_limits,
    ));
    RunningWebhook::start_with(
        ServeOptions {
            addr: "127.0.0.1:0".parse().unwrap(),
            admin_addr: "127.0.0.1:0".parse().unwrap(),
            cert: files,
        },
        ConnectionOptions {
            limits,
            client_ca: None,
            ..ConnectionOptions::default()
        },
        admission,
        registry,
    )
    .await
    .expect("start the webhook")
}

type Tls = tokio_rustls::client::TlsStream<tokio::net::TcpStream>;

/// A TLS connection (HTTP/1.1 by ALPN) from `source` to the webhook, or the handshake's error.
async fn connect_from(
    ca: &CertificateAuthority,
    source: &str,
    addr: std::net::SocketAddr,
) -> std::io::Result<Tls> {
    use rustls::pki_types::pem::PemObject;
    let mut roots = rustls::RootCertStore::empty();
    roots
        .add(rustls::pki_types::CertificateDer::from_pem_slice(ca.cert_pem().as_bytes()).unwrap())
        .unwrap();
    let mut config = rustls::ClientConfig::builder()
        .with_root_certificates(roots)
        .with_no_client_auth();
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    let socket = tokio::net::TcpSocket::new_v4()?;
    socket.bind(format!("{source}:0").parse().unwrap())?;
    let tcp = socket.connect(addr).await?;
    let mut tls = tokio_rustls::TlsConnector::from(Arc::new(config))
        .connect(
            rustls::pki_types::ServerName::IpAddress(addr.ip().into()),
            tcp,
        )
        .await?;
    // The server's refusal (a closed connection) can show only on the first read or write.
    use tokio::io::AsyncWriteExt;
    tls.flush().await?;
    Ok(tls)
}

/// Whether the server has closed `tls` (a read ends), within 10 s.
async fn closed_by_server(tls: &mut Tls) -> bool {
    use tokio::io::AsyncReadExt;
    let mut buf = [0u8; 256];
    matches!(
        tokio::time::timeout(Duration::from_secs(10), tls.read(&mut buf)).await,
        Ok(Ok(0) | Err(_))
    )
}

fn metric(text: &str, series: &str) -> f64 {
    text.lines()
        .find_map(|l| l.strip_prefix(series)?.trim().parse().ok())
        .unwrap_or(0.0)
}

#[tokio::test]
async fn connections_over_a_cap_are_closed_at_accept_and_other_sources_still_get_in() {
    let ca = ca();
    let leaf = ca
        .issue_serving(&["127.0.0.1".into()], Duration::from_secs(600))
        .unwrap();
    let vol = SecretVolume::new(&leaf.cert_pem, &leaf.key_pem);
    let limits = holdfast_serve::ConnectionLimits {
        max_connections: 3,
        max_connections_per_source: 2,
        ..holdfast_serve::ConnectionLimits::DEFAULT
    };
    let hook = start_bounded(vol.files(), limits, Limits::DEFAULT).await;
    let addr = hook.addr();
    let admin = format!("http://{}/metrics", hook.admin_addr());
    let open = || async {
        metric(
            &reqwest::get(&admin).await.unwrap().text().await.unwrap(),
            "holdfast_webhook_connections_open ",
        )
    };

    // One source: two connections, and the third is closed at once.
    let _a1 = connect_from(&ca, "127.0.0.1", addr).await.expect("first");
    let _a2 = connect_from(&ca, "127.0.0.1", addr).await.expect("second");
    let mut a3 = connect_from(&ca, "127.0.0.1", addr).await;
    let refused = match &mut a3 {
        Err(_) => true,
        Ok(tls) => closed_by_server(tls).await,
    };
    assert!(refused, "a third connection from one source was kept");
    // Another source still gets in and is answered.
    let other = reqwest::Client::builder()
        .use_rustls_tls()
        .add_root_certificate(reqwest::Certificate::from_pem(ca.cert_pem().as_bytes()).unwrap())
        .local_address("127.0.0.2".parse::<std::net::IpAddr>().unwrap())
        .http1_only()
        .pool_max_idle_per_host(0)
        .build()
        .unwrap();
    let resp = other
        .post(format!("https://127.0.0.1:{}/validate", addr.port()))
        .json(&snapshot_delete_review())
        .send()
        .await
        .expect("a second source is served");
    assert_eq!(resp.status(), 200);
    drop(other);
    let deadline = Instant::now() + Duration::from_secs(10);
    while open().await > 2.0 {
        assert!(
            Instant::now() < deadline,
            "the second source's connection stayed open"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    // The total: a third source fills it, a fourth is closed at once.
    let _c1 = connect_from(&ca, "127.0.0.3", addr)
        .await
        .expect("third source");
    let mut c2 = connect_from(&ca, "127.0.0.4", addr).await;
    let refused = match &mut c2 {
        Err(_) => true,
        Ok(tls) => closed_by_server(tls).await,
    };
    assert!(refused, "a connection over the total was kept");
    let text = reqwest::get(&admin).await.unwrap().text().await.unwrap();
    assert!(
        metric(
            &text,
            "holdfast_webhook_connections_refused_total{reason=\"per_source\"}"
        ) >= 1.0,
        "{text}"
    );
    assert!(
        metric(
            &text,
            "holdfast_webhook_connections_refused_total{reason=\"total\"}"
        ) >= 1.0,
        "{text}"
    );
    hook.stop().await.unwrap();
}

#[tokio::test]
async fn a_trickled_body_gets_408_and_its_connection_is_closed_while_admissions_go_on() {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let ca = ca();
    let leaf = ca
        .issue_serving(&["127.0.0.1".into()], Duration::from_secs(600))
        .unwrap();
    let vol = SecretVolume::new(&leaf.cert_pem, &leaf.key_pem);
    let hook = start_bounded(
        vol.files(),
        holdfast_serve::ConnectionLimits::DEFAULT,
        Limits {
            max_concurrent: 1,
            body_read_timeout: Duration::from_millis(500),
            ..Limits::DEFAULT
        },
    )
    .await;
    let addr = hook.addr();
    let mut slow = connect_from(&ca, "127.0.0.1", addr).await.expect("connect");
    slow.write_all(
        b"POST /validate HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\nContent-Length: 100000\r\n\r\n{\"",
    )
    .await
    .unwrap();
    slow.flush().await.unwrap();
    // The only decision permit is not the slow client's: a whole review is answered.
    let resp = client(&ca)
        .post(format!("https://127.0.0.1:{}/validate", addr.port()))
        .json(&snapshot_delete_review())
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 200);
    // The slow one gets 408, and then the connection ends.
    let mut answer = Vec::new();
    let read = tokio::time::timeout(Duration::from_secs(10), slow.read_to_end(&mut answer)).await;
    let text = String::from_utf8_lossy(&answer);
    assert!(text.starts_with("HTTP/1.1 408"), "{text}");
    assert!(
        read.is_ok(),
        "the connection stayed open after the 408: {text}"
    );
    hook.stop().await.unwrap();
}

#[tokio::test]
async fn an_idle_connection_is_closed() {
    let ca = ca();
    let leaf = ca
        .issue_serving(&["127.0.0.1".into()], Duration::from_secs(600))
        .unwrap();
    let vol = SecretVolume::new(&leaf.cert_pem, &leaf.key_pem);
    let limits = holdfast_serve::ConnectionLimits {
        idle_timeout: Duration::from_millis(400),
        ..holdfast_serve::ConnectionLimits::DEFAULT
    };
    let hook = start_bounded(vol.files(), limits, Limits::DEFAULT).await;
    let mut idle = connect_from(&ca, "127.0.0.1", hook.addr())
        .await
        .expect("connect");
    assert!(
        closed_by_server(&mut idle).await,
        "an idle connection was kept"
    );
    hook.stop().await.unwrap();
}
