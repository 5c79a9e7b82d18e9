//! The CEL building blocks the rows and the match conditions are written with: each renders
//! one reading of an object (`object` or `oldObject`) as CEL text.

pub(crate) const USER: &str = "request.userInfo.username";

/// The object's `namespace/name`, also for a deletecollection's requests (no name).
pub(crate) const REF: &str = "(has(request.namespace) ? request.namespace : '') + '/' + (has(request.name) && request.name != '' ? request.name : (object != null && has(object.metadata.name) ? object.metadata.name : (oldObject != null && has(oldObject.metadata.name) ? oldObject.metadata.name : '<unnamed>')))";

/// Plain mode: the Workload rules judge only a Workload carrying a hold (left from kueue mode).
/// Rendered in place of `{{ $unheldInPlainMode }}` in plain mode.
pub fn unheld_in_plain_mode() -> String {
    format!(
        "!(request.operation == 'UPDATE' && oldObject != null && {}) || ",
        has_annotation("oldObject", "holdfast.dev/hold-instance")
    )
}

/// `o` (object or oldObject) is suspended (`spec.suspend: true`; absent = false).
pub(crate) fn suspended(o: &str) -> String {
    format!("(has({o}.spec) && has({o}.spec.suspend) && {o}.spec.suspend == true)")
}

/// `o` carries label `k` with value `v`.
pub(crate) fn label_is(o: &str, k: &str, v: &str) -> String {
    format!(
        "(has({o}.metadata.labels) && '{k}' in {o}.metadata.labels && {o}.metadata.labels['{k}'] == '{v}')"
    )
}

/// `o` is labelled `holdfast.dev/managed=true`.
pub(crate) fn managed(o: &str) -> String {
    label_is(o, "holdfast.dev/managed", "true")
}

/// `o` carries annotation `k`.
pub(crate) fn has_annotation(o: &str, k: &str) -> String {
    format!("(has({o}.metadata.annotations) && '{k}' in {o}.metadata.annotations)")
}

/// The value of annotation `k` of `oldObject`, or ''.
pub(crate) fn old_annotation(k: &str) -> String {
    format!(
        "(has(oldObject.metadata.annotations) && '{k}' in oldObject.metadata.annotations ? oldObject.metadata.annotations['{k}'] : '')"
    )
}

/// The queue `o` is in: its queue-name label, or ''.
pub(crate) fn queue(o: &str) -> String {
    format!(
        "((has({o}.metadata.labels) && 'kueue.x-k8s.io/queue-name' in {o}.metadata.labels) ? {o}.metadata.labels['kueue.x-k8s.io/queue-name'] : '')"
    )
}

/// An UPDATE adds, removes or changes key `k` of `metadata.<f>` (a map).
pub(crate) fn key_changes(f: &str, k: &str) -> String {
    format!(
        "((has(object.metadata.{f}) && '{k}' in object.metadata.{f}) != (has(oldObject.metadata.{f}) && '{k}' in oldObject.metadata.{f}) || (has(object.metadata.{f}) && '{k}' in object.metadata.{f} && object.metadata.{f}['{k}'] != oldObject.metadata.{f}['{k}']))"
    )
}

/// Field `f` (a map below object and oldObject) is the same in both; absent and empty are the
/// same (the apiserver omits empty maps).
pub(crate) fn same_map(f: &str) -> String {
    format!(
        "((has(object.{f}) ? object.{f}.size() : 0) == (has(oldObject.{f}) ? oldObject.{f}.size() : 0) && (!has(oldObject.{f}) || oldObject.{f}.all(k, has(object.{f}) && k in object.{f} && object.{f}[k] == oldObject.{f}[k])))"
    )
}

/// The TrainJob ownerReferences of `o` (a list, maybe empty).
pub(crate) fn trainjob_owners(o: &str) -> String {
    format!(
        "(has({o}.metadata.ownerReferences) ? {o}.metadata.ownerReferences.filter(r, r.kind == 'TrainJob' && (r.apiVersion == 'trainer.kubeflow.org' || r.apiVersion.startsWith('trainer.kubeflow.org/'))) : [])"
    )
}

/// An annotation key (the CEL variable `k`) only the controller writes.
pub(crate) fn controller_annotation(k: &str) -> String {
    format!(
        "({k}.startsWith('holdfast.dev/hold-') || {k} == 'holdfast.dev/opened' || {k} == 'holdfast.dev/attempt' || {k} == 'holdfast.dev/admitted-runtime-resource-version')"
    )
}

/// The held kinds' hold finalizer on `o`.
pub(crate) fn hold_finalizer(o: &str) -> String {
    format!("(has({o}.metadata.finalizers) && 'holdfast.dev/hold' in {o}.metadata.finalizers)")
}

/// `o` (object or oldObject) carries holdfast state: an annotation, label or finalizer whose
/// key starts with `holdfast.dev/`.
pub(crate) fn carries(o: &str) -> String {
    format!(
        "({o} != null && ((has({o}.metadata.annotations) && {o}.metadata.annotations.exists(k, k.startsWith('holdfast.dev/'))) || (has({o}.metadata.labels) && {o}.metadata.labels.exists(k, k.startsWith('holdfast.dev/'))) || (has({o}.metadata.finalizers) && {o}.metadata.finalizers.exists(f, f.startsWith('holdfast.dev/')))))"
    )
}

/// An UPDATE unsuspends a TrainJob labelled managed (before or by the update) whose stored
/// version has no opened mark: at its closed start gate. Without outer parentheses: `!(…)` or
/// `… && …` around it.
pub(crate) fn closed_gate_unsuspend() -> String {
    format!(
        "{} && !{} && !{} && ({} || {})",
        suspended("oldObject"),
        suspended("object"),
        has_annotation("oldObject", "holdfast.dev/opened"),
        managed("oldObject"),
        managed("object")
    )
}
