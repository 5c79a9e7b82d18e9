//! The executor: read, decide (holdfast-core), write with a precondition; on a 409 read
//! again and decide again.

use std::time::{Duration, Instant};

use holdfast_core::{
    hold::{
        AfterRead, AfterWrite, Attempts, Call, CallKind, CallMeta, Decision, HeldObject, HeldView,
        HoldError, Outcome, RejectCause, Status, after_read, after_write, apply, decide,
        looks_for_pods, marks_first, switch,
    },
    mode::Mode,
    names::QUEUE_NAME_LABEL,
    readmission::multikueue::{UnderMultiKueue, under_multikueue},
    snapshot::OpenGate,
};
use jiff::Timestamp;
use kube::core::params::ListParams;
use serde_json::Value;
use tokio::time::Duration as TokioDuration;

use super::{
    caller::CallerIdentity,
    config::ExecutorConfig,
    events::{self as hold_events, Seen},
    held_workloads::{HeldWorkloads, Lookup},
    hooks::{Hooks, WritePoint},
    mark::Marking,
    metrics::{CallMetrics, MetricCall},
    preflight::{self, Capability, CapabilityVerdict, PreflightReport},
    reads,
    requests::{CallRequests, ReadRequest, RequestError},
};
use crate::events::Publisher;
use crate::pods;
use holdfast_core::execution::{Gathered, Need, NodeState, RemainingPod};

/// At most this many nodes are read for one Status (the pods of an execution on more nodes
/// are listed without their node's state).
const NODES_READ: usize = 8;
use holdfast_cluster::queues::Queues;
use holdfast_cluster::resources;

/// A kube client for the executor: kube's own retry of 429/503/504 is off, because it would
/// resend a request without checking the call's deadline. The executor decides itself what
/// to send again.
pub fn client_without_retry(config: kube::Config) -> Result<kube::Client, kube::Error> {
    kube::Client::try_from(without_retry(config))
}

/// `config` without kube's retry policy (what [`client_without_retry`] builds on).
pub fn without_retry(mut config: kube::Config) -> kube::Config {
    config.default_retry = false;
    config
}

/// Hold, Release, Open, Status and Preflight against one cluster, in one mode. Cheap to clone.
#[derive(Clone)]
pub struct HoldExecutor {
    client: kube::Client,
    mode: Mode,
    config: std::sync::Arc<ExecutorConfig>,
    capability: Capability,
    hooks: Hooks,
    metrics: CallMetrics,
    /// Kueue mode: Kueue's queues, watched, to tell whether a Workload goes through the
    /// readmission gate.
    queues: Option<Queues>,
    /// Plain mode: which TrainJobs own a Workload carrying a hold left from kueue mode,
    /// watched, so that a call on any other job reads no Workload.
    held_workloads: Option<HeldWorkloads>,
    /// Where each call's Event goes (none: no Events).
    events: Option<Publisher>,
    /// Whether Open checks the TrainJob's runtime snapshot first ([`Self::with_snapshot_gate`]).
    snapshot_gate: bool,
    /// The MultiKueue workers the readmission gate sees ([`Self::with_workers`]).
    workers: crate::multikueue::Workers,
}

/// What a call read, for its Event: the TrainJob (the Event's object), its Workload, and
/// the pods that remained.
#[derive(Default)]
struct Observed {
    trainjob: Option<k8s_openapi::api::core::v1::ObjectReference>,
    workload: Option<String>,
    pods: Vec<String>,
    /// The holder whose hold the call was let override.
    overrode: Option<String>,
    /// What Open waits for while it pauses (its runtime snapshot): a deadline met in any
    /// step then is answered naming it.
    waiting_for: Option<String>,
}

/// What one read saw: the TrainJob and, in Kueue mode, its Workload.
struct Read {
    trainjob: Value,
    workload: Option<Value>,
}

/// Open's wait for its runtime snapshot: whether this call has seen it, and what the gate
/// learnt of the TrainJob's runtime meanwhile.
#[derive(Default)]
struct SnapshotWait {
    seen: bool,
    snapshottable: Option<holdfast_core::snapshot::Snapshottable>,
}

impl HoldExecutor {
    /// An executor acting through `client`, which must not retry on its own (see
    /// [`client_without_retry`]). In Kueue mode it watches Kueue's queues, in plain mode the
    /// Workloads carrying a hold left from kueue mode (metadata only), and so must be made
    /// within a tokio runtime.
    pub fn new(client: kube::Client, mode: Mode, config: ExecutorConfig) -> Self {
        let queues = (mode == Mode::Kueue).then(|| Queues::start(client.clone(), None));
        let held_workloads = (mode == Mode::Plain).then(|| HeldWorkloads::start(client.clone()));
        HoldExecutor {
            client,
            mode,
            config: std::sync::Arc::new(config),
            capability: Capability::default(),
            hooks: Hooks::default(),
            metrics: CallMetrics::default(),
            queues,
            held_workloads,
            events: None,
            snapshot_gate: false,
            workers: crate::multikueue::Workers::default(),
        }
    }

    /// Hold, Release and Open of a TrainJob under MultiKueue go ahead where `workers` (the
    /// ones the readmission gate counts pods in) cover every cluster of the queue's
    /// MultiKueueConfig; they answer `Unsupported` elsewhere, naming what is missing.
    pub fn with_workers(mut self, workers: crate::multikueue::Workers) -> Self {
        self.workers = workers;
        self
    }

    /// Open refuses to open a managed TrainJob that has no runtime snapshot
    /// (`holdfast_core::snapshot::open_gate`): it waits for one not written yet, within its
    /// deadline, and answers `Unsupported` when none can be written. The controller turns it
    /// on, as it runs the snapshot reconciler beside the hold API; an executor of a cluster
    /// where nothing writes snapshots (some tests) leaves it off.
    pub fn with_snapshot_gate(mut self) -> Self {
        self.snapshot_gate = true;
        self
    }

    /// Leaves an Event on the TrainJob of every call that read it (placed, released, opened,
    /// refused), through `events`, off the call's path: the call never waits for it.
    pub fn with_events(mut self, events: Publisher) -> Self {
        self.events = Some(events);
        self
    }

    /// Kueue mode: the watched queues.
    pub fn queues(&self) -> Option<&Queues> {
        self.queues.as_ref()
    }

    /// Plain mode: waits at most `timeout` for the watch of Workloads carrying a hold to
    /// list; whether it did (kueue mode: true). Until it lists, each call reads the job's
    /// Workloads from the apiserver.
    pub async fn workloads_listed(&self, timeout: Duration) -> bool {
        match &self.held_workloads {
            Some(h) => h.wait_listed(timeout).await,
            None => true,
        }
    }

    /// Installs test hooks.
    pub fn with_hooks(mut self, hooks: Hooks) -> Self {
        self.hooks = hooks;
        self
    }

    /// Records calls in `metrics` (see [`CallMetrics::register`]).
    pub fn with_metrics(mut self, metrics: CallMetrics) -> Self {
        self.metrics = metrics;
        self
    }

    pub fn mode(&self) -> Mode {
        self.mode
    }

    pub fn config(&self) -> &ExecutorConfig {
        &self.config
    }

    /// The CallBound declared to dispatch.
    pub fn call_bound(&self) -> Duration {
        holdfast_core::hold::call_bound(self.config.apiserver_request_timeout)
    }

    /// The last preflight result, which Hold and Release consult.
    pub fn capability(&self) -> &Capability {
        &self.capability
    }

    pub fn metrics(&self) -> &CallMetrics {
        &self.metrics
    }

    /// Hold(m): place hold `m.instance` on TrainJob `namespace/name`.
    pub async fn hold(
        &self,
        namespace: &str,
        name: &str,
        meta: CallMeta,
    ) -> Result<Outcome, HoldError> {
        self.call(CallKind::Hold, namespace, name, meta).await
    }

    /// Release(m): lift hold `m.instance` if it is the one in force.
    pub async fn release(
        &self,
        namespace: &str,
        name: &str,
        meta: CallMeta,
    ) -> Result<Outcome, HoldError> {
        self.call(CallKind::Release, namespace, name, meta).await
    }

    /// Open(m): open the start gate.
    pub async fn open(
        &self,
        namespace: &str,
        name: &str,
        meta: CallMeta,
    ) -> Result<Outcome, HoldError> {
        self.call(CallKind::Open, namespace, name, meta).await
    }

    /// Any of Hold, Release and Open, made by the in-process caller
    /// ([`CallerIdentity::in_process`]): a hold placed so is released so.
    pub async fn call(
        &self,
        kind: CallKind,
        namespace: &str,
        name: &str,
        meta: CallMeta,
    ) -> Result<Outcome, HoldError> {
        self.call_as(kind, namespace, name, meta, &CallerIdentity::in_process())
            .await
    }

    /// Any of Hold, Release and Open, made by `caller`: a Hold records its username as the
    /// holder, and a Release, or a Hold of another instance, of a hold another holder placed
    /// is refused `NotHolder` unless `caller` may override (asked only then).
    pub async fn call_as(
        &self,
        kind: CallKind,
        namespace: &str,
        name: &str,
        meta: CallMeta,
        caller: &CallerIdentity,
    ) -> Result<Outcome, HoldError> {
        let started = Instant::now();
        let mut reqs = CallRequests::new(
            &self.client,
            &meta,
            self.config.transit_margin,
            &self.config.user_agent,
            kind.as_str(),
        );
        let mut observed = Observed::default();
        let result = self
            .run(
                kind,
                namespace,
                name,
                &meta,
                caller,
                &mut reqs,
                &mut observed,
            )
            .await;
        self.metrics
            .record_call(MetricCall::from(kind), &result, started.elapsed());
        if let (Some(events), Some(trainjob)) = (&self.events, &observed.trainjob) {
            let seen = Seen {
                workload: observed.workload.as_deref(),
                pods: &observed.pods,
                overrode: observed.overrode.as_deref(),
            };
            events.publish(
                trainjob,
                hold_events::notice(kind, &meta, self.mode, seen, &result),
            );
        }
        match &result {
            Ok(outcome) => tracing::info!(
                call = %kind, call_id = reqs.id(), namespace, name, instance = meta.instance,
                caller = caller.username, overrode = observed.overrode,
                requests = reqs.sent(), ?outcome, "hold call succeeded"
            ),
            Err(error) => tracing::info!(
                call = %kind, call_id = reqs.id(), namespace, name, instance = meta.instance,
                caller = caller.username,
                requests = reqs.sent(), error = %error, "hold call failed"
            ),
        }
        result
    }

    #[allow(clippy::too_many_arguments)]
    async fn run(
        &self,
        kind: CallKind,
        namespace: &str,
        name: &str,
        meta: &CallMeta,
        caller: &CallerIdentity,
        reqs: &mut CallRequests<'_>,
        observed: &mut Observed,
    ) -> Result<Outcome, HoldError> {
        crate::trainjob::check_name(namespace, name).map_err(HoldError::invalid)?;
        let call = Call::new(kind, meta, Timestamp::now(), caller.id())?;
        reqs.time_left()?;
        self.ensure_capable(kind).await?;
        let mut attempts = Attempts::new();
        let result = self
            .attempt(
                &call,
                caller,
                namespace,
                name,
                reqs,
                &mut attempts,
                observed,
            )
            .await;
        let result = match (result, &observed.waiting_for) {
            (Err(e), Some(why)) if e.cause() == Some(RejectCause::DeadlinePassed) => {
                self.metrics.open_without_snapshot("pending");
                Err(e.while_waiting(why))
            }
            (result, _) => result,
        };
        match result {
            // The deadline came while a write of ours may have landed: say so.
            Err(e)
                if attempts.outcome_unknown() && e.cause() == Some(RejectCause::DeadlinePassed) =>
            {
                Err(HoldError::unknown(format!(
                    "{e}; a write of this call was sent and its answer lost, so it may have landed (or still land within the CallBound): read Status"
                )))
            }
            other => other,
        }
    }

    /// Refuses the call (`Unsupported`) if the cluster cannot support it, probing again first
    /// when the last probe is too old or refused longer ago than a moment: all but the
    /// dry-run hold, unless that too is too old (an idle spell). Fails closed.
    async fn ensure_capable(&self, kind: CallKind) -> Result<(), HoldError> {
        let max_age = self.config.preflight_max_age;
        match self.capability.verdict(kind, max_age) {
            CapabilityVerdict::Supported => return Ok(()),
            CapabilityVerdict::Refused(e) => return Err(e),
            CapabilityVerdict::ProbeFirst => {}
        }
        let _one = self.capability.probing.lock().await;
        // Someone may have probed while this call waited.
        match self.capability.verdict(kind, max_age) {
            CapabilityVerdict::Supported => return Ok(()),
            CapabilityVerdict::Refused(e) => return Err(e),
            CapabilityVerdict::ProbeFirst => {}
        }
        // The periodic preflight's own round trip (on any TrainJob): on the call's own, a
        // TrainJob that does not exist would fail the probe rather than the call.
        let scope = if self.capability.round_trip_stale(max_age) {
            preflight::Scope::Full { target: None }
        } else {
            preflight::Scope::BeforeCall
        };
        let report = self.probe(scope).await;
        match report.check(kind.into()) {
            // The apiserver is unreachable: nothing is known to be missing, and the call's own
            // requests will end at its deadline having written nothing.
            Err(_) if report.only_unreachable(kind.into()) => Ok(()),
            other => other,
        }
    }

    /// Whether the TrainJob (as read) is under MultiKueue: its `spec.managedBy`, or in Kueue
    /// mode the ClusterQueue of its Workload (else of its queue label). Every hold call
    /// refuses then (`holdfast_core::readmission::multikueue`).
    fn under_multikueue(
        &self,
        trainjob: &Value,
        workload: Option<&Value>,
    ) -> Option<UnderMultiKueue> {
        let queue = self.queues.as_ref().and_then(|queues| match workload {
            Some(w) => queues.multikueue_for(w),
            None => {
                let namespace = trainjob.pointer("/metadata/namespace")?.as_str()?;
                let queue = trainjob
                    .pointer("/metadata/labels")?
                    .get(QUEUE_NAME_LABEL)?
                    .as_str()?;
                queues.multikueue_for_queue(namespace, queue)
            }
        });
        under_multikueue(trainjob, queue)
    }

    /// The read-decide-write loop of one call: read, refuse what no gate would keep, decide
    /// (`holdfast_core::hold`), and send the one write decided, until the call is answered.
    /// Every choice is core's; this sends the requests and carries their answers back.
    #[allow(clippy::too_many_arguments)]
    async fn attempt(
        &self,
        call: &Call,
        caller: &CallerIdentity,
        namespace: &str,
        name: &str,
        reqs: &mut CallRequests<'_>,
        attempts: &mut Attempts,
        observed: &mut Observed,
    ) -> Result<Outcome, HoldError> {
        let mut call = call.clone();
        let kind = call.kind();
        let mut pause = self.config.transient_backoff;
        let mut snapshot = SnapshotWait::default();
        loop {
            let read = self.read(reqs, namespace, name).await?;
            self.observe(observed, &read);
            self.refuse_ungated(kind, &read).await?;
            let mode = self.acting_mode(kind, namespace, name, &read);
            let view = match after_read(&call, mode, &read.trainjob, read.workload.as_ref()) {
                AfterRead::Decide(view) => view,
                AfterRead::ReadAgain => {
                    // Waiting for the Workload now, not for the snapshot.
                    observed.waiting_for = None;
                    reqs.pause(self.waiting_pause()).await?;
                    continue;
                }
                AfterRead::Answer(e) => return Err(e),
            };
            if kind == CallKind::Open
                && !self
                    .snapshot_taken(reqs, namespace, name, &read, &mut snapshot, observed)
                    .await?
            {
                reqs.pause(self.waiting_pause()).await?;
                continue;
            }
            let decision = self
                .decide(&mut call, caller, attempts, &view, mode, observed)
                .await;
            let decision = self
                .knowing_the_pods(&call, decision, view, mode, reqs, namespace, name, observed)
                .await?;
            let write = match decision {
                Decision::Done(outcome) => {
                    self.unmark_if_released(&call, mode, outcome, reqs, namespace, name)
                        .await;
                    return Ok(outcome);
                }
                Decision::Fail(error) => return Err(error),
                Decision::Write(write) => write,
            };
            let (ar, read_object) = match write.target {
                HeldObject::TrainJob => (resources::trainjob(), Some(&read.trainjob)),
                HeldObject::Workload => (resources::workload(), read.workload.as_ref()),
            };
            let mut object = read_object
                .cloned()
                .ok_or_else(|| HoldError::no_workload("the TrainJob has no Kueue Workload"))?;
            apply(&write, &mut object, self.mode)?;
            let object_name = object
                .pointer("/metadata/name")
                .and_then(Value::as_str)
                .unwrap_or(name)
                .to_owned();
            if let Some(instance) = marks_first(&call, write.target, self.mode) {
                let bound = self.call_bound();
                let marking = super::mark::before_hold(
                    reqs,
                    namespace,
                    name,
                    &read.trainjob,
                    instance,
                    bound,
                )
                .await?;
                match marking {
                    Marking::Done => {}
                    Marking::Conflict => {
                        attempts.conflicted()?;
                        continue;
                    }
                    Marking::Unanswered(e) => {
                        reqs.pause(pause)
                            .await
                            .map_err(|d| reads::last_error(d, &e))?;
                        pause = (pause * 2).min(Duration::from_secs(1));
                        continue;
                    }
                }
            }
            if let Some(hook) = &self.hooks.between_read_and_write {
                hook(WritePoint {
                    kind,
                    namespace: namespace.to_owned(),
                    name: name.to_owned(),
                    conflicts: attempts.conflicts(),
                })
                .await;
            }
            let e = match reqs
                .replace(&ar, namespace, &object_name, &object, false)
                .await
            {
                Ok(_) => {
                    self.unmark_if_released(&call, mode, write.outcome, reqs, namespace, name)
                        .await;
                    return Ok(write.outcome);
                }
                Err(e) => e,
            };
            match after_write(e.write_answer()) {
                AfterWrite::ReadAgain => attempts.conflicted()?,
                AfterWrite::PauseAndReadAgain => {
                    tracing::debug!(error = %e, "write's answer lost; reading again");
                    attempts.unanswered(write.outcome);
                    reqs.pause(pause)
                        .await
                        .map_err(|d| reads::last_error(d, &e))?;
                    pause = (pause * 2).min(Duration::from_secs(1));
                }
                AfterWrite::DeadlinePassed => {
                    attempts.unanswered(write.outcome);
                    return Err(HoldError::deadline_passed(format!(
                        "updating {object_name}: {}",
                        RequestError::TimedOut
                    )));
                }
                AfterWrite::Fail => {
                    return Err(e.into_hold_error(&format!("updating {object_name}")));
                }
            }
        }
    }

    /// What the call saw, for its Events (only when it publishes them).
    fn observe(&self, observed: &mut Observed, read: &Read) {
        if self.events.is_none() {
            return;
        }
        observed.trainjob = crate::trainjob::reference(&read.trainjob);
        observed.workload = read
            .workload
            .as_ref()
            .and_then(|w| w.pointer("/metadata/name"))
            .and_then(Value::as_str)
            .map(str::to_owned);
        observed.pods.clear();
    }

    /// Refuses a call no readmission gate would keep: a MultiKueue queue whose workers are not
    /// all configured, or (Release and Open) a Workload whose queue does not require the gate.
    async fn refuse_ungated(&self, kind: CallKind, read: &Read) -> Result<(), HoldError> {
        if let Some(under) = self.under_multikueue(&read.trainjob, read.workload.as_ref()) {
            let coverage = crate::multikueue::coverage_of(
                &self.client,
                self.queues.as_ref(),
                &self.workers,
                &under,
            )
            .await;
            if !coverage.covered() {
                return Err(HoldError::unsupported(under.refusal(kind, &coverage)));
            }
        }
        if let (Some(queues), Some(workload)) = (&self.queues, &read.workload)
            && let Some(why) = queues.gate_for(workload).refusal_for(kind)
        {
            return Err(HoldError::unsupported(format!(
                "{kind} needs holdfast's readmission gate, which this TrainJob's Workload would not pass: {why} (a hold may still be placed: stopping is always safe)"
            )));
        }
        Ok(())
    }

    /// The mode the call acts in: a hold of the other mode, left in force across a mode
    /// switch, is honoured in its own mode until released (`holdfast_core::hold::switch`).
    fn acting_mode(&self, kind: CallKind, namespace: &str, name: &str, read: &Read) -> Mode {
        let mode = switch::acting_mode(self.mode, &read.trainjob, read.workload.as_ref());
        if mode != self.mode {
            tracing::info!(
                namespace, name, call = %kind, configured = %self.mode, hold_mode = %mode,
                "a hold placed in the other mode is in force: the call acts on it"
            );
        }
        mode
    }

    /// How long a call waiting for something to appear (its Workload, its snapshot) pauses.
    fn waiting_pause(&self) -> Duration {
        self.config
            .transient_backoff
            .max(Duration::from_millis(200))
    }

    /// Open: whether the TrainJob's runtime snapshot exists, when the start gate waits for it
    /// (checked once per call; `false`: pause and read again).
    async fn snapshot_taken(
        &self,
        reqs: &mut CallRequests<'_>,
        namespace: &str,
        name: &str,
        read: &Read,
        wait: &mut SnapshotWait,
        observed: &mut Observed,
    ) -> Result<bool, HoldError> {
        if !self.snapshot_gate || wait.seen {
            return Ok(true);
        }
        let gate = super::snapshot_gate::gate(
            &self.client,
            reqs,
            namespace,
            name,
            &read.trainjob,
            &mut wait.snapshottable,
        )
        .await?;
        match gate {
            OpenGate::Go => {
                wait.seen = true;
                observed.waiting_for = None;
                Ok(true)
            }
            OpenGate::Wait { why } => {
                observed.waiting_for = Some(why);
                Ok(false)
            }
            OpenGate::Refuse { why, reason } => {
                self.metrics.open_without_snapshot(why);
                Err(HoldError::unsupported(reason))
            }
        }
    }

    /// The call decided on `view`, its write carried into the acting mode. Another holder's
    /// hold: the caller's override is asked now, and only now; granted, the call is decided
    /// again on the same read, and stays an override's.
    async fn decide(
        &self,
        call: &mut Call,
        caller: &CallerIdentity,
        attempts: &mut Attempts,
        view: &HeldView,
        mode: Mode,
        observed: &mut Observed,
    ) -> Decision {
        let decision = self.carried(attempts.decide(call, view), mode);
        let Decision::Fail(e) = &decision else {
            return decision;
        };
        if !e.is_not_holder() {
            return decision;
        }
        match caller.may_override().await {
            Ok(()) => {
                observed.overrode = view.hold.holder().map(str::to_owned);
                *call = call.clone().overriding();
                self.carried(attempts.decide_again(call, view), mode)
            }
            Err(why) => Decision::Fail(HoldError::not_holder(format!(
                "{}; {}",
                e.body().message,
                holdfast_core::hold::printable(&why)
            ))),
        }
    }

    /// A write decided for the hold in force, carried into that hold's mode.
    fn carried(&self, decision: Decision, acting: Mode) -> Decision {
        match decision {
            Decision::Write(w) => Decision::Write(switch::carried_write(w, self.mode, acting)),
            other => other,
        }
    }

    /// The decision remade knowing whether pods of an earlier execution remain, where it
    /// looks for them (`looks_for_pods`). Neither Release nor Open reads `after_conflict`:
    /// that is Hold's alone.
    #[allow(clippy::too_many_arguments)]
    async fn knowing_the_pods(
        &self,
        call: &Call,
        decision: Decision,
        view: HeldView,
        mode: Mode,
        reqs: &mut CallRequests<'_>,
        namespace: &str,
        name: &str,
        observed: &mut Observed,
    ) -> Result<Decision, HoldError> {
        if !looks_for_pods(&decision, self.mode, mode) {
            return Ok(decision);
        }
        let remaining = pods::names(&self.remaining_pods(reqs, namespace, name).await?);
        if remaining.is_empty() {
            return Ok(decision);
        }
        tracing::info!(namespace, name, call = %call.kind(), pods = ?remaining, "refused: pods of an earlier execution remain");
        observed.pods.clone_from(&remaining);
        let view = HeldView {
            pods_remain: true,
            ..view
        };
        Ok(self.carried(decide(call, &view, None), mode))
    }

    /// Kueue mode: a Release that lifted a hold on the Workload (`acting` mode) removes the
    /// TrainJob's hold mark after it (`mark::after_release`).
    async fn unmark_if_released(
        &self,
        call: &Call,
        acting: Mode,
        outcome: Outcome,
        reqs: &mut CallRequests<'_>,
        namespace: &str,
        name: &str,
    ) {
        if let (Call::Release { instance, .. }, Outcome::Released { .. }) = (call, outcome)
            && call.target(acting) == HeldObject::Workload
        {
            super::mark::after_release(reqs, namespace, name, *instance, self.call_bound()).await;
        }
    }

    /// Status: the hold in force, the opened mark, A, and the state classified.
    pub async fn status(&self, namespace: &str, name: &str) -> Result<Status, HoldError> {
        let started = Instant::now();
        let result = async {
            crate::trainjob::check_name(namespace, name).map_err(HoldError::invalid)?;
            let meta = self.read_meta();
            let mut reqs = CallRequests::new(
                &self.client,
                &meta,
                self.config.transit_margin,
                &self.config.user_agent,
                "status",
            );
            let read = self.read(&mut reqs, namespace, name).await?;
            // The hold in force, whichever mode placed it (`hold::switch`).
            let mode = switch::acting_mode(self.mode, &read.trainjob, read.workload.as_ref());
            let mut status = Status::read(mode, &read.trainjob, read.workload.as_ref())?;
            status.remaining_pods = self.remaining_pods(&mut reqs, namespace, name).await?;
            self.read_node_states(&mut reqs, &mut status.remaining_pods)
                .await?;
            if self.snapshot_gate {
                // What an Open would answer about the snapshot, for a job at its start gate.
                let gate = super::snapshot_gate::gate(
                    &self.client,
                    &mut reqs,
                    namespace,
                    name,
                    &read.trainjob,
                    &mut None,
                )
                .await?;
                status.start_blocked = match gate {
                    OpenGate::Go => None,
                    OpenGate::Wait { why } => Some(why),
                    OpenGate::Refuse { reason, .. } => Some(reason),
                };
            }
            Ok(status)
        }
        .await;
        self.metrics
            .record(MetricCall::status, &result, started.elapsed());
        result
    }

    /// Preflight: probes RBAC, the CRDs and a server-side dry-run hold, on TrainJob `target`
    /// if given, else on TrainJobs the controller lists.
    ///
    /// An untargeted preflight records its result for Hold and Release to consult
    /// ([`preflight::next_capability`]). A targeted one reports on its target to its caller
    /// only: it records nothing and changes nothing any other call sees (whoever may ask
    /// about one TrainJob must not switch holds off for the replica), and so waits for no
    /// other probe.
    pub async fn preflight(&self, target: Option<(&str, &str)>) -> PreflightReport {
        if target.is_some() {
            return self.probe(preflight::Scope::Full { target }).await;
        }
        let _one = self.capability.probing.lock().await;
        self.probe(preflight::Scope::Full { target }).await
    }

    /// One preflight, recorded unless targeted; an untargeted one's caller holds the probing
    /// lock.
    async fn probe(&self, scope: preflight::Scope<'_>) -> PreflightReport {
        let started = Instant::now();
        if let Some(queues) = &self.queues {
            // A fresh replica: give the queue watches a moment to list first.
            queues.wait_synced(TokioDuration::from_secs(5)).await;
        }
        let previous = self.capability.report();
        let prober = preflight::Prober {
            client: &self.client,
            mode: self.mode,
            config: &self.config,
            meta: self.read_meta(),
            queues: self.queues.as_ref(),
            workers: &self.workers,
        };
        let report = preflight::run(&prober, scope, previous.as_ref()).await;
        let targeted = matches!(scope, preflight::Scope::Full { target: Some(_) });
        let report = match preflight::next_capability(previous.as_ref(), report.clone(), targeted) {
            Some(recorded) => {
                if let preflight::Scope::Full { .. } = scope {
                    self.capability.round_trip_made();
                }
                self.capability.record(recorded.clone());
                recorded
            }
            None => report,
        };
        self.metrics
            .record::<()>(MetricCall::preflight, &Ok(()), started.elapsed());
        report
    }

    /// The deadline of a Status or Preflight.
    pub(crate) fn read_meta(&self) -> CallMeta {
        CallMeta {
            instance: None,
            deadline: Timestamp::now()
                .saturating_add(self.config.read_timeout)
                .unwrap_or(Timestamp::MAX),
            reason: None,
        }
    }

    /// Reads the TrainJob and its Workload (plain mode: none when Kueue is not installed).
    async fn read(
        &self,
        reqs: &mut CallRequests<'_>,
        namespace: &str,
        name: &str,
    ) -> Result<Read, HoldError> {
        let trainjob = reads::retrying_read(
            reqs,
            self.config.transient_backoff,
            &format!("reading TrainJob {namespace}/{name}"),
            &ReadRequest::Get {
                ar: resources::trainjob(),
                namespace,
                name,
            },
        )
        .await
        .map_err(|e| match e {
            HoldError::Rejected {
                cause: RejectCause::NotFound,
                ..
            } => HoldError::not_found(format!("TrainJob {namespace}/{name} does not exist")),
            other => other,
        })?;
        let workload = match self.mode {
            Mode::Kueue => {
                reads::workload_of(
                    reqs,
                    self.config.transient_backoff,
                    namespace,
                    &trainjob,
                    true,
                )
                .await?
            }
            // Plain mode reads the Workload too: a hold placed on it in kueue mode, before a
            // switch, is honoured until released. Not when the watch says no Workload of the
            // job carries a hold's marks (or none is served): nothing else in plain mode
            // reads a Workload.
            Mode::Plain
                if self.held_workloads.as_ref().is_some_and(|h| {
                    trainjob
                        .pointer("/metadata/uid")
                        .and_then(Value::as_str)
                        .is_some_and(|uid| h.lookup(namespace, uid) == Lookup::Unmarked)
                }) =>
            {
                None
            }
            // No Workload kind served (Kueue not installed): none.
            Mode::Plain => {
                match reads::workload_of(
                    reqs,
                    self.config.transient_backoff,
                    namespace,
                    &trainjob,
                    false,
                )
                .await
                {
                    Err(e) if e.cause() == Some(RejectCause::NotFound) => None,
                    other => other?,
                }
            }
        };
        Ok(Read { trainjob, workload })
    }

    /// Reads the node of each remaining pod (each node once, at most
    /// [`NODES_READ`]; the rest are left unread) and records what it says of itself.
    async fn read_node_states(
        &self,
        reqs: &mut CallRequests<'_>,
        remaining: &mut [RemainingPod],
    ) -> Result<(), HoldError> {
        let mut states: std::collections::BTreeMap<String, NodeState> = Default::default();
        for pod in remaining.iter_mut() {
            let Some(node) = pod.node.clone() else {
                continue;
            };
            if !states.contains_key(&node) {
                if states.len() >= NODES_READ {
                    continue;
                }
                let read = reads::retrying_read(
                    reqs,
                    self.config.transient_backoff,
                    &format!("reading Node {node}"),
                    &ReadRequest::Get {
                        ar: resources::node(),
                        namespace: "",
                        name: &node,
                    },
                )
                .await;
                let state = match read {
                    Ok(object) => NodeState::of(Some(&object)),
                    Err(e) if e.cause() == Some(RejectCause::NotFound) => NodeState::of(None),
                    Err(e) => return Err(e),
                };
                states.insert(node.clone(), state);
            }
            pod.node_state = states.get(&node).copied();
        }
        Ok(())
    }

    /// The pods of the TrainJob's executions that remain, found by ownership
    /// (`holdfast_core::execution`): the namespace's pods, then its Jobs and JobSets only when
    /// a pod's ownership needs them.
    pub(crate) async fn remaining_pods(
        &self,
        reqs: &mut CallRequests<'_>,
        namespace: &str,
        name: &str,
    ) -> Result<Vec<RemainingPod>, HoldError> {
        let mut gathered = Gathered::default();
        loop {
            let need = match gathered.answer(name) {
                Ok(found) => return Ok(found),
                Err(need) => need,
            };
            let request = ReadRequest::List {
                ar: pods::resource(need),
                namespace: Some(namespace),
                params: ListParams::default(),
            };
            let items = match reads::retrying_read(
                reqs,
                self.config.transient_backoff,
                pods::what(need),
                &request,
            )
            .await
            {
                Ok(list) => pods::items(list),
                // JobSet not installed: no JobSet, so none of the pods is a TrainJob's.
                Err(e) if need != Need::Pods && e.cause() == Some(RejectCause::NotFound) => {
                    Vec::new()
                }
                Err(e) => return Err(e),
            };
            gathered.give(need, items);
        }
    }
}

impl std::fmt::Debug for HoldExecutor {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HoldExecutor")
            .field("mode", &self.mode)
            .field("config", &self.config)
            .field("hooks", &self.hooks)
            .finish()
    }
}

/// The newest item of a list (by `creationTimestamp`, then name), if any.
#[cfg(test)]
fn newest(list: &Value) -> Option<Value> {
    let items = list.get("items")?.as_array()?;
    let key = |o: &Value| {
        (
            o.pointer("/metadata/creationTimestamp")
                .and_then(Value::as_str)
                .unwrap_or_default()
                .to_owned(),
            o.pointer("/metadata/name")
                .and_then(Value::as_str)
                .unwrap_or_default()
                .to_owned(),
        )
    };
    items.iter().max_by_key(|o| key(o)).cloned()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn the_newest_workload_is_taken() {
        let list = json!({"items": [
            {"metadata": {"name": "a", "creationTimestamp": "2026-11-29T11:00:00Z"}},
            {"metadata": {"name": "b", "creationTimestamp": "2026-11-29T12:00:00Z"}},
        ]});
        assert_eq!(
            newest(&list).and_then(|w| w["metadata"]["name"].as_str().map(str::to_owned)),
            Some("b".to_owned())
        );
        assert_eq!(newest(&json!({"items": []})), None);
    }
}
