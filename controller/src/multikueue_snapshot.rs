//! The runtime snapshot goes with a job MultiKueue dispatches (the rules:
//! `holdfast_core::readmission::worker_snapshot`). The readmission gate in the manager
//! [`carry`]s the manager's snapshot into every cluster of the Workload's MultiKueueConfig
//! before its check may turn `Ready`; once MultiKueue has created the copy of the TrainJob in
//! a worker, the gate [`adopt`]s the snapshot there for the copy and deletes the unowned ones
//! it wrote in the config's other clusters ([`remove_leftovers`]).
//!
//! In each worker the credential needs, in the job namespaces, `get`, `create`, `delete` and
//! `patch` on ConfigMaps and `get` on TrainJobs (besides the gate's lists).

use holdfast_cluster::resources;
use holdfast_core::names::snapshot_name;
use holdfast_core::readmission::worker_snapshot::{
    Adoption, WorkerStep, copy_uid, decide_adoption, decide_worker, leftover, worker_copy,
};
use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{Api, DeleteParams, DynamicObject, Patch, PatchParams, PostParams, Preconditions};
use serde_json::Value;

use crate::multikueue::{WORKER_READ_TIMEOUT, Workers};

/// At most this many writes in one worker per call; then the check stays `Pending` and the
/// gate comes back.
const ROUNDS: usize = 4;

/// What [`adopt`] did.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Adopted {
    /// Nothing to adopt (no snapshot in the manager, a worker holdfast does not know), or the
    /// copy owns the manager's snapshot.
    Done,
    /// The copy is not in the worker yet: call again shortly.
    NotYet,
    /// The copy may run something else than the manager's snapshot, or nothing: why.
    Refused(String),
}

/// Brings each worker of `clusters` (those of the Workload's MultiKueueConfig, the only ones
/// it may be dispatched to) to hold the manager's snapshot of TrainJob `namespace/name` (uid
/// `origin_uid`), unowned. Returns why not, per worker (`worker: why`); empty when done.
pub async fn carry(
    manager: &kube::Client,
    workers: &Workers,
    clusters: &[String],
    namespace: &str,
    name: &str,
    origin_uid: &str,
) -> Vec<String> {
    let wanted = match manager_snapshot(manager, namespace, name).await {
        Ok(found) => worker_copy(name, origin_uid, found.as_ref()),
        Err(e) => return vec![format!("the manager's snapshot cannot be read: {e}")],
    };
    let carries = among(workers, clusters).map(|(worker, client)| {
        let wanted = &wanted;
        async move {
            let done = tokio::time::timeout(
                WORKER_READ_TIMEOUT * 2,
                carry_into(worker, client, namespace, name, wanted),
            )
            .await;
            match done {
                Ok(Ok(None)) => None,
                Ok(Ok(Some(why))) => Some(why),
                Ok(Err(e)) => Some(failed(worker, namespace, name, &e)),
                Err(_) => Some(format!(
                    "{worker}: no answer in {}s",
                    (WORKER_READ_TIMEOUT * 2).as_secs()
                )),
            }
        }
    });
    futures::future::join_all(carries)
        .await
        .into_iter()
        .flatten()
        .collect()
}

/// One worker: `None` once it holds the snapshot, else why not.
async fn carry_into(
    worker: &str,
    client: &kube::Client,
    namespace: &str,
    name: &str,
    wanted: &Result<Value, String>,
) -> Result<Option<String>, kube::Error> {
    let configmaps: Api<ConfigMap> = Api::namespaced(client.clone(), namespace);
    for _ in 0..ROUNDS {
        let trainjob = trainjob_in(client, namespace, name).await?;
        let found = read(&configmaps, &snapshot_name(name)).await?;
        match decide_worker(worker, wanted, found.as_ref(), trainjob.as_ref()) {
            WorkerStep::Carried => return Ok(None),
            WorkerStep::Wait(why) => return Ok(Some(why)),
            WorkerStep::Write(object) => {
                let object: ConfigMap =
                    serde_json::from_value(object).map_err(kube::Error::SerdeError)?;
                match configmaps.create(&PostParams::default(), &object).await {
                    Ok(_) => tracing::info!(
                        worker,
                        namespace,
                        trainjob = name,
                        "the manager's runtime snapshot written into the MultiKueue worker"
                    ),
                    Err(kube::Error::Api(e)) if e.code == 409 => {}
                    Err(e) => return Err(e),
                }
            }
            WorkerStep::Replace { uid } => {
                let dp = DeleteParams {
                    preconditions: Some(Preconditions {
                        uid: Some(uid),
                        resource_version: None,
                    }),
                    ..DeleteParams::default()
                };
                match configmaps.delete(&snapshot_name(name), &dp).await {
                    Ok(_) => tracing::info!(
                        worker,
                        namespace,
                        trainjob = name,
                        "the snapshot of an earlier copy deleted in the MultiKueue worker"
                    ),
                    Err(kube::Error::Api(e)) if e.code == 404 || e.code == 409 => {}
                    Err(e) => return Err(e),
                }
            }
        }
    }
    Ok(Some(format!(
        "in MultiKueue worker {worker}, ConfigMap {}: still changing after {ROUNDS} writes",
        snapshot_name(name)
    )))
}

/// Hands the snapshot in worker `cluster` (where MultiKueue dispatched TrainJob
/// `namespace/name`, uid `origin_uid`) to the copy there. Once [`Adopted::Done`], the unowned
/// ones holdfast wrote elsewhere are [`remove_leftovers`].
pub async fn adopt(
    manager: &kube::Client,
    workers: &Workers,
    namespace: &str,
    name: &str,
    origin_uid: &str,
    cluster: &str,
) -> Adopted {
    let Some(client) = workers.client(cluster) else {
        return Adopted::Done;
    };
    let wanted = match manager_snapshot(manager, namespace, name).await {
        Ok(found) => match worker_copy(name, origin_uid, found.as_ref()) {
            Ok(w) => w,
            Err(_) => return Adopted::Done,
        },
        Err(e) => return Adopted::Refused(format!("the manager's snapshot cannot be read: {e}")),
    };
    let adopted = tokio::time::timeout(
        WORKER_READ_TIMEOUT * 2,
        adopt_in(cluster, client, namespace, name, &wanted),
    )
    .await;
    match adopted {
        Ok(Ok(a)) => a,
        Ok(Err(e)) => Adopted::Refused(failed(cluster, namespace, name, &e)),
        Err(_) => Adopted::Refused(format!("{cluster}: no answer")),
    }
}

/// Deletes the unowned snapshots holdfast wrote for TrainJob `namespace/name` (uid
/// `origin_uid`) in the workers of `clusters` (the Workload's MultiKueueConfig's) other than
/// `dispatched_to`, where the copy runs.
pub async fn remove_leftovers(
    workers: &Workers,
    clusters: &[String],
    dispatched_to: &str,
    namespace: &str,
    name: &str,
    origin_uid: &str,
) {
    for (worker, client) in among(workers, clusters).filter(|(w, _)| *w != dispatched_to) {
        if let Err(e) = remove_leftover(client, namespace, name, origin_uid).await {
            tracing::warn!(worker, namespace, trainjob = name, error = %e, "deleting holdfast's unowned snapshot in a worker the job was not dispatched to failed; retried at the next reconcile");
        }
    }
}

/// The workers of `clusters` holdfast has a kubeconfig for.
fn among<'a>(
    workers: &'a Workers,
    clusters: &'a [String],
) -> impl Iterator<Item = (&'a str, &'a kube::Client)> {
    clusters
        .iter()
        .filter_map(|c| workers.client(c).map(|client| (c.as_str(), client)))
}

async fn adopt_in(
    worker: &str,
    client: &kube::Client,
    namespace: &str,
    name: &str,
    wanted: &Value,
) -> Result<Adopted, kube::Error> {
    let configmaps: Api<ConfigMap> = Api::namespaced(client.clone(), namespace);
    for _ in 0..ROUNDS {
        let found = read(&configmaps, &snapshot_name(name)).await?;
        let copy = copy(client, namespace, name).await?;
        match decide_adoption(worker, name, wanted, found.as_ref(), copy.as_deref()) {
            Adoption::NoCopyYet => return Ok(Adopted::NotYet),
            Adoption::Adopted => return Ok(Adopted::Done),
            Adoption::Refuse(why) => return Ok(Adopted::Refused(why)),
            Adoption::Patch(patch) => {
                match configmaps
                    .patch(
                        &snapshot_name(name),
                        &PatchParams::default(),
                        &Patch::Merge(&patch),
                    )
                    .await
                {
                    Ok(_) => {
                        tracing::info!(worker, namespace, trainjob = name, copy = ?copy, "the worker's copy of the TrainJob made owner of the manager's snapshot")
                    }
                    Err(kube::Error::Api(e)) if e.code == 409 => {}
                    Err(e) => return Err(e),
                }
            }
        }
    }
    Ok(Adopted::NotYet)
}

async fn remove_leftover(
    client: &kube::Client,
    namespace: &str,
    name: &str,
    origin_uid: &str,
) -> Result<(), kube::Error> {
    let configmaps: Api<ConfigMap> = Api::namespaced(client.clone(), namespace);
    let Some(found) = read(&configmaps, &snapshot_name(name)).await? else {
        return Ok(());
    };
    let Some(uid) = leftover(&found, origin_uid) else {
        return Ok(());
    };
    let dp = DeleteParams {
        preconditions: Some(Preconditions {
            uid: Some(uid.to_owned()),
            resource_version: None,
        }),
        ..DeleteParams::default()
    };
    match configmaps.delete(&snapshot_name(name), &dp).await {
        Ok(_) => Ok(()),
        Err(kube::Error::Api(e)) if e.code == 404 || e.code == 409 => Ok(()),
        Err(e) => Err(e),
    }
}

/// The manager's snapshot ConfigMap of TrainJob `namespace/name`, as read.
async fn manager_snapshot(
    manager: &kube::Client,
    namespace: &str,
    name: &str,
) -> Result<Option<Value>, kube::Error> {
    let configmaps: Api<ConfigMap> = Api::namespaced(manager.clone(), namespace);
    read(&configmaps, &snapshot_name(name)).await
}

async fn read(configmaps: &Api<ConfigMap>, name: &str) -> Result<Option<Value>, kube::Error> {
    configmaps
        .get_opt(name)
        .await?
        .map(|c| serde_json::to_value(c).map_err(kube::Error::SerdeError))
        .transpose()
}

/// The uid of MultiKueue's copy of TrainJob `name` in a worker, if there is one
/// ([`copy_uid`]).
async fn copy(
    client: &kube::Client,
    namespace: &str,
    name: &str,
) -> Result<Option<String>, kube::Error> {
    Ok(trainjob_in(client, namespace, name)
        .await?
        .as_ref()
        .and_then(copy_uid)
        .map(str::to_owned))
}

/// The worker's TrainJob `namespace/name`, as read, if there is one.
async fn trainjob_in(
    client: &kube::Client,
    namespace: &str,
    name: &str,
) -> Result<Option<Value>, kube::Error> {
    let trainjobs: Api<DynamicObject> =
        Api::namespaced_with(client.clone(), namespace, &resources::trainjob());
    trainjobs
        .get_opt(name)
        .await?
        .map(|t| serde_json::to_value(t).map_err(kube::Error::SerdeError))
        .transpose()
}

/// A worker's refusal, in words: what holdfast in the worker (its webhook) refuses is said so.
fn failed(worker: &str, namespace: &str, name: &str, e: &kube::Error) -> String {
    let what = format!(
        "in MultiKueue worker {worker}, ConfigMap {namespace}/{}",
        snapshot_name(name)
    );
    match e {
        kube::Error::Api(r) if r.message.contains("runtime snapshot") => format!(
            "{what}: holdfast's webhook in the worker refuses the manager's credential ({}); list the namespace in the worker chart's webhook.excludeNamespaces, as MultiKueue's namespaces in a worker need",
            r.message
        ),
        kube::Error::Api(r) if r.code == 403 => format!(
            "{what}: forbidden ({}); grant holdfast's worker credential get, create, delete and patch on configmaps and get on trainjobs there",
            r.message
        ),
        e => format!("{what}: {e}"),
    }
}
