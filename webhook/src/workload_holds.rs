//! Whether a hold is in force on a TrainJob's Workloads, read from the apiserver when the
//! TrainJob is being unsuspended (see `holdfast_core::policy::unsuspend_check`): in kueue
//! mode, by Kueue; in plain mode, by anyone, after a switch from kueue mode left a hold on
//! the Workload. A cluster that serves no Workloads (Kueue not installed) has none.
//!
//! Kueue unsuspends a job when its cache says the Workload is admitted. A hold deactivates the
//! Workload, and Kueue evicts it and suspends the job again — but between the hold's write and
//! the eviction, a Kueue whose cache still shows the Workload admitted and active starts the
//! held job. The webhook closes that window: it reads the Workloads fresh, at the admission of
//! the unsuspend, and refuses while one carries a hold. What remains is the time between this
//! read and the apiserver storing the TrainJob (the admission chain's own latency).

use futures::future::BoxFuture;
use holdfast_core::workload_selection::hold_on_workloads;
use kube::api::{Api, DynamicObject, ListParams};
use serde_json::Value;

// Kueue's label naming the Workload's job by uid: an index (ownership is decided by the
// controller ownerReference; on a TrainJob's Workload only Kueue may change the label), so
// when it finds no owned Workload the watch of marked Workloads is asked.
use holdfast_cluster::HeldWorkloads;
use holdfast_core::names::JOB_UID_LABEL;

/// Reads the holds on a TrainJob's Workloads. The future does nothing until it is polled: the
/// webhook makes it, then waits for a lookup slot (`Policy::in_a_slot`).
pub trait WorkloadHolds: Send + Sync {
    /// The hold in force on any Workload TrainJob `uid` in `namespace` owns, or `None`;
    /// an error says why the Workloads could not be read.
    fn hold_of<'a>(
        &'a self,
        namespace: &'a str,
        uid: &'a str,
    ) -> BoxFuture<'a, Result<Option<String>, String>>;
}

/// [`WorkloadHolds`] from the apiserver and the watch (the webhook's RBAC lists and watches
/// Workloads).
pub struct KubeWorkloadHolds {
    client: kube::Client,
    marked: HeldWorkloads,
}

impl KubeWorkloadHolds {
    /// Starts the watch of marked Workloads; within a tokio runtime.
    pub fn new(client: kube::Client) -> Self {
        Self {
            marked: HeldWorkloads::start(client.clone()),
            client,
        }
    }

    /// The Workloads' metadata only (ownerReferences and annotations are all the hold lookup
    /// reads).
    /// `None`: the Workload kind is not served (Kueue is not installed).
    async fn list(
        &self,
        namespace: &str,
        params: &ListParams,
    ) -> Result<Option<Vec<Value>>, String> {
        let api: Api<DynamicObject> = Api::namespaced_with(
            self.client.clone(),
            namespace,
            &holdfast_cluster::resources::workload(),
        );
        let list = match api.list_metadata(params).await {
            Ok(list) => list,
            // The Workload kind is not served (Kueue is not installed): no Workload, no hold.
            Err(kube::Error::Api(s)) if s.code == 404 => return Ok(None),
            Err(e) => return Err(format!("listing Workloads in {namespace}: {e}")),
        };
        list.items
            .iter()
            .map(|w| {
                serde_json::to_value(&w.metadata)
                    .map(|metadata| serde_json::json!({ "metadata": metadata }))
                    .map_err(|e| e.to_string())
            })
            .collect::<Result<_, _>>()
            .map(Some)
    }
}

impl WorkloadHolds for KubeWorkloadHolds {
    fn hold_of<'a>(
        &'a self,
        namespace: &'a str,
        uid: &'a str,
    ) -> BoxFuture<'a, Result<Option<String>, String>> {
        Box::pin(async move {
            let Some(labelled) = self
                .list(
                    namespace,
                    &ListParams::default().labels(&format!("{JOB_UID_LABEL}={uid}")),
                )
                .await?
            else {
                // No Workload kind, no Workload, no hold.
                return Ok(None);
            };
            if let Some(hold) = hold_on_workloads(&labelled, uid) {
                return Ok(Some(hold));
            }
            // None on the labelled ones; the watch also knows the Workloads the label does
            // not name (removed or changed: ownership decides). When it has not listed, what
            // the labelled read found is the answer if it found the TrainJob's own Workload.
            let found_own = labelled
                .iter()
                .any(|w| holdfast_core::workload_selection::owned_by(w, uid));
            match self.marked.hold_seen(namespace, uid) {
                Err(_) if found_own => Ok(None),
                seen => seen,
            }
        })
    }
}
