//! The validating webhook's verdict: which rules a request meets, in which order, and the
//! rules that need what the request alone cannot give (the queue and Workload lookups).
//!
//! Every refusal names its [`Rule`]. Each rule is written once, in
//! [`rules`](super::rules): its Rust half, called from here, beside the CEL row the chart's
//! ValidatingAdmissionPolicies are generated from (chart value `validation.engine`).
//! `cargo test -p holdfast-core policy::rules` evaluates the CEL beside the Rust over the case
//! table in `tests.rs`, comparing the rule that refuses;
//! `tests/tests/it/validation_engines.rs` compares the two engines through the real apiserver
//! on every request of the match-conditions catalogue.

use super::fields;
use super::object::{Doc, UID};
use super::rules::{Rule, held, malformed, malformed_update, snapshots, trainjobs, workloads};
use super::{AdmissionInput, Identities, Operation, Resource, Verdict};
use crate::arming::LABEL_PROBE;
use crate::mode::Mode;
use crate::names::{LABEL_MANAGED, QUEUE_NAME_LABEL};
use serde_json::Value;

/// Decides whether the apiserver may go on with `input`.
///
/// `input.object` must be the object as the validating webhook sees it: after every mutating
/// webhook, ours included. Never panics, whatever the objects hold.
///
/// Decisions where SPEC is silent:
///
/// - A ConfigMap is a snapshot if the request's name, the old or the new object's name ends in
///   `-runtime-snapshot`, or the old or the new object carries the label
///   `holdfast.dev/runtime-snapshot: "true"`: neither dropping the label nor a differently
///   named labelled copy escapes.
/// - "A snapshot is never rewritten": the controller's UPDATE of a snapshot may change its
///   metadata (labels, annotations, ownerReferences, e.g. to adopt one Trainer wrote) and
///   `immutable`, never `data` or `binaryData`. A broken snapshot is deleted, not edited.
/// - A snapshot whose stored object has no controller ownerReference (orphaned: its TrainJob
///   was deleted with `--cascade=orphan`) may be deleted by anyone RBAC lets: it protects no
///   TrainJob's runtime any more, and the controller removes such snapshots itself.
/// - The snapshot deleters (garbage collector, namespace controller) may also UPDATE a snapshot
///   when data, binaryData, immutable, labels and annotations stay as they are: the garbage
///   collector removes ownerReferences (orphaning) and its `foregroundDeletion`/`orphan`
///   finalizers with updates, and refusing those would wedge the deletion of the TrainJob.
/// - Controller annotations on a CREATE by anyone but the controller are refused ("adds"),
///   except `admitted-runtime-resource-version` on a TrainJob: the mutating side has already
///   replaced it with the real value or removed it, so it cannot be forged (as long as the
///   mutating webhook runs with `failurePolicy: Fail`).
/// - An annotation dropped by a non-controller UPDATE is restored by [`mutate`](super::mutate)
///   before this runs, so a denial for "remove" means the mutating side did not run or a later
///   mutating webhook removed it again.
/// - kueue mode: every change of a TrainJob's `spec.suspend` (absent = false) by anyone not in
///   the Kueue list is refused, the controller's included (SPEC: holdfast never writes it in
///   kueue mode), whatever labels the old and new objects carry: Kueue lets anyone drop the
///   queue name of a suspended job and then ignores the job, so a rule keyed on the label
///   could be walked around in two requests. The queue name itself may not be removed or
///   changed (by anyone but Kueue and the controller) while the TrainJob is suspended or at
///   its closed start gate, and a managed TrainJob must carry one (refused at CREATE, and on
///   an UPDATE that would make a queued or unmanaged TrainJob managed and unqueued). On a
///   Workload that carries a hold, `spec.active` (absent = true) is flipped only by the
///   controller, Kueue included, and `spec.queueName` is changed by nobody but the
///   controller. Only Kueue (and the controller) makes a Workload a TrainJob's: a CREATE or
///   UPDATE adding an ownerReference to a TrainJob is refused for everyone else, so no decoy
///   Workload can pose as the held one.
/// - Both modes, the start gate: a TrainJob labelled `holdfast.dev/managed: "true"` without
///   the `opened` annotation keeps the label until Open (only the controller drops it then).
/// - The hold finalizer is added or removed only by the controller, on CREATE as on UPDATE.
/// - plain mode, our extension of the start gate: a managed TrainJob that has no `opened`
///   annotation may be unsuspended only by the controller (only Open opens the gate); and it
///   may not be created unsuspended (the mutating side suspends it, so this only refuses
///   when that side did not run).
/// - DELETE of TrainJobs and Workloads and CONNECT are allowed. Every subresource write is
///   allowed: the only subresource TrainJobs and Workloads serve is `status`, and for a custom
///   resource's `status` the apiserver copies everything but `.status` from the stored object
///   before admission, so such a write cannot change metadata or spec.
/// - Malformed requests (an object the rule needs is missing or not a JSON object): when the
///   identity's permission alone decides (the controller's CREATE of a TrainJob, the snapshot
///   creators' CREATE, the deleters' DELETE) the request is allowed; otherwise a protected
///   kind is refused with a "malformed" message rather than guessed at. Fields of the wrong
///   type read as absent (`spec.suspend: "yes"` is not suspended).
pub fn validate(input: &AdmissionInput, who: &Identities, mode: Mode) -> Verdict {
    match input.resource {
        Resource::ConfigMap if is_arming_probe(input, who) => Verdict::deny(
            Rule::ArmingProbe,
            input.object_ref(),
            format!(
                "holdfast's webhook answers: ConfigMap {} is the controller's arming probe, a dry run (nothing is written)",
                input.object_ref()
            ),
        ),
        Resource::ConfigMap => snapshots::judge(input, who),
        Resource::TrainJob | Resource::Workload => held_kind(input, who, mode),
        Resource::JobSet | Resource::Other { .. } => Verdict::Allow,
    }
}

/// The controller's arming probe (`crate::arming`): a dry-run CREATE of a ConfigMap labelled
/// [`LABEL_PROBE`], which only the chart's probe entry sends. Denied, so that the controller
/// sees the webhook answered; being a dry run, its denial refuses nothing. Only the
/// controller's: anyone else's labelled ConfigMap meets the snapshot rules like any other.
fn is_arming_probe(input: &AdmissionInput, who: &Identities) -> bool {
    input.operation == Operation::Create
        && input.dry_run
        && who.is_controller(&input.user.username)
        && Doc::of(input.object.as_ref())
            .object()
            .is_some_and(|o| fields::label(o, LABEL_PROBE).is_some())
}

/// A LocalQueue whose ClusterQueue must require holdfast's readmission check for a request
/// to be allowed (kueue mode only): see [`queue_check`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct QueueCheck {
    pub namespace: String,
    pub local_queue: String,
    /// The TrainJob is managed: it waits at its start gate, so a queue that cannot be
    /// resolved yet is refused too (nothing could keep it at the gate).
    pub managed: bool,
}

/// Kueue mode: whether `input` puts a TrainJob into a queue (a CREATE of a queued TrainJob;
/// an UPDATE that moves one, or makes a queued one managed), and which. The webhook then
/// looks the queue up — the one decision that needs the cluster — and answers with
/// [`queue_verdict`]: in a ClusterQueue without holdfast's readmission AdmissionCheck nothing
/// keeps two executions apart (Kueue readmits a requeued job beside the last execution's
/// terminating pods) and nothing keeps a managed job at its start gate, so both are refused
/// there. The controller's own writes are not checked.
pub fn queue_check(input: &AdmissionInput, who: &Identities, mode: Mode) -> Option<QueueCheck> {
    if mode != Mode::Kueue
        || input.resource != Resource::TrainJob
        || input.subresource.is_some()
        || who.is_controller(&input.user.username)
    {
        return None;
    }
    let n = Doc::of(input.object.as_ref()).object()?;
    let queue = fields::queue_name(n)?;
    let managed = fields::managed(n);
    let needed = match input.operation {
        Operation::Create => true,
        Operation::Update => {
            let o = Doc::of(input.old_object.as_ref()).object()?;
            (managed && !fields::managed(o)) || fields::queue_name(o) != Some(queue)
        }
        Operation::Delete | Operation::Connect => false,
    };
    needed.then(|| QueueCheck {
        namespace: input.namespace.clone().unwrap_or_default(),
        local_queue: queue.to_owned(),
        managed,
    })
}

/// Why a queue is not gated, as the webhook found it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum QueueProblem<'a> {
    /// Its ClusterQueue is known and does not require holdfast's check.
    Ungated(&'a str),
    /// The LocalQueue or its ClusterQueue is not known (yet).
    Unresolved(&'a str),
}

/// The verdict on a request [`queue_check`] named, given why its queue is not gated (`None`:
/// it is). An unresolved queue refuses only a managed TrainJob: an unmanaged one waits in
/// Kueue until the queue exists, and the readmission gate reports it if that queue turns out
/// to be ungated.
pub fn queue_verdict(
    input: &AdmissionInput,
    check: &QueueCheck,
    problem: Option<QueueProblem<'_>>,
) -> Verdict {
    let why = match problem {
        None => return Verdict::Allow,
        Some(QueueProblem::Unresolved(_)) if !check.managed => return Verdict::Allow,
        Some(QueueProblem::Ungated(why) | QueueProblem::Unresolved(why)) => why,
    };
    let what = if check.managed {
        format!(
            "a TrainJob labelled {LABEL_MANAGED}=true waits at its start gate in holdfast's readmission AdmissionCheck"
        )
    } else {
        "in kueue mode holdfast's readmission AdmissionCheck keeps a TrainJob's executions from overlapping".to_owned()
    };
    Verdict::deny(
        Rule::QueueGated,
        format!("metadata.labels[{QUEUE_NAME_LABEL}]"),
        format!(
            "metadata.labels[{QUEUE_NAME_LABEL}] of TrainJob {}: {what}, but LocalQueue {}/{} does not lead there: {why}; user {} may not queue this TrainJob there (use a LocalQueue whose ClusterQueue requires the check)",
            input.object_ref(),
            check.namespace,
            check.local_queue,
            input.user.username
        ),
    )
}

/// A TrainJob being unsuspended, whose Workloads the webhook must read: see
/// [`unsuspend_check`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct UnsuspendCheck {
    pub namespace: String,
    pub name: String,
    pub uid: String,
}

/// Whether `input` unsuspends a TrainJob whose Workloads the webhook must read first, and
/// refuse with [`unsuspend_verdict`] while any of them carries a hold.
///
/// - kueue mode (only Kueue may unsuspend, by the rule above): Kueue acts on its cache, and a
///   Workload deactivated by a hold a moment ago can still look admitted to it; it would
///   start the held job until its own eviction catches up. Kueue retries, and by then sees
///   the hold's eviction.
/// - plain mode, after a switch from kueue mode: a hold placed in kueue mode lives on the
///   Workload (`spec.active: false`, its annotations and finalizer), and the TrainJob's own
///   fields do not show it. It is honoured until its holder releases it through the hold
///   API, so an unsuspend of the TrainJob by anyone but the controller is refused while it
///   is in force. Checked where the chart sends it: a TrainJob carrying holdfast state
///   (every job that ran under holdfast does: the admitted runtime version, A, the opened
///   mark), the controller's own writes excepted.
pub fn unsuspend_check(
    input: &AdmissionInput,
    who: &Identities,
    mode: Mode,
) -> Option<UnsuspendCheck> {
    if input.resource != Resource::TrainJob
        || input.subresource.is_some()
        || input.operation != Operation::Update
    {
        return None;
    }
    let n = Doc::of(input.object.as_ref()).object()?;
    let o = Doc::of(input.old_object.as_ref()).object()?;
    if !fields::suspended(o) || fields::suspended(n) {
        return None;
    }
    if mode == Mode::Plain
        && (who.is_controller(&input.user.username) || !fields::carries_holdfast_state(o))
    {
        return None;
    }
    // An empty uid (a malformed stored object) is checked too: the webhook refuses it.
    let uid = fields::present(o, UID)
        .and_then(Value::as_str)
        .unwrap_or_default();
    Some(UnsuspendCheck {
        namespace: input.namespace.clone().unwrap_or_default(),
        name: input.name.clone(),
        uid: uid.to_owned(),
    })
}

/// The verdict on an unsuspend [`unsuspend_check`] named: `found` is the hold in force on one
/// of the TrainJob's Workloads (`Ok(None)`: none), or why they could not be read (refused
/// too: the caller retries).
pub fn unsuspend_verdict(input: &AdmissionInput, found: Result<Option<String>, String>) -> Verdict {
    let field = "spec.suspend".to_owned();
    match found {
        Ok(None) => Verdict::Allow,
        Ok(Some(hold)) => Verdict::deny(
            Rule::WorkloadHoldUnsuspend,
            field,
            format!(
                "spec.suspend of TrainJob {}: its Workload carries hold {hold}; the TrainJob stays suspended until its holder releases it through the hold API, in either mode (a hold placed in kueue mode is honoured after a switch to plain mode); user {} may not unsuspend it now (Kueue acting on a stale view: retry after the Workload is evicted)",
                input.object_ref(),
                input.user.username
            ),
        ),
        Err(why) => Verdict::deny(
            Rule::WorkloadLookupFailed,
            field,
            format!(
                "spec.suspend of TrainJob {}: the webhook could not read its Workloads to see whether a hold is in force ({why}); refused, retry",
                input.object_ref()
            ),
        ),
    }
}

// ---------------------------------------------------------------------------------------------
// TrainJobs and Workloads: the order their rules are checked in (the rules themselves, and
// their CEL rows, are in `rules`)

fn held_kind(input: &AdmissionInput, who: &Identities, mode: Mode) -> Verdict {
    if input.subresource.is_some() {
        return Verdict::Allow;
    }
    match input.operation {
        Operation::Delete | Operation::Connect => Verdict::Allow,
        Operation::Create => held_kind_create(input, who, mode),
        Operation::Update => held_kind_update(input, who, mode),
    }
}

fn held_kind_create(input: &AdmissionInput, who: &Identities, mode: Mode) -> Verdict {
    if who.is_controller(&input.user.username) {
        return Verdict::Allow;
    }
    let new = Doc::of(input.object.as_ref());
    let Some(obj) = new.object() else {
        return malformed(
            input,
            "object",
            new,
            &format!(
                "cannot check the controller annotations of {} {}",
                input.resource.kind(),
                input.object_ref()
            ),
        );
    };
    held::annotation_added(input, who, obj)
        .or_else(|| held::hold_finalizer_added(input, who, obj))
        .or_else(|| match (mode, &input.resource) {
            (_, Resource::TrainJob) => trainjobs::create(input, who, mode, obj),
            (Mode::Kueue, _) => workloads::owner_added(input, who, None, obj),
            (Mode::Plain, _) => None,
        })
        .unwrap_or(Verdict::Allow)
}

fn held_kind_update(input: &AdmissionInput, who: &Identities, mode: Mode) -> Verdict {
    let user = input.user.username.as_str();
    let trainjob = input.resource == Resource::TrainJob;
    // Kueue mode: Kueue alone changes a TrainJob's spec.suspend, whatever labels the job
    // carries, the controller included: the controller's writes meet the rules there too
    // (each rule says whom it exempts). Elsewhere the controller is exempt from them all.
    let kueue_owns_suspend = mode == Mode::Kueue && trainjob && !who.is_kueue(user);
    if who.is_controller(user) && !kueue_owns_suspend {
        return Verdict::Allow;
    }
    let new = Doc::of(input.object.as_ref());
    let old = Doc::of(input.old_object.as_ref());
    let (Some(n), Some(o)) = (new.object(), old.object()) else {
        return malformed_update(
            input,
            new,
            old,
            &format!("{} {}", input.resource.kind(), input.object_ref()),
        );
    };
    held::annotation_changed(input, who, o, n)
        .or_else(|| {
            (mode == Mode::Kueue && trainjob)
                .then(|| trainjobs::kueue_plain_hold_unsuspend(input, who, o, n))
                .flatten()
        })
        .or_else(|| held::hold_finalizer_changed(input, who, o, n))
        .or_else(|| match (mode, &input.resource) {
            (Mode::Kueue, Resource::TrainJob) => trainjobs::kueue_update(input, who, o, n),
            (Mode::Plain, Resource::TrainJob) => trainjobs::plain_update(input, who, o, n),
            (Mode::Kueue, _) => workloads::update(input, who, o, n),
            // A Workload held in kueue mode keeps its hold after a switch to plain mode.
            (Mode::Plain, _) if fields::held(o) => workloads::update(input, who, o, n),
            (Mode::Plain, _) => None,
        })
        .unwrap_or(Verdict::Allow)
}

#[cfg(test)]
mod mark_tests;
#[cfg(test)]
mod start_gate_tests;
#[cfg(test)]
pub(crate) mod tests;
