//! Small helpers the tests share for objects of any kind.

use kube::api::{Api, DynamicObject, PostParams};
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

/// A Trainer resource (`trainer.kubeflow.org/v1alpha1`).
pub fn trainer_resource(kind: &str, plural: &str) -> ApiResource {
    ApiResource::from_gvk_with_plural(
        &kube::core::GroupVersionKind::gvk("trainer.kubeflow.org", "v1alpha1", kind),
        plural,
    )
}

/// `clustertrainingruntimes.trainer.kubeflow.org`.
pub fn ctr_resource() -> ApiResource {
    trainer_resource("ClusterTrainingRuntime", "clustertrainingruntimes")
}

/// `trainjobs.trainer.kubeflow.org`.
pub fn trainjob_resource() -> ApiResource {
    trainer_resource("TrainJob", "trainjobs")
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
