//! Prometheus metrics of the Event publisher. Labels are bounded: `severity` is `Normal` or
//! `Warning`, `outcome` one of five words.

use prometheus_client::{
    encoding::EncodeLabelSet,
    metrics::{counter::Counter, family::Family, gauge::Gauge},
    registry::Registry,
};

use super::notice::Severity;

/// What became of a Notice: `created` (a new Event), `series_updated` (counted in an Event
/// written earlier, one patch), `folded` (counted in one still queued, no write of its
/// own), `dropped` (its queue was full), `failed` (the apiserver refused or did not answer;
/// not retried).
pub(crate) const OUTCOMES: [&str; 5] = ["created", "series_updated", "folded", "dropped", "failed"];

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct Labels {
    severity: &'static str,
    outcome: &'static str,
}

/// The publisher's metrics. Cheap to clone; clones share the series.
#[derive(Clone, Debug, Default)]
pub struct EventMetrics {
    events: Family<Labels, Counter>,
    queued: Gauge,
}

impl EventMetrics {
    /// New metrics, registered as `holdfast_events_total` and `holdfast_events_queued`.
    pub fn register(registry: &mut Registry) -> Self {
        let m = EventMetrics::default();
        registry.register(
            "holdfast_events",
            "Kubernetes Events asked for, by type and what became of them",
            m.events.clone(),
        );
        registry.register(
            "holdfast_events_queued",
            "Events waiting to be written",
            m.queued.clone(),
        );
        m
    }

    pub(crate) fn inc(&self, severity: Severity, outcome: &'static str) {
        debug_assert!(OUTCOMES.contains(&outcome));
        self.events
            .get_or_create(&Labels {
                severity: severity.as_str(),
                outcome,
            })
            .inc();
    }

    pub(crate) fn set_queued(&self, n: usize) {
        self.queued.set(i64::try_from(n).unwrap_or(i64::MAX));
    }

    /// How many Notices of `severity` ended in `outcome` (for tests and benchmarks).
    pub fn count(&self, severity: Severity, outcome: &'static str) -> u64 {
        self.events
            .get_or_create(&Labels {
                severity: severity.as_str(),
                outcome,
            })
            .get()
    }

    /// Events waiting to be written.
    pub fn queued(&self) -> i64 {
        self.queued.get()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn outcomes_are_counted_by_bounded_labels() {
        let mut registry = Registry::default();
        let m = EventMetrics::register(&mut registry);
        m.inc(Severity::Normal, "dropped");
        m.inc(Severity::Normal, "dropped");
        m.inc(Severity::Warning, "created");
        assert_eq!(m.count(Severity::Normal, "dropped"), 2);
        let mut text = String::new();
        prometheus_client::encoding::text::encode(&mut text, &registry).expect("encode");
        assert!(
            text.contains(r#"holdfast_events_total{severity="Normal",outcome="dropped"} 2"#),
            "{text}"
        );
        assert!(text.contains("holdfast_events_queued 0"), "{text}");
    }
}
