//! How many objects are held, and since when the oldest hold has been in force, computed at
//! scrape time from the stores the leader already keeps — no request to the apiserver:
//!
//! | metric | labels | what |
//! | --- | --- | --- |
//! | `holdfast_held_objects` | `kind` | objects carrying a hold now: `TrainJob` (plain mode, from the TrainJob store) or `Workload` (kueue mode, from the readmission gate's Workload store; one being deleted, whose hold moves to its replacement, is not counted) |
//! | `holdfast_hold_oldest_placed_timestamp_seconds` | `kind` | when the oldest hold in force was placed (its `holdfast.dev/hold-placed-at`), in seconds since the Unix epoch; absent while nothing is held |
//!
//! Only the leader keeps the stores, so a standby replica exports no series (both families
//! are always declared).

use holdfast_core::hold::HoldState;
use holdfast_core::names::ANN_HOLD_PLACED_AT;
use jiff::Timestamp;
use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeLabelSet, EncodeMetric};
use prometheus_client::metrics::MetricType;
use prometheus_client::metrics::gauge::ConstGauge;
use prometheus_client::registry::Registry;
use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, PoisonError};

/// The holds in force among some objects.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct HoldCount {
    pub held: u64,
    /// The earliest readable `hold-placed-at` among them.
    pub oldest_placed: Option<Timestamp>,
}

impl HoldCount {
    /// Counts the holds among objects, given by their annotations.
    pub fn of<'a>(
        annotations: impl IntoIterator<Item = Option<&'a BTreeMap<String, String>>>,
    ) -> Self {
        let mut count = HoldCount::default();
        for a in annotations.into_iter().flatten() {
            count.add(|k| a.get(k).map(String::as_str));
        }
        count
    }

    /// Counts one more object, given by an annotation lookup.
    pub fn add<'a>(&mut self, annotation: impl Fn(&str) -> Option<&'a str>) {
        if !HoldState::from_lookup(&annotation).is_held() {
            return;
        }
        self.held += 1;
        let placed =
            annotation(ANN_HOLD_PLACED_AT).and_then(|t| holdfast_core::rfc3339::parse(t).ok());
        if let Some(t) = placed {
            self.oldest_placed = Some(self.oldest_placed.map_or(t, |o| o.min(t)));
        }
    }
}

type Source = Arc<dyn Fn() -> Option<HoldCount> + Send + Sync>;

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct KindLabels {
    kind: &'static str,
}

/// The held gauges, read from their sources at each scrape. Cheap to clone.
#[derive(Clone, Default)]
pub struct HeldMetrics {
    sources: Arc<Mutex<Vec<(&'static str, Source)>>>,
}

impl std::fmt::Debug for HeldMetrics {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HeldMetrics").finish_non_exhaustive()
    }
}

impl HeldMetrics {
    /// New, registered in `registry`.
    pub fn register(registry: &mut Registry) -> Self {
        let m = HeldMetrics::default();
        registry.register_collector(Box::new(m.clone()));
        m
    }

    /// Reads the holds on objects of `kind` from `source` at each scrape; `None` (the store
    /// is not running: not the leader) exports nothing for it.
    pub fn add(
        &self,
        kind: &'static str,
        source: impl Fn() -> Option<HoldCount> + Send + Sync + 'static,
    ) {
        self.sources
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .push((kind, Arc::new(source)));
    }

    fn read(&self) -> Vec<(KindLabels, HoldCount)> {
        let sources = self
            .sources
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone();
        sources
            .into_iter()
            .filter_map(|(kind, source)| Some((KindLabels { kind }, source()?)))
            .collect()
    }
}

impl Collector for HeldMetrics {
    fn encode(&self, mut encoder: DescriptorEncoder) -> Result<(), std::fmt::Error> {
        let counts = self.read();
        {
            let mut family = encoder.encode_descriptor(
                "holdfast_held_objects",
                "Objects carrying a holdfast hold now, by kind (TrainJob: plain mode; Workload: kueue mode)",
                None,
                MetricType::Gauge,
            )?;
            for (labels, count) in &counts {
                ConstGauge::new(i64::try_from(count.held).unwrap_or(i64::MAX))
                    .encode(family.encode_family(labels)?)?;
            }
        }
        let oldest: Vec<_> = counts
            .iter()
            .filter_map(|(l, c)| Some((l, c.oldest_placed?)))
            .collect();
        {
            let mut family = encoder.encode_descriptor(
                "holdfast_hold_oldest_placed_timestamp_seconds",
                "When the oldest hold in force was placed, in seconds since the Unix epoch",
                None,
                MetricType::Gauge,
            )?;
            for (labels, t) in oldest {
                ConstGauge::new(t.as_millisecond() as f64 / 1000.0)
                    .encode(family.encode_family(labels)?)?;
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn annotations(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect()
    }

    #[test]
    fn holds_are_counted_and_the_oldest_readable_start_kept() {
        let objects = [
            Some(annotations(&[
                ("holdfast.dev/hold-instance", "3"),
                ("holdfast.dev/hold-placed-at", "2026-01-02T00:00:00Z"),
            ])),
            Some(annotations(&[
                ("holdfast.dev/hold-instance", "1"),
                ("holdfast.dev/hold-placed-at", "2026-01-01T00:00:00Z"),
            ])),
            // Held, with no readable start: counted, not dated.
            Some(annotations(&[
                ("holdfast.dev/hold-instance", "not-a-number"),
                ("holdfast.dev/hold-placed-at", "yesterday"),
            ])),
            Some(annotations(&[("other", "x")])),
            None,
        ];
        let count = HoldCount::of(objects.iter().map(Option::as_ref));
        assert_eq!(count.held, 3);
        assert_eq!(
            count.oldest_placed,
            Some("2026-01-01T00:00:00Z".parse().expect("timestamp"))
        );
    }

    #[test]
    fn a_standby_exports_nothing_and_nothing_held_has_no_oldest() {
        let mut registry = Registry::default();
        let m = HeldMetrics::register(&mut registry);
        let encode = |registry: &Registry| {
            let mut text = String::new();
            prometheus_client::encoding::text::encode(&mut text, registry).expect("encode");
            text
        };
        m.add("TrainJob", || None);
        let text = encode(&registry);
        assert!(
            text.contains("# TYPE holdfast_held_objects gauge"),
            "{text}"
        );
        assert!(!text.contains("holdfast_held_objects{"), "standby: {text}");
        let m2 = m.clone();
        m2.add("Workload", || Some(HoldCount::default()));
        let text = encode(&registry);
        assert!(
            text.contains("holdfast_held_objects{kind=\"Workload\"} 0"),
            "{text}"
        );
        assert!(
            !text.contains("holdfast_hold_oldest_placed_timestamp_seconds{"),
            "{text}"
        );
        m.add("TrainJob", || {
            Some(HoldCount {
                held: 2,
                oldest_placed: Some(Timestamp::from_second(1_700_000_000).expect("ts")),
            })
        });
        let text = encode(&registry);
        assert!(
            text.contains(
                "holdfast_hold_oldest_placed_timestamp_seconds{kind=\"TrainJob\"} 1700000000"
            ),
            "{text}"
        );
    }
}
