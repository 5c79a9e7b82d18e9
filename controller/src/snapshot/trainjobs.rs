//! The TrainJobs the reconciler watches, deserialized only as far as it reads them.
//!
//! A TrainJob's spec and status can be kilobytes (pod templates, per-job status); the
//! reconciler reads its name, namespace, uid, the admitted-runtime annotation,
//! `spec.runtimeRef` and the `Complete`/`Failed` conditions. [`TrainJob`] has those fields
//! only, so the rest of each object is skipped while decoding, and the store holds a few
//! hundred bytes per TrainJob. Objects arrive wrapped in a [`DeserializeGuard`]: one that does
//! not decode (a CRD version this code does not know) is reported, not a failed watch.

use holdfast_core::hold::classify::trainjob_finished;
use holdfast_core::names;
use k8s_openapi::NamespaceResourceScope;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::core::DeserializeGuard;
use kube::runtime::reflector::ObjectRef;
use serde::{Deserialize, Serialize};
use serde_json::Value;
use std::borrow::Cow;

/// A watched TrainJob: decoded, or the metadata of one that did not decode.
pub type Watched = DeserializeGuard<TrainJob>;

/// A reference to a TrainJob in the reconciler's store.
pub type JobRef = ObjectRef<Watched>;

/// The part of a TrainJob the reconciler reads.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct TrainJob {
    pub metadata: ObjectMeta,
    #[serde(default)]
    pub spec: TrainJobSpec,
    #[serde(default)]
    pub status: TrainJobStatus,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct TrainJobSpec {
    /// `spec.runtimeRef`, as stored (the CRD applies its defaults on admission).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub runtime_ref: Option<RuntimeRefFields>,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct RuntimeRefFields {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub api_group: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kind: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct TrainJobStatus {
    /// Only `type` and `status` of each condition are read.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub conditions: Vec<Condition>,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Condition {
    #[serde(rename = "type", default)]
    pub type_: String,
    #[serde(default)]
    pub status: String,
}

impl kube::Resource for TrainJob {
    type DynamicType = ();
    type Scope = NamespaceResourceScope;

    fn kind(_: &()) -> Cow<'_, str> {
        Cow::Borrowed(names::TRAINJOB_KIND)
    }
    fn group(_: &()) -> Cow<'_, str> {
        Cow::Borrowed(names::TRAINER_GROUP)
    }
    fn version(_: &()) -> Cow<'_, str> {
        Cow::Borrowed(names::TRAINER_VERSION)
    }
    fn plural(_: &()) -> Cow<'_, str> {
        Cow::Borrowed("trainjobs")
    }
    fn meta(&self) -> &ObjectMeta {
        &self.metadata
    }
    fn meta_mut(&mut self) -> &mut ObjectMeta {
        &mut self.metadata
    }
}

/// A reference to a TrainJob.
pub fn trainjob_ref(namespace: &str, name: &str) -> JobRef {
    ObjectRef::new(name).within(namespace)
}

/// Drops the metadata the reconciler does not read (managedFields above all) and the
/// conditions other than `Complete` and `Failed`.
pub fn strip(job: &mut Watched) {
    let meta = match &mut job.0 {
        Ok(job) => {
            job.status
                .conditions
                .retain(|c| matches!(c.type_.as_str(), "Complete" | "Failed"));
            &mut job.metadata
        }
        Err(invalid) => &mut invalid.metadata,
    };
    meta.managed_fields = None;
    meta.labels = None;
    meta.owner_references = None;
    meta.finalizers = None;
    meta.generate_name = None;
    meta.creation_timestamp = None;
    if let Some(annotations) = meta.annotations.as_mut() {
        annotations.retain(|k, _| k == names::ANN_ADMITTED_RUNTIME_RESOURCE_VERSION);
        if annotations.is_empty() {
            meta.annotations = None;
        }
    }
}

impl TrainJob {
    /// Whether the TrainJob has finished (`Complete` or `Failed` true): it gets no snapshot.
    pub fn finished(&self) -> bool {
        trainjob_finished(&self.conditions_json()).is_some()
    }

    /// The runtime resourceVersion recorded at admission, if the webhook recorded one.
    pub fn admitted_runtime_version(&self) -> Option<&str> {
        self.metadata
            .annotations
            .as_ref()?
            .get(names::ANN_ADMITTED_RUNTIME_RESOURCE_VERSION)
            .map(String::as_str)
    }

    /// The TrainJob as the JSON object `holdfast_core::snapshot` functions take.
    pub fn as_json(&self) -> Result<Value, serde_json::Error> {
        let mut value = serde_json::to_value(self)?;
        if let Value::Object(map) = &mut value {
            map.insert(
                "apiVersion".to_owned(),
                Value::String(format!(
                    "{}/{}",
                    names::TRAINER_GROUP,
                    names::TRAINER_VERSION
                )),
            );
            map.insert(
                "kind".to_owned(),
                Value::String(names::TRAINJOB_KIND.to_owned()),
            );
        }
        Ok(value)
    }

    /// `spec.runtimeRef` with the CRD's defaults (as `holdfast_core::snapshot::runtime_ref`).
    pub fn runtime_ref(
        &self,
    ) -> Result<holdfast_core::snapshot::RuntimeRef, holdfast_core::snapshot::SnapshotError> {
        let spec = serde_json::json!({ "spec": self.spec });
        holdfast_core::snapshot::runtime_ref(&spec)
    }

    fn conditions_json(&self) -> Value {
        Value::Array(
            self.status
                .conditions
                .iter()
                .map(|c| serde_json::json!({ "type": c.type_, "status": c.status }))
                .collect(),
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn watched(v: Value) -> Watched {
        serde_json::from_value(v).expect("a TrainJob")
    }

    #[test]
    fn only_what_the_reconciler_reads_is_kept() {
        let mut j = watched(json!({
            "apiVersion": "trainer.kubeflow.org/v1alpha1",
            "kind": "TrainJob",
            "metadata": {
                "name": "a", "namespace": "ns", "uid": "u1", "resourceVersion": "7",
                "labels": {"x": "y"},
                "annotations": {
                    "holdfast.dev/admitted-runtime-resource-version": "41",
                    "other": "z"
                },
                "managedFields": [{"manager": "kubectl"}]
            },
            "spec": {"runtimeRef": {"name": "torch"}, "trainer": {"numNodes": 4}},
            "status": {"conditions": [
                {"type": "Suspended", "status": "True"},
                {"type": "Complete", "status": "True", "message": "done"}
            ], "jobsStatus": []}
        }));
        strip(&mut j);
        let job = j.0.expect("decoded");
        assert_eq!(job.admitted_runtime_version(), Some("41"));
        assert!(job.metadata.labels.is_none());
        assert!(job.metadata.managed_fields.is_none());
        assert_eq!(job.metadata.uid.as_deref(), Some("u1"));
        assert!(job.finished());
        let v = job.as_json().expect("json");
        assert_eq!(v["kind"], "TrainJob");
        assert_eq!(v["apiVersion"], "trainer.kubeflow.org/v1alpha1");
        assert_eq!(v["metadata"]["name"], "a");
        assert_eq!(v["spec"], json!({"runtimeRef": {"name": "torch"}}));
        assert_eq!(
            v["status"],
            json!({"conditions": [{"type": "Complete", "status": "True"}]})
        );
        let r = job.runtime_ref().expect("ref");
        assert_eq!(
            (r.api_group.as_str(), r.kind.as_str(), r.name.as_str()),
            ("trainer.kubeflow.org", "ClusterTrainingRuntime", "torch")
        );
    }

    #[test]
    fn a_running_job_is_not_finished() {
        let j = watched(json!({
            "metadata": {"name": "a", "namespace": "ns"},
            "spec": {"runtimeRef": {"name": "torch", "kind": "TrainingRuntime"}},
            "status": {"conditions": [{"type": "Complete", "status": "False"}]}
        }));
        let job = j.0.expect("decoded");
        assert!(!job.finished());
        assert_eq!(job.admitted_runtime_version(), None);
        assert_eq!(job.runtime_ref().expect("ref").kind, "TrainingRuntime");
    }

    #[test]
    fn a_job_that_does_not_decode_keeps_its_metadata() {
        let mut j = watched(json!({
            "metadata": {"name": "odd", "namespace": "ns", "managedFields": [{"manager": "x"}]},
            "spec": {"runtimeRef": "not an object"}
        }));
        strip(&mut j);
        let invalid = j.0.expect_err("does not decode");
        assert_eq!(invalid.metadata.name.as_deref(), Some("odd"));
        assert!(invalid.metadata.managed_fields.is_none());
    }
}
