//! The chart's policy on what holdfast's controller may do to ConfigMaps
//! (`<fullname>-controller-configmaps`), registered as the chart renders it for the harness's
//! release (`holdfast` in `holdfast-system`).

use std::time::Duration;

use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{Api, PostParams};
use serde_json::json;

use crate::rbac::{RELEASE, RELEASE_NAMESPACE};
use crate::wait::wait_for;
use crate::{ControlPlane, Identity};

/// The policy's (and its binding's) name for the harness's release.
pub fn name() -> String {
    format!("{RELEASE}-controller-configmaps")
}

/// Renders the chart, applies the policy and its binding as rendered, and waits until the
/// apiserver enforces it: the controller's dry-run create of an unlabelled ConfigMap in `ns`
/// is refused. Answers how many of the chart's documents were applied; a chart that renders
/// none registers nothing and waits for nothing (the caller's assertions then say what the
/// controller could do without the policy).
pub async fn register(cp: &ControlPlane, ns: &str) -> usize {
    let admin = cp.client(Identity::Admin).await.expect("admin");
    let install = crate::helm::Install::new(RELEASE, RELEASE_NAMESPACE);
    let docs = crate::helm::ensure()
        .expect("helm")
        .render(&install)
        .expect("render");
    let name = name();
    let mine: Vec<_> = docs
        .iter()
        .filter(|d| d["metadata"]["name"] == name.as_str())
        .collect();
    for doc in &mine {
        crate::rbac::apply(&admin, doc, RELEASE_NAMESPACE, false)
            .await
            .expect("apply the policy");
    }
    if mine.is_empty() {
        return 0;
    }
    let controller: Api<ConfigMap> = Api::namespaced(
        cp.client(Identity::Controller).await.expect("controller"),
        ns,
    );
    let probe: ConfigMap =
        serde_json::from_value(json!({"metadata": {"name": "policy-probe"}})).expect("configmap");
    let dry = PostParams {
        dry_run: true,
        ..Default::default()
    };
    wait_for(
        "the controller's ConfigMap policy is enforced",
        Duration::from_secs(60),
        || async { controller.create(&dry, &probe).await.is_err().then_some(()) },
    )
    .await;
    mine.len()
}
