//! The snapshot ConfigMaps' rules, each with its Rust half (what the webhook decides) and its
//! CEL row (what the `…-snapshots` ValidatingAdmissionPolicy decides), side by side.

use super::cel::{REF, USER, label_is, same_map};
use super::refusal::{malformed, malformed_update};
use super::rule::{Modes, Policy, Rule, Validation, Variable, row};
use crate::names::{LABEL_RUNTIME_SNAPSHOT, SNAPSHOT_SUFFIX};
use crate::policy::fields;
use crate::policy::object::{
    ANNOTATIONS, BINARY_DATA, DATA, Doc, Field, IMMUTABLE, LABELS, Object,
};
use crate::policy::{AdmissionInput, Identities, Operation, Verdict};

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

/// The policy's variables after the identities: what the ConfigMap is called in messages, and
/// why it is a snapshot (as [`snapshot_evidence`]).
pub(super) fn variables() -> Vec<Variable> {
    let label_new = label_is("object", "holdfast.dev/runtime-snapshot", "true");
    let label_old = label_is("oldObject", "holdfast.dev/runtime-snapshot", "true");
    vec![
        Variable {
            name: "what",
            note: "",
            expression: format!("'ConfigMap ' + {REF}"),
        },
        Variable {
            name: "evidence",
            note: "Why the ConfigMap is a snapshot ('': it is not, and nothing here refuses it).",
            expression: format!(
                "has(request.name) && request.name.endsWith('-runtime-snapshot') ? 'its name ends in -runtime-snapshot' :\n\
                 object != null && has(object.metadata.name) && object.metadata.name.endsWith('-runtime-snapshot') ? 'the new object\\'s name ' + object.metadata.name + ' ends in -runtime-snapshot' :\n\
                 object != null && {label_new} ? 'the new object carries the label holdfast.dev/runtime-snapshot=true' :\n\
                 oldObject != null && has(oldObject.metadata.name) && oldObject.metadata.name.endsWith('-runtime-snapshot') ? 'the stored object\\'s name ' + oldObject.metadata.name + ' ends in -runtime-snapshot' :\n\
                 oldObject != null && {label_old} ? 'the stored object carries the label holdfast.dev/runtime-snapshot=true' :\n\
                 ''"
            ),
        },
    ]
}

/// The policy's rows, in the order [`judge`] checks them.
pub(super) fn rows() -> Vec<Validation> {
    vec![
        create_row(),
        delete_row(),
        update_row(),
        content_row(),
        deleter_update_row(),
    ]
}

/// What a refusal says of a snapshot: the ConfigMap, and why it is a snapshot.
struct Seen {
    what: String,
    evidence: String,
}

/// A ConfigMap's verdict: the snapshot rules, for the ConfigMaps that are snapshots, in the
/// order of the rows.
pub(crate) fn judge(input: &AdmissionInput, who: &Identities) -> Verdict {
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

    let seen = Seen { what, evidence };
    let refused = match op {
        Operation::Create => create(input, who, &seen),
        Operation::Delete => delete(input, who, old, &seen),
        Operation::Update => update(input, who, &seen).or_else(|| {
            let (Some(n), Some(o)) = (new.object(), old.object()) else {
                return Some(malformed_update(input, new, old, &seen.what));
            };
            content(input, who, o, n, &seen).or_else(|| deleter_update(input, who, o, n, &seen))
        }),
        Operation::Connect => None,
    };
    refused.unwrap_or(Verdict::Allow)
}

/// A CREATE by anyone but the controller and the snapshot creators.
fn create(input: &AdmissionInput, who: &Identities, seen: &Seen) -> Option<Verdict> {
    let user = input.user.username.as_str();
    if who.may_create_snapshot(user) {
        return None;
    }
    let Seen { what, evidence } = seen;
    Some(Verdict::deny(
        Rule::SnapshotCreate,
        what.clone(),
        format!(
            "{what} is a runtime snapshot ({evidence}); snapshots are created only by {}; user {user} may not create it",
            who.describe_creators()
        ),
    ))
}

fn create_row() -> Validation {
    let s = Policy::Snapshots;
    row(
        Rule::SnapshotCreate,
        s,
        Modes::Both,
        "",
        "request.operation != 'CREATE' || variables.evidence == ''".to_owned(),
        &format!(
            "variables.what + ' is a runtime snapshot (' + variables.evidence + '); snapshots are created only by {{{{ $creatorsDesc }}}}; user ' + {USER} + ' may not create it'"
        ),
    )
}

/// A DELETE by anyone but the controller and the snapshot deleters, of a snapshot a TrainJob
/// controls. One no TrainJob controls any more (its owner was deleted with
/// `--cascade=orphan`) protects nothing; refusing its deletion would hold the TrainJob's name
/// forever. RBAC still decides who may delete it.
fn delete(input: &AdmissionInput, who: &Identities, old: Doc<'_>, seen: &Seen) -> Option<Verdict> {
    let user = input.user.username.as_str();
    if who.may_delete_snapshot(user) || old.object().is_some_and(|o| !fields::has_controller(o)) {
        return None;
    }
    let Seen { what, evidence } = seen;
    Some(Verdict::deny(
        Rule::SnapshotDelete,
        what.clone(),
        format!(
            "{what} is a runtime snapshot ({evidence}); it is deleted only by {} (with the TrainJob that owns it); user {user} may not delete it",
            who.describe_deleters()
        ),
    ))
}

fn delete_row() -> Validation {
    let s = Policy::Snapshots;
    row(
            Rule::SnapshotDelete,
            s,
            Modes::Both,
            "An orphaned snapshot (no controller ownerReference) protects no TrainJob any more.",
            "request.operation != 'DELETE'\n|| variables.evidence == ''\n|| !(has(oldObject.metadata.ownerReferences) && oldObject.metadata.ownerReferences.exists(r, has(r.controller) && r.controller == true))".to_owned(),
            &format!(
                "variables.what + ' is a runtime snapshot (' + variables.evidence + '); it is deleted only by {{{{ $deletersDesc }}}} (with the TrainJob that owns it); user ' + {USER} + ' may not delete it'"
            ),
        )
}

/// An UPDATE by anyone but the controller and the snapshot deleters.
fn update(input: &AdmissionInput, who: &Identities, seen: &Seen) -> Option<Verdict> {
    let user = input.user.username.as_str();
    if who.is_controller(user) || who.is_snapshot_deleter(user) {
        return None;
    }
    let Seen { what, evidence } = seen;
    Some(Verdict::deny(
        Rule::SnapshotUpdate,
        what.clone(),
        format!(
            "{what} is a runtime snapshot ({evidence}); a snapshot is written only by {} and never rewritten; user {user} may not update it",
            who.describe_controller()
        ),
    ))
}

fn update_row() -> Validation {
    let s = Policy::Snapshots;
    row(
            Rule::SnapshotUpdate,
            s,
            Modes::Both,
            "",
            "request.operation != 'UPDATE'\n|| variables.evidence == ''\n|| variables.controller\n|| variables.deleter".to_owned(),
            &format!(
                "variables.what + ' is a runtime snapshot (' + variables.evidence + '); a snapshot is written only by {{{{ $ctlDesc }}}} and never rewritten; user ' + {USER} + ' may not update it'"
            ),
        )
}

/// Snapshot fields the controller never changes.
const SNAPSHOT_CONTENT: [Field; 2] = [DATA, BINARY_DATA];

/// The controller's UPDATE: it changes a snapshot's metadata and `immutable`, never its data.
fn content(
    input: &AdmissionInput,
    who: &Identities,
    o: Object<'_>,
    n: Object<'_>,
    seen: &Seen,
) -> Option<Verdict> {
    let user = input.user.username.as_str();
    if !who.is_controller(user) {
        return None;
    }
    let key = SNAPSHOT_CONTENT
        .into_iter()
        .find(|&f| fields::present(n, f) != fields::present(o, f))?;
    let Seen { what, evidence } = seen;
    Some(Verdict::deny(
        Rule::SnapshotContent,
        key.to_string(),
        format!(
            "{key} of {what}: a runtime snapshot ({evidence}) is never rewritten, not even by the holdfast controller (user {user}); delete the snapshot instead"
        ),
    ))
}

fn content_row() -> Validation {
    let s = Policy::Snapshots;
    let (data, binary) = (same_map("data"), same_map("binaryData"));
    row(
        Rule::SnapshotContent,
        s,
        Modes::Both,
        "",
        format!(
            "request.operation != 'UPDATE'\n|| variables.evidence == ''\n|| !variables.controller\n|| ({data} && {binary})"
        ),
        &format!(
            "({data} ? 'binaryData' : 'data') + ' of ' + variables.what + ': a runtime snapshot (' + variables.evidence + ') is never rewritten, not even by the holdfast controller (user ' + {USER} + '); delete the snapshot instead'"
        ),
    )
}

/// Snapshot fields the deleters never change.
const SNAPSHOT_KEPT_BY_DELETERS: [Field; 5] = [DATA, BINARY_DATA, IMMUTABLE, LABELS, ANNOTATIONS];

/// A snapshot deleter's UPDATE (not the controller's): the garbage collector orphans
/// dependents and removes its deletion finalizers with updates, so it may change the
/// ownerReferences and finalizers, and nothing else.
fn deleter_update(
    input: &AdmissionInput,
    who: &Identities,
    o: Object<'_>,
    n: Object<'_>,
    seen: &Seen,
) -> Option<Verdict> {
    let user = input.user.username.as_str();
    if who.is_controller(user) || !who.is_snapshot_deleter(user) {
        return None;
    }
    let field = SNAPSHOT_KEPT_BY_DELETERS
        .into_iter()
        .find(|&f| fields::present(n, f) != fields::present(o, f))?
        .to_string();
    let Seen { what, evidence } = seen;
    Some(Verdict::deny(
        Rule::SnapshotDeleterUpdate,
        field.clone(),
        format!(
            "{field} of {what}: a runtime snapshot ({evidence}) is written only by {}; user {user}, a snapshot deleter, may only change its ownerReferences and finalizers",
            who.describe_controller()
        ),
    ))
}

fn deleter_update_row() -> Validation {
    let s = Policy::Snapshots;
    let (data, binary) = (same_map("data"), same_map("binaryData"));
    let (labels, annotations) = (
        same_map("metadata.labels"),
        same_map("metadata.annotations"),
    );
    row(
        Rule::SnapshotDeleterUpdate,
        s,
        Modes::Both,
        "",
        format!(
            "request.operation != 'UPDATE'\n|| variables.evidence == ''\n|| variables.controller\n|| !variables.deleter\n|| ({data} && {binary} && (has(object.immutable) ? object.immutable : false) == (has(oldObject.immutable) ? oldObject.immutable : false) && has(object.immutable) == has(oldObject.immutable) && {labels} && {annotations})"
        ),
        &format!(
            "(!{data} ? 'data' : !{binary} ? 'binaryData' : !{labels} ? 'metadata.labels' : !{annotations} ? 'metadata.annotations' : 'immutable') + ' of ' + variables.what + ': a runtime snapshot (' + variables.evidence + ') is written only by {{{{ $ctlDesc }}}}; user ' + {USER} + ', a snapshot deleter, may only change its ownerReferences and finalizers'"
        ),
    )
}
