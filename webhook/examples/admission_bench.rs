//! Admission throughput and latency of holdfast-webhook, against a no-op server on the same
//! stack, measured in one run with one client.
//!
//! ```sh
//! cargo run --release -p holdfast-webhook --example admission_bench
//! cargo run --release -p holdfast-webhook --example admission_bench -- --connections 16 --seconds 10 --rate 1000
//! cargo run --release -p holdfast-webhook --example admission_bench -- --http2
//! ```
//!
//! Both servers listen on loopback behind the same TLS server (holdfast-serve: rustls, h2 and
//! http/1.1). The webhook serves its real router (`/validate`: limits, content-type check,
//! body read, AdmissionReview decode, policy, answer, metrics); the baseline is an axum route
//! that reads the body and returns a fixed `allowed: true` review. The client calls them as
//! the apiserver does: HTTPS POSTs of an AdmissionReview over kept-alive connections, by
//! default HTTP/1.1 with one connection per concurrent caller; with `--http2` all callers
//! share one multiplexed HTTP/2 connection, which is how the apiserver was seen calling
//! webhooks (`tests/tests/it/faults/webhook_server.rs`).
//!
//! The review is a typical snapshot ConfigMap UPDATE (object and oldObject of about 2 KiB
//! each, managedFields included) by the garbage collector, orphaning it: allowed, after the
//! policy compares data, binaryData, immutable, labels and annotations of both sides.
//!
//! Two measurements per server, in alternating one-second rounds so that whatever else the
//! machine is doing weighs on both alike:
//! - closed loop: `--connections` callers sending back to back for `--seconds`: admissions
//!   per second and p50/p99 latency;
//! - open loop at `--rate` requests per second for `--seconds`: each request dispatched on
//!   schedule in a task of its own (so a slow answer never delays the next one), latency
//!   measured from its dispatch; how far dispatch ever fell behind the schedule is printed
//!   too (tokio's timer has millisecond resolution).
//!
//! The process uses mimalloc, as the `holdfast-webhook` binary does. Last, the same review is
//! decoded, judged and answered in a loop on one thread, without the network: what the policy
//! path itself costs.
//!
//! Client and servers share the machine (and its cores); the ratio to the baseline is the
//! figure that carries over.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use axum::Router;
use axum::routing::post;
use clap::Parser;
use holdfast_certs::CertificateAuthority;
use holdfast_core::mode::Mode;
use holdfast_core::policy::request::decode_review;
use holdfast_core::policy::{Identities, validate};
use holdfast_serve::{CertFiles, TlsServer};
use holdfast_webhook::metrics::Metrics;
use holdfast_webhook::review::answer;
use holdfast_webhook::runtime_lookup::NoRuntimes;
use holdfast_webhook::{Admission, Limits, RunningWebhook, ServeOptions};
use prometheus_client::registry::Registry;
use serde_json::{Value, json};
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio_util::sync::CancellationToken;

/// The allocator `holdfast-webhook` itself uses, for the whole process: both servers and the
/// client.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

#[derive(Parser, Debug)]
struct Opts {
    /// Concurrent callers (one kept-alive HTTP/1.1 connection each) in the closed loop.
    #[arg(long, default_value_t = 16)]
    connections: usize,
    /// One-second rounds per server and measurement (the servers alternate).
    #[arg(long, default_value_t = 5)]
    seconds: u64,
    /// Requests per second of the open-loop measurement.
    #[arg(long, default_value_t = 1000)]
    rate: u64,
    /// HTTP/2, as the apiserver calls webhooks: every caller's requests multiplexed over one
    /// kept-alive connection (instead of one HTTP/1.1 connection per caller).
    #[arg(long)]
    http2: bool,
}

/// This process's CPU time, user and system (`/proc/self/stat`, in clock ticks of 10 ms).
fn process_cpu() -> Duration {
    let stat = std::fs::read_to_string("/proc/self/stat").unwrap_or_default();
    let after_name = stat.rsplit_once(')').map_or("", |(_, rest)| rest);
    // utime and stime are fields 14 and 15; the state, field 3, comes first after the name.
    let ticks: u64 = after_name
        .split_whitespace()
        .skip(11)
        .take(2)
        .filter_map(|v| v.parse::<u64>().ok())
        .sum();
    Duration::from_millis(ticks * 10)
}

/// HTTP/2 (one multiplexed connection) instead of HTTP/1.1 connections.
static HTTP2: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

fn http2() -> bool {
    HTTP2.load(std::sync::atomic::Ordering::Relaxed)
}

/// A client over HTTP/1.1 (`idle` kept-alive connections at most) or, with `--http2`, over
/// one HTTP/2 connection.
fn builder(ca: &CertificateAuthority, idle: usize) -> reqwest::Client {
    let b = reqwest::Client::builder()
        .use_rustls_tls()
        .add_root_certificate(reqwest::Certificate::from_pem(ca.cert_pem().as_bytes()).unwrap())
        .tcp_nodelay(true);
    let b = if http2() {
        b.http2_prior_knowledge()
    } else {
        b.http1_only().pool_max_idle_per_host(idle)
    };
    b.build().unwrap()
}

const GC: &str = "system:serviceaccount:kube-system:generic-garbage-collector";

fn snapshot_configmap(owned: bool) -> Value {
    let runtime_yaml = "apiVersion: trainer.kubeflow.org/v1alpha1\nkind: ClusterTrainingRuntime\nmetadata:\n  name: torch-distributed\n  labels:\n    trainer.kubeflow.org/framework: torch\nspec:\n  mlPolicy:\n    numNodes: 1\n    torch: {}\n  template:\n    spec:\n      replicatedJobs:\n        - name: node\n          template:\n            metadata:\n              labels:\n                trainer.kubeflow.org/trainjob-ancestor-step: trainer\n            spec:\n              template:\n                spec:\n                  containers:\n                    - name: node\n                      image: pytorch/pytorch:2.10.0-cuda12.8-cudnn9-runtime\n                      command: [torchrun, train.py]\n                      resources:\n                        limits:\n                          nvidia.com/gpu: 8\n";
    let mut cm = json!({
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {
            "name": "mnist-runtime-snapshot",
            "namespace": "team-a",
            "uid": "0b0c1f2e-8a4f-4d3c-9f51-3c1b2a7d9e10",
            "resourceVersion": "482913",
            "creationTimestamp": "2026-11-29T12:00:00Z",
            "labels": {"holdfast.dev/runtime-snapshot": "true"},
            "annotations": {
                "holdfast.dev/runtime-uid": "5d7e9a2b-1c3f-4e6a-8b9d-0f1e2d3c4b5a",
                "holdfast.dev/runtime-resource-version": "481200",
                "holdfast.dev/runtime-generation": "3",
                "holdfast.dev/runtime-sha256": "9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08",
            },
            "managedFields": [{
                "manager": "holdfast-controller",
                "operation": "Update",
                "apiVersion": "v1",
                "time": "2026-11-29T12:00:00Z",
                "fieldsType": "FieldsV1",
                "fieldsV1": {"f:data": {".": {}, "f:runtime": {}}, "f:metadata": {"f:annotations": {".": {}, "f:holdfast.dev/runtime-generation": {}, "f:holdfast.dev/runtime-resource-version": {}, "f:holdfast.dev/runtime-sha256": {}, "f:holdfast.dev/runtime-uid": {}}, "f:labels": {".": {}, "f:holdfast.dev/runtime-snapshot": {}}, "f:ownerReferences": {".": {}, "k:{\"uid\":\"7a1b2c3d-4e5f-6a7b-8c9d-0e1f2a3b4c5d\"}": {}}}}
            }],
        },
        "data": {"runtime": runtime_yaml},
    });
    if owned {
        cm["metadata"]["ownerReferences"] = json!([{
            "apiVersion": "trainer.kubeflow.org/v1alpha1", "kind": "TrainJob", "name": "mnist",
            "uid": "7a1b2c3d-4e5f-6a7b-8c9d-0e1f2a3b4c5d", "controller": true, "blockOwnerDeletion": true
        }]);
    }
    cm
}

fn review() -> Value {
    json!({
        "apiVersion": "admission.k8s.io/v1",
        "kind": "AdmissionReview",
        "request": {
            "uid": "705ab4f5-6393-11e8-b7cc-42010a800002",
            "kind": {"group": "", "version": "v1", "kind": "ConfigMap"},
            "resource": {"group": "", "version": "v1", "resource": "configmaps"},
            "requestKind": {"group": "", "version": "v1", "kind": "ConfigMap"},
            "requestResource": {"group": "", "version": "v1", "resource": "configmaps"},
            "name": "mnist-runtime-snapshot",
            "namespace": "team-a",
            "operation": "UPDATE",
            "userInfo": {"username": GC, "uid": "3f1e", "groups": ["system:serviceaccounts", "system:serviceaccounts:kube-system", "system:authenticated"]},
            "object": snapshot_configmap(false),
            "oldObject": snapshot_configmap(true),
            "dryRun": false,
            "options": {"kind": "UpdateOptions", "apiVersion": "meta.k8s.io/v1"},
        }
    })
}

fn identities() -> Identities {
    Identities::new(
        ["system:serviceaccount:holdfast-system:holdfast-controller"],
        ["system:serviceaccount:kubeflow-system:kubeflow-trainer-controller-manager"],
        [GC, "system:serviceaccount:kube-system:namespace-controller"],
        ["system:serviceaccount:kueue-system:kueue-controller-manager"],
    )
}

const FIXED_ALLOW: &str = r#"{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","response":{"uid":"705ab4f5-6393-11e8-b7cc-42010a800002","allowed":true}}"#;

struct Servers {
    webhook: RunningWebhook,
    baseline: std::net::SocketAddr,
    stop_baseline: CancellationToken,
    _dir: tempfile::TempDir,
    ca: CertificateAuthority,
}

async fn start_servers() -> Servers {
    let ca = CertificateAuthority::generate("bench-ca", Duration::from_secs(3600)).unwrap();
    let leaf = ca
        .issue_serving(&["127.0.0.1".into()], Duration::from_secs(3600))
        .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let files = CertFiles {
        cert: dir.path().join("tls.crt"),
        key: dir.path().join("tls.key"),
    };
    std::fs::write(&files.cert, &leaf.cert_pem).unwrap();
    std::fs::write(&files.key, &leaf.key_pem).unwrap();

    let mut registry = Registry::default();
    let metrics = Metrics::register(&mut registry);
    let admission = Arc::new(Admission::new(
        Mode::Plain,
        identities(),
        Arc::new(NoRuntimes),
        metrics,
        Limits::DEFAULT,
    ));
    let webhook = RunningWebhook::start(
        ServeOptions {
            addr: "127.0.0.1:0".parse().unwrap(),
            admin_addr: "127.0.0.1:0".parse().unwrap(),
            cert: files.clone(),
        },
        admission,
        registry,
    )
    .await
    .unwrap();

    let baseline_router = Router::new().route(
        "/validate",
        post(|_body: bytes::Bytes| async {
            (
                [(http::header::CONTENT_TYPE, "application/json")],
                FIXED_ALLOW,
            )
        }),
    );
    let tls = TlsServer::bind("127.0.0.1:0".parse().unwrap(), files)
        .await
        .unwrap();
    let baseline = tls.local_addr().unwrap();
    let stop_baseline = CancellationToken::new();
    tokio::spawn(tls.serve(baseline_router, stop_baseline.clone()));
    Servers {
        webhook,
        baseline,
        stop_baseline,
        _dir: dir,
        ca,
    }
}

fn client(ca: &CertificateAuthority) -> reqwest::Client {
    builder(ca, 1)
}

async fn call(client: &reqwest::Client, url: &str, body: &bytes::Bytes) {
    let resp = client
        .post(url)
        .header(http::header::CONTENT_TYPE, "application/json")
        .body(body.clone())
        .send()
        .await
        .expect("request");
    assert_eq!(resp.status(), 200);
    let bytes = resp.bytes().await.expect("body");
    assert!(!bytes.is_empty());
}

struct Figures {
    count: usize,
    elapsed: Duration,
    p50: Duration,
    p99: Duration,
    max: Duration,
}

impl Figures {
    fn of(mut lat: Vec<Duration>, elapsed: Duration) -> Self {
        lat.sort_unstable();
        let at = |q: f64| lat[((lat.len() as f64 * q) as usize).min(lat.len() - 1)];
        Figures {
            count: lat.len(),
            elapsed,
            p50: at(0.50),
            p99: at(0.99),
            max: *lat.last().unwrap(),
        }
    }

    fn per_second(&self) -> f64 {
        self.count as f64 / self.elapsed.as_secs_f64()
    }
}

/// Latencies and the time they were taken over; rounds add up.
#[derive(Default)]
struct Samples {
    latencies: Vec<Duration>,
    elapsed: Duration,
    /// Open loop: the most any dispatch fell behind its schedule.
    lag: Duration,
}

impl Samples {
    fn add(&mut self, round: Samples) {
        self.latencies.extend(round.latencies);
        self.elapsed += round.elapsed;
        self.lag = self.lag.max(round.lag);
    }

    fn figures(self) -> Figures {
        Figures::of(self.latencies, self.elapsed)
    }
}

fn ms(d: Duration) -> String {
    format!("{:.3} ms", d.as_secs_f64() * 1000.0)
}

/// `connections` callers, back to back, for `duration`.
async fn closed_loop(
    ca: &CertificateAuthority,
    url: &str,
    body: &bytes::Bytes,
    connections: usize,
    duration: Duration,
) -> Samples {
    // HTTP/1.1: a connection per caller; HTTP/2: the callers share one connection.
    let shared = client(ca);
    let clients: Vec<reqwest::Client> = (0..connections)
        .map(|_| if http2() { shared.clone() } else { client(ca) })
        .collect();
    for c in &clients {
        call(c, url, body).await; // connect and handshake outside the measurement
    }
    let start = Instant::now();
    let end = start + duration;
    let mut tasks = Vec::new();
    for c in clients {
        let url = url.to_owned();
        let body = body.clone();
        tasks.push(tokio::spawn(async move {
            let mut lat = Vec::with_capacity(100_000);
            while Instant::now() < end {
                let t = Instant::now();
                call(&c, &url, &body).await;
                lat.push(t.elapsed());
            }
            lat
        }));
    }
    let mut all = Vec::new();
    for t in tasks {
        all.extend(t.await.unwrap());
    }
    Samples {
        latencies: all,
        elapsed: start.elapsed(),
        lag: Duration::ZERO,
    }
}

/// `rate` requests per second for `duration`, latency from each one's scheduled start.
/// One client with a connection pool, as the apiserver's transport: a request goes out on an
/// idle kept-alive connection, or a new one when all are busy.
async fn open_loop(
    ca: &CertificateAuthority,
    url: &str,
    body: &bytes::Bytes,
    rate: u64,
    duration: Duration,
) -> Samples {
    let pooled = builder(ca, 64);
    // Open a few connections before the clock starts.
    let warm: Vec<_> = (0..8)
        .map(|_| {
            let (c, u, b) = (pooled.clone(), url.to_owned(), body.clone());
            tokio::spawn(async move { call(&c, &u, &b).await })
        })
        .collect();
    for w in warm {
        w.await.unwrap();
    }
    let interval = Duration::from_secs_f64(1.0 / rate as f64);
    let start = Instant::now();
    let total = (rate * duration.as_secs()) as usize;
    let mut tasks = Vec::with_capacity(total);
    let mut lag = Duration::ZERO;
    for i in 0..total {
        let scheduled = start + interval.mul_f64(i as f64);
        tokio::time::sleep_until(scheduled.into()).await;
        // tokio's timer has millisecond resolution: the clock starts when the request is
        // dispatched (its own task, so a slow answer never holds up the next request), and
        // how far dispatch fell behind the schedule is reported apart.
        let sent = Instant::now();
        lag = lag.max(sent.saturating_duration_since(scheduled));
        let (c, u, b) = (pooled.clone(), url.to_owned(), body.clone());
        tasks.push(tokio::spawn(async move {
            call(&c, &u, &b).await;
            sent.elapsed()
        }));
    }
    let mut all = Vec::with_capacity(total);
    for t in tasks {
        all.push(t.await.unwrap());
    }
    Samples {
        latencies: all,
        elapsed: start.elapsed(),
        lag,
    }
}

#[tokio::main]
async fn main() {
    holdfast_serve::install_crypto_provider();
    let opts = Opts::parse();
    HTTP2.store(opts.http2, std::sync::atomic::Ordering::Relaxed);
    let servers = start_servers().await;
    let body = bytes::Bytes::from(serde_json::to_vec(&review()).unwrap());
    let object_bytes = serde_json::to_vec(&snapshot_configmap(true)).unwrap().len();
    let webhook_url = format!(
        "https://127.0.0.1:{}/validate",
        servers.webhook.addr().port()
    );
    let baseline_url = format!("https://127.0.0.1:{}/validate", servers.baseline.port());

    // The webhook really decides: the GC may orphan a snapshot.
    let answer: Value = client(&servers.ca)
        .post(&webhook_url)
        .header(http::header::CONTENT_TYPE, "application/json")
        .body(body.clone())
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(answer["response"]["allowed"], true, "{answer}");

    println!(
        "holdfast-webhook admission benchmark: ConfigMap UPDATE review of {} bytes (oldObject {} bytes), TLS 1.3, {}, {} cores",
        body.len(),
        object_bytes,
        if opts.http2 {
            "HTTP/2 (one connection)"
        } else {
            "HTTP/1.1 keep-alive"
        },
        std::thread::available_parallelism().map_or(1, |n| n.get())
    );
    // Warm both up, then alternate one-second rounds, so that whatever else the machine does
    // weighs on both alike.
    let second = Duration::from_secs(1);
    closed_loop(&servers.ca, &baseline_url, &body, opts.connections, second).await;
    closed_loop(&servers.ca, &webhook_url, &body, opts.connections, second).await;
    let (mut base, mut hook) = (Samples::default(), Samples::default());
    // The CPU this process (the client and both servers) spends in the no-op's rounds.
    let mut noop_cpu = Duration::ZERO;
    for _ in 0..opts.seconds {
        let before = process_cpu();
        base.add(closed_loop(&servers.ca, &baseline_url, &body, opts.connections, second).await);
        noop_cpu += process_cpu().saturating_sub(before);
        hook.add(closed_loop(&servers.ca, &webhook_url, &body, opts.connections, second).await);
    }
    let (base, hook) = (base.figures(), hook.figures());
    let noop_cpu_us = noop_cpu.as_secs_f64() * 1e6 / base.count.max(1) as f64;
    println!();
    println!(
        "closed loop, {} connections, {} alternating 1 s rounds each:",
        opts.connections, opts.seconds
    );
    for (name, f) in [("no-op axum+rustls", &base), ("holdfast /validate", &hook)] {
        println!(
            "  {name:<20} {:>9.0} admissions/s   p50 {}   p99 {}   max {}",
            f.per_second(),
            ms(f.p50),
            ms(f.p99),
            ms(f.max)
        );
    }
    println!(
        "  ratio webhook/no-op: throughput {:.2}, p50 {:.2}, p99 {:.2}",
        hook.per_second() / base.per_second(),
        hook.p50.as_secs_f64() / base.p50.as_secs_f64(),
        hook.p99.as_secs_f64() / base.p99.as_secs_f64()
    );

    let (mut base, mut hook) = (Samples::default(), Samples::default());
    for _ in 0..opts.seconds {
        base.add(open_loop(&servers.ca, &baseline_url, &body, opts.rate, second).await);
        hook.add(open_loop(&servers.ca, &webhook_url, &body, opts.rate, second).await);
    }
    let lag = base.lag.max(hook.lag);
    let (base, hook) = (base.figures(), hook.figures());
    println!();
    println!(
        "open loop at {} requests/s, {} alternating 1 s rounds each (dispatch fell behind schedule by at most {}):",
        opts.rate,
        opts.seconds,
        ms(lag)
    );
    for (name, f) in [("no-op axum+rustls", &base), ("holdfast /validate", &hook)] {
        println!(
            "  {name:<20} {:>9.0} admissions/s   p50 {}   p99 {}   max {}",
            f.per_second(),
            ms(f.p50),
            ms(f.p99),
            ms(f.max)
        );
    }
    println!(
        "  holdfast p99 at {} requests/s: {} (goal < 2 ms: {})",
        opts.rate,
        ms(hook.p99),
        if hook.p99 < Duration::from_millis(2) {
            "met"
        } else {
            "NOT met"
        }
    );

    // Time inside the webhook's handler (body read, decode, policy, answer), from its own
    // histogram: what the policy costs apart from TLS and HTTP.
    let metrics = reqwest::get(format!("http://{}/metrics", servers.webhook.admin_addr()))
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    let read = |name: &str| -> f64 {
        metrics
            .lines()
            .find(|l| l.starts_with(name))
            .and_then(|l| l.rsplit(' ').next())
            .and_then(|v| v.parse().ok())
            .unwrap_or(f64::NAN)
    };
    let sum = read("holdfast_webhook_admission_duration_seconds_sum{endpoint=\"validate\"}");
    let count = read("holdfast_webhook_admission_duration_seconds_count{endpoint=\"validate\"}");
    println!();
    println!(
        "inside the handler (its histogram, all {count} admissions): mean {:.1} µs",
        sum / count * 1e6
    );

    // The same path without the network, on one thread: decode, verdict, encoded answer.
    let who = identities();
    let rounds = 200_000u32;
    let started = Instant::now();
    for _ in 0..rounds {
        let (uid, input) = decode_review(std::hint::black_box(&body)).unwrap();
        let verdict = validate(&input, &who, Mode::Plain);
        std::hint::black_box(answer::to_json(&answer::judged(&uid, &verdict)).unwrap());
    }
    let whole = started.elapsed().as_secs_f64() * 1e6 / f64::from(rounds);
    println!(
        "decode + policy + answer alone (one thread, {rounds} reviews): {whole:.1} µs per review"
    );

    // What serde_json's check of the whole review costs, keeping nothing: the least a reader
    // that refuses a malformed body does with serde_json. Against the budget the throughput
    // goal leaves: at 0.95 of the no-op's closed-loop rate, with the machine's CPU as busy as
    // in the no-op's rounds, what holdfast may add per review.
    let started = Instant::now();
    for _ in 0..rounds {
        std::hint::black_box(
            serde_json::from_slice::<serde::de::IgnoredAny>(std::hint::black_box(&body)).unwrap(),
        );
    }
    let floor = started.elapsed().as_secs_f64() * 1e6 / f64::from(rounds);
    println!(
        "checking the {} B body alone, keeping nothing: {floor:.1} µs per review ({:.0}% of the whole)",
        body.len(),
        floor * 100.0 / whole
    );
    println!(
        "the 0.95 goal's budget: the no-op's {noop_cpu_us:.1} µs of CPU per admission (this process, client and server, over its closed-loop rounds) leaves holdfast {:.1} µs per review",
        noop_cpu_us * (1.0 / 0.95 - 1.0)
    );

    servers.stop_baseline.cancel();
    servers.webhook.stop().await.unwrap();
}
