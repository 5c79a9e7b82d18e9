//! The Workload rules: only Kueue makes a Workload a TrainJob's or unmakes it, and a held one
//! stays inactive and in its queue. Each rule's Rust half (what the webhook decides) and its
//! CEL row (the `…-workloads` policy) side by side. In kueue mode they judge every Workload;
//! in plain mode only one that carries a hold (placed in kueue mode, before a switch).

use super::cel::{USER, has_annotation, key_changes, old_annotation, trainjob_owners};
use super::refusal::label_field;
use super::rule::{Modes, Policy, Rule, Validation, Variable, row};
use crate::names::{ANN_HOLD_INSTANCE, JOB_UID_LABEL};
use crate::policy::fields;
use crate::policy::object::Object;
use crate::policy::{AdmissionInput, Identities, Verdict};

/// The policy's variables after the common ones: the TrainJob ownerReferences of the new and
/// the stored Workload.
pub(super) fn variables() -> Vec<Variable> {
    vec![
        Variable {
            name: "newOwners",
            note: "",
            expression: trainjob_owners("object"),
        },
        Variable {
            name: "oldOwners",
            note: "",
            expression: format!("oldObject == null ? [] : {}", trainjob_owners("oldObject")),
        },
    ]
}

/// The policy's rows after the held kinds' shared ones, in the order [`update`] checks them.
pub(super) fn rows() -> Vec<Validation> {
    vec![
        owner_added_row(),
        owner_kept_row(),
        job_uid_row(),
        held_active_row(),
        held_queue_row(),
    ]
}

/// A Workload's UPDATE, after the held kinds' shared rules: its rules in the order of the
/// rows.
pub(crate) fn update(
    input: &AdmissionInput,
    who: &Identities,
    o: Object<'_>,
    n: Object<'_>,
) -> Option<Verdict> {
    owner_added(input, who, Some(o), n)
        .or_else(|| owner_kept(input, who, o, n))
        .or_else(|| job_uid(input, who, o, n))
        .or_else(|| held_active(input, who, o, n))
        .or_else(|| held_queue(input, who, o, n))
}

/// Whether `side` carries a TrainJob ownerReference that `other` (none: no object) lacks.
fn owner_beyond(side: Object<'_>, other: Option<Object<'_>>) -> bool {
    let theirs = other.map(fields::trainjob_owners).unwrap_or_default();
    fields::trainjob_owners(side)
        .into_iter()
        .any(|r| !theirs.contains(&r))
}

/// The CEL of a TrainJob ownerReference `r` the other side carries as `s`.
const SAME_OWNER: &str =
    "s.uid == r.uid && (has(s.controller) && s.controller) == (has(r.controller) && r.controller)";

/// A CREATE (`o`: none) or UPDATE by anyone but Kueue and the controller that puts a TrainJob
/// ownerReference on a Workload the stored Workload does not already carry: only Kueue creates
/// a TrainJob's Workload, and a decoy owned by the TrainJob could capture its holds.
pub(crate) fn owner_added(
    input: &AdmissionInput,
    who: &Identities,
    o: Option<Object<'_>>,
    n: Object<'_>,
) -> Option<Verdict> {
    let user = input.user.username.as_str();
    if who.is_controller(user) || who.is_kueue(user) {
        return None;
    }
    if !owner_beyond(n, o) {
        return None;
    }
    Some(Verdict::deny(
        Rule::WorkloadOwnerAdded,
        "metadata.ownerReferences",
        format!(
            "metadata.ownerReferences of Workload {}: a Workload owned by a TrainJob is created by {} alone (holdfast holds the TrainJob through it); user {} may not make a Workload a TrainJob's",
            input.object_ref(),
            who.describe_kueue(),
            input.user.username
        ),
    ))
}

fn owner_added_row() -> Validation {
    let w = Policy::Workloads;
    row(
        Rule::WorkloadOwnerAdded,
        w,
        Modes::Both,
        "Workloads: only Kueue makes one a TrainJob's, or unmakes it; a held one stays inactive and in its queue. In plain mode these rules judge only a Workload that carries a hold (one placed in kueue mode, before a switch to plain mode: it is honoured until its holder releases it).",
        format!(
            "{{{{ $unheldInPlainMode }}}}variables.controller\n|| variables.kueue\n|| !variables.newOwners.exists(r, !variables.oldOwners.exists(s, {SAME_OWNER}))"
        ),
        &format!(
            "'metadata.ownerReferences of ' + variables.what + ': a Workload owned by a TrainJob is created by {{{{ $kueueDesc }}}} alone (holdfast holds the TrainJob through it); user ' + {USER} + ' may not make a Workload a TrainJob\\'s'"
        ),
    )
}

/// An UPDATE by anyone but Kueue, the snapshot deleters and the controller that drops or
/// changes a TrainJob ownerReference the stored Workload carries: a
/// Workload no longer owned by its TrainJob is not its Workload (SPEC), so a hold call would
/// find none while the job runs on it. Kueue and the garbage collector (orphaning deletes)
/// may; nobody else.
fn owner_kept(
    input: &AdmissionInput,
    who: &Identities,
    o: Object<'_>,
    n: Object<'_>,
) -> Option<Verdict> {
    let user = input.user.username.as_str();
    if who.is_controller(user) || who.is_kueue(user) || who.is_snapshot_deleter(user) {
        return None;
    }
    if !owner_beyond(o, Some(n)) {
        return None;
    }
    Some(Verdict::deny(
        Rule::WorkloadOwnerKept,
        "metadata.ownerReferences",
        format!(
            "metadata.ownerReferences of Workload {}: its TrainJob ownerReference makes it the TrainJob's Workload, the one holdfast holds the TrainJob through; only {} (and the garbage collector, for an orphaning delete) may remove or change it; user {} may not",
            input.object_ref(),
            who.describe_kueue(),
            input.user.username
        ),
    ))
}

fn owner_kept_row() -> Validation {
    let w = Policy::Workloads;
    row(
        Rule::WorkloadOwnerKept,
        w,
        Modes::Both,
        "",
        format!(
            "{{{{ $unheldInPlainMode }}}}variables.controller\n|| variables.kueue\n|| variables.deleter\n|| request.operation != 'UPDATE'\n|| !variables.oldOwners.exists(r, !variables.newOwners.exists(s, {SAME_OWNER}))"
        ),
        &format!(
            "'metadata.ownerReferences of ' + variables.what + ': its TrainJob ownerReference makes it the TrainJob\\'s Workload, the one holdfast holds the TrainJob through; only {{{{ $kueueDesc }}}} (and the garbage collector, for an orphaning delete) may remove or change it; user ' + {USER} + ' may not'"
        ),
    )
}

/// An UPDATE by anyone but Kueue and the controller of a TrainJob's Workload's job-uid label: how holdfast and
/// Kueue find the Workload.
fn job_uid(
    input: &AdmissionInput,
    who: &Identities,
    o: Object<'_>,
    n: Object<'_>,
) -> Option<Verdict> {
    let user = input.user.username.as_str();
    if who.is_controller(user)
        || who.is_kueue(user)
        || fields::trainjob_owners(o).is_empty()
        || fields::label(o, JOB_UID_LABEL) == fields::label(n, JOB_UID_LABEL)
    {
        return None;
    }
    Some(Verdict::deny(
        Rule::WorkloadJobUid,
        label_field(JOB_UID_LABEL),
        format!(
            "{} of Workload {}: on a TrainJob's Workload it is how holdfast and Kueue find the Workload, and only {} sets it; user {} may not change or remove it",
            label_field(JOB_UID_LABEL),
            input.object_ref(),
            who.describe_kueue(),
            input.user.username
        ),
    ))
}

fn job_uid_row() -> Validation {
    let w = Policy::Workloads;
    row(
        Rule::WorkloadJobUid,
        w,
        Modes::Both,
        "",
        format!(
            "{{{{ $unheldInPlainMode }}}}variables.controller\n|| variables.kueue\n|| request.operation != 'UPDATE'\n|| variables.oldOwners.size() == 0\n|| !({})",
            key_changes("labels", "kueue.x-k8s.io/job-uid")
        ),
        &format!(
            "'metadata.labels[kueue.x-k8s.io/job-uid] of ' + variables.what + ': on a TrainJob\\'s Workload it is how holdfast and Kueue find the Workload, and only {{{{ $kueueDesc }}}} sets it; user ' + {USER} + ' may not change or remove it'"
        ),
    )
}

/// `spec.active: false` of `o`, as CEL.
fn inactive(o: &str) -> String {
    format!("(has({o}.spec.active) && {o}.spec.active == false)")
}

/// An UPDATE by anyone but the controller, Kueue included, that flips `spec.active` of a
/// Workload carrying a hold.
fn held_active(
    input: &AdmissionInput,
    who: &Identities,
    o: Object<'_>,
    n: Object<'_>,
) -> Option<Verdict> {
    if who.is_controller(&input.user.username)
        || !fields::held(o)
        || fields::active(o) == fields::active(n)
    {
        return None;
    }
    Some(Verdict::deny(
        Rule::WorkloadHeldActive,
        "spec.active",
        format!(
            "spec.active of Workload {} carries hold {} ({ANN_HOLD_INSTANCE}); only {} flips it, by releasing the hold; user {} may not change it from {} to {}",
            input.object_ref(),
            fields::hold_instance(o),
            who.describe_controller(),
            input.user.username,
            fields::active(o),
            fields::active(n)
        ),
    ))
}

fn held_active_row() -> Validation {
    let w = Policy::Workloads;
    let held_old = has_annotation("oldObject", "holdfast.dev/hold-instance");
    let hold = old_annotation("holdfast.dev/hold-instance");
    row(
        Rule::WorkloadHeldActive,
        w,
        Modes::Both,
        "",
        format!(
            "{{{{ $unheldInPlainMode }}}}variables.controller\n|| request.operation != 'UPDATE'\n|| !{held_old}\n|| {} == {}",
            inactive("oldObject"),
            inactive("object")
        ),
        &format!(
            "'spec.active of ' + variables.what + ' carries hold ' + {hold} + ' (holdfast.dev/hold-instance); only {{{{ $ctlDesc }}}} flips it, by releasing the hold; user ' + {USER} + ' may not change it from ' + string(!{}) + ' to ' + string(!{})",
            inactive("oldObject"),
            inactive("object")
        ),
    )
}

/// An UPDATE by anyone but the controller that moves a Workload carrying a hold to another
/// queue: its queue's ClusterQueue requires holdfast's readmission gate.
fn held_queue(
    input: &AdmissionInput,
    who: &Identities,
    o: Object<'_>,
    n: Object<'_>,
) -> Option<Verdict> {
    if who.is_controller(&input.user.username)
        || !fields::held(o)
        || fields::workload_queue(o) == fields::workload_queue(n)
    {
        return None;
    }
    Some(Verdict::deny(
        Rule::WorkloadHeldQueue,
        "spec.queueName",
        format!(
            "spec.queueName of Workload {} carries hold {} ({ANN_HOLD_INSTANCE}): a held Workload stays in its queue, whose ClusterQueue requires holdfast's readmission gate, until {} releases it; user {} may not move it",
            input.object_ref(),
            fields::hold_instance(o),
            who.describe_controller(),
            input.user.username
        ),
    ))
}

fn held_queue_row() -> Validation {
    let w = Policy::Workloads;
    let held_old = has_annotation("oldObject", "holdfast.dev/hold-instance");
    let hold = old_annotation("holdfast.dev/hold-instance");
    row(
        Rule::WorkloadHeldQueue,
        w,
        Modes::Both,
        "",
        format!(
            "{{{{ $unheldInPlainMode }}}}variables.controller\n|| request.operation != 'UPDATE'\n|| !{held_old}\n|| (has(oldObject.spec.queueName) == has(object.spec.queueName) && (!has(oldObject.spec.queueName) || oldObject.spec.queueName == object.spec.queueName))"
        ),
        &format!(
            "'spec.queueName of ' + variables.what + ' carries hold ' + {hold} + ' (holdfast.dev/hold-instance): a held Workload stays in its queue, whose ClusterQueue requires holdfast\\'s readmission gate, until {{{{ $ctlDesc }}}} releases it; user ' + {USER} + ' may not move it'"
        ),
    )
}
