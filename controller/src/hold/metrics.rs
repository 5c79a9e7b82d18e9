//! Prometheus metrics of the hold calls: how many, by call, outcome and cause, and how long.
//!
//! `holdfast_hold_calls_total{call, outcome, cause}`. Labels are bounded, no object name is
//! ever one:
//!
//! - `call`: `hold`, `release`, `open`, `status`, `preflight`;
//! - `outcome`: `ok`, or the error the API answered, as the CLI's exit codes tell them apart
//!   — `invalid`, `rejected`, `unsupported`, `pods_remain`, `conflict`, `unknown` — or the
//!   refusal before the call ran: `unauthenticated`, `forbidden`;
//! - `cause`: what an `ok` call did — `held`, `already_in_force`, `resumed` (released and
//!   resumed), `released` (annotations only), `started` (opened and started), `opened`,
//!   `already_open` — or why a call was `rejected` — `stale_hold`, `deadline_passed`,
//!   `no_workload`, `not_found`, `not_holder` —, else `none`.

use holdfast_serve::Declared;
use std::time::Duration;

use holdfast_core::hold::{CallKind, HoldError, Outcome, RejectCause};
use prometheus_client::{
    encoding::{EncodeLabelSet, EncodeLabelValue},
    metrics::{counter::Counter, family::Family, histogram::Histogram},
    registry::Registry,
};

/// The calls, as a metric label.
#[derive(Clone, Copy, Debug, Hash, PartialEq, Eq, EncodeLabelValue)]
#[allow(non_camel_case_types)]
pub enum MetricCall {
    hold,
    release,
    open,
    status,
    preflight,
    fence,
}

impl From<CallKind> for MetricCall {
    fn from(k: CallKind) -> Self {
        match k {
            CallKind::Hold => MetricCall::hold,
            CallKind::Release => MetricCall::release,
            CallKind::Open => MetricCall::open,
        }
    }
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct CallLabels {
    call: MetricCall,
    outcome: &'static str,
    cause: &'static str,
}

/// `outcome` and `cause` of a failed call.
fn error_labels(e: &HoldError) -> (&'static str, &'static str) {
    match e {
        HoldError::Invalid { .. } => ("invalid", "none"),
        HoldError::Rejected { cause, .. } => (
            "rejected",
            match cause {
                RejectCause::StaleHold => "stale_hold",
                RejectCause::DeadlinePassed => "deadline_passed",
                RejectCause::NoWorkload => "no_workload",
                RejectCause::NotFound => "not_found",
                RejectCause::NotHolder => "not_holder",
            },
        ),
        HoldError::Unsupported { .. } => ("unsupported", "none"),
        HoldError::PodsRemain => ("pods_remain", "none"),
        HoldError::Conflict { .. } => ("conflict", "none"),
        HoldError::Unknown { .. } => ("unknown", "none"),
    }
}

/// `cause` of a successful hold, release or open.
fn ok_cause(o: &Outcome) -> &'static str {
    match o {
        Outcome::Held => "held",
        Outcome::AlreadyInForce => "already_in_force",
        Outcome::Released { resumed: true } => "resumed",
        Outcome::Released { resumed: false } => "released",
        Outcome::Opened { started: true } => "started",
        Outcome::Opened { started: false } => "opened",
        Outcome::AlreadyOpen => "already_open",
    }
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct KindLabels {
    call: MetricCall,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct WhyLabels {
    why: &'static str,
}

/// The hold calls' metrics. Cheap to clone; clones share the series.
#[derive(Clone, Debug)]
pub struct CallMetrics {
    calls: Family<CallLabels, Counter>,
    latency: Family<KindLabels, Histogram>,
    /// Opens of a managed TrainJob that has no runtime snapshot, by why it has none.
    open_without_snapshot: Family<WhyLabels, Counter>,
}

impl Default for CallMetrics {
    fn default() -> Self {
        CallMetrics {
            calls: Family::default(),
            latency: Family::new_with_constructor(|| {
                Histogram::new([
                    0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0,
                    30.0, 60.0,
                ])
            }),
            open_without_snapshot: Family::default(),
        }
    }
}

impl CallMetrics {
    /// New metrics, registered in `registry` as `holdfast_hold_calls` and
    /// `holdfast_hold_call_duration_seconds`.
    pub fn register(registry: &mut Registry) -> Self {
        let m = CallMetrics::default();
        registry.register(
            "holdfast_hold_calls",
            "Hold API calls by call, outcome (ok, the error answered, or the refusal) and cause",
            Declared(m.calls.clone()),
        );
        registry.register(
            "holdfast_hold_call_duration_seconds",
            "How long hold API calls took, by call",
            Declared(m.latency.clone()),
        );
        registry.register(
            "holdfast_open_without_snapshot",
            "Opens of a managed TrainJob refused or timed out because it has no runtime snapshot, by why (too_large, too_deep, name_taken, pending, ...)",
            Declared(m.open_without_snapshot.clone()),
        );
        m
    }

    /// Records an Open refused (or ended at its deadline, `pending`) because the managed
    /// TrainJob has no runtime snapshot; `why` is a bounded label.
    pub fn open_without_snapshot(&self, why: &'static str) {
        self.open_without_snapshot
            .get_or_create(&WhyLabels { why })
            .inc();
    }

    /// The count of Opens refused for want of a snapshot, by why (for tests).
    pub fn opens_without_snapshot(&self, why: &'static str) -> u64 {
        self.open_without_snapshot
            .get_or_create(&WhyLabels { why })
            .get()
    }

    /// Records a finished hold, release or open.
    pub fn record_call(
        &self,
        call: MetricCall,
        result: &Result<Outcome, HoldError>,
        took: Duration,
    ) {
        let (outcome, cause) = match result {
            Ok(o) => ("ok", ok_cause(o)),
            Err(e) => error_labels(e),
        };
        self.count_one(call, outcome, cause);
        self.observe(call, took);
    }

    /// Records a finished status or preflight.
    pub fn record<T>(&self, call: MetricCall, result: &Result<T, HoldError>, took: Duration) {
        let (outcome, cause) = match result {
            Ok(_) => ("ok", "none"),
            Err(e) => error_labels(e),
        };
        self.count_one(call, outcome, cause);
        self.observe(call, took);
    }

    /// Records a call that failed before it ran (its request did not read).
    pub fn record_error(&self, call: MetricCall, e: &HoldError) {
        let (outcome, cause) = error_labels(e);
        self.count_one(call, outcome, cause);
    }

    /// Records a call refused before it ran (`unauthenticated`, `forbidden`, `invalid`).
    pub fn record_refusal(&self, call: MetricCall, outcome: &'static str) {
        self.count_one(call, outcome, "none");
    }

    /// The count of calls with this call, outcome and cause (for tests).
    pub fn count(&self, call: MetricCall, outcome: &'static str, cause: &'static str) -> u64 {
        self.calls
            .get_or_create(&CallLabels {
                call,
                outcome,
                cause,
            })
            .get()
    }

    fn count_one(&self, call: MetricCall, outcome: &'static str, cause: &'static str) {
        self.calls
            .get_or_create(&CallLabels {
                call,
                outcome,
                cause,
            })
            .inc();
    }

    fn observe(&self, call: MetricCall, took: Duration) {
        self.latency
            .get_or_create(&KindLabels { call })
            .observe(took.as_secs_f64());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn calls_are_counted_by_bounded_labels() {
        let mut registry = Registry::default();
        let m = CallMetrics::register(&mut registry);
        m.record_call(
            MetricCall::hold,
            &Ok(Outcome::Held),
            Duration::from_millis(3),
        );
        m.record_call(
            MetricCall::release,
            &Ok(Outcome::Released { resumed: true }),
            Duration::from_millis(3),
        );
        m.record_call(
            MetricCall::release,
            &Err(HoldError::PodsRemain),
            Duration::from_millis(3),
        );
        m.record_call(
            MetricCall::release,
            &Err(HoldError::Rejected {
                cause: RejectCause::StaleHold,
                message: "older".into(),
            }),
            Duration::from_millis(3),
        );
        m.record::<()>(MetricCall::status, &Ok(()), Duration::from_millis(3));
        m.record_refusal(MetricCall::hold, "forbidden");
        assert_eq!(m.count(MetricCall::hold, "ok", "held"), 1);
        assert_eq!(m.count(MetricCall::release, "ok", "resumed"), 1);
        assert_eq!(m.count(MetricCall::release, "pods_remain", "none"), 1);
        assert_eq!(m.count(MetricCall::release, "rejected", "stale_hold"), 1);
        assert_eq!(m.count(MetricCall::status, "ok", "none"), 1);
        assert_eq!(m.count(MetricCall::hold, "forbidden", "none"), 1);
        let mut text = String::new();
        prometheus_client::encoding::text::encode(&mut text, &registry).expect("encode");
        assert!(
            text.contains(
                r#"holdfast_hold_calls_total{call="release",outcome="rejected",cause="stale_hold"} 1"#
            ),
            "{text}"
        );
        assert!(
            text.contains(r#"holdfast_hold_call_duration_seconds_count{call="hold"} 1"#),
            "{text}"
        );
    }
}
