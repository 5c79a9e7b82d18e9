//! What preflight answers: the report `GET /v1/preflight` returns ([`PreflightAnswer`], its
//! JSON shape). Each probe's result ([`Check`]), and per call whether it is supported or why
//! not: supported unless a probe gating it failed or could not be made (fail closed).

use std::collections::BTreeMap;

use holdfast_core::{
    hold::{CallKind, HoldError},
    mode::Mode,
    rfc3339,
};
use jiff::Timestamp;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::hold::requests::UNREACHABLE;

/// How a round trip that found no TrainJob it could use says so. Such a round trip gates
/// nothing: a call's own write is then its round trip.
pub(super) const NO_TRAINJOB: &str = "no TrainJob to dry-run a hold on";

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
    pub(super) fn untried(&self) -> bool {
        self.probe == Probe::HoldRoundTrip
            && self.result == CheckResult::NotChecked
            && self
                .detail
                .as_deref()
                .is_some_and(|d| d.starts_with(NO_TRAINJOB))
    }

    pub(super) fn new(probe: Probe, result: CheckResult, detail: impl Into<String>) -> Self {
        let detail = detail.into();
        Check {
            probe,
            result,
            detail: (!detail.is_empty()).then_some(detail),
        }
    }
}

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
pub(super) fn calls_of(mode: Mode, checks: &[Check]) -> BTreeMap<Gated, CallSupport> {
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

#[cfg(test)]
pub(super) mod tests {
    use super::*;
    use std::time::Duration;

    pub(crate) fn report(mode: Mode, failed: &[Probe]) -> PreflightReport {
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
}
