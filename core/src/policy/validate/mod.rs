//! The validating webhook's verdict.
//!
//! Every refusal names its [`Rule`]. The rules the apiserver can judge itself have a CEL
//! half in [`rules`](super::rules), from which the chart's ValidatingAdmissionPolicies are
//! generated (chart value `validation.engine`): a rule changed here is changed in its row
//! too, and `cargo test -p holdfast-core policy::rules` evaluates the CEL beside this code
//! over the case table in `tests.rs`, comparing the rule that refuses.
//! `tests/tests/it/validation_engines.rs` compares the two engines through the real
//! apiserver on every request of the match-conditions catalogue.

use super::fields;
use super::object::{ANNOTATIONS, BINARY_DATA, DATA, Doc, Field, IMMUTABLE, LABELS, Object, UID};
use super::rules::Rule;
use super::{AdmissionInput, Identities, Operation, Resource, Verdict};
use crate::arming::LABEL_PROBE;
use crate::mode::Mode;
use crate::names::{
    ANN_ADMITTED_RUNTIME_RESOURCE_VERSION, ANN_HOLD_INSTANCE, ANN_HOLD_MARK, ANN_OPENED,
    HOLD_FINALIZER, JOB_UID_LABEL, LABEL_MANAGED, LABEL_RUNTIME_SNAPSHOT, PREBUILT_WORKLOAD_LABEL,
    QUEUE_NAME_LABEL, SNAPSHOT_SUFFIX,
};
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
        Resource::ConfigMap => snapshot(input, who),
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

fn malformed(input: &AdmissionInput, side: &str, doc: Doc<'_>, what: &str) -> Verdict {
    Verdict::deny(
        Rule::Malformed,
        side,
        format!(
            "malformed admission request: {side} is {}; {what}, so the {} by user {} is refused",
            doc.problem(),
            input.operation,
            input.user.username
        ),
    )
}

// ---------------------------------------------------------------------------------------------
// Snapshot ConfigMaps

/// Why a ConfigMap counts as a snapshot.
fn snapshot_evidence(input: &AdmissionInput, new: Doc<'_>, old: Doc<'_>) -> Option<String> {
    if fields::snapshot_name(&input.name) {
        return Some(format!("its name ends in {SNAPSHOT_SUFFIX}"));
    }
    for (side, doc) in [("new", new), ("stored", old)] {
        if let Some(obj) = doc.object() {
            if let Some(name) = fields::object_name(obj).filter(|n| fields::snapshot_name(n)) {
                return Some(format!(
                    "the {side} object's name {name} ends in {SNAPSHOT_SUFFIX}"
                ));
            }
            if fields::snapshot_label(obj) {
                return Some(format!(
                    "the {side} object carries the label {LABEL_RUNTIME_SNAPSHOT}=true"
                ));
            }
        }
    }
    None
}

fn snapshot(input: &AdmissionInput, who: &Identities) -> Verdict {
    let op = input.operation;
    if op == Operation::Connect {
        return Verdict::Allow;
    }
    let user = input.user.username.as_str();
    let new = Doc::of(input.object.as_ref());
    let old = Doc::of(input.old_object.as_ref());
    let what = format!("ConfigMap {}", input.object_ref());

    let Some(evidence) = snapshot_evidence(input, new, old) else {
        let needed: &[(&str, Doc<'_>)] = match op {
            Operation::Create => &[("object", new)],
            Operation::Update => &[("object", new), ("oldObject", old)],
            Operation::Delete | Operation::Connect => &[("oldObject", old)],
        };
        let Some((side, doc)) = needed.iter().find(|(_, d)| d.object().is_none()) else {
            return Verdict::Allow;
        };
        let permitted = match op {
            Operation::Create => who.may_create_snapshot(user),
            Operation::Delete => who.may_delete_snapshot(user),
            Operation::Update | Operation::Connect => false,
        };
        if permitted {
            return Verdict::Allow;
        }
        return malformed(
            input,
            side,
            *doc,
            &format!("cannot tell whether {what} is a runtime snapshot"),
        );
    };

    match op {
        Operation::Create if who.may_create_snapshot(user) => Verdict::Allow,
        Operation::Create => Verdict::deny(
            Rule::SnapshotCreate,
            what.clone(),
            format!(
                "{what} is a runtime snapshot ({evidence}); snapshots are created only by {}; user {user} may not create it",
                who.describe_creators()
            ),
        ),
        Operation::Delete if who.may_delete_snapshot(user) => Verdict::Allow,
        // A snapshot no TrainJob controls any more (its owner was deleted with
        // `--cascade=orphan`) protects nothing; refusing its deletion would hold the
        // TrainJob's name forever. RBAC still decides who may delete it.
        Operation::Delete if old.object().is_some_and(|o| !fields::has_controller(o)) => {
            Verdict::Allow
        }
        Operation::Delete => Verdict::deny(
            Rule::SnapshotDelete,
            what.clone(),
            format!(
                "{what} is a runtime snapshot ({evidence}); it is deleted only by {} (with the TrainJob that owns it); user {user} may not delete it",
                who.describe_deleters()
            ),
        ),
        Operation::Update => snapshot_update(input, who, new, old, &what, &evidence),
        Operation::Connect => Verdict::Allow,
    }
}

/// Snapshot fields the controller never changes.
const SNAPSHOT_CONTENT: [Field; 2] = [DATA, BINARY_DATA];
/// Snapshot fields the deleters never change.
const SNAPSHOT_KEPT_BY_DELETERS: [Field; 5] = [DATA, BINARY_DATA, IMMUTABLE, LABELS, ANNOTATIONS];

fn snapshot_update(
    input: &AdmissionInput,
    who: &Identities,
    new: Doc<'_>,
    old: Doc<'_>,
    what: &str,
    evidence: &str,
) -> Verdict {
    let user = input.user.username.as_str();
    let controller = who.is_controller(user);
    let deleter = who.is_snapshot_deleter(user);
    if !controller && !deleter {
        return Verdict::deny(
            Rule::SnapshotUpdate,
            what,
            format!(
                "{what} is a runtime snapshot ({evidence}); a snapshot is written only by {} and never rewritten; user {user} may not update it",
                who.describe_controller()
            ),
        );
    }
    let (Some(n), Some(o)) = (new.object(), old.object()) else {
        let (side, doc) = if new.object().is_none() {
            ("object", new)
        } else {
            ("oldObject", old)
        };
        return malformed(
            input,
            side,
            doc,
            &format!("cannot check what this update changes in {what}"),
        );
    };
    if controller {
        if let Some(key) = SNAPSHOT_CONTENT
            .into_iter()
            .find(|&f| fields::present(n, f) != fields::present(o, f))
        {
            return Verdict::deny(
                Rule::SnapshotContent,
                key.to_string(),
                format!(
                    "{key} of {what}: a runtime snapshot ({evidence}) is never rewritten, not even by the holdfast controller (user {user}); delete the snapshot instead"
                ),
            );
        }
        return Verdict::Allow;
    }
    let changed = SNAPSHOT_KEPT_BY_DELETERS
        .into_iter()
        .find(|&f| fields::present(n, f) != fields::present(o, f))
        .map(|f| f.to_string());
    match changed {
        None => Verdict::Allow,
        Some(field) => Verdict::deny(
            Rule::SnapshotDeleterUpdate,
            field.clone(),
            format!(
                "{field} of {what}: a runtime snapshot ({evidence}) is written only by {}; user {user}, a snapshot deleter, may only change its ownerReferences and finalizers",
                who.describe_controller()
            ),
        ),
    }
}

// ---------------------------------------------------------------------------------------------
// TrainJobs and Workloads

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

fn annotation_field(key: &str) -> String {
    format!("metadata.annotations[{key}]")
}

fn label_field(key: &str) -> String {
    format!("metadata.labels[{key}]")
}

fn deny_annotation(
    input: &AdmissionInput,
    who: &Identities,
    key: &str,
    old: Option<&Value>,
    new: Option<&Value>,
) -> Verdict {
    let user = &input.user.username;
    let rule = if input.operation == Operation::Create {
        Rule::ControllerAnnotationAdded
    } else {
        Rule::ControllerAnnotationChanged
    };
    let action = match (old, new) {
        (None, _) => "add it".to_owned(),
        (Some(_), None) => "remove it".to_owned(),
        (Some(o), Some(n)) => format!("change it from {o} to {n}"),
    };
    let field = annotation_field(key);
    Verdict::deny(
        rule,
        field.clone(),
        format!(
            "{field} of {} {} is written only by {}; user {user} may not {action}",
            input.resource.kind(),
            input.object_ref(),
            who.describe_controller()
        ),
    )
}

fn deny_hold_finalizer(input: &AdmissionInput, who: &Identities, action: &str) -> Verdict {
    Verdict::deny(
        Rule::HoldFinalizer,
        "metadata.finalizers",
        format!(
            "metadata.finalizers[{HOLD_FINALIZER}] of {} {} keeps its hold while it is deleted and is written only by {}; user {} may not {action} it",
            input.resource.kind(),
            input.object_ref(),
            who.describe_controller(),
            input.user.username
        ),
    )
}

/// Kueue mode: a managed TrainJob must be queued, or Kueue ignores it and it runs at once,
/// past its start gate. `what` says what the request does.
fn deny_unqueued_managed(input: &AdmissionInput, what: &str) -> Verdict {
    Verdict::deny(
        Rule::KueueManagedQueued,
        label_field(QUEUE_NAME_LABEL),
        format!(
            "{} of TrainJob {}: in kueue mode a TrainJob labelled {LABEL_MANAGED}=true starts only through Kueue admission and holdfast's readmission gate, so it must carry the label {QUEUE_NAME_LABEL} naming a LocalQueue whose ClusterQueue requires holdfast's readmission AdmissionCheck; user {} may not {what} (add {QUEUE_NAME_LABEL}: <local-queue>, or drop {LABEL_MANAGED})",
            label_field(QUEUE_NAME_LABEL),
            input.object_ref(),
            input.user.username
        ),
    )
}

/// Whether a non-controller request puts a TrainJob ownerReference on a Workload that the
/// stored Workload does not already carry: only Kueue creates a TrainJob's Workload, and a
/// decoy owned by the TrainJob could capture its holds.
fn new_trainjob_owner(old: Option<Object<'_>>, new: Object<'_>) -> bool {
    let before = old.map(fields::trainjob_owners).unwrap_or_default();
    fields::trainjob_owners(new)
        .into_iter()
        .any(|r| !before.contains(&r))
}

/// Whether a request drops or changes a TrainJob ownerReference the stored Workload carries:
/// a Workload no longer owned by its TrainJob is not its Workload (SPEC), so a hold call
/// would find none while the job runs on it. Kueue and the garbage collector (orphaning
/// deletes) may; nobody else.
fn lost_trainjob_owner(old: Object<'_>, new: Object<'_>) -> bool {
    let after = fields::trainjob_owners(new);
    fields::trainjob_owners(old)
        .into_iter()
        .any(|r| !after.contains(&r))
}

fn deny_lost_trainjob_owner(input: &AdmissionInput, who: &Identities) -> Verdict {
    Verdict::deny(
        Rule::WorkloadOwnerKept,
        "metadata.ownerReferences",
        format!(
            "metadata.ownerReferences of Workload {}: its TrainJob ownerReference makes it the TrainJob's Workload, the one holdfast holds the TrainJob through; only {} (and the garbage collector, for an orphaning delete) may remove or change it; user {} may not",
            input.object_ref(),
            who.describe_kueue(),
            input.user.username
        ),
    )
}

fn deny_trainjob_owner(input: &AdmissionInput, who: &Identities) -> Verdict {
    Verdict::deny(
        Rule::WorkloadOwnerAdded,
        "metadata.ownerReferences",
        format!(
            "metadata.ownerReferences of Workload {}: a Workload owned by a TrainJob is created by {} alone (holdfast holds the TrainJob through it); user {} may not make a Workload a TrainJob's",
            input.object_ref(),
            who.describe_kueue(),
            input.user.username
        ),
    )
}

fn held_kind_create(input: &AdmissionInput, who: &Identities, mode: Mode) -> Verdict {
    let user = input.user.username.as_str();
    if who.is_controller(user) {
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
    let trainjob = input.resource == Resource::TrainJob;
    for (key, value) in fields::controller_annotations(obj) {
        if trainjob && key == ANN_ADMITTED_RUNTIME_RESOURCE_VERSION {
            // Set (or removed) by the mutating side at this very CREATE.
            continue;
        }
        return deny_annotation(input, who, key, None, Some(value));
    }
    if fields::has_hold_finalizer(obj) {
        return deny_hold_finalizer(input, who, "add");
    }
    if !trainjob {
        if mode == Mode::Kueue && !who.is_kueue(user) && new_trainjob_owner(None, obj) {
            return deny_trainjob_owner(input, who);
        }
        return Verdict::Allow;
    }
    match mode {
        Mode::Plain if fields::managed(obj) && !fields::suspended(obj) => Verdict::deny(
            Rule::PlainManagedCreatedSuspended,
            "spec.suspend",
            format!(
                "spec.suspend of TrainJob {}: a TrainJob labelled {LABEL_MANAGED}=true is created at its closed start gate (spec.suspend: true), which only {} opens; user {user} may not create it unsuspended",
                input.object_ref(),
                who.describe_controller()
            ),
        ),
        Mode::Kueue if fields::managed(obj) && !fields::queued(obj) => {
            deny_unqueued_managed(input, "create it without one")
        }
        _ => Verdict::Allow,
    }
}

fn held_kind_update(input: &AdmissionInput, who: &Identities, mode: Mode) -> Verdict {
    let user = input.user.username.as_str();
    let controller = who.is_controller(user);
    let kueue = who.is_kueue(user);
    let trainjob = input.resource == Resource::TrainJob;
    // Kueue mode: Kueue alone changes a TrainJob's spec.suspend, whatever labels the job
    // carries — the controller included, so it is let through early only elsewhere.
    let kueue_owns_suspend = mode == Mode::Kueue && trainjob && !kueue;
    if controller && !kueue_owns_suspend {
        return Verdict::Allow;
    }
    let new = Doc::of(input.object.as_ref());
    let old = Doc::of(input.old_object.as_ref());
    let (Some(n), Some(o)) = (new.object(), old.object()) else {
        let (side, doc) = if new.object().is_none() {
            ("object", new)
        } else {
            ("oldObject", old)
        };
        return malformed(
            input,
            side,
            doc,
            &format!(
                "cannot check what this update changes in {} {}",
                input.resource.kind(),
                input.object_ref()
            ),
        );
    };

    if !controller && let Some(v) = annotations_changed(input, who, o, n) {
        return v;
    }
    if kueue_owns_suspend_of_held(mode, trainjob, o, n) {
        return deny_unsuspend_of_plain_hold(input, who, o);
    }
    if !controller && fields::has_hold_finalizer(o) != fields::has_hold_finalizer(n) {
        // The finalizer keeps a held Workload (and so its hold) while it is deleted: removing
        // it and then deleting the Workload would let an active replacement in.
        let action = if fields::has_hold_finalizer(o) {
            "remove"
        } else {
            "add"
        };
        return deny_hold_finalizer(input, who, action);
    }
    if kueue_owns_suspend && fields::suspended(o) != fields::suspended(n) {
        return Verdict::deny(
            Rule::KueueSuspend,
            "spec.suspend",
            format!(
                "spec.suspend of TrainJob {} is Kueue's in kueue mode, whatever labels the TrainJob carries, and changed only by {}; user {user} may not change it from {} to {} (holds are lifted with Release, start gates opened with Open)",
                input.object_ref(),
                who.describe_kueue(),
                fields::suspended(o),
                fields::suspended(n)
            ),
        );
    }
    if controller {
        return Verdict::Allow;
    }
    if mode == Mode::Kueue && trainjob && unsuspends_marked(o, n) {
        return deny_unsuspend_of_marked(input, o);
    }
    if mode == Mode::Kueue && trainjob && unsuspends_at_closed_gate(o, n) {
        return deny_kueue_unsuspend_at_closed_gate(input, who);
    }
    if trainjob && let Some(v) = start_gate_label(input, who, o, n) {
        return v;
    }
    match (mode, &input.resource) {
        (Mode::Kueue, Resource::Workload) => kueue_workload_update(input, who, o, n),
        (Mode::Kueue, Resource::TrainJob) if !kueue => kueue_trainjob_update(input, who, o, n),
        (Mode::Plain, Resource::TrainJob) => plain_trainjob_update(input, who, o, n),
        // A Workload held in kueue mode keeps its hold after a switch to plain mode.
        (Mode::Plain, Resource::Workload) if fields::held(o) => {
            kueue_workload_update(input, who, o, n)
        }
        _ => Verdict::Allow,
    }
}

fn annotations_changed(
    input: &AdmissionInput,
    who: &Identities,
    o: Object<'_>,
    n: Object<'_>,
) -> Option<Verdict> {
    let old = fields::controller_annotations(o);
    let new = fields::controller_annotations(n);
    old.keys()
        .chain(new.keys())
        .find(|k| old.get(*k) != new.get(*k))
        .map(|k| deny_annotation(input, who, k, old.get(k).copied(), new.get(k).copied()))
}

/// Kueue mode: a TrainJob that carries a hold of its own (`holdfast.dev/hold-instance` on
/// the TrainJob: one placed in plain mode, before a switch to kueue mode) is unsuspended by
/// nobody, Kueue included, until its holder releases it through the hold API. Kueue would
/// otherwise admit it (its Workload carries no hold) and start it past the hold. The hold
/// is on the object itself: no lookup.
fn kueue_owns_suspend_of_held(mode: Mode, trainjob: bool, o: Object<'_>, n: Object<'_>) -> bool {
    mode == Mode::Kueue
        && trainjob
        && fields::held(o)
        && fields::suspended(o)
        && !fields::suspended(n)
}

fn deny_unsuspend_of_plain_hold(
    input: &AdmissionInput,
    who: &Identities,
    o: Object<'_>,
) -> Verdict {
    Verdict::deny(
        Rule::KueuePlainHoldUnsuspend,
        "spec.suspend",
        format!(
            "spec.suspend of TrainJob {}: it carries hold {} ({ANN_HOLD_INSTANCE}), placed in plain mode before holdfast switched to kueue mode; it stays suspended until its holder releases it through the hold API, which only {} carries out; user {} may not unsuspend it, Kueue included",
            input.object_ref(),
            fields::hold_instance(o),
            who.describe_controller(),
            input.user.username
        ),
    )
}

/// Kueue mode: a TrainJob whose stored version carries the hold mark ([`ANN_HOLD_MARK`]: a
/// hold is being placed on its Workload, or is in force there) is unsuspended by nobody,
/// Kueue included (the controller never writes `spec.suspend` here). The mark is read from
/// `oldObject`, the stored version this update would replace: the apiserver stores the
/// update only on that version and judges it again on a conflict, so an unsuspend judged
/// before the mark was written cannot be stored after it (`hold::mark`). No lookup. In plain
/// mode (after a switch) the Workload lookup of [`unsuspend_check`] honours the hold itself,
/// and a mark is inert.
fn unsuspends_marked(o: Object<'_>, n: Object<'_>) -> bool {
    fields::has_annotation(o, ANN_HOLD_MARK) && fields::suspended(o) && !fields::suspended(n)
}

/// Kueue mode: a TrainJob labelled managed (before or by this update) whose stored version
/// has no opened mark is unsuspended by nobody, Kueue included. The readmission gate keeps
/// such a job's check `Pending`, but a check it had turned `Ready` while the job was still
/// unmanaged stays `Ready` once the label is added, and Kueue, admitting on it, unsuspends a
/// job that never passed Open (found by the adversary's long run). No lookup: the stored
/// version decides, as for the mark. Kueue retries the refused unsuspend; it goes through once
/// Open has written the mark.
fn unsuspends_at_closed_gate(o: Object<'_>, n: Object<'_>) -> bool {
    fields::suspended(o)
        && !fields::suspended(n)
        && !fields::opened(o)
        && (fields::managed(o) || fields::managed(n))
}

fn deny_kueue_unsuspend_at_closed_gate(input: &AdmissionInput, who: &Identities) -> Verdict {
    Verdict::deny(
        Rule::KueueGateUnsuspend,
        "spec.suspend",
        format!(
            "spec.suspend of TrainJob {}: it is labelled {LABEL_MANAGED}=true and its start gate is closed (no {ANN_OPENED}); it stays suspended until {} opens it, through Open; user {} may not unsuspend it, Kueue included (Kueue admitted it on a readmission check that was Ready before the label was added: it unsuspends the job once Open has written the mark)",
            input.object_ref(),
            who.describe_controller(),
            input.user.username
        ),
    )
}

fn deny_unsuspend_of_marked(input: &AdmissionInput, o: Object<'_>) -> Verdict {
    let mark = match fields::annotations(o).and_then(|a| a.get(ANN_HOLD_MARK)) {
        Some(Value::String(v)) => crate::hold::mark::Mark::parse(v)
            .map_or_else(|| format!("{v:?}"), |m| m.instance.to_string()),
        other => format!("{other:?}"),
    };
    Verdict::deny(
        Rule::KueueMarkedUnsuspend,
        "spec.suspend",
        format!(
            "spec.suspend of TrainJob {}: it is marked for hold {mark} ({ANN_HOLD_MARK}), placed on its Workload; it stays suspended until its holder releases the hold through the hold API; user {} may not unsuspend it now, Kueue included (Kueue acting on a view from before the hold: it evicts the Workload, and admits it again after the release)",
            input.object_ref(),
            input.user.username
        ),
    )
}

/// Both modes: while a managed TrainJob's start gate is closed (no `opened` mark), nobody but
/// the controller drops its `managed` label — that would open the gate without Open.
fn start_gate_label(
    input: &AdmissionInput,
    who: &Identities,
    o: Object<'_>,
    n: Object<'_>,
) -> Option<Verdict> {
    if !(fields::managed(o) && !fields::opened(o) && !fields::managed(n)) {
        return None;
    }
    let field = label_field(LABEL_MANAGED);
    Some(Verdict::deny(
        Rule::StartGateLabel,
        field.clone(),
        format!(
            "{field} of TrainJob {}: its start gate is closed (no {ANN_OPENED}) and only {} opens it, through Open; user {} may not remove the label before the gate is opened (delete the TrainJob instead)",
            input.object_ref(),
            who.describe_controller(),
            input.user.username
        ),
    ))
}

/// Kueue mode, a Workload: a held one stays inactive and in its queue, and only Kueue makes a
/// Workload a TrainJob's.
fn kueue_workload_update(
    input: &AdmissionInput,
    who: &Identities,
    o: Object<'_>,
    n: Object<'_>,
) -> Verdict {
    let user = input.user.username.as_str();
    if !who.is_kueue(user) && new_trainjob_owner(Some(o), n) {
        return deny_trainjob_owner(input, who);
    }
    if !who.is_kueue(user) && !who.is_snapshot_deleter(user) && lost_trainjob_owner(o, n) {
        return deny_lost_trainjob_owner(input, who);
    }
    if !who.is_kueue(user)
        && !fields::trainjob_owners(o).is_empty()
        && fields::label(o, JOB_UID_LABEL) != fields::label(n, JOB_UID_LABEL)
    {
        return Verdict::deny(
            Rule::WorkloadJobUid,
            format!("metadata.labels[{JOB_UID_LABEL}]"),
            format!(
                "metadata.labels[{JOB_UID_LABEL}] of Workload {}: on a TrainJob's Workload it is how holdfast and Kueue find the Workload, and only {} sets it; user {} may not change or remove it",
                input.object_ref(),
                who.describe_kueue(),
                input.user.username
            ),
        );
    }
    if !fields::held(o) {
        return Verdict::Allow;
    }
    if fields::active(o) != fields::active(n) {
        return Verdict::deny(
            Rule::WorkloadHeldActive,
            "spec.active",
            format!(
                "spec.active of Workload {} carries hold {} ({ANN_HOLD_INSTANCE}); only {} flips it, by releasing the hold; user {user} may not change it from {} to {}",
                input.object_ref(),
                fields::hold_instance(o),
                who.describe_controller(),
                fields::active(o),
                fields::active(n)
            ),
        );
    }
    if fields::workload_queue(o) != fields::workload_queue(n) {
        return Verdict::deny(
            Rule::WorkloadHeldQueue,
            "spec.queueName",
            format!(
                "spec.queueName of Workload {} carries hold {} ({ANN_HOLD_INSTANCE}): a held Workload stays in its queue, whose ClusterQueue requires holdfast's readmission gate, until {} releases it; user {user} may not move it",
                input.object_ref(),
                fields::hold_instance(o),
                who.describe_controller()
            ),
        );
    }
    Verdict::Allow
}

/// Kueue mode, a TrainJob, by anyone but Kueue and the controller: its queue stays while it
/// is suspended or at its closed start gate (Kueue lets a suspended job change queues and
/// then ignores a job without one, which would let it run past its hold or gate), and a
/// managed TrainJob must be queued.
fn kueue_trainjob_update(
    input: &AdmissionInput,
    who: &Identities,
    o: Object<'_>,
    n: Object<'_>,
) -> Verdict {
    let user = input.user.username.as_str();
    let gate_closed = fields::managed(o) && !fields::opened(o);
    let stopped = fields::suspended(o);
    if let Some(queue) = fields::queue_name(o)
        && fields::queue_name(n) != Some(queue)
        && (stopped || gate_closed)
    {
        let field = label_field(QUEUE_NAME_LABEL);
        let why = if stopped {
            "it is suspended (held, preempted or waiting for admission)"
        } else {
            "its start gate is closed"
        };
        let to = match fields::queue_name(n) {
            Some(q) => format!("change it from {queue:?} to {q:?}"),
            None => format!("remove it (it is {queue:?})"),
        };
        return Verdict::deny(
            Rule::KueueQueueStays,
            field.clone(),
            format!(
                "{field} of TrainJob {}: {why}, and Kueue ignores a job without a queue name, which would let it run without Kueue admission and holdfast's readmission gate; only {} may change it now; user {user} may not {to}",
                input.object_ref(),
                who.describe_kueue()
            ),
        );
    }
    if fields::prebuilt_workload(o) != fields::prebuilt_workload(n) && (stopped || gate_closed) {
        let field = label_field(PREBUILT_WORKLOAD_LABEL);
        return Verdict::deny(
            Rule::KueuePrebuiltStays,
            field.clone(),
            format!(
                "{field} (label or annotation) of TrainJob {}: it names the Workload Kueue adopts for the job, and the TrainJob is suspended or at its closed start gate, so a new one would replace the Workload holdfast holds; user {user} may not change it now",
                input.object_ref()
            ),
        );
    }
    let unqueued_managed = |v: Object<'_>| fields::managed(v) && !fields::queued(v);
    if unqueued_managed(n) && !unqueued_managed(o) {
        return deny_unqueued_managed(input, "leave it unqueued");
    }
    Verdict::Allow
}

fn plain_trainjob_update(
    input: &AdmissionInput,
    who: &Identities,
    o: Object<'_>,
    n: Object<'_>,
) -> Verdict {
    let user = input.user.username.as_str();
    let unsuspends = fields::suspended(o) && !fields::suspended(n);
    if unsuspends && fields::held(o) {
        return Verdict::deny(
            Rule::PlainHeldUnsuspend,
            "spec.suspend",
            format!(
                "spec.suspend of TrainJob {}: it is held (hold {}, {ANN_HOLD_INSTANCE}); only {} unsuspends it, by releasing the hold; user {user} may not",
                input.object_ref(),
                fields::hold_instance(o),
                who.describe_controller()
            ),
        );
    }
    let at_gate = !fields::opened(o);
    if unsuspends && at_gate && (fields::managed(o) || fields::managed(n)) {
        return Verdict::deny(
            Rule::PlainGateUnsuspend,
            "spec.suspend",
            format!(
                "spec.suspend of TrainJob {}: it is labelled {LABEL_MANAGED}=true and its start gate is closed (no {ANN_OPENED}); only {} opens it, through Open; user {user} may not unsuspend it",
                input.object_ref(),
                who.describe_controller()
            ),
        );
    }
    Verdict::Allow
}

#[cfg(test)]
mod mark_tests;
#[cfg(test)]
mod start_gate_tests;
#[cfg(test)]
pub(crate) mod tests;
