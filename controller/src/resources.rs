//! The kinds holds and the readmission gate read and write, as kube `ApiResource`s: the
//! vocabulary both share, below both.

use holdfast_core::names::{KUEUE_GROUP, TRAINER_GROUP, TRAINER_VERSION, TRAINJOB_KIND};
use kube::core::{ApiResource, GroupVersionKind};

/// The Kueue API version holdfast reads and writes Workloads in. Kueue v0.19's Workload CRD
/// serves `v1beta1` and `v1beta2`, and stores `v1beta2`.
pub use holdfast_cluster::queues::KUEUE_VERSION;

/// The label Kueue puts on a job's Workload: the job's UID.
pub const WORKLOAD_JOB_UID_LABEL: &str = holdfast_core::names::JOB_UID_LABEL;

/// `trainer.kubeflow.org/v1alpha1` TrainJobs.
pub fn trainjob() -> ApiResource {
    ApiResource::from_gvk_with_plural(
        &GroupVersionKind::gvk(TRAINER_GROUP, TRAINER_VERSION, TRAINJOB_KIND),
        "trainjobs",
    )
}

/// The reference an Event on a TrainJob (as read, JSON) carries: `kubectl describe` finds
/// Events by kind, namespace, name and uid. `None` without a uid.
pub fn trainjob_reference(
    object: &serde_json::Value,
) -> Option<k8s_openapi::api::core::v1::ObjectReference> {
    let field = |p: &str| {
        object
            .pointer(p)
            .and_then(serde_json::Value::as_str)
            .map(str::to_owned)
    };
    let ar = trainjob();
    Some(k8s_openapi::api::core::v1::ObjectReference {
        api_version: Some(ar.api_version),
        kind: Some(ar.kind),
        namespace: field("/metadata/namespace"),
        name: field("/metadata/name"),
        uid: Some(field("/metadata/uid")?),
        ..Default::default()
    })
}

/// `kueue.x-k8s.io/v1beta2` Workloads.
pub fn workload() -> ApiResource {
    ApiResource::from_gvk_with_plural(
        &GroupVersionKind::gvk(KUEUE_GROUP, KUEUE_VERSION, "Workload"),
        "workloads",
    )
}

/// Core `v1` Pods.
pub fn pod() -> ApiResource {
    ApiResource::from_gvk_with_plural(&GroupVersionKind::gvk("", "v1", "Pod"), "pods")
}

/// Core `v1` Nodes (cluster-scoped).
pub fn node() -> ApiResource {
    ApiResource::from_gvk_with_plural(&GroupVersionKind::gvk("", "v1", "Node"), "nodes")
}

/// Whether `name` is a DNS-1123 subdomain (a TrainJob's name) and `namespace` a DNS-1123
/// label: checked before either goes into a request path, so that a name like `a%2Fb` from
/// the hold API cannot address another resource.
pub fn check_object_name(namespace: &str, name: &str) -> Result<(), String> {
    let label = |s: &str| {
        !s.is_empty()
            && s.len() <= 63
            && s.bytes()
                .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
            && !s.starts_with('-')
            && !s.ends_with('-')
    };
    if !label(namespace) {
        return Err(format!("namespace {namespace:?} is not a DNS-1123 label"));
    }
    if name.is_empty() || name.len() > 253 || !name.split('.').all(label) {
        return Err(format!("name {name:?} is not a DNS-1123 subdomain"));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use kube::core::{DynamicObject, Resource};

    #[test]
    fn paths_are_the_served_versions() {
        assert_eq!(
            DynamicObject::url_path(&trainjob(), Some("ns")),
            "/apis/trainer.kubeflow.org/v1alpha1/namespaces/ns/trainjobs"
        );
        assert_eq!(
            DynamicObject::url_path(&workload(), Some("ns")),
            "/apis/kueue.x-k8s.io/v1beta2/namespaces/ns/workloads"
        );
        assert_eq!(
            DynamicObject::url_path(&pod(), Some("ns")),
            "/api/v1/namespaces/ns/pods"
        );
    }

    #[test]
    fn names_that_could_escape_the_path_are_refused() {
        assert!(check_object_name("team-a", "mnist.v2").is_ok());
        for (ns, name) in [
            ("team-a", "a/b"),
            ("team-a", ".."),
            ("team-a", ""),
            ("team-a", "Mnist"),
            ("team/a", "mnist"),
            ("", "mnist"),
            ("-a", "mnist"),
        ] {
            assert!(check_object_name(ns, name).is_err(), "{ns}/{name}");
        }
        assert!(check_object_name("a", &"x".repeat(254)).is_err());
    }
}
