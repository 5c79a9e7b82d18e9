//! The invariants, checked over the whole merged history of a namespace (every version of
//! its TrainJobs, Workloads, ConfigMaps and pods, in resourceVersion order) and the log of
//! dispatch's calls. The checker replays the history, keeping the world as it was after each
//! write, and judges every state, every transition and every answer; nothing is sampled.
//!
//! The exact definitions are in the README ("The adversary"); each [`Invariant`] says what it
//! checks.

use super::history::{Event, Kind};
use super::ops::JOB;
use holdfast_core::execution::finalizer::KUBELET_MANAGER;
use holdfast_core::hold::classify::trainjob_finished;
use holdfast_core::hold::{HoldError, Outcome, RejectCause, Status, object};
use holdfast_core::mode::Mode;
use holdfast_core::names::{
    ANN_HOLD_INSTANCE, LABEL_MANAGED, LABEL_RUNTIME_SNAPSHOT, SNAPSHOT_SUFFIX,
};
use serde::{Deserialize, Serialize};
use serde_json::Value;
use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::fmt;
use std::time::{Duration, Instant};

/// The execution actor's labels and annotations on the pods it creates.
pub const LABEL_JOBSET_NAME: &str = "jobset.sigs.k8s.io/jobset-name";
pub const LABEL_POD_UID: &str = "adversary.holdfast.test/trainjob-uid";
pub const LABEL_POD_EXECUTION: &str = "adversary.holdfast.test/execution";
pub const ANN_POD_TRIGGER_RV: &str = "adversary.holdfast.test/trigger-rv";
/// The field manager the execution actor creates its pods as: a pod created by anyone else
/// (an editor's decoy) is no execution's, whatever its labels.
pub const ACTOR_MANAGER: &str = "adversary-actor";
/// Field managers of the editor's and the ServiceAccount's writes.
pub const USER_MANAGER: &str = "adversary-user";
pub const SA_MANAGER: &str = "adversary-sa";
/// Field managers allowed to create a snapshot owned by a TrainJob: holdfast's snapshot
/// reconciler and Kubeflow Trainer.
pub const SNAPSHOT_WRITERS: [&str; 2] = ["holdfast", "trainer"];
/// How long Kueue may take to suspend a TrainJob after its Workload is held.
pub const LIVENESS: Duration = Duration::from_secs(10);

/// The invariants.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Invariant {
    /// Plain: every TrainJob version carrying a hold is suspended. Kueue: every Workload
    /// version carrying a hold is inactive.
    HeldObjectStopped,
    /// No TrainJob goes from suspended to unsuspended while a hold is in force on it, and
    /// the execution actor starts no pods from a version at which it was held and stopped.
    HeldJobStaysStopped,
    /// Kueue: a TrainJob whose Workload carries a hold is suspended within [`LIVENESS`].
    HeldJobIsStopped,
    /// A hold in force ends only inside a window of a `Release` of that instance (or with its
    /// TrainJob's deletion).
    HoldLiftedOnlyByItsRelease,
    /// A hold appears only inside a window of a `Hold` of that instance, and never replaces
    /// a newer one.
    HoldPlacedOnlyByHold,
    /// A TrainJob at its closed start gate — created labelled `holdfast.dev/managed: "true"`,
    /// or later managed, suspended and never opened — is suspended in every version until
    /// one carries the opened mark, and no pod is started for it meanwhile.
    ClosedGateStaysClosed,
    /// The opened mark appears only inside a window of an `Open`.
    OpenedOnlyByOpen,
    /// A snapshot owned by a TrainJob never changes `data`/`binaryData`.
    SnapshotBytesNeverChange,
    /// A snapshot owned by a TrainJob was written by holdfast (or Trainer) at creation with
    /// that owner, is named after that TrainJob, and is never re-pointed or adopted.
    SnapshotBelongsToItsTrainJob,
    /// When a TrainJob is let run again (suspended → unsuspended) by anyone but its own
    /// editor, no process of an earlier execution of it can still run: no pod the execution
    /// actor made for it whose end its kubelet has not reported, whether its object exists,
    /// was force-deleted, relabelled or re-owned ([`Proc::can_run`]).
    ExecutionsNeverOverlap,
    /// Every answer of the hold API is true of what the apiserver held during the call.
    AnswersAreTrue,
    /// SPEC: "Release restores what the hold found": a hold placed on an object someone
    /// else had already stopped (plain: an opened TrainJob suspended without a hold; Kueue: a
    /// Workload deactivated without a hold) leaves it stopped when released.
    ReleaseRestoresWhatTheHoldFound,
}

impl Invariant {
    pub fn id(self) -> String {
        serde_json::to_value(self)
            .ok()
            .and_then(|v| v.as_str().map(str::to_owned))
            .unwrap_or_default()
    }
}

impl fmt::Display for Invariant {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.id())
    }
}

/// One broken invariant.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Violation {
    pub invariant: Invariant,
    /// The resourceVersion of the write at which it was seen.
    pub rv: u64,
    pub message: String,
}

impl fmt::Display for Violation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "[{}] at rv {}: {}",
            self.invariant, self.rv, self.message
        )
    }
}

/// Which hold-family call.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CallKind {
    Hold(u64),
    Release(u64),
    Open,
    Status,
}

/// What a call answered.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Answer {
    /// Still in flight.
    Pending,
    Outcome(Outcome),
    Status(Box<Status>),
    Error(HoldError),
}

impl Answer {
    /// The answer says the call wrote nothing, and no request of it can land later.
    fn says_nothing_written(&self) -> bool {
        match self {
            Answer::Error(e) => match e {
                HoldError::Rejected { cause, .. } => *cause != RejectCause::DeadlinePassed,
                HoldError::PodsRemain
                | HoldError::Invalid { .. }
                | HoldError::Unsupported { .. }
                | HoldError::Conflict { .. } => true,
                // Its write may or may not have landed.
                HoldError::Unknown { .. } => false,
            },
            _ => false,
        }
    }

    /// A request of the call may still land after it answered (within CallBound).
    fn may_land_later(&self) -> bool {
        match self {
            Answer::Pending => true,
            Answer::Error(HoldError::Rejected { cause, .. }) => {
                *cause == RejectCause::DeadlinePassed
            }
            // The executor stopped waiting; a request of it may still be in flight.
            Answer::Error(HoldError::Unknown { .. }) => true,
            _ => false,
        }
    }

    pub fn describe(&self) -> String {
        match self {
            Answer::Pending => "pending".to_owned(),
            Answer::Outcome(o) => format!("Ok({o:?})"),
            Answer::Status(s) => format!(
                "Status(hold {:?}, opened {}, A {}, {:?})",
                s.hold.as_ref().map(|h| h.instance),
                s.opened,
                s.attempt,
                s.state
            ),
            Answer::Error(e) => format!("Err({}: {e})", e.kind()),
        }
    }
}

/// One of dispatch's calls: when it ran, in resourceVersions, and what it answered.
#[derive(Clone, Debug)]
pub struct CallRecord {
    /// The op's index in the sequence.
    pub step: usize,
    pub kind: CallKind,
    /// A resourceVersion read (quorum) just before the call started: every write of the
    /// call is after it.
    pub rv_before: u64,
    /// One read just after it answered: every write the call made before answering is at
    /// or before it. `None` while in flight.
    pub rv_after: Option<u64>,
    pub answer: Answer,
}

impl CallRecord {
    fn name(&self) -> String {
        match self.kind {
            CallKind::Hold(k) => format!("Hold({k})"),
            CallKind::Release(k) => format!("Release({k})"),
            CallKind::Open => "Open".to_owned(),
            CallKind::Status => "Status".to_owned(),
        }
    }

    /// Whether a write at `rv` may be this call's.
    fn covers(&self, rv: u64) -> bool {
        if rv <= self.rv_before {
            return false;
        }
        match self.rv_after {
            Some(after) if !self.answer.may_land_later() => rv <= after,
            _ => true,
        }
    }
}

/// What the checker is asked.
pub struct Check<'a> {
    pub mode: Mode,
    pub events: &'a [Event],
    pub calls: &'a [CallRecord],
    /// Judge only events at or below this resourceVersion (the history is complete to here).
    pub upto: u64,
    /// The end of the run: liveness is judged too.
    pub last: bool,
}

// -------------------------------------------------------------------------------------------
// Reading objects

fn name(o: &Value) -> &str {
    o.pointer("/metadata/name")
        .and_then(Value::as_str)
        .unwrap_or_default()
}

fn label<'a>(o: &'a Value, key: &str) -> Option<&'a str> {
    o.pointer("/metadata/labels")
        .and_then(|l| l.get(key))
        .and_then(Value::as_str)
}

fn annotation<'a>(o: &'a Value, key: &str) -> Option<&'a str> {
    object::annotation(o, key)
}

fn suspended(tj: &Value) -> bool {
    tj.pointer("/spec/suspend").and_then(Value::as_bool) == Some(true)
}

fn active(wl: &Value) -> bool {
    wl.pointer("/spec/active").and_then(Value::as_bool) != Some(false)
}

fn deleting(o: &Value) -> bool {
    o.pointer("/metadata/deletionTimestamp")
        .is_some_and(|t| !t.is_null())
}

fn managed(tj: &Value) -> bool {
    label(tj, LABEL_MANAGED) == Some("true")
}

fn finished(tj: &Value) -> bool {
    trainjob_finished(tj.pointer("/status/conditions").unwrap_or(&Value::Null)).is_some()
}

/// The hold an object's annotations carry: `None` if none, `Some(None)` if unreadable.
fn hold_of(o: &Value) -> Option<Option<u64>> {
    annotation(o, ANN_HOLD_INSTANCE).map(|v| {
        if !v.is_empty() && v.bytes().all(|b| b.is_ascii_digit()) {
            v.parse().ok()
        } else {
            None
        }
    })
}

fn show_hold(h: Option<Option<u64>>) -> String {
    match h {
        None => "no hold".to_owned(),
        Some(None) => "an unreadable hold".to_owned(),
        Some(Some(k)) => format!("hold {k}"),
    }
}

/// The uid of the TrainJob `o` names as its controller owner.
fn controller_owner(o: &Value) -> Option<String> {
    o.pointer("/metadata/ownerReferences")
        .and_then(Value::as_array)?
        .iter()
        .find(|r| r.get("controller").and_then(Value::as_bool) == Some(true))
        .filter(|r| r.get("kind").and_then(Value::as_str) == Some("TrainJob"))
        .and_then(|r| r.get("uid").and_then(Value::as_str))
        .map(str::to_owned)
}

/// Kueue's label naming a Workload's job.
pub const JOB_UID_LABEL: &str = "kueue.x-k8s.io/job-uid";

/// Whether Workload `w` is TrainJob `uid`'s: its controller ownerReference (SPEC's
/// definition) or its `kueue.x-k8s.io/job-uid` label (how the hold API and the gate find
/// it) names the TrainJob. Either way, a hold on it is a hold on the TrainJob, and whatever
/// it lets run is the TrainJob.
fn workload_of(w: &Value, uid: &str) -> bool {
    controller_owner(w).as_deref() == Some(uid) || label(w, JOB_UID_LABEL) == Some(uid)
}

/// The TrainJobs Workload `w` belongs to (see [`workload_of`]).
fn workload_owners(w: &Value) -> Vec<String> {
    let mut out: Vec<String> = controller_owner(w).into_iter().collect();
    if let Some(l) = label(w, JOB_UID_LABEL)
        && !out.iter().any(|o| o == l)
    {
        out.push(l.to_owned());
    }
    out
}

/// The managers owning `spec.suspend`, from `managedFields`.
fn suspend_owners(tj: &Value) -> Vec<String> {
    tj.pointer("/metadata/managedFields")
        .and_then(Value::as_array)
        .map(|entries| {
            entries
                .iter()
                .filter(|e| e.pointer("/fieldsV1/f:spec/f:suspend").is_some())
                .filter_map(|e| e.get("manager").and_then(Value::as_str).map(str::to_owned))
                .collect()
        })
        .unwrap_or_default()
}

/// The managers whose managedFields entries were written last (the latest `time`): who
/// made this version, as far as managedFields can tell (to the second).
fn last_writers(o: &Value) -> Vec<String> {
    let entries: Vec<&Value> = o
        .pointer("/metadata/managedFields")
        .and_then(Value::as_array)
        .map(|a| a.iter().collect())
        .unwrap_or_default();
    let latest = entries
        .iter()
        .filter_map(|e| e.get("time").and_then(Value::as_str))
        .max()
        .unwrap_or_default()
        .to_owned();
    entries
        .iter()
        .filter(|e| e.get("time").and_then(Value::as_str) == Some(latest.as_str()))
        .filter_map(|e| e.get("manager").and_then(Value::as_str).map(str::to_owned))
        .collect()
}

/// The manager that created `o` (its first managedFields entry).
fn creator(o: &Value) -> String {
    o.pointer("/metadata/managedFields/0/manager")
        .and_then(Value::as_str)
        .unwrap_or("?")
        .to_owned()
}

fn is_user_manager(m: &str) -> bool {
    m == USER_MANAGER || m == SA_MANAGER
}

fn snapshot_like(cm: &Value) -> bool {
    name(cm).ends_with(SNAPSHOT_SUFFIX) || label(cm, LABEL_RUNTIME_SNAPSHOT).is_some()
}

fn content(cm: &Value) -> (Value, Value) {
    (
        cm.get("data").cloned().unwrap_or(Value::Null),
        cm.get("binaryData").cloned().unwrap_or(Value::Null),
    )
}

// -------------------------------------------------------------------------------------------
// The world, replayed

#[derive(Default)]
struct State {
    tj: HashMap<String, Value>,
    wl: HashMap<String, Value>,
    cm: HashMap<String, Value>,
    pod: HashMap<String, Value>,
    /// The execution actor's pods, as processes, by pod uid (a pod anyone else made is none).
    procs: HashMap<String, Proc>,
}

/// One pod the execution actor made, as a process: what its history says of what runs.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
struct Proc {
    name: String,
    /// The TrainJob it was made for (its uid and name, as the actor labelled it at creation:
    /// later edits of its labels or owners change nothing here).
    trainjob: String,
    job_name: String,
    /// The object exists.
    exists: bool,
    /// Its latest version is being deleted.
    deleting: bool,
    /// Its latest version remains as holdfast counts objects: not finished, or being deleted.
    object_remains: bool,
    /// Its kubelet reported it running: a process was started.
    started: bool,
    /// Its kubelet reported it terminal: no process runs, nor will.
    ended: bool,
    /// An editor removed JobSet's label, or its owners, at some version.
    relabelled: bool,
    reowned: bool,
}

impl Proc {
    /// Whether a process of it may still run: its kubelet has not reported its end, and its
    /// object still exists (the kubelet may start it yet) or its kubelet started it (the
    /// process runs on whatever became of the object: force-deleted, relabelled, re-owned).
    fn can_run(&self) -> bool {
        !self.ended && (self.exists || self.started)
    }

    /// What holdfast's `PodsRemain` may truly point at: a process that may run, or an
    /// object that remains (a terminating pod whose finalizer is not yet removed).
    fn remains(&self) -> bool {
        self.can_run() || (self.exists && self.object_remains)
    }

    fn describe(&self) -> String {
        let mut what = vec![match (self.exists, self.started, self.deleting) {
            (false, _, _) => "its object gone, its process running",
            (true, true, true) => "terminating, its process running",
            (true, false, true) => "terminating, never started",
            (true, true, false) => "running",
            (true, false, false) => "pending",
        }];
        if self.relabelled {
            what.push("relabelled");
        }
        if self.reowned {
            what.push("re-owned");
        }
        format!("{} ({})", self.name, what.join(", "))
    }

    /// Follows pod event `e` (the object's first version if `first`).
    fn track(procs: &mut HashMap<String, Proc>, e: &Event, first: bool) {
        let p = &e.obj;
        if first && !procs.contains_key(e.uid()) {
            let ours = creator(p) == ACTOR_MANAGER;
            let (Some(uid), Some(job_name), true) =
                (label(p, LABEL_POD_UID), label(p, LABEL_JOBSET_NAME), ours)
            else {
                return;
            };
            procs.insert(
                e.uid().to_owned(),
                Proc {
                    name: name(p).to_owned(),
                    trainjob: uid.to_owned(),
                    job_name: job_name.to_owned(),
                    ..Proc::default()
                },
            );
        }
        let Some(proc) = procs.get_mut(e.uid()) else {
            return;
        };
        proc.exists = !e.deleted;
        proc.deleting = deleting(p);
        proc.object_remains = pod_remains(p);
        match kubelet_phase(p) {
            Some("Running") => proc.started = true,
            Some("Succeeded" | "Failed") => proc.ended = true,
            _ => {}
        }
        if !e.deleted {
            proc.relabelled |= label(p, LABEL_JOBSET_NAME).is_none();
            proc.reowned |= p
                .pointer("/metadata/ownerReferences")
                .and_then(Value::as_array)
                .is_none_or(Vec::is_empty);
        }
    }
}

/// A pod's phase, when its kubelet wrote it: the manager owning `status.phase` is the
/// kubelet's (an editor cannot write a pod's status at all; this says who did).
fn kubelet_phase(p: &Value) -> Option<&str> {
    let phase = p.pointer("/status/phase").and_then(Value::as_str)?;
    let owners: Vec<&str> = p
        .pointer("/metadata/managedFields")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter(|m| m.pointer("/fieldsV1/f:status/f:phase").is_some())
        .filter_map(|m| m.get("manager").and_then(Value::as_str))
        .collect();
    (!owners.is_empty() && owners.iter().all(|m| *m == KUBELET_MANAGER)).then_some(phase)
}

impl State {
    fn map(&mut self, kind: Kind) -> &mut HashMap<String, Value> {
        match kind {
            Kind::TrainJob => &mut self.tj,
            Kind::Workload => &mut self.wl,
            Kind::ConfigMap => &mut self.cm,
            Kind::Pod => &mut self.pod,
        }
    }

    fn trainjob_named(&self, n: &str) -> Option<(&String, &Value)> {
        self.tj.iter().find(|(_, o)| name(o) == n)
    }

    /// The hold in force on TrainJob `uid`: plain, its own annotation; Kueue, the newest
    /// instance any of its Workloads ([`workload_of`]) carries (being deleted or not).
    fn hold(&self, mode: Mode, uid: &str) -> Option<Option<u64>> {
        match mode {
            Mode::Plain => self.tj.get(uid).and_then(hold_of),
            Mode::Kueue => {
                let holds: Vec<Option<u64>> = self
                    .wl
                    .values()
                    .filter(|w| workload_of(w, uid))
                    .filter_map(hold_of)
                    .collect();
                if holds.is_empty() {
                    None
                } else {
                    Some(holds.iter().flatten().max().copied())
                }
            }
        }
    }

    /// The hold in force on TrainJob `uid` by SPEC's ownership alone (Kueue: the newest
    /// instance its owned Workloads carry; plain: [`State::hold`]). During an orphaning
    /// delete the garbage collector detaches the Workload while its label still names the
    /// TrainJob: the hold API, deciding by ownership, then truly says no hold.
    fn hold_by_ownership(&self, mode: Mode, uid: &str) -> Option<Option<u64>> {
        match mode {
            Mode::Plain => self.hold(mode, uid),
            Mode::Kueue => {
                let holds: Vec<Option<u64>> =
                    self.owned_workloads(uid).filter_map(hold_of).collect();
                if holds.is_empty() {
                    None
                } else {
                    Some(holds.iter().flatten().max().copied())
                }
            }
        }
    }

    fn workloads_of<'a>(&'a self, uid: &'a str) -> impl Iterator<Item = &'a Value> + 'a {
        self.wl.values().filter(move |w| workload_of(w, uid))
    }

    /// TrainJob `uid`'s Workloads by SPEC's definition alone: the controller ownerReference.
    /// (The garbage collector removes it from the Workload during an orphaning delete of the
    /// TrainJob; from then on the TrainJob has no Workload, though the label remains.)
    fn owned_workloads<'a>(&'a self, uid: &'a str) -> impl Iterator<Item = &'a Value> + 'a {
        self.wl
            .values()
            .filter(move |w| controller_owner(w).as_deref() == Some(uid))
    }

    /// The processes of TrainJob `uid`'s executions that may still run ([`Proc::can_run`]).
    fn remaining_pods_of(&self, uid: &str) -> Vec<String> {
        let mut out: Vec<String> = self
            .procs
            .values()
            .filter(|p| p.trainjob == uid && p.can_run())
            .map(Proc::describe)
            .collect();
        out.sort();
        out
    }

    /// The executions' pods of any TrainJob named `n` that remain, as a process or as an
    /// object (what the hold API's `PodsRemain` may truly say; a decoy is none of them).
    fn remaining_pods_named(&self, n: &str) -> usize {
        self.procs
            .values()
            .filter(|p| p.job_name == n && p.remains())
            .count()
    }
}

fn pod_remains(p: &Value) -> bool {
    let phase = p.pointer("/status/phase").and_then(Value::as_str);
    deleting(p) || !matches!(phase, Some("Succeeded" | "Failed"))
}

/// What the checker remembers per TrainJob.
#[derive(Default)]
struct Track {
    gated: bool,
    /// Per version: (resourceVersion, held and already stopped, gated).
    flags: BTreeMap<u64, (bool, bool)>,
    /// When the hold now in force started: (resourceVersion, when seen).
    hold_since: Option<(u64, Instant)>,
    /// The TrainJob has been suspended since the hold in force started.
    stopped_since_hold: bool,
    /// When the hold in force was placed, its object was already stopped by someone else.
    found_stopped: bool,
}

struct Checker<'a> {
    c: &'a Check<'a>,
    state: State,
    tracks: HashMap<String, Track>,
    out: Vec<Violation>,
    seen: BTreeSet<(Invariant, String)>,
    /// Every TrainJob uid the history has shown.
    known: BTreeSet<String>,
    /// Per call: whether its answer's claim held at some state of its window.
    satisfied: Vec<bool>,
    started: Vec<bool>,
}

impl Checker<'_> {
    fn violate(&mut self, inv: Invariant, subject: String, rv: u64, message: String) {
        if self.seen.insert((inv, subject)) {
            self.out.push(Violation {
                invariant: inv,
                rv,
                message,
            });
        }
    }

    fn mode(&self) -> Mode {
        self.c.mode
    }

    /// The calls of kind `want` whose window covers `rv`.
    fn calls_covering(&self, rv: u64, want: impl Fn(CallKind) -> bool) -> Vec<&CallRecord> {
        self.c
            .calls
            .iter()
            .filter(|c| want(c.kind) && c.covers(rv))
            .collect()
    }

    /// A write at `rv` that only a call of kind `want` may make: explained, or a violation
    /// of `inv`; explained only by calls that said they wrote nothing: an untrue answer.
    fn explain(&mut self, rv: u64, want: CallKind, inv: Invariant, subject: String, what: String) {
        let calls: Vec<CallRecord> = self
            .calls_covering(rv, |k| k == want)
            .into_iter()
            .cloned()
            .collect();
        if calls.is_empty() {
            let desc = match want {
                CallKind::Hold(k) => format!("Hold({k})"),
                CallKind::Release(k) => format!("Release({k})"),
                CallKind::Open => "Open".to_owned(),
                CallKind::Status => "Status".to_owned(),
            };
            self.violate(
                inv,
                subject,
                rv,
                format!("{what}, and no {desc} was in flight then"),
            );
        } else if calls.iter().all(|c| c.answer.says_nothing_written()) {
            let c = &calls[0];
            self.violate(
                Invariant::AnswersAreTrue,
                format!("{subject}/explained-by/{}", c.step),
                rv,
                format!(
                    "{what}: only {} (step {}) was in flight, and it answered {}, which says it wrote nothing",
                    c.name(),
                    c.step,
                    c.answer.describe()
                ),
            );
        }
    }

    fn run(mut self) -> Vec<Violation> {
        let events: Vec<&Event> = self
            .c
            .events
            .iter()
            .filter(|e| e.rv <= self.c.upto)
            .collect();
        for e in events {
            self.before_event(e.rv);
            self.apply(e);
            self.after_event(e.rv);
        }
        self.finish();
        self.out.sort_by_key(|v| v.rv);
        self.out
    }

    fn apply(&mut self, e: &Event) {
        let uid = e.uid().to_owned();
        let prev = if e.deleted {
            self.state.map(e.kind).remove(&uid)
        } else {
            self.state.map(e.kind).insert(uid.clone(), e.obj.clone())
        };
        if e.kind == Kind::Pod {
            Proc::track(&mut self.state.procs, e, prev.is_none());
        }
        match e.kind {
            Kind::TrainJob => self.trainjob_event(e, &uid, prev.as_ref()),
            Kind::Workload => self.workload_event(e, prev.as_ref()),
            Kind::ConfigMap => self.configmap_event(e, prev.as_ref()),
            Kind::Pod => self.pod_event(e, prev.as_ref()),
        }
    }

    /// The hold of TrainJob `uid` changed from `before` to what the state now says.
    /// `stopped` is whether the held object this event wrote was stopped by someone else
    /// before it (plain: an opened TrainJob, suspended) and whether it is stopped after it.
    fn hold_changed(
        &mut self,
        uid: &str,
        before: Option<Option<u64>>,
        rv: u64,
        seen: Instant,
        stopped: (bool, bool),
    ) {
        let now = self.state.hold(self.mode(), uid);
        if now == before {
            return;
        }
        let found_stopped = self.tracks.get(uid).is_some_and(|t| t.found_stopped);
        if before.is_some() && now.is_none() && found_stopped && !stopped.1 {
            self.violate(
                Invariant::ReleaseRestoresWhatTheHoldFound,
                format!("{uid}/{rv}"),
                rv,
                format!(
                    "{} was lifted from TrainJob {uid} and its held object is no longer stopped, though it was stopped by someone else when the hold was placed",
                    show_hold(before)
                ),
            );
        }
        let job = self
            .state
            .tj
            .get(uid)
            .map(|t| name(t).to_owned())
            .unwrap_or_else(|| JOB.to_owned());
        let gone = self
            .state
            .tj
            .get(uid)
            .is_none_or(|t| deleting(t) || finished(t));
        let subject = format!("{uid}/{rv}");
        match (before, now) {
            (Some(Some(k)), None) if !gone => self.explain(
                rv,
                CallKind::Release(k),
                Invariant::HoldLiftedOnlyByItsRelease,
                subject,
                format!("hold {k} on TrainJob {job} ({uid}) was lifted"),
            ),
            (Some(None), None) if !gone => self.violate(
                Invariant::HoldLiftedOnlyByItsRelease,
                subject,
                rv,
                format!("an unreadable hold on TrainJob {job} ({uid}) was lifted"),
            ),
            (_, Some(Some(j))) => {
                if let Some(Some(k)) = before
                    && j < k
                {
                    self.violate(
                        Invariant::HoldPlacedOnlyByHold,
                        subject,
                        rv,
                        format!(
                            "the older hold {j} is in force on TrainJob {job} ({uid}) again, after the newer hold {k}"
                        ),
                    );
                } else {
                    self.explain(
                        rv,
                        CallKind::Hold(j),
                        Invariant::HoldPlacedOnlyByHold,
                        subject,
                        format!(
                            "hold {j} appeared on TrainJob {job} ({uid}), which had {}",
                            show_hold(before)
                        ),
                    );
                }
            }
            (_, Some(None)) => self.violate(
                Invariant::HoldPlacedOnlyByHold,
                subject,
                rv,
                format!("an unreadable hold appeared on TrainJob {job} ({uid})"),
            ),
            _ => {}
        }
        let track = self.tracks.entry(uid.to_owned()).or_default();
        match now {
            Some(_) if before.is_none() => {
                track.found_stopped = stopped.0;
                track.hold_since = Some((rv, seen));
                track.stopped_since_hold = self.state.tj.get(uid).is_some_and(suspended);
            }
            None => {
                track.hold_since = None;
                track.stopped_since_hold = false;
                track.found_stopped = false;
            }
            _ => {}
        }
    }

    fn trainjob_event(&mut self, e: &Event, uid: &str, prev: Option<&Value>) {
        self.known.insert(uid.to_owned());
        let mode = self.mode();
        let rv = e.rv;
        let job = name(&e.obj).to_owned();
        if e.deleted {
            // A hold ends with its TrainJob: nothing left to judge.
            let track = self.tracks.entry(uid.to_owned()).or_default();
            track.hold_since = None;
            return;
        }
        let v = &e.obj;
        let first = prev.is_none() && !self.tracks.contains_key(uid);
        let hold_before = match mode {
            Mode::Plain => prev.and_then(hold_of),
            Mode::Kueue => self.state.hold(mode, uid),
        };
        {
            // At the closed start gate: created managed, or come to rest there (managed,
            // never opened, suspended); until the opened mark.
            let track = self.tracks.entry(uid.to_owned()).or_default();
            if managed(v) && !object::opened(v) && (first || suspended(v)) {
                track.gated = true;
            }
        }
        // The opened mark appears only through Open.
        let was_opened = prev.is_some_and(object::opened);
        if object::opened(v) && !was_opened {
            self.explain(
                rv,
                CallKind::Open,
                Invariant::OpenedOnlyByOpen,
                format!("{uid}/opened/{rv}"),
                format!("TrainJob {job} ({uid}) got the opened mark"),
            );
        }
        if object::opened(v) {
            self.tracks.entry(uid.to_owned()).or_default().gated = false;
        }
        let gated = self.tracks.get(uid).is_some_and(|t| t.gated);
        if gated && !suspended(v) {
            self.violate(
                Invariant::ClosedGateStaysClosed,
                uid.to_owned(),
                rv,
                format!(
                    "TrainJob {job} ({uid}) is at its closed start gate (managed, never opened), yet this version is not suspended (labels {}, annotations {})",
                    v.pointer("/metadata/labels").cloned().unwrap_or_default(),
                    v.pointer("/metadata/annotations").cloned().unwrap_or_default()
                ),
            );
        }
        // Plain: the hold is the suspend.
        if mode == Mode::Plain {
            if let Some(h) = hold_of(v)
                && !suspended(v)
            {
                self.violate(
                    Invariant::HeldObjectStopped,
                    format!("{uid}/{rv}"),
                    rv,
                    format!(
                        "TrainJob {job} ({uid}) carries {} but is not suspended",
                        show_hold(Some(h))
                    ),
                );
            }
            let stopped_before =
                prev.is_some_and(|p| suspended(p) && object::opened(p) && hold_of(p).is_none());
            self.hold_changed(uid, hold_before, rv, e.seen, (stopped_before, suspended(v)));
        }
        let held_now = self.state.hold(mode, uid);
        // A start: suspended → unsuspended.
        let starts = prev.is_some_and(suspended) && !suspended(v) && !deleting(v);
        if starts {
            if mode == Mode::Kueue
                && let Some(h) = hold_before
            {
                self.violate(
                    Invariant::HeldJobStaysStopped,
                    format!("{uid}/{rv}"),
                    rv,
                    format!(
                        "TrainJob {job} ({uid}) was unsuspended (spec.suspend owned by {:?}) while its Workload carries {}",
                        suspend_owners(v),
                        show_hold(Some(h))
                    ),
                );
            }
            let remaining = self.state.remaining_pods_of(uid);
            // Whose unsuspend: the owners of spec.suspend; when it was removed (server-side
            // apply drops a field its manager stops applying), whoever wrote last.
            let mut owners = suspend_owners(v);
            if owners.is_empty() {
                owners = last_writers(v);
            }
            let by_editor = !owners.is_empty() && owners.iter().all(|m| is_user_manager(m));
            if !remaining.is_empty() && !by_editor {
                self.violate(
                    Invariant::ExecutionsNeverOverlap,
                    format!("{uid}/{rv}"),
                    rv,
                    format!(
                        "TrainJob {job} ({uid}) was let run again (spec.suspend owned by {owners:?}) while processes of an earlier execution may still run: {remaining:?}"
                    ),
                );
            }
        }
        let susp = suspended(v);
        let track = self.tracks.entry(uid.to_owned()).or_default();
        if held_now.is_some() && susp {
            track.stopped_since_hold = true;
        }
        let held_and_stopped = held_now.is_some() && track.stopped_since_hold;
        let gated = track.gated;
        track.flags.insert(rv, (held_and_stopped, gated));
    }

    fn workload_event(&mut self, e: &Event, prev: Option<&Value>) {
        let mode = self.mode();
        let mut owners: BTreeSet<String> = BTreeSet::new();
        owners.extend(workload_owners(&e.obj));
        owners.extend(prev.map(workload_owners).unwrap_or_default());
        // The hold before this event, per owner: recompute with the previous version. Only
        // TrainJobs the history has shown count (a label may name any uid).
        owners.retain(|o| self.known.contains(o));
        for owner in owners {
            let now_obj = self.state.wl.get(e.uid()).cloned();
            // Undo to compute "before".
            match prev {
                Some(p) => {
                    self.state.wl.insert(e.uid().to_owned(), p.clone());
                }
                None => {
                    self.state.wl.remove(e.uid());
                }
            }
            let before = self.state.hold(mode, &owner);
            match now_obj {
                Some(o) => {
                    self.state.wl.insert(e.uid().to_owned(), o);
                }
                None => {
                    self.state.wl.remove(e.uid());
                }
            }
            if mode == Mode::Kueue {
                let stopped_before = prev.is_some_and(|p| !active(p) && hold_of(p).is_none());
                let stopped_now = e.deleted || !active(&e.obj);
                self.hold_changed(&owner, before, e.rv, e.seen, (stopped_before, stopped_now));
            }
        }
        if !e.deleted
            && let Some(h) = hold_of(&e.obj)
            && active(&e.obj)
        {
            self.violate(
                Invariant::HeldObjectStopped,
                format!("{}/{}", e.uid(), e.rv),
                e.rv,
                format!(
                    "Workload {} carries {} but is active",
                    name(&e.obj),
                    show_hold(Some(h))
                ),
            );
        }
    }

    fn configmap_event(&mut self, e: &Event, prev: Option<&Value>) {
        if e.deleted {
            return;
        }
        let v = &e.obj;
        let cm = name(v).to_owned();
        let owner = controller_owner(v);
        let prev_owner = prev.and_then(controller_owner);
        if let (Some(p), Some(_)) = (prev, &prev_owner)
            && content(p) != content(v)
        {
            self.violate(
                Invariant::SnapshotBytesNeverChange,
                format!("{}/{}", e.uid(), e.rv),
                e.rv,
                format!("the data of snapshot {cm}, owned by TrainJob {prev_owner:?}, changed"),
            );
        }
        let Some(owner) = owner else { return };
        if !snapshot_like(v) {
            return;
        }
        match (prev, &prev_owner) {
            (None, _) => {
                let by = creator(v);
                if !SNAPSHOT_WRITERS.contains(&by.as_str()) {
                    self.violate(
                        Invariant::SnapshotBelongsToItsTrainJob,
                        format!("{}/created", e.uid()),
                        e.rv,
                        format!("snapshot {cm} owned by TrainJob {owner} was created by {by}, not by holdfast or Trainer"),
                    );
                }
            }
            (Some(_), Some(p)) if *p == owner => {}
            (Some(_), p) => self.violate(
                Invariant::SnapshotBelongsToItsTrainJob,
                format!("{}/owner/{}", e.uid(), e.rv),
                e.rv,
                format!("ConfigMap {cm} became the snapshot of TrainJob {owner} (its controller owner was {p:?})"),
            ),
        }
        let owner_name = self.state.tj.get(&owner).map(|t| name(t).to_owned());
        if let Some(n) = owner_name
            && cm != holdfast_core::names::snapshot_name(&n)
        {
            self.violate(
                Invariant::SnapshotBelongsToItsTrainJob,
                format!("{}/name", e.uid()),
                e.rv,
                format!("snapshot {cm} is owned by TrainJob {n} ({owner}), whose snapshot is named otherwise"),
            );
        }
    }

    fn pod_event(&mut self, e: &Event, prev: Option<&Value>) {
        // A pod the actor started (anyone else's pod starts no execution, whatever it says).
        if e.deleted || prev.is_some() || creator(&e.obj) != ACTOR_MANAGER {
            return;
        }
        let p = &e.obj;
        let (Some(uid), Some(trigger)) = (
            label(p, LABEL_POD_UID),
            annotation(p, ANN_POD_TRIGGER_RV).and_then(|s| s.parse::<u64>().ok()),
        ) else {
            return;
        };
        let Some((held, gated)) = self
            .tracks
            .get(uid)
            .and_then(|t| t.flags.get(&trigger).copied())
        else {
            return;
        };
        if held {
            self.violate(
                Invariant::HeldJobStaysStopped,
                format!("{uid}/pod/{trigger}"),
                e.rv,
                format!(
                    "pod {} was started for TrainJob {uid}'s version {trigger}, at which it was held and had been stopped",
                    name(p)
                ),
            );
        }
        if gated {
            self.violate(
                Invariant::ClosedGateStaysClosed,
                format!("{uid}/pod"),
                e.rv,
                format!(
                    "pod {} was started for TrainJob {uid}'s version {trigger}, at which its start gate was closed",
                    name(p)
                ),
            );
        }
    }

    // ---------------------------------------------------------------------------------------
    // Answers

    /// Whether call `c`'s answer is true of the current state.
    fn claim_holds(&self, c: &CallRecord) -> Option<bool> {
        let mode = self.mode();
        let tj = self.state.trainjob_named(JOB);
        let hold = tj.and_then(|(uid, _)| self.state.hold(mode, uid));
        let carries_stopped = |k: u64| -> bool {
            let Some((uid, t)) = tj else { return false };
            match mode {
                Mode::Plain => hold_of(t) == Some(Some(k)) && suspended(t),
                Mode::Kueue => self
                    .state
                    .workloads_of(uid)
                    .any(|w| hold_of(w) == Some(Some(k)) && !active(w)),
            }
        };
        Some(match (&c.kind, &c.answer) {
            (CallKind::Hold(k), Answer::Outcome(Outcome::Held | Outcome::AlreadyInForce)) => {
                carries_stopped(*k)
            }
            (CallKind::Release(k), Answer::Outcome(Outcome::Released { .. })) => {
                tj.is_some() && hold != Some(Some(*k))
            }
            (CallKind::Open, Answer::Outcome(Outcome::Opened { started: true })) => {
                tj.is_some_and(|(_, t)| object::opened(t) && !suspended(t))
            }
            (CallKind::Open, Answer::Outcome(Outcome::Opened { .. } | Outcome::AlreadyOpen)) => {
                tj.is_some_and(|(_, t)| object::opened(t))
            }
            (CallKind::Hold(k), Answer::Error(e)) if e.cause() == Some(RejectCause::StaleHold) => {
                hold.is_some() && hold != Some(Some(*k))
            }
            (CallKind::Release(k), Answer::Error(e))
                if e.cause() == Some(RejectCause::StaleHold) =>
            {
                hold != Some(Some(*k))
            }
            // A Workload being deleted without the hold finalizer is on its way out, not one
            // to hold: nothing can keep it, whatever hold its annotations still carry (the
            // gate takes the finalizer off the held Workloads of a TrainJob being deleted,
            // as in a foreground delete, and leaves the mark).
            (_, Answer::Error(e)) if e.cause() == Some(RejectCause::NoWorkload) => {
                tj.is_some_and(|(uid, _)| {
                    !self
                        .state
                        .owned_workloads(uid)
                        .any(|w| !deleting(w) || holdfast_core::readmission::has_hold_finalizer(w))
                })
            }
            (_, Answer::Error(HoldError::PodsRemain)) => self.state.remaining_pods_named(JOB) > 0,
            (CallKind::Status, Answer::Status(s)) => {
                let want = s.hold.as_ref().map(|h| h.instance);
                let opened = tj.is_some_and(|(_, t)| object::opened(t));
                let owned = tj.and_then(|(uid, _)| self.state.hold_by_ownership(mode, uid));
                (hold == want || owned == want) && opened == s.opened
            }
            _ => return None,
        })
    }

    fn window_contains(c: &CallRecord, rv: u64) -> bool {
        rv > c.rv_before && c.rv_after.is_some_and(|a| rv <= a)
    }

    fn judged(&self, c: &CallRecord) -> bool {
        c.rv_after.is_some_and(|a| a <= self.c.upto)
    }

    fn before_event(&mut self, rv: u64) {
        for i in 0..self.c.calls.len() {
            let c = &self.c.calls[i];
            if !self.started[i] && c.rv_before < rv && self.judged(c) {
                self.started[i] = true;
                if self.claim_holds(c) == Some(true) {
                    self.satisfied[i] = true;
                }
            }
        }
    }

    fn after_event(&mut self, rv: u64) {
        for i in 0..self.c.calls.len() {
            let c = &self.c.calls[i];
            if self.judged(c)
                && Self::window_contains(c, rv)
                && !self.satisfied[i]
                && self.claim_holds(c) == Some(true)
            {
                self.satisfied[i] = true;
            }
        }
    }

    fn finish(&mut self) {
        for i in 0..self.c.calls.len() {
            let c = self.c.calls[i].clone();
            if !self.judged(&c) {
                continue;
            }
            if !self.started[i] && self.claim_holds(&c) == Some(true) {
                self.satisfied[i] = true;
            }
            if self.claim_holds(&c).is_some() && !self.satisfied[i] {
                self.violate(
                    Invariant::AnswersAreTrue,
                    format!("call/{}", c.step),
                    c.rv_after.unwrap_or_default(),
                    format!(
                        "{} (step {}) answered {}, which was not true at any point between rv {} and rv {}",
                        c.name(),
                        c.step,
                        c.answer.describe(),
                        c.rv_before,
                        c.rv_after.unwrap_or_default()
                    ),
                );
            }
        }
        if !self.c.last {
            return;
        }
        // Liveness: a TrainJob whose Workload is held is suspended by Kueue soon after.
        if self.mode() == Mode::Kueue {
            let now = Instant::now();
            let ids: Vec<String> = self.state.tj.keys().cloned().collect();
            for uid in ids {
                let Some(t) = self.state.tj.get(&uid) else {
                    continue;
                };
                if deleting(t) || finished(t) || suspended(t) {
                    continue;
                }
                let job = name(t).to_owned();
                let Some(track) = self.tracks.get(&uid) else {
                    continue;
                };
                let (Some((rv, since)), false) = (track.hold_since, track.stopped_since_hold)
                else {
                    continue;
                };
                if now.duration_since(since) >= LIVENESS
                    && let Some(h) = self.state.hold(self.mode(), &uid)
                {
                    self.violate(
                        Invariant::HeldJobIsStopped,
                        uid.clone(),
                        rv,
                        format!(
                            "TrainJob {job} ({uid}) has carried {} on its Workload for {:?} and is still not suspended",
                            show_hold(Some(h)),
                            now.duration_since(since)
                        ),
                    );
                }
            }
        }
    }
}

/// Checks every invariant over `check.events` up to `check.upto`.
pub fn check(check: &Check<'_>) -> Vec<Violation> {
    Checker {
        c: check,
        state: State::default(),
        tracks: HashMap::new(),
        out: Vec::new(),
        seen: BTreeSet::new(),
        known: BTreeSet::new(),
        satisfied: vec![false; check.calls.len()],
        started: vec![false; check.calls.len()],
    }
    .run()
}

/// Kueue mode: how long to wait before the liveness check can judge: `Some(t)` when a
/// TrainJob's Workload carries a hold, the TrainJob has not been suspended since, and the
/// hold started less than [`LIVENESS`] ago (`t` is when it may be judged).
pub fn liveness_pending(check: &Check<'_>) -> Option<Instant> {
    if check.mode != Mode::Kueue {
        return None;
    }
    let mut checker = Checker {
        c: check,
        state: State::default(),
        tracks: HashMap::new(),
        out: Vec::new(),
        seen: BTreeSet::new(),
        known: BTreeSet::new(),
        satisfied: vec![false; check.calls.len()],
        started: vec![false; check.calls.len()],
    };
    for e in check.events.iter().filter(|e| e.rv <= check.upto) {
        checker.apply(e);
    }
    let now = Instant::now();
    checker
        .tracks
        .iter()
        .filter(|(uid, t)| {
            !t.stopped_since_hold
                && checker
                    .state
                    .tj
                    .get(*uid)
                    .is_some_and(|j| !suspended(j) && !deleting(j))
        })
        .filter_map(|(_, t)| t.hold_since.map(|(_, since)| since + LIVENESS))
        .filter(|t| *t > now)
        .max()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn tj(rv: u64, suspend: bool, annotations: Value) -> Event {
        Event {
            rv,
            kind: Kind::TrainJob,
            deleted: false,
            obj: json!({"metadata": {"name": JOB, "uid": "u1", "resourceVersion": rv.to_string(),
                "labels": {LABEL_MANAGED: "true"}, "annotations": annotations},
                "spec": {"suspend": suspend}}),
            seen: Instant::now(),
        }
    }

    fn call(kind: CallKind, before: u64, after: u64, answer: Answer) -> CallRecord {
        CallRecord {
            step: 0,
            kind,
            rv_before: before,
            rv_after: Some(after),
            answer,
        }
    }

    fn run(events: &[Event], calls: &[CallRecord]) -> Vec<Invariant> {
        check(&Check {
            mode: Mode::Plain,
            events,
            calls,
            upto: u64::MAX,
            last: true,
        })
        .into_iter()
        .map(|v| v.invariant)
        .collect()
    }

    #[test]
    fn a_hold_lifted_by_its_release_is_fine_and_otherwise_not() {
        let events = [
            tj(10, true, json!({})),
            tj(11, false, json!({"holdfast.dev/opened": "true"})),
            tj(
                12,
                true,
                json!({"holdfast.dev/opened": "true", ANN_HOLD_INSTANCE: "1"}),
            ),
            tj(14, false, json!({"holdfast.dev/opened": "true"})),
        ];
        let open = call(
            CallKind::Open,
            10,
            11,
            Answer::Outcome(Outcome::Opened { started: false }),
        );
        let hold = call(CallKind::Hold(1), 11, 12, Answer::Outcome(Outcome::Held));
        let release = call(
            CallKind::Release(1),
            13,
            14,
            Answer::Outcome(Outcome::Released { resumed: true }),
        );
        assert_eq!(
            run(&events, &[open.clone(), hold.clone(), release]),
            Vec::<Invariant>::new()
        );
        assert_eq!(
            run(&events, &[open.clone(), hold.clone()]),
            vec![Invariant::HoldLiftedOnlyByItsRelease]
        );
        let stale = call(
            CallKind::Release(1),
            13,
            14,
            Answer::Error(HoldError::stale("no")),
        );
        assert_eq!(
            run(&events, &[open, hold, stale]),
            vec![Invariant::AnswersAreTrue],
            "a release that said StaleHold while its hold was lifted in its window"
        );
    }

    #[test]
    fn a_closed_gate_and_a_held_job_stay_suspended() {
        let events = [tj(10, false, json!({}))];
        assert_eq!(run(&events, &[]), vec![Invariant::ClosedGateStaysClosed]);
        let events = [
            tj(10, true, json!({"holdfast.dev/opened": "true"})),
            tj(
                11,
                false,
                json!({"holdfast.dev/opened": "true", ANN_HOLD_INSTANCE: "2"}),
            ),
        ];
        let open = call(
            CallKind::Open,
            1,
            10,
            Answer::Outcome(Outcome::Opened { started: false }),
        );
        let hold = call(CallKind::Hold(2), 10, 11, Answer::Outcome(Outcome::Held));
        let found = run(&events, &[open, hold]);
        assert!(found.contains(&Invariant::HeldObjectStopped), "{found:?}");
        assert!(found.contains(&Invariant::AnswersAreTrue), "{found:?}");
    }

    /// A version of pod `p1` (TrainJob `u1`'s execution, created by `creator`); `phase`:
    /// a status its kubelet wrote.
    fn pod(rv: u64, creator: &str, phase: Option<&str>, deleting: bool, deleted: bool) -> Event {
        let mut managed = vec![json!({"manager": creator, "operation": "Update",
            "fieldsV1": {"f:metadata": {"f:labels": {}}}})];
        let mut obj = json!({"metadata": {"name": "p", "uid": "p1", "resourceVersion": rv.to_string(),
            "labels": {LABEL_POD_UID: "u1", LABEL_JOBSET_NAME: JOB},
            "ownerReferences": [{"apiVersion": "batch/v1", "kind": "Job", "name": "job-node-0",
                "uid": "j1", "controller": true}]},
            "spec": {"nodeName": "adversary-node"}});
        if let Some(phase) = phase {
            obj["status"] = json!({"phase": phase});
            managed.push(json!({"manager": KUBELET_MANAGER, "operation": "Update",
                "subresource": "status", "fieldsV1": {"f:status": {"f:phase": {}}}}));
        }
        if deleting || deleted {
            obj["metadata"]["deletionTimestamp"] = json!("2026-11-29T12:00:00Z");
        }
        obj["metadata"]["managedFields"] = Value::Array(managed);
        Event {
            rv,
            kind: Kind::Pod,
            deleted,
            obj,
            seen: Instant::now(),
        }
    }

    /// An opened TrainJob suspended at rv 10, its pods' `pod_events` (rv 11..), and holdfast
    /// letting it run again at rv 20: the violations.
    fn restarted_with(pod_events: Vec<Event>, calls: &[CallRecord]) -> Vec<Invariant> {
        let mut restart = tj(20, false, json!({"holdfast.dev/opened": "true"}));
        restart.obj["metadata"]["managedFields"] = json!([{"manager": "holdfast-controller",
            "operation": "Update", "fieldsV1": {"f:spec": {"f:suspend": {}}}}]);
        let mut events = vec![tj(10, true, json!({"holdfast.dev/opened": "true"}))];
        events.extend(pod_events);
        events.push(restart);
        let open = call(
            CallKind::Open,
            1,
            10,
            Answer::Outcome(Outcome::Opened { started: false }),
        );
        let mut all = vec![open];
        all.extend(calls.iter().cloned());
        run(&events, &all)
    }

    #[test]
    fn a_start_while_pods_of_the_last_execution_remain_overlaps() {
        assert_eq!(
            restarted_with(vec![pod(11, ACTOR_MANAGER, None, true, false)], &[]),
            vec![Invariant::ExecutionsNeverOverlap],
            "a terminating pod its kubelet has not reported ended"
        );
        assert_eq!(
            restarted_with(vec![pod(11, ACTOR_MANAGER, None, false, false)], &[]),
            vec![Invariant::ExecutionsNeverOverlap],
            "a pending pod: its kubelet may start it yet"
        );
    }

    #[test]
    fn a_force_deleted_pod_whose_process_runs_still_counts_for_overlap() {
        let events = vec![
            pod(11, ACTOR_MANAGER, None, false, false),
            pod(12, ACTOR_MANAGER, Some("Running"), false, false),
            // Force-deleted with nothing to keep it: the object is gone at once.
            pod(13, ACTOR_MANAGER, Some("Running"), false, true),
        ];
        assert_eq!(
            restarted_with(events, &[]),
            vec![Invariant::ExecutionsNeverOverlap]
        );
    }

    #[test]
    fn a_pod_whose_end_its_kubelet_reported_no_longer_counts() {
        let events = vec![
            pod(11, ACTOR_MANAGER, None, false, false),
            pod(12, ACTOR_MANAGER, Some("Running"), false, false),
            pod(13, ACTOR_MANAGER, Some("Running"), true, false),
            // Still there (its finalizer not yet removed), but its kubelet said it ended.
            pod(14, ACTOR_MANAGER, Some("Failed"), true, false),
        ];
        assert_eq!(restarted_with(events, &[]), Vec::<Invariant>::new());
        // A terminal phase written by anyone but the kubelet ends nothing.
        let forged = |rv, deleted| {
            let mut p = pod(rv, ACTOR_MANAGER, Some("Failed"), true, deleted);
            p.obj["metadata"]["managedFields"][1]["manager"] = json!("pod-garbage-collector");
            p
        };
        let events = vec![
            pod(11, ACTOR_MANAGER, None, false, false),
            pod(12, ACTOR_MANAGER, Some("Running"), false, false),
            forged(14, false),
            forged(15, true),
        ];
        assert_eq!(
            restarted_with(events, &[]),
            vec![Invariant::ExecutionsNeverOverlap]
        );
    }

    #[test]
    fn a_pod_gone_before_its_kubelet_started_it_never_ran() {
        let events = vec![
            pod(11, ACTOR_MANAGER, None, false, false),
            pod(12, ACTOR_MANAGER, None, false, true),
        ];
        assert_eq!(restarted_with(events, &[]), Vec::<Invariant>::new());
    }

    #[test]
    fn a_relabelled_or_reowned_pod_whose_process_runs_still_counts_for_overlap() {
        let mut relabelled = pod(13, ACTOR_MANAGER, Some("Running"), false, false);
        relabelled.obj["metadata"]["labels"] = json!({LABEL_POD_UID: "u1"});
        let mut reowned = pod(13, ACTOR_MANAGER, Some("Running"), false, false);
        reowned.obj["metadata"]["ownerReferences"] = Value::Null;
        for edited in [relabelled, reowned] {
            let events = vec![
                pod(11, ACTOR_MANAGER, None, false, false),
                pod(12, ACTOR_MANAGER, Some("Running"), false, false),
                edited,
            ];
            assert_eq!(
                restarted_with(events, &[]),
                vec![Invariant::ExecutionsNeverOverlap]
            );
        }
    }

    #[test]
    fn a_decoy_pod_never_counts() {
        // An editor's pod carrying JobSet's label (even the actor's own labels), running.
        let decoy = vec![
            pod(11, USER_MANAGER, None, false, false),
            pod(12, USER_MANAGER, Some("Running"), false, false),
        ];
        assert_eq!(restarted_with(decoy.clone(), &[]), Vec::<Invariant>::new());
        // So a PodsRemain answered while only the decoy is there is untrue...
        let pods_remain = call(
            CallKind::Release(1),
            12,
            13,
            Answer::Error(HoldError::PodsRemain),
        );
        assert_eq!(
            restarted_with(decoy, std::slice::from_ref(&pods_remain)),
            vec![Invariant::AnswersAreTrue]
        );
        // ...and true while a pod of the execution remains, as a process or an object.
        let terminating = vec![
            pod(11, ACTOR_MANAGER, Some("Running"), false, false),
            pod(12, ACTOR_MANAGER, Some("Failed"), true, false),
        ];
        assert_eq!(
            restarted_with(terminating, &[pods_remain]),
            Vec::<Invariant>::new()
        );
    }

    #[test]
    fn a_status_that_says_no_hold_while_an_orphaning_delete_detached_the_held_workload_is_true() {
        let mut tj_opened = tj(10, true, json!({"holdfast.dev/opened": "true"}));
        tj_opened.obj["metadata"]["labels"]["kueue.x-k8s.io/queue-name"] = json!("main");
        let workload = |rv: u64, owned: bool| {
            let mut w = json!({"metadata": {"name": "w", "uid": "w1",
                "resourceVersion": rv.to_string(), "labels": {JOB_UID_LABEL: "u1"},
                "annotations": {ANN_HOLD_INSTANCE: "1"}}, "spec": {"active": false}});
            if owned {
                w["metadata"]["ownerReferences"] = json!([{"apiVersion": "trainer.kubeflow.org/v1alpha1",
                    "kind": "TrainJob", "name": JOB, "uid": "u1", "controller": true}]);
            }
            Event {
                rv,
                kind: Kind::Workload,
                deleted: false,
                obj: w,
                seen: Instant::now(),
            }
        };
        let events = [tj_opened.clone(), workload(11, true), workload(12, false)];
        let open = call(
            CallKind::Open,
            1,
            10,
            Answer::Outcome(Outcome::Opened { started: false }),
        );
        let hold = call(CallKind::Hold(1), 10, 11, Answer::Outcome(Outcome::Held));
        let status = |answer| call(CallKind::Status, 12, 13, answer);
        let no_hold = Status::read(Mode::Kueue, &tj_opened.obj, None).expect("status");
        assert!(no_hold.hold.is_none() && no_hold.opened);
        let found = check(&Check {
            mode: Mode::Kueue,
            events: &events,
            calls: &[open, hold, status(Answer::Status(Box::new(no_hold)))],
            upto: u64::MAX,
            last: false,
        });
        assert_eq!(found, Vec::new(), "by ownership no hold is in force");
    }
}
