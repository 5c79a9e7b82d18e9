//! The snapshot ConfigMap holdfast creates.

use serde_json::{Value, json};

use super::{
    Rendered, SnapshotError, TrainJobIdentity, check_identity, provenance_annotations, runtime_ref,
};
use crate::names;

use super::bounds::MAX_CONFIGMAP_DATA_BYTES;

/// The snapshot ConfigMap to create for a TrainJob, as JSON.
///
/// Name `{trainjob}-runtime-snapshot` in the TrainJob's namespace; data `{"runtime": yaml}`;
/// one ownerReference to the TrainJob with `controller: true` and `blockOwnerDeletion: true`
/// (so it is garbage-collected with the job, and so Trainer's reader trusts it); the label
/// `holdfast.dev/runtime-snapshot: "true"` and the provenance annotations.
///
/// It is also `immutable: true`: a snapshot is never rewritten, and an immutable ConfigMap's
/// data cannot be changed even by someone the webhook does not see (its metadata can, and it
/// can still be deleted, so garbage collection works). Trainer's reader does not look at the
/// field; Trainer's writer only applies when it finds no snapshot.
///
/// Refuses, before anything is written: a TrainJob without name, namespace or uid; a
/// rendered runtime that is not the one `spec.runtimeRef` names (every reader would refuse
/// the snapshot); a YAML the apiserver would refuse as too large.
pub fn snapshot_configmap(trainjob: &Value, rendered: &Rendered) -> Result<Value, SnapshotError> {
    let job = TrainJobIdentity::of(trainjob)?;
    let reference = runtime_ref(trainjob)?;
    check_identity(&rendered.object, &reference, job.namespace).map_err(
        |(field, expected, found)| SnapshotError::WrongRuntime {
            field,
            expected,
            found,
        },
    )?;
    let bytes = rendered.yaml.len();
    if bytes > MAX_CONFIGMAP_DATA_BYTES {
        return Err(SnapshotError::TooLarge {
            bytes,
            limit: MAX_CONFIGMAP_DATA_BYTES,
        });
    }
    Ok(json!({
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {
            "name": names::snapshot_name(job.name),
            "namespace": job.namespace,
            "labels": { names::LABEL_RUNTIME_SNAPSHOT: "true" },
            "annotations": provenance_annotations(&rendered.provenance),
            "ownerReferences": [{
                "apiVersion": format!("{}/{}", names::TRAINER_GROUP, names::TRAINER_VERSION),
                "kind": names::TRAINJOB_KIND,
                "name": job.name,
                "uid": job.uid,
                "controller": true,
                "blockOwnerDeletion": true,
            }],
        },
        "immutable": true,
        "data": { names::SNAPSHOT_DATA_KEY: rendered.yaml },
    }))
}
