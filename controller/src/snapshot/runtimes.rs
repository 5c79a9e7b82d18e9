//! The live runtimes, read from memory: one watch (a reflector store) per runtime kind in
//! use, started the first time a TrainJob references the kind. Snapshotting a TrainJob
//! reads its runtime here, not from the apiserver.
//!
//! TrainJobs that could not be snapshotted because their runtime was missing (or too large)
//! wait on it: when the runtime appears or changes, they are reconciled again at once
//! (besides their error backoff).

use futures::StreamExt;
use futures::channel::mpsc::UnboundedSender;
use holdfast_core::snapshot::RuntimeRef;
use kube::api::{Api, DynamicObject};
use kube::runtime::reflector::{self, ObjectRef, Store};
use kube::runtime::{WatchStreamExt, watcher};
use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::sync::{Notify, watch};
use tokio::task::JoinSet;

use super::{Error, Health};
use crate::trainjob::JobRef;
use holdfast_cluster::runtime_kinds::{RuntimeKind, RuntimeKinds};

/// The watch's name in metrics.
pub const WATCH: &str = "runtimes";

/// How long a reconciliation waits for a new runtime watch's initial list.
const SYNC_TIMEOUT: Duration = Duration::from_secs(30);

/// A runtime object's identity: group, kind, namespace (empty when cluster-scoped), name.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct RuntimeKey {
    pub group: String,
    pub kind: String,
    pub namespace: String,
    pub name: String,
}

impl RuntimeKey {
    /// The key of the runtime a TrainJob in `trainjob_namespace` references.
    pub fn of(reference: &RuntimeRef, kind: &RuntimeKind, trainjob_namespace: &str) -> Self {
        RuntimeKey {
            group: reference.api_group.clone(),
            kind: reference.kind.clone(),
            namespace: if kind.namespaced {
                trainjob_namespace.to_owned()
            } else {
                String::new()
            },
            name: reference.name.clone(),
        }
    }

    /// `name`, or `namespace/name` for a namespaced runtime: the drift metric's label.
    pub fn label(&self) -> String {
        if self.namespace.is_empty() {
            self.name.clone()
        } else {
            format!("{}/{}", self.namespace, self.name)
        }
    }
}

/// The watch of one runtime kind.
pub struct KindWatch {
    pub kind: RuntimeKind,
    store: Store<DynamicObject>,
    /// True once the initial list is in. (Not `Store::wait_until_ready`: its one-shot
    /// channel wakes a single waiter, and many reconciliations wait at once.)
    synced: watch::Receiver<bool>,
    /// The watch's last failure, bounded ([`MAX_ERROR_CHARS`]); cleared once it lists.
    last_error: Arc<Mutex<Option<String>>>,
}

/// The most characters of a watch failure kept for a Warning Event: the message of a list
/// that does not decode names the position, never the object.
const MAX_ERROR_CHARS: usize = 512;

impl KindWatch {
    /// Why the watch has not listed, if it failed.
    pub fn last_error(&self) -> Option<String> {
        self.last_error.lock().ok()?.clone()
    }

    /// The runtime from the store.
    pub fn get(&self, key: &RuntimeKey) -> Option<Arc<DynamicObject>> {
        let mut r = ObjectRef::new_with(&key.name, self.kind.resource.clone());
        if !key.namespace.is_empty() {
            r = r.within(&key.namespace);
        }
        self.store.get(&r)
    }
}

/// How long the snapshotter trusts a runtime group's discovery when it lacks a kind asked
/// for. Short: a TrainJob created just before its runtime's CRD (or a new version of it) is
/// served waits, with its reconciliation's backoff, to be snapshotted, and should not wait
/// on a stale "not served" much longer than the apiserver takes to serve the kind. The cost
/// stays bounded: only the operator's runtime groups are ever discovered, one discovery at a
/// time, and a TrainJob whose kind is missing is retried with backoff, not in a loop.
pub const KIND_MISS_TTL: Duration = Duration::from_secs(2);

/// Every runtime watch, and the TrainJobs waiting for a runtime.
pub struct RuntimeIndex {
    client: kube::Client,
    namespace: Option<String>,
    kinds: RuntimeKinds,
    health: Health,
    watches: Mutex<HashMap<(String, String), Arc<KindWatch>>>,
    waiters: Arc<Mutex<HashMap<RuntimeKey, HashSet<JobRef>>>>,
    retrigger: UnboundedSender<JobRef>,
    changed: Arc<Notify>,
    tasks: Mutex<JoinSet<()>>,
}

impl RuntimeIndex {
    pub fn new(
        client: kube::Client,
        namespace: Option<String>,
        allowed: holdfast_core::snapshot::RuntimeResources,
        health: Health,
        retrigger: UnboundedSender<JobRef>,
    ) -> Self {
        RuntimeIndex {
            kinds: RuntimeKinds::new(client.clone(), allowed, KIND_MISS_TTL),
            client,
            namespace,
            health,
            watches: Mutex::default(),
            waiters: Arc::default(),
            retrigger,
            changed: Arc::new(Notify::new()),
            tasks: Mutex::new(JoinSet::new()),
        }
    }

    /// Notified whenever any watched runtime changes.
    pub fn changed(&self) -> Arc<Notify> {
        self.changed.clone()
    }

    /// The watch of a reference's kind, started (and its initial list awaited) on first use.
    pub async fn watch_for(&self, reference: &RuntimeRef) -> Result<Arc<KindWatch>, Error> {
        let key = (reference.api_group.clone(), reference.kind.clone());
        if let Some(w) = self.existing(&key) {
            return self.synced(w).await;
        }
        let kind = self
            .kinds
            .resolve(&reference.api_group, &reference.kind)
            .await?;
        let watch = {
            let Ok(mut watches) = self.watches.lock() else {
                return Err(Error::NotRunning);
            };
            if let Some(w) = watches.get(&key) {
                w.clone()
            } else {
                let w = self.start(kind);
                watches.insert(key, w.clone());
                w
            }
        };
        self.synced(watch).await
    }

    /// The watch of a kind if it is already running (no discovery, no waiting).
    pub fn running(&self, group: &str, kind: &str) -> Option<Arc<KindWatch>> {
        self.existing(&(group.to_owned(), kind.to_owned()))
    }

    /// Reads a runtime from the apiserver: only when the store cannot be trusted to be
    /// current (it lacks the runtime, or holds another version than the TrainJob was
    /// admitted against — the watch may simply not have delivered the change yet).
    pub async fn fetch(
        &self,
        watch: &KindWatch,
        key: &RuntimeKey,
    ) -> Result<Option<DynamicObject>, kube::Error> {
        let api: Api<DynamicObject> = if key.namespace.is_empty() {
            Api::all_with(self.client.clone(), &watch.kind.resource)
        } else {
            Api::namespaced_with(self.client.clone(), &key.namespace, &watch.kind.resource)
        };
        api.get_opt(&key.name).await
    }

    /// Reconcile `trainjob` again as soon as the runtime `key` appears or changes.
    pub fn wait_for(&self, key: RuntimeKey, trainjob: JobRef) {
        if let Ok(mut waiters) = self.waiters.lock() {
            waiters.entry(key).or_default().insert(trainjob);
        }
    }

    /// Stops every runtime watch.
    pub fn stop(&self) {
        if let Ok(mut tasks) = self.tasks.lock() {
            tasks.abort_all();
        }
    }

    fn existing(&self, key: &(String, String)) -> Option<Arc<KindWatch>> {
        self.watches.lock().ok()?.get(key).cloned()
    }

    async fn synced(&self, kind_watch: Arc<KindWatch>) -> Result<Arc<KindWatch>, Error> {
        let mut synced = kind_watch.synced.clone();
        match tokio::time::timeout(SYNC_TIMEOUT, synced.wait_for(|s| *s)).await {
            Ok(Ok(_)) => Ok(kind_watch),
            Ok(Err(_closed)) => Err(Error::NotRunning),
            Err(_elapsed) => Err(Error::NotSynced {
                what: match kind_watch.last_error() {
                    Some(why) => format!(
                        "{}.{} (its list failed: {why})",
                        kind_watch.kind.resource.plural, kind_watch.kind.resource.group
                    ),
                    None => format!(
                        "{}.{}",
                        kind_watch.kind.resource.plural, kind_watch.kind.resource.group
                    ),
                },
                seconds: SYNC_TIMEOUT.as_secs(),
            }),
        }
    }

    /// Starts the reflector of one kind.
    fn start(&self, kind: RuntimeKind) -> Arc<KindWatch> {
        let api: Api<DynamicObject> = match (&self.namespace, kind.namespaced) {
            (Some(ns), true) => Api::namespaced_with(self.client.clone(), ns, &kind.resource),
            _ => Api::all_with(self.client.clone(), &kind.resource),
        };
        let writer = reflector::store::Writer::new(kind.resource.clone());
        let store = writer.as_reader();
        let group = kind.resource.group.clone();
        let kind_name = kind.resource.kind.clone();
        tracing::info!(group = %group, kind = %kind_name, namespaced = kind.namespaced, "watching runtime kind");
        let health = self.health.clone();
        let kinds = self.kinds.clone();
        let waiters = self.waiters.clone();
        let retrigger = self.retrigger.clone();
        let changed = self.changed.clone();
        let (synced_tx, synced) = watch::channel(false);
        let last_error: Arc<Mutex<Option<String>>> = Arc::default();
        let failed = last_error.clone();
        let events = watcher(api, watcher::Config::default().any_semantic())
            .modify(|o| o.metadata.managed_fields = None)
            .default_backoff()
            .reflect(writer);
        let driver = events.for_each(move |event| {
            match &event {
                Ok(watcher::Event::Apply(o) | watcher::Event::InitApply(o)) => {
                    let key = RuntimeKey {
                        group: group.clone(),
                        kind: kind_name.clone(),
                        namespace: o.metadata.namespace.clone().unwrap_or_default(),
                        name: o.metadata.name.clone().unwrap_or_default(),
                    };
                    wake(&waiters, &retrigger, &key);
                    changed.notify_one();
                }
                Ok(watcher::Event::InitDone) => {
                    if let Ok(mut f) = failed.lock() {
                        *f = None;
                    }
                    synced_tx.send_replace(true);
                    changed.notify_one();
                }
                Ok(watcher::Event::Delete(_)) => changed.notify_one(),
                Ok(watcher::Event::Init) => {}
                Err(e) => {
                    if let watcher::Error::InitialListFailed(kube::Error::Api(s))
                    | watcher::Error::WatchStartFailed(kube::Error::Api(s)) = e
                        && s.code == 404
                    {
                        // The kind is gone (CRD removed or version dropped): ask discovery
                        // again on the next use. The watch keeps retrying meanwhile.
                        kinds.forget(&group);
                    }
                    if let Ok(mut f) = failed.lock() {
                        *f = Some(e.to_string().chars().take(MAX_ERROR_CHARS).collect());
                    }
                    health.optional_error(WATCH, e);
                }
            }
            futures::future::ready(())
        });
        if let Ok(mut tasks) = self.tasks.lock() {
            tasks.spawn(driver);
        }
        Arc::new(KindWatch {
            kind,
            store,
            synced,
            last_error,
        })
    }
}

impl Drop for RuntimeIndex {
    fn drop(&mut self) {
        self.stop();
    }
}

fn wake(
    waiters: &Mutex<HashMap<RuntimeKey, HashSet<JobRef>>>,
    retrigger: &UnboundedSender<JobRef>,
    key: &RuntimeKey,
) {
    let jobs = match waiters.lock() {
        Ok(mut w) => w.remove(key),
        Err(_) => None,
    };
    for job in jobs.into_iter().flatten() {
        let _ = retrigger.unbounded_send(job);
    }
}
