//! The owners of a TrainJob's execution pods as Trainer and JobSet make them, for tiers 1-2
//! where neither runs: a JobSet named after the TrainJob and owned by it, and a Job owned by
//! the JobSet. holdfast finds an execution's pods by that chain
//! (`holdfast_core::execution`), so a test's stand-in pods are owned by the Job, exactly as
//! the Job controller's are; a pod carrying only JobSet's label is a decoy.

use kube::api::{Api, DynamicObject, PostParams};
use serde_json::{Value, json};

/// The label JobSet puts on its Jobs and pods.
pub const JOBSET_NAME_LABEL: &str = "jobset.sigs.k8s.io/jobset-name";

/// Creates (or finds) the JobSet and Job of TrainJob `trainjob` (uid `uid`) in `namespace`,
/// and returns the `ownerReferences` its pods carry: the Job, as controller.
pub async fn ensure(
    client: &kube::Client,
    namespace: &str,
    trainjob: &str,
    uid: &str,
) -> anyhow::Result<Value> {
    let jobsets: Api<DynamicObject> = Api::namespaced_with(
        client.clone(),
        namespace,
        &holdfast_cluster::resources::jobset(),
    );
    let jobset_of = |name: &str| {
        json!({
            "apiVersion": "jobset.x-k8s.io/v1alpha2", "kind": "JobSet",
            "metadata": {"name": name, "ownerReferences": [{
                "apiVersion": "trainer.kubeflow.org/v1alpha1", "kind": "TrainJob",
                "name": trainjob, "uid": uid, "controller": true}]},
            "spec": {"suspend": true, "replicatedJobs": [{"name": "node", "replicas": 1,
                "template": {"spec": {"template": {"spec": {"restartPolicy": "Never",
                    "containers": [{"name": "node", "image": "pytorch/pytorch:2.10.0"}]}}}}}]}
        })
    };
    let mut jobset_name = trainjob.to_owned();
    let mut jobset = create_or_get(&jobsets, &jobset_name, jobset_of(&jobset_name)).await?;
    if jobset
        .pointer("/metadata/ownerReferences/0/uid")
        .and_then(Value::as_str)
        != Some(uid)
    {
        // The JobSet of an earlier TrainJob of this name, still being collected: this one's
        // gets a name of its own, so that collecting the old one leaves it alone.
        jobset_name = format!("{trainjob}-{}", uid.chars().take(8).collect::<String>());
        jobset = create_or_get(&jobsets, &jobset_name, jobset_of(&jobset_name)).await?;
    }
    let jobs: Api<DynamicObject> = Api::namespaced_with(
        client.clone(),
        namespace,
        &holdfast_cluster::resources::job(),
    );
    let job_name = format!("{jobset_name}-node-0");
    let job = json!({
        "apiVersion": "batch/v1", "kind": "Job",
        "metadata": {"name": job_name, "labels": {JOBSET_NAME_LABEL: trainjob},
            "ownerReferences": [{
                "apiVersion": "jobset.x-k8s.io/v1alpha2", "kind": "JobSet",
                "name": jobset_name, "uid": uid_of(&jobset)?, "controller": true}]},
        "spec": {"suspend": true, "template": {"spec": {"restartPolicy": "Never",
            "containers": [{"name": "node", "image": "pytorch/pytorch:2.10.0"}]}}}
    });
    let job = create_or_get(&jobs, &job_name, job).await?;
    Ok(
        json!([{"apiVersion": "batch/v1", "kind": "Job", "name": job_name,
        "uid": uid_of(&job)?, "controller": true}]),
    )
}

/// A pod of TrainJob `trainjob`'s execution named `name`, owned by `owners` (from
/// [`ensure`]) and labelled as JobSet labels it; `extra` is merged into its metadata.
pub fn pod(name: &str, trainjob: &str, owners: &Value, extra: Value) -> Value {
    let mut metadata = json!({"name": name, "labels": {JOBSET_NAME_LABEL: trainjob},
        "ownerReferences": owners});
    if let (Some(m), Some(e)) = (metadata.as_object_mut(), extra.as_object()) {
        for (k, v) in e {
            match (m.get_mut(k), v) {
                (Some(Value::Object(have)), Value::Object(add)) => have.extend(add.clone()),
                _ => {
                    m.insert(k.clone(), v.clone());
                }
            }
        }
    }
    json!({"apiVersion": "v1", "kind": "Pod", "metadata": metadata,
        "spec": {"containers": [{"name": "node", "image": "pytorch/pytorch:2.10.0"}]}})
}

async fn create_or_get(
    api: &Api<DynamicObject>,
    name: &str,
    object: Value,
) -> anyhow::Result<Value> {
    let object: DynamicObject = serde_json::from_value(object)?;
    match api.create(&PostParams::default(), &object).await {
        Ok(created) => Ok(serde_json::to_value(created)?),
        Err(kube::Error::Api(e)) if e.code == 409 => {
            Ok(serde_json::to_value(api.get(name).await?)?)
        }
        Err(e) => Err(e.into()),
    }
}

fn uid_of(object: &Value) -> anyhow::Result<String> {
    object
        .pointer("/metadata/uid")
        .and_then(Value::as_str)
        .map(str::to_owned)
        .ok_or_else(|| anyhow::anyhow!("no uid"))
}

/// The patch that removes JobSet's label from a pod (an editor's relabel).
pub fn without_jobset_label() -> kube::api::Patch<serde_json::Value> {
    kube::api::Patch::Merge(json!({"metadata": {"labels": {JOBSET_NAME_LABEL: null}}}))
}
