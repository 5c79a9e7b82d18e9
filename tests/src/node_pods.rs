//! The pods of tier 3's workload as the node tests and the demo's node mode read them: a
//! TrainingRuntime that runs the workload image, a JobSet's pods, whether a pod is Running,
//! and the configuration line the workload logs at start.

use crate::wait::wait_for;
use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, ListParams, LogParams};
use std::time::Duration;

/// Running, and every container ready.
pub fn is_running(p: &Pod) -> bool {
    p.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Running")
        && p.status
            .as_ref()
            .and_then(|s| s.container_statuses.as_ref())
            .is_some_and(|cs| cs.iter().all(|c| c.ready))
}

/// The `workload: config {...}` line of a pod's log, parsed.
pub async fn config_of(pods: &Api<Pod>, name: &str, container: &str) -> serde_json::Value {
    wait_for(
        "the workload's config line",
        Duration::from_secs(30),
        || async {
            let log = pods
                .logs(
                    name,
                    &LogParams {
                        container: Some(container.into()),
                        ..Default::default()
                    },
                )
                .await
                .ok()?;
            let line = log
                .lines()
                .find_map(|l| l.strip_prefix("workload: config "))?;
            serde_json::from_str(line).ok()
        },
    )
    .await
}

/// A namespaced TrainingRuntime `name` (torch, one node) whose pod runs `image` (the workload:
/// SIGTERM grace 1 s, `WORKLOAD_MARK=runtime-<name>`), `imagePullPolicy: Never`.
pub fn training_runtime(name: &str, image: &str) -> serde_json::Value {
    serde_json::json!({
        "apiVersion": "trainer.kubeflow.org/v1alpha1",
        "kind": "TrainingRuntime",
        "metadata": {"name": name, "labels": {"trainer.kubeflow.org/framework": "torch"}},
        "spec": {
            "mlPolicy": {"numNodes": 1, "torch": {}},
            "template": {"spec": {"replicatedJobs": [{
                "name": "node",
                "template": {
                    "metadata": {"labels": {"trainer.kubeflow.org/trainjob-ancestor-step": "trainer"}},
                    "spec": {"template": {"spec": {
                        "terminationGracePeriodSeconds": 30,
                        "containers": [{
                            "name": "node",
                            "image": image,
                            "imagePullPolicy": "Never",
                            "env": [
                                {"name": "WORKLOAD_TERM_GRACE_SECONDS", "value": "1"},
                                {"name": "WORKLOAD_MARK", "value": format!("runtime-{name}")}
                            ]
                        }]
                    }}}
                }
            }]}}
        }
    })
}

/// The pods of JobSet `jobset` (every phase, Terminating ones too).
pub async fn running_pods(pods: &Api<Pod>, jobset: &str) -> Vec<Pod> {
    let lp = ListParams::default().labels(&format!("jobset.sigs.k8s.io/jobset-name={jobset}"));
    pods.list(&lp).await.map(|l| l.items).unwrap_or_default()
}
