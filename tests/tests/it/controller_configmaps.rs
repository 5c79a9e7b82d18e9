//! What holdfast's controller may do to ConfigMaps. Its ClusterRole lets it create and delete
//! ConfigMaps in every namespace; the chart's policy `<fullname>-controller-configmaps`
//! narrows that to the writes it makes (a snapshot, the deletion of an orphaned one, its
//! fences, the hold API's CA). Each test registers the policy as the chart renders it, then acts with the
//! controller's own token against the real apiserver.

use holdfast_controller::snapshot::{Config, SnapshotMetrics, Snapshotter};
use holdfast_controller::{execution, hold_api_ca};
use holdfast_core::names;
use holdfast_serve::Readiness;
use holdfast_tests::controller_policy;
use holdfast_tests::lost_node::FENCES;
use holdfast_tests::objects::{cluster_training_runtime, create_dynamic, trainjob};
use holdfast_tests::rbac::RELEASE_NAMESPACE;
use holdfast_tests::wait::wait_for;
use holdfast_tests::{ControlPlane, Identity};
use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{Api, DeleteParams, DynamicObject, PostParams, PropagationPolicy};
use serde_json::json;
use std::time::Duration;
use tokio_util::sync::CancellationToken;

const MINUTE: Duration = Duration::from_secs(60);
/// The chart's `<fullname>-hold-api-ca` for release `holdfast`.
const HOLD_API_CA: &str = "holdfast-hold-api-ca";

fn dry() -> PostParams {
    PostParams {
        dry_run: true,
        ..Default::default()
    }
}

fn dry_delete() -> DeleteParams {
    DeleteParams {
        dry_run: true,
        ..Default::default()
    }
}

fn configmap(value: serde_json::Value) -> ConfigMap {
    serde_json::from_value(value).expect("a ConfigMap")
}

/// The refusal's message, asserting it is the policy's (403, naming the policy and `what`).
fn refused_by_the_policy<T: std::fmt::Debug>(result: Result<T, kube::Error>, what: &str) {
    match result {
        Err(kube::Error::Api(s)) => {
            assert_eq!(s.code, 403, "{what}: {s:?}");
            assert!(
                s.message.contains(&controller_policy::name()) && s.message.contains(what),
                "{what}: refused, but not by the policy naming it: {}",
                s.message
            );
        }
        other => panic!("{what}: the controller's write was not refused: {other:?}"),
    }
}

/// Finding: the ClusterRole alone let the controller create `kube-system/aws-auth` (on EKS,
/// cluster-admin to whoever it maps), any ConfigMap anywhere, and delete any ConfigMap. With
/// the chart's policy, each is refused with a message naming the rule.
#[tokio::test]
async fn the_controller_may_not_create_or_delete_configmaps_that_are_not_its_own() {
    let cp = ControlPlane::shared();
    let ns = cp.namespace("cm-reach").await.expect("namespace");
    let admin = cp.client(Identity::Admin).await.expect("admin");
    controller_policy::register(cp, &ns).await;
    let controller = cp.client(Identity::Controller).await.expect("controller");

    // aws-auth in kube-system: the EKS escalation.
    let kube_system: Api<ConfigMap> = Api::namespaced(controller.clone(), "kube-system");
    let aws_auth = configmap(json!({
        "metadata": {"name": "aws-auth"},
        "data": {"mapRoles": "- rolearn: arn:aws:iam::1:role/x\n  username: x\n  groups: [system:masters]\n"}
    }));
    refused_by_the_policy(
        kube_system.create(&dry(), &aws_auth).await,
        "create of configmap kube-system/aws-auth",
    );

    // An unlabelled ConfigMap, by a plain name and by a snapshot's name.
    let cms: Api<ConfigMap> = Api::namespaced(controller.clone(), &ns);
    refused_by_the_policy(
        cms.create(
            &dry(),
            &configmap(json!({"metadata": {"name": "settings"}})),
        )
        .await,
        &format!("create of configmap {ns}/settings"),
    );
    refused_by_the_policy(
        cms.create(
            &dry(),
            &configmap(json!({"metadata": {"name": "x-runtime-snapshot"}})),
        )
        .await,
        &format!("create of configmap {ns}/x-runtime-snapshot"),
    );
    // Labelled, but with no TrainJob as its controller.
    refused_by_the_policy(
        cms.create(
            &dry(),
            &configmap(json!({"metadata": {
                "name": "y-runtime-snapshot",
                "labels": {names::LABEL_RUNTIME_SNAPSHOT: "true"}
            }})),
        )
        .await,
        &format!("create of configmap {ns}/y-runtime-snapshot"),
    );
    // The fences' name anywhere but the release namespace.
    refused_by_the_policy(
        cms.create(&dry(), &configmap(json!({"metadata": {"name": FENCES}})))
            .await,
        &format!("create of configmap {ns}/{FENCES}"),
    );

    // The hold API CA's name anywhere but the release namespace.
    refused_by_the_policy(
        cms.create(
            &dry(),
            &configmap(json!({"metadata": {"name": HOLD_API_CA}})),
        )
        .await,
        &format!("create of configmap {ns}/{HOLD_API_CA}"),
    );

    // Someone else's ConfigMap: not deleted (nor is kube-system's own).
    Api::<ConfigMap>::namespaced(admin.clone(), &ns)
        .create(
            &PostParams::default(),
            &configmap(json!({"metadata": {"name": "someone-elses"}, "data": {"k": "v"}})),
        )
        .await
        .expect("admin creates a ConfigMap");
    refused_by_the_policy(
        cms.delete("someone-elses", &dry_delete()).await,
        &format!("delete of configmap {ns}/someone-elses"),
    );
    refused_by_the_policy(
        kube_system
            .delete("extension-apiserver-authentication", &dry_delete())
            .await,
        "delete of configmap kube-system/extension-apiserver-authentication",
    );
    // Not even one named like a snapshot, unlabelled and written by nobody's snapshot writer.
    Api::<ConfigMap>::namespaced(admin.clone(), &ns)
        .create(
            &PostParams::default(),
            &configmap(json!({"metadata": {"name": "z-runtime-snapshot"}})),
        )
        .await
        .expect("admin creates a ConfigMap");
    refused_by_the_policy(
        cms.delete("z-runtime-snapshot", &dry_delete()).await,
        &format!("delete of configmap {ns}/z-runtime-snapshot"),
    );
}

/// What the controller does write still goes through under the policy: the snapshot
/// reconciler takes a job's snapshot, removes an orphaned one (holdfast's, and one Kubeflow
/// Trainer wrote) so a new job of that name gets its own, and the hold API's fence is
/// recorded (created, then updated) in the release namespace. A snapshot that still has its
/// TrainJob is not the controller's to delete.
#[tokio::test]
async fn the_controllers_own_configmap_writes_pass_the_policy() {
    let cp = ControlPlane::shared();
    let ns = cp.namespace("cm-own").await.expect("namespace");
    let admin = cp.client(Identity::Admin).await.expect("admin");
    assert_eq!(
        controller_policy::register(cp, &ns).await,
        2,
        "the chart renders the policy and its binding"
    );
    let controller = cp.client(Identity::Controller).await.expect("controller");
    let runtime = format!("cm-own-{ns}");
    create_dynamic(
        &admin,
        &holdfast_cluster::resources::cluster_training_runtime(),
        None,
        cluster_training_runtime(&runtime, "pytorch/pytorch:2.10.0"),
    )
    .await;

    // The reconciler, in-process as the controller, scoped to the test's namespace.
    let readiness = Readiness::default();
    let config = Config {
        namespace: Some(ns.clone()),
        retry_min: Duration::from_millis(200),
        retry_max: Duration::from_secs(5),
        ..Config::default()
    };
    let snapshotter = Snapshotter::new(
        controller.clone(),
        config,
        SnapshotMetrics::default(),
        readiness.clone(),
        holdfast_tests::leader_parts::publisher(&controller, None),
    );
    let stop = CancellationToken::new();
    let feed = holdfast_tests::leader_parts::trainjob_feed(&controller, Some(&ns), &stop);
    let task = tokio::spawn({
        let stop = stop.clone();
        async move { snapshotter.run_on(feed, stop).await }
    });
    wait_for("the reconciler ready", MINUTE, || async {
        readiness.get().then_some(())
    })
    .await;

    let cms: Api<ConfigMap> = Api::namespaced(admin.clone(), &ns);
    let jobs: Api<DynamicObject> =
        Api::namespaced_with(admin.clone(), &ns, &holdfast_cluster::resources::trainjob());
    let owner = |cm: &ConfigMap| {
        cm.metadata
            .owner_references
            .as_ref()
            .and_then(|o| o.first())
            .map(|o| o.uid.clone())
    };
    let snapshot_of = |uid: Option<String>| {
        let cms = cms.clone();
        move || {
            let cms = cms.clone();
            let uid = uid.clone();
            async move {
                let cm = cms
                    .get_opt(&names::snapshot_name("job"))
                    .await
                    .expect("get")?;
                (owner(&cm) == uid).then_some(cm)
            }
        }
    };

    // A job snapshotted.
    let first = create_dynamic(
        &admin,
        &holdfast_cluster::resources::trainjob(),
        Some(&ns),
        trainjob("job", &runtime),
    )
    .await;
    let taken = wait_for(
        "the job's snapshot",
        MINUTE,
        snapshot_of(first.metadata.uid.clone()),
    )
    .await;
    // Its snapshot still has its TrainJob: not the controller's to delete.
    refused_by_the_policy(
        Api::<ConfigMap>::namespaced(controller.clone(), &ns)
            .delete(&names::snapshot_name("job"), &dry_delete())
            .await,
        &format!("delete of configmap {ns}/job-runtime-snapshot"),
    );

    // Orphaned (its TrainJob deleted with --cascade=orphan): removed, and the new job of that
    // name gets its own.
    jobs.delete(
        "job",
        &DeleteParams {
            propagation_policy: Some(PropagationPolicy::Orphan),
            ..Default::default()
        },
    )
    .await
    .expect("delete, orphaning its dependents");
    wait_for("the TrainJob gone", MINUTE, || async {
        jobs.get_opt("job")
            .await
            .expect("get")
            .is_none()
            .then_some(())
    })
    .await;
    let second = create_dynamic(
        &admin,
        &holdfast_cluster::resources::trainjob(),
        Some(&ns),
        trainjob("job", &runtime),
    )
    .await;
    let again = wait_for(
        "the new job's own snapshot",
        MINUTE,
        snapshot_of(second.metadata.uid.clone()),
    )
    .await;
    assert_ne!(again.metadata.uid, taken.metadata.uid, "a new snapshot");

    // An orphan Kubeflow Trainer wrote (field manager `trainer`, no holdfast label): removed
    // too; the policy reads the managed fields of the ConfigMap being deleted.
    cms.create(
        &PostParams {
            field_manager: Some("trainer".into()),
            ..Default::default()
        },
        &configmap(json!({
            "metadata": {"name": names::snapshot_name("tjob")},
            "data": {"runtime": "apiVersion: trainer.kubeflow.org/v1alpha1\n"}
        })),
    )
    .await
    .expect("a ConfigMap as Trainer writes it, orphaned");
    let orphan_uid = cms
        .get(&names::snapshot_name("tjob"))
        .await
        .expect("get")
        .metadata
        .uid;
    let third = create_dynamic(
        &admin,
        &holdfast_cluster::resources::trainjob(),
        Some(&ns),
        trainjob("tjob", &runtime),
    )
    .await;
    let uid = third.metadata.uid.clone();
    let own = wait_for(
        "tjob's own snapshot in place of Trainer's orphan",
        MINUTE,
        || async {
            let cm = cms
                .get_opt(&names::snapshot_name("tjob"))
                .await
                .expect("get")?;
            (owner(&cm) == uid).then_some(cm)
        },
    )
    .await;
    assert_ne!(own.metadata.uid, orphan_uid);

    // A fence recorded, as the hold API records it: created, then updated by a later one.
    let at = jiff::Timestamp::now();
    for (node, when) in [
        ("node-a", at),
        ("node-b", at + jiff::SignedDuration::from_secs(1)),
    ] {
        execution::record_fence(&controller, RELEASE_NAMESPACE, FENCES, node, when)
            .await
            .unwrap_or_else(|e| panic!("record the fence of {node}: {e}"));
    }
    let fences = Api::<ConfigMap>::namespaced(admin.clone(), RELEASE_NAMESPACE)
        .get(FENCES)
        .await
        .expect("the fences ConfigMap")
        .data
        .unwrap_or_default();
    assert!(
        fences.contains_key("node-a") && fences.contains_key("node-b"),
        "{fences:?}"
    );

    // The hold API's CA, published as the certificate reconcile does: created, then updated.
    let ca = hold_api_ca::Published {
        namespace: RELEASE_NAMESPACE.into(),
        name: HOLD_API_CA.into(),
    };
    for pem in ["first CA\n", "first CA\nsecond CA\n"] {
        hold_api_ca::publish(&controller, &ca, pem)
            .await
            .unwrap_or_else(|e| panic!("publish the hold API's CA: {e}"));
    }

    stop.cancel();
    let ended = tokio::time::timeout(Duration::from_secs(30), task)
        .await
        .expect("the reconciler stops within 30s")
        .expect("joined");
    assert!(ended.is_ok(), "the reconciler ended cleanly: {ended:?}");
}
