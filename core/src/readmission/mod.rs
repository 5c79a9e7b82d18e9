//! Kueue mode: the readmission gate, and holds that survive the replacement of a Workload, as
//! pure decisions. The controller's `readmission` module is their I/O.
//!
//! # The gate
//!
//! The gate is a Kueue AdmissionCheck whose controller is holdfast
//! ([`READMISSION_CONTROLLER`]). Kueue puts a `Pending` entry for it in
//! `status.admissionChecks` of every Workload its ClusterQueue admits, and resets every entry
//! to `Pending` on each eviction, so every admission — the first one and every re-admission
//! after a hold, a preemption or a requeue — passes the gate. The gate turns its entry `Ready`
//! ([`decide_gate`]) only when all of these hold:
//!
//! - the Workload has quota reserved (Kueue's convention for check controllers), is active,
//!   carries no hold, and is neither finished nor being deleted;
//! - a managed TrainJob (`holdfast.dev/managed: "true"`) carries the opened mark: otherwise a
//!   Kueue-mode Release of a job that was never opened would start it. An unmanaged job
//!   needs no mark;
//! - no other Workload of the TrainJob carries a hold (a held Workload being deleted, whose
//!   hold has not yet been moved to its replacement);
//! - no pod of the previous execution remains (listed live, right before the write).
//!
//! # A, exactly once per admission
//!
//! A rises each time the gate lets an execution through. The gate's writes go to two objects
//! (the Workload's status and the TrainJob), so a crash between them must neither lose the
//! rise nor make it twice. The record that binds the rise to the admission lives in the
//! check's own message, and is written while the check is still `Pending`, because Kueue
//! never resets a `Pending` entry (only non-`Pending` ones, on eviction):
//!
//! 1. **Claim**: the `Pending` entry's message becomes `attempt=N: ...` with `N = A + 1`,
//!    A read fresh from the apiserver (preconditioned on the Workload's resourceVersion).
//! 2. **Raise**: A on the TrainJob becomes `N` if it is lower (preconditioned on the
//!    TrainJob's resourceVersion).
//! 3. **Ready**: the entry becomes `Ready`, message `attempt=N: ...` (preconditioned).
//!
//! Every step is decided afresh from what is read, so a crash after any of them is resumed
//! by the next reconcile: a claim with A below it is raised, a claim A has reached turns
//! Ready, and no step is ever repeated with a new N while a claim stands. A claim outlives
//! evictions that happen before Ready (the entry stays `Pending`); once Ready, the next
//! eviction resets the entry, and the next admission claims `A + 1` anew. A Workload that
//! Kueue replaces starts with fresh entries: a new admission, a new claim.
//!
//! # Holds survive the replacement of their Workload
//!
//! Kueue deletes and recreates a job's Workload when the job no longer matches it (a changed
//! runtime, for instance), and the new Workload is active. So a
//! hold carries a finalizer, [`HOLD_FINALIZER`], added and removed in the same update as the
//! hold itself: a held Workload that is deleted — by Kueue, or by a user — stays, terminating
//! and still held (`active: false`, the hold annotations).
//!
//! Kueue v0.19 names a job's Workload after the job, so the replacement cannot even be
//! created while the held one exists (Kueue's create fails with "object is being deleted",
//! and Kueue keeps the job suspended and retries). The terminating Workload is then the held
//! object: [`select_workload`] gives it to Hold, Release and Status, the gate keeps any other
//! Workload of the job `Pending` while it carries the hold, and Release lifts the hold there,
//! removing the finalizer with it. Only then does Kueue create the replacement, active, which
//! passes the gate like any re-admission. (A Kueue that keeps a deleted Workload matched does
//! the same: it keeps the job stopped until the Workload is gone.)
//!
//! Should a replacement exist next to a held Workload being deleted anyway (a Kueue that
//! names replacements differently), the hold is moved to it ([`decide_transfer`]):
//!
//! 1. **Mark** each terminating held Workload with [`ANN_HOLD_TRANSFER_TO`] naming the
//!    replacement. This changes its resourceVersion, so a hold call decided on an older read
//!    of it (before the replacement existed) fails its precondition and reads again.
//! 2. **Hold the replacement**: the newest hold's annotations, `active: false` and the
//!    finalizer, in one update (unless it already carries that hold or a newer one).
//! 3. **Let the old one go**: remove its finalizer.
//!
//! While a terminating Workload still carries the finalizer and a replacement exists, hold
//! calls wait ([`Selected::TransferPending`]) and the gate keeps the replacement `Pending`.
//! When the TrainJob is gone, being deleted or finished, the finalizer is simply removed:
//! there is nothing left to hold.
//!
//! [`select_workload`]: crate::workload_selection::select_workload
//! [`Selected::TransferPending`]: crate::workload_selection::Selected::TransferPending

use std::collections::{BTreeMap, BTreeSet};

use serde_json::{Map, Value};

use crate::{
    hold::{HeldObject, HoldState, Outcome, Write, object},
    names::{
        ANN_ATTEMPT, ANN_HOLD_HOLDER, ANN_HOLD_INSTANCE, ANN_HOLD_PLACED_AT, ANN_HOLD_REASON,
        ANN_HOLD_TRANSFER_TO, HOLD_FINALIZER, LABEL_MANAGED, READMISSION_CONTROLLER,
    },
};

/// An AdmissionCheck state (`status.admissionChecks[].state`).
pub const CHECK_PENDING: &str = "Pending";
pub const CHECK_READY: &str = "Ready";

/// The condition holdfast keeps true on its AdmissionChecks.
pub const ACTIVE_CONDITION: &str = "Active";

/// The prefix of a claim in a check's message.
const CLAIM_PREFIX: &str = "attempt=";

/// The attempt an admission claimed, from its check's message (`attempt=N` or
/// `attempt=N: ...`), if any.
pub fn claimed_attempt(message: &str) -> Option<u64> {
    let rest = message.strip_prefix(CLAIM_PREFIX)?;
    let end = rest
        .find(|c: char| !c.is_ascii_digit())
        .unwrap_or(rest.len());
    let (digits, after) = rest.split_at(end);
    if !(after.is_empty() || after.starts_with(':')) {
        return None;
    }
    crate::hold::parse_decimal(digits)
}

/// A check's message: the claim, if any, then the text.
pub fn check_message(claim: Option<u64>, text: &str) -> String {
    match claim {
        Some(n) => format!("{CLAIM_PREFIX}{n}: {text}"),
        None => text.to_owned(),
    }
}

/// One of holdfast's entries in a Workload's `status.admissionChecks`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CheckState {
    pub name: String,
    pub state: String,
    pub message: String,
}

impl CheckState {
    pub fn is_pending(&self) -> bool {
        self.state == CHECK_PENDING
    }

    /// The attempt this entry's admission claimed.
    pub fn claim(&self) -> Option<u64> {
        claimed_attempt(&self.message)
    }
}

/// A Workload, as the gate and the hold transfer read it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct WorkloadView {
    pub name: String,
    pub uid: String,
    pub resource_version: String,
    /// `metadata.creationTimestamp` (RFC 3339; compared as text, as the apiserver writes it).
    pub created: String,
    /// `metadata.deletionTimestamp` is set.
    pub terminating: bool,
    /// It carries [`HOLD_FINALIZER`].
    pub hold_finalizer: bool,
    pub hold: HoldState,
    /// [`ANN_HOLD_TRANSFER_TO`].
    pub transfer_to: Option<String>,
    /// `spec.active` (absent is true).
    pub active: bool,
    pub quota_reserved: bool,
    pub admitted: bool,
    pub finished: bool,
    /// holdfast's entries in `status.admissionChecks`, in the order found.
    pub checks: Vec<CheckState>,
}

impl WorkloadView {
    /// Reads a Workload; `ours` are the names of holdfast's AdmissionChecks.
    pub fn read(workload: &Value, ours: &BTreeSet<String>) -> WorkloadView {
        let text = |p: &str| {
            workload
                .pointer(p)
                .and_then(Value::as_str)
                .unwrap_or_default()
                .to_owned()
        };
        let conditions = workload.pointer("/status/conditions");
        let checks = workload
            .pointer("/status/admissionChecks")
            .and_then(Value::as_array)
            .map(|items| {
                items
                    .iter()
                    .filter_map(|c| {
                        let name = c.get("name")?.as_str()?;
                        ours.contains(name).then(|| CheckState {
                            name: name.to_owned(),
                            state: c
                                .get("state")
                                .and_then(Value::as_str)
                                .unwrap_or_default()
                                .to_owned(),
                            message: c
                                .get("message")
                                .and_then(Value::as_str)
                                .unwrap_or_default()
                                .to_owned(),
                        })
                    })
                    .collect()
            })
            .unwrap_or_default();
        WorkloadView {
            name: text("/metadata/name"),
            uid: text("/metadata/uid"),
            resource_version: text("/metadata/resourceVersion"),
            created: text("/metadata/creationTimestamp"),
            terminating: terminating(workload),
            hold_finalizer: has_hold_finalizer(workload),
            hold: object::hold_state(workload),
            transfer_to: object::annotation(workload, ANN_HOLD_TRANSFER_TO).map(str::to_owned),
            active: !object::stopped(workload, HeldObject::Workload),
            quota_reserved: condition_true(conditions, "QuotaReserved"),
            admitted: condition_true(conditions, "Admitted"),
            finished: condition_true(conditions, "Finished"),
            checks,
        }
    }

    /// A held Workload being deleted whose hold must be kept: terminating, with the finalizer.
    pub fn is_hold_source(&self) -> bool {
        self.terminating && self.hold_finalizer
    }

    fn sort_key(&self) -> (&str, &str) {
        (&self.created, &self.name)
    }
}

/// A TrainJob, as the gate reads it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TrainJobView {
    pub uid: String,
    pub resource_version: String,
    /// Label `holdfast.dev/managed: "true"`: the start gate applies.
    pub managed: bool,
    pub opened: bool,
    /// A; `None` when the annotation is not a decimal number (then A cannot be raised).
    pub attempt: Option<u64>,
    /// Complete or Failed.
    pub ended: bool,
    pub terminating: bool,
}

impl TrainJobView {
    pub fn read(trainjob: &Value) -> TrainJobView {
        let text = |p: &str| {
            trainjob
                .pointer(p)
                .and_then(Value::as_str)
                .unwrap_or_default()
                .to_owned()
        };
        TrainJobView {
            uid: text("/metadata/uid"),
            resource_version: text("/metadata/resourceVersion"),
            managed: trainjob
                .pointer("/metadata/labels")
                .and_then(|l| l.get(LABEL_MANAGED))
                .and_then(Value::as_str)
                == Some("true"),
            opened: object::opened(trainjob),
            attempt: object::attempt(trainjob).ok(),
            ended: object::finished(trainjob).is_some(),
            terminating: terminating(trainjob),
        }
    }
}

/// Whether `obj` has a `metadata.deletionTimestamp`.
pub fn terminating(obj: &Value) -> bool {
    obj.pointer("/metadata/deletionTimestamp")
        .is_some_and(|t| !t.is_null())
}

/// Whether `obj` carries [`HOLD_FINALIZER`].
pub fn has_hold_finalizer(obj: &Value) -> bool {
    obj.pointer("/metadata/finalizers")
        .and_then(Value::as_array)
        .is_some_and(|f| f.iter().any(|f| f.as_str() == Some(HOLD_FINALIZER)))
}

fn condition_true(conditions: Option<&Value>, kind: &str) -> bool {
    conditions.and_then(Value::as_array).is_some_and(|cs| {
        cs.iter().any(|c| {
            c.get("type").and_then(Value::as_str) == Some(kind)
                && c.get("status").and_then(Value::as_str) == Some("True")
        })
    })
}

// ---- The gate --------------------------------------------------------------------------

/// Whether pods of the previous execution remain, as far as the caller knows.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Pods {
    /// Not looked yet: [`GateStep::LookForPods`] asks for a live list.
    Unknown,
    Remain(usize),
    Gone,
    /// A place the pods may be in (a MultiKueue worker) could not be read: they may remain.
    Unreachable,
    /// Some places the pods may be in (MultiKueue workers of the Workload's queue) are not
    /// known to the caller at all: they may remain there.
    Unseen,
    /// No pods remain, but the manager's runtime snapshot is not yet in every MultiKueue
    /// worker, unowned, as the copy must find it ([`multikueue`], `worker_snapshot`).
    SnapshotNotCarried,
}

/// Why the gate keeps a Workload's check `Pending`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum WaitReason {
    /// A managed TrainJob without the opened mark.
    StartGate,
    /// Another Workload of the TrainJob still carries a hold (one being deleted, whose hold
    /// is being moved to this one).
    HoldElsewhere,
    /// Pods of the previous execution remain.
    PodsRemain,
    /// The TrainJob's A is not a decimal number: raising it could lower it.
    UnreadableAttempt,
    /// A MultiKueue worker holdfast is configured for cannot be read: pods of the previous
    /// execution may remain there.
    WorkerUnreachable,
    /// The Workload's MultiKueueConfig lists a worker holdfast has no kubeconfig for: pods
    /// of the previous execution may remain there unseen.
    WorkerNotConfigured,
    /// The manager's runtime snapshot is not yet in every MultiKueue worker as the job's
    /// copy must find it ([`worker_snapshot::decide_worker`]).
    SnapshotNotCarried,
}

impl WaitReason {
    /// A bounded label for metrics.
    pub fn metric_label(self) -> &'static str {
        match self {
            WaitReason::StartGate => "start_gate",
            WaitReason::HoldElsewhere => "hold_elsewhere",
            WaitReason::PodsRemain => "pods_remain",
            WaitReason::UnreadableAttempt => "unreadable_attempt",
            WaitReason::WorkerUnreachable => "worker_unreachable",
            WaitReason::WorkerNotConfigured => "worker_not_configured",
            WaitReason::SnapshotNotCarried => "snapshot_not_carried",
        }
    }

    /// What the check's message says.
    pub fn text(self) -> &'static str {
        match self {
            WaitReason::StartGate => {
                "waiting for the start gate: the TrainJob has no holdfast.dev/opened mark"
            }
            WaitReason::HoldElsewhere => {
                "waiting for the hold on another Workload of this TrainJob to be moved here"
            }
            WaitReason::PodsRemain => "waiting for the pods of the previous execution to be gone",
            WaitReason::UnreadableAttempt => {
                "the TrainJob's holdfast.dev/attempt is not a decimal number"
            }
            WaitReason::WorkerUnreachable => {
                "waiting to reach every MultiKueue worker: pods of the previous execution may remain in one that cannot be read"
            }
            WaitReason::WorkerNotConfigured => {
                "waiting for a kubeconfig of every worker of this Workload's MultiKueueConfig (the chart's kueue.multikueue.workers): pods of the previous execution may remain in one holdfast cannot see"
            }
            WaitReason::SnapshotNotCarried => {
                "waiting to write the TrainJob's runtime snapshot into every MultiKueue worker, so that the worker's copy runs the manager's snapshot and not the worker's runtime (the ReadmissionWaiting Event names the worker, the ConfigMap and what to do)"
            }
        }
    }
}

/// What the claim's message says.
pub const CLAIM_TEXT: &str = "claimed; raising holdfast.dev/attempt on the TrainJob";
/// What a Ready check's message says.
pub const READY_TEXT: &str = "no pod of the previous execution remains";

/// What the gate does next for one Workload.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum GateStep {
    /// Nothing: no check of ours is `Pending` on an active Workload with quota reserved.
    Idle,
    /// Keep the check `Pending`. `message`: what its message should become, if it says
    /// something else now (the claim, if any, is kept).
    Wait {
        reason: WaitReason,
        message: Option<String>,
    },
    /// Everything else lets it through: list the pods of the previous execution, then
    /// decide again with [`Pods::Remain`] or [`Pods::Gone`].
    LookForPods,
    /// Record `attempt=N` on the `Pending` check(s): [`set_checks`] with
    /// [`CHECK_PENDING`] and [`check_message`]`(Some(attempt), CLAIM_TEXT)`.
    Claim { attempt: u64 },
    /// Raise A on the TrainJob to `to` ([`raise_attempt`]).
    RaiseAttempt { to: u64 },
    /// Turn the check(s) `Ready`, message [`check_message`]`(Some(attempt), READY_TEXT)`.
    Ready { attempt: u64 },
}

/// Decides the gate for Workload `workload` of TrainJob `trainjob`; `others` are the
/// TrainJob's other Workloads; `pods` whether pods of the previous execution remain.
pub fn decide_gate(
    trainjob: &TrainJobView,
    workload: &WorkloadView,
    others: &[WorkloadView],
    pods: Pods,
) -> GateStep {
    if workload.checks.is_empty()
        || workload.terminating
        || workload.finished
        || trainjob.ended
        || trainjob.terminating
    {
        return GateStep::Idle;
    }
    let pending: Vec<&CheckState> = workload.checks.iter().filter(|c| c.is_pending()).collect();
    if pending.is_empty() {
        // A Ready check's claim that A has not reached (A edited down by hand, say).
        let claim = workload.checks.iter().filter_map(CheckState::claim).max();
        return match (claim, trainjob.attempt) {
            (Some(n), Some(a)) if a < n => GateStep::RaiseAttempt { to: n },
            _ => GateStep::Idle,
        };
    }
    if !workload.quota_reserved || !workload.active || workload.hold.is_held() {
        return GateStep::Idle;
    }
    let claim = pending.iter().filter_map(|c| c.claim()).max();
    let wait = |reason: WaitReason| {
        let text = check_message(claim, reason.text());
        GateStep::Wait {
            reason,
            message: pending.iter().any(|c| c.message != text).then_some(text),
        }
    };
    if trainjob.managed && !trainjob.opened {
        return wait(WaitReason::StartGate);
    }
    if others
        .iter()
        .any(|o| o.uid != workload.uid && o.hold.is_held())
    {
        return wait(WaitReason::HoldElsewhere);
    }
    let Some(attempt) = trainjob.attempt else {
        return wait(WaitReason::UnreadableAttempt);
    };
    match pods {
        Pods::Unknown => return GateStep::LookForPods,
        Pods::Remain(_) => return wait(WaitReason::PodsRemain),
        Pods::Unreachable => return wait(WaitReason::WorkerUnreachable),
        Pods::Unseen => return wait(WaitReason::WorkerNotConfigured),
        Pods::SnapshotNotCarried => return wait(WaitReason::SnapshotNotCarried),
        Pods::Gone => {}
    }
    match claim {
        None => GateStep::Claim {
            attempt: attempt.saturating_add(1),
        },
        Some(n) if attempt < n => GateStep::RaiseAttempt { to: n },
        Some(n) => GateStep::Ready { attempt: n },
    }
}

/// Sets holdfast's entries (named in `ours`) of `workload`'s `status.admissionChecks` to
/// `state` with `message`, as read otherwise; `lastTransitionTime` becomes `now` (RFC 3339)
/// where the state changes. PUT the result to the `status` subresource: its
/// resourceVersion is the precondition. Returns whether anything changed.
pub fn set_checks(
    workload: &mut Value,
    ours: &BTreeSet<String>,
    state: &str,
    message: &str,
    now: &str,
) -> bool {
    let Some(items) = workload
        .pointer_mut("/status/admissionChecks")
        .and_then(Value::as_array_mut)
    else {
        return false;
    };
    let mut changed = false;
    for item in items.iter_mut() {
        let Some(entry) = item.as_object_mut() else {
            continue;
        };
        let ours_here = entry
            .get("name")
            .and_then(Value::as_str)
            .is_some_and(|n| ours.contains(n));
        if !ours_here {
            continue;
        }
        if entry.get("state").and_then(Value::as_str) != Some(state) {
            entry.insert("state".to_owned(), Value::String(state.to_owned()));
            entry.insert(
                "lastTransitionTime".to_owned(),
                Value::String(now.to_owned()),
            );
            changed = true;
        }
        if entry.get("message").and_then(Value::as_str) != Some(message) {
            entry.insert("message".to_owned(), Value::String(message.to_owned()));
            changed = true;
        }
    }
    changed
}

/// The TrainJob update that raises A to `to`, preconditioned on `resource_version`: a
/// [`Write`] for [`crate::hold::apply`] (it never touches `spec.suspend`). Its `outcome`
/// means nothing here.
pub fn raise_attempt(resource_version: &str, to: u64) -> Write {
    let mut w = Write::new(
        HeldObject::TrainJob,
        resource_version,
        Outcome::Opened { started: true },
    );
    w.set_annotations
        .insert(ANN_ATTEMPT.to_owned(), to.to_string());
    w
}

// ---- Holds that survive the replacement of their Workload ------------------------------

/// What the hold transfer does next for one TrainJob.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum TransferStep {
    /// Nothing to move.
    Idle,
    /// A held Workload is being deleted and nothing replaces it yet: it stays the held
    /// object.
    AwaitReplacement { source: String },
    /// Write this update (of Workload `workload`), preconditioned on its resourceVersion.
    Write { workload: String, write: Write },
}

/// Decides the next step of moving holds off Workloads being deleted. `trainjob` is `None`
/// when the TrainJob is gone (or is another TrainJob of the same name); `workloads` are all
/// of its Workloads, as read.
pub fn decide_transfer(
    trainjob: Option<&TrainJobView>,
    workloads: &[WorkloadView],
) -> TransferStep {
    let mut sources: Vec<&WorkloadView> = workloads.iter().filter(|w| w.is_hold_source()).collect();
    sources.sort_by(|a, b| a.name.cmp(&b.name));
    let Some(first) = sources.first() else {
        return TransferStep::Idle;
    };
    let nothing_to_hold = match trainjob {
        None => true,
        Some(tj) => tj.terminating || tj.ended,
    };
    // A source without a hold (damaged), or a job that will never run again: let go.
    if let Some(s) = sources
        .iter()
        .find(|s| nothing_to_hold || !s.hold.is_held())
    {
        return let_go(s);
    }
    let Some(target) = workloads
        .iter()
        .filter(|w| !w.terminating)
        .max_by(|a, b| a.sort_key().cmp(&b.sort_key()))
    else {
        return TransferStep::AwaitReplacement {
            source: first.name.clone(),
        };
    };
    if let Some(s) = sources
        .iter()
        .find(|s| s.transfer_to.as_deref() != Some(target.name.as_str()))
    {
        let mut w = Write::new(HeldObject::Workload, &s.resource_version, Outcome::Held);
        w.set_annotations
            .insert(ANN_HOLD_TRANSFER_TO.to_owned(), target.name.clone());
        return TransferStep::Write {
            workload: s.name.clone(),
            write: w,
        };
    }
    // The newest hold among the sources; a readable one beats an unreadable one.
    let best = sources
        .iter()
        .max_by_key(|s| match &s.hold {
            HoldState::InForce(r) => (1, r.instance),
            _ => (0, 0),
        })
        .copied()
        .unwrap_or(first);
    let target_has_it = match (&target.hold, &best.hold) {
        (HoldState::InForce(t), HoldState::InForce(b)) => t.instance >= b.instance,
        (HoldState::InForce(_), _) => true,
        (HoldState::Unreadable { .. }, _) => true,
        (HoldState::Absent, _) => false,
    };
    if !(target_has_it && !target.active && target.hold_finalizer) {
        let mut w = Write::new(
            HeldObject::Workload,
            &target.resource_version,
            Outcome::Held,
        );
        w.stop = Some(true);
        w.hold_finalizer = Some(true);
        if !target_has_it {
            for (key, value) in hold_annotations(&best.hold) {
                match value {
                    Some(v) => {
                        w.set_annotations.insert(key.to_owned(), v);
                    }
                    None => {
                        w.remove_annotations.insert(key.to_owned());
                    }
                }
            }
        }
        return TransferStep::Write {
            workload: target.name.clone(),
            write: w,
        };
    }
    let_go(first)
}

/// Removes the hold finalizer (and the transfer mark) from a Workload being deleted.
fn let_go(source: &WorkloadView) -> TransferStep {
    let mut w = Write::new(
        HeldObject::Workload,
        &source.resource_version,
        Outcome::Released { resumed: false },
    );
    w.hold_finalizer = Some(false);
    w.remove_annotations.insert(ANN_HOLD_TRANSFER_TO.to_owned());
    TransferStep::Write {
        workload: source.name.clone(),
        write: w,
    }
}

/// The hold annotations that carry `hold` to another object: set (`Some`) or removed.
fn hold_annotations(hold: &HoldState) -> BTreeMap<&'static str, Option<String>> {
    let mut out = BTreeMap::new();
    match hold {
        HoldState::InForce(r) => {
            out.insert(ANN_HOLD_INSTANCE, Some(r.instance.to_string()));
            out.insert(ANN_HOLD_REASON, r.reason.clone());
            out.insert(ANN_HOLD_PLACED_AT, r.placed_at.clone());
            out.insert(ANN_HOLD_HOLDER, r.holder.clone());
        }
        HoldState::Unreadable { value, holder } => {
            out.insert(ANN_HOLD_INSTANCE, Some(value.clone()));
            out.insert(ANN_HOLD_HOLDER, holder.clone());
        }
        HoldState::Absent => {}
    }
    out
}

// ---- The AdmissionCheck ----------------------------------------------------------------

/// Whether an AdmissionCheck is holdfast's: `spec.controllerName` is
/// [`READMISSION_CONTROLLER`].
pub fn is_our_check(check: &Value) -> bool {
    check
        .pointer("/spec/controllerName")
        .and_then(Value::as_str)
        == Some(READMISSION_CONTROLLER)
}

/// Sets `check`'s `Active` condition true (reason `Active`), keeping its other conditions.
/// PUT the result to the `status` subresource. Returns whether anything changed.
pub fn activate_check(check: &mut Value, now: &str) -> bool {
    let generation = check.pointer("/metadata/generation").cloned();
    let Some(root) = check.as_object_mut() else {
        return false;
    };
    let status = root
        .entry("status")
        .or_insert_with(|| Value::Object(Map::new()));
    if !status.is_object() {
        *status = Value::Object(Map::new());
    }
    let Some(status) = status.as_object_mut() else {
        return false;
    };
    let conditions = status
        .entry("conditions")
        .or_insert_with(|| Value::Array(Vec::new()));
    if !conditions.is_array() {
        *conditions = Value::Array(Vec::new());
    }
    let Some(conditions) = conditions.as_array_mut() else {
        return false;
    };
    let want = |c: &Value| {
        c.get("status").and_then(Value::as_str) == Some("True")
            && c.get("reason").and_then(Value::as_str) == Some("Active")
            && generation
                .as_ref()
                .is_none_or(|g| c.get("observedGeneration") == Some(g))
    };
    let existing = conditions
        .iter()
        .position(|c| c.get("type").and_then(Value::as_str) == Some(ACTIVE_CONDITION));
    if let Some(i) = existing
        && conditions.get(i).is_some_and(want)
    {
        return false;
    }
    let mut condition = serde_json::json!({
        "type": ACTIVE_CONDITION,
        "status": "True",
        "reason": "Active",
        "message": "holdfast's readmission gate is serving this check",
        "lastTransitionTime": now,
    });
    if let Some(g) = generation {
        condition["observedGeneration"] = g;
    }
    match existing.and_then(|i| conditions.get_mut(i)) {
        Some(c) => {
            if c.get("status").and_then(Value::as_str) == Some("True")
                && let Some(t) = c.get("lastTransitionTime").cloned()
            {
                condition["lastTransitionTime"] = t;
            }
            *c = condition;
        }
        None => conditions.push(condition),
    }
    true
}

pub mod gate_policy;
pub mod held_quota;
pub mod multikueue;
pub mod queues;
pub mod worker_snapshot;

#[cfg(test)]
mod tests;
