//! [`Declared`]: a labelled metric family that is exposed (its `# HELP` and `# TYPE`) before
//! its first series exists.
//!
//! prometheus-client leaves a family with no series out of a scrape, so a counter by reason
//! would be unknown to Prometheus — and to a check that every name the chart's dashboard and
//! alerts select is one the binaries expose — until the first event of any reason. Every
//! `Family` holdfast registers is wrapped in this; a family with no series is a valid
//! OpenMetrics MetricFamily.

use prometheus_client::encoding::{EncodeMetric, MetricEncoder};
use prometheus_client::metrics::MetricType;

/// `M`, exposed even while it has no series.
#[derive(Clone, Debug)]
pub struct Declared<M>(pub M);

impl<M: EncodeMetric> EncodeMetric for Declared<M> {
    fn encode(&self, encoder: MetricEncoder) -> Result<(), std::fmt::Error> {
        self.0.encode(encoder)
    }

    fn metric_type(&self) -> MetricType {
        self.0.metric_type()
    }

    fn is_empty(&self) -> bool {
        false
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use prometheus_client::metrics::counter::Counter;
    use prometheus_client::metrics::family::Family;
    use prometheus_client::registry::Registry;

    #[test]
    fn a_family_without_series_is_declared_only_when_wrapped() {
        let mut registry = Registry::default();
        let bare = Family::<Vec<(String, String)>, Counter>::default();
        let wrapped = Family::<Vec<(String, String)>, Counter>::default();
        registry.register("bare", "Not declared", bare.clone());
        registry.register("wrapped", "Declared", Declared(wrapped.clone()));
        let mut text = String::new();
        prometheus_client::encoding::text::encode(&mut text, &registry).expect("encode");
        assert!(text.contains("# TYPE wrapped counter"), "{text}");
        assert!(!text.contains("bare"), "{text}");
        wrapped
            .get_or_create(&vec![("reason".to_owned(), "x".to_owned())])
            .inc();
        let mut text = String::new();
        prometheus_client::encoding::text::encode(&mut text, &registry).expect("encode");
        assert!(text.contains("wrapped_total{reason=\"x\"} 1"), "{text}");
    }
}
