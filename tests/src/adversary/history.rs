//! Every version of every object the invariants speak of — TrainJobs, Workloads, ConfigMaps,
//! pods — in one namespace, from watches opened before the namespace holds anything.
//!
//! One etcd serves the apiserver, so resourceVersions are totally ordered across kinds: the
//! merged history, sorted by resourceVersion, is the order in which the writes happened.
//! Each kind's watch delivers its events in order, but the kinds' streams lag independently;
//! [`History::caught_up`] says up to which resourceVersion the merged history is complete.

use anyhow::Context;
use futures::StreamExt;
use k8s_openapi::api::core::v1::{ConfigMap, Pod};
use kube::api::{Api, DynamicObject, ListParams, WatchEvent, WatchParams};
use kube::core::ApiResource;
use serde_json::Value;
use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

/// The kinds watched.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Kind {
    TrainJob,
    Workload,
    ConfigMap,
    Pod,
}

impl Kind {
    pub const ALL: [Kind; 4] = [Kind::TrainJob, Kind::Workload, Kind::ConfigMap, Kind::Pod];

    pub fn resource(self) -> ApiResource {
        match self {
            Kind::TrainJob => holdfast_cluster::resources::trainjob(),
            Kind::Workload => holdfast_cluster::resources::workload(),
            Kind::ConfigMap => ApiResource::erase::<ConfigMap>(&()),
            Kind::Pod => ApiResource::erase::<Pod>(&()),
        }
    }
}

/// One version of one object: what a watch delivered.
#[derive(Clone, Debug)]
pub struct Event {
    /// The version's resourceVersion (for a deletion, the deletion's).
    pub rv: u64,
    pub kind: Kind,
    /// The object is gone after this event.
    pub deleted: bool,
    pub obj: Value,
    /// When the watch delivered it.
    pub seen: Instant,
}

impl Event {
    pub fn uid(&self) -> &str {
        uid(&self.obj)
    }
}

pub fn uid(obj: &Value) -> &str {
    obj.pointer("/metadata/uid")
        .and_then(Value::as_str)
        .unwrap_or_default()
}

pub fn rv_of(obj: &Value) -> u64 {
    obj.pointer("/metadata/resourceVersion")
        .and_then(Value::as_str)
        .and_then(|s| s.parse().ok())
        .unwrap_or(0)
}

#[derive(Default)]
struct Inner {
    events: Vec<Event>,
    /// Per kind, per uid: the last resourceVersion delivered and whether the object exists.
    last: HashMap<Kind, HashMap<String, (u64, bool)>>,
    /// Anything that made the history incomplete (a watch that had to relist).
    gaps: Vec<String>,
}

/// The watches of one namespace and what they delivered.
pub struct History {
    inner: Arc<Mutex<Inner>>,
    stop: CancellationToken,
    tasks: Vec<JoinHandle<()>>,
}

fn lock(m: &Mutex<Inner>) -> std::sync::MutexGuard<'_, Inner> {
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

impl History {
    /// Opens the watches of namespace `ns` (as `client`, which must be allowed to watch every
    /// kind) and returns once each has started.
    pub async fn start(client: &kube::Client, ns: &str) -> anyhow::Result<History> {
        let inner = Arc::new(Mutex::new(Inner::default()));
        let stop = CancellationToken::new();
        let mut tasks = Vec::new();
        for kind in Kind::ALL {
            let api: Api<DynamicObject> =
                Api::namespaced_with(client.clone(), ns, &kind.resource());
            let list = api
                .list(&ListParams::default())
                .await
                .with_context(|| format!("list {kind:?} to start the watch"))?;
            let rv = list.metadata.resource_version.clone().unwrap_or_default();
            {
                let mut g = lock(&inner);
                for item in list.items {
                    let obj = serde_json::to_value(item)?;
                    record(&mut g, kind, false, obj);
                }
            }
            tasks.push(tokio::spawn(watch(
                api,
                kind,
                rv,
                inner.clone(),
                stop.clone(),
            )));
        }
        Ok(History { inner, stop, tasks })
    }

    /// Every event so far, sorted by resourceVersion.
    pub fn events(&self) -> Vec<Event> {
        let mut e = lock(&self.inner).events.clone();
        e.sort_by_key(|e| e.rv);
        e
    }

    pub fn len(&self) -> usize {
        lock(&self.inner).events.len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// What made the history incomplete, if anything.
    pub fn gaps(&self) -> Vec<String> {
        lock(&self.inner).gaps.clone()
    }

    /// When the last event was delivered.
    pub fn last_seen(&self) -> Option<Instant> {
        lock(&self.inner).events.iter().map(|e| e.seen).max()
    }

    /// The resourceVersion up to which the merged history is complete: for every kind, a
    /// fresh list (at its own resourceVersion R) agrees with what the watch delivered — each
    /// listed object was delivered at its listed version or later, and nothing the watch
    /// still thinks exists at a version at or below R is missing from the list — so every
    /// event of that kind at or below R has been delivered (watches deliver in order). The
    /// answer is the smallest R over the kinds. Retried for up to `within`; `None` if the
    /// watches did not catch up.
    pub async fn caught_up(
        &self,
        client: &kube::Client,
        ns: &str,
        within: Duration,
    ) -> Option<u64> {
        let start = Instant::now();
        loop {
            if let Some(rv) = self.try_caught_up(client, ns).await {
                return Some(rv);
            }
            if start.elapsed() > within {
                return None;
            }
            tokio::time::sleep(Duration::from_millis(40)).await;
        }
    }

    async fn try_caught_up(&self, client: &kube::Client, ns: &str) -> Option<u64> {
        let mut complete = u64::MAX;
        for kind in Kind::ALL {
            let api: Api<DynamicObject> =
                Api::namespaced_with(client.clone(), ns, &kind.resource());
            let list = api.list_metadata(&ListParams::default()).await.ok()?;
            let at: u64 = list.metadata.resource_version.as_deref()?.parse().ok()?;
            let listed: HashMap<String, u64> = list
                .items
                .iter()
                .map(|o| {
                    (
                        o.metadata.uid.clone().unwrap_or_default(),
                        o.metadata
                            .resource_version
                            .as_deref()
                            .and_then(|s| s.parse().ok())
                            .unwrap_or(0),
                    )
                })
                .collect();
            let g = lock(&self.inner);
            let empty = HashMap::new();
            let seen = g.last.get(&kind).unwrap_or(&empty);
            let delivered = listed
                .iter()
                .all(|(uid, rv)| seen.get(uid).is_some_and(|(s, _)| s >= rv));
            let no_stale = seen
                .iter()
                .filter(|(_, (rv, exists))| *exists && *rv <= at)
                .all(|(uid, _)| listed.contains_key(uid));
            if !(delivered && no_stale) {
                return None;
            }
            complete = complete.min(at);
        }
        Some(complete)
    }

    /// Stops the watches.
    pub async fn stop(self) {
        self.stop.cancel();
        for t in self.tasks {
            let _ = t.await;
        }
    }
}

fn record(g: &mut Inner, kind: Kind, deleted: bool, obj: Value) {
    let rv = rv_of(&obj);
    let uid = uid(&obj).to_owned();
    g.last.entry(kind).or_default().insert(uid, (rv, !deleted));
    g.events.push(Event {
        rv,
        kind,
        deleted,
        obj,
        seen: Instant::now(),
    });
}

async fn watch(
    api: Api<DynamicObject>,
    kind: Kind,
    mut rv: String,
    inner: Arc<Mutex<Inner>>,
    stop: CancellationToken,
) {
    // Bounded: a watch lasts up to 290 s; a run lasts minutes at most. Each round either
    // delivers events or ends on the server's timeout.
    for _round in 0..10_000u32 {
        if stop.is_cancelled() {
            return;
        }
        let params = WatchParams::default().timeout(290);
        let stream = match api.watch(&params, &rv).await {
            Ok(s) => s,
            Err(e) => {
                lock(&inner)
                    .gaps
                    .push(format!("{kind:?} watch failed to open: {e}"));
                tokio::select! {
                    _ = stop.cancelled() => return,
                    _ = tokio::time::sleep(Duration::from_millis(200)) => continue,
                }
            }
        };
        let mut stream = std::pin::pin!(stream);
        loop {
            let next = tokio::select! {
                _ = stop.cancelled() => return,
                n = stream.next() => n,
            };
            let Some(item) = next else { break };
            match item {
                Ok(WatchEvent::Added(o)) | Ok(WatchEvent::Modified(o)) => {
                    let Ok(obj) = serde_json::to_value(o) else {
                        continue;
                    };
                    rv = rv_of(&obj).to_string();
                    record(&mut lock(&inner), kind, false, obj);
                }
                Ok(WatchEvent::Deleted(o)) => {
                    let Ok(obj) = serde_json::to_value(o) else {
                        continue;
                    };
                    rv = rv_of(&obj).to_string();
                    record(&mut lock(&inner), kind, true, obj);
                }
                Ok(WatchEvent::Bookmark(b)) => rv = b.metadata.resource_version,
                Ok(WatchEvent::Error(s)) => {
                    // 410 Gone: the history between `rv` and now is lost to this watch.
                    lock(&inner)
                        .gaps
                        .push(format!("{kind:?} watch error at {rv}: {}", s.message));
                    return;
                }
                // The stream broke: watch again from the last version delivered.
                Err(_) => break,
            }
        }
    }
}
