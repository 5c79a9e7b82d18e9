//! Prometheus metrics of the hold calls: how many, by call and result, and how long.
//!
//! Labels are bounded: `call` is one of six names and `result` is `ok`, a
//! [`HoldError::metric_label`], `unauthenticated` or `forbidden`. No object name is ever a
//! label.

use std::time::Duration;

use holdfast_core::hold::{CallKind, HoldError};
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
    result: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct KindLabels {
    call: MetricCall,
}

/// The hold calls' metrics. Cheap to clone; clones share the series.
#[derive(Clone, Debug)]
pub struct CallMetrics {
    calls: Family<CallLabels, Counter>,
    latency: Family<KindLabels, Histogram>,
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
            "Hold API calls by call and result",
            m.calls.clone(),
        );
        registry.register(
            "holdfast_hold_call_duration_seconds",
            "How long hold API calls took, by call",
            m.latency.clone(),
        );
        m
    }

    /// Records a finished call.
    pub fn record<T>(&self, call: MetricCall, result: &Result<T, HoldError>, took: Duration) {
        let result = match result {
            Ok(_) => "ok",
            Err(e) => e.metric_label(),
        };
        self.record_result(call, result);
        self.latency
            .get_or_create(&KindLabels { call })
            .observe(took.as_secs_f64());
    }

    /// Records a call refused before it ran (`unauthenticated`, `forbidden`).
    pub fn record_result(&self, call: MetricCall, result: &'static str) {
        self.calls.get_or_create(&CallLabels { call, result }).inc();
    }

    /// The count of calls with this call and result (for tests).
    pub fn count(&self, call: MetricCall, result: &'static str) -> u64 {
        self.calls.get_or_create(&CallLabels { call, result }).get()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn calls_are_counted_by_bounded_labels() {
        let mut registry = Registry::default();
        let m = CallMetrics::register(&mut registry);
        m.record(MetricCall::hold, &Ok::<(), _>(()), Duration::from_millis(3));
        m.record::<()>(
            MetricCall::release,
            &Err(HoldError::PodsRemain),
            Duration::from_millis(3),
        );
        m.record_result(MetricCall::hold, "forbidden");
        assert_eq!(m.count(MetricCall::hold, "ok"), 1);
        assert_eq!(m.count(MetricCall::release, "pods_remain"), 1);
        let mut text = String::new();
        prometheus_client::encoding::text::encode(&mut text, &registry).expect("encode");
        assert!(
            text.contains(r#"holdfast_hold_calls_total{call="release",result="pods_remain"} 1"#),
            "{text}"
        );
        assert!(
            text.contains(r#"holdfast_hold_call_duration_seconds_count{call="hold"} 1"#),
            "{text}"
        );
    }
}
