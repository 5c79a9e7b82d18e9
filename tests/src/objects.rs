//! Small helpers the tests share for objects of any kind.

use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{Api, DynamicObject, ListParams, Patch, PatchParams, PostParams};
use kube::core::ApiResource;

/// Create `obj` (JSON) as a `DynamicObject` of `ar`, namespaced when `ns` is given; panics
/// with the apiserver's answer if the create fails (for tests).
pub async fn create_dynamic(
    client: &kube::Client,
    ar: &ApiResource,
    ns: Option<&str>,
    obj: serde_json::Value,
) -> DynamicObject {
    let obj: DynamicObject = match serde_json::from_value(obj) {
        Ok(o) => o,
        Err(e) => panic!("not an object: {e}"),
    };
    let api = match ns {
        Some(ns) => Api::<DynamicObject>::namespaced_with(client.clone(), ns, ar),
        None => Api::<DynamicObject>::all_with(client.clone(), ar),
    };
    match api.create(&PostParams::default(), &obj).await {
        Ok(o) => o,
        Err(e) => panic!("create: {e}"),
    }
}

/// A minimal torch ClusterTrainingRuntime with one container image.
pub fn cluster_training_runtime(name: &str, image: &str) -> serde_json::Value {
    serde_json::json!({
        "apiVersion": "trainer.kubeflow.org/v1alpha1",
        "kind": "ClusterTrainingRuntime",
        "metadata": {"name": name, "labels": {"trainer.kubeflow.org/framework": "torch"}},
        "spec": {
            "mlPolicy": {"numNodes": 1, "torch": {}},
            "template": {"spec": {"replicatedJobs": [{
                "name": "node",
                "template": {
                    "metadata": {"labels": {"trainer.kubeflow.org/trainjob-ancestor-step": "trainer"}},
                    "spec": {"template": {"spec": {"containers": [{"name": "node", "image": image}]}}}
                }
            }]}}
        }
    })
}

/// A TrainJob that references ClusterTrainingRuntime `runtime`.
pub fn trainjob(name: &str, runtime: &str) -> serde_json::Value {
    TrainJob::named(name).runtime(runtime).json()
}

/// A TrainJob to create, written as the scenario says it:
/// `TrainJob::named("job").runtime(rt).managed().queued("main").suspended(true)`.
#[derive(Clone, Debug)]
pub struct TrainJob {
    name: String,
    runtime: String,
    labels: serde_json::Map<String, serde_json::Value>,
    annotations: serde_json::Map<String, serde_json::Value>,
    suspend: Option<bool>,
}

impl TrainJob {
    /// A TrainJob `name` of ClusterTrainingRuntime `torch-distributed`, with no labels, no
    /// annotations and no `spec.suspend`.
    pub fn named(name: &str) -> Self {
        TrainJob {
            name: name.to_owned(),
            runtime: "torch-distributed".to_owned(),
            labels: serde_json::Map::new(),
            annotations: serde_json::Map::new(),
            suspend: None,
        }
    }

    /// It references ClusterTrainingRuntime `runtime`.
    pub fn runtime(mut self, runtime: impl AsRef<str>) -> Self {
        runtime.as_ref().clone_into(&mut self.runtime);
        self
    }

    /// It is labelled `holdfast.dev/managed: "true"`: it waits at its start gate.
    pub fn managed(self) -> Self {
        self.label(holdfast_core::names::LABEL_MANAGED, "true")
    }

    /// It is queued in LocalQueue `queue` (`kueue.x-k8s.io/queue-name`).
    pub fn queued(self, queue: &str) -> Self {
        self.label(holdfast_core::names::QUEUE_NAME_LABEL, queue)
    }

    pub fn label(mut self, key: &str, value: &str) -> Self {
        self.labels.insert(key.to_owned(), value.into());
        self
    }

    /// Every label of `labels`, a JSON object of strings (as tests write them with `json!`);
    /// panics on anything else.
    pub fn labels(self, labels: &serde_json::Value) -> Self {
        let Some(map) = labels.as_object() else {
            panic!("labels are a JSON object: {labels}");
        };
        map.iter().fold(self, |tj, (k, v)| match v.as_str() {
            Some(v) => tj.label(k, v),
            None => panic!("label {k} is not a string: {v}"),
        })
    }

    pub fn annotation(mut self, key: &str, value: &str) -> Self {
        self.annotations.insert(key.to_owned(), value.into());
        self
    }

    /// Its `spec.suspend`.
    pub fn suspended(mut self, suspend: bool) -> Self {
        self.suspend = Some(suspend);
        self
    }

    pub fn json(&self) -> serde_json::Value {
        let mut metadata = serde_json::json!({"name": self.name});
        if !self.labels.is_empty() {
            metadata["labels"] = self.labels.clone().into();
        }
        if !self.annotations.is_empty() {
            metadata["annotations"] = self.annotations.clone().into();
        }
        let mut spec = serde_json::json!({"runtimeRef": {"name": self.runtime}});
        if let Some(suspend) = self.suspend {
            spec["suspend"] = suspend.into();
        }
        serde_json::json!({
            "apiVersion": "trainer.kubeflow.org/v1alpha1",
            "kind": "TrainJob",
            "metadata": metadata,
            "spec": spec,
        })
    }

    /// As the object a kube `Api<DynamicObject>` creates.
    pub fn object(&self) -> DynamicObject {
        match serde_json::from_value(self.json()) {
            Ok(o) => o,
            Err(e) => panic!("a TrainJob is a DynamicObject: {e}"),
        }
    }
}

/// Sets the container image of a ClusterTrainingRuntime built by [`cluster_training_runtime`]
/// (an admin's edit, a merge patch); panics with the apiserver's answer if it fails.
pub async fn set_runtime_image(client: &kube::Client, name: &str, image: &str) -> DynamicObject {
    let patch = serde_json::json!({"spec": {"template": {"spec": {"replicatedJobs": [{
        "name": "node",
        "template": {
            "metadata": {"labels": {"trainer.kubeflow.org/trainjob-ancestor-step": "trainer"}},
            "spec": {"template": {"spec": {"containers": [{"name": "node", "image": image}]}}}
        }
    }]}}}});
    match Api::<DynamicObject>::all_with(
        client.clone(),
        &holdfast_cluster::resources::cluster_training_runtime(),
    )
    .patch(name, &PatchParams::default(), &Patch::Merge(&patch))
    .await
    {
        Ok(o) => o,
        Err(e) => panic!("edit the runtime: {e}"),
    }
}

/// The container image of a runtime built by [`cluster_training_runtime`] (as JSON, or as
/// the YAML of its snapshot parsed); empty if it has none.
pub fn runtime_image(runtime: &serde_json::Value) -> &str {
    runtime
        .pointer(
            "/spec/template/spec/replicatedJobs/0/template/spec/template/spec/containers/0/image",
        )
        .and_then(serde_json::Value::as_str)
        .unwrap_or_default()
}

/// The snapshot ConfigMaps in `ns` (holdfast's label), by name.
pub async fn snapshot_configmaps(
    client: &kube::Client,
    ns: &str,
) -> std::collections::BTreeMap<String, ConfigMap> {
    let lp = ListParams::default().labels(&format!(
        "{}=true",
        holdfast_core::names::LABEL_RUNTIME_SNAPSHOT
    ));
    match Api::<ConfigMap>::namespaced(client.clone(), ns)
        .list(&lp)
        .await
    {
        Ok(list) => list
            .items
            .into_iter()
            .filter_map(|cm| Some((cm.metadata.name.clone()?, cm)))
            .collect(),
        Err(e) => panic!("list ConfigMaps: {e}"),
    }
}
