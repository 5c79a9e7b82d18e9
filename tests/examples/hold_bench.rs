//! Hold and Release latency against the local control plane, as a ratio to a raw GET+UPDATE
//! pair on the same object in the same run, and how many requests each call sends (from the
//! apiserver's audit log; the ideal is one read and one write). Then the same calls end to end
//! as dispatch makes them: HTTPS to the hold API with a bearer token (authentication,
//! authorisation, the executor and back), against a raw GET+UPDATE sent with the same
//! caller's token, with the TokenReviews and SubjectAccessReviews the API made per call.
//!
//! `cargo run --release -p holdfast-tests --example hold_bench` (`HOLDFAST_BENCH_ITERS`, default
//! 300).

use holdfast_tests::bench::Series;
use holdfast_tests::hold_support;

use std::time::{Duration, Instant};

use hold_support::api::{grant_alice, reviews_made, start_api};
use hold_support::*;
use holdfast_core::hold::Outcome;
use holdfast_tests::{ControlPlane, Identity};
use kube::api::PostParams;
use serde_json::{Value, json};

const WARMUP: usize = 20;

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() -> anyhow::Result<()> {
    let iters: usize = std::env::var("HOLDFAST_BENCH_ITERS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(300);
    let cp = ControlPlane::shared();
    let ns = cp.namespace("bench").await?;
    create_trainjob(cp, &ns, "bench", true).await;
    let exec = executor(cp).await;
    exec.open(&ns, "bench", meta(None, Duration::from_secs(30)))
        .await
        .map_err(|e| anyhow::anyhow!("open: {e}"))?;
    let raw = trainjobs(&client_without_retries(cp, Identity::Controller).await, &ns);

    let pods: kube::Api<k8s_openapi::api::core::v1::Pod> =
        kube::Api::namespaced(client_without_retries(cp, Identity::Controller).await, &ns);
    let mut pair = Series::new("raw GET+UPDATE");
    let mut list = Series::new("raw LIST pods");
    let mut hold = Series::new("Hold");
    let mut release = Series::new("Release");
    for i in 0..(WARMUP + iters) {
        let instance = i as u64 + 1;
        let t = Instant::now();
        let mut tj = raw.get("bench").await?;
        tj.metadata
            .annotations
            .get_or_insert_with(Default::default)
            .insert("bench.holdfast.dev/n".into(), i.to_string());
        raw.replace("bench", &PostParams::default(), &tj).await?;
        let took_pair = t.elapsed();

        let t = Instant::now();
        pods.list(&kube::api::ListParams::default()) // what Release lists: the namespace's pods
            .await?;
        let took_list = t.elapsed();

        let t = Instant::now();
        let held = exec
            .hold(&ns, "bench", meta(Some(instance), Duration::from_secs(30)))
            .await;
        let took_hold = t.elapsed();
        anyhow::ensure!(held == Ok(Outcome::Held), "hold {instance}: {held:?}");

        let t = Instant::now();
        let released = exec
            .release(&ns, "bench", meta(Some(instance), Duration::from_secs(30)))
            .await;
        let took_release = t.elapsed();
        anyhow::ensure!(
            released == Ok(Outcome::Released { resumed: true }),
            "release {instance}: {released:?}"
        );
        if i >= WARMUP {
            pair.samples.push(took_pair);
            list.samples.push(took_list);
            hold.samples.push(took_hold);
            release.samples.push(took_release);
        }
    }

    let events = settled_audit(cp).await;
    let mine = controller_requests(&events, &ns);
    let count = |call: &str, verb_name: Option<&str>| {
        mine.iter()
            .filter(|e| user_agent(e).contains(&format!("({call};")))
            .filter(|e| verb_name.is_none_or(|v| verb(e) == v))
            .count()
    };
    let calls = (WARMUP + iters) as f64;

    println!(
        "hold_bench: {iters} iterations (after {WARMUP} warm-up) on one TrainJob, local control plane"
    );
    println!(
        "{:<16} {:>10} {:>10} {:>12} {:>12}",
        "", "p50", "p99", "p50 / raw", "p99 / raw"
    );
    for s in [&pair, &list, &hold, &release] {
        println!(
            "{:<16} {:>10.2?} {:>10.2?} {:>12.2} {:>12.2}",
            s.name,
            s.p(50.0),
            s.p(99.0),
            s.p(50.0).as_secs_f64() / pair.p(50.0).as_secs_f64(),
            s.p(99.0).as_secs_f64() / pair.p(99.0).as_secs_f64(),
        );
    }
    println!(
        "Release / (raw GET+UPDATE + raw LIST pods): p50 {:.2}, p99 {:.2}",
        release.p(50.0).as_secs_f64() / (pair.p(50.0) + list.p(50.0)).as_secs_f64(),
        release.p(99.0).as_secs_f64() / (pair.p(99.0) + list.p(99.0)).as_secs_f64(),
    );
    for call in ["hold", "release"] {
        let total = count(call, None) as f64 / calls;
        let by_verb: Vec<String> = ["get", "list", "update"]
            .iter()
            .map(|v| format!("{v} {:.2}", count(call, Some(v)) as f64 / calls))
            .collect();
        println!("requests per {call}: {total:.2} ({})", by_verb.join(", "));
    }
    let untagged: Vec<&Value> = mine
        .iter()
        .copied()
        .filter(|e| !user_agent(e).contains("call="))
        .collect();
    println!(
        "requests per raw pair (+ its LIST): {:.2}",
        untagged.len() as f64 / calls
    );

    let api_rows = api_end_to_end(cp, &ns, &exec, iters).await?;
    println!(
        "hold API end to end (HTTPS, bearer token), {iters} iterations (after {WARMUP} warm-up)"
    );
    println!(
        "{:<28} {:>10} {:>10} {:>12} {:>12}",
        "", "p50", "p99", "p50 / raw", "p99 / raw"
    );
    let raw = &api_rows.raw;
    for s in [raw, &api_rows.hold, &api_rows.release] {
        println!(
            "{:<28} {:>10.2?} {:>10.2?} {:>12.2} {:>12.2}",
            s.name,
            s.p(50.0),
            s.p(99.0),
            s.p(50.0).as_secs_f64() / raw.p(50.0).as_secs_f64(),
            s.p(99.0).as_secs_f64() / raw.p(99.0).as_secs_f64(),
        );
    }
    println!(
        "API Release / (raw GET+UPDATE + raw LIST pods): p50 {:.2}, p99 {:.2}",
        api_rows.release.p(50.0).as_secs_f64() / (raw.p(50.0) + list.p(50.0)).as_secs_f64(),
        api_rows.release.p(99.0).as_secs_f64() / (raw.p(99.0) + list.p(99.0)).as_secs_f64(),
    );
    let (token_reviews, access_reviews) = reviews_made(cp).await;
    let api_calls = (2 * (WARMUP + iters)) as f64;
    println!(
        "reviews per API call: TokenReview {:.3}, SubjectAccessReview {:.3} ({} calls in {:.1?})",
        token_reviews as f64 / api_calls,
        access_reviews as f64 / api_calls,
        api_calls,
        api_rows.took,
    );
    cp.stop();
    Ok(())
}

struct ApiRows {
    raw: Series,
    hold: Series,
    release: Series,
    took: Duration,
}

/// Hold and Release through the HTTPS API as alice (granted exactly `create` on
/// `trainjobs/hold` and `trainjobs/release`), against alice's own GET+UPDATE of the TrainJob,
/// on a TrainJob of its own.
async fn api_end_to_end(
    cp: &ControlPlane,
    ns: &str,
    exec: &holdfast_controller::hold::HoldExecutor,
    iters: usize,
) -> anyhow::Result<ApiRows> {
    const JOB: &str = "api";
    create_trainjob(cp, ns, JOB, true).await;
    exec.open(ns, JOB, meta(None, Duration::from_secs(30)))
        .await
        .map_err(|e| anyhow::anyhow!("open: {e}"))?;
    grant_alice(cp, ns, &["hold", "release"], &["create"]).await;
    let api = start_api(cp, exec.clone()).await;
    let token = cp.token(Identity::User);
    let raw = trainjobs(&client_without_retries(cp, Identity::User).await, ns);
    let base = format!("/v1/namespaces/{ns}/trainjobs/{JOB}");
    let mut rows = ApiRows {
        raw: Series::new("raw GET+UPDATE (alice)"),
        hold: Series::new("API Hold"),
        release: Series::new("API Release"),
        took: Duration::ZERO,
    };
    let started = Instant::now();
    for i in 0..(WARMUP + iters) {
        let t = Instant::now();
        let mut tj = raw.get(JOB).await?;
        tj.metadata
            .annotations
            .get_or_insert_with(Default::default)
            .insert("bench.holdfast.dev/n".into(), i.to_string());
        raw.replace(JOB, &PostParams::default(), &tj).await?;
        let took_raw = t.elapsed();

        let deadline = jiff::Timestamp::now() + jiff::SignedDuration::from_secs(30);
        let body = json!({"instance": i + 1, "deadline": deadline.to_string(), "reason": "bench"});
        let t = Instant::now();
        let (code, answer) = api.post(&format!("{base}/hold"), Some(token), &body).await;
        let took_hold = t.elapsed();
        anyhow::ensure!(code == 200, "API hold {}: {code} {answer}", i + 1);

        let body = json!({"instance": i + 1, "deadline": deadline.to_string()});
        let t = Instant::now();
        let (code, answer) = api
            .post(&format!("{base}/release"), Some(token), &body)
            .await;
        let took_release = t.elapsed();
        anyhow::ensure!(code == 200, "API release {}: {code} {answer}", i + 1);
        if i >= WARMUP {
            rows.raw.samples.push(took_raw);
            rows.hold.samples.push(took_hold);
            rows.release.samples.push(took_release);
        }
    }
    rows.took = started.elapsed();
    Ok(rows)
}
