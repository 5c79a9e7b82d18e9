//! The operation vocabulary: everything the adversary sends, as data. A sequence is a mode,
//! the execution actor's linger time and a list of [`Op`]s; it serialises to the JSON of the
//! corpus files (`tests/adversary-corpus/*.json`), and everything an op needs is in it
//! (instances and deadlines are concrete numbers, not "the current one"), so a sub-sequence
//! means what it meant inside the whole.

use holdfast_core::mode::Mode;
use serde::{Deserialize, Serialize};

/// The TrainJob every sequence is about.
pub const JOB: &str = "job";
/// The LocalQueue whose ClusterQueue requires holdfast's readmission check (Kueue mode).
pub const QUEUE_MAIN: &str = "main";
/// A second LocalQueue, whose ClusterQueue requires no AdmissionCheck.
pub const QUEUE_OTHER: &str = "other";
/// A queue name no LocalQueue has.
pub const QUEUE_NOWHERE: &str = "nowhere";
/// A ConfigMap of the user's own, in every namespace (a target for ownerReferences).
pub const USER_CONFIGMAP: &str = "user-notes";

/// A sequence: what one run executes, in a fresh namespace.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Sequence {
    pub mode: Mode,
    /// How long the execution actor, as the kubelet, takes to end a deleted pod's process
    /// (its grace period: all but the first pod of an execution; the first ends at once).
    pub linger_ms: u32,
    pub ops: Vec<Op>,
}

/// Who sends a write: the ordinary namespace editor, or a pod's ServiceAccount.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Actor {
    /// [`crate::Identity::User`]: bound to the harness's namespaced editor role.
    User,
    /// A ServiceAccount of the namespace with a Role typical for workloads (TrainJobs,
    /// ConfigMaps, pods: every verb; Workloads: read only), acting with a TokenRequest token.
    ServiceAccount,
}

/// How a write is sent.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum PatchKind {
    /// JSON merge patch (RFC 7386).
    Merge,
    /// JSON patch (RFC 6902), computed from a read of the object.
    Json,
    /// Strategic merge patch (custom resources refuse it with 415).
    Strategic,
    /// Server-side apply as the actor's field manager, without force.
    Apply,
    /// Server-side apply with force.
    ApplyForce,
    /// GET, change, PUT (preconditioned on the read's resourceVersion).
    Replace,
}

/// A value for the `kueue.x-k8s.io/queue-name` label.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum QueueChoice {
    Remove,
    Main,
    Other,
    Nowhere,
    Empty,
}

impl QueueChoice {
    /// The label's value; `None` removes it.
    pub fn value(self) -> Option<&'static str> {
        match self {
            QueueChoice::Remove => None,
            QueueChoice::Main => Some(QUEUE_MAIN),
            QueueChoice::Other => Some(QUEUE_OTHER),
            QueueChoice::Nowhere => Some(QUEUE_NOWHERE),
            QueueChoice::Empty => Some(""),
        }
    }
}

/// What an ownerReference edit points at.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum OwnerChoice {
    /// Remove every ownerReference.
    Clear,
    /// The user's own ConfigMap [`USER_CONFIGMAP`].
    UserConfigMap,
    /// An owner that does not exist (the garbage collector then deletes the dependent).
    Dangling,
    /// The TrainJob [`JOB`] (on a ConfigMap or Workload), as controller.
    TrainJob,
}

/// Which runtime `spec.runtimeRef` names.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum RuntimeChoice {
    /// The namespace's runtime (`rt-{ns}`).
    Main,
    /// A second runtime (`rt2-{ns}`), with a different resource request.
    Second,
    /// A runtime that does not exist.
    Missing,
}

/// One field of a TrainJob an edit changes.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum TrainJobField {
    Suspend(bool),
    /// `holdfast.dev/managed`: a value, or `None` to remove it.
    Managed(Option<String>),
    Queue(QueueChoice),
    /// A `holdfast.dev/*` annotation: a value, or `None` to remove it.
    Annotation {
        key: String,
        value: Option<String>,
    },
    Finalizer {
        name: String,
        add: bool,
    },
    OwnerRef(OwnerChoice),
    RuntimeRef(RuntimeChoice),
    /// An unrelated label (`example.com/team`): edits that touch nothing holdfast reads.
    Unrelated(String),
}

/// One field of a Workload an edit changes.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum WorkloadField {
    Active(bool),
    QueueName(QueueChoice),
    Annotation {
        key: String,
        value: Option<String>,
    },
    Finalizer {
        name: String,
        add: bool,
    },
    OwnerRef(OwnerChoice),
    /// `kueue.x-k8s.io/job-uid`: a value, or `None` to remove it.
    JobUidLabel(Option<String>),
}

/// One part of the snapshot ConfigMap an edit changes.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ConfigMapField {
    /// `data.runtime`.
    Data(String),
    Label {
        key: String,
        value: Option<String>,
    },
    Annotation {
        key: String,
        value: Option<String>,
    },
    OwnerRef(OwnerChoice),
    Finalizer {
        name: String,
        add: bool,
    },
}

/// Which pod of the TrainJob's executions a pod op aims at: one of the execution actor's
/// pods of the current TrainJob [`JOB`], of its newest execution or the one before it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct PodChoice {
    /// The execution before the newest one (when there is one).
    pub previous: bool,
    /// Which of that execution's pods (by name, modulo their number).
    pub index: u8,
}

/// `propagationPolicy` of a delete.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Propagation {
    Background,
    Foreground,
    Orphan,
}

/// How a hold-family call is made.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct CallTiming {
    /// The deadline, from the moment the call starts; 0 or less has already passed.
    pub deadline_ms: i64,
    /// A pause between the call's read and its first write (a call delayed in flight).
    pub delay_ms: u32,
    /// Run in the background: later ops go on while it is in flight.
    pub background: bool,
}

/// One operation.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(tag = "op", rename_all = "snake_case")]
pub enum Op {
    /// (Re)create TrainJob [`JOB`].
    CreateTrainJob {
        by: Actor,
        managed: bool,
        /// The queue label (Kueue mode); `None` or `remove`: no label.
        queue: Option<QueueChoice>,
        /// `spec.suspend` as sent; `None`: not sent.
        suspend: Option<bool>,
    },
    EditTrainJob {
        by: Actor,
        how: PatchKind,
        field: TrainJobField,
    },
    /// GET the TrainJob and PUT it back without any `holdfast.dev/` annotation (a
    /// whole-object replace such as `kubectl replace` or a GitOps sync).
    ReplaceTrainJobDroppingHoldfast {
        by: Actor,
    },
    DeleteTrainJob {
        by: Actor,
        propagation: Propagation,
    },
    /// `deletecollection` of every TrainJob of the namespace.
    DeleteAllTrainJobs {
        by: Actor,
    },
    /// An edit of the TrainJob's Workload (`which` picks among several), by the editor.
    EditWorkload {
        which: u8,
        how: PatchKind,
        field: WorkloadField,
    },
    DeleteWorkload {
        which: u8,
    },
    /// A Workload the editor makes, labelled `kueue.x-k8s.io/job-uid=<the TrainJob's uid>`,
    /// with or without a controller ownerReference to the TrainJob.
    CreateDecoyWorkload {
        owner_ref: bool,
        active: bool,
    },
    /// Force-delete (`gracePeriodSeconds: 0`, as `kubectl delete --force --grace-period=0`)
    /// a pod of the TrainJob's current or previous execution.
    ForceDeletePod {
        by: Actor,
        pod: PodChoice,
    },
    /// Remove JobSet's label `jobset.sigs.k8s.io/jobset-name` from a pod of an execution.
    RelabelPod {
        by: Actor,
        how: PatchKind,
        pod: PodChoice,
    },
    /// Re-own a pod of an execution: strip its `ownerReferences` and the Job controller's
    /// label `batch.kubernetes.io/controller-uid` (the Job then no longer manages it).
    ReownPod {
        by: Actor,
        how: PatchKind,
        pod: PodChoice,
    },
    /// A decoy pod labelled `jobset.sigs.k8s.io/jobset-name=<job>`, owned by nothing, bound
    /// to the actor's node (`spec.nodeName`) or not.
    CreateDecoyPod {
        by: Actor,
        bound: bool,
    },
    /// Create `{job}-runtime-snapshot` (before or after the TrainJob).
    CreateSnapshot {
        by: Actor,
        owner_ref: bool,
    },
    EditSnapshot {
        by: Actor,
        how: PatchKind,
        field: ConfigMapField,
    },
    DeleteSnapshot {
        by: Actor,
    },
    /// `deletecollection` of the ConfigMaps labelled as snapshots.
    DeleteAllSnapshots {
        by: Actor,
    },
    /// A platform admin edits the runtime (`cpu` request of the main runtime).
    EditRuntime {
        cpu: String,
    },
    /// Dispatch: Hold(instance).
    Hold {
        instance: u64,
        timing: CallTiming,
    },
    /// Dispatch: Release(instance).
    Release {
        instance: u64,
        timing: CallTiming,
    },
    /// Dispatch: Open.
    Open {
        timing: CallTiming,
    },
    /// Dispatch: Status.
    Status,
    /// Kueue, for a reason of its own: the `DeactivationTarget` condition on the Workload
    /// (Kueue then deactivates and evicts it itself).
    KueueDeactivate {
        reason: String,
    },
    /// The namespace's batch-admin deletes LocalQueue [`QUEUE_MAIN`] and creates it again,
    /// pointing at the ClusterQueue that requires holdfast's readmission check (`gated`) or at
    /// the one that requires none (Kueue mode).
    SwapLocalQueue {
        gated: bool,
    },
    /// A second caller whom RBAC allows every hold call (another supervisor, a person's CLI),
    /// but who is not the holder: Release of the hold in force, or (`replace`) Hold of the
    /// largest instance over it. Not one of dispatch's calls: were it let through, the hold
    /// would end, or a hold appear, outside any of dispatch's calls (the invariants
    /// `hold-lifted-only-by-its-release` and `hold-placed-only-by-hold`).
    SecondCaller {
        replace: bool,
    },
    /// Let the controllers settle.
    Settle {
        ms: u32,
    },
}

impl Op {
    /// A one-line rendering for logs.
    pub fn describe(&self) -> String {
        serde_json::to_string(self).unwrap_or_else(|_| format!("{self:?}"))
    }

    /// The op's kind, and for edits the field: what a violation's signature names.
    pub fn signature(&self) -> String {
        let tag = serde_json::to_value(self)
            .ok()
            .and_then(|v| v.get("op").and_then(|o| o.as_str()).map(str::to_owned))
            .unwrap_or_default();
        let field = match self {
            Op::EditTrainJob { field, .. } => serde_json::to_value(field).ok(),
            Op::EditWorkload { field, .. } => serde_json::to_value(field).ok(),
            Op::EditSnapshot { field, .. } => serde_json::to_value(field).ok(),
            _ => None,
        };
        let field = field.and_then(|f| match f {
            serde_json::Value::String(s) => Some(s),
            serde_json::Value::Object(m) => m.keys().next().cloned(),
            _ => None,
        });
        match field {
            Some(f) => format!("{tag}/{f}"),
            None => tag,
        }
    }

    /// Whether this is one of dispatch's calls.
    pub fn is_dispatch(&self) -> bool {
        matches!(
            self,
            Op::Hold { .. } | Op::Release { .. } | Op::Open { .. } | Op::Status
        )
    }
}

/// One file of the corpus: a sequence that once showed a violation.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct CorpusEntry {
    /// What the sequence tests, in a sentence.
    #[serde(default)]
    pub title: String,
    /// The generator's seed it came from (`None` if written by hand).
    #[serde(default)]
    pub seed: Option<u64>,
    /// The invariant it violated, and the violation as printed.
    pub invariant: String,
    pub violation: String,
    #[serde(flatten)]
    pub sequence: Sequence,
}
