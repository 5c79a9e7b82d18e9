//! A node's worth of holds at once: when a node is lost, dispatch holds every job that ran on
//! it, and releases them all after recovery. Through the hold API (HTTPS, alice's bearer
//! token), `--jobs` distinct running TrainJobs are held by `--concurrency` concurrent callers,
//! then released (and before that, for comparison, by the executor in-process); the baselines are alice's own raw GET+UPDATE pairs on the same TrainJobs at
//! the same concurrency (for the release wave: GET, LIST of the job's pods, UPDATE, as
//! Release's pod check does). Reported per wave: wall time and throughput against the
//! baseline's, the answers that were not 200 (a `Conflict` would mean the callers got in each
//! other's way), and the apiserver requests per job of each (from its audit log).
//!
//! `cargo run --release -p holdfast-tests --example hold_wave_bench -- --jobs 1000 --concurrency 64`

use holdfast_tests::hold_support;

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use clap::Parser;
use futures::StreamExt;
use hold_support::api::{HoldApi, grant_alice, reviews_in, start_api};
use hold_support::*;
use holdfast_tests::{ControlPlane, Identity};
use kube::api::{Api, DynamicObject, ListParams, PostParams};
use serde_json::{Value, json};

#[derive(Parser)]
struct Args {
    /// Distinct running TrainJobs, all held and then released.
    #[arg(long, default_value_t = 1000)]
    jobs: usize,
    /// Concurrent callers, for the API and for the baseline alike.
    #[arg(long, default_value_t = 64)]
    concurrency: usize,
}

fn name(i: usize) -> String {
    format!("job-{i:05}")
}

/// One wave: how long it took and what the callers were answered.
struct Wave {
    took: Duration,
    answers: BTreeMap<String, usize>,
}

/// Runs `call(i)` for every job at `concurrency`; each answers a label ("200", "Conflict", ...).
/// Says on stderr when the wave `name` starts and ends (a profiler can be switched on by it).
async fn wave<F, Fut>(name: &str, jobs: usize, concurrency: usize, call: F) -> Wave
where
    F: Fn(usize) -> Fut,
    Fut: Future<Output = String>,
{
    eprintln!("wave start: {name}");
    let started = Instant::now();
    let labels: Vec<String> = futures::stream::iter((0..jobs).map(&call))
        .buffer_unordered(concurrency)
        .collect()
        .await;
    let took = started.elapsed();
    eprintln!("wave end: {name}");
    let mut answers = BTreeMap::new();
    for l in labels {
        *answers.entry(l).or_default() += 1;
    }
    Wave { took, answers }
}

/// The raw pair: alice reads the TrainJob and writes it back with an annotation changed; with
/// `list_pods`, she lists its pods in between, as Release does.
async fn raw_pair(
    tjs: &Api<DynamicObject>,
    pods: &Api<k8s_openapi::api::core::v1::Pod>,
    job: String,
    list_pods: bool,
    n: usize,
) -> String {
    let Ok(mut tj) = tjs.get(&job).await else {
        return "GET failed".into();
    };
    if list_pods {
        // What Release lists: the namespace's pods (an execution's are found by ownership).
        if pods.list(&ListParams::default()).await.is_err() {
            return "LIST failed".into();
        }
    }
    tj.metadata
        .annotations
        .get_or_insert_with(Default::default)
        .insert("bench.holdfast.dev/n".into(), n.to_string());
    match tjs.replace(&job, &PostParams::default(), &tj).await {
        Ok(_) => "200".into(),
        Err(kube::Error::Api(s)) => s.code.to_string(),
        Err(e) => format!("error: {e}"),
    }
}

/// One API call; answers the status, or for a failure the body's `error` and `cause`.
async fn api_call(api: &HoldApi, token: &str, path: String, body: Value) -> String {
    let (status, answer) = api.post(&path, Some(token), &body).await;
    if status == 200 {
        let outcome = answer["outcome"].as_str().unwrap_or_default();
        return match answer.get("resumed") {
            Some(r) => format!("200 {outcome} resumed={r}"),
            None => format!("200 {outcome}"),
        };
    }
    let field = |k: &str| answer[k].as_str().unwrap_or_default().to_owned();
    format!("{status} {} {}", field("error"), field("cause"))
}

/// Requests per job by `user` in `ns`, from the audit log, counting those whose user agent
/// contains `tag` (all, when empty) among `events[from..]`.
fn requests_per_job(events: &[Value], from: usize, user: &str, ns: &str, jobs: usize) -> f64 {
    let n = events[from..]
        .iter()
        .filter(|e| {
            e.pointer("/user/username").and_then(Value::as_str) == Some(user)
                && e.pointer("/objectRef/namespace").and_then(Value::as_str) == Some(ns)
                && matches!(verb(e), "get" | "list" | "update")
        })
        .count();
    n as f64 / jobs as f64
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    anyhow::ensure!(
        args.jobs > 0 && args.concurrency > 0,
        "--jobs and --concurrency must be positive"
    );
    let cp = ControlPlane::shared();
    let ns = cp.namespace("wave").await?;
    let admin = cp.client(Identity::Admin).await?;
    ensure_runtime(&admin).await;
    let admin_tjs = trainjobs(&admin, &ns);
    // Running TrainJobs past their start gate (as Open leaves them): Hold suspends each,
    // Release resumes it.
    let created: Vec<anyhow::Result<()>> = futures::stream::iter(0..args.jobs)
        .map(|i| {
            let api = admin_tjs.clone();
            async move {
                let tj: DynamicObject = serde_json::from_value(json!({
                    "apiVersion": "trainer.kubeflow.org/v1alpha1", "kind": "TrainJob",
                    "metadata": {"name": name(i),
                        "annotations": {holdfast_core::names::ANN_OPENED: "true"}},
                    "spec": {"runtimeRef": {"name": "torch-distributed"}, "suspend": false}
                }))?;
                api.create(&PostParams::default(), &tj).await?;
                Ok(())
            }
        })
        .buffer_unordered(16)
        .collect()
        .await;
    created.into_iter().collect::<anyhow::Result<Vec<()>>>()?;

    grant_alice(cp, &ns, &["hold", "release", "status"], &["create", "get"]).await;
    let api = start_api(cp, executor(cp).await).await;
    let token = cp.token(Identity::User);
    // One call first: the client negotiates HTTP/2 (ALPN), so the wave's callers share one
    // connection, as a dispatch at this concurrency should (the API admits 32 connections
    // per source address); and authentication is remembered, as in steady state.
    let (status, answer) = api
        .get(
            &format!("/v1/namespaces/{ns}/trainjobs/{}/status", name(0)),
            token,
        )
        .await;
    anyhow::ensure!(status == 200, "status: {status} {answer}");
    let alice = client_without_retries(cp, Identity::User).await;
    let raw_tjs = trainjobs(&alice, &ns);
    let raw_pods = Api::namespaced(alice.clone(), &ns);
    let deadline = (jiff::Timestamp::now() + jiff::SignedDuration::from_secs(600)).to_string();
    let alice_name = Identity::User.username();
    let controller = Identity::Controller.username();

    let mark = settled_audit(cp).await.len();
    let raw_hold = wave("raw hold", args.jobs, args.concurrency, |i| {
        raw_pair(&raw_tjs, &raw_pods, name(i), false, 1)
    })
    .await;
    let events = settled_audit(cp).await;
    let raw_hold_requests = requests_per_job(&events, mark, alice_name, &ns, args.jobs);

    // The executor in-process (no HTTPS, no authentication): what the API layer adds is the
    // difference to the API's wave.
    let exec = executor(cp).await;
    let in_process = |call: &'static str, i: usize| {
        let (exec, ns) = (exec.clone(), ns.clone());
        async move {
            let m = meta(Some(1), Duration::from_secs(600));
            let answer = match call {
                "hold" => exec.hold(&ns, &name(i), m).await,
                _ => exec.release(&ns, &name(i), m).await,
            };
            match answer {
                Ok(outcome) => format!("200 {outcome:?}"),
                Err(e) => format!("{e:?}"),
            }
        }
    };
    let mark = events.len();
    let exec_hold = wave("executor hold", args.jobs, args.concurrency, |i| {
        in_process("hold", i)
    })
    .await;
    let events = settled_audit(cp).await;
    let exec_hold_requests = requests_per_job(&events, mark, controller, &ns, args.jobs);
    let mark = events.len();
    let exec_release = wave("executor release", args.jobs, args.concurrency, |i| {
        in_process("release", i)
    })
    .await;
    let events = settled_audit(cp).await;
    let exec_release_requests = requests_per_job(&events, mark, controller, &ns, args.jobs);

    let mark = events.len();
    let api_hold = wave("API hold", args.jobs, args.concurrency, |i| {
        api_call(
            &api,
            token,
            format!("/v1/namespaces/{ns}/trainjobs/{}/hold", name(i)),
            json!({"instance": 2, "deadline": deadline, "reason": "node lost"}),
        )
    })
    .await;
    let events = settled_audit(cp).await;
    let api_hold_requests = requests_per_job(&events, mark, controller, &ns, args.jobs);
    let api_hold_reviews = reviews_in(&events[mark..]);

    let mark = events.len();
    let raw_release = wave("raw release", args.jobs, args.concurrency, |i| {
        raw_pair(&raw_tjs, &raw_pods, name(i), true, 2)
    })
    .await;
    let events = settled_audit(cp).await;
    let raw_release_requests = requests_per_job(&events, mark, alice_name, &ns, args.jobs);

    let mark = events.len();
    let api_release = wave("API release", args.jobs, args.concurrency, |i| {
        api_call(
            &api,
            token,
            format!("/v1/namespaces/{ns}/trainjobs/{}/release", name(i)),
            json!({"instance": 2, "deadline": deadline}),
        )
    })
    .await;
    let events = settled_audit(cp).await;
    let api_release_requests = requests_per_job(&events, mark, controller, &ns, args.jobs);
    let api_release_reviews = reviews_in(&events[mark..]);

    println!(
        "hold_wave_bench: {} running TrainJobs, {} concurrent callers, local control plane",
        args.jobs, args.concurrency
    );
    println!(
        "{:<36} {:>10} {:>10} {:>16} {:>14}  answers",
        "", "wall", "jobs/s", "/ raw (jobs/s)", "requests/job"
    );
    let rows = [
        (
            "raw GET+UPDATE (alice)",
            &raw_hold,
            raw_hold_requests,
            &raw_hold,
        ),
        (
            "Hold wave, executor in-process",
            &exec_hold,
            exec_hold_requests,
            &raw_hold,
        ),
        ("API Hold wave", &api_hold, api_hold_requests, &raw_hold),
        (
            "raw GET+LIST pods+UPDATE (alice)",
            &raw_release,
            raw_release_requests,
            &raw_release,
        ),
        (
            "Release wave, executor in-process",
            &exec_release,
            exec_release_requests,
            &raw_release,
        ),
        (
            "API Release wave",
            &api_release,
            api_release_requests,
            &raw_release,
        ),
    ];
    for (label, w, requests, baseline) in rows {
        let rate = args.jobs as f64 / w.took.as_secs_f64();
        let base = args.jobs as f64 / baseline.took.as_secs_f64();
        println!(
            "{label:<36} {:>10.2?} {:>10.1} {:>16.2} {:>14.2}  {:?}",
            w.took,
            rate,
            rate / base,
            requests,
            w.answers
        );
    }
    // The reviews are cluster-scoped requests, so the per-job counts above leave them out.
    for (label, (tokens, grants)) in [
        ("API Hold wave", api_hold_reviews),
        ("API Release wave", api_release_reviews),
    ] {
        println!(
            "{label}: TokenReviews per job {:.3}, SubjectAccessReviews per job {:.3}",
            tokens as f64 / args.jobs as f64,
            grants as f64 / args.jobs as f64
        );
    }
    let all_ok = |w: &Wave| {
        w.answers
            .iter()
            .filter(|(k, _)| k.starts_with("200"))
            .map(|(_, n)| n)
            .sum::<usize>()
            == args.jobs
    };
    for w in [&exec_hold, &exec_release, &api_hold, &api_release] {
        anyhow::ensure!(
            all_ok(w),
            "every Hold and Release succeeds: {:?}",
            w.answers
        );
    }
    // Every job is held once and released once: check the end state.
    let listed = admin_tjs.list(&ListParams::default()).await?;
    let still_held = listed
        .items
        .iter()
        .filter(|tj| {
            let v = serde_json::to_value(tj).unwrap_or_default();
            !hold_annotations(&v).is_empty() || suspended(&v)
        })
        .count();
    anyhow::ensure!(
        still_held == 0,
        "{still_held} TrainJobs still held or suspended"
    );
    cp.stop();
    Ok(())
}
