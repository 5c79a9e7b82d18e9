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
    serde_json::json!({
        "apiVersion": "trainer.kubeflow.org/v1alpha1",
        "kind": "TrainJob",
        "metadata": {"name": name},
        "spec": {"runtimeRef": {"name": runtime}}
    })
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
