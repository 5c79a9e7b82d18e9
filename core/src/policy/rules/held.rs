//! The rules both held kinds (TrainJobs and Workloads) share: the controller's annotations and
//! the hold finalizer are the controller's. Each rule's Rust half (what the webhook decides)
//! and its CEL row (the `…-trainjobs` and `…-workloads` policies) side by side.

use super::cel::{REF, USER, controller_annotation, hold_finalizer};
use super::refusal::annotation_field;
use super::rule::{Modes, Policy, Rule, Validation, Variable, row};
use crate::names::{ANN_ADMITTED_RUNTIME_RESOURCE_VERSION, HOLD_FINALIZER};
use crate::policy::fields;
use crate::policy::object::Object;
use crate::policy::{AdmissionInput, Identities, Operation, Resource, Verdict};
use serde_json::Value;

/// The policy's variables after the identities: what the object is called in messages, and the
/// controller annotations a CREATE adds or an UPDATE changes.
pub(super) fn variables(policy: Policy) -> Vec<Variable> {
    let kind = if policy == Policy::TrainJobs {
        "TrainJob"
    } else {
        "Workload"
    };
    let admitted = if policy == Policy::TrainJobs {
        " && k != 'holdfast.dev/admitted-runtime-resource-version'"
    } else {
        ""
    };
    let ca = controller_annotation("k");
    vec![
        Variable {
            name: "what",
            note: "",
            expression: format!("'{kind} ' + {REF}"),
        },
        Variable {
            name: "added",
            note: if policy == Policy::TrainJobs {
                "The controller annotations a CREATE carries (but the admitted runtime version, which the mutating webhook has just set or removed)."
            } else {
                "The controller annotations a CREATE carries."
            },
            expression: format!(
                "request.operation == 'CREATE' && has(object.metadata.annotations)\n? object.metadata.annotations.filter(k, {ca}{admitted})\n: []"
            ),
        },
        Variable {
            name: "changed",
            note: "The controller annotations an UPDATE adds, removes or changes.",
            expression: format!(
                "request.operation != 'UPDATE' ? [] : (has(oldObject.metadata.annotations) ? oldObject.metadata.annotations.filter(k, {ca} && !(has(object.metadata.annotations) && k in object.metadata.annotations && object.metadata.annotations[k] == oldObject.metadata.annotations[k])) : []) + (has(object.metadata.annotations) ? object.metadata.annotations.filter(k, {ca} && !(has(oldObject.metadata.annotations) && k in oldObject.metadata.annotations)) : [])"
            ),
        },
    ]
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

/// A CREATE by anyone but the controller: the first controller annotation it carries, but a
/// TrainJob's admitted runtime version, which the mutating side has just set or removed.
pub(crate) fn annotation_added(
    input: &AdmissionInput,
    who: &Identities,
    obj: Object<'_>,
) -> Option<Verdict> {
    if who.is_controller(&input.user.username) {
        return None;
    }
    let trainjob = input.resource == Resource::TrainJob;
    fields::controller_annotations(obj)
        .into_iter()
        .find(|(key, _)| !(trainjob && *key == ANN_ADMITTED_RUNTIME_RESOURCE_VERSION))
        .map(|(key, value)| deny_annotation(input, who, key, None, Some(value)))
}

pub(super) fn annotation_added_row(policy: Policy) -> Validation {
    row(
        Rule::ControllerAnnotationAdded,
        policy,
        Modes::Both,
        "Controller annotations and the hold finalizer: only the controller writes them.",
        "variables.controller || variables.added.size() == 0".to_owned(),
        &format!(
            "'metadata.annotations[' + variables.added[0] + '] of ' + variables.what + ' is written only by {{{{ $ctlDesc }}}}; user ' + {USER} + ' may not add it'"
        ),
    )
}

/// An UPDATE by anyone but the controller: the first controller annotation it adds, removes or
/// changes.
pub(crate) fn annotation_changed(
    input: &AdmissionInput,
    who: &Identities,
    o: Object<'_>,
    n: Object<'_>,
) -> Option<Verdict> {
    if who.is_controller(&input.user.username) {
        return None;
    }
    let old = fields::controller_annotations(o);
    let new = fields::controller_annotations(n);
    old.keys()
        .chain(new.keys())
        .find(|k| old.get(*k) != new.get(*k))
        .map(|k| deny_annotation(input, who, k, old.get(k).copied(), new.get(k).copied()))
}

pub(super) fn annotation_changed_row(policy: Policy) -> Validation {
    row(
        Rule::ControllerAnnotationChanged,
        policy,
        Modes::Both,
        "",
        "variables.controller || variables.changed.size() == 0".to_owned(),
        &format!(
            "'metadata.annotations[' + variables.changed[0] + '] of ' + variables.what + ' is written only by {{{{ $ctlDesc }}}}; user ' + {USER} + ' may not ' + (!(has(oldObject.metadata.annotations) && variables.changed[0] in oldObject.metadata.annotations) ? 'add it' : !(has(object.metadata.annotations) && variables.changed[0] in object.metadata.annotations) ? 'remove it' : 'change it from \"' + oldObject.metadata.annotations[variables.changed[0]] + '\" to \"' + object.metadata.annotations[variables.changed[0]] + '\"')"
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

/// A CREATE by anyone but the controller that carries the hold finalizer.
pub(crate) fn hold_finalizer_added(
    input: &AdmissionInput,
    who: &Identities,
    obj: Object<'_>,
) -> Option<Verdict> {
    (!who.is_controller(&input.user.username) && fields::has_hold_finalizer(obj))
        .then(|| deny_hold_finalizer(input, who, "add"))
}

/// An UPDATE by anyone but the controller that adds or removes the hold finalizer. It keeps a
/// held Workload (and so its hold) while it is deleted: removing it and then deleting the
/// Workload would let an active replacement in.
pub(crate) fn hold_finalizer_changed(
    input: &AdmissionInput,
    who: &Identities,
    o: Object<'_>,
    n: Object<'_>,
) -> Option<Verdict> {
    let had = fields::has_hold_finalizer(o);
    (!who.is_controller(&input.user.username) && had != fields::has_hold_finalizer(n))
        .then(|| deny_hold_finalizer(input, who, if had { "remove" } else { "add" }))
}

pub(super) fn hold_finalizer_row(policy: Policy) -> Validation {
    let (fin_new, fin_old) = (hold_finalizer("object"), hold_finalizer("oldObject"));
    row(
        Rule::HoldFinalizer,
        policy,
        Modes::Both,
        "",
        format!(
            "variables.controller\n|| (request.operation == 'CREATE' ? !{fin_new} : {fin_new} == {fin_old})"
        ),
        &format!(
            "'metadata.finalizers[holdfast.dev/hold] of ' + variables.what + ' keeps its hold while it is deleted and is written only by {{{{ $ctlDesc }}}}; user ' + {USER} + ' may not ' + (request.operation == 'UPDATE' && {fin_old} ? 'remove' : 'add') + ' it'"
        ),
    )
}
