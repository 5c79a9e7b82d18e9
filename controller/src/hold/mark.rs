//! Kueue mode: the hold mark's writes on the TrainJob (`holdfast_core::hold::mark` decides
//! them). Hold marks the TrainJob before the seed's one update of the Workload; Release
//! removes the mark after its own; [`sweep`] removes a mark left by a call that crashed or
//! ran out of time between the two, once no call that wrote it can still write.

use std::time::Duration;

use holdfast_core::hold::mark::{self, MarkStep, Marked};
use holdfast_core::hold::object::hold_state;
use holdfast_core::hold::{HoldError, HoldState, Write, apply};
use holdfast_core::mode::Mode;
use holdfast_core::names::JOB_UID_LABEL;
use jiff::Timestamp;
use kube::api::{Api, DynamicObject, ListParams, PostParams};
use serde_json::{Value, json};

use super::requests::{CallRequests, RequestError};
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

/// Removes every stale hold mark (`mark::stale`) on the TrainJobs `client` sees
/// (`namespace`: one namespace, or all), each preconditioned on the resourceVersion it was
/// read at: a Hold that marks the job again in between makes the removal fail. Returns how
/// many it removed.
pub async fn sweep(
    client: &kube::Client,
    namespace: Option<&str>,
    bound: Duration,
) -> Result<usize, kube::Error> {
    let trainjobs: Api<DynamicObject> = match namespace {
        Some(ns) => Api::namespaced_with(client.clone(), ns, &resources::trainjob()),
        None => Api::all_with(client.clone(), &resources::trainjob()),
    };
    let mut removed = 0;
    let mut params = ListParams::default().limit(500);
    loop {
        let page = trainjobs.list_metadata(&params).await?;
        for tj in &page.items {
            let value = json!({ "metadata": tj.metadata });
            let Some(ns) = tj.metadata.namespace.as_deref() else {
                continue;
            };
            let name = tj.metadata.name.as_deref().unwrap_or_default();
            let candidate = match Marked::read(&value) {
                Marked::None => false,
                Marked::Unreadable(_) => true,
                Marked::Mark(m) => m.expired(Timestamp::now(), bound),
            };
            if !candidate {
                continue;
            }
            let held =
                workload_holds(client, ns, tj.metadata.uid.as_deref().unwrap_or_default()).await?;
            let mark_instance = match Marked::read(&value) {
                Marked::Mark(m) => Some(m.instance),
                _ => None,
            };
            let workload_hold = match mark_instance {
                Some(i) if held.contains(&i) => Some(i),
                _ => held.first().copied(),
            };
            let Some(write) = mark::stale(&value, workload_hold, Timestamp::now(), bound) else {
                continue;
            };
            let api: Api<DynamicObject> =
                Api::namespaced_with(client.clone(), ns, &resources::trainjob());
            // An update (the controller's RBAC has no patch on TrainJobs) of the whole object,
            // preconditioned on the version the decision was made on, not the one just read.
            let result = match api.get_opt(name).await? {
                None => continue,
                Some(full) => {
                    let mut object =
                        serde_json::to_value(&full).map_err(kube::Error::SerdeError)?;
                    if apply(&write, &mut object, Mode::Kueue).is_err() {
                        continue;
                    }
                    object["metadata"]["resourceVersion"] = json!(write.precondition);
                    let object: DynamicObject =
                        serde_json::from_value(object).map_err(kube::Error::SerdeError)?;
                    api.replace(name, &PostParams::default(), &object).await
                }
            };
            match result {
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
        match page.metadata.continue_.filter(|c| !c.is_empty()) {
            Some(token) => params = params.continue_token(&token),
            None => return Ok(removed),
        }
    }
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

/// Runs [`sweep`] every `every` until `shutdown`. On every replica: each removal is
/// preconditioned, so two replicas sweeping the same mark remove it once.
pub async fn sweep_every(
    client: kube::Client,
    namespace: Option<String>,
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
        if let Err(e) = sweep(&client, namespace.as_deref(), bound).await {
            tracing::warn!(error = %e, "the sweep of stale hold marks failed; it runs again");
        }
    }
}
