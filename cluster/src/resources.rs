//! The one definition of each API resource holdfast reads or writes, as kube `ApiResource`s
//! (group, version, kind and plural): the controller, the webhook, the CLI and the tests all
//! take them from here.

use holdfast_core::execution::JOBSET_GROUP;
use holdfast_core::names::{KUEUE_GROUP, TRAINER_GROUP, TRAINER_VERSION, TRAINJOB_KIND};
use kube::core::{ApiResource, GroupVersionKind};

/// The Kueue API version holdfast reads and writes (Kueue v0.19 serves `v1beta1` and
/// `v1beta2`, and stores `v1beta2`).
pub const KUEUE_VERSION: &str = "v1beta2";

/// The JobSet API version holdfast lists.
pub const JOBSET_VERSION: &str = "v1alpha2";

/// The plural of TrainJobs (also the typed TrainJob's `kube::Resource`).
pub const TRAINJOB_PLURAL: &str = "trainjobs";

fn resource(group: &str, version: &str, kind: &str, plural: &str) -> ApiResource {
    ApiResource::from_gvk_with_plural(&GroupVersionKind::gvk(group, version, kind), plural)
}

/// A Trainer kind (`trainer.kubeflow.org/v1alpha1`).
fn trainer(kind: &str, plural: &str) -> ApiResource {
    resource(TRAINER_GROUP, TRAINER_VERSION, kind, plural)
}

/// A Kueue kind (`kueue.x-k8s.io/v1beta2`). Public for the kinds only the tests create
/// (ResourceFlavors, WorkloadPriorityClasses).
pub fn kueue(kind: &str, plural: &str) -> ApiResource {
    resource(KUEUE_GROUP, KUEUE_VERSION, kind, plural)
}

/// TrainJobs (namespaced).
pub fn trainjob() -> ApiResource {
    trainer(TRAINJOB_KIND, TRAINJOB_PLURAL)
}

/// TrainingRuntimes (namespaced).
pub fn training_runtime() -> ApiResource {
    trainer("TrainingRuntime", "trainingruntimes")
}

/// ClusterTrainingRuntimes.
pub fn cluster_training_runtime() -> ApiResource {
    trainer("ClusterTrainingRuntime", "clustertrainingruntimes")
}

/// Kueue Workloads (namespaced).
pub fn workload() -> ApiResource {
    kueue("Workload", "workloads")
}

/// Kueue LocalQueues (namespaced).
pub fn local_queue() -> ApiResource {
    kueue("LocalQueue", "localqueues")
}

/// Kueue ClusterQueues.
pub fn cluster_queue() -> ApiResource {
    kueue("ClusterQueue", "clusterqueues")
}

/// Kueue AdmissionChecks.
pub fn admission_check() -> ApiResource {
    kueue("AdmissionCheck", "admissionchecks")
}

/// MultiKueueConfigs (cluster-scoped): the worker clusters an AdmissionCheck of MultiKueue's
/// dispatches to.
pub fn multikueue_config() -> ApiResource {
    kueue("MultiKueueConfig", "multikueueconfigs")
}

/// `batch/v1` Jobs.
pub fn job() -> ApiResource {
    resource("batch", "v1", "Job", "jobs")
}

/// `jobset.x-k8s.io/v1alpha2` JobSets.
pub fn jobset() -> ApiResource {
    resource(JOBSET_GROUP, JOBSET_VERSION, "JobSet", "jobsets")
}

/// Core `v1` Pods.
pub fn pod() -> ApiResource {
    resource("", "v1", "Pod", "pods")
}

/// Core `v1` Nodes (cluster-scoped).
pub fn node() -> ApiResource {
    resource("", "v1", "Node", "nodes")
}

#[cfg(test)]
mod tests {
    use super::*;
    use kube::core::{DynamicObject, Resource};

    #[test]
    fn paths_are_the_served_versions() {
        for (ar, path) in [
            (
                trainjob(),
                "/apis/trainer.kubeflow.org/v1alpha1/namespaces/ns/trainjobs",
            ),
            (
                training_runtime(),
                "/apis/trainer.kubeflow.org/v1alpha1/namespaces/ns/trainingruntimes",
            ),
            (
                workload(),
                "/apis/kueue.x-k8s.io/v1beta2/namespaces/ns/workloads",
            ),
            (
                local_queue(),
                "/apis/kueue.x-k8s.io/v1beta2/namespaces/ns/localqueues",
            ),
            (job(), "/apis/batch/v1/namespaces/ns/jobs"),
            (
                jobset(),
                "/apis/jobset.x-k8s.io/v1alpha2/namespaces/ns/jobsets",
            ),
            (pod(), "/api/v1/namespaces/ns/pods"),
        ] {
            assert_eq!(DynamicObject::url_path(&ar, Some("ns")), path);
        }
        for (ar, path) in [
            (
                cluster_training_runtime(),
                "/apis/trainer.kubeflow.org/v1alpha1/clustertrainingruntimes",
            ),
            (
                cluster_queue(),
                "/apis/kueue.x-k8s.io/v1beta2/clusterqueues",
            ),
            (
                admission_check(),
                "/apis/kueue.x-k8s.io/v1beta2/admissionchecks",
            ),
            (node(), "/api/v1/nodes"),
        ] {
            assert_eq!(DynamicObject::url_path(&ar, None), path);
        }
    }
}
