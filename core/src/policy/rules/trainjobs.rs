//! The TrainJob rules: who may unsuspend a TrainJob and move its queue, in each mode, and its
//! start gate's label. Each rule's Rust half (what the webhook decides, who is exempt
//! included) is followed by its CEL row (the `…-trainjobs` policy). The Rust halves of a mode
//! are called in the order of the rows by [`kueue_update`], [`plain_update`] and [`create`],
//! which [`validate`](crate::policy::validate) calls for the request's mode: moving a rule to
//! another mode changes its row's `modes` and the list that calls it, both here.

use super::cel::{
    USER, closed_gate_unsuspend, has_annotation, key_changes, managed, old_annotation, queue,
    suspended,
};
use super::refusal::label_field;
use super::rule::{Modes, Policy, Rule, Validation, Variable, row};
use crate::mode::Mode;
use crate::names::{
    ANN_HOLD_INSTANCE, ANN_HOLD_MARK, ANN_OPENED, LABEL_MANAGED, PREBUILT_WORKLOAD_LABEL,
    QUEUE_NAME_LABEL,
};
use crate::policy::fields;
use crate::policy::object::Object;
use crate::policy::{AdmissionInput, Identities, Operation, Verdict};
use serde_json::Value;

/// The policy's variable after the common ones: the stored TrainJob is at its closed start
/// gate (managed, not opened).
pub(super) fn variables() -> Vec<Variable> {
    vec![Variable {
        name: "gateClosed",
        note: "",
        expression: format!(
            "oldObject != null\n&& {}\n&& !{}",
            managed("oldObject"),
            has_annotation("oldObject", "holdfast.dev/opened")
        ),
    }]
}

/// The policy's rows after the held kinds' shared ones, in the order the webhook checks them.
pub(super) fn rows() -> Vec<Validation> {
    vec![
        kueue_suspend_row(),
        kueue_marked_unsuspend_row(),
        kueue_gate_unsuspend_row(),
        start_gate_label_row(),
        kueue_queue_stays_row(),
        kueue_prebuilt_stays_row(),
        kueue_managed_queued_row(),
        plain_managed_created_suspended_row(),
        plain_held_unsuspend_row(),
        plain_gate_unsuspend_row(),
    ]
}

/// Kueue mode, a TrainJob's UPDATE, after the held kinds' shared rules: its rules in the
/// order of the rows.
pub(crate) fn kueue_update(
    input: &AdmissionInput,
    who: &Identities,
    o: Object<'_>,
    n: Object<'_>,
) -> Option<Verdict> {
    kueue_suspend(input, who, o, n)
        .or_else(|| kueue_marked_unsuspend(input, who, o, n))
        .or_else(|| kueue_gate_unsuspend(input, who, o, n))
        .or_else(|| start_gate_label(input, who, o, n))
        .or_else(|| kueue_queue_stays(input, who, o, n))
        .or_else(|| kueue_prebuilt_stays(input, who, o, n))
        .or_else(|| kueue_managed_queued(input, who, Some(o), n))
}

/// Plain mode, a TrainJob's UPDATE, after the held kinds' shared rules: its rules in the
/// order of the rows.
pub(crate) fn plain_update(
    input: &AdmissionInput,
    who: &Identities,
    o: Object<'_>,
    n: Object<'_>,
) -> Option<Verdict> {
    start_gate_label(input, who, o, n)
        .or_else(|| plain_held_unsuspend(input, who, o, n))
        .or_else(|| plain_gate_unsuspend(input, who, o, n))
}

/// A TrainJob's CREATE, after the held kinds' shared rules.
pub(crate) fn create(
    input: &AdmissionInput,
    who: &Identities,
    mode: Mode,
    obj: Object<'_>,
) -> Option<Verdict> {
    match mode {
        Mode::Kueue => kueue_managed_queued(input, who, None, obj),
        Mode::Plain => plain_managed_created_suspended(input, who, obj),
    }
}

/// Whether an UPDATE unsuspends the TrainJob.
fn unsuspends(o: Object<'_>, n: Object<'_>) -> bool {
    fields::suspended(o) && !fields::suspended(n)
}

/// Whether an UPDATE unsuspends a TrainJob labelled managed (before or by this update) whose
/// stored version has no opened mark: at its closed start gate.
fn unsuspends_at_closed_gate(o: Object<'_>, n: Object<'_>) -> bool {
    unsuspends(o, n) && !fields::opened(o) && (fields::managed(o) || fields::managed(n))
}

// ---------------------------------------------------------------------------------------------
// kueue mode

/// Kueue mode, an UPDATE by anyone, Kueue and the controller included: a TrainJob that
/// carries a hold of its own (`holdfast.dev/hold-instance` on the TrainJob: one placed in
/// plain mode, before a switch to kueue mode) is unsuspended by nobody until its holder
/// releases it through the hold API. Kueue would otherwise admit it (its Workload carries no
/// hold) and start it past the hold. The hold is on the object itself: no lookup. Checked
/// among the held kinds' shared rules, before the hold finalizer.
pub(crate) fn kueue_plain_hold_unsuspend(
    input: &AdmissionInput,
    who: &Identities,
    o: Object<'_>,
    n: Object<'_>,
) -> Option<Verdict> {
    if !(fields::held(o) && unsuspends(o, n)) {
        return None;
    }
    Some(Verdict::deny(
        Rule::KueuePlainHoldUnsuspend,
        "spec.suspend",
        format!(
            "spec.suspend of TrainJob {}: it carries hold {} ({ANN_HOLD_INSTANCE}), placed in plain mode before holdfast switched to kueue mode; it stays suspended until its holder releases it through the hold API, which only {} carries out; user {} may not unsuspend it, Kueue included",
            input.object_ref(),
            fields::hold_instance(o),
            who.describe_controller(),
            input.user.username
        ),
    ))
}

pub(super) fn kueue_plain_hold_unsuspend_row() -> Validation {
    let policy = Policy::TrainJobs;
    let (so, sn) = (suspended("oldObject"), suspended("object"));
    row(
        Rule::KueuePlainHoldUnsuspend,
        policy,
        Modes::Kueue,
        "kueue mode: a hold placed in plain mode, on the TrainJob itself, is lifted only by Release.",
        format!(
            "request.operation != 'UPDATE'\n|| !({so} && !{sn} && {})",
            has_annotation("oldObject", "holdfast.dev/hold-instance")
        ),
        &format!(
            "'spec.suspend of ' + variables.what + ': it carries hold ' + {} + ' (holdfast.dev/hold-instance), placed in plain mode before holdfast switched to kueue mode; it stays suspended until its holder releases it through the hold API, which only {{{{ $ctlDesc }}}} carries out; user ' + {USER} + ' may not unsuspend it, Kueue included'",
            old_annotation("holdfast.dev/hold-instance")
        ),
    )
}

/// Kueue mode, an UPDATE by anyone but Kueue, the controller included: `spec.suspend` of a
/// TrainJob is Kueue's.
fn kueue_suspend(
    input: &AdmissionInput,
    who: &Identities,
    o: Object<'_>,
    n: Object<'_>,
) -> Option<Verdict> {
    if who.is_kueue(&input.user.username) || fields::suspended(o) == fields::suspended(n) {
        return None;
    }
    Some(Verdict::deny(
        Rule::KueueSuspend,
        "spec.suspend",
        format!(
            "spec.suspend of TrainJob {} is Kueue's in kueue mode, whatever labels the TrainJob carries, and changed only by {}; user {} may not change it from {} to {} (holds are lifted with Release, start gates opened with Open)",
            input.object_ref(),
            who.describe_kueue(),
            input.user.username,
            fields::suspended(o),
            fields::suspended(n)
        ),
    ))
}

fn kueue_suspend_row() -> Validation {
    let t = Policy::TrainJobs;
    let (so, sn) = (suspended("oldObject"), suspended("object"));
    row(
        Rule::KueueSuspend,
        t,
        Modes::Kueue,
        "kueue mode: spec.suspend of a TrainJob is Kueue's, the controller's included.",
        format!("request.operation != 'UPDATE'\n|| variables.kueue\n|| {so} == {sn}"),
        &format!(
            "'spec.suspend of ' + variables.what + ' is Kueue\\'s in kueue mode, whatever labels the TrainJob carries, and changed only by {{{{ $kueueDesc }}}}; user ' + {USER} + ' may not change it from ' + string({so}) + ' to ' + string({sn}) + ' (holds are lifted with Release, start gates opened with Open)'"
        ),
    )
}

/// Kueue mode, an UPDATE by anyone but the controller, Kueue included: a TrainJob whose
/// stored version carries the hold mark ([`ANN_HOLD_MARK`]: a hold is being placed on its
/// Workload, or is in force there) is unsuspended by nobody (the controller never writes
/// `spec.suspend` here). The mark is read from `oldObject`, the stored version this update
/// would replace: the apiserver stores the update only on that version and judges it again on
/// a conflict, so an unsuspend judged before the mark was written cannot be stored after it
/// (`hold::mark`). No lookup. In plain mode (after a switch) the Workload lookup of
/// [`unsuspend_check`](crate::policy::unsuspend_check) honours the hold itself, and a mark is
/// inert.
fn kueue_marked_unsuspend(
    input: &AdmissionInput,
    who: &Identities,
    o: Object<'_>,
    n: Object<'_>,
) -> Option<Verdict> {
    if who.is_controller(&input.user.username)
        || !(fields::has_annotation(o, ANN_HOLD_MARK) && unsuspends(o, n))
    {
        return None;
    }
    let mark = match fields::annotations(o).and_then(|a| a.get(ANN_HOLD_MARK)) {
        Some(Value::String(v)) => crate::hold::mark::Mark::parse(v)
            .map_or_else(|| format!("{v:?}"), |m| m.instance.to_string()),
        other => format!("{other:?}"),
    };
    Some(Verdict::deny(
        Rule::KueueMarkedUnsuspend,
        "spec.suspend",
        format!(
            "spec.suspend of TrainJob {}: it is marked for hold {mark} ({ANN_HOLD_MARK}), placed on its Workload; it stays suspended until its holder releases the hold through the hold API; user {} may not unsuspend it now, Kueue included (Kueue acting on a view from before the hold: it evicts the Workload, and admits it again after the release)",
            input.object_ref(),
            input.user.username
        ),
    ))
}

fn kueue_marked_unsuspend_row() -> Validation {
    let t = Policy::TrainJobs;
    let (so, sn) = (suspended("oldObject"), suspended("object"));
    row(
        Rule::KueueMarkedUnsuspend,
        t,
        Modes::Kueue,
        "A TrainJob whose stored version carries the hold mark (a hold on its Workload) is unsuspended by nobody, Kueue included.",
        format!(
            "request.operation != 'UPDATE'\n|| !({so} && !{sn} && {})",
            has_annotation("oldObject", "holdfast.dev/hold-mark")
        ),
        &format!(
            "'spec.suspend of ' + variables.what + ': it is marked for hold ' + {} + ' (holdfast.dev/hold-mark), placed on its Workload; it stays suspended until its holder releases the hold through the hold API; user ' + {USER} + ' may not unsuspend it now, Kueue included (Kueue acting on a view from before the hold: it evicts the Workload, and admits it again after the release)'",
            old_annotation("holdfast.dev/hold-mark")
        ),
    )
}

/// Kueue mode, an UPDATE by anyone but the controller, Kueue included: a TrainJob at its
/// closed start gate is unsuspended by nobody. The readmission gate keeps such a job's check
/// `Pending`, but a check it had turned `Ready` while the job was still unmanaged stays
/// `Ready` once the label is added, and Kueue, admitting on it, unsuspends a job that never
/// passed Open (found by the adversary's long run). No lookup: the stored version decides, as
/// for the mark. Kueue retries the refused unsuspend; it goes through once Open has written
/// the mark.
fn kueue_gate_unsuspend(
    input: &AdmissionInput,
    who: &Identities,
    o: Object<'_>,
    n: Object<'_>,
) -> Option<Verdict> {
    if who.is_controller(&input.user.username) || !unsuspends_at_closed_gate(o, n) {
        return None;
    }
    Some(Verdict::deny(
        Rule::KueueGateUnsuspend,
        "spec.suspend",
        format!(
            "spec.suspend of TrainJob {}: it is labelled {LABEL_MANAGED}=true and its start gate is closed (no {ANN_OPENED}); it stays suspended until {} opens it, through Open; user {} may not unsuspend it, Kueue included (Kueue admitted it on a readmission check that was Ready before the label was added: it unsuspends the job once Open has written the mark)",
            input.object_ref(),
            who.describe_controller(),
            input.user.username
        ),
    ))
}

fn kueue_gate_unsuspend_row() -> Validation {
    let t = Policy::TrainJobs;
    row(
        Rule::KueueGateUnsuspend,
        t,
        Modes::Kueue,
        "A managed TrainJob whose stored version has no opened mark is unsuspended by nobody, Kueue included: a readmission check turned Ready while the job was unmanaged stays Ready once the label is added, and Kueue admits on it.",
        format!(
            "variables.controller\n|| request.operation != 'UPDATE'\n|| !({})",
            closed_gate_unsuspend()
        ),
        &format!(
            "'spec.suspend of ' + variables.what + ': it is labelled holdfast.dev/managed=true and its start gate is closed (no holdfast.dev/opened); it stays suspended until {{{{ $ctlDesc }}}} opens it, through Open; user ' + {USER} + ' may not unsuspend it, Kueue included (Kueue admitted it on a readmission check that was Ready before the label was added: it unsuspends the job once Open has written the mark)'"
        ),
    )
}

// ---------------------------------------------------------------------------------------------
// Both modes

/// Both modes, an UPDATE by anyone but the controller, Kueue included: while a managed
/// TrainJob's start gate is closed (no `opened` mark), nobody drops its `managed` label —
/// that would open the gate without Open.
fn start_gate_label(
    input: &AdmissionInput,
    who: &Identities,
    o: Object<'_>,
    n: Object<'_>,
) -> Option<Verdict> {
    if who.is_controller(&input.user.username)
        || !(fields::managed(o) && !fields::opened(o) && !fields::managed(n))
    {
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

fn start_gate_label_row() -> Validation {
    let t = Policy::TrainJobs;
    let mn = managed("object");
    row(
        Rule::StartGateLabel,
        t,
        Modes::Both,
        "The start gate: its label stays until Open.",
        format!(
            "variables.controller\n|| request.operation != 'UPDATE'\n|| !(variables.gateClosed && !{mn})"
        ),
        &format!(
            "'metadata.labels[holdfast.dev/managed] of ' + variables.what + ': its start gate is closed (no holdfast.dev/opened) and only {{{{ $ctlDesc }}}} opens it, through Open; user ' + {USER} + ' may not remove the label before the gate is opened (delete the TrainJob instead)'"
        ),
    )
}

// ---------------------------------------------------------------------------------------------
// kueue mode: the queue

/// Whether the stored TrainJob is suspended or at its closed start gate: stopped, so that
/// its queue and prebuilt Workload stay.
fn stopped_or_gated(o: Object<'_>) -> bool {
    fields::suspended(o) || (fields::managed(o) && !fields::opened(o))
}

/// Kueue mode, an UPDATE by anyone but Kueue and the controller: a suspended or gated
/// TrainJob keeps its queue. Kueue lets a suspended job change queues and then ignores a job
/// without one, which would let it run past its hold or gate.
fn kueue_queue_stays(
    input: &AdmissionInput,
    who: &Identities,
    o: Object<'_>,
    n: Object<'_>,
) -> Option<Verdict> {
    let user = input.user.username.as_str();
    let queue = fields::queue_name(o)?;
    if who.is_controller(user)
        || who.is_kueue(user)
        || fields::queue_name(n) == Some(queue)
        || !stopped_or_gated(o)
    {
        return None;
    }
    let field = label_field(QUEUE_NAME_LABEL);
    let why = if fields::suspended(o) {
        "it is suspended (held, preempted or waiting for admission)"
    } else {
        "its start gate is closed"
    };
    let to = match fields::queue_name(n) {
        Some(q) => format!("change it from {queue:?} to {q:?}"),
        None => format!("remove it (it is {queue:?})"),
    };
    Some(Verdict::deny(
        Rule::KueueQueueStays,
        field.clone(),
        format!(
            "{field} of TrainJob {}: {why}, and Kueue ignores a job without a queue name, which would let it run without Kueue admission and holdfast's readmission gate; only {} may change it now; user {user} may not {to}",
            input.object_ref(),
            who.describe_kueue()
        ),
    ))
}

fn kueue_queue_stays_row() -> Validation {
    let t = Policy::TrainJobs;
    let so = suspended("oldObject");
    let (qo, qn) = (queue("oldObject"), queue("object"));
    row(
        Rule::KueueQueueStays,
        t,
        Modes::Kueue,
        "A suspended or gated TrainJob keeps its queue and its prebuilt Workload.",
        format!(
            "variables.controller\n|| variables.kueue\n|| request.operation != 'UPDATE'\n|| !({so} || variables.gateClosed)\n|| {qo} == ''\n|| {qn} == {qo}"
        ),
        &format!(
            "'metadata.labels[kueue.x-k8s.io/queue-name] of ' + variables.what + ': ' + ({so} ? 'it is suspended (held, preempted or waiting for admission)' : 'its start gate is closed') + ', and Kueue ignores a job without a queue name, which would let it run without Kueue admission and holdfast\\'s readmission gate; only {{{{ $kueueDesc }}}} may change it now; user ' + {USER} + ' may not ' + ({qn} == '' ? 'remove it (it is \"' + {qo} + '\")' : 'change it from \"' + {qo} + '\" to \"' + {qn} + '\"')"
        ),
    )
}

/// Kueue mode, an UPDATE by anyone but Kueue and the controller: a suspended or gated
/// TrainJob keeps its prebuilt Workload's name (label or annotation), which names the
/// Workload Kueue adopts for it.
fn kueue_prebuilt_stays(
    input: &AdmissionInput,
    who: &Identities,
    o: Object<'_>,
    n: Object<'_>,
) -> Option<Verdict> {
    let user = input.user.username.as_str();
    if who.is_controller(user)
        || who.is_kueue(user)
        || fields::prebuilt_workload(o) == fields::prebuilt_workload(n)
        || !stopped_or_gated(o)
    {
        return None;
    }
    let field = label_field(PREBUILT_WORKLOAD_LABEL);
    Some(Verdict::deny(
        Rule::KueuePrebuiltStays,
        field.clone(),
        format!(
            "{field} (label or annotation) of TrainJob {}: it names the Workload Kueue adopts for the job, and the TrainJob is suspended or at its closed start gate, so a new one would replace the Workload holdfast holds; user {user} may not change it now",
            input.object_ref()
        ),
    ))
}

fn kueue_prebuilt_stays_row() -> Validation {
    let t = Policy::TrainJobs;
    let so = suspended("oldObject");
    row(
        Rule::KueuePrebuiltStays,
        t,
        Modes::Kueue,
        "",
        format!(
            "variables.controller\n|| variables.kueue\n|| request.operation != 'UPDATE'\n|| !({so} || variables.gateClosed)\n|| !({} || {})",
            key_changes("labels", "kueue.x-k8s.io/prebuilt-workload-name"),
            key_changes("annotations", "kueue.x-k8s.io/prebuilt-workload-name")
        ),
        &format!(
            "'metadata.labels[kueue.x-k8s.io/prebuilt-workload-name] (label or annotation) of ' + variables.what + ': it names the Workload Kueue adopts for the job, and the TrainJob is suspended or at its closed start gate, so a new one would replace the Workload holdfast holds; user ' + {USER} + ' may not change it now'"
        ),
    )
}

/// Kueue mode, a CREATE (`o`: none) by anyone but the controller, or an UPDATE by anyone but
/// Kueue and the controller: a managed TrainJob must be queued, or Kueue ignores it and it
/// runs at once, past its start gate. An UPDATE is refused only when it makes the job managed
/// and unqueued.
fn kueue_managed_queued(
    input: &AdmissionInput,
    who: &Identities,
    o: Option<Object<'_>>,
    n: Object<'_>,
) -> Option<Verdict> {
    let user = input.user.username.as_str();
    let unqueued_managed = |v: Object<'_>| fields::managed(v) && !fields::queued(v);
    if who.is_controller(user)
        || (who.is_kueue(user) && o.is_some())
        || !unqueued_managed(n)
        || o.is_some_and(unqueued_managed)
    {
        return None;
    }
    let what = if input.operation == Operation::Create {
        "create it without one"
    } else {
        "leave it unqueued"
    };
    Some(Verdict::deny(
        Rule::KueueManagedQueued,
        label_field(QUEUE_NAME_LABEL),
        format!(
            "{} of TrainJob {}: in kueue mode a TrainJob labelled {LABEL_MANAGED}=true starts only through Kueue admission and holdfast's readmission gate, so it must carry the label {QUEUE_NAME_LABEL} naming a LocalQueue whose ClusterQueue requires holdfast's readmission AdmissionCheck; user {} may not {what} (add {QUEUE_NAME_LABEL}: <local-queue>, or drop {LABEL_MANAGED})",
            label_field(QUEUE_NAME_LABEL),
            input.object_ref(),
            input.user.username
        ),
    ))
}

fn kueue_managed_queued_row() -> Validation {
    let t = Policy::TrainJobs;
    let (mo, mn) = (managed("oldObject"), managed("object"));
    let (qo, qn) = (queue("oldObject"), queue("object"));
    row(
        Rule::KueueManagedQueued,
        t,
        Modes::Kueue,
        "A managed TrainJob starts only through Kueue: it must be queued.",
        format!(
            "variables.controller\n|| (variables.kueue && request.operation == 'UPDATE')\n|| !({mn} && {qn} == '')\n|| (request.operation == 'UPDATE' && {mo} && {qo} == '')"
        ),
        &format!(
            "'metadata.labels[kueue.x-k8s.io/queue-name] of ' + variables.what + ': in kueue mode a TrainJob labelled holdfast.dev/managed=true starts only through Kueue admission and holdfast\\'s readmission gate, so it must carry the label kueue.x-k8s.io/queue-name naming a LocalQueue whose ClusterQueue requires holdfast\\'s readmission AdmissionCheck; user ' + {USER} + ' may not ' + (request.operation == 'CREATE' ? 'create it without one' : 'leave it unqueued') + ' (add kueue.x-k8s.io/queue-name: <local-queue>, or drop holdfast.dev/managed)'"
        ),
    )
}

// ---------------------------------------------------------------------------------------------
// plain mode

/// Plain mode, a CREATE by anyone but the controller: a managed TrainJob is created at its
/// closed start gate, suspended (the mutating side suspends it, so this only refuses when
/// that side did not run).
fn plain_managed_created_suspended(
    input: &AdmissionInput,
    who: &Identities,
    obj: Object<'_>,
) -> Option<Verdict> {
    if who.is_controller(&input.user.username) || !fields::managed(obj) || fields::suspended(obj) {
        return None;
    }
    Some(Verdict::deny(
        Rule::PlainManagedCreatedSuspended,
        "spec.suspend",
        format!(
            "spec.suspend of TrainJob {}: a TrainJob labelled {LABEL_MANAGED}=true is created at its closed start gate (spec.suspend: true), which only {} opens; user {} may not create it unsuspended",
            input.object_ref(),
            who.describe_controller(),
            input.user.username
        ),
    ))
}

fn plain_managed_created_suspended_row() -> Validation {
    let t = Policy::TrainJobs;
    let sn = suspended("object");
    let mn = managed("object");
    row(
        Rule::PlainManagedCreatedSuspended,
        t,
        Modes::Plain,
        "plain mode: a managed TrainJob is created at its closed start gate; a held or gated one is unsuspended only by the controller.",
        format!("variables.controller\n|| request.operation != 'CREATE'\n|| !{mn}\n|| {sn}"),
        &format!(
            "'spec.suspend of ' + variables.what + ': a TrainJob labelled holdfast.dev/managed=true is created at its closed start gate (spec.suspend: true), which only {{{{ $ctlDesc }}}} opens; user ' + {USER} + ' may not create it unsuspended'"
        ),
    )
}

/// Plain mode, an UPDATE by anyone but the controller: a held TrainJob stays suspended until
/// its hold is released.
fn plain_held_unsuspend(
    input: &AdmissionInput,
    who: &Identities,
    o: Object<'_>,
    n: Object<'_>,
) -> Option<Verdict> {
    if who.is_controller(&input.user.username) || !(unsuspends(o, n) && fields::held(o)) {
        return None;
    }
    Some(Verdict::deny(
        Rule::PlainHeldUnsuspend,
        "spec.suspend",
        format!(
            "spec.suspend of TrainJob {}: it is held (hold {}, {ANN_HOLD_INSTANCE}); only {} unsuspends it, by releasing the hold; user {} may not",
            input.object_ref(),
            fields::hold_instance(o),
            who.describe_controller(),
            input.user.username
        ),
    ))
}

fn plain_held_unsuspend_row() -> Validation {
    let t = Policy::TrainJobs;
    let (so, sn) = (suspended("oldObject"), suspended("object"));
    let held_old = has_annotation("oldObject", "holdfast.dev/hold-instance");
    row(
        Rule::PlainHeldUnsuspend,
        t,
        Modes::Plain,
        "",
        format!(
            "variables.controller\n|| request.operation != 'UPDATE'\n|| !({so} && !{sn} && {held_old})"
        ),
        &format!(
            "'spec.suspend of ' + variables.what + ': it is held (hold ' + {} + ', holdfast.dev/hold-instance); only {{{{ $ctlDesc }}}} unsuspends it, by releasing the hold; user ' + {USER} + ' may not'",
            old_annotation("holdfast.dev/hold-instance")
        ),
    )
}

/// Plain mode, an UPDATE by anyone but the controller: a managed TrainJob at its closed start
/// gate stays suspended until Open opens it.
fn plain_gate_unsuspend(
    input: &AdmissionInput,
    who: &Identities,
    o: Object<'_>,
    n: Object<'_>,
) -> Option<Verdict> {
    if who.is_controller(&input.user.username) || !unsuspends_at_closed_gate(o, n) {
        return None;
    }
    Some(Verdict::deny(
        Rule::PlainGateUnsuspend,
        "spec.suspend",
        format!(
            "spec.suspend of TrainJob {}: it is labelled {LABEL_MANAGED}=true and its start gate is closed (no {ANN_OPENED}); only {} opens it, through Open; user {} may not unsuspend it",
            input.object_ref(),
            who.describe_controller(),
            input.user.username
        ),
    ))
}

fn plain_gate_unsuspend_row() -> Validation {
    let t = Policy::TrainJobs;
    row(
        Rule::PlainGateUnsuspend,
        t,
        Modes::Plain,
        "",
        format!(
            "variables.controller\n|| request.operation != 'UPDATE'\n|| !({})",
            closed_gate_unsuspend()
        ),
        &format!(
            "'spec.suspend of ' + variables.what + ': it is labelled holdfast.dev/managed=true and its start gate is closed (no holdfast.dev/opened); only {{{{ $ctlDesc }}}} opens it, through Open; user ' + {USER} + ' may not unsuspend it'"
        ),
    )
}
