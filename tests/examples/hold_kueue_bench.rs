//! Kueue-mode Hold and Release latency against the local control plane and the real Kueue,
//! as ratios to raw requests in the same run: the seed's hold (GET the TrainJob, LIST its
//! Workloads, PUT the Workload) and that plus one PUT of the TrainJob (the hold mark's write).
//! With requests per call from the apiserver's audit log.
//!
//! `cargo run --release -p holdfast-tests --example hold_kueue_bench` (`HOLDFAST_BENCH_ITERS`,
//! default 100).

use std::time::{Duration, Instant};

use holdfast_core::hold::Outcome;
use holdfast_core::names::JOB_UID_LABEL;
use holdfast_tests::Identity;
use holdfast_tests::bench::Series;
use holdfast_tests::hold_support::{
    client_without_retries, controller_requests, meta, settled_audit, user_agent, verb,
};
use holdfast_tests::kueue_support::{Fixture, uid};
use kube::api::{Api, DynamicObject, ListParams, PostParams};
use serde_json::json;

const WARMUP: usize = 5;

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() -> anyhow::Result<()> {
    let iters: usize = std::env::var("HOLDFAST_BENCH_ITERS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(100);
    let f = Fixture::start("bench-kq").await;
    let tj = f.create_job("bench", json!({})).await;
    let job_uid = uid(&tj);
    f.workload_when("bench", "Kueue made the Workload", |_| true)
        .await;
    let client = client_without_retries(f.cp, Identity::Controller).await;
    let trainjobs = f.trainjobs(&client);
    let workloads: Api<DynamicObject> = Api::namespaced_with(
        client.clone(),
        &f.ns,
        &holdfast_cluster::resources::workload(),
    );
    let by_job = ListParams::default().labels(&format!("{JOB_UID_LABEL}={job_uid}"));

    let mut seed = Series::new("raw seed hold");
    let mut mark = Series::new("raw PUT TrainJob");
    let mut hold = Series::new("Hold");
    let mut release = Series::new("Release");
    for i in 0..(WARMUP + iters) {
        let instance = i as u64 + 1;
        let n = i.to_string();
        // The seed's hold as raw requests: GET the TrainJob, LIST its Workloads, PUT one; on
        // a 409 (Kueue writes the Workload's status) all again, as the executor does.
        let t = Instant::now();
        let mut job = loop {
            let job = trainjobs.get("bench").await?;
            let mut wl = workloads
                .list(&by_job)
                .await?
                .items
                .into_iter()
                .next()
                .ok_or_else(|| anyhow::anyhow!("no Workload"))?;
            wl.metadata
                .annotations
                .get_or_insert_with(Default::default)
                .insert("bench.holdfast.dev/n".into(), n.clone());
            let name = wl.metadata.name.clone().unwrap_or_default();
            match workloads.replace(&name, &PostParams::default(), &wl).await {
                Ok(_) => break job,
                Err(kube::Error::Api(s)) if s.code == 409 => continue,
                Err(e) => return Err(e.into()),
            }
        };
        let took_seed = t.elapsed();
        // The mark's write as a raw request: one PUT of the TrainJob as read (read again on
        // a 409, counted).
        let t = Instant::now();
        loop {
            job.metadata
                .annotations
                .get_or_insert_with(Default::default)
                .insert("bench.holdfast.dev/n".into(), n.clone());
            match trainjobs
                .replace("bench", &PostParams::default(), &job)
                .await
            {
                Ok(_) => break,
                Err(kube::Error::Api(s)) if s.code == 409 => {
                    job = trainjobs.get("bench").await?;
                }
                Err(e) => return Err(e.into()),
            }
        }
        let took_mark = t.elapsed();

        let t = Instant::now();
        let held = f
            .exec
            .hold(
                &f.ns,
                "bench",
                meta(Some(instance), Duration::from_secs(30)),
            )
            .await;
        let took_hold = t.elapsed();
        anyhow::ensure!(held == Ok(Outcome::Held), "hold {instance}: {held:?}");
        let t = Instant::now();
        let released = f
            .exec
            .release(
                &f.ns,
                "bench",
                meta(Some(instance), Duration::from_secs(30)),
            )
            .await;
        let took_release = t.elapsed();
        anyhow::ensure!(
            matches!(released, Ok(Outcome::Released { .. })),
            "release {instance}: {released:?}"
        );
        if i >= WARMUP {
            seed.samples.push(took_seed);
            mark.samples.push(took_mark);
            hold.samples.push(took_hold);
            release.samples.push(took_release);
        }
    }

    let events = settled_audit(f.cp).await;
    let mine = controller_requests(&events, &f.ns);
    let count = |call: &str, resource: &str, verb_name: &str| {
        mine.iter()
            .filter(|e| user_agent(e).contains(&format!("({call};")))
            .filter(|e| e["objectRef"]["resource"] == resource && verb(e) == verb_name)
            .count()
    };
    let calls = (WARMUP + iters) as f64;
    println!(
        "hold_kueue_bench: {iters} iterations (after {WARMUP} warm-up) on one TrainJob, local control plane and Kueue"
    );
    println!(
        "{:<18} {:>10} {:>10} {:>12} {:>12} {:>18} {:>18}",
        "", "p50", "p99", "p50 / seed", "p99 / seed", "p50 / seed+PUT", "p99 / seed+PUT"
    );
    let plus = |p: f64| seed.p(p) + mark.p(p);
    for s in [&seed, &mark, &hold, &release] {
        println!(
            "{:<18} {:>10.2?} {:>10.2?} {:>12.2} {:>12.2} {:>18.2} {:>18.2}",
            s.name,
            s.p(50.0),
            s.p(99.0),
            s.p(50.0).as_secs_f64() / seed.p(50.0).as_secs_f64(),
            s.p(99.0).as_secs_f64() / seed.p(99.0).as_secs_f64(),
            s.p(50.0).as_secs_f64() / plus(50.0).as_secs_f64(),
            s.p(99.0).as_secs_f64() / plus(99.0).as_secs_f64(),
        );
    }
    for call in ["hold", "release"] {
        let rows: Vec<String> = [
            ("trainjobs", "get"),
            ("trainjobs", "update"),
            ("workloads", "list"),
            ("workloads", "get"),
            ("workloads", "update"),
        ]
        .iter()
        .map(|(r, v)| format!("{v} {r} {:.2}", count(call, r, v) as f64 / calls))
        .collect();
        println!("requests per {call}: {}", rows.join(", "));
    }
    f.finish().await;
    Ok(())
}
