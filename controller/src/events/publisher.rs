//! The publisher: a handle that queues, and one background worker that writes.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use jiff::Timestamp;
use k8s_openapi::api::core::v1::ObjectReference;
use k8s_openapi::api::events::v1::{Event, EventSeries};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta};
use kube::api::{Api, Patch, PatchParams, PostParams};
use tokio::sync::mpsc;

use super::metrics::EventMetrics;
use super::notice::{Notice, Regarding};
use super::pace::Pace;
use super::pending::{Key, Occurrences, Pending, Queued};
use super::series::{SeriesCache, Written};

/// How often at most the worker says in the log that Events were dropped.
const DROP_LOG_EVERY: Duration = Duration::from_secs(60);

/// The bounds and the reporter of a [`Publisher`].
#[derive(Clone, Debug)]
pub struct PublisherConfig {
    /// `reportingController`.
    pub reporter: String,
    /// `reportingInstance` (the pod's name); the reporter's name if `None`.
    pub instance: Option<String>,
    /// Distinct Events waiting to be written, per type (Warnings, Normals).
    pub queue_per_severity: usize,
    /// Average writes per second, and how many may go at once.
    pub writes_per_second: u32,
    pub burst: u32,
    /// Events whose series are remembered, and for how long after their last write a
    /// repeat is counted in the same Event.
    pub series_capacity: usize,
    pub series_window: Duration,
}

impl Default for PublisherConfig {
    fn default() -> Self {
        PublisherConfig {
            reporter: "holdfast-controller".to_owned(),
            instance: None,
            queue_per_severity: 256,
            writes_per_second: 10,
            burst: 50,
            series_capacity: 4096,
            series_window: Duration::from_secs(6 * 60),
        }
    }
}

struct Shared {
    pending: Mutex<Pending>,
    metrics: EventMetrics,
}

/// Queues Events for the background worker. Cheap to clone; the worker ends when the last
/// clone is dropped and the queue is empty.
#[derive(Clone)]
pub struct Publisher {
    shared: Arc<Shared>,
    wake: mpsc::Sender<()>,
}

impl std::fmt::Debug for Publisher {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Publisher").finish_non_exhaustive()
    }
}

impl Publisher {
    /// A publisher writing as `client`'s identity; starts its worker on the current tokio
    /// runtime.
    pub fn start(client: kube::Client, config: PublisherConfig, metrics: EventMetrics) -> Self {
        let shared = Arc::new(Shared {
            pending: Mutex::new(Pending::new(config.queue_per_severity.max(1))),
            metrics,
        });
        let (wake, woken) = mpsc::channel(1);
        let worker = Worker {
            client,
            shared: shared.clone(),
            series: SeriesCache::new(config.series_capacity, config.series_window),
            pace: Pace::new(config.writes_per_second, config.burst, Instant::now()),
            config,
            dropped_logged_at: None,
        };
        tokio::spawn(worker.run(woken));
        Publisher { shared, wake }
    }

    /// Queues `notice` about `regarding`; never waits. Dropped (and counted) if the queue of
    /// its type is full.
    pub fn publish(&self, regarding: &ObjectReference, notice: Notice) {
        let severity = notice.severity;
        let key = Key {
            regarding: Regarding::of(regarding),
            notice,
        };
        let queued = {
            let Ok(mut pending) = self.shared.pending.lock() else {
                return;
            };
            let queued = pending.push(key, Timestamp::now());
            self.shared.metrics.set_queued(pending.len());
            queued
        };
        match queued {
            Queued::Added => {
                // Full means a wake-up is already due.
                let _ = self.wake.try_send(());
            }
            Queued::Folded => self.shared.metrics.inc(severity, "folded"),
            Queued::Dropped => self.shared.metrics.inc(severity, "dropped"),
        }
    }

    pub fn metrics(&self) -> &EventMetrics {
        &self.shared.metrics
    }
}

struct Worker {
    client: kube::Client,
    shared: Arc<Shared>,
    series: SeriesCache,
    pace: Pace,
    config: PublisherConfig,
    dropped_logged_at: Option<Instant>,
}

impl Worker {
    async fn run(mut self, mut woken: mpsc::Receiver<()>) {
        loop {
            let next = match self.shared.pending.lock() {
                Ok(mut pending) => {
                    let next = pending.pop();
                    self.shared.metrics.set_queued(pending.len());
                    next
                }
                Err(_) => return,
            };
            let Some((key, occurrences)) = next else {
                if woken.recv().await.is_none() {
                    return;
                }
                continue;
            };
            let wait = self.pace.take(Instant::now());
            if !wait.is_zero() {
                tokio::time::sleep(wait).await;
            }
            self.write(key, occurrences).await;
            self.log_drops();
        }
    }

    /// Writes one Event: a patch of its series if it was written within the window, else a
    /// new Event. A failure is counted and logged, not retried.
    async fn write(&mut self, key: Arc<Key>, occurrences: Occurrences) {
        let severity = key.notice.severity;
        let namespace = match key.regarding.namespace.as_str() {
            "" => "default",
            ns => ns,
        };
        let api: Api<Event> = Api::namespaced(self.client.clone(), namespace);
        let added = i32::try_from(occurrences.count).unwrap_or(i32::MAX);
        if let Some(written) = self.series.current(&key, Instant::now()) {
            let count = written.count.saturating_add(added);
            let series = EventSeries {
                count,
                last_observed_time: MicroTime(occurrences.last),
            };
            let patch = serde_json::json!({ "series": series });
            match api
                .patch(
                    &written.name,
                    &PatchParams::default(),
                    &Patch::Merge(&patch),
                )
                .await
            {
                Ok(_) => {
                    self.shared.metrics.inc(severity, "series_updated");
                    self.series.record(
                        key,
                        Written {
                            count,
                            at: Instant::now(),
                            ..written
                        },
                    );
                    return;
                }
                // Gone (Events expire at the apiserver's --event-ttl): start a new one.
                Err(kube::Error::Api(s)) if s.code == 404 => self.series.forget(&key),
                Err(e) => {
                    self.failed(&key, &e);
                    return;
                }
            }
        }
        let event = self.render(&key, &occurrences);
        let name = event.metadata.name.clone().unwrap_or_default();
        match api.create(&PostParams::default(), &event).await {
            Ok(_) => {
                self.shared.metrics.inc(severity, "created");
                self.series.record(
                    key,
                    Written {
                        name,
                        count: added.max(1),
                        at: Instant::now(),
                    },
                );
            }
            Err(e) => self.failed(&key, &e),
        }
    }

    fn failed(&self, key: &Key, error: &kube::Error) {
        self.shared.metrics.inc(key.notice.severity, "failed");
        tracing::warn!(
            namespace = key.regarding.namespace,
            name = key.regarding.name,
            reason = key.notice.reason,
            %error,
            "writing an Event failed; it is not retried"
        );
    }

    fn render(&self, key: &Key, occurrences: &Occurrences) -> Event {
        let r = &key.regarding;
        let n = &key.notice;
        Event {
            metadata: ObjectMeta {
                name: Some(event_name(&r.name, &self.config.reporter, Timestamp::now())),
                namespace: (!r.namespace.is_empty()).then(|| r.namespace.clone()),
                ..ObjectMeta::default()
            },
            event_time: Some(MicroTime(occurrences.first)),
            series: (occurrences.count >= 2).then(|| EventSeries {
                count: i32::try_from(occurrences.count).unwrap_or(i32::MAX),
                last_observed_time: MicroTime(occurrences.last),
            }),
            regarding: Some(r.reference()),
            type_: Some(n.severity.as_str().to_owned()),
            reason: Some(n.reason.to_owned()),
            action: Some(n.action.to_owned()),
            note: Some(n.note.clone()),
            reporting_controller: Some(self.config.reporter.clone()),
            reporting_instance: Some(
                self.config
                    .instance
                    .clone()
                    .unwrap_or_else(|| self.config.reporter.clone()),
            ),
            ..Event::default()
        }
    }

    fn log_drops(&mut self) {
        if self
            .dropped_logged_at
            .is_some_and(|at| at.elapsed() < DROP_LOG_EVERY)
        {
            return;
        }
        let dropped = match self.shared.pending.lock() {
            Ok(mut p) => std::mem::take(&mut p.dropped_unlogged),
            Err(_) => return,
        };
        if dropped > 0 {
            tracing::warn!(
                dropped,
                queue = self.config.queue_per_severity,
                writes_per_second = self.config.writes_per_second,
                "Events dropped: their queue was full (a burst of them); counted in holdfast_events_total{{outcome=\"dropped\"}}"
            );
            self.dropped_logged_at = Some(Instant::now());
        }
    }
}

/// `{object}.{nanoseconds, hex}`, as client-go names Events; the object's name is cut so that
/// the whole stays a valid name (253 bytes).
fn event_name(object: &str, reporter: &str, now: Timestamp) -> String {
    let base = if object.is_empty() { reporter } else { object };
    let mut cut = base.len().min(230);
    while !base.is_char_boundary(cut) {
        cut -= 1;
    }
    let base = base[..cut].trim_end_matches(['.', '-']);
    format!("{base}.{:x}", now.as_nanosecond().unsigned_abs())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn event_names_stay_valid_for_long_object_names() {
        let now = Timestamp::from_second(1_800_000_000).expect("t");
        let name = event_name(&"a".repeat(253), "r", now);
        assert!(name.len() <= 253, "{}", name.len());
        assert!(name.starts_with("aaaa"));
        assert_eq!(
            event_name("job", "r", now),
            format!("job.{:x}", 1_800_000_000_000_000_000u128)
        );
        assert!(event_name("", "holdfast-controller", now).starts_with("holdfast-controller."));
    }
}
