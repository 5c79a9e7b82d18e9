//! Forged AdmissionReviews sent straight to the webhook's port. Without client certificates
//! the webhook cannot tell a review the apiserver sent from one anybody who reaches the port
//! wrote, and it believes the review's `userInfo`. Some reviews make it read the cluster: a
//! TrainJob being unsuspended (its Workloads' holds), a TrainJob CREATE (its runtime). A flood
//! of such reviews once held the webhook's decision permits while the reads ran, so the
//! apiserver's own reviews were shed and, past `timeoutSeconds`, refused by
//! `failurePolicy: Fail`. Here:
//!
//! * the webhook binary runs with the chart's defaults (64 decision permits, 16 lookup slots)
//!   and is registered with the chart's configurations (`timeoutSeconds: 5`, `Fail`);
//! * the namespace holds [`BALLAST`] Workloads with large annotations, so that listing it is
//!   costly (the fallback the webhook used to make when Kueue's label named no Workload);
//! * [`SOURCES`] loopback addresses (127.0.0.2 ..) open [`CONNECTIONS`] HTTP/2 connections
//!   each and keep [`STREAMS`] forged "alice unsuspends a TrainJob that ran under holdfast"
//!   reviews in flight on each, naming uids no Workload carries, for at most [`FLOOD_FOR`] and
//!   [`MAX_FORGED`] requests;
//! * meanwhile the holder (holdfast's controller identity) holds and releases a TrainJob
//!   [`HOLD_CYCLES`] times through the real apiserver, and a plain user tries [`USER_EDITS`]
//!   protected edits. Every hold write must land and every protected edit must be denied by
//!   the webhook itself, with no admission shed; the holder's latency is printed against an
//!   idle baseline taken in the same run.
//!
//! The webhook binary must be built first (`cargo build -p holdfast-webhook`); another build
//! can be measured by naming it in `HOLDFAST_FORGED_REVIEWS_WEBHOOK`.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use super::metric;
use bytes::Bytes;
use holdfast_tests::control_plane::free_port;
use holdfast_tests::holdfast::{
    WebhookReplica, binary, owned_control_plane, register_webhook as register, serving_cert,
};
use holdfast_tests::objects::trainjob;
use holdfast_tests::registration::DEFAULT_TIMEOUT_SECONDS;
use holdfast_tests::{ControlPlane, Identity};
use http_body_util::Full;
use kube::api::{Api, DynamicObject, Patch, PatchParams, PostParams};
use serde_json::{Value, json};
use std::collections::BTreeMap;
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::net::TcpSocket;
use tokio::time::Instant;

/// Distinct attacker source addresses (127.0.0.2 ..): distinct pods.
const SOURCES: usize = 4;
/// HTTP/2 connections per source (under the per-source cap of 32).
const CONNECTIONS: usize = 4;
/// Forged reviews in flight on each connection at once.
const STREAMS: usize = 16;
/// The whole flood stops by itself this long after it starts.
const FLOOD_FOR: Duration = Duration::from_secs(40);
/// And after this many forged reviews, in all.
const MAX_FORGED: usize = 400_000;
/// The flood is under way once this many forged reviews have been answered.
const UNDER_WAY: usize = 200;
/// Workloads in the namespace, each with an annotation of [`BALLAST_BYTES`].
const BALLAST: usize = 24;
const BALLAST_BYTES: usize = 100 * 1024;
/// Hold and release cycles, idle and under the flood; protected edits under the flood.
const HOLD_CYCLES: usize = 5;
const USER_EDITS: usize = 8;
/// Between two writes of one actor: the writes spread over seconds of the flood.
const PACE: Duration = Duration::from_millis(400);

const HOLD: &str = "holdfast.dev/hold-instance";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn forged_reviews_do_not_starve_the_apiservers_reviews() {
    let _one = super::ONE_AT_A_TIME.lock().await;
    let cp = owned_control_plane().await;
    let ns = cp.namespace("faults-forged").await.expect("namespace");
    let admin = cp.client(Identity::Admin).await.expect("admin");
    plant_ballast(&admin, &ns).await;

    let (cert, key) = serving_cert(&cp, "forged");
    let bin = std::env::var_os("HOLDFAST_FORGED_REVIEWS_WEBHOOK")
        .map(PathBuf::from)
        .unwrap_or_else(|| binary("holdfast-webhook"));
    let port = free_port().expect("port");
    let mut replica = WebhookReplica::start_binary(&cp, "forged", &bin, port, &cert, &key, &[]);
    replica.wait_ready().await;
    register(&cp, &ns, replica.port, DEFAULT_TIMEOUT_SECONDS).await;
    let tjs = Api::<DynamicObject>::namespaced_with(
        admin.clone(),
        &ns,
        &holdfast_cluster::resources::trainjob(),
    );
    tjs.create(
        &PostParams::default(),
        &dynamic(trainjob("target", "no-such-runtime")),
    )
    .await
    .expect("the TrainJob the holder holds");
    let controller = cp.client(Identity::Controller).await.expect("controller");
    let alice = cp.client(Identity::User).await.expect("alice");

    // The idle baseline, in the same run.
    let idle = Writes::default();
    holder(&controller, &ns, HOLD_CYCLES, &idle).await;
    let before = replica.metrics().await;

    let flood = Flood::start(&cp, replica.addr(), &ns);
    flood.wait_under_way().await;
    let under = Writes::default();
    tokio::join!(
        holder(&controller, &ns, HOLD_CYCLES, &under),
        user_edits(&alice, &ns, &under),
    );
    let still_flooding = !flood.over();
    let took = flood.started.elapsed();
    let forged = flood.stop().await;
    let after = replica.metrics().await;
    let delta = |name: &str, labels: &[(&str, &str)]| {
        metric(&after, name, labels) - metric(&before, name, labels)
    };
    let shed = delta(
        "holdfast_webhook_request_errors_total",
        &[("reason", "overloaded")],
    );
    println!(
        "forged reviews: {forged} in {took:?} ({:.0} answered a second)",
        forged.answered() as f64 / took.as_secs_f64()
    );
    println!(
        "webhook: {} reviews answered, {shed} shed (503), {} request timeouts (504)",
        delta("holdfast_webhook_admissions_total", &[]),
        delta(
            "holdfast_webhook_request_errors_total",
            &[("reason", "timeout")]
        ),
    );
    println!("holder idle: {}", idle.latencies(Actor::Holder));
    println!("holder under the flood: {}", under.latencies(Actor::Holder));
    println!("{}", under.report());
    assert!(
        replica.proc.running(),
        "the webhook exited:\n{}",
        replica.proc.log_tail(30)
    );

    // The promises: the apiserver's reviews were decided, with their correct answers.
    assert_eq!(
        under.count(Actor::Holder, Outcome::Landed),
        2 * HOLD_CYCLES,
        "not every hold write landed under the flood\n{}",
        under.report()
    );
    assert_eq!(
        under.count(Actor::User, Outcome::DeniedByWebhook),
        USER_EDITS,
        "not every protected edit was denied by the webhook itself\n{}",
        under.report()
    );
    assert_eq!(
        shed, 0.0,
        "the apiserver's or the flood's reviews were shed"
    );
    assert!(
        still_flooding,
        "the writes outlasted the flood ({forged}): they were not all made under it"
    );
    assert!(
        forged.answered() >= UNDER_WAY,
        "the flood was not answered: {forged}"
    );
    drop(replica);
    cp.stop();
}

/// [`BALLAST`] Workloads in `ns`, each with a large annotation: listing the namespace costs
/// the apiserver and the lister megabytes.
async fn plant_ballast(admin: &kube::Client, ns: &str) {
    let resource = holdfast_cluster::resources::workload();
    let api = Api::<DynamicObject>::namespaced_with(admin.clone(), ns, &resource);
    let filler = "x".repeat(BALLAST_BYTES);
    for i in 0..BALLAST {
        let w = json!({
            "apiVersion": resource.api_version,
            "kind": "Workload",
            "metadata": {"name": format!("ballast-{i}"), "annotations": {"example.com/filler": filler}},
            "spec": {"queueName": "q", "podSets": [{"name": "main", "count": 1, "template": {"spec": {
                "restartPolicy": "Never",
                "containers": [{"name": "c", "image": "registry.invalid/x"}]}}}]},
        });
        api.create(&PostParams::default(), &dynamic(w))
            .await
            .expect("ballast Workload");
    }
}

fn dynamic(v: Value) -> DynamicObject {
    serde_json::from_value(v).expect("object json")
}

// ---------------------------------------------------------------------------------------
// The apiserver's reviews
// ---------------------------------------------------------------------------------------

#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum Actor {
    Holder,
    User,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum Outcome {
    Landed,
    DeniedByWebhook,
    RefusedByFailurePolicy,
    OtherError,
}

#[derive(Default)]
struct Writes {
    counts: Mutex<BTreeMap<(Actor, Outcome), usize>>,
    took: Mutex<BTreeMap<Actor, Vec<Duration>>>,
    messages: Mutex<Vec<String>>,
}

impl Writes {
    fn record<T>(&self, actor: Actor, r: &Result<T, kube::Error>, took: Duration) {
        let outcome = match r {
            Ok(_) => Outcome::Landed,
            Err(kube::Error::Api(s))
                if s.code == 403 && s.message.contains(".validate.holdfast.dev\" denied") =>
            {
                Outcome::DeniedByWebhook
            }
            Err(kube::Error::Api(s)) if s.message.contains("failed calling webhook") => {
                Outcome::RefusedByFailurePolicy
            }
            Err(_) => Outcome::OtherError,
        };
        if let Err(e) = r
            && outcome != Outcome::DeniedByWebhook
        {
            let mut m = self.messages.lock().unwrap();
            if m.len() < 6 {
                let text: String = e.to_string().chars().take(200).collect();
                m.push(format!("{actor:?}: {text}"));
            }
        }
        *self
            .counts
            .lock()
            .unwrap()
            .entry((actor, outcome))
            .or_default() += 1;
        self.took
            .lock()
            .unwrap()
            .entry(actor)
            .or_default()
            .push(took);
    }

    fn count(&self, actor: Actor, outcome: Outcome) -> usize {
        self.counts
            .lock()
            .unwrap()
            .get(&(actor, outcome))
            .copied()
            .unwrap_or_default()
    }

    /// The median and the longest of `actor`'s writes.
    fn latencies(&self, actor: Actor) -> String {
        let mut t = self
            .took
            .lock()
            .unwrap()
            .get(&actor)
            .cloned()
            .unwrap_or_default();
        t.sort();
        match (t.get(t.len() / 2), t.last()) {
            (Some(median), Some(longest)) => {
                format!("{} writes, median {median:?}, longest {longest:?}", t.len())
            }
            _ => "no writes".to_owned(),
        }
    }

    fn report(&self) -> String {
        let mut out = String::from("writes under the flood (actor, outcome: count):\n");
        for ((a, o), n) in self.counts.lock().unwrap().iter() {
            out.push_str(&format!("  {a:?}, {o:?}: {n}\n"));
        }
        for m in self.messages.lock().unwrap().iter() {
            out.push_str(&format!("  {m}\n"));
        }
        out
    }
}

/// `cycles` holds and releases of `target` as the hold executor writes them in plain mode
/// (read, then an update preconditioned on the read), [`PACE`] apart.
async fn holder(controller: &kube::Client, ns: &str, cycles: usize, writes: &Writes) {
    let tjs = Api::<DynamicObject>::namespaced_with(
        controller.clone(),
        ns,
        &holdfast_cluster::resources::trainjob(),
    );
    for i in 0..cycles {
        for hold in [true, false] {
            tokio::time::sleep(PACE).await;
            let started = Instant::now();
            let r = async {
                let mut tj = tjs.get("target").await?;
                let annotations = tj.metadata.annotations.get_or_insert_default();
                if hold {
                    annotations.insert(HOLD.into(), (i + 1).to_string());
                } else {
                    annotations.remove(HOLD);
                }
                tj.data["spec"]["suspend"] = json!(hold);
                tjs.replace("target", &PostParams::default(), &tj).await
            }
            .await;
            writes.record(Actor::Holder, &r, started.elapsed());
        }
    }
}

/// [`USER_EDITS`] attempts by alice to set the hold annotation on `target`.
async fn user_edits(alice: &kube::Client, ns: &str, writes: &Writes) {
    let tjs = Api::<DynamicObject>::namespaced_with(
        alice.clone(),
        ns,
        &holdfast_cluster::resources::trainjob(),
    );
    for i in 0..USER_EDITS {
        tokio::time::sleep(PACE).await;
        let started = Instant::now();
        let patch = Patch::Merge(json!({"metadata": {"annotations": {HOLD: format!("evil-{i}")}}}));
        let r = tjs.patch("target", &PatchParams::default(), &patch).await;
        writes.record(Actor::User, &r, started.elapsed());
    }
}

// ---------------------------------------------------------------------------------------
// The forged reviews
// ---------------------------------------------------------------------------------------

#[derive(Default)]
struct Forged {
    sent: AtomicUsize,
    /// Answers by HTTP status (200: decided; 503: shed), and requests that got none.
    answers: Mutex<BTreeMap<u16, usize>>,
    failed: AtomicUsize,
    /// Of the decided: allowed, refused.
    allowed: AtomicUsize,
    refused: AtomicUsize,
}

impl Forged {
    fn answered(&self) -> usize {
        self.answers.lock().unwrap().values().sum()
    }
}

impl std::fmt::Display for Forged {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{} sent, answers by status {:?}, {} without an answer; decided: {} allowed, {} refused",
            self.sent.load(Ordering::SeqCst),
            self.answers.lock().unwrap(),
            self.failed.load(Ordering::SeqCst),
            self.allowed.load(Ordering::SeqCst),
            self.refused.load(Ordering::SeqCst),
        )
    }
}

struct Flood {
    started: Instant,
    ends: Instant,
    stop: Arc<AtomicBool>,
    stats: Arc<Forged>,
    tasks: Vec<tokio::task::JoinHandle<()>>,
}

impl Flood {
    fn start(cp: &ControlPlane, target: SocketAddr, ns: &str) -> Flood {
        let started = Instant::now();
        let ends = started + FLOOD_FOR;
        let stop = Arc::new(AtomicBool::new(false));
        let stats = Arc::new(Forged::default());
        let tls = tls_connector(cp.ca_pem());
        let tasks = (0..SOURCES * CONNECTIONS)
            .map(|i| {
                let source = IpAddr::V4(Ipv4Addr::new(127, 0, 0, 2 + (i % SOURCES) as u8));
                tokio::spawn(connection(
                    source,
                    target,
                    tls.clone(),
                    ns.to_owned(),
                    i,
                    ends,
                    stop.clone(),
                    stats.clone(),
                ))
            })
            .collect();
        Flood {
            started,
            ends,
            stop,
            stats,
            tasks,
        }
    }

    fn over(&self) -> bool {
        Instant::now() >= self.ends || self.stop.load(Ordering::SeqCst)
    }

    /// Waits (at most 30 s) until [`UNDER_WAY`] forged reviews have been answered.
    async fn wait_under_way(&self) {
        let give_up = Instant::now() + Duration::from_secs(30);
        while self.stats.answered() < UNDER_WAY {
            assert!(
                Instant::now() < give_up,
                "the flood did not get under way within 30 s: {}",
                self.stats
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        println!("flood under way: {}", self.stats);
    }

    async fn stop(self) -> Arc<Forged> {
        self.stop.store(true, Ordering::SeqCst);
        for t in self.tasks {
            let _ = tokio::time::timeout(Duration::from_secs(10), t).await;
        }
        self.stats
    }
}

fn tls_connector(ca_pem: &str) -> tokio_rustls::TlsConnector {
    use rustls_pki_types::pem::PemObject;
    holdfast_serve::install_crypto_provider();
    let mut roots = rustls::RootCertStore::empty();
    for c in rustls_pki_types::CertificateDer::pem_slice_iter(ca_pem.as_bytes()) {
        roots.add(c.expect("CA pem")).expect("CA");
    }
    let mut config = rustls::ClientConfig::builder()
        .with_root_certificates(roots)
        .with_no_client_auth();
    config.alpn_protocols = vec![b"h2".to_vec()];
    tokio_rustls::TlsConnector::from(Arc::new(config))
}

/// A forged review: `alice` unsuspends a TrainJob that ran under holdfast (it carries the
/// opened mark), whose uid no Workload's label names. The webhook allows it by its rules and
/// then reads the job's Workloads.
fn forged_review(ns: &str, n: usize) -> Bytes {
    let uid = format!("00000000-0000-4000-8000-{n:012}");
    let old = json!({
        "apiVersion": "trainer.kubeflow.org/v1alpha1",
        "kind": "TrainJob",
        "metadata": {"name": "forged", "namespace": ns, "uid": uid,
            "annotations": {"holdfast.dev/opened": "2026-12-01T00:00:00Z"}},
        "spec": {"suspend": true, "runtimeRef": {"name": "torch"}},
    });
    let mut new = old.clone();
    new["spec"]["suspend"] = json!(false);
    let review = json!({
        "apiVersion": "admission.k8s.io/v1",
        "kind": "AdmissionReview",
        "request": {
            "uid": format!("forged-{n}"),
            "kind": {"group": "trainer.kubeflow.org", "version": "v1alpha1", "kind": "TrainJob"},
            "resource": {"group": "trainer.kubeflow.org", "version": "v1alpha1", "resource": "trainjobs"},
            "name": "forged",
            "namespace": ns,
            "operation": "UPDATE",
            "userInfo": {"username": "alice", "groups": ["system:authenticated"]},
            "object": new,
            "oldObject": old,
            "dryRun": false,
        }
    });
    Bytes::from(review.to_string())
}

/// One attacker connection, [`STREAMS`] forged reviews in flight on it, reconnecting when it
/// closes, until the flood ends.
#[allow(clippy::too_many_arguments)]
async fn connection(
    source: IpAddr,
    target: SocketAddr,
    tls: tokio_rustls::TlsConnector,
    ns: String,
    index: usize,
    ends: Instant,
    stop: Arc<AtomicBool>,
    stats: Arc<Forged>,
) {
    let over = || stop.load(Ordering::SeqCst) || Instant::now() >= ends;
    while !over() {
        let Some(sender) = connect(source, target, &tls).await else {
            stats.failed.fetch_add(1, Ordering::SeqCst);
            tokio::time::sleep(Duration::from_millis(200)).await;
            continue;
        };
        let streams = (0..STREAMS).map(|s| {
            let mut sender = sender.clone();
            let stats = stats.clone();
            let ns = ns.clone();
            let stop = stop.clone();
            async move {
                let mut n = (index * STREAMS + s) * 1_000_000;
                while !(stop.load(Ordering::SeqCst) || Instant::now() >= ends) {
                    if stats.sent.fetch_add(1, Ordering::SeqCst) >= MAX_FORGED {
                        return;
                    }
                    n += 1;
                    let req = http::Request::post("/validate")
                        .header("host", "127.0.0.1")
                        .header("content-type", "application/json")
                        .body(Full::new(forged_review(&ns, n)))
                        .expect("request");
                    if sender.ready().await.is_err() {
                        stats.failed.fetch_add(1, Ordering::SeqCst);
                        return;
                    }
                    let answer =
                        tokio::time::timeout(Duration::from_secs(10), sender.send_request(req))
                            .await;
                    let Ok(Ok(resp)) = answer else {
                        stats.failed.fetch_add(1, Ordering::SeqCst);
                        return;
                    };
                    let status = resp.status().as_u16();
                    *stats.answers.lock().unwrap().entry(status).or_default() += 1;
                    if status == 200 {
                        use http_body_util::BodyExt;
                        let body = resp.into_body().collect().await.map(|b| b.to_bytes());
                        let allowed = body
                            .ok()
                            .and_then(|b| serde_json::from_slice::<Value>(&b).ok())
                            .and_then(|v| v.pointer("/response/allowed").and_then(Value::as_bool));
                        match allowed {
                            Some(true) => stats.allowed.fetch_add(1, Ordering::SeqCst),
                            _ => stats.refused.fetch_add(1, Ordering::SeqCst),
                        };
                    }
                }
            }
        });
        futures::future::join_all(streams).await;
    }
}

type Sender = hyper::client::conn::http2::SendRequest<Full<Bytes>>;

async fn connect(
    source: IpAddr,
    target: SocketAddr,
    tls: &tokio_rustls::TlsConnector,
) -> Option<Sender> {
    let socket = TcpSocket::new_v4().ok()?;
    socket.bind(SocketAddr::new(source, 0)).ok()?;
    let tcp = tokio::time::timeout(Duration::from_secs(5), socket.connect(target))
        .await
        .ok()?
        .ok()?;
    let name = rustls_pki_types::ServerName::IpAddress(target.ip().into());
    let stream = tokio::time::timeout(Duration::from_secs(5), tls.connect(name, tcp))
        .await
        .ok()?
        .ok()?;
    let io = hyper_util::rt::TokioIo::new(stream);
    let (sender, conn) =
        hyper::client::conn::http2::handshake(hyper_util::rt::TokioExecutor::new(), io)
            .await
            .ok()?;
    tokio::spawn(conn);
    Some(sender)
}
