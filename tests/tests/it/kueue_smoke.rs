//! Tier 2 proof: the real Kueue controller manages a TrainJob on the local control plane.

use holdfast_tests::objects::TrainJob;
use holdfast_tests::{ControlPlane, Identity, kueue};
use kube::api::{Api, DynamicObject, ListParams, PostParams};
use std::time::Duration;

#[tokio::test]
async fn kueue_creates_admits_and_unsuspends_a_queued_trainjob() {
    let cp = ControlPlane::shared();
    cp.start_kueue().await.expect("kueue starts");
    let ns = cp.namespace("kueue").await.expect("namespace");
    let admin = cp.client(Identity::Admin).await.expect("admin");
    kueue::create_queues(&admin, &ns, "main", &[])
        .await
        .expect("queues");

    let runtime = format!("torch-{ns}");
    let rt: DynamicObject = serde_json::from_value(serde_json::json!({
        "apiVersion": "trainer.kubeflow.org/v1alpha1", "kind": "ClusterTrainingRuntime",
        "metadata": {"name": runtime, "labels": {"trainer.kubeflow.org/framework": "torch"}},
        "spec": {"mlPolicy": {"numNodes": 1, "torch": {}},
            "template": {"spec": {"replicatedJobs": [{"name": "node",
                "template": {"metadata": {"labels": {"trainer.kubeflow.org/trainjob-ancestor-step": "trainer"}},
                "spec": {"template": {"spec": {"containers": [{"name": "node", "image": "pytorch/pytorch:2.10.0",
                    "resources": {"requests": {"cpu": "1"}}}]}}}}}]}}}
    }))
    .expect("runtime");
    Api::<DynamicObject>::all_with(
        admin.clone(),
        &holdfast_cluster::resources::cluster_training_runtime(),
    )
    .create(&PostParams::default(), &rt)
    .await
    .expect("create runtime");
    let tj = TrainJob::named("job")
        .runtime(runtime)
        .queued("main")
        .object();
    let tjs = Api::<DynamicObject>::namespaced_with(
        admin.clone(),
        &ns,
        &holdfast_cluster::resources::trainjob(),
    );
    let created = tjs
        .create(&PostParams::default(), &tj)
        .await
        .expect("create TrainJob");
    // Kueue's webhook suspends a queued job at creation.
    assert_eq!(
        created.data["spec"]["suspend"], true,
        "{:?}",
        created.data["spec"]
    );
    let uid = created.metadata.uid.clone().expect("uid");

    let wls = Api::<DynamicObject>::namespaced_with(
        admin.clone(),
        &ns,
        &holdfast_cluster::resources::workload(),
    );
    let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
    loop {
        let list = wls
            .list(&ListParams::default().labels(&format!("kueue.x-k8s.io/job-uid={uid}")))
            .await
            .expect("list workloads");
        let admitted = list.items.first().is_some_and(|w| {
            w.data["status"]["conditions"].as_array().is_some_and(|cs| {
                cs.iter()
                    .any(|c| c["type"] == "Admitted" && c["status"] == "True")
            })
        });
        let running = tjs.get("job").await.expect("get").data["spec"]["suspend"] == false;
        if admitted && running {
            break;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "no admitted Workload / unsuspended TrainJob within 60s (workloads: {:?}):\n{}",
            list.items
                .iter()
                .map(|w| &w.data["status"])
                .collect::<Vec<_>>(),
            cp.log_tail("kueue", 30)
        );
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
}
