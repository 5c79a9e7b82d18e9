//! Which snapshot ConfigMaps exist, known without a request per TrainJob.
//!
//! A metadata-only watch of ConfigMaps (`Api<PartialObjectMeta<ConfigMap>>`: no data is ever
//! transferred), kept for names ending in `-runtime-snapshot`. Not a label selector:
//! Kubeflow Trainer's snapshots carry no label, and neither does a squatter's ConfigMap, yet
//! both must be known before holdfast writes — Trainer's to be accepted, a squatter's to be
//! refused without a write. The ConfigMap API has no suffix selector, so the filter is applied
//! as events arrive, and of each matching ConfigMap only a [`SnapshotMeta`] is kept: its
//! controller ownerReference, whether holdfast wrote it, and holdfast's provenance.
//!
//! That is enough to decide, per TrainJob, whether a snapshot exists and whether it is the
//! TrainJob's (its controller ownerReference's uid); holdfast's own snapshots also carry their
//! provenance (runtime resourceVersion, SHA-256), which is all drift needs. Only a snapshot
//! someone else wrote is read in full, once.

use futures::{StreamExt, future};
use holdfast_core::names;
use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::Api;
use kube::core::PartialObjectMeta;
use kube::runtime::{WatchStreamExt, watcher};
use std::collections::HashMap;
use std::sync::{Arc, RwLock};
use tokio::sync::watch;

use super::Health;
use crate::trainjob::{JobRef, TrainJob, trainjob_ref};

/// The watch's name in health and metrics.
pub const WATCH: &str = "configmaps";

/// What the reconciler keeps of a snapshot ConfigMap's metadata: its uid and
/// resourceVersion, its controller's uid, holdfast's SHA-256 of the runtime, and two flags.
///
/// One is kept per snapshot, so per TrainJob: the four strings share one allocation
/// ([`Texts`]) instead of one each (four allocations of 32 to 80 bytes, most of it the
/// allocator's rounding and headers).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct SnapshotMeta {
    texts: Texts,
    /// The controller is a `trainer.kubeflow.org` TrainJob of the snapshot's TrainJob name.
    controller_is_namesake_trainjob: bool,
    /// It carries holdfast's label `holdfast.dev/runtime-snapshot: "true"`.
    pub holdfasts: bool,
}

/// The uid, resourceVersion, controller uid and `holdfast.dev/runtime-sha256` of a snapshot
/// ConfigMap, each optional, one after another in one string.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
struct Texts {
    all: Box<str>,
    /// Where each ends in `all`; `None`: absent.
    ends: [Option<u32>; 4],
}

const UID: usize = 0;
const RESOURCE_VERSION: usize = 1;
const CONTROLLER_UID: usize = 2;
const SHA256: usize = 3;

impl Texts {
    fn new(parts: [Option<&str>; 4]) -> Self {
        let mut all = String::with_capacity(parts.iter().flatten().map(|p| p.len()).sum());
        let mut ends = [None; 4];
        for (part, end) in parts.iter().zip(&mut ends) {
            if let Some(part) = part {
                all.push_str(part);
                // Metadata strings are bounded far below 4 GiB (the apiserver's request limit).
                *end = u32::try_from(all.len()).ok();
            }
        }
        Texts {
            all: all.into_boxed_str(),
            ends,
        }
    }

    fn get(&self, i: usize) -> Option<&str> {
        let end = usize::try_from(self.ends[i]?).ok()?;
        let start = self.ends[..i]
            .iter()
            .rev()
            .find_map(|e| *e)
            .and_then(|e| usize::try_from(e).ok())
            .unwrap_or(0);
        self.all.get(start..end)
    }
}

impl SnapshotMeta {
    fn of(cm: &PartialObjectMeta<ConfigMap>, job: &str) -> Self {
        let meta = &cm.metadata;
        let controller = meta
            .owner_references
            .as_ref()
            .and_then(|owners| owners.iter().find(|r| r.controller == Some(true)));
        let annotation = |key: &str| meta.annotations.as_ref()?.get(key).map(String::as_str);
        SnapshotMeta {
            texts: Texts::new([
                meta.uid.as_deref(),
                meta.resource_version.as_deref(),
                controller.map(|r| r.uid.as_str()),
                annotation(names::ANN_RUNTIME_SHA256),
            ]),
            controller_is_namesake_trainjob: controller.is_some_and(|r| {
                r.kind == names::TRAINJOB_KIND
                    && r.name == job
                    && r.api_version.split('/').next() == Some(names::TRAINER_GROUP)
            }),
            holdfasts: meta
                .labels
                .as_ref()
                .and_then(|l| l.get(names::LABEL_RUNTIME_SNAPSHOT))
                .is_some_and(|v| v == "true"),
        }
    }

    /// The ConfigMap's uid.
    pub fn uid(&self) -> Option<&str> {
        self.texts.get(UID)
    }

    /// The ConfigMap's resourceVersion.
    pub fn resource_version(&self) -> Option<&str> {
        self.texts.get(RESOURCE_VERSION)
    }

    /// The uid of the controller ownerReference (the first with `controller: true`, as
    /// `metav1.GetControllerOf` and Trainer's reader pick it).
    pub fn controller_uid(&self) -> Option<&str> {
        self.texts.get(CONTROLLER_UID)
    }

    /// `holdfast.dev/runtime-sha256`.
    pub fn sha256(&self) -> Option<&str> {
        self.texts.get(SHA256)
    }

    /// Whether its controller is a TrainJob of the same name but (as the caller has checked)
    /// not the one of that name now: an earlier TrainJob's snapshot, which the garbage
    /// collector will delete since no object has that uid any more.
    pub fn owned_by_earlier_trainjob(&self) -> bool {
        self.controller_is_namesake_trainjob
    }
}

/// (namespace, TrainJob name) → its snapshot ConfigMap.
type Entries = HashMap<(String, String), Arc<SnapshotMeta>>;

/// The snapshot ConfigMaps that exist.
#[derive(Clone)]
pub struct ConfigMapIndex {
    entries: Arc<RwLock<Entries>>,
    listed: watch::Receiver<bool>,
}

impl ConfigMapIndex {
    /// TrainJob `job`'s snapshot ConfigMap in `namespace`, if one exists.
    pub fn snapshot_of(&self, namespace: &str, job: &str) -> Option<Arc<SnapshotMeta>> {
        self.entries
            .read()
            .ok()?
            .get(&(namespace.to_owned(), job.to_owned()))
            .cloned()
    }

    /// Whether the initial list is in.
    pub fn listed(&self) -> bool {
        *self.listed.borrow()
    }

    /// Waits until the initial list is in; false if the watch stopped first.
    pub async fn ready(&self) -> bool {
        self.listed.clone().wait_for(|l| *l).await.is_ok()
    }
}

/// Starts the watch: the index, and the future that drives it (run it on a task). Every
/// change to a snapshot-named ConfigMap that is not holdfast's own (a squatter's, Trainer's)
/// and every deletion sends the TrainJob of that name to `retrigger` — also those only a
/// relist finds, after the watch expired (410 Gone) and their events were lost.
pub fn watch(
    client: kube::Client,
    namespace: Option<&str>,
    health: Health,
    retrigger: futures::channel::mpsc::UnboundedSender<JobRef>,
) -> (
    ConfigMapIndex,
    impl std::future::Future<Output = ()> + Send + 'static,
) {
    let api: Api<PartialObjectMeta<ConfigMap>> = match namespace {
        Some(ns) => Api::namespaced(client.clone(), ns),
        None => Api::all(client.clone()),
    };
    let entries: Arc<RwLock<Entries>> = Arc::default();
    let (listed_tx, listed) = watch::channel(false);
    health.require(WATCH);
    let index = ConfigMapIndex {
        entries: entries.clone(),
        listed,
    };
    // A relist (after a watch expired) is collected here, then replaces the entries.
    let mut relist: Option<Entries> = None;
    let events = watcher(api, watcher::Config::default().any_semantic()).default_backoff();
    let driver = events.for_each(move |event| {
        health.observe(WATCH, &event);
        let mut gone = Vec::new();
        match event {
            Ok(watcher::Event::Init) => relist = Some(Entries::new()),
            Ok(watcher::Event::InitApply(cm)) => {
                if let (Some(key), Some(buffer)) = (key(&cm), relist.as_mut()) {
                    let meta = SnapshotMeta::of(&cm, &key.1);
                    buffer.insert(key, Arc::new(meta));
                }
            }
            Ok(watcher::Event::InitDone) => {
                // A relist after the first (the watch expired: 410 Gone) stands for events
                // that will never come: what changed meanwhile is retriggered as those
                // events would have been, once the index is fresh.
                let relisted = *listed_tx.borrow();
                let mut missed = Missed::default();
                if let (Some(fresh), Ok(mut e)) = (relist.take(), entries.write()) {
                    if relisted {
                        missed = missed_events(&e, &fresh);
                    }
                    *e = fresh;
                }
                if !missed.gone.is_empty() || !missed.written.is_empty() {
                    tracing::info!(
                        gone = missed.gone.len(),
                        written = missed.written.len(),
                        "relisted snapshot ConfigMaps: reconciling what the watch missed"
                    );
                }
                for key in missed.written {
                    let _ = retrigger.unbounded_send(trainjob_ref(&key.0, &key.1));
                }
                gone = missed.gone;
                listed_tx.send_replace(true);
            }
            Ok(watcher::Event::Apply(cm)) => {
                if let Some(key) = key(&cm) {
                    let meta = SnapshotMeta::of(&cm, &key.1);
                    let holdfasts = meta.holdfasts;
                    if let Ok(mut e) = entries.write() {
                        e.insert(key.clone(), Arc::new(meta));
                    }
                    if !holdfasts {
                        // A squatter changed, or Trainer wrote: the TrainJob decides again.
                        let _ = retrigger.unbounded_send(trainjob_ref(&key.0, &key.1));
                    }
                }
            }
            Ok(watcher::Event::Delete(cm)) => {
                if let Some(key) = key(&cm) {
                    if let Ok(mut e) = entries.write() {
                        e.remove(&key);
                    }
                    // Gone: the TrainJob (if it still exists) gets a snapshot now.
                    let _ = retrigger.unbounded_send(trainjob_ref(&key.0, &key.1));
                }
            }
            Err(_) => {}
        }
        if gone.is_empty() {
            return future::Either::Left(future::ready(()));
        }
        // Snapshots gone while the watch was down: most often with their TrainJob (the
        // garbage collector deletes a snapshot after its owner), which the TrainJob store may
        // not know yet if its watch expired too — reconciling from it would write a snapshot
        // for a TrainJob that no longer exists. One read each tells.
        let (client, retrigger) = (client.clone(), retrigger.clone());
        future::Either::Right(async move {
            for (namespace, name) in gone {
                let api: Api<PartialObjectMeta<TrainJob>> =
                    Api::namespaced(client.clone(), &namespace);
                if !matches!(api.get_metadata_opt(&name).await, Ok(None)) {
                    let _ = retrigger.unbounded_send(trainjob_ref(&namespace, &name));
                }
            }
        })
    });
    (index, driver)
}

/// What changed between two lists of the snapshot ConfigMaps that an event would have
/// retriggered a TrainJob for.
#[derive(Debug, Default, PartialEq, Eq)]
struct Missed {
    /// Snapshots gone (a `Delete` event).
    gone: Vec<(String, String)>,
    /// ConfigMaps not holdfast's, new or changed (an `Apply` event).
    written: Vec<(String, String)>,
}

fn missed_events(before: &Entries, after: &Entries) -> Missed {
    let gone = before
        .keys()
        .filter(|k| !after.contains_key(*k))
        .cloned()
        .collect();
    let written = after
        .iter()
        .filter(|(k, meta)| {
            !meta.holdfasts && before.get(*k).map(|m| m.as_ref()) != Some(meta.as_ref())
        })
        .map(|(k, _)| k.clone())
        .collect();
    Missed { gone, written }
}

/// (namespace, TrainJob name) of a snapshot-named ConfigMap; `None` for any other name.
fn key(cm: &PartialObjectMeta<ConfigMap>) -> Option<(String, String)> {
    let name = cm.metadata.name.as_deref()?;
    let job = name.strip_suffix(names::SNAPSHOT_SUFFIX)?;
    if job.is_empty() {
        return None;
    }
    Some((cm.metadata.namespace.clone()?, job.to_owned()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn cm(v: serde_json::Value) -> PartialObjectMeta<ConfigMap> {
        serde_json::from_value(v).expect("metadata")
    }

    #[test]
    fn a_relist_retriggers_what_the_events_would_have() {
        let key = |j: &str| ("ns".to_owned(), j.to_owned());
        let meta = |holdfasts: bool, rv: &str| {
            Arc::new(SnapshotMeta {
                holdfasts,
                texts: Texts::new([None, Some(rv), None, None]),
                ..SnapshotMeta::default()
            })
        };
        let before: Entries = [
            (key("kept"), meta(true, "1")),
            (key("deleted"), meta(true, "2")),
            (key("squatted"), meta(false, "3")),
            (key("squatted-again"), meta(false, "4")),
        ]
        .into_iter()
        .collect();
        let after: Entries = [
            (key("kept"), meta(true, "1")),
            (key("squatted"), meta(false, "3")),
            (key("squatted-again"), meta(false, "9")),
            (key("new-squatter"), meta(false, "10")),
            (key("written-by-another-replica"), meta(true, "11")),
        ]
        .into_iter()
        .collect();
        let mut missed = missed_events(&before, &after);
        missed.written.sort();
        assert_eq!(
            missed,
            Missed {
                gone: vec![key("deleted")],
                written: vec![key("new-squatter"), key("squatted-again")],
            }
        );
        assert_eq!(missed_events(&after, &after), Missed::default());
    }

    #[test]
    fn a_snapshots_kept_strings_share_one_allocation() {
        let meta = SnapshotMeta::of(
            &cm(json!({"metadata": {
                "name": "a-runtime-snapshot", "namespace": "ns", "uid": "c1", "resourceVersion": "",
                "annotations": {"holdfast.dev/runtime-sha256": "ab"},
                "ownerReferences": [{"apiVersion": "trainer.kubeflow.org/v1alpha1",
                    "kind": "TrainJob", "name": "a", "uid": "u1", "controller": true}]
            }})),
            "a",
        );
        assert_eq!(&*meta.texts.all, "c1u1ab");
        // Empty and absent stay apart.
        assert_eq!(meta.resource_version(), Some(""));
        assert_eq!(
            (meta.uid(), meta.controller_uid(), meta.sha256()),
            (Some("c1"), Some("u1"), Some("ab"))
        );
        let unowned = SnapshotMeta::of(
            &cm(
                json!({"metadata": {"name": "a-runtime-snapshot", "namespace": "ns", "uid": "c1"}}),
            ),
            "a",
        );
        assert_eq!(
            (
                unowned.uid(),
                unowned.resource_version(),
                unowned.controller_uid()
            ),
            (Some("c1"), None, None)
        );
    }

    #[test]
    fn only_snapshot_names_have_a_key() {
        let named = |n: &str| cm(json!({"metadata": {"name": n, "namespace": "ns"}}));
        assert_eq!(
            key(&named("mnist-runtime-snapshot")),
            Some(("ns".to_owned(), "mnist".to_owned()))
        );
        assert_eq!(key(&named("-runtime-snapshot")), None);
        assert_eq!(key(&named("kube-root-ca.crt")), None);
    }

    #[test]
    fn the_metadata_kept_says_who_owns_and_who_wrote() {
        let meta = SnapshotMeta::of(
            &cm(json!({"metadata": {
                "name": "a-runtime-snapshot", "namespace": "ns", "uid": "c1", "resourceVersion": "9",
                "labels": {"holdfast.dev/runtime-snapshot": "true", "x": "y"},
                "annotations": {
                    "holdfast.dev/runtime-sha256": "ab",
                    "holdfast.dev/runtime-resource-version": "41",
                    "other": "z"
                },
                "ownerReferences": [
                    {"apiVersion": "v1", "kind": "ConfigMap", "name": "x", "uid": "o0"},
                    {"apiVersion": "trainer.kubeflow.org/v1alpha1", "kind": "TrainJob",
                     "name": "a", "uid": "u1", "controller": true}
                ]
            }})),
            "a",
        );
        assert_eq!(meta.controller_uid(), Some("u1"));
        assert_eq!(meta.uid(), Some("c1"));
        assert_eq!(meta.resource_version(), Some("9"));
        assert!(meta.holdfasts);
        assert!(meta.owned_by_earlier_trainjob());
        assert_eq!(meta.sha256(), Some("ab"));

        let squatter = SnapshotMeta::of(
            &cm(json!({"metadata": {"name": "a-runtime-snapshot", "namespace": "ns"}})),
            "a",
        );
        assert_eq!(squatter.controller_uid(), None);
        assert_eq!((squatter.uid(), squatter.sha256()), (None, None));
        assert!(!squatter.holdfasts && !squatter.owned_by_earlier_trainjob());
    }
}
