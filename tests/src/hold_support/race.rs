//! The race of holds: concurrent holds and releases with increasing instances, random
//! delays and deadlines, against a held object other writers update at the same time (plain
//! mode: the TrainJob, whose status Trainer updates several times a second; Kueue mode: the
//! Workload, whose status the real Kueue updates as it evicts and re-admits it). A watch
//! started before the run records every version of the held object; the checker replays it
//! and the apiserver's audit log:
//!
//! - no write ever replaced a newer hold instance with an older one;
//! - every instance that was ever in force was placed by a Hold of that instance, and every
//!   hold that was lifted was lifted by a Release of that instance;
//! - every request the executor sent reached the apiserver before its call's deadline (each
//!   request names its call's deadline in its User-Agent, and the audit log records it).
//!
//! `HOLDFAST_RACE_CALLS` sets the number of calls (default 1000).

use std::{
    collections::{BTreeMap, BTreeSet},
    sync::{
        Arc,
        atomic::{AtomicI64, AtomicU64, Ordering},
    },
    time::Duration,
};

use crate::{ControlPlane, Identity};
use futures::StreamExt;
use holdfast_controller::hold::{ExecutorConfig, HoldExecutor, deadline_in_user_agent};
use holdfast_core::{
    hold::{CallKind, CallMeta, HoldError, Outcome, RejectCause},
    mode::Mode,
    names::ANN_HOLD_INSTANCE,
};
use jiff::{SignedDuration, Timestamp};
use kube::api::{Api, DynamicObject, WatchEvent, WatchParams};

use super::*;
use rand::RngExt;
use serde_json::Value;

const CALLERS: usize = 8;

/// One version of the held object, as the watch saw it.
#[derive(Clone, Debug)]
struct Version {
    rv: String,
    instance: Option<u64>,
}

/// One call as a caller made it.
#[derive(Debug)]
struct Record {
    kind: CallKind,
    instance: u64,
    result: Result<Outcome, HoldError>,
}

impl Record {
    /// Whether the call's write may have landed: it succeeded by writing, or its outcome is
    /// unknown (a request on the wire when the deadline passed, or an answer lost).
    fn may_have_written(&self, want: Outcome) -> bool {
        match &self.result {
            Ok(o) => *o == want,
            Err(e) => {
                e.cause() == Some(RejectCause::DeadlinePassed)
                    || matches!(e, HoldError::Unknown { .. })
            }
        }
    }
}

/// The number of calls a race makes: `HOLDFAST_RACE_CALLS`, default 1000.
pub fn calls() -> i64 {
    std::env::var("HOLDFAST_RACE_CALLS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(1000)
}

/// Runs the race on TrainJob `job` of namespace `ns` in `mode`; the held object is `held_name`
/// in `held` (the TrainJob in plain mode, its Workload in Kueue mode). `total` calls.
pub async fn run(
    cp: &ControlPlane,
    mode: Mode,
    ns: &str,
    job: &str,
    held: Api<DynamicObject>,
    held_name: &str,
    total: i64,
) {
    // The watch, started before the run, records every version.
    let read_held = || async {
        serde_json::to_value(held.get(held_name).await.expect("get the held object")).expect("json")
    };
    let start_rv = resource_version(&read_held().await);
    let (target_tx, target_rx) = tokio::sync::watch::channel(None::<String>);
    let history = tokio::spawn(record_history(
        held.clone(),
        held_name.to_owned(),
        start_rv,
        target_rx,
    ));

    // Plain mode: Trainer updates the TrainJob's status several times a second. Kueue mode:
    // the real Kueue writes the Workload's status as it evicts and re-admits it.
    let stop = tokio_util::sync::CancellationToken::new();
    let trainer = cp.client(Identity::Trainer).await.expect("trainer");
    let writer = {
        let (stop, ns, job) = (stop.clone(), ns.to_owned(), job.to_owned());
        tokio::spawn(async move {
            let mut step = 0u64;
            if mode == Mode::Kueue {
                return step;
            }
            let mut tick = tokio::time::interval(Duration::from_millis(150));
            while !stop.is_cancelled() {
                tick.tick().await;
                step += 1;
                write_status(&trainer, &ns, &job, step).await;
            }
            step
        })
    };

    // The callers. A Kueue-mode call reads two objects and its write passes Kueue's own
    // webhooks: its deadlines are drawn from a longer window, so that as many land.
    // Kueue keeps the shared control plane busier still (it evicts and re-admits the job
    // with every hold and release), so requests get a wider transit margin there. The
    // check is on when the apiserver *received* each request, stricter than the seed's
    // "nothing goes out after the deadline": on a loaded 2-core machine (CI compiles beside
    // the tests) sending and receiving can be 100 ms apart, so plain mode gets 150 ms.
    let (deadlines, transit_margin) = match mode {
        Mode::Plain => (30..400u64, Duration::from_millis(150)),
        Mode::Kueue => (200..3000u64, Duration::from_millis(200)),
    };
    let issued = Arc::new(AtomicU64::new(0));
    let last_held = Arc::new(AtomicU64::new(0));
    let left = Arc::new(AtomicI64::new(total));
    let run_start = std::time::Instant::now();
    let mut callers = Vec::new();
    for _ in 0..CALLERS {
        let exec = HoldExecutor::new(
            client_without_retries(cp, Identity::Controller).await,
            mode,
            ExecutorConfig {
                transit_margin,
                ..config()
            },
        );
        let deadlines = deadlines.clone();
        let (issued, last_held, left, ns, job) = (
            issued.clone(),
            last_held.clone(),
            left.clone(),
            ns.to_owned(),
            job.to_owned(),
        );
        callers.push(tokio::spawn(async move {
            let mut records = Vec::new();
            while left.fetch_sub(1, Ordering::SeqCst) > 0 {
                let (kind, instance, within, delay) = {
                    let mut rng = rand::rng();
                    // Fewer holds than releases, and releases mostly of the newest hold that
                    // landed: otherwise a newer hold nearly always beats a release to it, and
                    // on a loaded machine too few holds are lifted for the run to show that
                    // lifting is safe too.
                    let kind = if rng.random_bool(0.4) {
                        CallKind::Hold
                    } else {
                        CallKind::Release
                    };
                    // Holds take the next instance; a release names the newest hold known
                    // to have landed, or one just issued.
                    let instance = match kind {
                        CallKind::Hold => issued.fetch_add(1, Ordering::SeqCst) + 1,
                        _ if rng.random_bool(0.85) => last_held.load(Ordering::SeqCst).max(1),
                        _ => issued.load(Ordering::SeqCst).max(1),
                    };
                    // A Release makes one request more than a Hold (the consistent pod LIST,
                    // ~100 ms on an idle cluster): its deadline window starts that much later.
                    let extra = if kind == CallKind::Release { 150 } else { 0 };
                    (
                        kind,
                        instance,
                        Duration::from_millis(rng.random_range(deadlines.clone()) + extra),
                        Duration::from_millis(rng.random_range(0..60)),
                    )
                };
                // The call is issued with its deadline, then delayed on its way.
                let m = CallMeta {
                    instance: Some(instance),
                    deadline: Timestamp::now() + within,
                    reason: Some("race".into()),
                };
                tokio::time::sleep(delay).await;
                let result = exec.call(kind, &ns, &job, m).await;
                if kind == CallKind::Hold && result == Ok(Outcome::Held) {
                    last_held.fetch_max(instance, Ordering::SeqCst);
                }
                records.push(Record {
                    kind,
                    instance,
                    result,
                });
            }
            records
        }));
    }
    let mut records = Vec::new();
    for c in callers {
        records.extend(c.await.expect("caller"));
    }
    let run_took = run_start.elapsed();
    stop.cancel();
    let status_writes = writer.await.expect("writer");

    // Wait for the watch to have seen the last version.
    let final_rv = resource_version(&read_held().await);
    target_tx.send(Some(final_rv)).expect("watch alive");
    let versions = tokio::time::timeout(Duration::from_secs(60), history)
        .await
        .expect("the watch caught up")
        .expect("watch task");

    // 1. No write replaced a newer instance with an older one.
    let mut violations = Vec::new();
    let mut placed = BTreeSet::new();
    let mut lifted = BTreeSet::new();
    for pair in versions.windows(2) {
        match (pair[0].instance, pair[1].instance) {
            (Some(a), Some(b)) if b < a => violations.push(format!(
                "rv {}: hold {a} replaced by older hold {b}",
                pair[1].rv
            )),
            (Some(a), Some(b)) if b > a => {
                placed.insert(b);
            }
            (None, Some(b)) => {
                placed.insert(b);
            }
            (Some(a), None) => {
                lifted.insert(a);
            }
            _ => {}
        }
    }
    // 2. Every hold placed came from a Hold of that instance, every one lifted from a
    //    Release of it; every Hold that reported Held placed its instance.
    let could_place: BTreeSet<u64> = records
        .iter()
        .filter(|r| r.kind == CallKind::Hold && r.may_have_written(Outcome::Held))
        .map(|r| r.instance)
        .collect();
    let could_lift: BTreeSet<u64> = records
        .iter()
        .filter(|r| {
            r.kind == CallKind::Release && r.may_have_written(Outcome::Released { resumed: true })
        })
        .map(|r| r.instance)
        .collect();
    for b in placed.difference(&could_place) {
        violations.push(format!(
            "hold {b} came into force without a Hold that placed it"
        ));
    }
    for a in lifted.difference(&could_lift) {
        violations.push(format!("hold {a} was lifted without a Release of it"));
    }
    for r in &records {
        if r.kind == CallKind::Hold
            && r.result == Ok(Outcome::Held)
            && !placed.contains(&r.instance)
        {
            violations.push(format!(
                "Hold {} reported Held but never landed",
                r.instance
            ));
        }
    }

    // 3. Every request reached the apiserver before its call's deadline.
    let events = settled_audit(cp).await;
    let requests = controller_requests(&events, ns);
    let mut late = 0usize;
    let mut max_commit_after = SignedDuration::ZERO;
    let mut conflicts = 0usize;
    let mut in_run = 0usize;
    for e in &requests {
        let Some(deadline) = deadline_in_user_agent(user_agent(e)) else {
            continue;
        };
        in_run += 1;
        if code(e) == 409 {
            conflicts += 1;
        }
        if received_at(e) > deadline {
            late += 1;
            violations.push(format!(
                "{} {} received {} after its deadline {deadline}",
                verb(e),
                resource(e),
                received_at(e)
            ));
        }
        if let Some(done) = e
            .get("stageTimestamp")
            .and_then(Value::as_str)
            .and_then(|t| holdfast_core::rfc3339::parse(t).ok())
        {
            max_commit_after = max_commit_after.max(done.duration_since(deadline));
        }
    }
    // Requests the hold calls made (the executor's User-Agent) that do not name a deadline.
    // Kueue mode's readmission gate writes as the same identity with its own User-Agent.
    let untagged = requests
        .iter()
        .filter(|e| user_agent(e).starts_with("holdfast-controller/"))
        .filter(|e| deadline_in_user_agent(user_agent(e)).is_none())
        .count();

    let mut outcomes: BTreeMap<String, usize> = BTreeMap::new();
    for r in &records {
        let label = match &r.result {
            Ok(o) => format!("{} ok {o:?}", r.kind),
            Err(e) => format!("{} {}", r.kind, e.metric_label()),
        };
        *outcomes.entry(label).or_default() += 1;
    }
    println!(
        "race ({mode} mode): {} calls by {CALLERS} callers in {run_took:?}, {status_writes} status writes, \
         {} versions watched, {} holds placed, {} lifted; {in_run} requests ({conflicts} got 409), \
         {late} received after their deadline, latest answer {} ms after a deadline; \
         {} violations",
        records.len(),
        versions.len(),
        placed.len(),
        lifted.len(),
        max_commit_after.as_millis(),
        violations.len()
    );
    for (label, n) in &outcomes {
        println!("  {label}: {n}");
    }
    assert_eq!(records.len() as i64, total);
    assert_eq!(
        untagged, 0,
        "every request of a hold call names its call's deadline"
    );
    assert!(violations.is_empty(), "violations: {violations:#?}");
    // The run exercised what it claims to.
    assert!(
        placed.len() > 10 && lifted.len() > 10,
        "holds placed and lifted"
    );
    assert!(
        conflicts > 0,
        "status writes (Trainer's, or Kueue's) caused real conflicts"
    );
    let passed = |c: RejectCause| {
        records
            .iter()
            .filter(|r| r.result.as_ref().err().and_then(HoldError::cause) == Some(c))
            .count()
    };
    assert!(
        passed(RejectCause::DeadlinePassed) > 0,
        "some deadlines passed"
    );
    assert!(passed(RejectCause::StaleHold) > 0, "some calls were stale");
}

/// Every version of the held object `name` from `from` on, until the version `target`
/// names has been seen.
async fn record_history(
    api: Api<DynamicObject>,
    name: String,
    from: String,
    mut target: tokio::sync::watch::Receiver<Option<String>>,
) -> Vec<Version> {
    // The run starts from an opened TrainJob without a hold.
    let mut versions = vec![Version {
        rv: from.clone(),
        instance: None,
    }];
    let mut rv = from;
    let params = WatchParams::default()
        .fields(&format!("metadata.name={name}"))
        .timeout(290);
    loop {
        let mut stream = api.watch(&params, &rv).await.expect("watch").boxed();
        loop {
            if target.borrow().as_deref().is_some_and(|t| t == rv) {
                return versions;
            }
            tokio::select! {
                event = stream.next() => match event {
                    Some(Ok(WatchEvent::Added(o) | WatchEvent::Modified(o))) => {
                        let v = serde_json::to_value(&o).expect("json");
                        rv = resource_version(&v);
                        versions.push(Version {
                            rv: rv.clone(),
                            instance: annotation(&v, ANN_HOLD_INSTANCE).and_then(|s| s.parse().ok()),
                        });
                    }
                    Some(Ok(WatchEvent::Bookmark(_))) => {}
                    Some(Ok(other)) => panic!("unexpected watch event {other:?}"),
                    Some(Err(e)) => panic!("watch failed: {e}"),
                    None => break,
                },
                changed = target.changed() => {
                    assert!(changed.is_ok(), "the test ended without a target");
                }
            }
        }
    }
}
