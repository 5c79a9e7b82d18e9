//! Kueue mode: the hold mark's writes on the TrainJob (`holdfast_core::hold::mark` decides
//! them). Hold marks the TrainJob before the seed's one update of the Workload; Release
//! removes the mark after its own; [`sweep`] removes a mark left by a call that crashed or
//! ran out of time between the two, once no call that wrote it can still write.

use std::time::Duration;

use holdfast_core::hold::mark::{self, MarkStep, Marked};
use holdfast_core::hold::object::hold_state;
use holdfast_core::hold::{HoldError, HoldState, Write, apply};
use holdfast_core::mode::Mode;
use holdfast_core::names::{ANN_HOLD_MARK, JOB_UID_LABEL};
use jiff::Timestamp;
use kube::api::{Api, DynamicObject, ListParams, PostParams};
use kube::runtime::reflector::Store;
use serde_json::{Value, json};

use super::requests::{CallRequests, RequestError};
use crate::trainjob::Watched;
use holdfast_cluster::resources;

/// How many times Release tries to remove its mark when the TrainJob keeps changing.
const UNMARK_TRIES: u32 = 3;

/// Where Hold's mark step leaves the call.
pub(super) enum Marking {
    /// The TrainJob carries a mark covering this call: go on to the Workload.
    Done,
    /// The TrainJob changed since the read (409): read again and decide again.
    Conflict,
    /// The write's answer was lost: read again (the read shows whether it landed).
    Unanswered(RequestError),
}

/// Hold(`instance`), after deciding to update the Workload and before sending it: marks
/// `trainjob` (as the call read it), preconditioned on that read, unless its mark covers
/// this call already.
pub(super) async fn before_hold(
    reqs: &mut CallRequests<'_>,
    namespace: &str,
    name: &str,
    trainjob: &Value,
    instance: u64,
    bound: Duration,
) -> Result<Marking, HoldError> {
    let step = mark::for_hold(trainjob, instance, reqs.deadline(), Timestamp::now(), bound);
    let write = match step {
        MarkStep::Covered => return Ok(Marking::Done),
        MarkStep::Fail(e) => return Err(e),
        MarkStep::Write(w) => w,
    };
    match put(reqs, namespace, name, trainjob, &write).await {
        Ok(()) => Ok(Marking::Done),
        Err(e) if e.is_conflict() => Ok(Marking::Conflict),
        Err(e) if e.is_transient() => Ok(Marking::Unanswered(e)),
        Err(RequestError::TimedOut) => Err(HoldError::deadline_passed(format!(
            "marking TrainJob {namespace}/{name} for hold {instance}: {}; the Workload was not written, and the mark, if it landed, is removed once the call's deadline and the CallBound have passed",
            RequestError::TimedOut
        ))),
        Err(e) => Err(e.into_hold_error(&format!("marking TrainJob {namespace}/{name}"))),
    }
}

/// Release(`instance`), after its Workload update landed: removes the TrainJob's mark when
/// it goes (`mark::after_release`), reading the TrainJob again on a conflict. A mark that
/// cannot be removed now (the deadline, the apiserver) stays for [`sweep`]; the hold is
/// lifted either way, so the call's answer does not change.
pub(super) async fn after_release(
    reqs: &mut CallRequests<'_>,
    namespace: &str,
    name: &str,
    instance: u64,
    bound: Duration,
) {
    for _ in 0..UNMARK_TRIES {
        let trainjob = match reqs.get(&resources::trainjob(), namespace, name).await {
            Ok(tj) => tj,
            Err(e) => {
                tracing::warn!(namespace, name, instance, error = %e, "released, but the TrainJob could not be read to remove its hold mark: the sweep removes it");
                return;
            }
        };
        let Some(write) =
            mark::after_release(&trainjob, instance, true, None, Timestamp::now(), bound)
        else {
            return;
        };
        match put(reqs, namespace, name, &trainjob, &write).await {
            Ok(()) => return,
            Err(e) if e.is_conflict() => continue,
            Err(e) => {
                tracing::warn!(namespace, name, instance, error = %e, "released, but the hold mark could not be removed: the sweep removes it");
                return;
            }
        }
    }
    tracing::warn!(
        namespace,
        name,
        instance,
        "released, but the TrainJob kept changing while its hold mark was removed: the sweep removes it"
    );
}

/// PUTs `trainjob` with `write` applied: the read's resourceVersion is the precondition.
async fn put(
    reqs: &mut CallRequests<'_>,
    namespace: &str,
    name: &str,
    trainjob: &Value,
    write: &Write,
) -> Result<(), RequestError> {
    let mut object = trainjob.clone();
    // Kueue mode's rules: a TrainJob write never carries spec.suspend (none here does).
    apply(write, &mut object, Mode::Kueue).map_err(|e| RequestError::Build(e.to_string()))?;
    reqs.replace(&resources::trainjob(), namespace, name, &object, false)
        .await
        .map(|_| ())
}

/// A TrainJob carrying a hold mark, as [`sweep`] is given it: where it is and the mark's
/// text as read.
#[derive(Clone, Debug, PartialEq)]
pub struct MarkedJob {
    pub namespace: String,
    pub name: String,
    pub uid: String,
    pub mark: String,
}

impl MarkedJob {
    /// The marked TrainJobs in `store` (the leader's TrainJob cache, which keeps the mark):
    /// no request is made.
    pub fn in_store(store: &Store<Watched>) -> Vec<MarkedJob> {
        store
            .state()
            .iter()
            .filter_map(|job| {
                // A TrainJob whose spec does not decode is cached by its metadata alone: its
                // mark is swept too, or Kueue could never start it again.
                let (mark, meta) = match &job.0 {
                    Ok(job) => (job.annotation(ANN_HOLD_MARK)?, &job.metadata),
                    Err(invalid) => (
                        invalid
                            .metadata
                            .annotations
                            .as_ref()?
                            .get(ANN_HOLD_MARK)?
                            .as_str(),
                        &invalid.metadata,
                    ),
                };
                Some(MarkedJob {
                    mark: mark.to_owned(),
                    namespace: meta.namespace.clone()?,
                    name: meta.name.clone()?,
                    uid: meta.uid.clone().unwrap_or_default(),
                })
            })
            .collect()
    }

    /// TrainJob `object` (as the apiserver sends it), if it carries a mark.
    pub fn of(object: &Value) -> Option<MarkedJob> {
        let meta = &object["metadata"];
        Some(MarkedJob {
            mark: meta["annotations"][ANN_HOLD_MARK].as_str()?.to_owned(),
            namespace: meta["namespace"].as_str()?.to_owned(),
            name: meta["name"].as_str()?.to_owned(),
            uid: meta["uid"].as_str().unwrap_or_default().to_owned(),
        })
    }
}

/// Removes the stale hold marks (`mark::stale`) among `marked`, each preconditioned on the
/// resourceVersion it is read at: a Hold that marks the job again in between makes the
/// removal fail. Only the candidates are read, then only those whose mark looks stale.
/// Returns how many it removed.
pub async fn sweep(
    client: &kube::Client,
    marked: impl IntoIterator<Item = MarkedJob>,
    bound: Duration,
) -> Result<usize, kube::Error> {
    let mut removed = 0;
    for job in marked {
        let value = json!({ "metadata": { "annotations": { ANN_HOLD_MARK: job.mark } } });
        let (ns, name) = (job.namespace.as_str(), job.name.as_str());
        let candidate = match Marked::read(&value) {
            Marked::None => false,
            Marked::Unreadable(_) => true,
            Marked::Mark(m) => m.expired(Timestamp::now(), bound),
        };
        if !candidate {
            continue;
        }
        let held = workload_holds(client, ns, &job.uid).await?;
        let mark_instance = match Marked::read(&value) {
            Marked::Mark(m) => Some(m.instance),
            _ => None,
        };
        let workload_hold = match mark_instance {
            Some(i) if held.contains(&i) => Some(i),
            _ => held.first().copied(),
        };
        let api: Api<DynamicObject> =
            Api::namespaced_with(client.clone(), ns, &resources::trainjob());
        // The decision is made on the job as it is now (the cache may be behind), and the
        // update (the controller's RBAC has no patch on TrainJobs) of the whole object is
        // preconditioned on that read.
        let Some(full) = api.get_opt(name).await? else {
            continue;
        };
        let mut object = serde_json::to_value(&full).map_err(kube::Error::SerdeError)?;
        if full.metadata.uid.as_deref() != Some(job.uid.as_str()) {
            // Another TrainJob of the same name since the cache's: the next sweep sees it.
            continue;
        }
        let Some(write) = mark::stale(&object, workload_hold, Timestamp::now(), bound) else {
            continue;
        };
        if apply(&write, &mut object, Mode::Kueue).is_err() {
            continue;
        }
        object["metadata"]["resourceVersion"] = json!(write.precondition);
        let object: DynamicObject =
            serde_json::from_value(object).map_err(kube::Error::SerdeError)?;
        match api.replace(name, &PostParams::default(), &object).await {
            Ok(_) => {
                removed += 1;
                tracing::info!(
                    namespace = ns,
                    name,
                    "removed a stale hold mark: no call that wrote it can still write, and its Workload does not hold its instance"
                );
            }
            // Changed since the read (a Hold marked it again) or gone: next sweep.
            Err(kube::Error::Api(s)) if s.code == 409 || s.code == 404 => {}
            Err(e) => return Err(e),
        }
    }
    Ok(removed)
}

/// The hold instances on the Workloads TrainJob `uid` owns as controller; an unreadable
/// hold counts as held (`u64::MAX`).
async fn workload_holds(
    client: &kube::Client,
    namespace: &str,
    uid: &str,
) -> Result<Vec<u64>, kube::Error> {
    let api: Api<DynamicObject> =
        Api::namespaced_with(client.clone(), namespace, &resources::workload());
    // Kueue's job-uid label is the index; ownership decides.
    let params = ListParams::default().labels(&format!("{JOB_UID_LABEL}={uid}"));
    let list = match api.list_metadata(&params).await {
        Ok(list) => list,
        // Kueue is not installed: no Workload, no hold.
        Err(kube::Error::Api(s)) if s.code == 404 => return Ok(Vec::new()),
        Err(e) => return Err(e),
    };
    Ok(list
        .items
        .iter()
        .filter(|w| {
            w.metadata
                .owner_references
                .iter()
                .flatten()
                .any(|o| o.controller == Some(true) && o.uid == uid)
        })
        .filter_map(|w| match hold_state(&json!({ "metadata": w.metadata })) {
            HoldState::InForce(r) => Some(r.instance),
            HoldState::Unreadable { .. } => Some(u64::MAX),
            HoldState::Absent => None,
        })
        .collect())
}

/// How often [`sweep_every`] looks for stale marks. A stale mark keeps its job from starting
/// again (after its call's deadline and the CallBound) until the next sweep.
pub const SWEEP_INTERVAL: Duration = Duration::from_secs(15);

/// Runs [`sweep`] every `every` until `shutdown`, over the marked TrainJobs in the store
/// `trainjobs` gives: the leader's cache (kueue mode's readmission gate keeps it), so the
/// search costs no request; `None` (not the leader) skips the round. Each removal is
/// preconditioned, so a sweep racing a call's own unmark removes the mark once.
pub async fn sweep_every(
    client: kube::Client,
    trainjobs: impl Fn() -> Option<Store<Watched>> + Send + 'static,
    bound: Duration,
    every: Duration,
    shutdown: tokio_util::sync::CancellationToken,
) {
    let mut tick = tokio::time::interval(every);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            _ = shutdown.cancelled() => return,
            _ = tick.tick() => {}
        }
        let Some(store) = trainjobs() else { continue };
        if let Err(e) = sweep(&client, MarkedJob::in_store(&store), bound).await {
            tracing::warn!(error = %e, "the sweep of stale hold marks failed; it runs again");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use kube::runtime::reflector::store::Writer;
    use kube::runtime::watcher::Event;

    fn cached(name: &str, annotations: Value) -> Watched {
        let mut job: Watched = serde_json::from_value(json!({
            "apiVersion": "trainer.kubeflow.org/v1alpha1",
            "kind": "TrainJob",
            "metadata": {
                "name": name, "namespace": "ns", "uid": format!("uid-{name}"),
                "annotations": annotations,
                "managedFields": [{"manager": "kubectl"}]
            },
            "spec": {"runtimeRef": {"name": "torch"}}
        }))
        .expect("a TrainJob");
        crate::trainjob::strip(&mut job);
        job
    }

    /// The sweep looks for stale marks in the leader's TrainJob cache, not by listing every
    /// TrainJob: the cache keeps the mark through its stripping, and only marked jobs are
    /// candidates.
    #[test]
    fn the_mark_sweep_finds_the_marked_jobs_in_the_leaders_cache_with_no_request() {
        let mut writer = Writer::<Watched>::new(());
        let store = writer.as_reader();
        writer.apply_watcher_event(&Event::Init);
        // A job whose spec does not decode (the cache keeps its metadata) is found too.
        let mut undecodable: Watched = serde_json::from_value(json!({
            "metadata": {
                "name": "odd", "namespace": "ns", "uid": "uid-odd",
                "annotations": {ANN_HOLD_MARK: "3 2026-12-05T10:00:00Z"}
            },
            "spec": {"runtimeRef": "not an object"}
        }))
        .expect("a guarded TrainJob");
        assert!(undecodable.0.is_err(), "the spec does not decode");
        crate::trainjob::strip(&mut undecodable);
        for job in [
            cached(
                "marked",
                json!({ANN_HOLD_MARK: "7 2026-12-05T10:00:00Z", "other": "x"}),
            ),
            cached("unmarked", json!({"other": "x"})),
            undecodable,
        ] {
            writer.apply_watcher_event(&Event::InitApply(job));
        }
        writer.apply_watcher_event(&Event::InitDone);
        let mut found = MarkedJob::in_store(&store);
        found.sort_by(|a, b| a.name.cmp(&b.name));
        assert_eq!(
            found,
            vec![
                MarkedJob {
                    namespace: "ns".into(),
                    name: "marked".into(),
                    uid: "uid-marked".into(),
                    mark: "7 2026-12-05T10:00:00Z".into(),
                },
                MarkedJob {
                    namespace: "ns".into(),
                    name: "odd".into(),
                    uid: "uid-odd".into(),
                    mark: "3 2026-12-05T10:00:00Z".into(),
                },
            ]
        );
        // The same job read from the apiserver is the same candidate.
        assert_eq!(
            MarkedJob::of(&json!({"metadata": {
                "name": "marked", "namespace": "ns", "uid": "uid-marked",
                "annotations": {ANN_HOLD_MARK: "7 2026-12-05T10:00:00Z"}
            }})),
            MarkedJob::in_store(&store)
                .into_iter()
                .find(|j| j.name == "marked")
        );
    }
}
