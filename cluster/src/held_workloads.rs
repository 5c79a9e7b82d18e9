//! Which TrainJobs own a Workload that carries a hold's marks, from a metadata-only watch of
//! every Workload. Only the Workloads carrying a mark are kept (the hold-instance annotation or
//! the hold finalizer; every other Workload is forgotten as it is seen), so the memory grows
//! with the holds in force, not with the number of jobs.
//!
//! Two readers:
//!
//! - **The controller, in plain mode**, so that a hold call on a job Kueue never held sends
//!   the apiserver nothing but the TrainJob's GET and its update. A hold placed in kueue mode
//!   lives on the job's Workload and is honoured in plain mode after a switch
//!   (`holdfast_core::hold::switch`); reading the job's Workloads on every call cost two LISTs
//!   per call. It asks [`HeldWorkloads::lookup`], and reads fresh whenever the answer is not
//!   [`Lookup::Unmarked`].
//! - **The webhook**, when a TrainJob is being unsuspended and Kueue's `job-uid` label finds
//!   no Workload the TrainJob owns: ownership decides (an editor may have removed the label
//!   before holdfast guarded it), and a namespace-wide LIST per review is what a forged review
//!   could make the webhook send. It asks [`HeldWorkloads::hold_seen`] instead. The labelled
//!   read stays fresh; only the owner-by-reference fallback is the watch's.
//!
//! What [`HeldWorkloads::lookup`] answers:
//! - [`Lookup::Unmarked`]: no Workload the TrainJob owns carries a mark, as of the watch, or
//!   the Workload kind is not served (Kueue not installed). The call reads no Workload.
//! - [`Lookup::Marked`]: one does; the call reads the job's Workloads from the apiserver as
//!   before (consistent, whole objects), so a hold's state is never taken from the cache.
//! - [`Lookup::Unknown`]: the watch has not listed since it started or last failed (any
//!   failure ends it, and a new one lists afresh: [`keep_watching`]); the call reads the
//!   Workloads from the apiserver.
//!
//! Why the watch's lag cannot hide a hold from the plain-mode controller for longer than the
//! watch takes to deliver an event: in plain mode nothing adds a hold's marks to a Workload.
//! Holds on Workloads are placed by kueue mode's controller, which a switch stops first (chart
//! README, "Switching mode"); the readmission controller that moves a hold to a replacement
//! Workload is kueue mode's; the webhook refuses anyone else writing the marks. So marks only
//! go away, and a stale mark errs towards [`Lookup::Marked`], which reads fresh. What can still
//! change is a marked Workload's owner: after its TrainJob was deleted with `--cascade=orphan`,
//! Kueue may adopt the orphan for a new TrainJob naming it as its prebuilt Workload (only Kueue
//! may make a Workload a TrainJob's). That is one watch event, delivered in milliseconds; a
//! watch that failed instead is abandoned and calls read fresh until a new one lists. The
//! initial list is a consistent read, not the watch cache.
//!
//! In kueue mode marks are added (every hold), so the webhook's fallback can miss a hold placed
//! on an unlabelled Workload within the watch's delivery time (milliseconds) before the
//! unsuspend: the same window as Kueue's own cache, on Workloads only an editor's relabel from
//! before holdfast's guard can make.

use std::collections::BTreeMap;
use std::sync::{Arc, RwLock};
use std::time::Duration;

use futures::StreamExt;
use holdfast_core::{
    hold::HoldState,
    names::HOLD_FINALIZER,
    workload_selection::{hold_on_workloads, owned_by},
};
use kube::api::{Api, DynamicObject};
use kube::core::{ObjectMeta, PartialObjectMeta};
use kube::runtime::watcher;
use serde_json::{Value, json};
use tokio::sync::watch;

/// What the watch says about a TrainJob's Workloads.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Lookup {
    /// The watch has not listed: read the Workloads from the apiserver.
    Unknown,
    /// No Workload the TrainJob owns carries a hold's marks: none to read.
    Unmarked,
    /// One does: read them from the apiserver.
    Marked,
}

/// Where the watch is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Listing {
    Pending,
    Listed,
    /// The Workload kind is not served (the list answered 404): there are no Workloads.
    NotServed,
}

/// The marked Workloads, by namespace then name: each as `{"metadata": …}` with only what
/// ownership and the marks are read from, so [`owned_by`] and the hold's reading decide as
/// they do on a Workload read whole.
#[derive(Debug, Default, Clone, PartialEq)]
pub struct Marked(BTreeMap<String, BTreeMap<String, Value>>);

impl Marked {
    /// Records a Workload as seen: kept if it carries a mark, forgotten otherwise.
    pub fn apply(&mut self, meta: &ObjectMeta) {
        let (Some(ns), Some(name)) = (&meta.namespace, &meta.name) else {
            return;
        };
        match marked_view(meta) {
            Some(view) => {
                self.0
                    .entry(ns.clone())
                    .or_default()
                    .insert(name.clone(), view);
            }
            None => self.delete(meta),
        }
    }

    /// Forgets a Workload (deleted).
    pub fn delete(&mut self, meta: &ObjectMeta) {
        let (Some(ns), Some(name)) = (&meta.namespace, &meta.name) else {
            return;
        };
        if let Some(names) = self.0.get_mut(ns) {
            names.remove(name);
            if names.is_empty() {
                self.0.remove(ns);
            }
        }
    }

    /// Whether a Workload in `namespace` owned by TrainJob `uid` carries a mark.
    pub fn owns_marked(&self, namespace: &str, uid: &str) -> bool {
        self.0
            .get(namespace)
            .is_some_and(|names| names.values().any(|w| owned_by(w, uid)))
    }

    /// The hold in force on a marked Workload in `namespace` owned by TrainJob `uid`.
    pub fn hold_of(&self, namespace: &str, uid: &str) -> Option<String> {
        let views: Vec<Value> = self
            .0
            .get(namespace)
            .map(|names| names.values().cloned().collect())
            .unwrap_or_default();
        hold_on_workloads(&views, uid)
    }

    /// How many marked Workloads are kept.
    pub fn len(&self) -> usize {
        self.0.values().map(BTreeMap::len).sum()
    }

    /// Whether none is.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}

/// `meta` as the `{"metadata": …}` ownership and the marks are read from, if it carries a
/// hold's mark: the hold-instance annotation (any value: an unreadable hold counts) or the
/// hold finalizer.
fn marked_view(meta: &ObjectMeta) -> Option<Value> {
    // Decided on the metadata as watched; the JSON view is built for marked Workloads only
    // (most Workloads carry no mark, and the watch sees every change of every one).
    let held = meta
        .annotations
        .as_ref()
        .is_some_and(|a| HoldState::from_annotations(a).is_held());
    let finalized = meta
        .finalizers
        .as_ref()
        .is_some_and(|f| f.iter().any(|f| f == HOLD_FINALIZER));
    if !held && !finalized {
        return None;
    }
    Some(json!({"metadata": {
        "ownerReferences": serde_json::to_value(&meta.owner_references).ok()?,
        "annotations": meta.annotations.as_ref().map(|a| {
            a.get(holdfast_core::names::ANN_HOLD_INSTANCE)
                .map(|v| json!({holdfast_core::names::ANN_HOLD_INSTANCE: v}))
                .unwrap_or_else(|| json!({}))
        }),
        "finalizers": finalized.then_some([HOLD_FINALIZER]),
    }}))
}

struct Inner {
    marked: Arc<RwLock<Marked>>,
    listing: watch::Receiver<Listing>,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for Inner {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// The watch. Cheap to clone; it stops with the last clone.
#[derive(Clone)]
pub struct HeldWorkloads(Arc<Inner>);

impl std::fmt::Debug for HeldWorkloads {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HeldWorkloads")
            .field("listing", &*self.0.listing.borrow())
            .finish()
    }
}

impl HeldWorkloads {
    /// Starts watching every namespace's Workloads, metadata only. Must be called within a
    /// tokio runtime.
    pub fn start(client: kube::Client) -> HeldWorkloads {
        let api: Api<PartialObjectMeta<DynamicObject>> =
            Api::all_with(client, &crate::resources::workload());
        let (tx, listing) = watch::channel(Listing::Pending);
        let marked = Arc::new(RwLock::new(Marked::default()));
        let task = tokio::spawn(keep_watching(api, marked.clone(), tx));
        HeldWorkloads(Arc::new(Inner {
            marked,
            listing,
            task,
        }))
    }

    /// What the watch says about the Workloads TrainJob `uid` in `namespace` owns.
    pub fn lookup(&self, namespace: &str, uid: &str) -> Lookup {
        match *self.0.listing.borrow() {
            Listing::Pending => Lookup::Unknown,
            Listing::NotServed => Lookup::Unmarked,
            Listing::Listed => match self.0.marked.read() {
                Ok(m) if m.owns_marked(namespace, uid) => Lookup::Marked,
                Ok(_) => Lookup::Unmarked,
                Err(_) => Lookup::Unknown,
            },
        }
    }

    /// The hold the watch shows in force on a Workload in `namespace` that TrainJob `uid` owns
    /// (`Ok(None)`: none, or the Workload kind is not served), described as
    /// `holdfast_core::workload_selection::hold_on_workloads` describes it; `Err` says why the watch
    /// cannot tell (it has not listed).
    pub fn hold_seen(&self, namespace: &str, uid: &str) -> Result<Option<String>, String> {
        match *self.0.listing.borrow() {
            Listing::Pending => Err(NOT_LISTED.to_owned()),
            Listing::NotServed => Ok(None),
            Listing::Listed => self
                .0
                .marked
                .read()
                .map(|m| m.hold_of(namespace, uid))
                .map_err(|_| NOT_LISTED.to_owned()),
        }
    }

    /// Waits at most `timeout` for the watch to list (or find the kind not served); whether
    /// it did.
    pub async fn wait_listed(&self, timeout: Duration) -> bool {
        let mut rx = self.0.listing.clone();
        tokio::time::timeout(timeout, rx.wait_for(|l| *l != Listing::Pending))
            .await
            .is_ok_and(|r| r.is_ok())
    }
}

/// Why [`HeldWorkloads::hold_seen`] cannot tell.
const NOT_LISTED: &str = "the watch of Workloads (for holds' marks) has not listed them yet";

/// The first pause before watching again after a failure; it doubles up to [`MAX_PAUSE`].
const FIRST_PAUSE: Duration = Duration::from_millis(500);
const MAX_PAUSE: Duration = Duration::from_secs(30);
/// How often a cluster that serves no Workloads is asked again. In plain mode no hold can
/// be on a Workload of a Kueue installed meanwhile: only a kueue-mode controller places one,
/// and a switch to kueue mode replaces this process.
const NOT_SERVED_PAUSE: Duration = Duration::from_secs(60);

/// Watches until the task is aborted, keeping `marked` and saying in `listing` whether it
/// can be trusted. A watch that fails in any way is abandoned, and calls read the Workloads
/// from the apiserver (`Pending`) until a new watch has listed afresh: kube's watcher would
/// resume from its last resourceVersion without listing again, and a watch refused meanwhile
/// (RBAC without `watch`, say) would leave the marks as they were listed.
async fn keep_watching(
    api: Api<PartialObjectMeta<DynamicObject>>,
    marked: Arc<RwLock<Marked>>,
    listing: watch::Sender<Listing>,
) {
    let mut pause = FIRST_PAUSE;
    loop {
        // The default semantic: the initial list is a consistent read (see the module's
        // documentation), not the apiserver's watch cache.
        let mut events = std::pin::pin!(watcher(api.clone(), watcher::Config::default()));
        let mut relist: Option<Marked> = None;
        while let Some(event) = events.next().await {
            match event {
                Ok(watcher::Event::Init) => relist = Some(Marked::default()),
                Ok(watcher::Event::InitApply(w)) => {
                    if let Some(buffer) = relist.as_mut() {
                        buffer.apply(&w.metadata);
                    }
                }
                Ok(watcher::Event::InitDone) => {
                    if let (Some(fresh), Ok(mut m)) = (relist.take(), marked.write()) {
                        tracing::info!(
                            marked = fresh.len(),
                            "listed Workloads: these carry a hold's marks"
                        );
                        *m = fresh;
                    }
                    listing.send_replace(Listing::Listed);
                    pause = FIRST_PAUSE;
                }
                Ok(watcher::Event::Apply(w)) => {
                    if let Ok(mut m) = marked.write() {
                        m.apply(&w.metadata);
                    }
                }
                Ok(watcher::Event::Delete(w)) => {
                    if let Ok(mut m) = marked.write() {
                        m.delete(&w.metadata);
                    }
                }
                Err(watcher::Error::InitialListFailed(kube::Error::Api(s))) if s.code == 404 => {
                    tracing::debug!("the Workload kind is not served (Kueue is not installed)");
                    listing.send_replace(Listing::NotServed);
                    break;
                }
                Err(e) => {
                    tracing::warn!(error = %e, "watching Workloads for holds; hold calls read them from the apiserver, and the webhook refuses unsuspends it cannot check, until a new watch has listed");
                    listing.send_replace(Listing::Pending);
                    break;
                }
            }
        }
        let wait = if *listing.borrow() == Listing::NotServed {
            NOT_SERVED_PAUSE
        } else {
            pause
        };
        tokio::time::sleep(wait).await;
        pause = (pause * 2).min(MAX_PAUSE);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use holdfast_core::names::{ANN_HOLD_INSTANCE, TRAINER_GROUP, TRAINJOB_KIND};
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;

    fn workload(
        name: &str,
        owner: &str,
        annotations: &[(&str, &str)],
        finalizers: &[&str],
    ) -> ObjectMeta {
        ObjectMeta {
            namespace: Some("ns".into()),
            name: Some(name.into()),
            owner_references: Some(vec![OwnerReference {
                api_version: format!("{TRAINER_GROUP}/v1alpha1"),
                kind: TRAINJOB_KIND.into(),
                name: "job".into(),
                uid: owner.into(),
                controller: Some(true),
                ..Default::default()
            }]),
            annotations: Some(
                annotations
                    .iter()
                    .map(|(k, v)| (k.to_string(), v.to_string()))
                    .collect(),
            ),
            finalizers: Some(finalizers.iter().map(|f| f.to_string()).collect()),
            ..Default::default()
        }
    }

    #[test]
    fn an_unmarked_workload_is_not_kept() {
        let mut m = Marked::default();
        m.apply(&workload(
            "w",
            "u1",
            &[("other", "1")],
            &["other/finalizer"],
        ));
        assert_eq!(m.len(), 0);
        assert!(!m.owns_marked("ns", "u1"));
    }

    #[test]
    fn a_hold_annotation_or_the_hold_finalizer_marks_the_owners_workload() {
        let mut m = Marked::default();
        m.apply(&workload("a", "u1", &[(ANN_HOLD_INSTANCE, "3")], &[]));
        m.apply(&workload(
            "b",
            "u2",
            &[(ANN_HOLD_INSTANCE, "not a number")],
            &[],
        ));
        m.apply(&workload("c", "u3", &[], &[HOLD_FINALIZER]));
        assert_eq!(m.len(), 3);
        for uid in ["u1", "u2", "u3"] {
            assert!(m.owns_marked("ns", uid), "{uid}");
        }
        assert!(!m.owns_marked("ns", "u4"));
        assert!(
            !m.owns_marked("other-ns", "u1"),
            "owners are namespace-local"
        );
    }

    #[test]
    fn a_mark_removed_or_a_workload_deleted_is_forgotten() {
        let mut m = Marked::default();
        m.apply(&workload(
            "a",
            "u1",
            &[(ANN_HOLD_INSTANCE, "3")],
            &[HOLD_FINALIZER],
        ));
        m.apply(&workload("a", "u1", &[], &[]));
        assert!(!m.owns_marked("ns", "u1"));
        assert_eq!(m.len(), 0);
        m.apply(&workload("b", "u2", &[], &[HOLD_FINALIZER]));
        m.delete(&workload("b", "u2", &[], &[]));
        assert_eq!(m.len(), 0);
    }

    #[test]
    fn only_a_controller_reference_to_a_trainjob_makes_an_owner() {
        let mut m = Marked::default();
        let mut w = workload("a", "u1", &[(ANN_HOLD_INSTANCE, "3")], &[]);
        if let Some(refs) = w.owner_references.as_mut() {
            refs[0].controller = Some(false);
        }
        m.apply(&w);
        assert!(!m.owns_marked("ns", "u1"));
        let mut w = workload("b", "u2", &[(ANN_HOLD_INSTANCE, "3")], &[]);
        if let Some(refs) = w.owner_references.as_mut() {
            refs[0].kind = "JobSet".into();
        }
        m.apply(&w);
        assert!(!m.owns_marked("ns", "u2"));
    }

    #[test]
    fn the_hold_seen_is_the_owners_instance_and_a_finalizer_alone_is_none() {
        let mut m = Marked::default();
        m.apply(&workload("a", "u1", &[(ANN_HOLD_INSTANCE, "3")], &[]));
        m.apply(&workload("b", "u2", &[], &[HOLD_FINALIZER]));
        assert_eq!(m.hold_of("ns", "u1").as_deref(), Some("3"));
        assert_eq!(
            m.hold_of("ns", "u2"),
            None,
            "a finalizer is no hold in force"
        );
        assert_eq!(m.hold_of("ns", "u3"), None);
        assert_eq!(m.hold_of("other-ns", "u1"), None);
        assert!(!m.is_empty());
    }

    #[test]
    fn an_owner_reference_moved_to_another_job_moves_the_mark() {
        let mut m = Marked::default();
        m.apply(&workload("a", "u1", &[(ANN_HOLD_INSTANCE, "3")], &[]));
        m.apply(&workload("a", "u2", &[(ANN_HOLD_INSTANCE, "3")], &[]));
        assert!(!m.owns_marked("ns", "u1"));
        assert!(m.owns_marked("ns", "u2"));
    }
}
