//! What a validating rule is: its name ([`Rule`]), the policy and modes its CEL half belongs
//! to, and the CEL row itself ([`Validation`]).

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

/// A rule's CEL row; its message is `text`, a CEL string expression, followed by the rule's
/// tag.
pub(crate) fn row(
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
        message: format!("{text} + '{}'", rule.tag()),
    }
}
