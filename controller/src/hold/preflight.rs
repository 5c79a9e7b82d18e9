//! Preflight: which hold calls this cluster supports, and the CallBound.
//!
//! Hold is a probed capability. Preflight asks the apiserver whether the controller may do
//! what each call needs (SelfSubjectAccessReview), whether the CRDs are served (discovery),
//! and makes a hold round trip for real but without effect: the hold write, rendered on a real
//! object exactly as Hold would render it, PUT with `dryRun=All`, so that admission (the
//! webhook included) and validation judge it. In Kueue mode it also lists every ClusterQueue
//! that does not require holdfast's readmission check (Release and Open of a job there are
//! refused at call time; Hold goes ahead).
//!
//! The capability fails closed and is never decided once for good ([`Capability`]): a probe
//! that failed *or could not be made* makes the calls it gates answer `Unsupported` with the
//! reason; the controller probes again on a timer (`--preflight-interval`) while the hold
//! API is in use, and a call probes again itself when the last probe is older than twice the
//! interval or did not pass (all but the dry-run hold, its own write being that, unless the
//! last dry-run hold is itself older than twice the interval, after an idle spell). Every replica probes the same cluster
//! this way, so replicas agree within one interval, and a refusal is never based on a probe
//! more than [`REPROBE_AFTER`] old. The one probe that may fail to run without gating
//! anything is the dry-run hold on a cluster without a TrainJob it can use: a call's own
//! write is its round trip.
//!
//! What one caller or one tenant controls never switches holds off for the replica
//! ([`next_capability`]): a preflight of a named TrainJob reports on it to its caller and
//! records nothing, and the untargeted dry-run hold takes a refusal of the chosen object's
//! own content or state ([`refusal_is_object_specific`]) as no evidence, tries a TrainJob of
//! another namespace (at most [`ROUND_TRIP_NAMESPACES`]), and else keeps its last pass.

use std::{
    collections::BTreeMap,
    sync::{Arc, RwLock},
    time::Instant,
};

use holdfast_core::{
    hold::{Call, CallKind, CallMeta, CallerId, Decision, HeldView, HoldError, apply, decide},
    mode::Mode,
    readmission::multikueue::UnderMultiKueue,
    rfc3339,
};
use jiff::Timestamp;
use kube::core::params::ListParams;
use kube::core::{ApiResource, DynamicObject, Resource};
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

use super::{
    config::{ExecutorConfig, PolicyProbe},
    reads,
    requests::{CallRequests, ReadRequest, RequestError, UNREACHABLE},
};
use holdfast_cluster::queues::Queues;
use holdfast_cluster::resources;

/// What preflight probes.
#[derive(
    Clone,
    Copy,
    Debug,
    PartialEq,
    Eq,
    Hash,
    PartialOrd,
    Ord,
    Serialize,
    Deserialize,
    utoipa::ToSchema,
)]
#[serde(rename_all = "kebab-case")]
pub enum Probe {
    /// RBAC: get TrainJobs.
    GetTrainjobs,
    /// RBAC: update TrainJobs.
    UpdateTrainjobs,
    /// RBAC: list pods (plain-mode Release looks for the held execution's pods).
    ListPods,
    /// RBAC: list Workloads (Kueue mode).
    ListWorkloads,
    /// RBAC: update Workloads (Kueue mode).
    UpdateWorkloads,
    /// RBAC: create TokenReviews (the hold API authenticates callers).
    CreateTokenreviews,
    /// RBAC: create SubjectAccessReviews (the hold API authorises callers).
    CreateSubjectaccessreviews,
    /// Discovery: `trainer.kubeflow.org/v1alpha1` serves `trainjobs`.
    TrainjobsServed,
    /// Discovery: `kueue.x-k8s.io/v1beta2` serves `workloads` (Kueue mode).
    WorkloadsServed,
    /// Kueue mode: an AdmissionCheck whose controller is holdfast's readmission gate
    /// (`controllerName: holdfast.dev/readmission`) exists. Without it a released job would
    /// run without the gate's pod check.
    ReadmissionCheck,
    /// Kueue mode: the chart's readmission-gate ValidatingAdmissionPolicy and its binding
    /// exist as the chart renders them (read by name; see
    /// `holdfast_core::readmission::gate_policy`). Without them Kueue may admit a released
    /// job before the gate is Ready.
    ReadmissionGatePolicy,
    /// A server-side dry-run hold: the hold write PUT with `dryRun=All`.
    HoldRoundTrip,
    /// `validation.engine` policy or both: the apiserver enforces holdfast's
    /// ValidatingAdmissionPolicies (a dry-run write the chart's policy must refuse is refused).
    AdmissionPolicies,
}

impl Probe {
    /// The probes made in `mode`.
    pub fn all(mode: Mode) -> Vec<Probe> {
        let mut probes = vec![
            Probe::GetTrainjobs,
            Probe::UpdateTrainjobs,
            Probe::ListPods,
            Probe::CreateTokenreviews,
            Probe::CreateSubjectaccessreviews,
            Probe::TrainjobsServed,
        ];
        if mode == Mode::Kueue {
            probes.extend([
                Probe::ListWorkloads,
                Probe::UpdateWorkloads,
                Probe::WorkloadsServed,
                Probe::ReadmissionCheck,
            ]);
        }
        probes.push(Probe::HoldRoundTrip);
        probes
    }

    /// The calls that cannot work in `mode` when this probe fails. The access reviews gate
    /// only the HTTP API's authentication, not a call: they gate none here.
    pub fn gates(self, mode: Mode) -> &'static [Gated] {
        use Gated::*;
        match (self, mode) {
            (Probe::GetTrainjobs | Probe::TrainjobsServed, _) => &[Hold, Release, Open, Status],
            (Probe::UpdateTrainjobs, Mode::Plain) => &[Hold, Release, Open],
            (Probe::UpdateTrainjobs, Mode::Kueue) => &[Open],
            (Probe::ListPods, Mode::Plain) => &[Release],
            (Probe::ListWorkloads | Probe::WorkloadsServed, Mode::Kueue) => {
                &[Hold, Release, Open, Status]
            }
            (Probe::UpdateWorkloads | Probe::ReadmissionCheck, Mode::Kueue) => &[Hold, Release],
            (Probe::ReadmissionGatePolicy, Mode::Kueue) => &[Release, Open],
            (Probe::HoldRoundTrip, _) => &[Hold, Release],
            // Nothing keeps a hold, or the start gate, if the rules are not enforced.
            (Probe::AdmissionPolicies, _) => &[Hold, Release, Open],
            _ => &[],
        }
    }

    /// `(group, resource, verb)` of an RBAC probe.
    fn access(self) -> Option<(String, String, &'static str)> {
        let of = |ar: ApiResource, verb| (ar.group, ar.plural, verb);
        let named =
            |group: &str, resource: &str, verb| (group.to_owned(), resource.to_owned(), verb);
        Some(match self {
            Probe::GetTrainjobs => of(resources::trainjob(), "get"),
            Probe::UpdateTrainjobs => of(resources::trainjob(), "update"),
            Probe::ListPods => of(resources::pod(), "list"),
            Probe::ListWorkloads => of(resources::workload(), "list"),
            Probe::UpdateWorkloads => of(resources::workload(), "update"),
            Probe::CreateTokenreviews => named("authentication.k8s.io", "tokenreviews", "create"),
            Probe::CreateSubjectaccessreviews => {
                named("authorization.k8s.io", "subjectaccessreviews", "create")
            }
            Probe::TrainjobsServed
            | Probe::WorkloadsServed
            | Probe::ReadmissionCheck
            | Probe::ReadmissionGatePolicy
            | Probe::HoldRoundTrip
            | Probe::AdmissionPolicies => return None,
        })
    }
}

/// A call, as preflight reports its support.
#[derive(
    Clone,
    Copy,
    Debug,
    PartialEq,
    Eq,
    Hash,
    PartialOrd,
    Ord,
    Serialize,
    Deserialize,
    utoipa::ToSchema,
)]
#[serde(rename_all = "lowercase")]
pub enum Gated {
    Hold,
    Release,
    Open,
    Status,
}

impl From<CallKind> for Gated {
    fn from(k: CallKind) -> Self {
        match k {
            CallKind::Hold => Gated::Hold,
            CallKind::Release => Gated::Release,
            CallKind::Open => Gated::Open,
        }
    }
}

/// How a probe went.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
pub enum CheckResult {
    Passed,
    Failed,
    /// The probe could not be made (e.g. no TrainJob to dry-run a hold on); it gates nothing.
    NotChecked,
}

/// One probe's result.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct Check {
    pub probe: Probe,
    pub result: CheckResult,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub detail: Option<String>,
}

impl Check {
    /// The hold round trip with no TrainJob to dry-run on: it gates nothing (a call's own
    /// write is then the round trip).
    fn untried(&self) -> bool {
        self.probe == Probe::HoldRoundTrip
            && self.result == CheckResult::NotChecked
            && self
                .detail
                .as_deref()
                .is_some_and(|d| d.starts_with(NO_TRAINJOB))
    }

    fn new(probe: Probe, result: CheckResult, detail: impl Into<String>) -> Self {
        let detail = detail.into();
        Check {
            probe,
            result,
            detail: (!detail.is_empty()).then_some(detail),
        }
    }
}

/// How old a failed probe may be before a call that it would refuse probes again.
pub const REPROBE_AFTER: std::time::Duration = std::time::Duration::from_secs(2);

/// Whether a call is supported, and if not why.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct CallSupport {
    pub supported: bool,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
}

/// `GET /v1/preflight`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct PreflightReport {
    pub mode: Mode,
    /// CallBound: how long after a call's deadline a request already sent may still land.
    pub call_bound_seconds: f64,
    /// The apiserver request timeout CallBound was computed from.
    pub apiserver_request_timeout_seconds: f64,
    pub checked_at: String,
    pub checks: Vec<Check>,
    /// Per call (`hold`, `release`, `open`, `status`): supported, or why not.
    pub calls: BTreeMap<Gated, CallSupport>,
    /// Kueue mode: every ClusterQueue that does not require holdfast's readmission check on
    /// every flavor, and why. A job queued there can be held, but not released or opened.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub ungated_cluster_queues: Vec<UngatedQueue>,
    /// Kueue mode: every ClusterQueue that lists MultiKueue's AdmissionCheck, and what that
    /// means: Hold, Release and Open of a job queued there go ahead where holdfast has a
    /// kubeconfig for every worker of the check's MultiKueueConfig, and answer `Unsupported`
    /// elsewhere, naming what is missing.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub multikueue_cluster_queues: Vec<UngatedQueue>,
}

/// `GET /v1/preflight`'s answer: the report with `"result":"Ok"`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct PreflightAnswer {
    pub result: holdfast_core::hold::Success,
    #[serde(flatten)]
    pub report: PreflightReport,
}

/// A ClusterQueue without holdfast's readmission check.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct UngatedQueue {
    pub name: String,
    pub why: String,
}

impl PreflightReport {
    /// A report of `checks` in `mode`: each call is supported unless a probe gating it failed
    /// or could not be made (fail closed).
    pub fn new(
        mode: Mode,
        call_bound: std::time::Duration,
        request_timeout: std::time::Duration,
        checks: Vec<Check>,
    ) -> Self {
        let calls = calls_of(mode, &checks);
        PreflightReport {
            mode,
            call_bound_seconds: call_bound.as_secs_f64(),
            apiserver_request_timeout_seconds: request_timeout.as_secs_f64(),
            checked_at: rfc3339::seconds(Timestamp::now()),
            checks,
            calls,
            ungated_cluster_queues: Vec::new(),
            multikueue_cluster_queues: Vec::new(),
        }
    }

    /// Whether every probe gating `call` that did not pass failed only because the apiserver
    /// could not be reached. Such a call is not refused as `Unsupported` (nothing says the
    /// cluster lacks anything): it goes ahead, its own requests meet the outage, and it ends
    /// at its deadline having written nothing (`Rejected/DeadlinePassed`).
    pub fn only_unreachable(&self, call: Gated) -> bool {
        let mut gating = self
            .checks
            .iter()
            .filter(|c| c.result != CheckResult::Passed && c.probe.gates(self.mode).contains(&call))
            .filter(|c| !c.untried())
            .peekable();
        gating.peek().is_some()
            && gating.all(|c| {
                c.result == CheckResult::NotChecked
                    && c.detail
                        .as_deref()
                        .is_some_and(|d| d.starts_with(UNREACHABLE))
            })
    }

    /// `Unsupported` with the reason, if a probe gating `call` failed.
    pub fn check(&self, call: Gated) -> Result<(), HoldError> {
        match self.calls.get(&call) {
            Some(CallSupport {
                supported: false,
                reason,
            }) => Err(HoldError::unsupported(
                reason
                    .clone()
                    .unwrap_or_else(|| "preflight failed".to_owned()),
            )),
            _ => Ok(()),
        }
    }

    /// The success body: `{"result":"Ok", ...}` ([`PreflightAnswer`]).
    pub fn body(&self) -> Value {
        serde_json::to_value(PreflightAnswer {
            result: holdfast_core::hold::Success::Ok,
            report: self.clone(),
        })
        .unwrap_or(Value::Null)
    }
}

/// Per call, whether `checks` support it in `mode`: supported unless a probe gating it
/// failed or could not be made (fail closed).
fn calls_of(mode: Mode, checks: &[Check]) -> BTreeMap<Gated, CallSupport> {
    let mut calls = BTreeMap::new();
    for call in [Gated::Hold, Gated::Release, Gated::Open, Gated::Status] {
        let failed: Vec<String> = checks
            .iter()
            .filter(|c| c.result != CheckResult::Passed && c.probe.gates(mode).contains(&call))
            .filter(|c| !c.untried())
            .map(|c| {
                let what = match c.result {
                    CheckResult::NotChecked => {
                        format!("{} could not be checked", probe_name(c.probe))
                    }
                    _ => probe_name(c.probe),
                };
                match &c.detail {
                    Some(d) => format!("{what}: {d}"),
                    None => what,
                }
            })
            .collect();
        calls.insert(
            call,
            CallSupport {
                supported: failed.is_empty(),
                reason: (!failed.is_empty())
                    .then(|| format!("preflight failed: {}", failed.join("; "))),
            },
        );
    }
    calls
}

fn probe_name(p: Probe) -> String {
    serde_json::to_value(p)
        .ok()
        .and_then(|v| v.as_str().map(str::to_owned))
        .unwrap_or_default()
}

/// The last preflight result and when it was made, shared by the executor (which consults
/// it) and whoever runs preflight.
#[derive(Clone, Debug, Default)]
pub struct Capability {
    last: Arc<RwLock<Option<(PreflightReport, Instant)>>>,
    /// One probe at a time: calls that find the capability stale at once probe once.
    pub(crate) probing: Arc<tokio::sync::Mutex<()>>,
    /// When a call last consulted the capability ([`Capability::verdict`]).
    consulted: Arc<RwLock<Option<Instant>>>,
    /// When the hold round trip was last made (a full preflight); a call's own probe carries
    /// its result.
    round_trip_at: Arc<RwLock<Option<Instant>>>,
}

/// What the last preflight says about a call.
#[derive(Clone, Debug, PartialEq)]
pub enum CapabilityVerdict {
    Supported,
    /// Refused, on a probe younger than [`REPROBE_AFTER`].
    Refused(HoldError),
    /// No probe yet, one older than the allowed age, or one that refused longer ago than
    /// [`REPROBE_AFTER`]: probe again first.
    ProbeFirst,
}

impl Capability {
    pub fn record(&self, report: PreflightReport) {
        *self.last.write().unwrap_or_else(|e| e.into_inner()) = Some((report, Instant::now()));
    }

    pub fn report(&self) -> Option<PreflightReport> {
        self.last
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .as_ref()
            .map(|(r, _)| r.clone())
    }

    /// What the last preflight says about `call`, if it is younger than `max_age` (so a zero
    /// `max_age` always probes first, however fast the clock reads).
    pub fn verdict(&self, call: CallKind, max_age: std::time::Duration) -> CapabilityVerdict {
        *self.consulted.write().unwrap_or_else(|e| e.into_inner()) = Some(Instant::now());
        let last = self.last.read().unwrap_or_else(|e| e.into_inner());
        let Some((report, at)) = last.as_ref() else {
            return CapabilityVerdict::ProbeFirst;
        };
        let age = at.elapsed();
        if age >= max_age {
            return CapabilityVerdict::ProbeFirst;
        }
        match report.check(Gated::from(call)) {
            Ok(()) => CapabilityVerdict::Supported,
            // An outage refuses nothing for later: probe again.
            Err(_) if report.only_unreachable(Gated::from(call)) => CapabilityVerdict::ProbeFirst,
            Err(e) if age < REPROBE_AFTER => CapabilityVerdict::Refused(e),
            Err(_) => CapabilityVerdict::ProbeFirst,
        }
    }
}

impl Capability {
    /// Records that a full preflight (the hold round trip included) was just made.
    pub(crate) fn round_trip_made(&self) {
        *self
            .round_trip_at
            .write()
            .unwrap_or_else(|e| e.into_inner()) = Some(Instant::now());
    }

    /// Whether the last hold round trip is older than `max_age`: a call's own probe then
    /// makes it again (as the periodic preflight does) rather than carry its result (after an idle
    /// spell no periodic preflight has made it). No round trip yet: its result says so and
    /// gates nothing.
    pub(crate) fn round_trip_stale(&self, max_age: std::time::Duration) -> bool {
        self.round_trip_at
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .is_some_and(|at| at.elapsed() >= max_age)
    }

    /// Whether the periodic preflight should probe now: only while the hold API is in use,
    /// that is while a call consulted the capability within `max_age` (the age past which a
    /// call probes first). An idle controller sends no probe: the next call finds the last
    /// one too old and probes before it acts, as the first call after start-up does.
    pub fn reprobe_due(&self, max_age: std::time::Duration) -> bool {
        let consulted = *self.consulted.read().unwrap_or_else(|e| e.into_inner());
        reprobe_due(consulted.map(|at| at.elapsed()), max_age)
    }
}

/// [`Capability::reprobe_due`], given how long ago a call last consulted the capability.
fn reprobe_due(since_consulted: Option<std::time::Duration>, max_age: std::time::Duration) -> bool {
    since_consulted.is_some_and(|age| age < max_age)
}

/// What a preflight probes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Scope<'a> {
    /// Every probe; the hold round trip on `target` (else on TrainJobs listed, one namespace
    /// at a time).
    Full { target: Option<(&'a str, &'a str)> },
    /// Every probe but the hold round trip, whose last result is kept: what a call probes
    /// before it acts (its own write is a round trip, and a dry-run write of its own would
    /// double its writes).
    BeforeCall,
}

/// What a preflight probes with: the executor's client, mode, settings and queues, and the
/// deadline of this preflight.
pub(crate) struct Prober<'a> {
    pub client: &'a kube::Client,
    pub mode: Mode,
    pub config: &'a ExecutorConfig,
    pub meta: CallMeta,
    /// Kueue mode: the watched queues.
    pub queues: Option<&'a Queues>,
    /// The MultiKueue workers the readmission gate sees.
    pub workers: &'a crate::multikueue::Workers,
}

/// Runs every probe of the executor's mode. `previous`: the last report, whose round trip a
/// [`Scope::BeforeCall`] probe keeps.
pub(crate) async fn run(
    exec: &Prober<'_>,
    scope: Scope<'_>,
    previous: Option<&PreflightReport>,
) -> PreflightReport {
    let mode = exec.mode;
    let config = exec.config;
    let mut reqs = CallRequests::new(
        exec.client,
        &exec.meta,
        config.transit_margin,
        &config.user_agent,
        "preflight",
    );
    let mut checks = Vec::new();
    let mut probes = Probe::all(mode);
    if config.policy_probe.is_some() {
        probes.push(Probe::AdmissionPolicies);
    }
    if mode == Mode::Kueue && config.gate_policy.is_some() {
        probes.push(Probe::ReadmissionGatePolicy);
    }
    for probe in probes {
        let check = match probe {
            Probe::TrainjobsServed => served(&mut reqs, probe, &resources::trainjob()).await,
            Probe::WorkloadsServed => served(&mut reqs, probe, &resources::workload()).await,
            Probe::ReadmissionCheck => readmission_check(&mut reqs).await,
            Probe::ReadmissionGatePolicy => match &config.gate_policy {
                Some(name) => gate_policy(&mut reqs, name).await,
                None => Check::new(probe, CheckResult::NotChecked, "not asked for"),
            },
            Probe::AdmissionPolicies => match &config.policy_probe {
                Some(p) => policies_enforced(&mut reqs, p).await,
                None => Check::new(probe, CheckResult::NotChecked, "not asked for"),
            },
            Probe::HoldRoundTrip => match scope {
                Scope::Full { target } => round_trip(exec, &mut reqs, target).await,
                Scope::BeforeCall => match previous
                    .and_then(|r| r.checks.iter().find(|c| c.probe == Probe::HoldRoundTrip))
                {
                    Some(last) => last.clone(),
                    None => Check::new(
                        probe,
                        CheckResult::NotChecked,
                        format!("{NO_TRAINJOB} yet: this call's own write is the round trip"),
                    ),
                },
            },
            _ => access(&mut reqs, probe).await,
        };
        checks.push(check);
    }
    let mut report = PreflightReport::new(
        mode,
        holdfast_core::hold::call_bound(config.apiserver_request_timeout),
        config.apiserver_request_timeout,
        checks,
    );
    if let Some(queues) = exec.queues {
        report.ungated_cluster_queues = queues
            .ungated()
            .into_iter()
            .map(|(name, why)| UngatedQueue { name, why })
            .collect();
        for (name, check) in queues.multikueue() {
            let under = UnderMultiKueue::Queue {
                cluster_queue: name.clone(),
                check,
            };
            let coverage =
                crate::multikueue::coverage_of(exec.client, Some(queues), exec.workers, &under)
                    .await;
            let why = if coverage.covered() {
                format!(
                    "hold, release and open go ahead: {}, and the readmission gate counts the previous execution's pods there",
                    coverage.why_not()
                )
            } else {
                under.refusals(&coverage)
            };
            report
                .multikueue_cluster_queues
                .push(UngatedQueue { name, why });
        }
    }
    report
}

/// A SelfSubjectAccessReview of the probe's access, cluster-wide.
async fn access(reqs: &mut CallRequests<'_>, probe: Probe) -> Check {
    let Some((group, resource, verb)) = probe.access() else {
        return Check::new(probe, CheckResult::NotChecked, "not an access probe");
    };
    let review = json!({
        "apiVersion": "authorization.k8s.io/v1",
        "kind": "SelfSubjectAccessReview",
        "spec": {"resourceAttributes": {"group": group, "resource": resource, "verb": verb}}
    });
    match reqs
        .create(
            "/apis/authorization.k8s.io/v1/selfsubjectaccessreviews",
            &review,
        )
        .await
    {
        Ok(answer) if answer.pointer("/status/allowed") == Some(&Value::Bool(true)) => {
            Check::new(probe, CheckResult::Passed, "")
        }
        Ok(answer) => Check::new(
            probe,
            CheckResult::Failed,
            format!(
                "the controller may not {verb} {resource}{}",
                answer
                    .pointer("/status/reason")
                    .and_then(Value::as_str)
                    .filter(|r| !r.is_empty())
                    .map(|r| format!(" ({r})"))
                    .unwrap_or_default()
            ),
        ),
        Err(e) => Check::new(probe, CheckResult::NotChecked, e.to_string()),
    }
}

/// Whether an AdmissionCheck served by holdfast's readmission gate exists.
async fn readmission_check(reqs: &mut CallRequests<'_>) -> Check {
    let probe = Probe::ReadmissionCheck;
    let path = DynamicObject::url_path(&resources::admission_check(), None);
    match reqs.get_path(&path).await {
        Ok(list) => {
            let ours: Vec<&str> = list
                .get("items")
                .and_then(Value::as_array)
                .map(|items| {
                    items
                        .iter()
                        .filter(|c| holdfast_core::readmission::is_our_check(c))
                        .filter_map(|c| c.pointer("/metadata/name").and_then(Value::as_str))
                        .collect()
                })
                .unwrap_or_default();
            if ours.is_empty() {
                Check::new(
                    probe,
                    CheckResult::Failed,
                    format!(
                        "no AdmissionCheck has controllerName {}: create one and require it \
                         in the ClusterQueues of held jobs",
                        holdfast_core::names::READMISSION_CONTROLLER
                    ),
                )
            } else {
                Check::new(probe, CheckResult::Passed, ours.join(", "))
            }
        }
        Err(e) if e.code() == Some(404) => Check::new(
            probe,
            CheckResult::Failed,
            format!("{path} is not served: are Kueue's CRDs installed?"),
        ),
        Err(e) if e.code() == Some(403) => Check::new(
            probe,
            CheckResult::Failed,
            format!("the controller may not list admissionchecks: {e}"),
        ),
        Err(e) => Check::new(probe, CheckResult::NotChecked, e.to_string()),
    }
}

/// Whether the readmission-gate policy `name` and its binding are installed as the chart
/// renders them.
async fn gate_policy(reqs: &mut CallRequests<'_>, name: &str) -> Check {
    let probe = Probe::ReadmissionGatePolicy;
    let base = "/apis/admissionregistration.k8s.io/v1";
    let mut read = Vec::with_capacity(2);
    for kind in [
        "validatingadmissionpolicies",
        "validatingadmissionpolicybindings",
    ] {
        match reqs.get_path(&format!("{base}/{kind}/{name}")).await {
            Ok(object) => read.push(Some(object)),
            Err(e) if e.code() == Some(404) => read.push(None),
            Err(e) if e.code() == Some(403) => {
                return Check::new(
                    probe,
                    CheckResult::Failed,
                    format!(
                        "the controller may not get {kind} {name} (the chart grants it by \
                         name): {e}"
                    ),
                );
            }
            Err(e) => return Check::new(probe, CheckResult::NotChecked, e.to_string()),
        }
    }
    match holdfast_core::readmission::gate_policy::gate_policy_problem(
        name,
        read.first().and_then(Option::as_ref),
        read.get(1).and_then(Option::as_ref),
    ) {
        None => Check::new(probe, CheckResult::Passed, name),
        Some(why) => Check::new(probe, CheckResult::Failed, why),
    }
}

/// The ConfigMap [`policies_enforced`] dry-runs: no snapshot name, label or owner.
pub const POLICY_PROBE_CONFIGMAP: &str = "holdfast-preflight-policy-probe";

/// Whether the apiserver enforces holdfast's ValidatingAdmissionPolicies: the controller's
/// dry-run create of [`POLICY_PROBE_CONFIGMAP`] must be refused by one.
async fn policies_enforced(reqs: &mut CallRequests<'_>, p: &PolicyProbe) -> Check {
    let probe = Probe::AdmissionPolicies;
    let path = format!("/api/v1/namespaces/{}/configmaps", p.namespace);
    let cm = json!({"apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": POLICY_PROBE_CONFIGMAP, "namespace": p.namespace}});
    let (result, detail) = policy_verdict(
        &p.engine,
        &p.namespace,
        reqs.create_with(&path, &cm, true).await,
    );
    Check::new(probe, result, detail)
}

/// How the dry-run create of [`policies_enforced`] reads.
fn policy_verdict(
    engine: &str,
    namespace: &str,
    answer: Result<Value, RequestError>,
) -> (CheckResult, String) {
    let what = format!(
        "a dry-run create of ConfigMap {namespace}/{POLICY_PROBE_CONFIGMAP} by the controller"
    );
    match answer {
        Err(e) if e.to_string().contains("ValidatingAdmissionPolicy") => (
            CheckResult::Passed,
            format!("{what} was refused by a ValidatingAdmissionPolicy, as it must be"),
        ),
        Ok(_) => (
            CheckResult::Failed,
            format!(
                "validation.engine is {engine}, but the apiserver let through {what}, which the                  chart's ValidatingAdmissionPolicy on the controller's ConfigMaps must refuse:                  it enforces no ValidatingAdmissionPolicy (the ValidatingAdmissionPolicy                  admission plugin is off) or the chart's policies are not installed, so nothing                  enforces holdfast's rules. Enable the plugin (on by default since Kubernetes                  1.30: take it out of kube-apiserver's --disable-admission-plugins), or set                  validation.engine=webhook and upgrade the release"
            ),
        ),
        Err(e) if e.is_transient() => (CheckResult::NotChecked, e.to_string()),
        Err(e) => (
            CheckResult::Failed,
            format!(
                "validation.engine is {engine}, and {what} was refused, but not by a                  ValidatingAdmissionPolicy ({e}): whether the apiserver enforces holdfast's                  policies is unknown"
            ),
        ),
    }
}

/// Whether the API group version at `path` serves `resource`.
/// Whether the API group version of `ar` serves its resource (the CRD is installed).
async fn served(reqs: &mut CallRequests<'_>, probe: Probe, ar: &ApiResource) -> Check {
    let path = &format!("/apis/{}", ar.api_version);
    let resource = &ar.plural;
    match reqs.get_path(path).await {
        Ok(list) => {
            let found = list
                .get("resources")
                .and_then(Value::as_array)
                .is_some_and(|rs| {
                    rs.iter()
                        .any(|r| r.get("name").and_then(Value::as_str) == Some(resource.as_str()))
                });
            if found {
                Check::new(probe, CheckResult::Passed, "")
            } else {
                Check::new(
                    probe,
                    CheckResult::Failed,
                    format!("{path} does not serve {resource}"),
                )
            }
        }
        Err(e) if e.code() == Some(404) => Check::new(
            probe,
            CheckResult::Failed,
            format!("{path} is not served: is the CRD installed?"),
        ),
        Err(e) => Check::new(probe, CheckResult::NotChecked, e.to_string()),
    }
}

/// How a round trip that found no TrainJob it could use says so. Such a round trip gates
/// nothing: a call's own write is then its round trip.
const NO_TRAINJOB: &str = "no TrainJob to dry-run a hold on";

/// The holder the dry-run hold names (never stored: a dry run).
const PREFLIGHT_CALLER: &str = "system:holdfast:preflight";

/// The untargeted round trip tries TrainJobs of at most this many namespaces, one each, when
/// the dry-run hold on one fails for a reason of that object's own.
pub const ROUND_TRIP_NAMESPACES: usize = 3;

/// How a dry-run hold on one TrainJob went.
#[derive(Debug)]
enum Tried {
    /// It says something about the cluster: passed, failed, or could not be made (the
    /// apiserver unreachable or timing out).
    Said(Check),
    /// It failed for a reason of the object's own (its content, or it changed or went away
    /// meanwhile): no evidence either way about the cluster.
    ObjectSpecific(String),
}

/// How the apiserver's refusal of a dry-run hold is read: `true` when the refusal is about
/// the object written rather than about the write: 422 Invalid from the object's own
/// validation (with the hold's annotations its annotations pass 256 KiB, or it no longer
/// validates against its CRD's schema), 413 (too large), 409 (it changed since it was read),
/// 404 (it was deleted since). Anything else that is not transient is about the cluster and
/// fails the probe: 403 and 401 (RBAC, or an admission webhook refusing), 400 (e.g. a webhook
/// that cannot dry-run), and a 422 that an admission policy or webhook answered (a
/// ValidatingAdmissionPolicy's denial is 422 Invalid by default, its message "... is
/// forbidden: ValidatingAdmissionPolicy ... denied request").
pub(crate) fn refusal_is_object_specific(code: u16, message: &str) -> bool {
    let admission = message.contains(" is forbidden: ")
        || message.contains("ValidatingAdmissionPolicy")
        || message.contains("admission webhook");
    match code {
        404 | 409 | 413 => true,
        422 => !admission,
        _ => false,
    }
}

/// The hold write of a probe Hold, rendered on a real object and PUT with `dryRun=All`: on
/// `target` if given, else on TrainJobs the controller lists, one namespace at a time, until
/// one says something about the cluster (at most [`ROUND_TRIP_NAMESPACES`]).
async fn round_trip(
    exec: &Prober<'_>,
    reqs: &mut CallRequests<'_>,
    target: Option<(&str, &str)>,
) -> Check {
    let probe = Probe::HoldRoundTrip;
    let not_checked = |d: String| Check::new(probe, CheckResult::NotChecked, d);
    if let Some((ns, name)) = target {
        if let Err(e) = crate::trainjob::check_name(ns, name) {
            return not_checked(e);
        }
        let trainjob = reads::retrying_read(
            reqs,
            exec.config.transient_backoff,
            "reading the preflight TrainJob",
            &ReadRequest::Get {
                ar: resources::trainjob(),
                namespace: ns,
                name,
            },
        )
        .await;
        return match trainjob {
            Ok(Value::Null) => not_checked(format!("{ns}/{name}: no such TrainJob")),
            Ok(tj) => match dry_run_hold(exec, reqs, &tj).await {
                Tried::Said(check) => check,
                Tried::ObjectSpecific(why) => not_checked(why),
            },
            Err(HoldError::Unsupported { reason }) => {
                Check::new(probe, CheckResult::Failed, reason)
            }
            Err(e) => not_checked(format!("{ns}/{name}: {e}")),
        };
    }
    let mut skipped: Vec<(String, String)> = Vec::new();
    while skipped.len() < ROUND_TRIP_NAMESPACES {
        let fields = skipped
            .iter()
            .map(|(ns, _)| format!("metadata.namespace!={ns}"))
            .collect::<Vec<_>>()
            .join(",");
        let listed = reads::retrying_read(
            reqs,
            exec.config.transient_backoff,
            "listing TrainJobs",
            &ReadRequest::List {
                ar: resources::trainjob(),
                namespace: None,
                params: ListParams::default().limit(1).fields(&fields),
            },
        )
        .await
        .map(|list| {
            list.get("items")
                .and_then(Value::as_array)
                .and_then(|items| items.first())
                .cloned()
        });
        let trainjob = match listed {
            Ok(Some(tj)) => tj,
            Ok(None) => break,
            Err(HoldError::Unsupported { reason }) => {
                return Check::new(probe, CheckResult::Failed, reason);
            }
            Err(e) => return not_checked(e.to_string()),
        };
        match dry_run_hold(exec, reqs, &trainjob).await {
            Tried::Said(check) => return check,
            Tried::ObjectSpecific(why) => {
                let namespace = trainjob
                    .pointer("/metadata/namespace")
                    .and_then(Value::as_str)
                    .unwrap_or_default()
                    .to_owned();
                if namespace.is_empty() {
                    break;
                }
                skipped.push((namespace, why));
            }
        }
    }
    let tried = skipped
        .iter()
        .map(|(_, why)| why.as_str())
        .collect::<Vec<_>>()
        .join("; ");
    not_checked(if skipped.is_empty() {
        format!(
            "{NO_TRAINJOB}; name one (GET /v1/preflight?namespace=NS&name=NAME), or call it: a call dry-runs its own"
        )
    } else {
        format!(
            "{NO_TRAINJOB} that says anything about the cluster (tried: {tried}); a call dry-runs its own"
        )
    })
}

/// The dry-run hold on `trainjob`.
async fn dry_run_hold(exec: &Prober<'_>, reqs: &mut CallRequests<'_>, trainjob: &Value) -> Tried {
    let probe = Probe::HoldRoundTrip;
    let namespace = trainjob
        .pointer("/metadata/namespace")
        .and_then(Value::as_str)
        .unwrap_or_default()
        .to_owned();
    let trainjob_name = trainjob
        .pointer("/metadata/name")
        .and_then(Value::as_str)
        .unwrap_or_default()
        .to_owned();
    let this = format!("{namespace}/{trainjob_name}");
    let own = |why: String| Tried::ObjectSpecific(format!("{this}: {why}"));
    let workload = match exec.mode {
        Mode::Plain => None,
        Mode::Kueue => {
            match reads::workload_of(
                reqs,
                exec.config.transient_backoff,
                &namespace,
                trainjob,
                true,
            )
            .await
            {
                Ok(Some(w)) => Some(w),
                // An unqueued TrainJob has no Workload (Kueue manages only queued jobs), and
                // a queued one has none until Kueue makes it.
                Ok(None) => return own("the TrainJob has no Kueue Workload (yet)".to_owned()),
                Err(HoldError::Unsupported { reason }) => {
                    return Tried::Said(Check::new(probe, CheckResult::Failed, reason));
                }
                Err(e) => {
                    return Tried::Said(Check::new(
                        probe,
                        CheckResult::NotChecked,
                        format!("{this}: {e}"),
                    ));
                }
            }
        }
    };
    let mode = exec.mode;
    let held = workload.as_ref().unwrap_or(trainjob);
    let instance = holdfast_core::hold::object::hold_state(held)
        .instance()
        .map_or(1, |k| k.saturating_add(1));
    // A dry run as an overrider: whoever holds the job, the probe decides a write to send.
    let call = Call::Hold {
        instance,
        reason: Some("holdfast preflight (dry run)".to_owned()),
        placed_at: Timestamp::now(),
        by: CallerId::new(PREFLIGHT_CALLER).overriding(),
    };
    let view = match HeldView::read(&call, mode, trainjob, workload.as_ref(), false) {
        Ok(v) => v,
        Err(e) => return own(e.to_string()),
    };
    let write = match decide(&call, &view, None) {
        Decision::Write(w) => w,
        other => return own(format!("no hold write to probe: {other:?}")),
    };
    let mut object = held.clone();
    if let Err(e) = apply(&write, &mut object, mode) {
        return own(e.to_string());
    }
    let ar = match write.target {
        holdfast_core::hold::HeldObject::TrainJob => resources::trainjob(),
        holdfast_core::hold::HeldObject::Workload => resources::workload(),
    };
    let name = object
        .pointer("/metadata/name")
        .and_then(Value::as_str)
        .unwrap_or_default()
        .to_owned();
    let what = format!("{namespace}/{name}");
    match reqs.replace(&ar, &namespace, &name, &object, true).await {
        Ok(_) => Tried::Said(Check::new(
            probe,
            CheckResult::Passed,
            format!("a dry-run hold of {what} was accepted"),
        )),
        Err(e)
            if e.code()
                .is_some_and(|code| refusal_is_object_specific(code, &e.to_string())) =>
        {
            own(format!(
                "the dry-run hold of {what} was refused for its own content or state: {e}"
            ))
        }
        Err(e) if e.is_transient() => Tried::Said(Check::new(
            probe,
            CheckResult::NotChecked,
            format!("the dry-run hold of {what} did not complete: {e}"),
        )),
        Err(e) => Tried::Said(Check::new(
            probe,
            CheckResult::Failed,
            format!("the dry-run hold of {what} was refused: {e}"),
        )),
    }
}

/// The capability's update rule: what a preflight leaves for every later call to consult,
/// given the report recorded before it (`None`: leave the capability as it is).
///
/// - A targeted preflight (`targeted`) reports on its target to its caller and changes
///   nothing: the TrainJob one caller names (one that does not exist, has no Workload yet,
///   or whose content the apiserver refuses) is no evidence about the cluster.
/// - A round trip that could not be made on any TrainJob (none listed, or each one tried
///   refused for its own content) keeps the last round trip that passed, noting why; it
///   gates nothing either way (a call's own write is its round trip). A round trip that
///   passed, failed, or met an unreachable apiserver is recorded as it is.
pub(crate) fn next_capability(
    previous: Option<&PreflightReport>,
    new: PreflightReport,
    targeted: bool,
) -> Option<PreflightReport> {
    if targeted {
        return None;
    }
    let last = previous.and_then(|r| r.checks.iter().find(|c| c.probe == Probe::HoldRoundTrip));
    let mut new = new;
    let mut changed = false;
    for check in &mut new.checks {
        if check.probe == Probe::HoldRoundTrip
            && check.untried()
            && let Some(last) = last.filter(|l| l.result == CheckResult::Passed)
        {
            let kept_from = last
                .detail
                .as_deref()
                .map(|d| d.split(KEPT).next().unwrap_or(d))
                .unwrap_or_default();
            *check = Check::new(
                Probe::HoldRoundTrip,
                CheckResult::Passed,
                format!(
                    "{kept_from}{KEPT}{})",
                    check.detail.as_deref().unwrap_or_default()
                ),
            );
            changed = true;
        }
    }
    if changed {
        new.calls = calls_of(new.mode, &new.checks);
    }
    Some(new)
}

/// How a round trip kept from an earlier probe says why.
const KEPT: &str = " (kept from the last probe that could make it; this one found ";

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn the_periodic_preflight_probes_only_while_calls_consult_it() {
        let max_age = Duration::from_secs(60);
        assert!(!reprobe_due(None, max_age), "no call yet: idle");
        assert!(reprobe_due(Some(Duration::from_secs(5)), max_age));
        assert!(!reprobe_due(Some(max_age), max_age), "idle for max_age");
        let capability = Capability::default();
        assert!(!capability.reprobe_due(max_age));
        // A call consults it (no probe yet: it would probe first).
        assert_eq!(
            capability.verdict(CallKind::Hold, max_age),
            CapabilityVerdict::ProbeFirst
        );
        assert!(capability.reprobe_due(max_age));
        assert!(!capability.reprobe_due(Duration::ZERO));
    }

    fn report(mode: Mode, failed: &[Probe]) -> PreflightReport {
        let checks = Probe::all(mode)
            .into_iter()
            .map(|p| {
                if failed.contains(&p) {
                    Check::new(p, CheckResult::Failed, "no")
                } else {
                    Check::new(p, CheckResult::Passed, "")
                }
            })
            .collect();
        PreflightReport::new(
            mode,
            Duration::from_secs(66),
            Duration::from_secs(60),
            checks,
        )
    }

    #[test]
    fn a_failed_round_trip_makes_hold_and_release_unsupported() {
        let r = report(Mode::Plain, &[Probe::HoldRoundTrip]);
        for call in [Gated::Hold, Gated::Release] {
            let err = r.check(call).expect_err("unsupported");
            assert!(
                matches!(&err, HoldError::Unsupported { reason } if reason.contains("hold-round-trip: no")),
                "{err:?}"
            );
        }
        assert!(r.check(Gated::Open).is_ok());
        assert!(r.check(Gated::Status).is_ok());
    }

    #[test]
    fn kueue_mode_needs_workload_updates_but_not_trainjob_updates_to_hold() {
        let r = report(Mode::Kueue, &[Probe::UpdateWorkloads]);
        assert!(r.check(Gated::Hold).is_err());
        assert!(r.check(Gated::Open).is_ok());
        let r = report(Mode::Kueue, &[Probe::UpdateTrainjobs]);
        assert!(r.check(Gated::Hold).is_ok());
        assert!(r.check(Gated::Open).is_err());
        let r = report(Mode::Plain, &[Probe::ListPods]);
        assert!(r.check(Gated::Hold).is_ok());
        assert!(r.check(Gated::Release).is_err());
    }

    #[test]
    fn kueue_mode_without_the_readmission_check_cannot_hold_or_release() {
        assert!(!Probe::all(Mode::Plain).contains(&Probe::ReadmissionCheck));
        let r = report(Mode::Kueue, &[Probe::ReadmissionCheck]);
        for call in [Gated::Hold, Gated::Release] {
            let err = r.check(call).expect_err("unsupported");
            assert!(
                matches!(&err, HoldError::Unsupported { reason } if reason.contains("readmission-check")),
                "{err:?}"
            );
        }
        assert!(r.check(Gated::Open).is_ok());
        assert!(r.check(Gated::Status).is_ok());
    }

    #[test]
    fn a_probe_that_could_not_run_fails_closed_and_the_report_serialises() {
        // Seam: probes that could not run gated nothing.
        let checks = Probe::all(Mode::Plain)
            .into_iter()
            .map(|p| match p {
                Probe::ListPods => Check::new(p, CheckResult::NotChecked, "timeout"),
                _ => Check::new(p, CheckResult::Passed, ""),
            })
            .collect();
        let r = PreflightReport::new(
            Mode::Plain,
            Duration::from_secs(66),
            Duration::from_secs(60),
            checks,
        );
        let err = r.check(Gated::Release).expect_err("fails closed");
        assert!(
            matches!(&err, HoldError::Unsupported { reason } if reason.contains("list-pods could not be checked: timeout")),
            "{err:?}"
        );
        assert!(r.check(Gated::Hold).is_ok(), "list-pods gates Release only");
        let body = r.body();
        assert_eq!(body["result"], "Ok");
        assert_eq!(body["callBoundSeconds"], 66.0);
        assert_eq!(body["calls"]["hold"]["supported"], true);
        assert_eq!(body["calls"]["release"]["supported"], false);
        assert_eq!(body["checks"][0]["probe"], "get-trainjobs");
        let back: PreflightReport = serde_json::from_value(body).expect("parse");
        assert_eq!(back.calls, r.calls);
    }

    #[test]
    fn the_capability_is_probed_again_when_old_refusing_or_untried() {
        let cap = Capability::default();
        let day = Duration::from_secs(86_400);
        assert_eq!(
            cap.verdict(CallKind::Hold, day),
            CapabilityVerdict::ProbeFirst,
            "nothing probed yet: probe, never assume"
        );
        cap.record(report(Mode::Plain, &[]));
        assert_eq!(
            cap.verdict(CallKind::Hold, day),
            CapabilityVerdict::Supported
        );
        assert_eq!(
            cap.verdict(CallKind::Hold, Duration::ZERO),
            CapabilityVerdict::ProbeFirst,
            "too old"
        );
        cap.record(report(Mode::Plain, &[Probe::HoldRoundTrip]));
        assert!(matches!(
            cap.verdict(CallKind::Hold, day),
            CapabilityVerdict::Refused(HoldError::Unsupported { .. })
        ));
        assert_eq!(
            cap.verdict(CallKind::Open, day),
            CapabilityVerdict::Supported
        );
        // No TrainJob to dry-run on yet: that gates nothing.
        let checks = Probe::all(Mode::Plain)
            .into_iter()
            .map(|p| match p {
                Probe::HoldRoundTrip => Check::new(
                    p,
                    CheckResult::NotChecked,
                    format!("{NO_TRAINJOB}; name one"),
                ),
                _ => Check::new(p, CheckResult::Passed, ""),
            })
            .collect();
        cap.record(PreflightReport::new(
            Mode::Plain,
            Duration::from_secs(66),
            Duration::from_secs(60),
            checks,
        ));
        assert_eq!(
            cap.verdict(CallKind::Hold, day),
            CapabilityVerdict::Supported,
            "the call's own write is the round trip"
        );
        assert_eq!(
            cap.verdict(CallKind::Open, day),
            CapabilityVerdict::Supported
        );
    }

    /// An outage is not a missing capability: a call probed during one goes ahead (its own
    /// requests then end at its deadline, having written nothing), and the next call probes
    /// again rather than being refused from the cache.
    #[test]
    fn an_unreachable_apiserver_refuses_nothing() {
        let unreachable = format!("{}: connection refused", crate::hold::UNREACHABLE);
        let all_down: Vec<Check> = Probe::all(Mode::Plain)
            .into_iter()
            .map(|p| Check::new(p, CheckResult::NotChecked, unreachable.clone()))
            .collect();
        let r = PreflightReport::new(
            Mode::Plain,
            Duration::from_secs(66),
            Duration::from_secs(60),
            all_down.clone(),
        );
        assert!(r.check(Gated::Hold).is_err(), "not reported as supported");
        assert!(r.only_unreachable(Gated::Hold));
        let cap = Capability::default();
        cap.record(r);
        assert_eq!(
            cap.verdict(CallKind::Hold, Duration::from_secs(86_400)),
            CapabilityVerdict::ProbeFirst
        );
        // One probe that got an answer and failed: a real refusal.
        let mut mixed = all_down;
        mixed[0] = Check::new(mixed[0].probe, CheckResult::Failed, "forbidden");
        let r = PreflightReport::new(
            Mode::Plain,
            Duration::from_secs(66),
            Duration::from_secs(60),
            mixed,
        );
        let gated = Probe::all(Mode::Plain)[0].gates(Mode::Plain);
        for call in gated {
            assert!(!r.only_unreachable(*call), "{call:?}");
        }
        // Everything passed: nothing to excuse.
        assert!(!report(Mode::Plain, &[]).only_unreachable(Gated::Hold));
    }
    fn with_round_trip(result: CheckResult, detail: &str) -> PreflightReport {
        let checks = Probe::all(Mode::Plain)
            .into_iter()
            .map(|p| match p {
                Probe::HoldRoundTrip => Check::new(p, result, detail),
                _ => Check::new(p, CheckResult::Passed, ""),
            })
            .collect();
        PreflightReport::new(
            Mode::Plain,
            Duration::from_secs(66),
            Duration::from_secs(60),
            checks,
        )
    }

    fn round_trip_of(r: &PreflightReport) -> &Check {
        r.checks
            .iter()
            .find(|c| c.probe == Probe::HoldRoundTrip)
            .expect("round trip")
    }

    #[test]
    fn a_targeted_preflight_changes_nothing_any_other_call_sees() {
        let passed = with_round_trip(CheckResult::Passed, "a dry-run hold of a/b was accepted");
        // The target does not exist, has no Workload yet, or its content is refused.
        for target in [
            with_round_trip(CheckResult::NotChecked, "ns/missing: no such TrainJob"),
            with_round_trip(CheckResult::Failed, "the dry-run hold of ns/x was refused"),
        ] {
            assert_eq!(next_capability(Some(&passed), target.clone(), true), None);
            assert_eq!(next_capability(None, target, true), None);
        }
        let cap = Capability::default();
        cap.record(passed);
        assert_eq!(
            cap.verdict(CallKind::Hold, Duration::from_secs(86_400)),
            CapabilityVerdict::Supported
        );
    }

    #[test]
    fn a_round_trip_no_listed_trainjob_could_make_keeps_the_last_pass_and_gates_nothing() {
        let passed = with_round_trip(CheckResult::Passed, "a dry-run hold of a/b was accepted");
        let blocked = with_round_trip(
            CheckResult::NotChecked,
            &format!("{NO_TRAINJOB} that says anything about the cluster (tried: t/a: 422)"),
        );
        let kept = next_capability(Some(&passed), blocked.clone(), false).expect("recorded");
        let rt = round_trip_of(&kept);
        assert_eq!(rt.result, CheckResult::Passed, "{rt:?}");
        let detail = rt.detail.as_deref().unwrap_or_default();
        assert!(
            detail.starts_with("a dry-run hold of a/b was accepted (kept"),
            "{detail}"
        );
        assert!(detail.contains("t/a: 422"), "{detail}");
        assert!(kept.check(Gated::Hold).is_ok());
        // Kept again: the note does not pile up.
        let again = next_capability(Some(&kept), blocked.clone(), false).expect("recorded");
        assert_eq!(
            round_trip_of(&again)
                .detail
                .as_deref()
                .map(|d| d.matches("(kept").count()),
            Some(1)
        );
        // No pass to keep: still nothing is refused for it (a call's own write is its round
        // trip).
        let fresh = next_capability(None, blocked, false).expect("recorded");
        assert_eq!(round_trip_of(&fresh).result, CheckResult::NotChecked);
        assert!(fresh.check(Gated::Hold).is_ok());
        assert!(fresh.check(Gated::Release).is_ok());
    }

    #[test]
    fn a_round_trip_refused_for_the_cluster_replaces_the_last_pass() {
        let passed = with_round_trip(CheckResult::Passed, "a dry-run hold of a/b was accepted");
        let refused = with_round_trip(
            CheckResult::Failed,
            "the dry-run hold of a/b was refused: 403 Forbidden",
        );
        let r = next_capability(Some(&passed), refused, false).expect("recorded");
        assert_eq!(round_trip_of(&r).result, CheckResult::Failed);
        assert!(r.check(Gated::Hold).is_err());
        assert!(r.check(Gated::Release).is_err());
        // A pass after a refusal is recorded as it is, too.
        let r = next_capability(Some(&r), passed.clone(), false).expect("recorded");
        assert_eq!(r, passed);
    }

    #[test]
    fn a_refusal_of_the_objects_own_content_or_state_is_no_evidence_about_the_cluster() {
        let too_long = "the apiserver answered 422 Invalid: TrainJob.trainer.kubeflow.org \"a\" is invalid: [metadata.annotations: Too long: may not be more than 262144 bytes]";
        assert!(refusal_is_object_specific(422, too_long));
        for code in [404, 409, 413] {
            assert!(
                refusal_is_object_specific(code, "gone, changed, too large"),
                "{code}"
            );
        }
        for code in [400, 401, 403, 405] {
            assert!(!refusal_is_object_specific(code, "forbidden"), "{code}");
        }
        // An admission policy refusing holds is about the cluster, whatever its status.
        let policy = "the apiserver answered 422 Invalid: trainjobs.trainer.kubeflow.org \"mnist\" is forbidden: ValidatingAdmissionPolicy 'no-holds' with binding 'no-holds' denied request: holds are not allowed here";
        assert!(!refusal_is_object_specific(422, policy));
        let webhook = "the apiserver answered 422 Invalid: admission webhook \"x.example\" denied the request: no";
        assert!(!refusal_is_object_specific(422, webhook));
    }

    fn api(code: u16, message: &str) -> RequestError {
        RequestError::Api {
            code,
            reason: "x".into(),
            message: message.into(),
        }
    }

    #[test]
    fn a_policy_probe_let_through_means_nothing_enforces_the_rules() {
        let (result, detail) = policy_verdict("policy", "holdfast-system", Ok(json!({})));
        assert_eq!(result, CheckResult::Failed);
        assert!(
            detail.contains("validation.engine is policy")
                && detail.contains("admission plugin is off")
                && detail.contains("validation.engine=webhook"),
            "{detail}"
        );
        // It gates every call that writes.
        for call in [Gated::Hold, Gated::Release, Gated::Open] {
            assert!(Probe::AdmissionPolicies.gates(Mode::Plain).contains(&call));
            assert!(Probe::AdmissionPolicies.gates(Mode::Kueue).contains(&call));
        }
    }

    #[test]
    fn a_policy_probe_refused_by_a_policy_passes_and_any_other_answer_fails_closed() {
        let denied = "configmaps \"holdfast-preflight-policy-probe\" is forbidden: ValidatingAdmissionPolicy 'holdfast-controller-configmaps' with binding 'holdfast-controller-configmaps' denied request";
        let (result, _) = policy_verdict("policy", "ns", Err(api(403, denied)));
        assert_eq!(result, CheckResult::Passed);
        let (result, detail) = policy_verdict("both", "ns", Err(api(403, "no RBAC")));
        assert_eq!(result, CheckResult::Failed, "{detail}");
        let (result, _) = policy_verdict("both", "ns", Err(api(503, "busy")));
        assert_eq!(result, CheckResult::NotChecked);
    }
}
