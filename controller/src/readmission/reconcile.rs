//! One TrainJob's reconcile: move holds off its Workloads being deleted, and serve the gate
//! on its live Workloads.
//!
//! The cached objects (watches) only say whether there is anything to do. Every write is
//! decided on a fresh read from the apiserver (the TrainJob, its Workloads, and before the
//! gate lets an execution through, its pods) and preconditioned on that read's
//! resourceVersion; after each write the reconcile reads again and decides again, so a 409
//! costs one more round and never a wrong write.

use std::collections::{BTreeSet, HashSet};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use holdfast_core::{
    hold::{Write, apply},
    mode::Mode,
    readmission::{
        CHECK_PENDING, CHECK_READY, CLAIM_TEXT, GateStep, Pods, READY_TEXT, TrainJobView,
        TransferStep, WaitReason, WorkloadView, check_message, decide_gate, decide_transfer,
        multikueue::under_multikueue, raise_attempt, set_checks,
    },
    rfc3339,
};
use jiff::Timestamp;
use kube::api::{Api, DynamicObject, ListParams, PostParams};
use kube::runtime::controller::Action;
use kube::runtime::reflector::{ObjectRef, Store};
use kube::{Resource, ResourceExt};
use serde_json::Value;

use super::config::Config;
use super::events as gate_events;
use super::{Error, ReadmissionMetrics, checks::CheckNames};
use crate::backoff::Backoffs;
use crate::events::Publisher;
use crate::pods;
use crate::trainjob::Watched;
use holdfast_cluster::queues::Queues;
use holdfast_cluster::resources;
use holdfast_core::names::JOB_UID_LABEL;
use holdfast_core::readmission::held_quota::{
    held_quota_to_give_back, held_with_quota_under_multikueue,
};

/// At most this many writes per reconcile; then the TrainJob is requeued.
const MAX_ROUNDS: u32 = 12;

pub(crate) struct Context {
    pub(crate) client: kube::Client,
    pub(crate) config: Config,
    pub(crate) metrics: ReadmissionMetrics,
    pub(crate) workloads: Store<DynamicObject>,
    pub(crate) checks: CheckNames,
    /// Per TrainJob, keyed as the Controller names it in `ObjectNotFound`, so that a deleted
    /// TrainJob is forgotten.
    pub(crate) backoff: Backoffs<ObjectRef<DynamicObject>>,
    pub(crate) queues: Queues,
    /// Where the gate's Events go (never waited for).
    pub(crate) events: Publisher,
    /// TrainJobs under holdfast's control whose Workload is in a queue without the gate.
    pub(crate) ungated: Mutex<HashSet<(String, String)>>,
    /// TrainJobs under MultiKueue.
    pub(crate) multikueue: Mutex<HashSet<(String, String)>>,
    /// The snapshots that could not be handed to a worker's copy, already reported.
    pub(crate) not_adopted: Mutex<super::once::Reported>,
    /// The MultiKueue workers whose pods are counted for a TrainJob under MultiKueue.
    pub(crate) workers: crate::multikueue::Workers,
}

impl Context {
    pub(crate) fn pp(&self) -> PostParams {
        PostParams {
            dry_run: false,
            field_manager: Some(self.config.field_manager.clone()),
        }
    }

    /// The cached Workloads of TrainJob `uid` in `namespace`.
    fn cached_workloads(&self, namespace: &str, uid: &str) -> Vec<Value> {
        self.workloads
            .state()
            .iter()
            .filter(|w| w.metadata.namespace.as_deref() == Some(namespace) && belongs(w, uid))
            .filter_map(|w| serde_json::to_value(&**w).ok())
            .collect()
    }
}

/// Whether Workload `w` is TrainJob `uid`'s: the TrainJob is its controller owner. A label
/// alone never makes a Workload the TrainJob's.
fn belongs(w: &DynamicObject, uid: &str) -> bool {
    w.owner_references().iter().any(|o| {
        o.uid == uid
            && o.controller == Some(true)
            && o.kind == holdfast_core::names::TRAINJOB_KIND
            && o.api_version.split('/').next() == Some(holdfast_core::names::TRAINER_GROUP)
    })
}

/// Whether anything is to be done for this TrainJob, judged from cached objects. A wait
/// whose message is already written is nothing; pods to look at are something.
pub(crate) fn needs_work(trainjob: &Value, workloads: &[Value], ours: &BTreeSet<String>) -> bool {
    let tj = TrainJobView::read(trainjob);
    let views: Vec<WorkloadView> = workloads
        .iter()
        .map(|w| WorkloadView::read(w, ours))
        .collect();
    if matches!(
        decide_transfer(Some(&tj), &views),
        TransferStep::Write { .. }
    ) {
        return true;
    }
    views.iter().any(|w| {
        !matches!(
            decide_gate(&tj, w, &views, Pods::Unknown),
            GateStep::Idle | GateStep::Wait { message: None, .. }
        )
    }) || may_hold_quota(trainjob, workloads)
}

/// A cached TrainJob as the JSON object `holdfast_core::readmission` reads, and whether it
/// decoded. One that did not is its metadata only: the cache cannot say that nothing is to
/// be done for it.
fn cached_value(trainjob: &Watched) -> Result<(Value, bool), Error> {
    Ok(match &trainjob.0 {
        Ok(job) => (serde_json::to_value(job)?, true),
        Err(invalid) => (
            serde_json::json!({ "metadata": serde_json::to_value(&invalid.metadata)? }),
            false,
        ),
    })
}

pub(crate) async fn reconcile(trainjob: Arc<Watched>, ctx: Arc<Context>) -> Result<Action, Error> {
    let namespace = trainjob.namespace().unwrap_or_default();
    let name = trainjob.name_any();
    let uid = trainjob.uid().unwrap_or_default();
    let ours = ctx.checks.names();
    let (cached, decoded) = cached_value(&trainjob)?;
    let cached_workloads = ctx.cached_workloads(&namespace, &uid);
    let key = ObjectRef::from_obj(&*trainjob).erase();
    watch_queue(&ctx, &trainjob, &cached, &cached_workloads).await;
    watch_multikueue(&ctx, &trainjob, &cached, &cached_workloads).await;
    let adopting =
        adopt_snapshot(&ctx, &trainjob.object_ref(&()), &cached, &cached_workloads).await;
    let soon = |action: Action| match adopting {
        crate::multikueue_snapshot::Adopted::NotYet => Action::requeue(ADOPTION_RETRY),
        _ => action,
    };
    if decoded && !needs_work(&cached, &cached_workloads, &ours) {
        ctx.backoff.succeeded(&key);
        return Ok(soon(Action::requeue(ctx.config.resync)));
    }
    let action = drive(&ctx, &namespace, &name, &uid, &ours).await?;
    ctx.backoff.succeeded(&key);
    Ok(soon(action))
}

/// How soon the gate looks again for the worker's copy of a dispatched TrainJob, to hand it
/// the snapshot: MultiKueue creates the copy right after the worker admits its Workload.
const ADOPTION_RETRY: Duration = Duration::from_secs(1);

/// Hands the snapshot holdfast carried into the worker a TrainJob under MultiKueue was
/// dispatched to (its live Workload's `status.clusterName`) to the copy there, and deletes
/// the unowned ones in the other clusters of its MultiKueueConfig. A snapshot that cannot be
/// handed over gets a Warning Event, once per Workload and cause until it is handed over: the
/// copy then runs nothing (Trainer refuses a snapshot that is not its), or, if someone
/// deleted it, the worker's runtime.
async fn adopt_snapshot(
    ctx: &Context,
    trainjob: &k8s_openapi::api::core::v1::ObjectReference,
    cached: &Value,
    workloads: &[Value],
) -> crate::multikueue_snapshot::Adopted {
    use crate::multikueue_snapshot::{Adopted, adopt, remove_leftovers};
    let field = |f: &Option<String>| f.clone().unwrap_or_default();
    let (namespace, name, uid) = (
        field(&trainjob.namespace),
        field(&trainjob.name),
        field(&trainjob.uid),
    );
    let (namespace, name, uid) = (namespace.as_str(), name.as_str(), uid.as_str());
    // Only where holdfast's check gates the Workload: elsewhere nothing was carried.
    let ours = ctx.checks.names();
    let dispatched = workloads
        .iter()
        .filter(|w| !holdfast_core::readmission::terminating(w))
        .filter(|w| !WorkloadView::read(w, &ours).checks.is_empty())
        .find_map(|w| {
            let cluster = w.pointer("/status/clusterName").and_then(Value::as_str)?;
            let workload = w.pointer("/metadata/uid").and_then(Value::as_str);
            Some((cluster, workload.unwrap_or_default(), w))
        })
        .filter(|(c, _, _)| !c.is_empty() && ctx.workers.client(c).is_some());
    let adopted = match dispatched {
        Some((cluster, workload, w)) => {
            let adopted = adopt(&ctx.client, &ctx.workers, namespace, name, uid, cluster).await;
            if adopted == Adopted::Done
                && let Some(under) = under_multikueue(cached, ctx.queues.multikueue_for(w))
            {
                // Only the config's clusters: the gate carried it nowhere else.
                let coverage = crate::multikueue::coverage_of(
                    &ctx.client,
                    Some(&ctx.queues),
                    &ctx.workers,
                    &under,
                )
                .await;
                let clusters = coverage.clusters();
                remove_leftovers(&ctx.workers, clusters, cluster, namespace, name, uid).await;
            }
            if let Adopted::Refused(why) = &adopted {
                // Once per Workload and cause: this reconcile comes back every second.
                let first = ctx
                    .not_adopted
                    .lock()
                    .is_ok_and(|mut r| r.first(namespace, name, workload, why));
                if first {
                    tracing::warn!(namespace, trainjob = name, cluster, "{why}");
                    ctx.events
                        .publish(trainjob, gate_events::snapshot_not_adopted(why));
                } else {
                    tracing::debug!(namespace, trainjob = name, cluster, "{why}");
                }
            }
            adopted
        }
        None => Adopted::Done,
    };
    if adopted == Adopted::Done
        && let Ok(mut reported) = ctx.not_adopted.lock()
    {
        reported.forget(namespace, name);
    }
    adopted
}

/// Makes a misconfigured queue visible: a TrainJob under holdfast's control (managed, or
/// with a held Workload) whose live Workload is in a ClusterQueue without the readmission
/// check gets a Warning Event when it is first seen so, and is counted in
/// `holdfast_readmission_ungated_trainjobs` while it stays so. (Its Release and Open answer
/// `Unsupported`, naming the ClusterQueue; Hold goes ahead, stopping being always safe.)
async fn watch_queue(ctx: &Context, trainjob: &Watched, cached: &Value, workloads: &[Value]) {
    let key = (
        trainjob.namespace().unwrap_or_default(),
        trainjob.name_any(),
    );
    let tj = TrainJobView::read(cached);
    let ours = ctx.checks.names();
    let live = workloads
        .iter()
        .filter(|w| !holdfast_core::readmission::terminating(w));
    let ungated = live
        .filter(|w| tj.managed || WorkloadView::read(w, &ours).hold.is_held())
        .find_map(|w| ctx.queues.gate_for(w).refusal());
    let newly = {
        let Ok(mut set) = ctx.ungated.lock() else {
            return;
        };
        let newly = match &ungated {
            Some(_) => set.insert(key.clone()),
            None => {
                set.remove(&key);
                false
            }
        };
        ctx.metrics.set_ungated(set.len());
        newly
    };
    if let (true, Some(why)) = (newly, ungated) {
        tracing::warn!(namespace = key.0, trainjob = key.1, "{why}");
        ctx.events.publish(
            &trainjob.object_ref(&()),
            gate_events::queue_without_check(&why),
        );
    }
}

/// Makes MultiKueue visible: a TrainJob under MultiKueue (its `spec.managedBy`, or its
/// Workload's or queue's ClusterQueue listing MultiKueue's AdmissionCheck) gets a Warning
/// Event when it is first seen so, and is counted in
/// `holdfast_readmission_multikueue_trainjobs` while it stays so. The Event is left where
/// holdfast does not see every worker the job may run in, where every hold call of it
/// answers `Unsupported`.
async fn watch_multikueue(ctx: &Context, trainjob: &Watched, cached: &Value, workloads: &[Value]) {
    let key = (
        trainjob.namespace().unwrap_or_default(),
        trainjob.name_any(),
    );
    let queue = workloads
        .iter()
        .filter(|w| !holdfast_core::readmission::terminating(w))
        .find_map(|w| ctx.queues.multikueue_for(w))
        .or_else(|| {
            let queue = cached
                .pointer("/metadata/labels")?
                .get(holdfast_core::names::QUEUE_NAME_LABEL)?
                .as_str()?;
            ctx.queues.multikueue_for_queue(&key.0, queue)
        });
    let under = under_multikueue(cached, queue);
    let newly = {
        let Ok(mut set) = ctx.multikueue.lock() else {
            return;
        };
        let newly = match &under {
            Some(_) => set.insert(key.clone()),
            None => {
                set.remove(&key);
                false
            }
        };
        ctx.metrics.set_multikueue(set.len());
        newly
    };
    if let (true, Some(under)) = (newly, under) {
        let coverage =
            crate::multikueue::coverage_of(&ctx.client, Some(&ctx.queues), &ctx.workers, &under)
                .await;
        if coverage.covered() {
            tracing::info!(
                namespace = key.0,
                trainjob = key.1,
                "{}; {}",
                under.what(),
                coverage.why_not()
            );
            return;
        }
        tracing::warn!(namespace = key.0, trainjob = key.1, "{}", under.what());
        ctx.events.publish(
            &trainjob.object_ref(&()),
            gate_events::under_multikueue(&under, &coverage),
        );
    }
}

/// Forgets TrainJob `namespace/name` in the gauges of queues.
fn forget(ctx: &Context, namespace: &str, name: &str) {
    let key = (namespace.to_owned(), name.to_owned());
    if let Ok(mut set) = ctx.ungated.lock() {
        set.remove(&key);
        ctx.metrics.set_ungated(set.len());
    }
    if let Ok(mut set) = ctx.multikueue.lock() {
        set.remove(&key);
        ctx.metrics.set_multikueue(set.len());
    }
    if let Ok(mut reported) = ctx.not_adopted.lock() {
        reported.forget(namespace, name);
    }
}

pub(crate) fn error_policy(trainjob: Arc<Watched>, error: &Error, ctx: Arc<Context>) -> Action {
    ctx.metrics.failed(error.metric_label());
    let key = ObjectRef::from_obj(&*trainjob).erase();
    let delay = ctx.backoff.failed(&key);
    tracing::warn!(
        namespace = trainjob.namespace().unwrap_or_default(),
        name = trainjob.name_any(),
        %error,
        retry_in = ?delay,
        "readmission reconcile failed"
    );
    Action::requeue(delay)
}

/// What one fresh read saw.
struct Read {
    trainjob: Value,
    workloads: Vec<Value>,
}

/// Reads, decides, writes one step, and again, until there is nothing to write.
async fn drive(
    ctx: &Context,
    namespace: &str,
    name: &str,
    uid: &str,
    ours: &BTreeSet<String>,
) -> Result<Action, Error> {
    let mut stale = 0u32;
    for _ in 0..MAX_ROUNDS {
        let Some(read) = read(ctx, namespace, name, uid).await? else {
            // Gone, or another TrainJob of the same name: nothing of this one to serve.
            forget(ctx, namespace, name);
            return Ok(Action::await_change());
        };
        let result = step(ctx, namespace, name, &read, ours).await;
        match result {
            Ok(true) => continue,
            Ok(false)
                if !ctx.workers.is_empty() && holds_quota(&read.trainjob, &read.workloads) =>
            {
                return Ok(Action::requeue(HELD_QUOTA_RETRY.min(ctx.config.resync)));
            }
            Ok(false) => return Ok(Action::requeue(ctx.config.resync)),
            Err(e) if e.is_stale() => {
                stale += 1;
                tracing::debug!(namespace, name, error = %e, "write lost to another writer; reading again");
                continue;
            }
            Err(e) => return Err(e),
        }
    }
    if stale > 0 {
        return Err(Error::Contended(stale));
    }
    Ok(Action::requeue(Duration::from_millis(200)))
}

/// A fresh read of TrainJob `namespace/name` (if it is still the one with `uid`) and its
/// Workloads.
async fn read(
    ctx: &Context,
    namespace: &str,
    name: &str,
    uid: &str,
) -> Result<Option<Read>, Error> {
    let trainjobs: Api<DynamicObject> =
        Api::namespaced_with(ctx.client.clone(), namespace, &resources::trainjob());
    let Some(trainjob) = trainjobs.get_opt(name).await? else {
        return Ok(None);
    };
    if trainjob.uid().as_deref() != Some(uid) {
        return Ok(None);
    }
    let workloads: Api<DynamicObject> =
        Api::namespaced_with(ctx.client.clone(), namespace, &resources::workload());
    let mut list = workloads
        .list(&ListParams::default().labels(&format!("{JOB_UID_LABEL}={uid}")))
        .await?;
    if !list.items.iter().any(|w| belongs(w, uid)) {
        // The label is an index only (an editor may remove it): ownership decides.
        list = workloads.list(&ListParams::default()).await?;
    }
    let workloads = list
        .items
        .into_iter()
        .filter(|w| belongs(w, uid))
        .map(|w| workload_value(&w))
        .collect::<Result<Vec<_>, _>>()?;
    Ok(Some(Read {
        trainjob: serde_json::to_value(&trainjob)?,
        workloads,
    }))
}

/// A Workload as JSON, with its apiVersion and kind (a LIST's items lack them, and a PUT
/// needs them).
fn workload_value(w: &DynamicObject) -> Result<Value, Error> {
    let mut v = serde_json::to_value(w)?;
    let ar = resources::workload();
    if let Some(o) = v.as_object_mut() {
        o.insert(
            "apiVersion".to_owned(),
            Value::String(ar.api_version.clone()),
        );
        o.insert("kind".to_owned(), Value::String(ar.kind.clone()));
    }
    Ok(v)
}

/// Makes the next write, if any. `Ok(true)`: a write landed (read again); `Ok(false)`:
/// nothing to write.
async fn step(
    ctx: &Context,
    namespace: &str,
    name: &str,
    read: &Read,
    ours: &BTreeSet<String>,
) -> Result<bool, Error> {
    let tj = TrainJobView::read(&read.trainjob);
    let views: Vec<WorkloadView> = read
        .workloads
        .iter()
        .map(|w| WorkloadView::read(w, ours))
        .collect();

    match decide_transfer(Some(&tj), &views) {
        TransferStep::Write { workload, write } => {
            let label = transfer_label(&write);
            put_workload(ctx, namespace, &workload, &read.workloads, &write).await?;
            ctx.metrics.wrote(label);
            tracing::info!(
                namespace,
                trainjob = name,
                workload,
                step = label,
                "hold transfer"
            );
            return Ok(true);
        }
        TransferStep::AwaitReplacement { source } => {
            tracing::debug!(
                namespace,
                trainjob = name,
                source,
                "a held Workload is being deleted; no replacement yet"
            );
        }
        TransferStep::Idle => {}
    }

    for (i, view) in views.iter().enumerate() {
        let mut gate = decide_gate(&tj, view, &views, Pods::Unknown);
        let mut remaining = Vec::new();
        if gate == GateStep::LookForPods {
            remaining = remaining_pods(ctx, namespace, name).await?;
            let mut unreachable = Vec::new();
            let mut unseen = None;
            let mut carry = None;
            let under = match read.workloads.get(i) {
                Some(w) if !ctx.workers.is_empty() => under_multikueue_now(ctx, read, w),
                _ => None,
            };
            if let Some(under) = under {
                // The workers asked must cover every cluster the Workload may be dispatched
                // to, decided now: a queue's MultiKueueConfig may have changed since a call.
                let coverage = crate::multikueue::coverage_of(
                    &ctx.client,
                    Some(&ctx.queues),
                    &ctx.workers,
                    &under,
                )
                .await;
                if coverage.covered() {
                    let workers = ctx.workers.remaining(namespace, name).await;
                    remaining.extend(workers.remain);
                    unreachable = workers.unreachable;
                    carry = Some(coverage.clusters().to_vec());
                } else {
                    // The check stays Pending whatever the workers say: not read.
                    unseen = Some(coverage.why_not());
                }
            }
            let pods = if let Some(why) = unseen {
                tracing::warn!(
                    namespace,
                    trainjob = name,
                    why,
                    "a MultiKueue worker of the Workload is not configured: the gate stays closed"
                );
                remaining = vec![why];
                Pods::Unseen
            } else if !unreachable.is_empty() {
                tracing::warn!(
                    namespace,
                    trainjob = name,
                    ?unreachable,
                    "MultiKueue workers cannot be read: the gate stays closed"
                );
                remaining = unreachable;
                Pods::Unreachable
            } else if let (true, Some(clusters)) = (remaining.is_empty(), &carry) {
                // The snapshot goes with the job: in every worker of the Workload's
                // MultiKueueConfig before the copy may be dispatched there (MultiKueue
                // dispatches once this check is Ready).
                let uid = read
                    .trainjob
                    .pointer("/metadata/uid")
                    .and_then(Value::as_str)
                    .unwrap_or_default();
                let waits = crate::multikueue_snapshot::carry(
                    &ctx.client,
                    &ctx.workers,
                    clusters,
                    namespace,
                    name,
                    uid,
                )
                .await;
                if waits.is_empty() {
                    Pods::Gone
                } else {
                    tracing::warn!(
                        namespace,
                        trainjob = name,
                        ?waits,
                        "the runtime snapshot is not in every MultiKueue worker yet: the gate stays closed"
                    );
                    remaining = waits;
                    Pods::SnapshotNotCarried
                }
            } else if remaining.is_empty() {
                Pods::Gone
            } else {
                Pods::Remain(remaining.len())
            };
            gate = decide_gate(&tj, view, &views, pods);
        }
        let notice = match &gate {
            GateStep::Wait { reason, .. } => {
                Some(gate_events::waiting(&view.name, *reason, &remaining))
            }
            GateStep::Ready { attempt } => Some(gate_events::passed(&view.name, *attempt)),
            _ => None,
        };
        let now = rfc3339::seconds(Timestamp::now());
        let (state, message, label) = match gate {
            GateStep::Idle | GateStep::LookForPods | GateStep::Wait { message: None, .. } => {
                continue;
            }
            GateStep::Wait {
                reason,
                message: Some(m),
            } => (CHECK_PENDING, m, wait_label(reason)),
            GateStep::Claim { attempt } => (
                CHECK_PENDING,
                check_message(Some(attempt), CLAIM_TEXT),
                "claim",
            ),
            GateStep::Ready { attempt } => (
                CHECK_READY,
                check_message(Some(attempt), READY_TEXT),
                "ready",
            ),
            GateStep::RaiseAttempt { to } => {
                let mut trainjob = read.trainjob.clone();
                apply(
                    &raise_attempt(&tj.resource_version, to),
                    &mut trainjob,
                    Mode::Kueue,
                )?;
                let object: DynamicObject = serde_json::from_value(trainjob)?;
                let api: Api<DynamicObject> =
                    Api::namespaced_with(ctx.client.clone(), namespace, &resources::trainjob());
                api.replace(name, &ctx.pp(), &object).await?;
                ctx.metrics.wrote("raise_attempt");
                tracing::info!(
                    namespace,
                    trainjob = name,
                    attempt = to,
                    "readmission: A raised"
                );
                return Ok(true);
            }
        };
        let Some(mut workload) = read.workloads.get(i).cloned() else {
            continue;
        };
        if !set_checks(&mut workload, ours, state, &message, &now) {
            continue;
        }
        let object: DynamicObject = serde_json::from_value(workload)?;
        let api: Api<DynamicObject> =
            Api::namespaced_with(ctx.client.clone(), namespace, &resources::workload());
        api.replace_status(&view.name, &ctx.pp(), &object).await?;
        ctx.metrics.wrote(label);
        if let (Some(notice), Some(trainjob)) = (notice, crate::trainjob::reference(&read.trainjob))
        {
            ctx.events.publish(&trainjob, notice);
        }
        tracing::info!(
            namespace,
            trainjob = name,
            workload = view.name,
            state,
            message,
            "readmission check updated"
        );
        return Ok(true);
    }
    give_back_held_quota(ctx, read).await
}

/// A held job under MultiKueue gives back its quota in the manager once no worker runs it
/// (`crate::multikueue_quota`). `Ok(true)`: the TrainJob's status was written.
async fn give_back_held_quota(ctx: &Context, read: &Read) -> Result<bool, Error> {
    if ctx.workers.is_empty() {
        return Ok(false);
    }
    for workload in &read.workloads {
        let Some(under) = under_multikueue_now(ctx, read, workload) else {
            continue;
        };
        let wrote = crate::multikueue_quota::give_back(
            &ctx.client,
            &ctx.queues,
            &ctx.workers,
            &under,
            &read.trainjob,
            workload,
            &ctx.pp(),
        )
        .await?;
        if wrote {
            ctx.metrics.wrote("held_quota_given_back");
            return Ok(true);
        }
    }
    Ok(false)
}

/// How soon a held job under MultiKueue that still reserves quota is looked at again: its
/// pods in a worker end without an event in the manager.
const HELD_QUOTA_RETRY: Duration = Duration::from_secs(5);

/// Whether a Workload of the TrainJob (as read fresh) is held under MultiKueue and still
/// reserves quota while its TrainJob reports a Job running (the workers may let it go).
fn holds_quota(trainjob: &Value, workloads: &[Value]) -> bool {
    workloads
        .iter()
        .any(|w| held_quota_to_give_back(trainjob, w))
}

/// [`holds_quota`] as far as a cached TrainJob can tell (its cache keeps no `jobsStatus`):
/// a fresh read decides.
fn may_hold_quota(trainjob: &Value, workloads: &[Value]) -> bool {
    workloads
        .iter()
        .any(|w| held_with_quota_under_multikueue(trainjob, w))
}

/// The metric label of a wait step.
fn wait_label(reason: WaitReason) -> &'static str {
    match reason {
        WaitReason::StartGate => "wait_start_gate",
        WaitReason::HoldElsewhere => "wait_hold_elsewhere",
        WaitReason::PodsRemain => "wait_pods_remain",
        WaitReason::UnreadableAttempt => "wait_unreadable_attempt",
        WaitReason::WorkerUnreachable => "wait_worker_unreachable",
        WaitReason::WorkerNotConfigured => "wait_worker_not_configured",
        WaitReason::SnapshotNotCarried => "wait_snapshot_not_carried",
    }
}

/// The metric label of a transfer write.
fn transfer_label(write: &Write) -> &'static str {
    match (write.hold_finalizer, write.stop) {
        (Some(false), _) => "transfer_release",
        (_, Some(true)) => "transfer_hold",
        _ => "transfer_mark",
    }
}

/// PUTs `write` rendered on Workload `name` as read.
async fn put_workload(
    ctx: &Context,
    namespace: &str,
    name: &str,
    workloads: &[Value],
    write: &Write,
) -> Result<(), Error> {
    let Some(mut object) = workloads
        .iter()
        .find(|w| w.pointer("/metadata/name").and_then(Value::as_str) == Some(name))
        .cloned()
    else {
        return Ok(());
    };
    apply(write, &mut object, Mode::Kueue)?;
    let object: DynamicObject = serde_json::from_value(object)?;
    let api: Api<DynamicObject> =
        Api::namespaced_with(ctx.client.clone(), namespace, &resources::workload());
    api.replace(name, &ctx.pp(), &object).await?;
    Ok(())
}

/// Whether TrainJob `read.trainjob`, whose Workload `workload` is read, is under MultiKueue:
/// the Workload's ClusterQueue listing MultiKueue's check, or its `spec.managedBy`.
fn under_multikueue_now(
    ctx: &Context,
    read: &Read,
    workload: &Value,
) -> Option<holdfast_core::readmission::multikueue::UnderMultiKueue> {
    under_multikueue(&read.trainjob, ctx.queues.multikueue_for(workload))
}

/// The pods of TrainJob `name`'s previous executions that remain, listed live and found by
/// ownership (`holdfast_core::execution`): a relabelled pod still counts, a decoy does not.
async fn remaining_pods(ctx: &Context, namespace: &str, name: &str) -> Result<Vec<String>, Error> {
    Ok(pods::names(
        &pods::remaining_with(&ctx.client, namespace, name).await?,
    ))
}

/// The TrainJob a Workload belongs to (its TrainJob owner), as a reconcile key.
pub(crate) fn trainjob_of(workload: &DynamicObject) -> Option<ObjectRef<Watched>> {
    let namespace = workload.namespace()?;
    workload
        .owner_references()
        .iter()
        .find(|o| {
            o.kind == holdfast_core::names::TRAINJOB_KIND
                && o.api_version
                    .starts_with(holdfast_core::names::TRAINER_GROUP)
        })
        .map(|o| ObjectRef::new(&o.name).within(&namespace))
}

/// The TrainJob a pod of an execution belongs to, by its JobSet name label.
pub(crate) fn trainjob_of_pod<K: Resource>(pod: &K) -> Option<ObjectRef<Watched>> {
    let namespace = pod.meta().namespace.clone()?;
    let name = pod
        .meta()
        .labels
        .as_ref()?
        .get(pods::JOBSET_NAME_LABEL)?
        .clone();
    Some(ObjectRef::new(&name).within(&namespace))
}

#[cfg(test)]
mod tests {
    use super::*;
    use holdfast_core::names::{ANN_OPENED, LABEL_MANAGED};
    use serde_json::json;

    fn ours() -> BTreeSet<String> {
        ["gate".to_owned()].into()
    }

    fn workload(state: &str, message: &str) -> Value {
        json!({"metadata": {"name": "w", "uid": "w"},
            "status": {"conditions": [{"type": "QuotaReserved", "status": "True"}],
                "admissionChecks": [{"name": "gate", "state": state, "message": message}]}})
    }

    #[test]
    fn work_is_judged_from_the_cache() {
        let tj = json!({"metadata": {"uid": "t", "labels": {LABEL_MANAGED: "true"},
            "annotations": {ANN_OPENED: "true"}}});
        assert!(
            needs_work(&tj, &[workload("Pending", "")], &ours()),
            "pods to look at"
        );
        assert!(!needs_work(
            &tj,
            &[workload("Ready", "attempt=0: x")],
            &ours()
        ));
        assert!(!needs_work(&tj, &[], &ours()));
        let unopened = json!({"metadata": {"uid": "t", "labels": {LABEL_MANAGED: "true"}}});
        assert!(
            needs_work(&unopened, &[workload("Pending", "")], &ours()),
            "the wait message to write"
        );
        let waiting = holdfast_core::readmission::WaitReason::StartGate.text();
        assert!(!needs_work(
            &unopened,
            &[workload("Pending", waiting)],
            &ours()
        ));
    }

    #[test]
    fn workloads_and_pods_map_to_their_trainjob() {
        let wl: DynamicObject = serde_json::from_value(json!({
            "apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "Workload",
            "metadata": {"name": "trainjob-job-1", "namespace": "ns", "ownerReferences": [
                {"apiVersion": "trainer.kubeflow.org/v1alpha1", "kind": "TrainJob",
                 "name": "job", "uid": "u"}]}
        }))
        .expect("workload");
        let key = trainjob_of(&wl).expect("owner");
        assert_eq!(
            (key.name.as_str(), key.namespace.as_deref()),
            ("job", Some("ns"))
        );
        let pod = k8s_openapi::api::core::v1::Pod {
            metadata: kube::api::ObjectMeta {
                namespace: Some("ns".into()),
                labels: Some([(pods::JOBSET_NAME_LABEL.to_owned(), "job".to_owned())].into()),
                ..Default::default()
            },
            ..Default::default()
        };
        let key = trainjob_of_pod(&pod).expect("label");
        assert_eq!(key.name, "job");
        assert!(trainjob_of_pod(&k8s_openapi::api::core::v1::Pod::default()).is_none());
    }
}
