//! Fault tests in Kueue mode: the real Kueue controller (v0.19) restarted during a hold and
//! during a release, against the real apiserver.
//!
//! **Injected.** Kueue is killed with SIGKILL ([`ControlPlane::stop_kueue`]) and started
//! again with the same flags ([`ControlPlane::restart_kueue`]), at these points:
//!
//! - right after a Hold returns, before Kueue has evicted the held Workload and suspended the
//!   TrainJob, or while it does (started again at once; what Kueue had done when it was
//!   killed is printed); then again once the job is held and evicted;
//! - right after a Release returns, before the readmission gate can let the job through (the
//!   previous execution's pods still exist; started again at once); again while the
//!   re-admitted Workload has quota and waits at the gate for those pods, which are then
//!   deleted while Kueue is down, so that the gate, free to let the job through, meets Kueue's
//!   webhooks refusing its writes (Kueue starts again once the audit log shows one refused);
//!   and once more after the job runs again.
//!
//! While Kueue is down its webhooks (failure policy Fail) refuse every write of Workloads,
//! their status and TrainJobs: the gate's writes fail and are retried.
//!
//! **Checked.** A watch started before each phase records every version of the TrainJob and
//! of its Workloads, so that a double step cannot hide behind a final read:
//!
//! - the hold stays in force throughout: every version of the job's Workload from the hold
//!   on is inactive and carries the hold's annotations and finalizer; once suspended the
//!   TrainJob is never unsuspended; the Workload is never admitted again and the gate never
//!   lets it through (no claim, no raise, no Ready); A never moves;
//! - the release passes the gate exactly once: A rises once, from 1 to 2, before the job
//!   runs; the check turns Ready once, for attempt 2, and no other attempt is ever claimed;
//!   the Workload is admitted once and the TrainJob unsuspended once; the gate's metrics count
//!   one claim, one raise and one Ready, and the audit log one write of the TrainJob by the
//!   controller (the raise).
//!
//! Each time Kueue is back, a sentinel TrainJob in a namespace of its own (whose queue
//! requires no AdmissionCheck) is admitted and unsuspended by it before the test goes on:
//! the new Kueue serves its webhooks and admits jobs again, so "nothing happened" afterwards
//! (watched for a few more seconds) is not merely Kueue not running yet. No kubelet and no Trainer run here: the test
//! creates and deletes the execution's pods itself, as in `holds_kueue.rs`, and holdfast's
//! webhook is not served. Both tests restart the Kueue this test binary shares, so they run
//! one at a time.

use holdfast_tests::hold_support;
use holdfast_tests::kueue_support;

use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::StreamExt;
use hold_support::{annotation, meta, resource_version, settled_audit, suspended};
use holdfast_core::{
    hold::Outcome,
    hold::classify::ObjectState,
    names::{ANN_ATTEMPT, ANN_HOLD_INSTANCE, ANN_HOLD_REASON},
    readmission::{WaitReason, claimed_attempt},
};
use holdfast_tests::{ControlPlane, Identity, kueue};
use kube::api::{Api, DynamicObject, ListParams, PostParams, WatchEvent, WatchParams};
use kueue_support::{
    MINUTE, QUEUE, Setup, active, check, condition, condition_reason, has_hold_finalizer,
    trainjobs, uid,
};
use serde_json::{Value, json};

/// How long Kueue (including a restart) and the gate get for each step.
const SETTLE: Duration = Duration::from_secs(120);
/// How long a held or running job is watched after Kueue is back, to see it stay so.
const STAYS: Duration = Duration::from_secs(5);

/// One test's world: the shared Kueue fixture (a namespace whose queue requires the
/// readmission check, a runtime, a kueue-mode executor acting as the controller and a
/// readmission gate; its methods are reached through `Deref`), given [`SETTLE`] for each
/// step, and a second namespace whose queue requires nothing, for the sentinel jobs that
/// show Kueue works again.
struct Fixture {
    kueue: kueue_support::Fixture,
    probe_ns: String,
    restarts: u32,
}

impl std::ops::Deref for Fixture {
    type Target = kueue_support::Fixture;

    fn deref(&self) -> &kueue_support::Fixture {
        &self.kueue
    }
}

impl Fixture {
    async fn start(prefix: &str) -> Fixture {
        let kueue = kueue_support::Fixture::start_with(
            prefix,
            Setup {
                settle: SETTLE,
                ..Setup::default()
            },
        )
        .await;
        let probe_ns = kueue
            .cp
            .namespace(&format!("{prefix}-probe"))
            .await
            .expect("probe namespace");
        kueue::create_queues(&kueue.admin, &probe_ns, QUEUE, &[])
            .await
            .expect("probe queues");
        Fixture {
            kueue,
            probe_ns,
            restarts: 0,
        }
    }

    /// Kills Kueue (SIGKILL) and leaves it down; prints what Kueue had done to `job` when it
    /// was killed.
    async fn kill_kueue(&mut self, job: &str, when: &str) {
        self.cp.stop_kueue().expect("kill kueue");
        self.restarts += 1;
        let tj = self.trainjob(job).await;
        let wl = self.live_workloads(job).await;
        println!(
            "Kueue killed ({}, {when}): TrainJob suspend={} A={:?}; Workloads: {:?}",
            self.restarts,
            tj["spec"]["suspend"],
            annotation(&tj, ANN_ATTEMPT),
            wl.iter().map(describe).collect::<Vec<_>>()
        );
    }

    /// Starts Kueue again with the same flags, without waiting for it.
    fn start_kueue_again(&self) {
        self.cp.restart_kueue().expect("start kueue again");
    }

    /// Kills Kueue and starts it again at once.
    async fn restart_kueue(&mut self, job: &str, when: &str) {
        self.kill_kueue(job, when).await;
        self.start_kueue_again();
    }

    /// Waits until the restarted Kueue serves its webhooks and has admitted and unsuspended
    /// a sentinel job created after it came back.
    async fn kueue_is_back(&self) {
        let started = std::time::Instant::now();
        self.eventually("Kueue answers its readiness probe", SETTLE, || async {
            kueue_ready(self.cp).then_some(())
        })
        .await;
        let name = format!("probe-{}", self.restarts);
        let probe_jobs = trainjobs(&self.admin, &self.probe_ns);
        // Kueue's webhook may still refuse the creation for a moment after it is ready.
        self.eventually("the sentinel job is created", SETTLE, || async {
            let tj: DynamicObject = serde_json::from_value(json!({
                "apiVersion": "trainer.kubeflow.org/v1alpha1", "kind": "TrainJob",
                "metadata": {"name": name, "labels": {"kueue.x-k8s.io/queue-name": QUEUE}},
                "spec": {"runtimeRef": {"name": self.runtime}}
            }))
            .expect("trainjob");
            match probe_jobs.create(&PostParams::default(), &tj).await {
                Ok(created) => {
                    assert_eq!(created.data["spec"]["suspend"], true, "Kueue suspends it");
                    Some(())
                }
                Err(kube::Error::Api(s)) if s.code == 409 => Some(()),
                Err(kube::Error::Api(s)) if s.code >= 500 => None,
                Err(e) => panic!("creating the sentinel job: {e}"),
            }
        })
        .await;
        self.eventually(
            "the restarted Kueue admits and unsuspends the sentinel job",
            SETTLE,
            || async {
                let tj = probe_jobs.get(&name).await.expect("get the sentinel job");
                (tj.data["spec"]["suspend"] == false).then_some(())
            },
        )
        .await;
        println!(
            "Kueue restart {}: back (readiness and a sentinel job admitted) {:?} after the check began",
            self.restarts,
            started.elapsed()
        );
    }

    async fn finish(self) {
        self.kueue.finish().await;
    }
}

/// Whether the shared Kueue answers its readiness probe (its webhook server serves). Its
/// health port is in the configuration the harness wrote for it.
fn kueue_ready(cp: &ControlPlane) -> bool {
    use std::io::{Read, Write};
    let Ok(text) = std::fs::read_to_string(cp.dir().join("kueue").join("config.yaml")) else {
        return false;
    };
    let Some(port) = text
        .lines()
        .find_map(|l| l.trim().strip_prefix("healthProbeBindAddress: 127.0.0.1:"))
        .and_then(|p| p.trim().parse::<u16>().ok())
    else {
        return false;
    };
    let Ok(mut s) = std::net::TcpStream::connect(("127.0.0.1", port)) else {
        return false;
    };
    let _ = s.set_read_timeout(Some(Duration::from_secs(2)));
    if s.write_all(b"GET /readyz HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n")
        .is_err()
    {
        return false;
    }
    let mut buf = String::new();
    let _ = s.read_to_string(&mut buf);
    buf.starts_with("HTTP/1.1 200") || buf.starts_with("HTTP/1.0 200")
}

/// A Workload in a few words, for the report.
fn describe(w: &Value) -> String {
    let (state, message) = check(w);
    format!(
        "active={} hold={:?} quotaReserved={} admitted={} evicted={:?} check={state} {message:?}",
        active(w),
        annotation(w, ANN_HOLD_INSTANCE),
        condition(w, "QuotaReserved"),
        condition(w, "Admitted"),
        condition_reason(w, "Evicted"),
    )
}

/// Every version of the objects of one kind in one namespace, as a watch started at a
/// known point saw them, in order (deletions included, as their last version).
struct History {
    api: Api<DynamicObject>,
    versions: Arc<Mutex<Vec<Value>>>,
    task: tokio::task::JoinHandle<()>,
}

impl History {
    /// Starts recording from now: the objects as a list shows them, then every version a
    /// watch from that list's resourceVersion shows.
    async fn start(api: Api<DynamicObject>) -> History {
        let list = api.list(&ListParams::default()).await.expect("list");
        let from = list
            .metadata
            .resource_version
            .expect("list resourceVersion");
        let versions: Arc<Mutex<Vec<Value>>> = Arc::new(Mutex::new(
            list.items
                .iter()
                .map(|o| serde_json::to_value(o).expect("json"))
                .collect(),
        ));
        let task = tokio::spawn(record(api.clone(), from, versions.clone()));
        History {
            api,
            versions,
            task,
        }
    }

    /// Waits until the watch has seen the current version of every object there is now,
    /// then returns every version seen.
    async fn caught_up(&self) -> Vec<Value> {
        let start = std::time::Instant::now();
        loop {
            assert!(!self.task.is_finished(), "the watch ended early");
            let now = self.api.list(&ListParams::default()).await.expect("list");
            let seen = self.versions();
            let all_seen = now.items.iter().all(|o| {
                let (u, rv) = (
                    o.metadata.uid.clone().unwrap_or_default(),
                    o.metadata.resource_version.clone().unwrap_or_default(),
                );
                seen.iter()
                    .any(|v| uid(v) == u && resource_version(v) == rv)
            });
            if all_seen {
                return seen;
            }
            assert!(
                start.elapsed() < SETTLE,
                "the watch did not catch up within {SETTLE:?}"
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    fn versions(&self) -> Vec<Value> {
        self.versions
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .clone()
    }

    fn stop(self) {
        self.task.abort();
    }
}

/// Records every version `api` shows from resourceVersion `from` on; a watch that ends is
/// resumed where it ended, and a watch that fails fails the recording.
async fn record(api: Api<DynamicObject>, from: String, out: Arc<Mutex<Vec<Value>>>) {
    let mut rv = from;
    let params = WatchParams::default().timeout(290);
    loop {
        let mut stream = api.watch(&params, &rv).await.expect("watch").boxed();
        while let Some(event) = stream.next().await {
            match event.expect("watch event") {
                WatchEvent::Added(o) | WatchEvent::Modified(o) | WatchEvent::Deleted(o) => {
                    let v = serde_json::to_value(&o).expect("json");
                    rv = resource_version(&v);
                    out.lock()
                        .unwrap_or_else(std::sync::PoisonError::into_inner)
                        .push(v);
                }
                WatchEvent::Bookmark(b) => rv = b.metadata.resource_version,
                WatchEvent::Error(e) => panic!("the watch failed: {e:?}"),
            }
        }
    }
}

/// The versions of TrainJob `name`.
fn of_job<'a>(versions: &'a [Value], name: &str) -> Vec<&'a Value> {
    versions
        .iter()
        .filter(|v| v["metadata"]["name"] == name)
        .collect()
}

/// The versions of the Workloads of the TrainJob with uid `job_uid`.
fn of_workloads<'a>(versions: &'a [Value], job_uid: &str) -> Vec<&'a Value> {
    versions
        .iter()
        .filter(|w| w.pointer("/metadata/labels/kueue.x-k8s.io~1job-uid") == Some(&json!(job_uid)))
        .collect()
}

/// How many times `pred` turns true along each object's versions (per uid; an object's
/// first version counts when `pred` holds for it).
fn times_turned_true(versions: &[&Value], pred: impl Fn(&Value) -> bool) -> usize {
    let mut last: std::collections::BTreeMap<String, bool> = Default::default();
    let mut n = 0;
    for v in versions {
        let now = pred(v);
        let before = last.insert(uid(v), now).unwrap_or(false);
        if now && !before {
            n += 1;
        }
    }
    n
}

/// The A values along the TrainJob's versions, repeats collapsed.
fn a_sequence(versions: &[&Value]) -> Vec<Option<String>> {
    let mut seq: Vec<Option<String>> = Vec::new();
    for v in versions {
        let a = annotation(v, ANN_ATTEMPT).map(str::to_owned);
        if seq.last() != Some(&a) {
            seq.push(a);
        }
    }
    seq
}

/// The audit events from index `from` on of the controller's completed writes in `ns`.
fn controller_writes<'a>(events: &'a [Value], from: usize, ns: &str) -> Vec<&'a Value> {
    events[from..]
        .iter()
        .filter(|e| {
            e["user"]["username"] == Identity::Controller.username()
                && e["objectRef"]["namespace"] == ns
                && matches!(e["verb"].as_str(), Some("update" | "patch"))
        })
        .collect()
}

#[tokio::test]
async fn hold_stays_in_force_when_kueue_restarts_during_the_eviction_and_while_held() {
    let _one = super::ONE_AT_A_TIME.lock().await;
    let mut f = Fixture::start("kqf-hold").await;
    f.create_job("job", json!({})).await;
    f.open_and_run("job").await;
    f.create_pods("job", 2).await;
    let job_uid = uid(&f.trainjob("job").await);
    let jobs = History::start(f.trainjobs(&f.admin)).await;
    let workloads = History::start(f.workload_api(&f.admin)).await;
    let before = ["claim", "raise_attempt", "ready"].map(|s| f.metrics.writes(s));

    // Hold; Kueue is killed the moment it returns, in the middle of evicting.
    let mut m = meta(Some(1), MINUTE);
    m.reason = Some("kueue restart".into());
    assert_eq!(f.exec.hold(&f.ns, "job", m).await, Ok(Outcome::Held));
    f.restart_kueue("job", "right after Hold returned").await;
    f.kueue_is_back().await;

    // Kueue, back, finishes the eviction: deactivated, the TrainJob suspended.
    let evicted = f
        .workload_when("job", "Kueue evicts the held Workload", |w| {
            condition_reason(w, "Evicted").as_deref() == Some("Deactivated")
        })
        .await;
    f.job_when("job", "Kueue suspends the TrainJob", suspended)
        .await;
    assert!(!active(&evicted));
    assert_eq!(annotation(&evicted, ANN_HOLD_INSTANCE), Some("1"));
    assert_eq!(annotation(&evicted, ANN_HOLD_REASON), Some("kueue restart"));
    assert!(has_hold_finalizer(&evicted));

    // Kueue restarts again while the job is held: the new Kueue looks at everything anew,
    // and leaves the hold alone.
    f.restart_kueue("job", "while held and evicted").await;
    f.kueue_is_back().await;
    let start = std::time::Instant::now();
    while start.elapsed() < STAYS {
        let tj = f.trainjob("job").await;
        assert!(suspended(&tj), "the held job must not run: {tj:#}");
        tokio::time::sleep(Duration::from_millis(150)).await;
    }
    let now = f.live_workloads("job").await;
    assert_eq!(now.len(), 1, "one Workload: {now:#?}");
    assert_eq!(uid(&now[0]), uid(&evicted), "the same Workload");
    assert!(!active(&now[0]));
    assert_eq!(annotation(&now[0], ANN_HOLD_INSTANCE), Some("1"));
    assert!(has_hold_finalizer(&now[0]));
    assert!(!condition(&now[0], "Admitted"));
    let status = f.exec.status(&f.ns, "job").await.expect("status");
    assert_eq!(
        status.state,
        ObjectState::HeldByUs {
            instance: Some(1),
            underlying: None
        }
    );

    // The whole history, from before the hold.
    let job_versions = jobs.caught_up().await;
    let wl_versions = workloads.caught_up().await;
    let tj = of_job(&job_versions, "job");
    let wl = of_workloads(&wl_versions, &job_uid);
    let held_from = wl
        .iter()
        .position(|w| annotation(w, ANN_HOLD_INSTANCE).is_some())
        .expect("the watch saw the hold land");
    for w in &wl[held_from..] {
        assert!(
            !active(w)
                && annotation(w, ANN_HOLD_INSTANCE) == Some("1")
                && annotation(w, ANN_HOLD_REASON) == Some("kueue restart")
                && has_hold_finalizer(w),
            "every version from the hold on is held: {w:#}"
        );
    }
    // The hold landed on an admitted Workload; once Kueue has taken the admission back, and
    // once the eviction has reset the check, neither comes back while it is held.
    for (what, pred) in [
        (
            "admitted",
            (|w: &Value| condition(w, "Admitted")) as fn(&Value) -> bool,
        ),
        ("past the gate", |w: &Value| check(w).0 == "Ready"),
    ] {
        let lost = wl[held_from..]
            .iter()
            .position(|w| !pred(w))
            .unwrap_or_else(|| panic!("the watch saw it stop being {what}"));
        let again: Vec<&&Value> = wl[held_from + lost..].iter().filter(|w| pred(w)).collect();
        assert!(again.is_empty(), "{what} again while held: {again:#?}");
    }
    let suspended_from = tj
        .iter()
        .position(|t| suspended(t))
        .expect("the watch saw the suspension");
    assert_eq!(
        tj[suspended_from..]
            .iter()
            .filter(|t| !suspended(t))
            .count(),
        0,
        "once suspended, the held job never ran again"
    );
    assert_eq!(a_sequence(&tj), vec![Some("1".to_owned())], "A never moved");
    let after = ["claim", "raise_attempt", "ready"].map(|s| f.metrics.writes(s));
    assert_eq!(before, after, "the gate let nothing through");
    println!(
        "hold phase: {} TrainJob versions ({} after the suspension), {} Workload versions \
         ({} while held), A {:?}, gate writes claim/raise/ready +0",
        tj.len(),
        tj.len() - suspended_from,
        wl.len(),
        wl.len() - held_from,
        a_sequence(&tj)
    );
    jobs.stop();
    workloads.stop();
    f.finish().await;
}

#[tokio::test]
async fn release_passes_the_gate_exactly_once_when_kueue_restarts_during_readmission() {
    let _one = super::ONE_AT_A_TIME.lock().await;
    let mut f = Fixture::start("kqf-release").await;
    f.create_job("job", json!({})).await;
    f.open_and_run("job").await;
    // The execution's pods: the gate keeps the re-admission waiting until they are gone.
    f.create_pods("job", 2).await;
    assert_eq!(
        f.exec.hold(&f.ns, "job", meta(Some(1), MINUTE)).await,
        Ok(Outcome::Held)
    );
    f.job_when("job", "suspended", suspended).await;
    // Evicted, and Kueue has taken back the admission and the quota.
    f.workload_when("job", "evicted, without quota", |w| {
        !active(w)
            && condition(w, "Evicted")
            && !condition(w, "Admitted")
            && !condition(w, "QuotaReserved")
    })
    .await;
    let job_uid = uid(&f.trainjob("job").await);

    let jobs = History::start(f.trainjobs(&f.admin)).await;
    let workloads = History::start(f.workload_api(&f.admin)).await;
    let audit_from = settled_audit(f.cp).await.len();
    let before = ["claim", "raise_attempt", "ready"].map(|s| f.metrics.writes(s));

    // Release; Kueue is killed the moment it returns, before it re-admits.
    assert_eq!(
        f.exec.release(&f.ns, "job", meta(Some(1), MINUTE)).await,
        Ok(Outcome::Released { resumed: true })
    );
    f.restart_kueue("job", "right after Release returned").await;
    f.kueue_is_back().await;
    let gated = f
        .workload_when(
            "job",
            "re-admitted to the gate, waiting for the pods",
            |w| {
                active(w)
                    && condition(w, "QuotaReserved")
                    && check(w).1 == WaitReason::PodsRemain.text()
            },
        )
        .await;
    assert_eq!(check(&gated).0, "Pending");
    let tj = f.trainjob("job").await;
    assert!(suspended(&tj));
    assert_eq!(
        annotation(&tj, ANN_ATTEMPT),
        Some("1"),
        "A waits with the gate"
    );

    // Kueue is killed while the Workload holds quota at the gate, and the pods go while it
    // is down: the gate, free to let the job through, meets Kueue's webhooks refusing its
    // writes. Kueue starts again once the apiserver has refused one of them.
    f.kill_kueue("job", "re-admitted, waiting at the gate for the pods")
        .await;
    let outage_from = settled_audit(f.cp).await.len();
    f.delete_pods("job").await;
    let refused_while_down = f
        .eventually(
            "a write of the gate refused while Kueue is down",
            SETTLE,
            || async {
                let events = f.cp.audit_events().expect("audit log");
                let refused: Vec<String> = controller_writes(&events, outage_from, &f.ns)
                    .into_iter()
                    .filter(|e| e["responseStatus"]["code"].as_i64().unwrap_or_default() >= 500)
                    .map(|e| {
                        format!(
                            "{} {}/{}",
                            e["verb"].as_str().unwrap_or_default(),
                            e["objectRef"]["resource"].as_str().unwrap_or_default(),
                            e["objectRef"]["subresource"].as_str().unwrap_or_default()
                        )
                    })
                    .collect();
                (!refused.is_empty()).then_some(refused)
            },
        )
        .await;
    println!("refused while Kueue was down: {refused_while_down:?}");
    let tj = f.trainjob("job").await;
    assert!(suspended(&tj), "nothing runs while Kueue is down");
    assert_eq!(annotation(&tj, ANN_ATTEMPT), Some("1"));
    f.start_kueue_again();
    let tj = f
        .job_when("job", "the job runs again", |tj| !suspended(tj))
        .await;
    assert_eq!(annotation(&tj, ANN_ATTEMPT), Some("2"));
    f.kueue_is_back().await;

    // Once more after it runs: the new Kueue must not admit it a second time.
    f.restart_kueue("job", "after the job runs again").await;
    f.kueue_is_back().await;
    let start = std::time::Instant::now();
    while start.elapsed() < STAYS {
        let tj = f.trainjob("job").await;
        assert!(!suspended(&tj), "the job keeps running: {tj:#}");
        assert_eq!(annotation(&tj, ANN_ATTEMPT), Some("2"));
        tokio::time::sleep(Duration::from_millis(150)).await;
    }
    let admitted = f
        .workload_when("job", "admitted", |w| condition(w, "Admitted"))
        .await;
    assert_eq!(check(&admitted).0, "Ready");
    assert_eq!(claimed_attempt(&check(&admitted).1), Some(2));
    let status = f.exec.status(&f.ns, "job").await.expect("status");
    assert_eq!(status.state, ObjectState::Running);

    // The whole history, from before the release.
    let job_versions = jobs.caught_up().await;
    let wl_versions = workloads.caught_up().await;
    let tj = of_job(&job_versions, "job");
    let wl = of_workloads(&wl_versions, &job_uid);
    assert_eq!(
        a_sequence(&tj),
        vec![Some("1".to_owned()), Some("2".to_owned())],
        "A rose exactly once, from 1 to 2"
    );
    let unsuspended = times_turned_true(&tj, |t| !suspended(t));
    assert_eq!(unsuspended, 1, "the TrainJob was unsuspended once");
    let first_run = tj
        .iter()
        .find(|t| !suspended(t))
        .expect("the watch saw it run");
    assert_eq!(
        annotation(first_run, ANN_ATTEMPT),
        Some("2"),
        "A rose before the execution ran"
    );
    let ready = times_turned_true(&wl, |w| check(w).0 == "Ready");
    assert_eq!(ready, 1, "the check turned Ready once");
    for w in wl.iter().filter(|w| check(w).0 == "Ready") {
        assert_eq!(claimed_attempt(&check(w).1), Some(2), "Ready for attempt 2");
    }
    let claims: std::collections::BTreeSet<u64> = wl
        .iter()
        .filter_map(|w| claimed_attempt(&check(w).1))
        .collect();
    assert_eq!(claims, [2].into(), "no attempt but 2 was ever claimed");
    let admissions = times_turned_true(&wl, |w| condition(w, "Admitted"));
    assert_eq!(admissions, 1, "the Workload was admitted once");
    let after = ["claim", "raise_attempt", "ready"].map(|s| f.metrics.writes(s));
    let delta: Vec<u64> = after.iter().zip(before).map(|(a, b)| a - b).collect();
    assert_eq!(
        delta,
        vec![1, 1, 1],
        "gate writes: one claim, one raise, one Ready"
    );

    // The apiserver's count: the controller wrote the TrainJob twice, the Release taking the
    // hold's mark off and the gate's raise of A (A's history above shows one raise). Its
    // writes that the restarting Kueue's webhooks refused are counted for the report.
    let events = settled_audit(f.cp).await;
    let writes = controller_writes(&events, audit_from, &f.ns);
    let landed = |resource: &str, subresource: Option<&str>| {
        writes
            .iter()
            .filter(|e| {
                e["objectRef"]["resource"] == resource
                    && e["objectRef"]["subresource"].as_str() == subresource
                    && e["responseStatus"]["code"] == 200
            })
            .count()
    };
    assert_eq!(
        landed("trainjobs", None),
        2,
        "the unmark and one raise of A landed"
    );
    let refused = writes
        .iter()
        .filter(|e| e["responseStatus"]["code"].as_i64().unwrap_or_default() >= 500)
        .count();
    println!(
        "release phase: {} TrainJob versions, {} Workload versions; A {:?}; unsuspended {unsuspended}, \
         check Ready {ready} (claims {claims:?}), admitted {admissions}; gate writes \
         claim/raise/ready +{delta:?}; controller writes landed: release {} + gate status {}, \
         TrainJob {}; refused by Kueue's webhooks while it restarted: {refused}",
        tj.len(),
        wl.len(),
        a_sequence(&tj),
        landed("workloads", None),
        landed("workloads", Some("status")),
        landed("trainjobs", None),
    );
    jobs.stop();
    workloads.stop();
    f.finish().await;
}
