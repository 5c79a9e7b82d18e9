//! A held job under MultiKueue gives back its quota in the manager once no worker runs it
//! (`holdfast_core::readmission::held_quota`): the reads of the workers, and the one write
//! of the manager's TrainJob `status.jobsStatus` (its `status` subresource, preconditioned on
//! the resourceVersion read).
//!
//! In each worker holdfast asks for the copy of the TrainJob by name (`get` on trainjobs)
//! and for the pods of its executions, by ownership (`list` on pods, Jobs and JobSets): the
//! worker credential's rules as they are for the gate and the snapshot. In the manager it
//! needs `update` on `trainjobs/status`.

use holdfast_cluster::{queues::Queues, resources};
use holdfast_core::readmission::held_quota::{
    InWorker, a_held_job_under_multikueue_gives_back_its_quota_once_no_worker_runs_it,
    held_quota_to_give_back,
};
use holdfast_core::readmission::multikueue::UnderMultiKueue;
use kube::api::{Api, DynamicObject, PostParams};
use serde_json::Value;

use crate::multikueue::{WORKER_READ_TIMEOUT, Workers};
use crate::pods;

impl Workers {
    /// What each worker holds of TrainJob `namespace/name`: a copy, pods of its executions,
    /// nothing, or unknown (not read within [`WORKER_READ_TIMEOUT`], or an error).
    pub async fn holding(&self, namespace: &str, name: &str) -> Vec<(String, InWorker)> {
        let reads = self.clients().map(|(worker, client)| async move {
            let read = tokio::time::timeout(WORKER_READ_TIMEOUT, async {
                let trainjobs: Api<DynamicObject> =
                    Api::namespaced_with(client.clone(), namespace, &resources::trainjob());
                if trainjobs.get_opt(name).await?.is_some() {
                    return Ok::<_, kube::Error>(InWorker::Copy);
                }
                let found = pods::remaining_with(client, namespace, name).await?;
                Ok(if found.is_empty() {
                    InWorker::Nothing
                } else {
                    InWorker::Pods(found.len())
                })
            })
            .await;
            let seen = match read {
                Ok(Ok(seen)) => seen,
                Ok(Err(e)) => {
                    tracing::debug!(worker, namespace, trainjob = name, error = %e, "a MultiKueue worker cannot be read: the held job keeps its quota");
                    InWorker::Unreadable
                }
                Err(_) => InWorker::Unreadable,
            };
            (worker.to_owned(), seen)
        });
        futures::future::join_all(reads).await
    }
}

/// Gives back the quota of the held Workload `workload` of TrainJob `trainjob` (both as
/// read) when no worker runs the job: writes the manager's TrainJob status, and says
/// whether it wrote. Nothing is read in the workers unless the job and Workload call for it.
pub async fn give_back(
    client: &kube::Client,
    queues: &Queues,
    workers: &Workers,
    under: &UnderMultiKueue,
    trainjob: &Value,
    workload: &Value,
    pp: &PostParams,
) -> Result<bool, crate::readmission::Error> {
    if workers.is_empty() || !held_quota_to_give_back(trainjob, workload) {
        return Ok(false);
    }
    let text = |p: &str| {
        trainjob
            .pointer(p)
            .and_then(Value::as_str)
            .unwrap_or_default()
    };
    let (namespace, name) = (text("/metadata/namespace"), text("/metadata/name"));
    let covered = crate::multikueue::coverage_of(client, Some(queues), workers, under)
        .await
        .covered();
    let holding = if covered {
        workers.holding(namespace, name).await
    } else {
        Vec::new()
    };
    let seen: Vec<InWorker> = holding.iter().map(|(_, s)| s.clone()).collect();
    let Some(status) = a_held_job_under_multikueue_gives_back_its_quota_once_no_worker_runs_it(
        trainjob, workload, covered, &seen,
    ) else {
        tracing::debug!(
            namespace,
            trainjob = name,
            covered,
            ?holding,
            "a held job under MultiKueue keeps its quota: a worker may still run it"
        );
        return Ok(false);
    };
    let object: DynamicObject = serde_json::from_value(status)?;
    let api: Api<DynamicObject> =
        Api::namespaced_with(client.clone(), namespace, &resources::trainjob());
    api.replace_status(name, pp, &object).await?;
    tracing::info!(
        namespace,
        trainjob = name,
        "a held job under MultiKueue: no worker runs it, its TrainJob reports no Job active so that Kueue gives back its quota"
    );
    Ok(true)
}
