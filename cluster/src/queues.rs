//! Kueue mode: the LocalQueues, ClusterQueues and AdmissionChecks, watched, so that a hold
//! call can tell at once whether the Workload it acts on goes through holdfast's readmission
//! gate ([`holdfast_core::readmission::queues`]) without a request of its own.
//!
//! Three small reflectors (LocalQueues of the watched namespace, or of all; ClusterQueues and
//! AdmissionChecks, cluster-scoped). Until all three have listed, every answer is
//! [`QueueGate::Unresolved`]: a call refuses rather than trust a gate it cannot see.

use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use holdfast_core::readmission::{
    is_our_check,
    multikueue::{UnderMultiKueue, is_multikueue_check, multikueue_check_of},
    queues::{
        QueueGate, admitted_without_flavor, cluster_queue_of, covered_resources, queue_gate,
        requests_nothing_covered,
    },
};
use kube::api::{Api, DynamicObject};
use kube::core::ApiResource;
use kube::runtime::reflector::{self, ObjectRef, Store};
use kube::runtime::{WatchStreamExt, watcher};
use serde_json::Value;
use tokio::sync::watch;
use tokio::task::JoinSet;

struct Watched {
    store: Store<DynamicObject>,
    synced: watch::Receiver<bool>,
}

impl Watched {
    fn synced(&self) -> bool {
        *self.synced.borrow()
    }
}

struct Inner {
    local: Watched,
    cluster: Watched,
    checks: Watched,
    /// Bumped whenever a ClusterQueue or AdmissionCheck changes.
    changed: watch::Receiver<u64>,
    tasks: std::sync::Mutex<JoinSet<()>>,
}

impl Drop for Inner {
    fn drop(&mut self) {
        if let Ok(mut t) = self.tasks.lock() {
            t.abort_all();
        }
    }
}

/// Kueue's queues, as watched. Cheap to clone; the watches stop with the last clone.
#[derive(Clone)]
pub struct Queues(Arc<Inner>);

impl std::fmt::Debug for Queues {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Queues")
            .field("synced", &self.synced())
            .finish()
    }
}

impl Queues {
    /// Starts the three watches (LocalQueues in `namespace` only, when given). Must be called
    /// within a tokio runtime.
    pub fn start(client: kube::Client, namespace: Option<&str>) -> Queues {
        let mut tasks = JoinSet::new();
        let (bump, changed) = watch::channel(0u64);
        let bump = Arc::new(bump);
        let local_ar = crate::resources::local_queue();
        let local_api = match namespace {
            Some(ns) => Api::namespaced_with(client.clone(), ns, &local_ar),
            None => Api::all_with(client.clone(), &local_ar),
        };
        let local = watch_into(&mut tasks, local_api, local_ar, None);
        let cq_ar = crate::resources::cluster_queue();
        let cluster = watch_into(
            &mut tasks,
            Api::all_with(client.clone(), &cq_ar),
            cq_ar,
            Some(bump.clone()),
        );
        let ac_ar = crate::resources::admission_check();
        let checks = watch_into(&mut tasks, Api::all_with(client, &ac_ar), ac_ar, Some(bump));
        Queues(Arc::new(Inner {
            local,
            cluster,
            checks,
            changed,
            tasks: std::sync::Mutex::new(tasks),
        }))
    }

    /// Changes whenever a ClusterQueue or an AdmissionCheck does (whether a queue is gated
    /// may have changed).
    pub fn changes(&self) -> watch::Receiver<u64> {
        self.0.changed.clone()
    }

    /// Whether all three watches have listed.
    pub fn synced(&self) -> bool {
        self.0.local.synced() && self.0.cluster.synced() && self.0.checks.synced()
    }

    /// Waits at most `timeout` for the watches to list; whether they did.
    pub async fn wait_synced(&self, timeout: Duration) -> bool {
        let wait = async {
            for w in [&self.0.local, &self.0.cluster, &self.0.checks] {
                let mut rx = w.synced.clone();
                if rx.wait_for(|s| *s).await.is_err() {
                    return false;
                }
            }
            true
        };
        tokio::time::timeout(timeout, wait).await.unwrap_or(false)
    }

    /// The names of holdfast's AdmissionChecks (`controllerName: holdfast.dev/readmission`).
    pub fn our_checks(&self) -> BTreeSet<String> {
        self.0
            .checks
            .store
            .state()
            .iter()
            .filter(|c| is_our_check(&c.data))
            .filter_map(|c| c.metadata.name.clone())
            .collect()
    }

    /// The names of MultiKueue's AdmissionChecks (`controllerName: kueue.x-k8s.io/multikueue`).
    pub fn multikueue_checks(&self) -> BTreeSet<String> {
        self.0
            .checks
            .store
            .state()
            .iter()
            .filter(|c| is_multikueue_check(&c.data))
            .filter_map(|c| c.metadata.name.clone())
            .collect()
    }

    /// AdmissionCheck `name` as watched, if it is known.
    pub fn admission_check(&self, name: &str) -> Option<Value> {
        Self::object(
            &self.0.checks.store,
            ObjectRef::new_with(name, crate::resources::admission_check()),
        )
    }

    /// Whether `workload` (as read) goes through a ClusterQueue that lists MultiKueue's
    /// AdmissionCheck. `None` also while the watches have not listed, or the queue cannot be
    /// resolved: [`Queues::gate_for`] refuses Release and Open then.
    pub fn multikueue_for(&self, workload: &Value) -> Option<UnderMultiKueue> {
        if !self.synced() {
            return None;
        }
        let local = |ns: &str, name: &str| {
            Self::object(
                &self.0.local.store,
                ObjectRef::new_with(name, crate::resources::local_queue()).within(ns),
            )
        };
        let cluster_queue = cluster_queue_of(workload, local).ok()?;
        let found = Self::object(
            &self.0.cluster.store,
            ObjectRef::new_with(&cluster_queue, crate::resources::cluster_queue()),
        )?;
        multikueue_check_of(&found, &self.multikueue_checks()).map(|check| UnderMultiKueue::Queue {
            cluster_queue,
            check,
        })
    }

    /// [`Queues::multikueue_for`] a job queued in LocalQueue `namespace/queue`.
    pub fn multikueue_for_queue(&self, namespace: &str, queue: &str) -> Option<UnderMultiKueue> {
        self.multikueue_for(&queued(namespace, queue))
    }

    /// Every ClusterQueue that lists MultiKueue's AdmissionCheck: `(queue, check)`.
    pub fn multikueue(&self) -> Vec<(String, String)> {
        let checks = self.multikueue_checks();
        self.each_cluster_queue(|_, value| multikueue_check_of(value, &checks))
    }

    /// `(name, what)` for each ClusterQueue `what` has something to say of, sorted by name.
    fn each_cluster_queue(
        &self,
        what: impl Fn(&str, &Value) -> Option<String>,
    ) -> Vec<(String, String)> {
        let mut out: Vec<(String, String)> = self
            .0
            .cluster
            .store
            .state()
            .iter()
            .filter_map(|cq| {
                let name = cq.metadata.name.clone()?;
                let value = serde_json::to_value(&**cq).ok()?;
                what(&name, &value).map(|w| (name, w))
            })
            .collect();
        out.sort();
        out
    }

    fn object(store: &Store<DynamicObject>, r: ObjectRef<DynamicObject>) -> Option<Value> {
        store.get(&r).and_then(|o| serde_json::to_value(&*o).ok())
    }

    /// Whether `workload` (as read) goes through holdfast's readmission gate: its queue's
    /// [`gate_and_coverage`](Self::gate_and_coverage), and, where that is gated, whether its
    /// pods request anything the ClusterQueue covers (else Kueue admits it with no flavor and
    /// runs no AdmissionCheck: the admission it has, or the next one after an eviction).
    pub fn gate_for(&self, workload: &Value) -> QueueGate {
        match self.gate_and_coverage(workload) {
            (QueueGate::Gated { cluster_queue }, covered)
                if requests_nothing_covered(workload, &covered) =>
            {
                QueueGate::Ungated {
                    why: format!(
                        "the pods of Workload {} request nothing ClusterQueue {cluster_queue} covers, so Kueue admits it with no flavor and runs none of the queue's AdmissionChecks, holdfast's readmission gate among them: give the pods resource requests and create the TrainJob again",
                        workload_name(workload),
                    ),
                    cluster_queue,
                }
            }
            (gate, _) => gate,
        }
    }

    /// [`Queues::gate_for`], and the resources the Workload's ClusterQueue covers (empty
    /// when it is not known).
    pub fn gate_and_coverage(&self, workload: &Value) -> (QueueGate, BTreeSet<String>) {
        let unresolved = |why| (QueueGate::Unresolved { why }, BTreeSet::new());
        if !self.synced() {
            return unresolved("the watches of Kueue's LocalQueues, ClusterQueues and AdmissionChecks have not listed yet; try again shortly".to_owned());
        }
        let local = |ns: &str, name: &str| {
            Self::object(
                &self.0.local.store,
                ObjectRef::new_with(name, crate::resources::local_queue()).within(ns),
            )
        };
        let cq = match cluster_queue_of(workload, local) {
            Ok(cq) => cq,
            Err(why) => return unresolved(why),
        };
        let found = Self::object(
            &self.0.cluster.store,
            ObjectRef::new_with(&cq, crate::resources::cluster_queue()),
        );
        let covered = found.as_ref().map(covered_resources).unwrap_or_default();
        let gate = match queue_gate(&cq, found.as_ref(), &self.our_checks()) {
            QueueGate::Gated { cluster_queue } if admitted_without_flavor(workload) => {
                QueueGate::Ungated {
                    why: format!(
                        "Workload {} was admitted to ClusterQueue {cluster_queue} with no flavor (its pods request nothing the queue covers), so Kueue ran none of the queue's AdmissionChecks, holdfast's readmission gate among them: give the pods resource requests and create the TrainJob again",
                        workload_name(workload),
                    ),
                    cluster_queue,
                }
            }
            gate => gate,
        };
        (gate, covered)
    }

    /// Whether a job queued in LocalQueue `namespace/queue` (not admitted yet) would go
    /// through holdfast's readmission gate.
    pub fn gate_for_queue(&self, namespace: &str, queue: &str) -> QueueGate {
        self.gate_and_coverage_for_queue(namespace, queue).0
    }

    /// [`Queues::gate_for_queue`], and the resources the ClusterQueue covers.
    pub fn gate_and_coverage_for_queue(
        &self,
        namespace: &str,
        queue: &str,
    ) -> (QueueGate, BTreeSet<String>) {
        self.gate_and_coverage(&queued(namespace, queue))
    }

    /// Every ClusterQueue that does not require holdfast's check on every flavor, with why.
    pub fn ungated(&self) -> Vec<(String, String)> {
        let ours = self.our_checks();
        self.each_cluster_queue(|name, value| queue_gate(name, Some(value), &ours).refusal())
    }
}

fn watch_into(
    tasks: &mut JoinSet<()>,
    api: Api<DynamicObject>,
    ar: ApiResource,
    bump: Option<Arc<watch::Sender<u64>>>,
) -> Watched {
    let writer = reflector::store::Writer::new(ar.clone());
    let store = writer.as_reader();
    let (tx, synced) = watch::channel(false);
    let plural = ar.plural.clone();
    let events = watcher(api, watcher::Config::default().any_semantic())
        .modify(|o: &mut DynamicObject| o.metadata.managed_fields = None)
        .default_backoff()
        .reflect(writer);
    tasks.spawn(events.for_each(move |event| {
        if let (Some(bump), Ok(watcher::Event::Apply(_) | watcher::Event::Delete(_))) =
            (&bump, &event)
        {
            bump.send_modify(|n| *n = n.wrapping_add(1));
        }
        match event {
            Ok(watcher::Event::InitDone) => {
                tx.send_replace(true);
            }
            Err(e) => tracing::warn!(resource = %plural, error = %e, "watching Kueue's queues"),
            Ok(_) => {}
        }
        futures::future::ready(())
    }));
    Watched { store, synced }
}

/// `namespace/name` of `workload`.
fn workload_name(workload: &Value) -> String {
    let field = |p| {
        workload
            .pointer(p)
            .and_then(Value::as_str)
            .unwrap_or_default()
    };
    format!(
        "{}/{}",
        field("/metadata/namespace"),
        field("/metadata/name")
    )
}

/// A Workload as one queued in LocalQueue `namespace/queue` would be, before it exists.
fn queued(namespace: &str, queue: &str) -> Value {
    serde_json::json!({
        "metadata": {"namespace": namespace, "name": "(new)"},
        "spec": {"queueName": queue},
    })
}
