//! What holdfast costs a TrainJob's life on the node, against what a user would run instead,
//! in the same run. Rounds alternate between four configurations: Trainer alone (no holdfast
//! release installed; stop and resume by `spec.suspend`), Trainer with holdfast in plain mode
//! (jobs managed, created suspended, opened, held and released through the hold API), Kueue
//! with Trainer alone (jobs queued; stop and resume by the Workload's `spec.active`, Kueue's
//! own way), and Kueue with Trainer and holdfast in kueue mode (queued and managed, the
//! ClusterQueue gated by holdfast's readmission check; opened, held and released through the
//! hold API). Kueue runs through every round, so each configuration has the same neighbours.
//! Per job: create → first pod Running, stop → last pod gone, resume → new pod Running; per
//! configuration, the apiserver's `apiserver_request_total` moved over its rounds (every
//! client in the cluster).
//!
//! Sized by `HOLDFAST_BENCH_NODE_JOBS` (jobs per configuration per round, default 2) and
//! `HOLDFAST_BENCH_NODE_ROUNDS` (default 1); the book's benchmarks page has the full command.
//! No timing is asserted; every job must start, stop and resume, and the counters must move.

use super::*;
use holdfast_core::names::{LABEL_MANAGED, QUEUE_NAME_LABEL};
use std::collections::BTreeMap;

/// Jobs in flight at once: the node has 2 cores, shared.
const IN_FLIGHT: usize = 2;
/// The longest any single step may take before the bench fails.
const STEP: Duration = Duration::from_secs(180);

/// Requests counted by the apiserver, by `VERB resource[/subresource]`.
type Requests = BTreeMap<String, f64>;

#[derive(Default)]
struct Figures {
    start: Vec<Duration>,
    stop: Vec<Duration>,
    resume: Vec<Duration>,
    requests: Requests,
    jobs: usize,
}

#[derive(Clone, Copy, PartialEq, Debug)]
enum Config {
    Alone,
    Plain,
    KueueAlone,
    KueueHoldfast,
}

impl Config {
    /// Each round's order; odd rounds run each pair the other way round, so neither side of a
    /// pair always runs on a warmer node.
    fn order(round: usize) -> [Config; 4] {
        use Config::*;
        if round.is_multiple_of(2) {
            [Alone, Plain, KueueAlone, KueueHoldfast]
        } else {
            [Plain, Alone, KueueHoldfast, KueueAlone]
        }
    }

    fn label(self) -> &'static str {
        match self {
            Config::Alone => "Trainer alone",
            Config::Plain => "holdfast plain",
            Config::KueueAlone => "Kueue+Trainer",
            Config::KueueHoldfast => "holdfast kueue",
        }
    }

    fn holdfast_mode(self) -> Option<&'static str> {
        match self {
            Config::Plain => Some("plain"),
            Config::KueueHoldfast => Some("kueue"),
            Config::Alone | Config::KueueAlone => None,
        }
    }

    fn queued(self) -> bool {
        matches!(self, Config::KueueAlone | Config::KueueHoldfast)
    }
}

fn env_count(name: &str, default: usize, max: usize) -> usize {
    match std::env::var(name) {
        Ok(v) => v
            .parse::<usize>()
            .ok()
            .filter(|n| (1..=max).contains(n))
            .unwrap_or_else(|| panic!("{name}={v}: a whole number from 1 to {max}")),
        Err(_) => default,
    }
}

/// The kube-apiserver's `apiserver_request_total`, summed by verb and resource, with the
/// answer's code added where it is not a success (`POST workloads [409]`): the counter has no
/// client label, so a refused request retried is told apart from work done only by its code.
async fn apiserver_requests(admin: &kube::Client) -> Requests {
    let req = http::Request::get("/metrics")
        .body(Vec::new())
        .expect("request");
    let text = admin.request_text(req).await.expect("GET /metrics");
    let mut out = Requests::new();
    for line in text.lines() {
        let Some(rest) = line.strip_prefix("apiserver_request_total{") else {
            continue;
        };
        let Some((labels, value)) = rest.rsplit_once("} ") else {
            continue;
        };
        let label = |name: &str| {
            labels
                .split(',')
                .find_map(|kv| kv.strip_prefix(&format!("{name}=\"")))
                .and_then(|v| v.strip_suffix('"'))
                .unwrap_or_default()
                .to_owned()
        };
        let sub = label("subresource");
        let mut key = if sub.is_empty() {
            format!("{} {}", label("verb"), label("resource"))
        } else {
            format!("{} {}/{sub}", label("verb"), label("resource"))
        };
        let code = label("code");
        if !code.starts_with('2') {
            key = format!("{key} [{code}]");
        }
        let v: f64 = value.trim().parse().unwrap_or(0.0);
        *out.entry(key).or_default() += v;
    }
    assert!(
        !out.is_empty(),
        "the apiserver exposes apiserver_request_total"
    );
    out
}

fn add_difference(into: &mut Requests, before: &Requests, after: &Requests) {
    for (k, v) in after {
        let d = v - before.get(k).copied().unwrap_or(0.0);
        if d > 0.0 {
            *into.entry(k.clone()).or_default() += d;
        }
    }
}

/// Nearest-rank quantile `q` of `xs` (sorted here), in milliseconds.
fn quantile_ms(xs: &[Duration], q: f64) -> f64 {
    let mut v: Vec<f64> = xs.iter().map(|d| d.as_secs_f64() * 1000.0).collect();
    v.sort_by(f64::total_cmp);
    if v.is_empty() {
        return f64::NAN;
    }
    let rank = ((q * v.len() as f64).ceil() as usize).clamp(1, v.len());
    v[rank - 1]
}

/// What one configuration does to one job.
struct Path<'a> {
    config: Config,
    trainjobs: Api<DynamicObject>,
    workloads: Api<DynamicObject>,
    pods: Api<Pod>,
    ns: String,
    hold_api: Option<&'a ServiceHoldApi>,
    alice: String,
}

impl Path<'_> {
    async fn suspend(&self, job: &str, suspend: bool) {
        self.trainjobs
            .patch(
                job,
                &PatchParams::default(),
                &Patch::Merge(serde_json::json!({"spec": {"suspend": suspend}})),
            )
            .await
            .unwrap_or_else(|e| panic!("suspend={suspend} {job}: {e}"));
    }

    /// Kueue's own stop and resume: the Workload of TrainJob `uid` made inactive or active.
    async fn activate(&self, job: &str, uid: &str, active: bool) {
        let workload = wait_for("the job's Workload", STEP, || async {
            self.workloads
                .list(&ListParams::default().labels(&format!("kueue.x-k8s.io/job-uid={uid}")))
                .await
                .ok()?
                .items
                .into_iter()
                .next()
        })
        .await;
        let name = workload.metadata.name.unwrap_or_default();
        self.workloads
            .patch(
                &name,
                &PatchParams::default(),
                &Patch::Merge(serde_json::json!({"spec": {"active": active}})),
            )
            .await
            .unwrap_or_else(|e| panic!("active={active} on {job}'s Workload {name}: {e}"));
    }

    async fn call(&self, job: &str, call: &str, instance: Option<u64>, outcome: Option<&str>) {
        let api = self.hold_api.expect("the hold API");
        let (status, answer) = api.call(&self.alice, &self.ns, job, call, instance).await;
        assert_eq!(
            (status, &answer["result"]),
            (200, &serde_json::json!("Ok")),
            "{call} {job}: {answer}"
        );
        if let Some(outcome) = outcome {
            assert_eq!(answer["outcome"], outcome, "{call} {job}: {answer}");
        }
    }

    /// Create, first pod Running; stop, last pod gone; resume, a new pod Running; then the
    /// TrainJob deleted and its pods waited out (not timed).
    async fn life(&self, job: String) -> (Duration, Duration, Duration) {
        let t = Instant::now();
        let mut tj = serde_json::json!({
            "apiVersion": "trainer.kubeflow.org/v1alpha1", "kind": "TrainJob",
            "metadata": {"name": job, "labels": {}},
            "spec": {"runtimeRef": {"name": "workload", "kind": "TrainingRuntime", "apiGroup": "trainer.kubeflow.org"}}
        });
        if self.config.holdfast_mode().is_some() {
            // Dispatch's own job: a Release resumes only a job dispatch opened.
            tj["metadata"]["labels"][LABEL_MANAGED] = "true".into();
            tj["spec"]["suspend"] = true.into();
        }
        if self.config.queued() {
            tj["metadata"]["labels"][QUEUE_NAME_LABEL] = "main".into();
        }
        let created = self
            .trainjobs
            .create(
                &PostParams::default(),
                &serde_json::from_value(tj).expect("trainjob"),
            )
            .await
            .unwrap_or_else(|e| panic!("create {job}: {e}"));
        let uid = created.metadata.uid.unwrap_or_default();
        if self.config.holdfast_mode().is_some() {
            self.call(&job, "open", None, None).await;
        }
        let first = next_execution(&self.pods, &job, &[], "the first pod Running", STEP).await;
        let start = t.elapsed();

        let t = Instant::now();
        match self.config {
            Config::Alone => self.suspend(&job, true).await,
            Config::KueueAlone => self.activate(&job, &uid, false).await,
            Config::Plain | Config::KueueHoldfast => {
                self.call(&job, "hold", Some(1), Some("Held")).await
            }
        }
        wait_for("the last pod gone", STEP, || async {
            running_pods(&self.pods, &job)
                .await
                .is_empty()
                .then_some(())
        })
        .await;
        let stop = t.elapsed();

        let old: Vec<String> = first
            .iter()
            .filter_map(|p| p.metadata.uid.clone())
            .collect();
        let t = Instant::now();
        match self.config {
            Config::Alone => self.suspend(&job, false).await,
            Config::KueueAlone => self.activate(&job, &uid, true).await,
            Config::Plain | Config::KueueHoldfast => {
                self.call(&job, "release", Some(1), Some("Released")).await
            }
        }
        next_execution(&self.pods, &job, &old, "a new pod Running", STEP).await;
        let resume = t.elapsed();

        self.trainjobs
            .delete(&job, &DeleteParams::background())
            .await
            .unwrap_or_else(|e| panic!("delete {job}: {e}"));
        wait_for("the deleted job's pods gone", STEP, || async {
            running_pods(&self.pods, &job)
                .await
                .is_empty()
                .then_some(())
        })
        .await;
        (start, stop, resume)
    }
}

/// One configuration's round: `jobs` lives, [`IN_FLIGHT`] at a time, and the apiserver's
/// request counters read around them.
async fn round(
    cluster: &NodeCluster,
    admin: &kube::Client,
    config: Config,
    round: usize,
    jobs: usize,
    figures: &mut Figures,
) {
    let ns = cluster
        .namespace(&format!("node-cost-{round}"))
        .await
        .expect("namespace");
    let trainjobs = requesting_runtime(cluster, admin, &ns).await;
    let mut release = None;
    let mut hold_api = None;
    let mut checks = Vec::new();
    if let Some(mode) = config.holdfast_mode() {
        let name = format!("hfcost{round}{}", &mode[..1]);
        let r = ChartRelease::install(
            cluster,
            &name,
            &format!("{name}-system"),
            &[&format!("mode={mode}")],
        )
        .await;
        if mode == "kueue" {
            checks.push(format!("{}-readmission", r.fullname()));
        }
        holdfast_tests::hold_support::api::grant_alice(
            cluster,
            &ns,
            &["open", "hold", "release", "status"],
            &["create", "get"],
        )
        .await;
        hold_api = Some(r.hold_api(cluster).await);
        release = Some(r);
    }
    if config.queued() {
        let checks: Vec<&str> = checks.iter().map(String::as_str).collect();
        holdfast_tests::kueue::create_queues(admin, &ns, "main", &checks)
            .await
            .expect("queues");
    }
    let path = Path {
        config,
        trainjobs,
        workloads: Api::namespaced_with(
            admin.clone(),
            &ns,
            &holdfast_cluster::resources::workload(),
        ),
        pods: Api::namespaced(admin.clone(), &ns),
        ns: ns.clone(),
        hold_api: hold_api.as_ref(),
        alice: cluster.token(Identity::User).to_owned(),
    };
    let before = apiserver_requests(admin).await;
    let lives: Vec<_> = futures::stream::iter((0..jobs).map(|i| path.life(format!("job{i}"))))
        .buffer_unordered(IN_FLIGHT)
        .collect()
        .await;
    let after = apiserver_requests(admin).await;
    add_difference(&mut figures.requests, &before, &after);
    for (start, stop, resume) in lives {
        figures.start.push(start);
        figures.stop.push(stop);
        figures.resume.push(resume);
    }
    figures.jobs += jobs;
    if let Some(mut r) = release {
        r.uninstall().expect("helm uninstall");
    }
    if config.queued() {
        // The round's cluster-wide queue objects, so that no later round runs beside a
        // ClusterQueue still gated by an uninstalled release's check.
        holdfast_tests::kueue::delete_queues(admin, &ns)
            .await
            .expect("delete the round's queues");
    }
}

/// Creates TrainingRuntime `workload` in `ns` as `admin`, its pods requesting a little CPU and
/// memory (Kueue applies a ClusterQueue's admission checks by the flavors a Workload is
/// assigned, and a pod set requesting nothing is assigned none), the same in every
/// configuration; the TrainJobs of `ns`, as `admin`.
async fn requesting_runtime(
    cluster: &NodeCluster,
    admin: &kube::Client,
    ns: &str,
) -> Api<DynamicObject> {
    let mut runtime = training_runtime("workload", cluster.workload_image());
    runtime["spec"]["template"]["spec"]["replicatedJobs"][0]["template"]["spec"]["template"]["spec"]
        ["containers"][0]["resources"] =
        serde_json::json!({"requests": {"cpu": "10m", "memory": "16Mi"}});
    create_runtime(admin, ns, runtime).await;
    Api::namespaced_with(admin.clone(), ns, &holdfast_cluster::resources::trainjob())
}

/// Trainer alone against Trainer with holdfast in plain mode, and Kueue with Trainer alone
/// against the same with holdfast in kueue mode, in alternating rounds on the shared node: per
/// job, create → first pod Running, stop → last pod gone, resume → a new pod Running (median
/// and p99, and their ratio to the configuration without holdfast), and the apiserver's
/// requests per job over each configuration's rounds.
#[tokio::test]
#[ignore = "tier 3: run with --ignored (builds and starts a real node)"]
async fn a_trainjobs_start_stop_and_resume_cost_with_holdfast_against_trainer_alone_and_kueue_with_trainer_alone()
 {
    let jobs = env_count("HOLDFAST_BENCH_NODE_JOBS", 2, 200);
    let rounds = env_count("HOLDFAST_BENCH_NODE_ROUNDS", 1, 10);
    let cluster = NodeCluster::shared();
    let admin = cluster.client(Identity::Admin).await.expect("client");
    cluster.start_kueue().await.expect("kueue starts");
    let mut figures: BTreeMap<&'static str, Figures> = BTreeMap::new();
    for r in 0..rounds {
        for config in Config::order(r) {
            let t = Instant::now();
            round(
                cluster,
                &admin,
                config,
                r,
                jobs,
                figures.entry(config.label()).or_default(),
            )
            .await;
            eprintln!(
                "round {r} {}: {jobs} jobs in {:?}",
                config.label(),
                t.elapsed()
            );
        }
    }
    println!("{jobs} jobs × {rounds} rounds per configuration, {IN_FLIGHT} in flight");
    for (without, with) in [
        (Config::Alone, Config::Plain),
        (Config::KueueAlone, Config::KueueHoldfast),
    ] {
        report(
            (without.label(), &figures[without.label()]),
            (with.label(), &figures[with.label()]),
        );
    }
    for (label, f) in &figures {
        assert_eq!(f.start.len(), jobs * rounds, "{label}: every job started");
        assert_eq!(f.stop.len(), jobs * rounds, "{label}: every job stopped");
        assert_eq!(f.resume.len(), jobs * rounds, "{label}: every job resumed");
        assert!(
            f.requests.values().sum::<f64>() > 0.0,
            "{label}: the apiserver's counters moved"
        );
    }
    assert_eq!(figures.len(), 4, "every configuration ran");
}

/// One pair's table: `with` (holdfast) against `without` (what a user would run instead).
fn report((without_label, without): (&str, &Figures), (with_label, with): (&str, &Figures)) {
    println!();
    println!(
        "{:<34} {:>14} {:>14} {:>10} {:>10}",
        "figure (ms)", without_label, with_label, "ratio p50", "ratio p99"
    );
    for (name, a, p) in [
        ("create → first pod Running", &without.start, &with.start),
        ("stop → last pod gone", &without.stop, &with.stop),
        ("resume → new pod Running", &without.resume, &with.resume),
    ] {
        let (a50, a99, p50, p99) = (
            quantile_ms(a, 0.5),
            quantile_ms(a, 0.99),
            quantile_ms(p, 0.5),
            quantile_ms(p, 0.99),
        );
        println!(
            "{name:<34} {:>14} {:>14} {:>10.2} {:>10.2}",
            format!("{a50:.0} / {a99:.0}"),
            format!("{p50:.0} / {p99:.0}"),
            p50 / a50,
            p99 / a99
        );
    }
    let per_job = |f: &Figures| f.requests.values().sum::<f64>() / f.jobs.max(1) as f64;
    println!(
        "{:<34} {:>14.1} {:>14.1} {:>10.2}",
        "apiserver requests per job",
        per_job(without),
        per_job(with),
        per_job(with) / per_job(without)
    );
    let mut keys: Vec<&String> = without
        .requests
        .keys()
        .chain(with.requests.keys())
        .collect();
    keys.sort();
    keys.dedup();
    let per =
        |f: &Figures, k: &str| f.requests.get(k).copied().unwrap_or(0.0) / f.jobs.max(1) as f64;
    keys.sort_by(|a, b| {
        let d = |k: &str| (per(with, k) - per(without, k)).abs();
        d(b).total_cmp(&d(a))
    });
    // The 15 that differ most, then every other line of the objects holdfast writes.
    let shown: Vec<&String> = keys
        .iter()
        .enumerate()
        .filter(|(i, k)| {
            *i < 15
                || ["configmaps", "trainjobs", "workloads"]
                    .iter()
                    .any(|r| k.contains(r))
        })
        .map(|(_, k)| *k)
        .collect();
    println!(
        "requests per job by verb and resource ({without_label}, {with_label}, difference): the 15 that differ most, then those on configmaps, trainjobs and workloads:"
    );
    for k in shown {
        println!(
            "  {k:<48} {:>8.1} {:>8.1} {:>+8.1}",
            per(without, k),
            per(with, k),
            per(with, k) - per(without, k)
        );
    }
}
