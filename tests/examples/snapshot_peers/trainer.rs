//! Kubeflow Trainer's own snapshot writer as a peer (`--trainer`): Trainer 2.3's controller
//! manager (the node build's `trainer-controller-manager`) started over a backlog of the same
//! number of TrainJobs, in a namespace of their own, with a baseline of its own in that
//! namespace (the same ConfigMaps, created directly), in the same run as holdfast's.
//!
//! Trainer writes a snapshot as part of a whole reconcile: it reads the snapshot from its
//! cache, and when there is none it server-side-applies one (no label: the count here is by
//! name), then applies the TrainJob's JobSet. Its figures are its snapshots' pace, every
//! request it sends (by verb and resource, from the audit log), its ConfigMap writes per
//! snapshot, its peak memory and CPU.
//!
//! It runs in the control plane's process group, so it is stopped with the control plane
//! however the bench ends.

use super::{
    Args, Components, Cpu, count_snapshots, cpu_secs, create_trainjobs, raw_creates, ready_at,
    status_kib,
};
use holdfast_tests::process::Supervised;
use holdfast_tests::{ControlPlane, Identity};
use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::Api;
use kube::runtime::watcher;
use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::{Duration, Instant};

/// What Trainer's writer did, for the bench's closing table.
pub struct Figures {
    pub binary: PathBuf,
    pub qps: f32,
    pub baseline: Duration,
    pub total: Duration,
    pub first_to_last: Option<Duration>,
    pub ready_after: Option<Duration>,
    pub requests: BTreeMap<String, usize>,
    pub steady_requests: usize,
    pub peak_rss_kib: u64,
    pub cpu_secs: f64,
    pub cpu_baseline: Cpu,
    pub cpu_writer: Cpu,
}

/// The Trainer controller manager to run: `--trainer-bin`, else the node build's.
fn binary(args: &Args) -> anyhow::Result<PathBuf> {
    match &args.trainer_bin {
        Some(bin) => Ok(bin.clone()),
        None => Ok(holdfast_tests::node::ensure()?.bin("trainer-controller-manager")),
    }
}

/// Trainer's writer over `args.jobs` TrainJobs of a namespace of its own; returns once it is
/// stopped (it reconciles every namespace, so it must not see holdfast's TrainJobs).
pub async fn run(
    cp: &ControlPlane,
    admin: &kube::Client,
    rendered: &holdfast_core::snapshot::Rendered,
    args: &Args,
) -> anyhow::Result<Figures> {
    let n = args.jobs;
    let conc = usize::from(args.concurrency.max(1));
    let binary = binary(args)?;
    let ns = cp.namespace("bench-trainer").await?;
    let ns = ns.as_str();
    let jobs = create_trainjobs(admin, ns, n).await?;
    let cms: Vec<ConfigMap> = jobs
        .iter()
        .map(|job| super::baseline_configmap(job, rendered))
        .collect::<anyhow::Result<_>>()?;
    let components = Components::of(cp.process_group());
    let (baseline, cpu_baseline) = raw_creates(cp, admin, ns, cms, conc, &components).await?;

    // Counted by name: Trainer's snapshots carry no label.
    let seen = tokio::spawn(count_snapshots(
        Api::namespaced(admin.clone(), ns),
        watcher::Config::default(),
        n,
    ));
    let health = holdfast_tests::control_plane::free_port()?;
    let dir = configure(cp, health, args.trainer_qps)?;
    eprintln!(
        "Trainer: snapshotting {n} TrainJobs ({}, client QPS {})...",
        binary.display(),
        args.trainer_qps
    );
    let cpu_before = components.cpu();
    let started = Instant::now();
    let audit_from = k8s_openapi::jiff::Timestamp::now();
    // Killed when dropped, on every way out of this function.
    let mut child = cp.spawn_env(
        "bench-trainer",
        &binary,
        vec![
            format!("--config={}", dir.join("config.yaml").display()),
            format!(
                "--kubeconfig={}",
                cp.kubeconfig(Identity::Trainer).display()
            ),
        ],
        &[("TMPDIR".to_owned(), dir.join("tmp").display().to_string())],
    )?;
    let pid = child
        .pid()
        .ok_or_else(|| anyhow::anyhow!("Trainer did not start"))?;
    let ready = tokio::spawn(ready_at(format!("http://127.0.0.1:{health}/readyz")));
    let (first, last) = wait_for(&mut child, seen).await?;
    let total = last.duration_since(started);
    let cpu_writer = components.cpu().since(&cpu_before);
    let ready_after = match ready.is_finished() {
        true => ready.await?.map(|r| r.duration_since(started)),
        false => {
            ready.abort();
            None
        }
    };
    let steady_from = k8s_openapi::jiff::Timestamp::now();
    eprintln!("  Trainer runs on for {}s...", args.steady);
    tokio::time::sleep(Duration::from_secs(args.steady)).await;
    let steady_to = k8s_openapi::jiff::Timestamp::now();
    let status = std::fs::read_to_string(format!("/proc/{pid}/status"))?;
    let peak_rss_kib = status_kib(&status, "VmHWM:");
    let cpu_secs = cpu_secs(pid);
    child.kill();

    tokio::time::sleep(Duration::from_millis(500)).await;
    let user = Identity::Trainer.username();
    let audit = cp.audit_events_where(|l| l.contains(user))?;
    let mut requests: BTreeMap<String, usize> = BTreeMap::new();
    let mut steady_requests = 0;
    for e in audit.iter().filter(|e| e["user"]["username"] == user) {
        let received = e["requestReceivedTimestamp"]
            .as_str()
            .and_then(|s| s.parse::<k8s_openapi::jiff::Timestamp>().ok());
        let Some(received) = received.filter(|t| *t >= audit_from) else {
            continue;
        };
        let key = format!(
            "{} {}",
            e["verb"].as_str().unwrap_or("?"),
            e["objectRef"]["resource"].as_str().unwrap_or("?")
        );
        *requests.entry(key).or_default() += 1;
        if received >= steady_from && received < steady_to {
            steady_requests += 1;
        }
    }
    Ok(Figures {
        binary,
        qps: args.trainer_qps,
        baseline,
        total,
        first_to_last: first.map(|f| last.duration_since(f)),
        ready_after,
        requests,
        steady_requests,
        peak_rss_kib,
        cpu_secs,
        cpu_baseline,
        cpu_writer,
    })
}

/// A directory holding Trainer's configuration (health on `health`, metrics off, no leader
/// election, no certificate management, the client's rate limit at `qps`) and the webhook
/// serving certificate controller-runtime reads from `$TMPDIR/k8s-webhook-server/serving-certs`
/// (Trainer's webhooks are not registered here; its server must still start).
fn configure(cp: &ControlPlane, health: u16, qps: f32) -> anyhow::Result<PathBuf> {
    let dir = cp.dir().join("bench-trainer");
    let certs = dir
        .join("tmp")
        .join("k8s-webhook-server")
        .join("serving-certs");
    std::fs::create_dir_all(&certs)?;
    let cert = cp.issue_serving_cert(&["localhost"], Duration::from_secs(24 * 3600))?;
    std::fs::write(certs.join("tls.crt"), &cert.cert_pem)?;
    std::fs::write(certs.join("tls.key"), &cert.key_pem)?;
    let webhook = holdfast_tests::control_plane::free_port()?;
    let burst = (qps * 2.0).ceil() as u32;
    std::fs::write(
        dir.join("config.yaml"),
        format!(
            "{}clientConnection:\n  qps: {qps}\n  burst: {burst}\n",
            holdfast_tests::node::trainer_configuration(health, webhook, "127.0.0.1")
        ),
    )?;
    Ok(dir)
}

/// The snapshot count's result, failing with the log's tail if Trainer exits first or an hour
/// passes.
async fn wait_for(
    child: &mut Supervised,
    seen: tokio::task::JoinHandle<(Option<Instant>, Instant)>,
) -> anyhow::Result<(Option<Instant>, Instant)> {
    let deadline = Instant::now() + Duration::from_secs(3600);
    while !seen.is_finished() {
        if !child.running() {
            anyhow::bail!("Trainer exited:\n{}", child.log_tail(30));
        }
        if Instant::now() > deadline {
            anyhow::bail!(
                "Trainer did not snapshot within an hour:\n{}",
                child.log_tail(30)
            );
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    Ok(seen.await?)
}

/// Trainer's figures beside holdfast's (`holdfast_rate` snapshots a second from process start,
/// against its own baseline's `holdfast_baseline_rate`).
pub fn print(peer: &Figures, n: usize, holdfast_rate: f64, holdfast_baseline_rate: f64) {
    let per = |secs: f64| n as f64 / secs.max(1e-9);
    let baseline_rate = per(peer.baseline.as_secs_f64());
    let rate = per(peer.total.as_secs_f64());
    println!();
    println!(
        "Trainer's own writer: {n} TrainJobs; {} (client QPS {})",
        peer.binary.display(),
        peer.qps
    );
    println!(
        "  its baseline, raw ConfigMap creates: {baseline_rate:>8.0}/s ({:.2}s)",
        peer.baseline.as_secs_f64()
    );
    println!(
        "  Trainer, from process start:  {rate:>8.0}/s ({:.2}s) = {:.2}x its baseline",
        peer.total.as_secs_f64(),
        rate / baseline_rate
    );
    if let Some(d) = peer.first_to_last {
        let r = per(d.as_secs_f64());
        println!(
            "  Trainer, first to last:       {r:>8.0}/s ({:.2}s) = {:.2}x its baseline",
            d.as_secs_f64(),
            r / baseline_rate
        );
    }
    let total: usize = peer.requests.values().sum();
    let configmap_writes: usize = peer
        .requests
        .iter()
        .filter(|(k, _)| {
            k.ends_with(" configmaps")
                && ["create ", "patch ", "update "]
                    .iter()
                    .any(|v| k.starts_with(v))
        })
        .map(|(_, v)| v)
        .sum();
    println!(
        "  API requests by Trainer: {total} = {:.3} per TrainJob; ConfigMap writes {configmap_writes} = {:.3} per snapshot",
        total as f64 / n as f64,
        configmap_writes as f64 / n as f64
    );
    for (k, v) in &peer.requests {
        println!("    {v:>7}  {k}");
    }
    println!(
        "  Trainer peak RSS (VmHWM): {:.1} MiB",
        peer.peak_rss_kib as f64 / 1024.0
    );
    println!(
        "  Trainer CPU time: {:.2}s = {:.2} ms per TrainJob",
        peer.cpu_secs,
        peer.cpu_secs * 1000.0 / n as f64
    );
    println!("  CPU seconds while its baseline ran and while Trainer did, by process:");
    for (name, base) in &peer.cpu_baseline.0 {
        let during = peer.cpu_writer.get(name);
        if base + during >= 0.05 {
            println!("    {name:<24} {base:>7.2}s  {during:>7.2}s");
        }
    }
    match peer.ready_after {
        Some(r) => println!(
            "  time from start to ready (/readyz): {:.2}s",
            r.as_secs_f64()
        ),
        None => println!("  time from start to ready: not answered before the last snapshot"),
    }
    println!(
        "  steady state, after the last snapshot: {} requests",
        peer.steady_requests
    );
    println!(
        "  holdfast / Trainer, snapshots a second from process start: {:.2} (ratios to their own baselines: {:.2} / {:.2})",
        holdfast_rate / rate,
        holdfast_rate / holdfast_baseline_rate,
        rate / baseline_rate
    );
}
