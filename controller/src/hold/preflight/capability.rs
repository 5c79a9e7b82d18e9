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
//!
//! [`refusal_is_object_specific`]: super::probes::refusal_is_object_specific
//! [`ROUND_TRIP_NAMESPACES`]: super::probes::ROUND_TRIP_NAMESPACES

use std::{
    sync::{Arc, RwLock},
    time::Instant,
};

use holdfast_core::hold::{CallKind, HoldError};

use super::report::{Check, CheckResult, Gated, PreflightReport, Probe, calls_of};

/// How old a failed probe may be before a call that it would refuse probes again.
pub const REPROBE_AFTER: std::time::Duration = std::time::Duration::from_secs(2);

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
    use crate::hold::preflight::report::{NO_TRAINJOB, tests::report};
    use holdfast_core::mode::Mode;
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
}
