//! A flood of slow-body connections against the webhook (issue #12): while ~300 clients from
//! six loopback addresses (six "pods") hold connections to the real `holdfast-webhook`
//! binary, each POSTing a review to `/validate` or `/mutate` with a 6 MB `Content-Length`
//! and trickling the body at 2 bytes a second, over HTTP/2 and HTTP/1.1, the writes that
//! depend on the webhook must still land:
//!
//! * the **holder's writes**: as holdfast's controller (the chart's ServiceAccount token), a
//!   hold and a release of a TrainJob, each an UPDATE through both of holdfast's webhooks;
//! * an **admin's permitted writes** the webhook sees: creating managed TrainJobs (mutating
//!   and validating webhooks) and editing them (validating);
//! * and a plain user's protected edits are still **refused by the webhook's own denial**,
//!   not by `failurePolicy: Fail`.
//!
//! The webhook runs with its defaults (the chart's) and is registered with the chart's
//! configurations (`timeoutSeconds: 5`, `failurePolicy: Fail`). The apiserver reaches it
//! from 127.0.0.1; the attackers bind 127.0.0.2–127.0.0.7. Every attacker loop is bounded:
//! it stops by itself [`FLOOD_FOR`] after the flood starts, and sends only to loopback.
//!
//! Before the fix (permits taken before the body was read) this test failed: see the README's
//! reliability table for the figures. The webhook binary must be built first
//! (`cargo build -p holdfast-webhook`).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use super::metric;
use bytes::Bytes;
use holdfast_tests::holdfast::{
    WebhookReplica, owned_control_plane, register_webhook as register, serving_cert,
};
use holdfast_tests::objects::trainjob;
use holdfast_tests::registration::DEFAULT_TIMEOUT_SECONDS;
use holdfast_tests::{ControlPlane, Identity};
use http_body_util::StreamBody;
use hyper::body::Frame;
use kube::api::{Api, DynamicObject, Patch, PatchParams, PostParams};
use serde_json::{Value, json};
use std::collections::BTreeMap;
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpSocket;
use tokio::time::Instant;

/// Attacker connections.
const ATTACKERS: usize = 300;
/// Distinct source addresses (127.0.0.2 ..): distinct pods.
const SOURCES: usize = 6;
/// The whole flood stops by itself this long after it starts.
const FLOOD_FOR: Duration = Duration::from_secs(40);
/// Each attacker starts at most this many requests.
const MAX_REQUESTS_PER_ATTACKER: usize = 60;
/// Declared body size: under the webhook's 6 MiB limit, so it is not refused by length.
const DECLARED_BODY: usize = 6_000_000;
/// The trickle: this many bytes every second.
const TRICKLE_BYTES: usize = 2;
/// Writes of each kind during the flood.
const HOLD_CYCLES: usize = 5;
const ADMIN_JOBS: usize = 8;
const USER_EDITS: usize = 8;
/// The flood is under way once this many attacker requests are in flight at once.
const ESTABLISHED: usize = 120;
/// How long an attacker waits before reconnecting after its connection ended.
const RECONNECT_AFTER: Duration = Duration::from_millis(500);

const HOLD: &str = "holdfast.dev/hold-instance";
const HOLD_REASON: &str = "holdfast.dev/hold-reason";
const MANAGED: &str = "holdfast.dev/managed";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_flood_of_slow_bodies_from_pods_starves_neither_the_holder_nor_admin_writes() {
    let _one = super::ONE_AT_A_TIME.lock().await;
    let cp = owned_control_plane().await;
    let ns = cp.namespace("faults-flood").await.expect("namespace");
    let (cert, key) = serving_cert(&cp, "flood");
    let mut replica = WebhookReplica::start(&cp, "flood", &cert, &key, &[]);
    replica.wait_ready().await;
    register(&cp, &ns, replica.port, DEFAULT_TIMEOUT_SECONDS).await;

    let admin = cp.client(Identity::Admin).await.expect("admin");
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

    let before = replica.metrics().await;
    let flood = Flood::start(&cp, replica.addr());
    let established = flood.wait_established().await;
    println!(
        "flood under way: {established} attacker requests in flight at once ({})",
        flood.stats.summary()
    );

    let writes = Arc::new(Writes::default());
    let holder = tokio::spawn(holder(
        cp.client(Identity::Controller).await.expect("controller"),
        ns.clone(),
        flood.ends,
        writes.clone(),
    ));
    let admin_task = tokio::spawn(admin_writes(
        admin.clone(),
        ns.clone(),
        flood.ends,
        writes.clone(),
    ));
    let user = tokio::spawn(user_edits(
        cp.client(Identity::User).await.expect("alice"),
        ns.clone(),
        flood.ends,
        writes.clone(),
    ));
    holder.await.expect("holder");
    admin_task.await.expect("admin");
    user.await.expect("user");
    let flood_report = flood.stats.summary();
    let still_flooding = Instant::now() < flood.ends;
    // The webhook cuts a trickled body off at its body deadline (2 s). On an idle machine the
    // writes above can all land sooner than that: let the flood go on (while it lasts, at
    // most 15 s) until the webhook has cut one off, so that how it held is measured too.
    let errors = "holdfast_webhook_request_errors_total";
    let cut_by = Instant::now() + Duration::from_secs(15);
    while Instant::now() < cut_by && Instant::now() < flood.ends {
        let now = replica.metrics().await;
        if metric(&now, errors, &[("reason", "body_timeout")])
            > metric(&before, errors, &[("reason", "body_timeout")])
        {
            break;
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    let attack = flood.stop().await;
    let after = replica.metrics().await;

    println!("{}", writes.report());
    println!("attackers: {attack}");
    let delta = |name: &str, labels: &[(&str, &str)]| {
        metric(&after, name, labels) - metric(&before, name, labels)
    };
    println!(
        "webhook: {} body timeouts (408), {} shed (503), {} request timeouts (504), \
         {} connections refused at a per-source cap, {} at the total cap, \
         {} connections closed for a slow request, {} reviews answered",
        delta(errors, &[("reason", "body_timeout")]),
        delta(errors, &[("reason", "overloaded")]),
        delta(errors, &[("reason", "timeout")]),
        delta(
            "holdfast_webhook_connections_refused_total",
            &[("reason", "per_source")]
        ),
        delta(
            "holdfast_webhook_connections_refused_total",
            &[("reason", "total")]
        ),
        delta(
            "holdfast_webhook_connections_closed_total",
            &[("reason", "slow_request")]
        ),
        delta("holdfast_webhook_admissions_total", &[]),
    );
    assert!(
        replica.proc.running(),
        "the webhook exited:\n{}",
        replica.proc.log_tail(30)
    );

    // The promises.
    writes.assert_all_landed(Actor::Holder, 2 * HOLD_CYCLES);
    writes.assert_all_landed(Actor::Admin, 2 * ADMIN_JOBS);
    writes.assert_all_denied_by_the_webhook(USER_EDITS);
    assert!(
        still_flooding,
        "the writes outlasted the flood ({flood_report}): they were not all made under it\n{}",
        writes.report()
    );

    // How: no attacker request ever reached a decision, and the webhook cut them off.
    assert_eq!(
        attack.answered(200),
        0,
        "an attacker's trickled body was decided: {attack}"
    );
    assert!(delta(errors, &[("reason", "body_timeout")]) > 0.0);
    assert_eq!(
        delta(errors, &[("reason", "overloaded")]),
        0.0,
        "admissions were shed during the flood"
    );
    assert!(
        delta(
            "holdfast_webhook_connections_refused_total",
            &[("reason", "per_source")]
        ) > 0.0,
        "50 connections per source never met the per-source cap"
    );
    drop(replica);
    cp.stop();
}

// ---------------------------------------------------------------------------------------
// The writes that must land
// ---------------------------------------------------------------------------------------

#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum Actor {
    /// holdfast's controller: hold and release.
    Holder,
    /// An admin: managed TrainJob creates and edits.
    Admin,
    /// A plain user: protected edits, to be denied.
    User,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum Outcome {
    Landed,
    DeniedByWebhook,
    RefusedByFailurePolicy,
    OtherError,
    /// Not sent: the flood was over.
    NotSent,
}

#[derive(Default)]
struct Writes {
    counts: Mutex<BTreeMap<(Actor, Outcome), usize>>,
    messages: Mutex<Vec<String>>,
    took: Mutex<BTreeMap<Actor, Duration>>,
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
            let text = match e {
                kube::Error::Api(s) => format!("{} {}", s.code, s.message),
                e => e.to_string(),
            };
            let mut m = self.messages.lock().unwrap();
            if m.len() < 6 && !m.iter().any(|seen| seen.ends_with(&text)) {
                m.push(format!("{actor:?}: {text}"));
            }
        }
        *self
            .counts
            .lock()
            .unwrap()
            .entry((actor, outcome))
            .or_default() += 1;
        let mut t = self.took.lock().unwrap();
        let longest = t.entry(actor).or_default();
        *longest = (*longest).max(took);
    }

    fn not_sent(&self, actor: Actor, n: usize) {
        *self
            .counts
            .lock()
            .unwrap()
            .entry((actor, Outcome::NotSent))
            .or_default() += n;
    }

    fn count(&self, actor: Actor, outcome: Outcome) -> usize {
        self.counts
            .lock()
            .unwrap()
            .get(&(actor, outcome))
            .copied()
            .unwrap_or_default()
    }

    fn report(&self) -> String {
        let mut out = String::from("writes during the flood (actor, outcome: count):\n");
        for ((a, o), n) in self.counts.lock().unwrap().iter() {
            out.push_str(&format!("  {a:?}, {o:?}: {n}\n"));
        }
        for (a, t) in self.took.lock().unwrap().iter() {
            out.push_str(&format!("  {a:?}: longest write {t:?}\n"));
        }
        for m in self.messages.lock().unwrap().iter() {
            out.push_str(&format!("  {m}\n"));
        }
        out
    }

    #[track_caller]
    fn assert_all_landed(&self, actor: Actor, planned: usize) {
        assert_eq!(
            self.count(actor, Outcome::Landed),
            planned,
            "not every write of {actor:?} landed\n{}",
            self.report()
        );
    }

    #[track_caller]
    fn assert_all_denied_by_the_webhook(&self, planned: usize) {
        assert_eq!(
            self.count(Actor::User, Outcome::DeniedByWebhook),
            planned,
            "not every protected edit was denied by the webhook itself\n{}",
            self.report()
        );
    }
}

fn dynamic(v: Value) -> DynamicObject {
    serde_json::from_value(v).expect("object json")
}

/// The holder: [`HOLD_CYCLES`] holds and releases of `target`, as the hold executor writes
/// them in plain mode (read, then an update preconditioned on what was read).
async fn holder(controller: kube::Client, ns: String, ends: Instant, writes: Arc<Writes>) {
    let tjs = Api::<DynamicObject>::namespaced_with(
        controller,
        &ns,
        &holdfast_cluster::resources::trainjob(),
    );
    for i in 0..HOLD_CYCLES {
        for hold in [true, false] {
            if Instant::now() >= ends {
                let left = 2 * (HOLD_CYCLES - i) - usize::from(!hold);
                writes.not_sent(Actor::Holder, left);
                return;
            }
            let started = Instant::now();
            let r = async {
                let mut tj = tjs.get("target").await?;
                let annotations = tj.metadata.annotations.get_or_insert_default();
                if hold {
                    annotations.insert(HOLD.into(), (i + 1).to_string());
                    annotations.insert(HOLD_REASON.into(), "flood test".into());
                } else {
                    annotations.remove(HOLD);
                    annotations.remove(HOLD_REASON);
                }
                tj.data["spec"]["suspend"] = json!(hold);
                tjs.replace("target", &PostParams::default(), &tj).await
            }
            .await;
            writes.record(Actor::Holder, &r, started.elapsed());
        }
    }
}

/// The admin: [`ADMIN_JOBS`] managed TrainJobs created (both webhooks) and each edited
/// (the validating one: it carries `holdfast.dev/managed`).
async fn admin_writes(admin: kube::Client, ns: String, ends: Instant, writes: Arc<Writes>) {
    let tjs =
        Api::<DynamicObject>::namespaced_with(admin, &ns, &holdfast_cluster::resources::trainjob());
    for i in 0..ADMIN_JOBS {
        if Instant::now() >= ends {
            writes.not_sent(Actor::Admin, 2 * (ADMIN_JOBS - i));
            return;
        }
        let name = format!("admin-{i}");
        let mut tj = trainjob(&name, "no-such-runtime");
        tj["metadata"]["labels"] = json!({MANAGED: "true"});
        let started = Instant::now();
        let created = tjs.create(&PostParams::default(), &dynamic(tj)).await;
        writes.record(Actor::Admin, &created, started.elapsed());
        if created.is_err() {
            writes.not_sent(Actor::Admin, 1);
            continue;
        }
        let started = Instant::now();
        let patch = Patch::Merge(
            json!({"metadata": {"annotations": {"example.com/note": format!("edit {i}")}}}),
        );
        let r = tjs.patch(&name, &PatchParams::default(), &patch).await;
        writes.record(Actor::Admin, &r, started.elapsed());
    }
}

/// The plain user: [`USER_EDITS`] attempts to set the hold annotation on `target`.
async fn user_edits(alice: kube::Client, ns: String, ends: Instant, writes: Arc<Writes>) {
    let tjs =
        Api::<DynamicObject>::namespaced_with(alice, &ns, &holdfast_cluster::resources::trainjob());
    for i in 0..USER_EDITS {
        if Instant::now() >= ends {
            writes.not_sent(Actor::User, USER_EDITS - i);
            return;
        }
        let started = Instant::now();
        let patch = Patch::Merge(json!({"metadata": {"annotations": {HOLD: format!("evil-{i}")}}}));
        let r = tjs.patch("target", &PatchParams::default(), &patch).await;
        writes.record(Actor::User, &r, started.elapsed());
    }
}

// ---------------------------------------------------------------------------------------
// The flood
// ---------------------------------------------------------------------------------------

/// What the attackers saw.
#[derive(Default)]
struct FloodStats {
    /// TLS sessions established.
    connected: AtomicUsize,
    /// Connections closed before or during the handshake (a cap, or the server).
    refused: AtomicUsize,
    /// Requests whose headers were sent.
    started: AtomicUsize,
    /// Requests in flight now, and the most at once.
    in_flight: AtomicUsize,
    most_in_flight: AtomicUsize,
    /// Requests ended by the connection closing, without an answer.
    cut: AtomicUsize,
    /// Answers, by status.
    answers: Mutex<BTreeMap<u16, usize>>,
}

impl FloodStats {
    fn begin(&self) {
        self.started.fetch_add(1, Ordering::SeqCst);
        let now = self.in_flight.fetch_add(1, Ordering::SeqCst) + 1;
        self.most_in_flight.fetch_max(now, Ordering::SeqCst);
    }

    fn end(&self, status: Option<u16>) {
        self.in_flight.fetch_sub(1, Ordering::SeqCst);
        match status {
            Some(s) => *self.answers.lock().unwrap().entry(s).or_default() += 1,
            None => {
                self.cut.fetch_add(1, Ordering::SeqCst);
            }
        }
    }

    fn answered(&self, status: u16) -> usize {
        self.answers
            .lock()
            .unwrap()
            .get(&status)
            .copied()
            .unwrap_or_default()
    }

    fn summary(&self) -> String {
        format!(
            "{} TLS sessions, {} connections refused or failed, {} requests started, \
             {} in flight now (at most {} at once), {} cut without an answer, answers by status {:?}",
            self.connected.load(Ordering::SeqCst),
            self.refused.load(Ordering::SeqCst),
            self.started.load(Ordering::SeqCst),
            self.in_flight.load(Ordering::SeqCst),
            self.most_in_flight.load(Ordering::SeqCst),
            self.cut.load(Ordering::SeqCst),
            self.answers.lock().unwrap()
        )
    }
}

impl std::fmt::Display for FloodStats {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.summary())
    }
}

struct Flood {
    ends: Instant,
    stop: Arc<AtomicBool>,
    stats: Arc<FloodStats>,
    tasks: Vec<tokio::task::JoinHandle<()>>,
}

#[derive(Clone, Copy, Debug)]
enum Proto {
    H1,
    H2,
}

impl Flood {
    fn start(cp: &ControlPlane, target: SocketAddr) -> Flood {
        let ends = Instant::now() + FLOOD_FOR;
        let stop = Arc::new(AtomicBool::new(false));
        let stats = Arc::new(FloodStats::default());
        let tasks = (0..ATTACKERS)
            .map(|i| {
                let source = IpAddr::V4(Ipv4Addr::new(127, 0, 0, 2 + (i % SOURCES) as u8));
                // Two in three over HTTP/2 (as the apiserver speaks), one in three HTTP/1.1.
                let proto = if i % 3 == 2 { Proto::H1 } else { Proto::H2 };
                let path = if i % 2 == 0 { "/validate" } else { "/mutate" };
                let attacker = Attacker {
                    source,
                    target,
                    proto,
                    path,
                    tls: tls_connector(cp.ca_pem(), proto),
                    ends,
                    stop: stop.clone(),
                    stats: stats.clone(),
                };
                tokio::spawn(attacker.run())
            })
            .collect();
        Flood {
            ends,
            stop,
            stats,
            tasks,
        }
    }

    /// Waits (at most 30 s) until [`ESTABLISHED`] attacker requests are in flight at once.
    async fn wait_established(&self) -> usize {
        let give_up = Instant::now() + Duration::from_secs(30);
        loop {
            let most = self.stats.most_in_flight.load(Ordering::SeqCst);
            if most >= ESTABLISHED {
                return most;
            }
            assert!(
                Instant::now() < give_up,
                "the flood did not build up within 30 s: {}",
                self.stats
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// Stops every attacker (each also stops by itself at `ends`) and waits for them.
    async fn stop(self) -> Arc<FloodStats> {
        self.stop.store(true, Ordering::SeqCst);
        for t in self.tasks {
            let _ = tokio::time::timeout(Duration::from_secs(10), t).await;
        }
        self.stats
    }
}

fn tls_connector(ca_pem: &str, proto: Proto) -> tokio_rustls::TlsConnector {
    use rustls_pki_types::pem::PemObject;
    holdfast_serve::install_crypto_provider();
    let mut roots = rustls::RootCertStore::empty();
    for c in rustls_pki_types::CertificateDer::pem_slice_iter(ca_pem.as_bytes()) {
        roots.add(c.expect("CA pem")).expect("CA");
    }
    let mut config = rustls::ClientConfig::builder()
        .with_root_certificates(roots)
        .with_no_client_auth();
    config.alpn_protocols = match proto {
        Proto::H1 => vec![b"http/1.1".to_vec()],
        Proto::H2 => vec![b"h2".to_vec()],
    };
    tokio_rustls::TlsConnector::from(Arc::new(config))
}

/// One attacker connection, reconnecting whenever it is closed, until the flood ends.
struct Attacker {
    source: IpAddr,
    target: SocketAddr,
    proto: Proto,
    path: &'static str,
    tls: tokio_rustls::TlsConnector,
    ends: Instant,
    stop: Arc<AtomicBool>,
    stats: Arc<FloodStats>,
}

type Tls = tokio_rustls::client::TlsStream<tokio::net::TcpStream>;

impl Attacker {
    fn over(&self) -> bool {
        self.stop.load(Ordering::SeqCst) || Instant::now() >= self.ends
    }

    async fn run(self) {
        let mut requests = 0;
        while !self.over() && requests < MAX_REQUESTS_PER_ATTACKER {
            let Some(tls) = self.connect().await else {
                self.stats.refused.fetch_add(1, Ordering::SeqCst);
                self.pause(Duration::from_millis(500)).await;
                continue;
            };
            self.stats.connected.fetch_add(1, Ordering::SeqCst);
            requests += match self.proto {
                Proto::H1 => self.http1(tls).await,
                Proto::H2 => self.http2(tls, MAX_REQUESTS_PER_ATTACKER - requests).await,
            };
            // Reconnect a moment later: a flood of handshakes would measure the machine's
            // two cores, not what a slow client can hold.
            self.pause(RECONNECT_AFTER).await;
        }
    }

    async fn pause(&self, d: Duration) {
        let until = (Instant::now() + d).min(self.ends);
        tokio::time::sleep_until(until).await;
    }

    async fn connect(&self) -> Option<Tls> {
        let socket = TcpSocket::new_v4().ok()?;
        socket.bind(SocketAddr::new(self.source, 0)).ok()?;
        let tcp = tokio::time::timeout(Duration::from_secs(5), socket.connect(self.target))
            .await
            .ok()?
            .ok()?;
        let name = rustls_pki_types::ServerName::IpAddress(self.target.ip().into());
        tokio::time::timeout(Duration::from_secs(5), self.tls.connect(name, tcp))
            .await
            .ok()?
            .ok()
    }

    /// One request per connection: headers, then the trickle, until an answer or the close.
    async fn http1(&self, mut tls: Tls) -> usize {
        let head = format!(
            "POST {} HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\nContent-Length: {DECLARED_BODY}\r\n\r\n",
            self.path
        );
        if tls.write_all(head.as_bytes()).await.is_err() {
            return 0;
        }
        self.stats.begin();
        let (mut rd, mut wr) = tokio::io::split(tls);
        let mut sent = 0;
        let mut buf = [0u8; 512];
        let mut tick = tokio::time::interval(Duration::from_secs(1));
        let status = loop {
            tokio::select! {
                _ = tokio::time::sleep_until(self.ends) => break None,
                n = rd.read(&mut buf) => match n {
                    Ok(n) if n > 0 => {
                        let text = String::from_utf8_lossy(&buf[..n]);
                        break text
                            .split_whitespace()
                            .nth(1)
                            .and_then(|s| s.parse::<u16>().ok());
                    }
                    _ => break None,
                },
                _ = tick.tick() => {
                    if self.stop.load(Ordering::SeqCst) {
                        break None;
                    }
                    if sent + TRICKLE_BYTES < DECLARED_BODY {
                        if wr.write_all(&[b' '; TRICKLE_BYTES]).await.is_err() {
                            break None;
                        }
                        let _ = wr.flush().await;
                        sent += TRICKLE_BYTES;
                    }
                }
            }
        };
        self.stats.end(status);
        1
    }

    /// Requests one after another on one HTTP/2 connection, each trickling its body until
    /// answered; a new connection when this one closes. Returns the requests started.
    async fn http2(&self, tls: Tls, budget: usize) -> usize {
        let io = hyper_util::rt::TokioIo::new(tls);
        let Ok((mut sender, conn)) =
            hyper::client::conn::http2::handshake(hyper_util::rt::TokioExecutor::new(), io).await
        else {
            return 0;
        };
        let driver = tokio::spawn(conn);
        let mut started = 0;
        while started < budget && !self.over() {
            if sender.ready().await.is_err() {
                break;
            }
            let (tx, rx) = tokio::sync::mpsc::channel::<Result<Frame<Bytes>, std::io::Error>>(4);
            let body = StreamBody::new(tokio_stream_from(rx));
            let req = http::Request::post(self.path)
                .header("host", "127.0.0.1")
                .header("content-type", "application/json")
                .header("content-length", DECLARED_BODY.to_string())
                .body(body)
                .expect("request");
            let answer = sender.send_request(req);
            self.stats.begin();
            started += 1;
            let mut answer = std::pin::pin!(answer);
            let mut tick = tokio::time::interval(Duration::from_secs(1));
            let mut sent = 0;
            let status = loop {
                tokio::select! {
                    _ = tokio::time::sleep_until(self.ends) => break None,
                    r = answer.as_mut() => break r.ok().map(|resp| resp.status().as_u16()),
                    _ = tick.tick() => {
                        if self.stop.load(Ordering::SeqCst) {
                            break None;
                        }
                        if sent + TRICKLE_BYTES < DECLARED_BODY {
                            let frame = Frame::data(Bytes::from_static(&[b' '; TRICKLE_BYTES]));
                            // A full channel or a gone stream: the next tick tries again, or
                            // the answer ends the loop.
                            if tx.try_send(Ok(frame)).is_ok() {
                                sent += TRICKLE_BYTES;
                            }
                        }
                    }
                }
            };
            self.stats.end(status);
            if status.is_none() {
                break;
            }
        }
        driver.abort();
        started
    }
}

/// A `Stream` of the frames sent on `rx` (the body of a trickling HTTP/2 request).
fn tokio_stream_from<T>(
    rx: tokio::sync::mpsc::Receiver<T>,
) -> impl futures::Stream<Item = T> + Send + Unpin + 'static
where
    T: Send + 'static,
{
    Box::pin(futures::stream::unfold(rx, |mut rx| async move {
        rx.recv().await.map(|item| (item, rx))
    }))
}
