//! The chart's readmission-gate policy (`readmissionpolicy.yaml`, kueue mode): the gate
//! enforced where Kueue admits. Registered as the chart installs it for the harness's
//! release, by the topics that need it (it judges Workloads in every namespace, and the
//! other Kueue topics run their own gates with ungated queues of their own).

use std::time::Duration;

use kube::api::{Api, DynamicObject, Patch, PatchParams, PostParams};
use serde_json::{Value, json};

use crate::kueue_support::CHECK;
use crate::rbac::{RELEASE, RELEASE_NAMESPACE};
use crate::wait::wait_for;
use crate::{ControlPlane, Identity, kueue};

/// The policy's (and its binding's) name for the harness's release.
pub fn name() -> String {
    format!("{RELEASE}-readmission-gate")
}

/// A Workload of nobody in namespace `ns` named `name`, in LocalQueue `queue`: one pod
/// requesting `cpu`.
pub fn bare_workload(name: &str, queue: &str, cpu: &str) -> Value {
    json!({
        "apiVersion": kueue::KUEUE_API_VERSION, "kind": "Workload",
        "metadata": {"name": name},
        "spec": {"queueName": queue, "podSets": [{"name": "main", "count": 1, "template": {"spec": {
            "restartPolicy": "Never",
            "containers": [{"name": "c", "image": "registry.k8s.io/pause:3.10",
                "resources": {"requests": {"cpu": cpu}}}]}}}]}
    })
}

/// The policy and its binding as the chart renders them for the harness's release in kueue
/// mode, every other value at its default.
pub fn rendered() -> Vec<Value> {
    let install = crate::helm::Install::new(RELEASE, RELEASE_NAMESPACE).set("mode=kueue");
    let docs = crate::helm::ensure()
        .expect("helm")
        .render(&install)
        .expect("render");
    let name = name();
    let mine: Vec<Value> = docs
        .into_iter()
        .filter(|d| d["metadata"]["name"] == name.as_str())
        .collect();
    assert_eq!(mine.len(), 2, "the policy and its binding");
    mine
}

/// The apiserver's type check of the policy's CEL against the Workload CRD's schema, on a
/// pinned, unbound copy ([`crate::registration::type_check_warnings`]).
pub async fn type_check_warnings(admin: &kube::Client) -> Value {
    let policy = rendered()
        .into_iter()
        .find(|d| d["kind"] == "ValidatingAdmissionPolicy")
        .expect("the policy");
    crate::registration::type_check_warnings(admin, &policy).await
}

/// Registers the chart's readmission-gate policy (kueue mode, every other value at its
/// default) and waits until the apiserver enforces it: until the admin's dry-run of setting
/// holdfast's check Ready on a probe Workload in `ns` (in no queue) is refused.
pub async fn register(cp: &ControlPlane, ns: &str) {
    let admin = cp.client(Identity::Admin).await.expect("admin");
    for doc in rendered() {
        crate::rbac::apply(&admin, &doc, RELEASE_NAMESPACE, false)
            .await
            .expect("apply the policy");
    }
    let workloads: Api<DynamicObject> =
        Api::namespaced_with(admin.clone(), ns, &holdfast_cluster::resources::workload());
    let probe: DynamicObject =
        serde_json::from_value(bare_workload("policy-probe", "no-such-queue", "1")).expect("probe");
    workloads
        .create(&PostParams::default(), &probe)
        .await
        .expect("probe Workload");
    let dry = PatchParams {
        dry_run: true,
        ..Default::default()
    };
    let ready = json!({"status": {"admissionChecks": [{"name": CHECK, "state": "Ready",
        "message": "forged", "lastTransitionTime": "2026-01-01T00:00:00Z"}]}});
    wait_for(
        "the readmission-gate policy is enforced",
        Duration::from_secs(60),
        || async {
            matches!(
                workloads
                    .patch_status("policy-probe", &dry, &Patch::Merge(&ready))
                    .await,
                Err(kube::Error::Api(s)) if s.code == 403
            )
            .then_some(())
        },
    )
    .await;
}
