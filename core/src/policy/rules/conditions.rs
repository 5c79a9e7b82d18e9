//! The match conditions of the validating rules: which requests the webhook's validating
//! entries and the policies judge at all. One definition for both engines (the chart's
//! `holdfast.conditions.snapshots` and `holdfast.conditions.jobs`, generated from here);
//! `tests/tests/it/match_conditions.rs` proves through the apiserver that they send every
//! request the rules refuse.

use super::cel::{USER, carries, closed_gate_unsuspend, has_annotation, key_changes, suspended};
use super::rule::{Modes, Policy};

/// One match condition: the request is judged only if every condition of its policy holds.
#[derive(Clone, Debug)]
pub struct Condition {
    pub name: &'static str,
    pub modes: Modes,
    pub expression: String,
}

/// An UPDATE adds, removes or changes a `holdfast.dev/` key of `metadata.<f>` (a map).
fn map_changes(f: &str) -> String {
    format!(
        "(has(oldObject.metadata.{f}) && oldObject.metadata.{f}.exists(k, k.startsWith('holdfast.dev/') && !(has(object.metadata.{f}) && k in object.metadata.{f} && object.metadata.{f}[k] == oldObject.metadata.{f}[k]))) || (has(object.metadata.{f}) && object.metadata.{f}.exists(k, k.startsWith('holdfast.dev/') && !(has(oldObject.metadata.{f}) && k in oldObject.metadata.{f})))"
    )
}

/// The request adds, removes or changes holdfast state (a CREATE: carries any).
fn state_changes() -> String {
    format!(
        "(oldObject == null ? {} : (object == null ? {} : ({} || {} || (has(oldObject.metadata.finalizers) && oldObject.metadata.finalizers.exists(f, f.startsWith('holdfast.dev/') && !(has(object.metadata.finalizers) && f in object.metadata.finalizers))) || (has(object.metadata.finalizers) && object.metadata.finalizers.exists(f, f.startsWith('holdfast.dev/') && !(has(oldObject.metadata.finalizers) && f in oldObject.metadata.finalizers))))))",
        carries("object"),
        carries("oldObject"),
        map_changes("annotations"),
        map_changes("labels"),
    )
}

/// The conditions of `policy`'s requests, in order.
pub fn conditions(policy: Policy) -> Vec<Condition> {
    match policy {
        Policy::Snapshots => snapshot_conditions(),
        Policy::TrainJobs | Policy::Workloads => job_conditions(),
    }
}

fn snapshot_conditions() -> Vec<Condition> {
    vec![
        Condition {
            name: "runtime-snapshot",
            modes: Modes::Both,
            expression: "(has(request.name) && request.name.endsWith('-runtime-snapshot'))\n\
                || (object != null && ((has(object.metadata.name) && object.metadata.name.endsWith('-runtime-snapshot')) || (has(object.metadata.labels) && 'holdfast.dev/runtime-snapshot' in object.metadata.labels)))\n\
                || (oldObject != null && ((has(oldObject.metadata.name) && oldObject.metadata.name.endsWith('-runtime-snapshot')) || (has(oldObject.metadata.labels) && 'holdfast.dev/runtime-snapshot' in oldObject.metadata.labels)))"
                .to_owned(),
        },
        Condition {
            name: "not-decided-by-identity",
            modes: Modes::Both,
            expression: format!(
                "!(request.operation == 'CREATE' && {USER} in {{{{ $creators }}}})\n&& !(request.operation == 'DELETE' && {USER} in {{{{ $deleters }}}})"
            ),
        },
    ]
}

fn job_conditions() -> Vec<Condition> {
    let (so, sn) = (suspended("oldObject"), suspended("object"));
    let flip = format!("(object != null && oldObject != null && {sn} != {so})");
    let queue_keys = format!(
        "(request.resource.resource == 'trainjobs' && object != null && oldObject != null && ({} || {} || {}))",
        key_changes("labels", "kueue.x-k8s.io/queue-name"),
        key_changes("labels", "kueue.x-k8s.io/prebuilt-workload-name"),
        key_changes("annotations", "kueue.x-k8s.io/prebuilt-workload-name")
    );
    let owners = "(request.resource.resource == 'workloads' && object != null && ((has(object.metadata.ownerReferences) && object.metadata.ownerReferences.exists(r, r.kind == 'TrainJob')) || (oldObject != null && has(oldObject.metadata.ownerReferences) && oldObject.metadata.ownerReferences.exists(r, r.kind == 'TrainJob'))) && (oldObject == null || !has(object.metadata.ownerReferences) || !has(oldObject.metadata.ownerReferences) || object.metadata.ownerReferences != oldObject.metadata.ownerReferences))";
    let job_uid = format!(
        "(request.resource.resource == 'workloads' && object != null && oldObject != null && has(oldObject.metadata.ownerReferences) && oldObject.metadata.ownerReferences.exists(r, r.kind == 'TrainJob') && {})",
        key_changes("labels", "kueue.x-k8s.io/job-uid")
    );
    let held_old = has_annotation("oldObject", "holdfast.dev/hold-instance");
    let held_workload =
        format!("(request.resource.resource == 'workloads' && oldObject != null && {held_old})");
    let held_trainjob =
        format!("(request.resource.resource == 'trainjobs' && oldObject != null && {held_old})");
    // Kueue mode: an unsuspend of a TrainJob carrying a hold's mark (its Workload's hold is
    // being placed or is in force); only the unsuspend, so that Kueue's own suspend never
    // waits on holdfast.
    let marked_unsuspend = format!(
        "(request.resource.resource == 'trainjobs' && object != null && oldObject != null && {} && {so} && !{sn})",
        has_annotation("oldObject", "holdfast.dev/hold-mark")
    );
    // Kueue mode: an unsuspend of a managed TrainJob (before or by the write) whose stored
    // version has no opened mark: refused whoever sends it, Kueue included, so Kueue's must
    // reach a fail-closed entry too.
    let gated_unsuspend = format!(
        "(request.resource.resource == 'trainjobs' && object != null && oldObject != null && {})",
        closed_gate_unsuspend()
    );
    let state = state_changes();
    vec![
        Condition {
            name: "holdfast-state",
            modes: Modes::Kueue,
            expression: format!(
                "{state}\n|| {queue_keys}\n|| {owners}\n|| {job_uid}\n|| {flip}\n|| {held_workload}"
            ),
        },
        Condition {
            name: "holdfast-state",
            modes: Modes::Plain,
            expression: format!(
                "{state}\n|| ({flip} && ({} || {}))\n|| {held_workload}",
                carries("object"),
                carries("oldObject")
            ),
        },
        Condition {
            name: "not-the-controller",
            modes: Modes::Kueue,
            expression: format!("!({USER} in {{{{ $controllers }}}})\n|| {flip}"),
        },
        Condition {
            name: "not-the-controller",
            modes: Modes::Plain,
            expression: format!("!({USER} in {{{{ $controllers }}}})"),
        },
        Condition {
            name: "kueue-only-on-holdfast-state",
            modes: Modes::Kueue,
            expression: format!(
                "!({USER} in {{{{ $kueue }}}})\n|| {state}\n|| {queue_keys}\n|| {held_workload}\n|| ({flip} && {held_trainjob})\n|| {marked_unsuspend}\n|| {gated_unsuspend}"
            ),
        },
    ]
}
