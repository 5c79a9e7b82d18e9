//! The validating webhook's verdict.

use super::fields::{self, Doc};
use super::{AdmissionInput, Identities, Operation, QUEUE_NAME_LABEL, Resource, Verdict};
use crate::mode::Mode;
use crate::names::{
    ANN_ADMITTED_RUNTIME_RESOURCE_VERSION, ANN_HOLD_INSTANCE, ANN_OPENED, HOLD_FINALIZER,
    LABEL_MANAGED, LABEL_RUNTIME_SNAPSHOT, SNAPSHOT_SUFFIX,
};
use serde_json::{Map, Value};

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
/// - kueue mode: every change of the `spec.suspend` (absent = false) of a TrainJob Kueue
///   manages, one labelled `kueue.x-k8s.io/queue-name` (non-empty) on the old or the new
///   object, by anyone not in the Kueue list is refused, the controller's included (SPEC:
///   holdfast never writes it in kueue mode). Adding or removing the label in the same update
///   does not escape: either side carrying it is enough. A TrainJob without a queue name is
///   not Kueue's (Kueue's default `manageJobsWithoutQueueName: false`): its `spec.suspend` is
///   not protected by this rule. Any change of `spec.active` (absent = true) on a Workload
///   whose stored object carries `hold-instance` is refused for all but the controller, Kueue
///   included.
/// - plain mode, our extension of the start gate: a TrainJob labelled
///   `holdfast.dev/managed: "true"` (on the old or the new object) that has no `opened`
///   annotation may be unsuspended only by the controller (only Open opens the gate); while
///   the gate is closed nobody else may drop the `managed` label either (that would open it in
///   two steps); and it may not be created unsuspended (the mutating side suspends it, so this
///   only refuses when that side did not run).
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
        Resource::ConfigMap => snapshot(input, who),
        Resource::TrainJob | Resource::Workload => held_kind(input, who, mode),
        Resource::Other { .. } => Verdict::Allow,
    }
}

fn malformed(input: &AdmissionInput, side: &str, doc: Doc<'_>, what: &str) -> Verdict {
    Verdict::deny(
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
            what.clone(),
            format!(
                "{what} is a runtime snapshot ({evidence}); snapshots are created only by {}; user {user} may not create it",
                who.describe_creators()
            ),
        ),
        Operation::Delete if who.may_delete_snapshot(user) => Verdict::Allow,
        Operation::Delete => Verdict::deny(
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
const SNAPSHOT_CONTENT: [&str; 2] = ["data", "binaryData"];
/// Snapshot fields the deleters never change.
const SNAPSHOT_TOP_KEPT_BY_DELETERS: [&str; 3] = ["data", "binaryData", "immutable"];
const SNAPSHOT_META_KEPT_BY_DELETERS: [&str; 2] = ["labels", "annotations"];

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
            .find(|k| fields::top(n, k) != fields::top(o, k))
        {
            return Verdict::deny(
                key,
                format!(
                    "{key} of {what}: a runtime snapshot ({evidence}) is never rewritten, not even by the holdfast controller (user {user}); delete the snapshot instead"
                ),
            );
        }
        return Verdict::Allow;
    }
    let changed_top = SNAPSHOT_TOP_KEPT_BY_DELETERS
        .into_iter()
        .find(|k| fields::top(n, k) != fields::top(o, k))
        .map(str::to_owned);
    let changed = changed_top.or_else(|| {
        SNAPSHOT_META_KEPT_BY_DELETERS
            .into_iter()
            .find(|k| fields::meta(n, k) != fields::meta(o, k))
            .map(|k| format!("metadata.{k}"))
    });
    match changed {
        None => Verdict::Allow,
        Some(field) => Verdict::deny(
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

fn deny_annotation(
    input: &AdmissionInput,
    who: &Identities,
    key: &str,
    old: Option<&Value>,
    new: Option<&Value>,
) -> Verdict {
    let user = &input.user.username;
    let action = match (old, new) {
        (None, _) => "add it".to_owned(),
        (Some(_), None) => "remove it".to_owned(),
        (Some(o), Some(n)) => format!("change it from {o} to {n}"),
    };
    let field = annotation_field(key);
    Verdict::deny(
        field.clone(),
        format!(
            "{field} of {} {} is written only by {}; user {user} may not {action}",
            input.resource.kind(),
            input.object_ref(),
            who.describe_controller()
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
    if mode == Mode::Plain && trainjob && fields::managed(obj) && !fields::suspended(obj) {
        return Verdict::deny(
            "spec.suspend",
            format!(
                "spec.suspend of TrainJob {}: a TrainJob labelled {LABEL_MANAGED}=true is created at its closed start gate (spec.suspend: true), which only {} opens; user {user} may not create it unsuspended",
                input.object_ref(),
                who.describe_controller()
            ),
        );
    }
    Verdict::Allow
}

fn held_kind_update(input: &AdmissionInput, who: &Identities, mode: Mode) -> Verdict {
    let user = input.user.username.as_str();
    let controller = who.is_controller(user);
    let trainjob = input.resource == Resource::TrainJob;
    // Whether the kueue-mode suspend rule may apply; whether it does depends on the queue
    // label, so the controller is let through early only where it cannot.
    let kueue_may_own_suspend = mode == Mode::Kueue && trainjob && !who.is_kueue(user);
    if controller && !kueue_may_own_suspend {
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
    if !controller && has_hold_finalizer(o) != has_hold_finalizer(n) {
        // The finalizer keeps a held Workload (and so its hold) while it is deleted: removing
        // it and then deleting the Workload would let an active replacement in.
        let action = if has_hold_finalizer(o) {
            "remove"
        } else {
            "add"
        };
        return Verdict::deny(
            "metadata.finalizers",
            format!(
                "metadata.finalizers[{HOLD_FINALIZER}] of {} {} keeps its hold while it is deleted and is written only by {}; user {user} may not {action} it",
                input.resource.kind(),
                input.object_ref(),
                who.describe_controller()
            ),
        );
    }
    let kueue_owns_suspend = kueue_may_own_suspend && (fields::queued(o) || fields::queued(n));
    if kueue_owns_suspend && fields::suspended(o) != fields::suspended(n) {
        return Verdict::deny(
            "spec.suspend",
            format!(
                "spec.suspend of TrainJob {} is owned by Kueue (the TrainJob is queued: label {QUEUE_NAME_LABEL}) in kueue mode and changed only by {}; user {user} may not change it from {} to {}",
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
    match (mode, &input.resource) {
        (Mode::Kueue, Resource::Workload)
            if fields::held(o) && fields::active(o) != fields::active(n) =>
        {
            Verdict::deny(
                "spec.active",
                format!(
                    "spec.active of Workload {} carries hold {} ({ANN_HOLD_INSTANCE}); only {} flips it, by releasing the hold; user {user} may not change it from {} to {}",
                    input.object_ref(),
                    fields::hold_instance(o),
                    who.describe_controller(),
                    fields::active(o),
                    fields::active(n)
                ),
            )
        }
        (Mode::Plain, Resource::TrainJob) => plain_trainjob_update(input, who, o, n),
        _ => Verdict::Allow,
    }
}

fn has_hold_finalizer(obj: &Map<String, Value>) -> bool {
    obj.get("metadata")
        .and_then(|m| m.get("finalizers"))
        .and_then(Value::as_array)
        .is_some_and(|f| f.iter().any(|v| v.as_str() == Some(HOLD_FINALIZER)))
}

fn annotations_changed(
    input: &AdmissionInput,
    who: &Identities,
    o: &Map<String, Value>,
    n: &Map<String, Value>,
) -> Option<Verdict> {
    let old = fields::controller_annotations(o);
    let new = fields::controller_annotations(n);
    old.keys()
        .chain(new.keys())
        .find(|k| old.get(*k) != new.get(*k))
        .map(|k| deny_annotation(input, who, k, old.get(k).copied(), new.get(k).copied()))
}

fn plain_trainjob_update(
    input: &AdmissionInput,
    who: &Identities,
    o: &Map<String, Value>,
    n: &Map<String, Value>,
) -> Verdict {
    let user = input.user.username.as_str();
    let unsuspends = fields::suspended(o) && !fields::suspended(n);
    if unsuspends && fields::held(o) {
        return Verdict::deny(
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
            "spec.suspend",
            format!(
                "spec.suspend of TrainJob {}: it is labelled {LABEL_MANAGED}=true and its start gate is closed (no {ANN_OPENED}); only {} opens it, through Open; user {user} may not unsuspend it",
                input.object_ref(),
                who.describe_controller()
            ),
        );
    }
    if at_gate && fields::suspended(o) && fields::managed(o) && !fields::managed(n) {
        let field = format!("metadata.labels[{LABEL_MANAGED}]");
        return Verdict::deny(
            field.clone(),
            format!(
                "{field} of TrainJob {}: its start gate is closed (suspended, no {ANN_OPENED}) and only {} opens it; user {user} may not remove the label before the gate is opened (delete the TrainJob instead)",
                input.object_ref(),
                who.describe_controller()
            ),
        );
    }
    Verdict::Allow
}

#[cfg(test)]
mod tests;
