//! Readiness from the watches: ready once every required watch has listed its objects, not
//! ready while any of them is failing (kube's watcher retries with backoff; the first event
//! after recovery makes it ready again).
//!
//! The runtime watches are not required: they start on demand, one per runtime kind in use,
//! and a runtime CRD being removed must not take the whole controller (and its hold API)
//! out of service. Their errors are logged and counted.

use holdfast_serve::Readiness;
use kube::runtime::watcher;
use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

use super::SnapshotMetrics;

/// The state of the reconciler's watches, reflected into a [`Readiness`].
#[derive(Clone)]
pub struct Health {
    readiness: Readiness,
    metrics: SnapshotMetrics,
    /// Required watch → healthy and synced.
    watches: Arc<Mutex<BTreeMap<&'static str, bool>>>,
}

impl Health {
    pub fn new(readiness: Readiness, metrics: SnapshotMetrics) -> Self {
        Health {
            readiness,
            metrics,
            watches: Arc::default(),
        }
    }

    /// Declares a required watch, not yet synced.
    pub fn require(&self, watch: &'static str) {
        self.set(watch, false);
    }

    /// Records what a watch stream yielded.
    pub fn observe<K, E: std::fmt::Display>(
        &self,
        watch: &'static str,
        event: &Result<watcher::Event<K>, E>,
    ) {
        match event {
            Ok(watcher::Event::Init | watcher::Event::InitApply(_)) => {}
            Ok(_) => self.set(watch, true),
            Err(e) => {
                tracing::warn!(watch, error = %e, "watch failed; retrying with backoff");
                self.metrics.watch_error(watch);
                self.set(watch, false);
            }
        }
    }

    /// Records a failure of an optional watch (no effect on readiness).
    pub fn optional_error(&self, watch: &'static str, error: &watcher::Error) {
        tracing::warn!(watch, %error, "watch failed; retrying with backoff");
        self.metrics.watch_error(watch);
    }

    /// Not ready: the reconciler stopped.
    pub fn stopped(&self) {
        if let Ok(mut w) = self.watches.lock() {
            w.clear();
        }
        self.readiness.set(false);
    }

    fn set(&self, watch: &'static str, healthy: bool) {
        let Ok(mut w) = self.watches.lock() else {
            return;
        };
        let was = w.insert(watch, healthy);
        if was != Some(healthy) {
            let ready = !w.is_empty() && w.values().all(|ok| *ok);
            tracing::debug!(watch, healthy, ready, "watch state changed");
            self.readiness.set(ready);
        }
    }
}
