//! How fast holdfast snapshots a backlog of TrainJobs, against the local control plane, as a
//! ratio to raw ConfigMap creates in the same run; how many API requests it sends per
//! snapshot (from the apiserver's audit log; the ideal is one: the create); and the
//! reconciler's peak memory.
//!
//! ```text
//! cargo build --release -p holdfast-controller
//! cargo run --release -p holdfast-tests --example snapshot_bench -- --jobs 5000
//! ```
//!
//! 1. A fresh control plane; one ClusterTrainingRuntime; N TrainJobs referencing it.
//! 2. Baseline: for each TrainJob, the ConfigMap its snapshot will be (same data,
//!    annotations and ownerReference) under another name, created directly with the
//!    reconciler's concurrency (`--concurrency`, default 8).
//! 3. The reconciler: the `holdfast-controller` binary if it is built (else the same code —
//!    leader election, watches, the Controller — in a child process of this example), acting
//!    as holdfast's controller identity, watching all namespaces (so its ConfigMap metadata
//!    watch also sees the baseline's ConfigMaps). Timed from the process's start until all N
//!    snapshots exist (a label watch in this process).
//! 4. Peak RSS (`VmHWM`) and CPU time of the child from `/proc/<pid>/{status,stat}`; the
//!    binary's time from start to ready (`/readyz`).
//! 5. Steady state: with every snapshot taken, the controller runs on for `--steady`
//!    seconds; the requests it sends then (audit log), per minute.
//!
//! With `--trainer`, Kubeflow Trainer's own writer runs first, as a peer, over as many
//! TrainJobs of a namespace of its own with a baseline of its own (`snapshot_peers/trainer.rs`); holdfast's
//! controller then watches its own namespace only, so that it neither caches nor snapshots
//! Trainer's TrainJobs.

use clap::Parser;
use futures::{StreamExt, TryStreamExt, stream};
use holdfast_controller::leader::{self, LeaderMetrics, LeaseConfig};
use holdfast_controller::snapshot::{Config, SnapshotMetrics, Snapshotter};
use holdfast_core::names;
use holdfast_serve::Readiness;
use holdfast_tests::holdfast::{self, WebhookReplica};
use holdfast_tests::{ControlPlane, Identity};
use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{Api, DynamicObject, PostParams};
use kube::core::PartialObjectMeta;
use kube::runtime::{WatchStreamExt, watcher};
use serde_json::{Value, json};
use std::collections::{BTreeMap, HashSet};
use std::io::Read;
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};
use tokio_util::sync::CancellationToken;

#[derive(Parser, Debug)]
struct Args {
    /// TrainJobs to snapshot.
    #[arg(long, default_value_t = 5000)]
    jobs: usize,
    /// Concurrent requests of the baseline, and the reconciler's concurrency.
    #[arg(long, default_value_t = 8)]
    concurrency: u16,
    /// Seconds the controller runs on after the last snapshot, to count the requests it
    /// makes in steady state.
    #[arg(long, default_value_t = 60)]
    steady: u64,
    /// The `holdfast-controller` binary to measure. By default the one built next to this
    /// example (`cargo build --release -p holdfast-controller`), if there is one; without
    /// it the reconciler runs in a child process of this example instead.
    #[arg(long)]
    controller_bin: Option<PathBuf>,
    /// Also run the `holdfast-webhook` binary built next to this example
    /// (`cargo build --release -p holdfast-webhook`), registered for the TrainJobs'
    /// namespace, so that every TrainJob create and every snapshot write goes through it;
    /// its peak RSS is reported. The baseline's ConfigMaps go through the same registration.
    #[arg(long)]
    webhook: bool,
    /// Also run Kubeflow Trainer's own snapshot writer as a peer, before holdfast, over as
    /// many TrainJobs of a namespace of its own, with a baseline of its own there: Trainer
    /// 2.3's controller manager from the node's build (`tests/cluster/node/build.sh`), or
    /// `--trainer-bin`. holdfast's controller then watches its own namespace only
    /// (`--watch-namespace`), so that it neither caches nor snapshots Trainer's TrainJobs.
    #[arg(long)]
    trainer: bool,
    /// The Trainer controller manager binary for `--trainer`.
    #[arg(long)]
    trainer_bin: Option<PathBuf>,
    /// Trainer's client rate limit (`clientConnection.qps`; burst twice it). Trainer's default
    /// is 50 a second; the default here lifts it out of the way, as holdfast's client has none.
    #[arg(long, default_value_t = 1000.0)]
    trainer_qps: f32,
    /// Run the reconciler (the child process) with this kubeconfig.
    #[arg(long, hide = true)]
    child_kubeconfig: Option<PathBuf>,
    /// The child's Lease namespace.
    #[arg(long, hide = true, default_value = "default")]
    lease_namespace: String,
    /// The only namespace the child watches (all when absent).
    #[arg(long, hide = true)]
    child_watch_namespace: Option<String>,
}

// The peers live beside this file rather than in a `snapshot_bench/` directory, so that the
// example keeps its name in its file's.
#[path = "snapshot_peers/trainer.rs"]
mod trainer;

const RUNTIME: &str = "torch-bench";

fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()?;
    match &args.child_kubeconfig {
        Some(kubeconfig) => rt.block_on(child(kubeconfig.clone(), &args)),
        None => rt.block_on(bench(&args)),
    }
}

/// The reconciler, as the controller binary runs it, until stdin closes.
async fn child(kubeconfig: PathBuf, args: &Args) -> anyhow::Result<()> {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn")),
        )
        .with_writer(std::io::stderr)
        .init();
    let kc = kube::config::Kubeconfig::read_from(kubeconfig)?;
    let cfg = kube::Config::from_custom_kubeconfig(kc, &Default::default()).await?;
    let client = kube::Client::try_from(cfg)?;
    let config = Config {
        concurrency: args.concurrency,
        namespace: args.child_watch_namespace.clone(),
        ..Config::default()
    };
    let mut registry = prometheus_client::registry::Registry::default();
    let metrics = SnapshotMetrics::default();
    metrics.register(&mut registry);
    let namespace = config.namespace.clone();
    let events = holdfast_tests::leader_parts::publisher(&client, None);
    let snapshotter = Snapshotter::new(
        client.clone(),
        config,
        metrics,
        Readiness::default(),
        events,
    );
    let shutdown = CancellationToken::new();
    let stop = shutdown.clone();
    std::thread::spawn(move || {
        let mut sink = Vec::new();
        let _ = std::io::stdin().read_to_end(&mut sink);
        stop.cancel();
    });
    let lease = LeaseConfig::new(&args.lease_namespace, "holdfast-controller", "bench");
    let feed_client = client.clone();
    let work = move |token: CancellationToken| async move {
        let feed =
            holdfast_tests::leader_parts::trainjob_feed(&feed_client, namespace.as_deref(), &token);
        snapshotter.run_on(feed, token).await
    };
    if let Some(result) =
        leader::run_as_leader(client, lease, LeaderMetrics::default(), shutdown, work).await?
    {
        result?;
    }
    let mut text = String::new();
    prometheus_client::encoding::text::encode(&mut text, &registry)?;
    for line in text.lines().filter(|l| {
        l.starts_with("holdfast_snapshot_reconcile_duration_seconds_sum")
            || l.starts_with("holdfast_snapshot_reconcile_duration_seconds_count")
    }) {
        eprintln!("  reconciler: {line}");
    }
    Ok(())
}

async fn bench(args: &Args) -> anyhow::Result<()> {
    let n = args.jobs;
    let conc = usize::from(args.concurrency.max(1));
    eprintln!("starting a fresh control plane...");
    let cp = ControlPlane::shared();
    let admin = cp.client(Identity::Admin).await?;
    let jobs_ns = cp.namespace("bench-jobs").await?;
    let jobs_ns = jobs_ns.as_str();
    let webhook = match args.webhook {
        true => Some(start_webhook(cp, jobs_ns).await?),
        false => None,
    };

    let runtime: DynamicObject = serde_json::from_value(json!({
        "apiVersion": "trainer.kubeflow.org/v1alpha1",
        "kind": "ClusterTrainingRuntime",
        "metadata": {"name": RUNTIME, "labels": {"trainer.kubeflow.org/framework": "torch"}},
        "spec": {
            "mlPolicy": {"numNodes": 2, "torch": {"numProcPerNode": "auto"}},
            "template": {"spec": {"replicatedJobs": [{
                "name": "node",
                "template": {
                    "metadata": {"labels": {"trainer.kubeflow.org/trainjob-ancestor-step": "trainer"}},
                    "spec": {"template": {"spec": {"containers": [{
                        "name": "node",
                        "image": "pytorch/pytorch:2.10.0-cuda12.8-cudnn9-runtime",
                        "command": ["torchrun", "train.py"],
                        "env": [{"name": "NCCL_DEBUG", "value": "INFO"}],
                        "resources": {"limits": {"nvidia.com/gpu": "8"}}
                    }]}}}
                }
            }]}}
        }
    }))?;
    let runtime = Api::<DynamicObject>::all_with(
        admin.clone(),
        &holdfast_cluster::resources::cluster_training_runtime(),
    )
    .create(&PostParams::default(), &runtime)
    .await?;

    // Trainer's own writer first, over TrainJobs of its own namespace, and stopped before
    // holdfast's TrainJobs exist: it reconciles every namespace, and would build JobSets for
    // holdfast's TrainJobs too.
    let rendered = holdfast_core::snapshot::render(&serde_json::to_value(&runtime)?)?;
    let peer = match args.trainer {
        true => Some(trainer::run(cp, &admin, &rendered, args).await?),
        false => None,
    };

    let jobs = create_trainjobs(&admin, jobs_ns, n).await?;

    // The baseline: per TrainJob, the very ConfigMap its snapshot will be (data, provenance
    // annotations, ownerReference to the TrainJob: the same work for the apiserver and the
    // garbage collector) under another name, created directly with the same concurrency by an
    // identity with the same RBAC path. Built beforehand: only the creates are timed.
    let baseline_cms: Vec<ConfigMap> = jobs
        .iter()
        .map(|job| baseline_configmap(job, &rendered))
        .collect::<anyhow::Result<_>>()?;
    // The controller's Lease lives in `default` here: the chart's release-namespace roles
    // there, as in any namespace a release leads from.
    holdfast_tests::rbac::grant_release_roles_in(&admin, "default").await?;
    let components = Components::of(cp.process_group());
    let (baseline, cpu_baseline) =
        raw_creates(cp, &admin, jobs_ns, baseline_cms, conc, &components).await?;
    let baseline_rate = n as f64 / baseline.as_secs_f64();

    // Count snapshots as they appear: holdfast's carry its label.
    let seen = tokio::spawn(count_snapshots(
        Api::namespaced(admin.clone(), jobs_ns),
        watcher::Config::default().labels(&format!("{}=true", names::LABEL_RUNTIME_SNAPSHOT)),
        n,
    ));

    eprintln!("reconciler: snapshotting {n} TrainJobs...");
    let cpu_before_reconciler = components.cpu();
    let started = Instant::now();
    let kubeconfig = cp.kubeconfig(Identity::Controller);
    let concurrency = args.concurrency.to_string();
    let binary = args
        .controller_bin
        .clone()
        .or_else(|| built_binary("holdfast-controller"));
    let admin_port = holdfast_tests::control_plane::free_port()?;
    let admin_addr = format!("127.0.0.1:{admin_port}");
    let mut command = match &binary {
        Some(bin) => {
            let mut c = Command::new(bin);
            c.arg("--kubeconfig")
                .arg(&kubeconfig)
                .args(["--lease-namespace", "default", "--identity", "bench"])
                .args(["--admin-addr", &admin_addr, "--api-addr", "127.0.0.1:0"])
                .args(["--snapshot-concurrency", &concurrency])
                .env("RUST_LOG", "warn");
            if args.trainer {
                c.args(["--watch-namespace", jobs_ns]);
            }
            c
        }
        None => {
            let mut c = Command::new(std::env::current_exe()?);
            c.arg("--child-kubeconfig")
                .arg(&kubeconfig)
                .args(["--concurrency", &concurrency]);
            if args.trainer {
                c.args(["--child-watch-namespace", jobs_ns]);
            }
            c
        }
    };
    let what = match &binary {
        Some(bin) => format!("the holdfast-controller binary ({})", bin.display()),
        None => "the reconciler in a child process of this example".to_owned(),
    };
    eprintln!("  running {what}");
    let mut reconciler = command
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(Stdio::inherit())
        .spawn()?;
    let pid = reconciler.id();
    // The binary's time from start to ready: its /readyz (bounded by the run's own timeout).
    let ready = tokio::spawn({
        let url = format!("http://{admin_addr}/readyz");
        let is_binary = binary.is_some();
        async move {
            match is_binary {
                true => ready_at(url).await,
                false => None,
            }
        }
    });
    let (first, last) = tokio::time::timeout(Duration::from_secs(3600), seen).await??;
    let total = last.duration_since(started);
    let cpu_reconciler = components.cpu().since(&cpu_before_reconciler);
    let steady = first.map(|f| last.duration_since(f));
    let ready_after = ready.await?.map(|r| r.duration_since(started));
    // Steady state: every snapshot taken; what does the controller still ask for?
    let steady_from = k8s_openapi::jiff::Timestamp::now();
    eprintln!(
        "steady state: the controller runs on for {}s...",
        args.steady
    );
    tokio::time::sleep(Duration::from_secs(args.steady)).await;
    let steady_to = k8s_openapi::jiff::Timestamp::now();
    let status = std::fs::read_to_string(format!("/proc/{pid}/status"))?;
    let (hwm, rss) = (status_kib(&status, "VmHWM:"), status_kib(&status, "VmRSS:"));
    let cpu_secs = cpu_secs(pid);
    let webhook_hwm = match &webhook {
        Some(w) => {
            let pid = w
                .proc
                .pid()
                .ok_or_else(|| anyhow::anyhow!("the webhook exited"))?;
            let status = std::fs::read_to_string(format!("/proc/{pid}/status"))?;
            Some(status_kib(&status, "VmHWM:"))
        }
        None => None,
    };
    // The child stops when its stdin closes; the binary on SIGTERM.
    drop(reconciler.stdin.take());
    if binary.is_some() {
        Command::new("kill")
            .args(["-TERM", &pid.to_string()])
            .status()?;
    }
    let exited = tokio::task::spawn_blocking(move || reconciler.wait()).await??;

    // Requests by the controller identity (the child only), from the audit log.
    tokio::time::sleep(Duration::from_millis(500)).await;
    let mut by_kind: BTreeMap<String, usize> = BTreeMap::new();
    let mut total_requests = 0usize;
    let (baseline_user, controller_user) = (
        Identity::Webhook.username(),
        Identity::Controller.username(),
    );
    let audit =
        cp.audit_events_where(|l| l.contains(baseline_user) || l.contains(controller_user))?;
    let server_ms = |user: &str| {
        let lat: Vec<f64> = audit
            .iter()
            .filter(|e| {
                e["user"]["username"] == user
                    && e["verb"] == "create"
                    && e["objectRef"]["namespace"] == jobs_ns
                    && e["objectRef"]["resource"] == "configmaps"
            })
            .filter_map(|e| {
                let t = |k: &str| {
                    e[k].as_str()
                        .and_then(|s| s.parse::<k8s_openapi::jiff::Timestamp>().ok())
                };
                let d = t("stageTimestamp")?.duration_since(t("requestReceivedTimestamp")?);
                Some(d.as_secs_f64() * 1000.0)
            })
            .collect();
        lat.iter().sum::<f64>() / lat.len().max(1) as f64
    };
    println!(
        "  server-side create latency: baseline {:.1} ms, reconciler {:.1} ms",
        server_ms(Identity::Webhook.username()),
        server_ms(Identity::Controller.username())
    );
    for e in &audit {
        if e["user"]["username"] != Identity::Controller.username() {
            continue;
        }
        total_requests += 1;
        let key = format!(
            "{} {}",
            e["verb"].as_str().unwrap_or("?"),
            e["objectRef"]["resource"].as_str().unwrap_or("?")
        );
        *by_kind.entry(key).or_default() += 1;
    }

    // The controller's list requests, one line each, when asked (for finding relists).
    if std::env::var_os("HOLDFAST_BENCH_LISTS").is_some() {
        for e in audit
            .iter()
            .filter(|e| e["user"]["username"] == controller_user && e["verb"] == "list")
        {
            eprintln!(
                "list {} {} {}",
                e["requestReceivedTimestamp"].as_str().unwrap_or("?"),
                e["responseStatus"]["code"],
                e["requestURI"].as_str().unwrap_or("?")
            );
        }
    }
    // The controller's requests received in the steady window, per minute.
    let mut in_steady: BTreeMap<String, usize> = BTreeMap::new();
    for e in &audit {
        let received = e["requestReceivedTimestamp"]
            .as_str()
            .and_then(|s| s.parse::<k8s_openapi::jiff::Timestamp>().ok());
        if e["user"]["username"] != controller_user
            || !received.is_some_and(|t| t >= steady_from && t < steady_to)
        {
            continue;
        }
        let key = format!(
            "{} {}{}",
            e["verb"].as_str().unwrap_or("?"),
            e["objectRef"]["resource"].as_str().unwrap_or("?"),
            if e["stage"] == "ResponseStarted" {
                " (watch opened)"
            } else {
                ""
            }
        );
        *in_steady.entry(key).or_default() += 1;
    }
    let minutes = (args.steady as f64 / 60.0).max(1e-9);

    let rate = n as f64 / total.as_secs_f64();
    println!();
    println!("snapshot benchmark: {n} TrainJobs, concurrency {conc}; {what}");
    println!(
        "  baseline raw ConfigMap creates: {baseline_rate:>8.0}/s ({:.2}s)",
        baseline.as_secs_f64()
    );
    println!(
        "  reconciler, from process start:  {rate:>8.0}/s ({:.2}s) = {:.2}x the baseline",
        total.as_secs_f64(),
        rate / baseline_rate
    );
    if let Some(steady) = steady {
        let steady_rate = n as f64 / steady.as_secs_f64().max(1e-9);
        println!(
            "  reconciler, first to last:       {steady_rate:>8.0}/s ({:.2}s) = {:.2}x the baseline",
            steady.as_secs_f64(),
            steady_rate / baseline_rate
        );
    }
    // Events (a SnapshotTaken per TrainJob, bounded and paced by the Event publisher) are
    // counted apart: they are not the snapshot's requests.
    let event_writes: usize = by_kind
        .iter()
        .filter(|(k, _)| k.ends_with(" events"))
        .map(|(_, v)| v)
        .sum();
    let snapshot_requests = total_requests - event_writes;
    println!(
        "  API requests by the controller: {snapshot_requests} = {:.3} per snapshot, and {event_writes} Event writes (bounded by the publisher's queue and pace)",
        snapshot_requests as f64 / n as f64
    );
    for (k, v) in &by_kind {
        println!("    {v:>7}  {k}");
    }
    println!(
        "  reconciler peak RSS (VmHWM): {:.1} MiB (RSS at the end {:.1} MiB)",
        hwm as f64 / 1024.0,
        rss as f64 / 1024.0
    );
    if let Some(kib) = webhook_hwm {
        println!(
            "  webhook peak RSS (VmHWM): {:.1} MiB (the holdfast-webhook binary, every TrainJob create and snapshot write through it)",
            kib as f64 / 1024.0
        );
    }
    println!(
        "  reconciler CPU time: {cpu_secs:.2}s = {:.2} ms per snapshot",
        cpu_secs * 1000.0 / n as f64
    );
    println!(
        "  CPU seconds while the baseline ran ({:.1}s) and while the reconciler did ({:.1}s), by process (where the time goes: the machine has 2 cores)",
        baseline.as_secs_f64(),
        total.as_secs_f64()
    );
    for (name, base) in &cpu_baseline.0 {
        let during = cpu_reconciler.get(name);
        if base + during < 0.05 {
            continue;
        }
        println!(
            "    {name:<24} {base:>7.2}s  {during:>7.2}s  ({:.2} -> {:.2} ms per object)",
            base * 1000.0 / n as f64,
            during * 1000.0 / n as f64
        );
    }
    println!(
        "    {:<24} {:>7}   {:>7.2}s  ({:.2} ms per snapshot)",
        "reconciler",
        "-",
        cpu_secs,
        cpu_secs * 1000.0 / n as f64
    );
    match ready_after {
        Some(r) => println!(
            "  time from start to ready (/readyz): {:.2}s",
            r.as_secs_f64()
        ),
        None => println!("  time from start to ready: not measured (no controller binary)"),
    }
    let steady_events: usize = in_steady
        .iter()
        .filter(|(k, _)| k.ends_with(" events"))
        .map(|(_, v)| v)
        .sum();
    println!(
        "  steady state, {}s after the last snapshot: {:.1} requests per minute, and {:.1} Event writes per minute (the publisher's queue draining)",
        args.steady,
        (in_steady.values().sum::<usize>() - steady_events) as f64 / minutes,
        steady_events as f64 / minutes
    );
    for (k, v) in &in_steady {
        println!("    {:>7.1}/min  {k}", *v as f64 / minutes);
    }
    println!("  reconciler exit: {exited}");
    if let Some(peer) = &peer {
        trainer::print(peer, n, rate, baseline_rate);
    }
    Ok(())
}

/// `n` TrainJobs in `ns`, each referencing the bench's runtime, as the apiserver returned them.
async fn create_trainjobs(admin: &kube::Client, ns: &str, n: usize) -> anyhow::Result<Vec<Value>> {
    eprintln!("creating {n} TrainJobs in {ns}...");
    let started = Instant::now();
    let tjs = Api::<DynamicObject>::namespaced_with(
        admin.clone(),
        ns,
        &holdfast_cluster::resources::trainjob(),
    );
    let jobs: Vec<Value> = stream::iter(0..n)
        .map(|i| {
            let tjs = tjs.clone();
            async move {
                let job: DynamicObject = serde_json::from_value(json!({
                    "apiVersion": "trainer.kubeflow.org/v1alpha1",
                    "kind": "TrainJob",
                    "metadata": {"name": format!("job-{i:06}")},
                    "spec": {"runtimeRef": {"name": RUNTIME}}
                }))?;
                let job = tjs.create(&PostParams::default(), &job).await?;
                anyhow::Ok(serde_json::to_value(&job)?)
            }
        })
        .buffer_unordered(32)
        .try_collect()
        .await?;
    eprintln!("  {n} TrainJobs in {:.1}s", started.elapsed().as_secs_f64());
    Ok(jobs)
}

/// The baseline: `cms` created directly in `ns`, `conc` at a time, by an identity that may
/// create ConfigMaps there through a RoleBinding, as the controller may through the chart's:
/// the same RBAC path (the webhook's own chart role has no such rule, so the bench grants
/// it). Returns the time the creates took and the CPU each process spent meanwhile.
async fn raw_creates(
    cp: &ControlPlane,
    admin: &kube::Client,
    ns: &str,
    cms: Vec<ConfigMap>,
    conc: usize,
    components: &Components,
) -> anyhow::Result<(Duration, Cpu)> {
    let role: k8s_openapi::api::rbac::v1::Role = serde_json::from_value(json!({
        "metadata": {"name": "bench-baseline", "namespace": ns},
        "rules": [{"apiGroups": [""], "resources": ["configmaps"], "verbs": ["create"]}]
    }))?;
    Api::<k8s_openapi::api::rbac::v1::Role>::namespaced(admin.clone(), ns)
        .create(&Default::default(), &role)
        .await?;
    let binding: k8s_openapi::api::rbac::v1::RoleBinding = serde_json::from_value(json!({
        "metadata": {"name": "bench-baseline", "namespace": ns},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "bench-baseline"},
        "subjects": [{"kind": "ServiceAccount", "name": "holdfast-webhook", "namespace": "holdfast-system"}]
    }))?;
    Api::<k8s_openapi::api::rbac::v1::RoleBinding>::namespaced(admin.clone(), ns)
        .create(&Default::default(), &binding)
        .await?;
    let api: Api<ConfigMap> = Api::namespaced(cp.client(Identity::Webhook).await?, ns);
    let n = cms.len();
    eprintln!("baseline: creating {n} ConfigMaps in {ns}, {conc} at a time...");
    let cpu_before = components.cpu();
    let started = Instant::now();
    stream::iter(cms)
        .map(|cm| {
            let api = api.clone();
            async move {
                api.create(&PostParams::default(), &cm).await?;
                anyhow::Ok(())
            }
        })
        .buffer_unordered(conc)
        .try_collect::<Vec<()>>()
        .await?;
    let took = started.elapsed();
    eprintln!(
        "  {n} creates in {:.2}s: {:.0}/s",
        took.as_secs_f64(),
        n as f64 / took.as_secs_f64()
    );
    Ok((took, components.cpu().since(&cpu_before)))
}

/// The control plane's processes (etcd, kube-apiserver, ...; the webhook when it runs) and
/// this bench process, whose CPU time is sampled around each phase.
struct Components(Vec<(String, u32)>);

/// CPU seconds (user + system) by process name.
#[derive(Default)]
struct Cpu(Vec<(String, f64)>);

impl Cpu {
    fn since(&self, before: &Cpu) -> Cpu {
        Cpu(self
            .0
            .iter()
            .map(|(name, secs)| (name.clone(), secs - before.get(name)))
            .collect())
    }

    fn get(&self, name: &str) -> f64 {
        self.0
            .iter()
            .find(|(n, _)| n == name)
            .map_or(0.0, |(_, s)| *s)
    }
}

impl Components {
    /// Every process of process group `group`, and this one.
    fn of(group: i32) -> Components {
        let mut found = vec![("this bench (clients)".to_owned(), std::process::id())];
        for entry in std::fs::read_dir("/proc").into_iter().flatten().flatten() {
            let Some(pid) = entry
                .file_name()
                .to_str()
                .and_then(|p| p.parse::<u32>().ok())
            else {
                continue;
            };
            let Some(fields) = stat_fields(pid) else {
                continue;
            };
            // Field 5 is the process group; fields after the name (field 2) are split on spaces.
            if fields.get(2).and_then(|g| g.parse::<i32>().ok()) != Some(group)
                || pid == std::process::id()
            {
                continue;
            }
            let name = std::fs::read(format!("/proc/{pid}/cmdline"))
                .ok()
                .and_then(|c| {
                    c.split(|b| *b == 0).next().map(|a| {
                        String::from_utf8_lossy(a)
                            .rsplit('/')
                            .next()
                            .unwrap_or_default()
                            .to_owned()
                    })
                })
                .unwrap_or_else(|| pid.to_string());
            found.push((name, pid));
        }
        found.sort();
        Components(found)
    }

    fn cpu(&self) -> Cpu {
        Cpu(self
            .0
            .iter()
            .map(|(name, pid)| (name.clone(), cpu_secs(*pid)))
            .collect())
    }
}

/// The CPU seconds, user and system, process `pid` has used (0 if it is gone): fields 14 and
/// 15 of `/proc/<pid>/stat`, in clock ticks of 10 ms.
fn cpu_secs(pid: u32) -> f64 {
    let ticks: u64 = stat_fields(pid)
        .map(|f| {
            f.iter()
                .skip(11)
                .take(2)
                .filter_map(|v| v.parse::<u64>().ok())
                .sum()
        })
        .unwrap_or(0);
    ticks as f64 / 100.0
}

/// The first and last time a snapshot appeared in `api`'s namespace, once `n` have: the
/// ConfigMaps `config` selects whose names end in `-runtime-snapshot` (a metadata-only watch).
async fn count_snapshots(
    api: Api<PartialObjectMeta<ConfigMap>>,
    config: watcher::Config,
    n: usize,
) -> (Option<Instant>, Instant) {
    let mut names = HashSet::new();
    let mut first = None;
    let mut events = std::pin::pin!(watcher(api, config).applied_objects());
    while let Some(cm) = events.next().await {
        let Ok(cm) = cm else { continue };
        let Some(name) = cm.metadata.name else {
            continue;
        };
        if name.ends_with(names::SNAPSHOT_SUFFIX) {
            first.get_or_insert_with(Instant::now);
            names.insert(name);
            if names.len() >= n {
                break;
            }
        }
    }
    (first, Instant::now())
}

/// `/proc/<pid>/stat` after the process name (field 3, the state, first).
fn stat_fields(pid: u32) -> Option<Vec<String>> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let after_name = &stat[stat.rfind(')')? + 1..];
    Some(after_name.split_whitespace().map(str::to_owned).collect())
}

/// A field of `/proc/<pid>/status` in KiB (0 if missing).
fn status_kib(status: &str, field: &str) -> u64 {
    status
        .lines()
        .find(|l| l.starts_with(field))
        .and_then(|l| l.split_whitespace().nth(1))
        .and_then(|v| v.parse::<u64>().ok())
        .unwrap_or(0)
}

/// When `url` first answers 2xx (bounded by an hour).
async fn ready_at(url: String) -> Option<Instant> {
    let deadline = Instant::now() + Duration::from_secs(3600);
    while Instant::now() < deadline {
        if matches!(reqwest::get(&url).await, Ok(r) if r.status().is_success()) {
            return Some(Instant::now());
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    None
}

/// The binary `name` built next to this example (the same profile), if there is one.
fn built_binary(name: &str) -> Option<PathBuf> {
    let built = std::env::current_exe().ok()?.parent()?.parent()?.join(name);
    built.is_file().then_some(built)
}

/// The `holdfast-webhook` binary built next to this example, serving and registered for
/// `ns`; ready when the apiserver sends it that namespace's writes.
async fn start_webhook(cp: &ControlPlane, ns: &str) -> anyhow::Result<WebhookReplica> {
    let bin = built_binary("holdfast-webhook").ok_or_else(|| {
        anyhow::anyhow!("--webhook: build it first (cargo build --release -p holdfast-webhook)")
    })?;
    let (cert, key) = holdfast::serving_cert(cp, "bench-webhook");
    let port = holdfast_tests::control_plane::free_port()?;
    let mut webhook = WebhookReplica::start_binary(cp, "bench", &bin, port, &cert, &key, &[]);
    webhook.wait_ready().await;
    holdfast::register_webhook(cp, ns, port, 10).await;
    Ok(webhook)
}

/// The ConfigMap holdfast will create for `job`, named `{job}-baseline` and without the
/// snapshot label (so neither the reconciler nor the snapshot count takes it for one).
fn baseline_configmap(
    job: &Value,
    rendered: &holdfast_core::snapshot::Rendered,
) -> anyhow::Result<ConfigMap> {
    let cm = holdfast_core::snapshot::snapshot_configmap(job, rendered)?;
    let mut cm: ConfigMap = serde_json::from_value(cm)?;
    let job_name = job["metadata"]["name"].as_str().unwrap_or_default();
    cm.metadata.name = Some(format!("{job_name}-baseline"));
    cm.metadata.labels = None;
    Ok(cm)
}
