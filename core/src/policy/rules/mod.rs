//! Every rule the validating webhook refuses by, one row each: its id, the policy and modes
//! it belongs to, and, for the rules the apiserver can judge itself, its CEL and message.
//!
//! The Rust half of each rule is in [`validate`](super::validate), where every refusal names
//! its [`Rule`]; the CEL half is here. The chart's `templates/admissionpolicies.yaml` and
//! `templates/_rule_conditions.tpl` are generated from this file ([`chart`]; a test diffs
//! them, `HOLDFAST_BLESS=1` rewrites them), and a test evaluates the CEL with a CEL
//! interpreter over the Rust rules' case table, comparing the rule that refuses
//! (`parity_tests`). The apiserver oracle (`tests/tests/it/validation_engines.rs`) stays the
//! final word.
//!
//! A rule changed is changed in its row and its predicate; `cargo test -p holdfast-core
//! policy::rules` says within seconds whether the two still agree, rule by rule.
//!
//! Placeholders in the CEL text are the chart's (values it renders from `identities`):
//! `{{ $controllers }}`, `{{ $kueueUsers }}`, `{{ $deletersProper }}` (CEL lists),
//! `{{ $ctlDesc }}`, `{{ $kueueDesc }}`, `{{ $creatorsDesc }}`, `{{ $deletersDesc }}` (words
//! for messages), `{{ $unheldInPlainMode }}` ([`unheld_in_plain_mode`] in plain mode, nothing
//! in kueue mode), and in the match conditions `{{ $creators }}`, `{{ $deleters }}`,
//! `{{ $kueue }}`.

pub mod chart;
pub mod conditions;

#[cfg(test)]
mod parity_tests;

use std::fmt;

/// One refusal of the validating webhook, named.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Rule {
    /// A snapshot is created only by the controller and the snapshot creators.
    SnapshotCreate,
    /// A snapshot a TrainJob controls is deleted only by the controller and the deleters.
    SnapshotDelete,
    /// A snapshot is updated only by the controller and the deleters.
    SnapshotUpdate,
    /// A snapshot's data is never rewritten, not even by the controller.
    SnapshotContent,
    /// A snapshot deleter changes only ownerReferences and finalizers.
    SnapshotDeleterUpdate,
    /// Controller annotations on a CREATE: only the controller's.
    ControllerAnnotationAdded,
    /// Controller annotations added, removed or changed by an UPDATE: only the controller's.
    ControllerAnnotationChanged,
    /// The hold finalizer is the controller's.
    HoldFinalizer,
    /// Kueue mode: a TrainJob held in plain mode is unsuspended by nobody, Kueue included.
    KueuePlainHoldUnsuspend,
    /// Kueue mode: a TrainJob's `spec.suspend` is Kueue's.
    KueueSuspend,
    /// Kueue mode: a TrainJob marked for a hold is unsuspended by nobody.
    KueueMarkedUnsuspend,
    /// Kueue mode: a managed TrainJob at its closed start gate is unsuspended by nobody.
    KueueGateUnsuspend,
    /// Both modes: the `managed` label stays while the start gate is closed.
    StartGateLabel,
    /// Kueue mode: a suspended or gated TrainJob keeps its queue.
    KueueQueueStays,
    /// Kueue mode: a suspended or gated TrainJob keeps its prebuilt Workload name.
    KueuePrebuiltStays,
    /// Kueue mode: a managed TrainJob is queued.
    KueueManagedQueued,
    /// Plain mode: a managed TrainJob is created suspended.
    PlainManagedCreatedSuspended,
    /// Plain mode: a held TrainJob is unsuspended only by the controller.
    PlainHeldUnsuspend,
    /// Plain mode: a managed TrainJob at its closed start gate is unsuspended only by the
    /// controller.
    PlainGateUnsuspend,
    /// Only Kueue makes a Workload a TrainJob's.
    WorkloadOwnerAdded,
    /// Only Kueue (and the garbage collector) unmakes a Workload a TrainJob's.
    WorkloadOwnerKept,
    /// Only Kueue sets a TrainJob's Workload's job-uid label.
    WorkloadJobUid,
    /// A held Workload's `spec.active` is flipped only by the controller.
    WorkloadHeldActive,
    /// A held Workload stays in its queue.
    WorkloadHeldQueue,
    // The rules below need what CEL cannot give: a lookup, or the request's dry-run flag.
    /// The controller's arming probe, refused so that it sees the webhook answer.
    ArmingProbe,
    /// A request the rules cannot read.
    Malformed,
    /// Kueue mode: a TrainJob is queued only where holdfast's readmission check is required.
    QueueGated,
    /// A TrainJob whose Workload carries a hold is unsuspended by nobody (a lookup).
    WorkloadHoldUnsuspend,
    /// The Workloads of an unsuspended TrainJob could not be read.
    WorkloadLookupFailed,
    /// A Workload whose pods request nothing its ClusterQueue covers.
    WorkloadRequests,
}

impl Rule {
    /// The rule's id, as its messages end (`[rule <id>]`).
    pub fn id(self) -> &'static str {
        match self {
            Rule::SnapshotCreate => "snapshot-create",
            Rule::SnapshotDelete => "snapshot-delete",
            Rule::SnapshotUpdate => "snapshot-update",
            Rule::SnapshotContent => "snapshot-content",
            Rule::SnapshotDeleterUpdate => "snapshot-deleter-update",
            Rule::ControllerAnnotationAdded => "controller-annotation-added",
            Rule::ControllerAnnotationChanged => "controller-annotation-changed",
            Rule::HoldFinalizer => "hold-finalizer",
            Rule::KueuePlainHoldUnsuspend => "kueue-plain-hold-unsuspend",
            Rule::KueueSuspend => "kueue-suspend",
            Rule::KueueMarkedUnsuspend => "kueue-marked-unsuspend",
            Rule::KueueGateUnsuspend => "kueue-gate-unsuspend",
            Rule::StartGateLabel => "start-gate-label",
            Rule::KueueQueueStays => "kueue-queue-stays",
            Rule::KueuePrebuiltStays => "kueue-prebuilt-stays",
            Rule::KueueManagedQueued => "kueue-managed-queued",
            Rule::PlainManagedCreatedSuspended => "plain-managed-created-suspended",
            Rule::PlainHeldUnsuspend => "plain-held-unsuspend",
            Rule::PlainGateUnsuspend => "plain-gate-unsuspend",
            Rule::WorkloadOwnerAdded => "workload-owner-added",
            Rule::WorkloadOwnerKept => "workload-owner-kept",
            Rule::WorkloadJobUid => "workload-job-uid",
            Rule::WorkloadHeldActive => "workload-held-active",
            Rule::WorkloadHeldQueue => "workload-held-queue",
            Rule::ArmingProbe => "arming-probe",
            Rule::Malformed => "malformed",
            Rule::QueueGated => "queue-gated",
            Rule::WorkloadHoldUnsuspend => "workload-hold-unsuspend",
            Rule::WorkloadLookupFailed => "workload-lookup-failed",
            Rule::WorkloadRequests => "workload-requests",
        }
    }

    /// The end of every message this rule refuses with.
    pub fn tag(self) -> String {
        format!(" [rule {}]", self.id())
    }
}

impl fmt::Display for Rule {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.id())
    }
}

/// The ValidatingAdmissionPolicy a row belongs to: one per kind, so that the apiserver's
/// type check reads each rule against its own kind's schema.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Policy {
    Snapshots,
    TrainJobs,
    Workloads,
}

impl Policy {
    pub const ALL: [Policy; 3] = [Policy::Snapshots, Policy::TrainJobs, Policy::Workloads];

    /// The policy's name after the chart's prefix, and the resource it judges.
    pub fn suffix(self) -> &'static str {
        match self {
            Policy::Snapshots => "snapshots",
            Policy::TrainJobs => "trainjobs",
            Policy::Workloads => "workloads",
        }
    }
}

/// The modes a row is rendered in.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Modes {
    Both,
    Plain,
    Kueue,
}

/// One validating rule's CEL half.
#[derive(Clone, Debug)]
pub struct Validation {
    pub rule: Rule,
    pub policy: Policy,
    pub modes: Modes,
    /// Why it exists, rendered as a comment above it.
    pub note: &'static str,
    /// True when the request may go on.
    pub expression: String,
    /// The refusal's message (a CEL string expression); ends with the rule's tag.
    pub message: String,
}

/// A named CEL expression of a policy (`variables.<name>`).
#[derive(Clone, Debug)]
pub struct Variable {
    pub name: &'static str,
    pub note: &'static str,
    pub expression: String,
}

// ---------------------------------------------------------------------------------------------
// CEL building blocks

pub(crate) const USER: &str = "request.userInfo.username";

/// The object's `namespace/name`, also for a deletecollection's requests (no name).
const REF: &str = "(has(request.namespace) ? request.namespace : '') + '/' + (has(request.name) && request.name != '' ? request.name : (object != null && has(object.metadata.name) ? object.metadata.name : (oldObject != null && has(oldObject.metadata.name) ? oldObject.metadata.name : '<unnamed>')))";

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
fn old_annotation(k: &str) -> String {
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
fn same_map(f: &str) -> String {
    format!(
        "((has(object.{f}) ? object.{f}.size() : 0) == (has(oldObject.{f}) ? oldObject.{f}.size() : 0) && (!has(oldObject.{f}) || oldObject.{f}.all(k, has(object.{f}) && k in object.{f} && object.{f}[k] == oldObject.{f}[k])))"
    )
}

/// The TrainJob ownerReferences of `o` (a list, maybe empty).
fn trainjob_owners(o: &str) -> String {
    format!(
        "(has({o}.metadata.ownerReferences) ? {o}.metadata.ownerReferences.filter(r, r.kind == 'TrainJob' && (r.apiVersion == 'trainer.kubeflow.org' || r.apiVersion.startsWith('trainer.kubeflow.org/'))) : [])"
    )
}

/// An annotation key (the CEL variable `k`) only the controller writes.
fn controller_annotation(k: &str) -> String {
    format!(
        "({k}.startsWith('holdfast.dev/hold-') || {k} == 'holdfast.dev/opened' || {k} == 'holdfast.dev/attempt' || {k} == 'holdfast.dev/admitted-runtime-resource-version')"
    )
}

/// The held kinds' hold finalizer on `o`.
fn hold_finalizer(o: &str) -> String {
    format!("(has({o}.metadata.finalizers) && 'holdfast.dev/hold' in {o}.metadata.finalizers)")
}

/// A rule's message: `text`, a CEL string expression, followed by the rule's tag.
fn message(rule: Rule, text: &str) -> String {
    format!("{text} + '{}'", rule.tag())
}

// ---------------------------------------------------------------------------------------------
// The rows

/// The variables a policy's rules read, in order.
pub fn variables(policy: Policy) -> Vec<Variable> {
    let mut out = vec![Variable {
        name: "controller",
        note: "",
        expression: format!("{USER} in {{{{ $controllers }}}}"),
    }];
    if policy != Policy::Snapshots {
        out.push(Variable {
            name: "kueue",
            note: "",
            expression: format!("{USER} in {{{{ $kueueUsers }}}}"),
        });
    }
    out.push(Variable {
        name: "deleter",
        note: "",
        expression: format!("{USER} in {{{{ $deletersProper }}}}"),
    });
    match policy {
        Policy::Snapshots => {
            out.push(Variable {
                name: "what",
                note: "",
                expression: format!("'ConfigMap ' + {REF}"),
            });
            let label_new = label_is("object", "holdfast.dev/runtime-snapshot", "true");
            let label_old = label_is("oldObject", "holdfast.dev/runtime-snapshot", "true");
            out.push(Variable {
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
            });
        }
        Policy::TrainJobs | Policy::Workloads => {
            let kind = if policy == Policy::TrainJobs {
                "TrainJob"
            } else {
                "Workload"
            };
            out.push(Variable {
                name: "what",
                note: "",
                expression: format!("'{kind} ' + {REF}"),
            });
            let admitted = if policy == Policy::TrainJobs {
                " && k != 'holdfast.dev/admitted-runtime-resource-version'"
            } else {
                ""
            };
            out.push(Variable {
                name: "added",
                note: if policy == Policy::TrainJobs {
                    "The controller annotations a CREATE carries (but the admitted runtime version, which the mutating webhook has just set or removed)."
                } else {
                    "The controller annotations a CREATE carries."
                },
                expression: format!(
                    "request.operation == 'CREATE' && has(object.metadata.annotations)\n? object.metadata.annotations.filter(k, {}{admitted})\n: []",
                    controller_annotation("k")
                ),
            });
            let ca = controller_annotation("k");
            out.push(Variable {
                name: "changed",
                note: "The controller annotations an UPDATE adds, removes or changes.",
                expression: format!(
                    "request.operation != 'UPDATE' ? [] : (has(oldObject.metadata.annotations) ? oldObject.metadata.annotations.filter(k, {ca} && !(has(object.metadata.annotations) && k in object.metadata.annotations && object.metadata.annotations[k] == oldObject.metadata.annotations[k])) : []) + (has(object.metadata.annotations) ? object.metadata.annotations.filter(k, {ca} && !(has(oldObject.metadata.annotations) && k in oldObject.metadata.annotations)) : [])"
                ),
            });
            if policy == Policy::Workloads {
                out.push(Variable {
                    name: "newOwners",
                    note: "",
                    expression: trainjob_owners("object"),
                });
                out.push(Variable {
                    name: "oldOwners",
                    note: "",
                    expression: format!(
                        "oldObject == null ? [] : {}",
                        trainjob_owners("oldObject")
                    ),
                });
            } else {
                out.push(Variable {
                    name: "gateClosed",
                    note: "",
                    expression: format!(
                        "oldObject != null\n&& {}\n&& !{}",
                        managed("oldObject"),
                        has_annotation("oldObject", "holdfast.dev/opened")
                    ),
                });
            }
        }
    }
    out
}

/// Every validating rule with a CEL half, in the order the webhook checks them.
pub fn validations() -> Vec<Validation> {
    let mut out = snapshot_rows();
    for policy in [Policy::TrainJobs, Policy::Workloads] {
        out.extend(held_kind_rows(policy));
    }
    out.extend(trainjob_rows());
    out.extend(workload_rows());
    out
}

fn row(
    rule: Rule,
    policy: Policy,
    modes: Modes,
    note: &'static str,
    expression: String,
    text: &str,
) -> Validation {
    Validation {
        rule,
        policy,
        modes,
        note,
        expression,
        message: message(rule, text),
    }
}

fn snapshot_rows() -> Vec<Validation> {
    let s = Policy::Snapshots;
    let (data, binary) = (same_map("data"), same_map("binaryData"));
    let (labels, annotations) = (
        same_map("metadata.labels"),
        same_map("metadata.annotations"),
    );
    vec![
        row(
            Rule::SnapshotCreate,
            s,
            Modes::Both,
            "",
            "request.operation != 'CREATE' || variables.evidence == ''".to_owned(),
            &format!(
                "variables.what + ' is a runtime snapshot (' + variables.evidence + '); snapshots are created only by {{{{ $creatorsDesc }}}}; user ' + {USER} + ' may not create it'"
            ),
        ),
        row(
            Rule::SnapshotDelete,
            s,
            Modes::Both,
            "An orphaned snapshot (no controller ownerReference) protects no TrainJob any more.",
            "request.operation != 'DELETE'\n|| variables.evidence == ''\n|| !(has(oldObject.metadata.ownerReferences) && oldObject.metadata.ownerReferences.exists(r, has(r.controller) && r.controller == true))".to_owned(),
            &format!(
                "variables.what + ' is a runtime snapshot (' + variables.evidence + '); it is deleted only by {{{{ $deletersDesc }}}} (with the TrainJob that owns it); user ' + {USER} + ' may not delete it'"
            ),
        ),
        row(
            Rule::SnapshotUpdate,
            s,
            Modes::Both,
            "",
            "request.operation != 'UPDATE'\n|| variables.evidence == ''\n|| variables.controller\n|| variables.deleter".to_owned(),
            &format!(
                "variables.what + ' is a runtime snapshot (' + variables.evidence + '); a snapshot is written only by {{{{ $ctlDesc }}}} and never rewritten; user ' + {USER} + ' may not update it'"
            ),
        ),
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
        ),
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
        ),
    ]
}

/// The rules of both held kinds (TrainJobs and Workloads): the controller's annotations and
/// the hold finalizer, plus, for TrainJobs in kueue mode, a plain-mode hold's unsuspend (the
/// webhook checks it before the finalizer).
fn held_kind_rows(policy: Policy) -> Vec<Validation> {
    let (fin_new, fin_old) = (hold_finalizer("object"), hold_finalizer("oldObject"));
    let mut out = vec![
        row(
            Rule::ControllerAnnotationAdded,
            policy,
            Modes::Both,
            "Controller annotations and the hold finalizer: only the controller writes them.",
            "variables.controller || variables.added.size() == 0".to_owned(),
            &format!(
                "'metadata.annotations[' + variables.added[0] + '] of ' + variables.what + ' is written only by {{{{ $ctlDesc }}}}; user ' + {USER} + ' may not add it'"
            ),
        ),
        row(
            Rule::ControllerAnnotationChanged,
            policy,
            Modes::Both,
            "",
            "variables.controller || variables.changed.size() == 0".to_owned(),
            &format!(
                "'metadata.annotations[' + variables.changed[0] + '] of ' + variables.what + ' is written only by {{{{ $ctlDesc }}}}; user ' + {USER} + ' may not ' + (!(has(oldObject.metadata.annotations) && variables.changed[0] in oldObject.metadata.annotations) ? 'add it' : !(has(object.metadata.annotations) && variables.changed[0] in object.metadata.annotations) ? 'remove it' : 'change it from \"' + oldObject.metadata.annotations[variables.changed[0]] + '\" to \"' + object.metadata.annotations[variables.changed[0]] + '\"')"
            ),
        ),
    ];
    if policy == Policy::TrainJobs {
        let (so, sn) = (suspended("oldObject"), suspended("object"));
        out.push(row(
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
        ));
    }
    out.push(row(
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
    ));
    out
}

fn trainjob_rows() -> Vec<Validation> {
    let t = Policy::TrainJobs;
    let (so, sn) = (suspended("oldObject"), suspended("object"));
    let (mo, mn) = (managed("oldObject"), managed("object"));
    let opened_old = has_annotation("oldObject", "holdfast.dev/opened");
    let held_old = has_annotation("oldObject", "holdfast.dev/hold-instance");
    let (qo, qn) = (queue("oldObject"), queue("object"));
    vec![
        row(
            Rule::KueueSuspend,
            t,
            Modes::Kueue,
            "kueue mode: spec.suspend of a TrainJob is Kueue's, the controller's included.",
            format!("request.operation != 'UPDATE'\n|| variables.kueue\n|| {so} == {sn}"),
            &format!(
                "'spec.suspend of ' + variables.what + ' is Kueue\\'s in kueue mode, whatever labels the TrainJob carries, and changed only by {{{{ $kueueDesc }}}}; user ' + {USER} + ' may not change it from ' + string({so}) + ' to ' + string({sn}) + ' (holds are lifted with Release, start gates opened with Open)'"
            ),
        ),
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
        ),
        row(
            Rule::KueueGateUnsuspend,
            t,
            Modes::Kueue,
            "A managed TrainJob whose stored version has no opened mark is unsuspended by nobody, Kueue included: a readmission check turned Ready while the job was unmanaged stays Ready once the label is added, and Kueue admits on it.",
            format!(
                "variables.controller\n|| request.operation != 'UPDATE'\n|| !({so} && !{sn} && !{opened_old} && ({mo} || {mn}))"
            ),
            &format!(
                "'spec.suspend of ' + variables.what + ': it is labelled holdfast.dev/managed=true and its start gate is closed (no holdfast.dev/opened); it stays suspended until {{{{ $ctlDesc }}}} opens it, through Open; user ' + {USER} + ' may not unsuspend it, Kueue included (Kueue admitted it on a readmission check that was Ready before the label was added: it unsuspends the job once Open has written the mark)'"
            ),
        ),
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
        ),
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
        ),
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
        ),
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
        ),
        row(
            Rule::PlainManagedCreatedSuspended,
            t,
            Modes::Plain,
            "plain mode: a managed TrainJob is created at its closed start gate; a held or gated one is unsuspended only by the controller.",
            format!("variables.controller\n|| request.operation != 'CREATE'\n|| !{mn}\n|| {sn}"),
            &format!(
                "'spec.suspend of ' + variables.what + ': a TrainJob labelled holdfast.dev/managed=true is created at its closed start gate (spec.suspend: true), which only {{{{ $ctlDesc }}}} opens; user ' + {USER} + ' may not create it unsuspended'"
            ),
        ),
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
        ),
        row(
            Rule::PlainGateUnsuspend,
            t,
            Modes::Plain,
            "",
            format!(
                "variables.controller\n|| request.operation != 'UPDATE'\n|| !({so} && !{sn} && !{opened_old} && ({mo} || {mn}))"
            ),
            &format!(
                "'spec.suspend of ' + variables.what + ': it is labelled holdfast.dev/managed=true and its start gate is closed (no holdfast.dev/opened); only {{{{ $ctlDesc }}}} opens it, through Open; user ' + {USER} + ' may not unsuspend it'"
            ),
        ),
    ]
}

fn workload_rows() -> Vec<Validation> {
    let w = Policy::Workloads;
    let held_old = has_annotation("oldObject", "holdfast.dev/hold-instance");
    let hold = old_annotation("holdfast.dev/hold-instance");
    let same_owner = "s.uid == r.uid && (has(s.controller) && s.controller) == (has(r.controller) && r.controller)";
    let inactive = |o: &str| format!("(has({o}.spec.active) && {o}.spec.active == false)");
    vec![
        row(
            Rule::WorkloadOwnerAdded,
            w,
            Modes::Both,
            "Workloads: only Kueue makes one a TrainJob's, or unmakes it; a held one stays inactive and in its queue. In plain mode these rules judge only a Workload that carries a hold (one placed in kueue mode, before a switch to plain mode: it is honoured until its holder releases it).",
            format!(
                "{{{{ $unheldInPlainMode }}}}variables.controller\n|| variables.kueue\n|| !variables.newOwners.exists(r, !variables.oldOwners.exists(s, {same_owner}))"
            ),
            &format!(
                "'metadata.ownerReferences of ' + variables.what + ': a Workload owned by a TrainJob is created by {{{{ $kueueDesc }}}} alone (holdfast holds the TrainJob through it); user ' + {USER} + ' may not make a Workload a TrainJob\\'s'"
            ),
        ),
        row(
            Rule::WorkloadOwnerKept,
            w,
            Modes::Both,
            "",
            format!(
                "{{{{ $unheldInPlainMode }}}}variables.controller\n|| variables.kueue\n|| variables.deleter\n|| request.operation != 'UPDATE'\n|| !variables.oldOwners.exists(r, !variables.newOwners.exists(s, {same_owner}))"
            ),
            &format!(
                "'metadata.ownerReferences of ' + variables.what + ': its TrainJob ownerReference makes it the TrainJob\\'s Workload, the one holdfast holds the TrainJob through; only {{{{ $kueueDesc }}}} (and the garbage collector, for an orphaning delete) may remove or change it; user ' + {USER} + ' may not'"
            ),
        ),
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
        ),
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
        ),
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
        ),
    ]
}
