//! The snapshot promises (SPEC "Snapshots", KEP-2599), each against the real apiserver and
//! garbage collector of the local control plane, with the reconciler running in-process as
//! holdfast's controller identity and scoped to the test's own namespace.
//!
//! Interoperability with Kubeflow Trainer v2.3.0 is checked against Trainer's own code: its
//! unexported snapshot reader and writer (`pkg/runtime/core/snapshot.go`), run by the small
//! Go program in `tests/cluster/trainer-snapshot`.

use futures::FutureExt;
use holdfast_controller::leader::{self, LeaderError, LeaderMetrics, LeaseConfig};
use holdfast_controller::snapshot::{
    Config, ReasonLabels, RuntimeLabels, RuntimeOrigin, SnapshotMetrics, Snapshotter, WriterLabels,
    resolve_runtime,
};
use holdfast_core::names;
use holdfast_core::snapshot::Writer;
use holdfast_serve::Readiness;
use holdfast_tests::described::{Described, note};
use holdfast_tests::objects::{create_dynamic, runtime_image, set_runtime_image};
use holdfast_tests::rbac;
use holdfast_tests::scene::Scene;
use holdfast_tests::wait::wait_for;
use holdfast_tests::{ControlPlane, Identity};
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::ConfigMap;
use k8s_openapi::api::events::v1::Event;
use kube::api::{Api, DeleteParams, DynamicObject, ListParams, Patch, PatchParams, PostParams};
use kube::core::{ApiResource, GroupVersionKind};
use serde_json::{Value, json};
use sha2::Digest;
use std::collections::BTreeMap;
use std::time::Duration;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

// ---------------------------------------------------------------------------------------
// The promises
// ---------------------------------------------------------------------------------------

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn snapshot_created_with_the_right_structure_and_owner_reference() {
    let Scene { cp, ns, admin } = Scene::new("snap-structure").await;
    let runtime = torch_runtime(&admin, &ns).await;
    let r = start(cp, &ns).await;
    let job = create_trainjob(&admin, &ns, "mnist", ctr_ref(&runtime), None).await;

    let cm = wait_snapshot(&admin, &ns, "mnist").await;
    let uid = job.metadata.uid.clone().expect("job uid");
    let owners = cm
        .metadata
        .owner_references
        .clone()
        .expect("ownerReferences");
    assert_eq!(owners.len(), 1, "{owners:?}");
    let o = &owners[0];
    assert_eq!(
        (
            o.api_version.as_str(),
            o.kind.as_str(),
            o.name.as_str(),
            o.uid.as_str()
        ),
        (
            "trainer.kubeflow.org/v1alpha1",
            "TrainJob",
            "mnist",
            uid.as_str()
        )
    );
    assert_eq!(
        (o.controller, o.block_owner_deletion),
        (Some(true), Some(true))
    );
    assert_eq!(cm.immutable, Some(true));
    let labels = cm.metadata.labels.clone().unwrap_or_default();
    assert_eq!(
        labels
            .get(names::LABEL_RUNTIME_SNAPSHOT)
            .map(String::as_str),
        Some("true")
    );

    // The provenance: what was copied, out of the YAML.
    let data = cm.data.clone().expect("data");
    assert_eq!(data.keys().collect::<Vec<_>>(), vec!["runtime"]);
    let yaml = &data["runtime"];
    let ann = cm.metadata.annotations.clone().unwrap_or_default();
    assert_eq!(
        ann.get(names::ANN_RUNTIME_UID),
        runtime.metadata.uid.as_ref()
    );
    assert_eq!(
        ann.get(names::ANN_RUNTIME_RESOURCE_VERSION),
        runtime.metadata.resource_version.as_ref()
    );
    assert_eq!(
        ann.get(names::ANN_RUNTIME_GENERATION).map(String::as_str),
        Some("1")
    );
    assert_eq!(
        ann.get(names::ANN_RUNTIME_SHA256),
        Some(&hex::encode(sha2::Sha256::digest(yaml.as_bytes())))
    );

    // The YAML: apiVersion, kind, metadata (name, labels, annotations less kubectl's
    // last-applied copy) and spec, nothing the server set.
    let parsed: Value = serde_saphyr::from_str(yaml).expect("the snapshot is YAML");
    let live = serde_json::to_value(&runtime).expect("json");
    assert_eq!(parsed["apiVersion"], "trainer.kubeflow.org/v1alpha1");
    assert_eq!(parsed["kind"], "ClusterTrainingRuntime");
    assert_eq!(parsed["metadata"]["name"], live["metadata"]["name"]);
    assert_eq!(parsed["metadata"]["labels"], live["metadata"]["labels"]);
    assert_eq!(
        parsed["metadata"]["annotations"],
        json!({"example.com/owner": "platform"})
    );
    assert_eq!(parsed["spec"], live["spec"]);
    let meta_keys: Vec<&String> = parsed["metadata"]
        .as_object()
        .expect("metadata")
        .keys()
        .collect();
    assert_eq!(meta_keys, vec!["annotations", "labels", "name"], "{yaml}");
    assert!(parsed.get("status").is_none());

    // One write, and the runtime was read from the watch, not per job.
    let audit = controller_requests(cp, &ns);
    let creates = requests(&audit, "create", "configmaps");
    assert_eq!(creates.len(), 1, "{creates:#?}");
    let runtime_gets: Vec<Value> =
        requests_all(cp, Identity::Controller, "get", "clustertrainingruntimes")
            .into_iter()
            .filter(|e| e["objectRef"]["name"] == live["metadata"]["name"])
            .collect();
    assert!(runtime_gets.is_empty(), "{runtime_gets:#?}");
    let managers: Vec<String> = cm
        .metadata
        .managed_fields
        .unwrap_or_default()
        .into_iter()
        .filter_map(|m| m.manager)
        .collect();
    assert_eq!(managers, vec!["holdfast"]);

    // `kubectl describe trainjob mnist` tells it: one Normal Event.
    let described = Described {
        kind: "TrainJob",
        namespace: &ns,
        name: "mnist",
        uid: &uid,
    };
    let taken = described.wait(&admin, "SnapshotTaken", |_| true).await;
    assert_eq!(taken.type_.as_deref(), Some("Normal"));
    assert!(
        note(&taken).contains("mnist-runtime-snapshot"),
        "{}",
        note(&taken)
    );
    r.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn readiness_is_true_only_while_the_watches_are_synced() {
    let cp = ControlPlane::shared();
    let ns = cp.namespace("snap-ready").await.expect("namespace");
    let r = start(cp, &ns).await;
    wait_for("readiness", Duration::from_secs(30), || async {
        r.readiness.get().then_some(())
    })
    .await;
    let readiness = r.readiness.clone();
    r.stop().await;
    assert!(!readiness.get(), "a stopped reconciler is not ready");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn updating_the_runtime_leaves_the_snapshot_and_the_resolved_runtime_unchanged() {
    let Scene { cp, ns, admin } = Scene::new("snap-update").await;
    let name = format!("torch-{ns}");
    let runtime = create_runtime(&admin, &name, "pytorch/pytorch:2.10.0").await;
    let r = start(cp, &ns).await;
    let job = create_trainjob(&admin, &ns, "stable", ctr_ref(&runtime), None).await;
    let before = wait_snapshot(&admin, &ns, "stable").await;
    let job_json = serde_json::to_value(&job).expect("json");
    let controller = cp.client(Identity::Controller).await.expect("client");
    let resolved_before = resolve_runtime(&controller, &job_json)
        .await
        .expect("resolve");
    assert!(resolved_before.from_snapshot(), "{resolved_before:?}");

    set_runtime_image(&admin, &name, "pytorch/pytorch:2.11.0").await;
    // The reconciler has seen the edit once the job shows as drifted.
    wait_for("the edit to be seen", Duration::from_secs(30), || async {
        let report = r.snapshotter.drift(None).await.ok()?;
        report
            .trainjobs
            .iter()
            .any(|d| d.trainjob == "stable")
            .then_some(())
    })
    .await;

    let after = snapshot_cm(&admin, &ns, "stable").await.expect("snapshot");
    assert_eq!(
        after.metadata.resource_version,
        before.metadata.resource_version
    );
    assert_eq!(after.data, before.data);
    let resolved_after = resolve_runtime(&controller, &job_json)
        .await
        .expect("resolve");
    assert_eq!(resolved_after, resolved_before);
    assert_eq!(
        runtime_image(&resolved_after.runtime),
        "pytorch/pytorch:2.10.0"
    );

    // A TrainJob created after the edit gets the edited runtime.
    create_trainjob(&admin, &ns, "later", ctr_ref(&runtime), None).await;
    let later = wait_snapshot(&admin, &ns, "later").await;
    let later_yaml: Value =
        serde_saphyr::from_str(&later.data.expect("data")["runtime"]).expect("yaml");
    assert_eq!(runtime_image(&later_yaml), "pytorch/pytorch:2.11.0");
    // Written once, never again.
    let writes: Vec<Value> = controller_requests(cp, &ns)
        .into_iter()
        .filter(|e| e["objectRef"]["name"] == "stable-runtime-snapshot" && is_write(e))
        .collect();
    assert_eq!(writes.len(), 1, "{writes:#?}");
    r.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn drifted_trainjobs_are_listed_and_counted() {
    let Scene { cp, ns, admin } = Scene::new("snap-drift").await;
    let name = format!("torch-{ns}");
    let runtime = create_runtime(&admin, &name, "pytorch/pytorch:2.10.0").await;
    let r = start(cp, &ns).await;
    for job in ["a", "b"] {
        create_trainjob(&admin, &ns, job, ctr_ref(&runtime), None).await;
        wait_snapshot(&admin, &ns, job).await;
    }
    let labels = RuntimeLabels {
        kind: "ClusterTrainingRuntime".into(),
        runtime: name.clone(),
    };
    wait_for("the gauge at 0", Duration::from_secs(30), || async {
        (r.metrics.drifted.get(&labels).map(|g| g.get()) == Some(0)).then_some(())
    })
    .await;

    set_runtime_image(&admin, &name, "pytorch/pytorch:2.11.0").await;
    wait_for("the gauge at 2", Duration::from_secs(30), || async {
        (r.metrics.drifted.get(&labels).map(|g| g.get()) == Some(2)).then_some(())
    })
    .await;
    // A job snapshotted after the edit is in sync.
    create_trainjob(&admin, &ns, "c", ctr_ref(&runtime), None).await;
    wait_snapshot(&admin, &ns, "c").await;

    // What GET /v1/drift answers (the hold API serves it, authenticated: see `api_drift_*`).
    let report: Value = wait_for("the listing", Duration::from_secs(30), || async {
        let v = serde_json::to_value(r.snapshotter.drift(None).await.ok()?).ok()?;
        (v["trainjobs"].as_array().map(Vec::len) == Some(2)).then_some(v)
    })
    .await;
    let listed: Vec<&str> = report["trainjobs"]
        .as_array()
        .expect("array")
        .iter()
        .map(|d| d["trainjob"].as_str().unwrap_or_default())
        .collect();
    assert_eq!(listed, vec!["a", "b"], "{report:#}");
    let first = &report["trainjobs"][0];
    assert_eq!(first["namespace"], ns.as_str());
    assert_eq!(
        first["runtime"],
        json!({"apiGroup": "trainer.kubeflow.org", "kind": "ClusterTrainingRuntime", "name": name})
    );
    assert_eq!(
        first["paths"],
        json!([
            "/spec/template/spec/replicatedJobs/0/template/spec/template/spec/containers/0/image"
        ]),
        "{report:#}"
    );
    assert_eq!(first["runtimeMissing"], false);
    // Asked about one namespace, it computes that namespace's jobs only.
    let own = r
        .snapshotter
        .drift(Some(&ns))
        .await
        .expect("drift of the namespace");
    assert_eq!(own.trainjobs.len(), 2, "{own:?}");
    let elsewhere = r
        .snapshotter
        .drift(Some("no-such-namespace"))
        .await
        .expect("drift of another namespace");
    assert!(elsewhere.trainjobs.is_empty(), "{elsewhere:?}");
    r.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deleting_the_runtime_leaves_the_snapshot() {
    let Scene { cp, ns, admin } = Scene::new("snap-delrt").await;
    let name = format!("torch-{ns}");
    let runtime = create_runtime(&admin, &name, "pytorch/pytorch:2.10.0").await;
    let r = start(cp, &ns).await;
    let job = create_trainjob(&admin, &ns, "orphan", ctr_ref(&runtime), None).await;
    let before = wait_snapshot(&admin, &ns, "orphan").await;

    Api::<DynamicObject>::all_with(admin.clone(), &ctr())
        .delete(&name, &DeleteParams::default())
        .await
        .expect("delete the runtime");
    let report = wait_for(
        "the runtime to be seen gone",
        Duration::from_secs(30),
        || async {
            let report = r.snapshotter.drift(None).await.ok()?;
            report
                .trainjobs
                .into_iter()
                .find(|d| d.trainjob == "orphan" && d.runtime_missing)
        },
    )
    .await;
    assert!(report.paths.is_empty());
    let after = snapshot_cm(&admin, &ns, "orphan")
        .await
        .expect("the snapshot stays");
    assert_eq!(
        after.metadata.resource_version,
        before.metadata.resource_version
    );
    let controller = cp.client(Identity::Controller).await.expect("client");
    let resolved = resolve_runtime(&controller, &serde_json::to_value(&job).expect("json"))
        .await
        .expect("resolved from the snapshot");
    assert!(resolved.from_snapshot());
    assert_eq!(runtime_image(&resolved.runtime), "pytorch/pytorch:2.10.0");
    r.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deleting_the_trainjob_garbage_collects_the_snapshot() {
    let Scene { cp, ns, admin } = Scene::new("snap-gc").await;
    let runtime = torch_runtime(&admin, &ns).await;
    let r = start(cp, &ns).await;
    create_trainjob(&admin, &ns, "short-lived", ctr_ref(&runtime), None).await;
    wait_snapshot(&admin, &ns, "short-lived").await;

    Api::<DynamicObject>::namespaced_with(admin.clone(), &ns, &tj())
        .delete("short-lived", &DeleteParams::background())
        .await
        .expect("delete the TrainJob");
    wait_for("the garbage collector", Duration::from_secs(90), || async {
        snapshot_cm(&admin, &ns, "short-lived")
            .await
            .is_none()
            .then_some(())
    })
    .await;
    // The collector deleted it, not holdfast.
    let deletes = requests(&controller_requests(cp, &ns), "delete", "configmaps");
    assert!(deletes.is_empty(), "{deletes:#?}");
    r.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_trainjob_recreated_under_the_same_name_gets_its_own_snapshot() {
    let Scene { cp, ns, admin } = Scene::new("snap-again").await;
    let name = format!("torch-{ns}");
    let runtime = create_runtime(&admin, &name, "pytorch/pytorch:2.10.0").await;
    let r = start(cp, &ns).await;
    create_trainjob(&admin, &ns, "again", ctr_ref(&runtime), None).await;
    wait_snapshot(&admin, &ns, "again").await;

    // Deleted and created again at once: the old snapshot may still be there, owned by
    // the old uid, until the garbage collector removes it.
    Api::<DynamicObject>::namespaced_with(admin.clone(), &ns, &tj())
        .delete("again", &DeleteParams::background())
        .await
        .expect("delete");
    wait_for(
        "the TrainJob to be gone",
        Duration::from_secs(30),
        || async {
            Api::<DynamicObject>::namespaced_with(admin.clone(), &ns, &tj())
                .get_opt("again")
                .await
                .expect("get")
                .is_none()
                .then_some(())
        },
    )
    .await;
    set_runtime_image(&admin, &name, "pytorch/pytorch:2.11.0").await;
    let second = create_trainjob(&admin, &ns, "again", ctr_ref(&runtime), None).await;
    let uid = second.metadata.uid.clone().expect("uid");
    let cm = wait_for(
        "the new TrainJob's own snapshot",
        Duration::from_secs(90),
        || async {
            let cm = snapshot_cm(&admin, &ns, "again").await?;
            let owner = cm.metadata.owner_references.as_ref()?.first()?.uid.clone();
            (owner == uid).then_some(cm)
        },
    )
    .await;
    let yaml: Value = serde_saphyr::from_str(&cm.data.expect("data")["runtime"]).expect("yaml");
    assert_eq!(runtime_image(&yaml), "pytorch/pytorch:2.11.0");
    assert!(
        warnings(&admin, &ns, "again").await.is_empty(),
        "an earlier incarnation's snapshot is not a squatter"
    );
    r.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn migration_of_pre_existing_trainjobs() {
    let Scene { cp, ns, admin } = Scene::new("snap-migrate").await;
    let runtime = torch_runtime(&admin, &ns).await;
    // TrainJobs from before holdfast ran: three unfinished, two finished.
    for job in ["old-1", "old-2", "old-3", "done", "broken"] {
        create_trainjob(&admin, &ns, job, ctr_ref(&runtime), None).await;
    }
    finish(&admin, &ns, "done", "Complete").await;
    finish(&admin, &ns, "broken", "Failed").await;

    let r = start(cp, &ns).await;
    for job in ["old-1", "old-2", "old-3"] {
        wait_snapshot(&admin, &ns, job).await;
    }
    tokio::time::sleep(Duration::from_secs(2)).await;
    for job in ["done", "broken"] {
        assert!(
            snapshot_cm(&admin, &ns, job).await.is_none(),
            "{job} finished: no snapshot"
        );
    }
    let creates = requests(&controller_requests(cp, &ns), "create", "configmaps");
    assert_eq!(creates.len(), 3, "{creates:#?}");
    r.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn finished_trainjobs_get_no_snapshot() {
    let Scene { cp, ns, admin } = Scene::new("snap-finished").await;
    let runtime = torch_runtime(&admin, &ns).await;
    create_trainjob(&admin, &ns, "completed", ctr_ref(&runtime), None).await;
    finish(&admin, &ns, "completed", "Complete").await;
    create_trainjob(&admin, &ns, "failed", ctr_ref(&runtime), None).await;
    finish(&admin, &ns, "failed", "Failed").await;
    let r = start(cp, &ns).await;
    // A job created now shows the reconciler has gone through the others.
    create_trainjob(&admin, &ns, "sentinel", ctr_ref(&runtime), None).await;
    wait_snapshot(&admin, &ns, "sentinel").await;
    tokio::time::sleep(Duration::from_secs(1)).await;
    for job in ["completed", "failed"] {
        assert!(
            snapshot_cm(&admin, &ns, job).await.is_none(),
            "{job}: no snapshot"
        );
    }
    r.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn squatted_name_is_refused_with_a_warning_event() {
    let Scene { cp, ns, admin } = Scene::new("snap-squat").await;
    let user = cp.client(Identity::User).await.expect("user");
    let runtime = torch_runtime(&admin, &ns).await;
    let squatter_cm = ConfigMap {
        metadata: kube::api::ObjectMeta {
            name: Some("mine-runtime-snapshot".into()),
            ..Default::default()
        },
        data: Some(BTreeMap::from([(
            "runtime".to_string(),
            "apiVersion: trainer.kubeflow.org/v1alpha1\nkind: ClusterTrainingRuntime\nmetadata:\n  name: evil\n"
                .to_string(),
        )])),
        ..Default::default()
    };
    let cms: Api<ConfigMap> = Api::namespaced(user, &ns);
    let squatted = cms
        .create(&PostParams::default(), &squatter_cm)
        .await
        .expect("alice takes the name first");
    create_trainjob(&admin, &ns, "mine", ctr_ref(&runtime), None).await;
    let r = start(cp, &ns).await;

    let event = wait_warning(&admin, &ns, "mine", "SnapshotNameTaken").await;
    let note = event.note.unwrap_or_default();
    assert!(
        note.contains("mine-runtime-snapshot") && note.contains("not controlled"),
        "{note}"
    );
    let now = snapshot_cm(&admin, &ns, "mine").await.expect("still there");
    assert_eq!(
        now.metadata.resource_version,
        squatted.metadata.resource_version
    );
    assert_eq!(now.data, squatted_cm_data(&squatter_cm));
    assert!(now.metadata.owner_references.is_none());
    // The controller did not so much as try to write it.
    let touched: Vec<Value> = controller_requests(cp, &ns)
        .into_iter()
        .filter(|e| e["objectRef"]["name"] == "mine-runtime-snapshot")
        .collect();
    assert!(touched.iter().all(|e| !is_write(e)), "{touched:#?}");
    assert_eq!(
        r.metrics
            .failures
            .get(&ReasonLabels {
                reason: "squatted".into()
            })
            .map(|c| c.get()),
        Some(1)
    );

    // Once the squatter's ConfigMap goes, the snapshot is taken.
    cms.delete("mine-runtime-snapshot", &DeleteParams::default())
        .await
        .expect("alice deletes it");
    let cm = wait_for(
        "the snapshot after the squatter left",
        Duration::from_secs(30),
        || async {
            let cm = snapshot_cm(&admin, &ns, "mine").await?;
            cm.metadata.owner_references.is_some().then_some(cm)
        },
    )
    .await;
    assert_eq!(cm.metadata.owner_references.expect("owner")[0].name, "mine");
    r.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn missing_runtime_is_retried_then_snapshotted_once_it_appears() {
    let Scene { cp, ns, admin } = Scene::new("snap-missing").await;
    let name = format!("later-{ns}");
    let r = start(cp, &ns).await;
    create_trainjob(&admin, &ns, "early", json!({"name": name}), None).await;

    let event = wait_warning(&admin, &ns, "early", "RuntimeNotFound").await;
    assert!(event.note.unwrap_or_default().contains(&name));
    // Retried with backoff: the runtime was looked for again, and nothing was written.
    wait_for("retries", Duration::from_secs(30), || async {
        let gets = requests_all(cp, Identity::Controller, "get", "clustertrainingruntimes")
            .into_iter()
            .filter(|e| e["objectRef"]["name"] == name.as_str())
            .count();
        (gets >= 3).then_some(())
    })
    .await;
    assert!(snapshot_cm(&admin, &ns, "early").await.is_none());
    let creates = requests(&controller_requests(cp, &ns), "create", "configmaps");
    assert!(creates.is_empty(), "{creates:#?}");

    create_runtime(&admin, &name, "pytorch/pytorch:2.10.0").await;
    let cm = wait_snapshot(&admin, &ns, "early").await;
    let yaml: Value = serde_saphyr::from_str(&cm.data.expect("data")["runtime"]).expect("yaml");
    assert_eq!(yaml["metadata"]["name"], name.as_str());
    r.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unknown_runtime_kind_is_snapshotted_via_discovery() {
    let cp = ControlPlane::shared();
    install_slurm_runtimes(cp).await;
    let ns = cp.namespace("snap-slurm").await.expect("namespace");
    let admin = admin(cp).await;
    let slurm = create_slurm_runtime(&admin, &ns, "gpu-partition").await;
    let r = start(cp, &ns).await;
    let job = create_trainjob(
        &admin,
        &ns,
        "on-slurm",
        json!({"apiGroup": "hpc.example.com", "kind": "SlurmRuntime", "name": "gpu-partition"}),
        None,
    )
    .await;
    let cm = wait_snapshot(&admin, &ns, "on-slurm").await;
    let yaml: Value = serde_saphyr::from_str(&cm.data.expect("data")["runtime"]).expect("yaml");
    let live = serde_json::to_value(&slurm).expect("json");
    assert_eq!(yaml["apiVersion"], "hpc.example.com/v1beta1");
    assert_eq!(yaml["kind"], "SlurmRuntime");
    assert_eq!(yaml["metadata"]["namespace"], ns.as_str());
    assert_eq!(yaml["spec"], live["spec"]);
    assert_eq!(
        yaml["launcher"], live["launcher"],
        "top-level fields beyond spec are kept"
    );

    // Trainer's own reader accepts it, as an object of a kind Trainer does not know.
    let read = trainer::run(cp, Identity::Trainer, &ns, "on-slurm", "read").await;
    assert!(read.get("error").is_none(), "{read:#}");
    assert_eq!(read["runtime"]["spec"], live["spec"]);
    let controller = cp.client(Identity::Controller).await.expect("client");
    let resolved = resolve_runtime(&controller, &serde_json::to_value(&job).expect("json"))
        .await
        .expect("resolve");
    assert!(resolved.from_snapshot());
    r.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_replicas_one_writer() {
    let Scene { cp, ns, admin } = Scene::new("snap-replicas").await;
    let runtime = torch_runtime(&admin, &ns).await;
    let jobs: Vec<String> = (1..=5).map(|i| format!("job-{i}")).collect();
    for job in &jobs {
        create_trainjob(&admin, &ns, job, ctr_ref(&runtime), None).await;
    }
    let lease = |id: &str| {
        LeaseConfig::new(&ns, "holdfast-controller", id).with_lease_duration(Duration::from_secs(6))
    };
    // Two replicas of the controller's ServiceAccount, each with a token of its own (as two
    // pods would have): the audit log tells them apart by the token's credential id.
    let second_token = cp
        .service_account_client(rbac::RELEASE_NAMESPACE, "holdfast-controller")
        .await
        .expect("a second token");
    let controller = cp.client(Identity::Controller).await.expect("client");
    let a = start_replica_with(controller, &ns, lease("replica-a"));
    let b = start_replica_with(second_token, &ns, lease("replica-b"));
    for job in &jobs {
        wait_snapshot(&admin, &ns, job).await;
    }
    tokio::time::sleep(Duration::from_secs(2)).await;
    let creates = creates_in(cp, &ns);
    assert_eq!(creates.len(), jobs.len(), "{creates:#?}");
    let writers: std::collections::BTreeSet<String> = creates.iter().map(credential).collect();
    assert_eq!(writers.len(), 1, "exactly one replica wrote: {writers:?}");
    assert!(
        writers.iter().all(|w| w.starts_with("JTI=")),
        "each create names its token: {writers:?}"
    );
    assert!(
        creates
            .iter()
            .all(|e| e["user"]["username"] == Identity::Controller.username()),
        "{creates:#?}"
    );
    let holder = lease_holder(&admin, &ns).await;
    let (leader, standby) = if holder == "replica-a" {
        (a, b)
    } else {
        (b, a)
    };

    // The leader dies without releasing the Lease: the standby takes over once it expires.
    leader.task.abort();
    create_trainjob(&admin, &ns, "after-failover", ctr_ref(&runtime), None).await;
    wait_snapshot(&admin, &ns, "after-failover").await;
    let creates = creates_in(cp, &ns);
    assert_eq!(creates.len(), jobs.len() + 1, "{creates:#?}");
    let last = creates.last().expect("a create");
    assert!(
        !writers.contains(&credential(last)),
        "the standby, with the other token, wrote after the failover: {last:#}"
    );
    assert_ne!(lease_holder(&admin, &ns).await, holder);
    standby.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn losing_the_lease_stops_the_reconciler() {
    let Scene { cp, ns, admin } = Scene::new("snap-lease").await;
    let runtime = torch_runtime(&admin, &ns).await;
    let lease = LeaseConfig::new(&ns, "holdfast-controller", "replica-a")
        .with_lease_duration(Duration::from_secs(6));
    let r = start_replica(cp, &ns, Identity::Controller, lease).await;
    create_trainjob(&admin, &ns, "before", ctr_ref(&runtime), None).await;
    wait_snapshot(&admin, &ns, "before").await;

    // Someone else takes the Lease.
    let leases: Api<Lease> = Api::namespaced(admin.clone(), &ns);
    let mut l = leases.get("holdfast-controller").await.expect("lease");
    if let Some(spec) = l.spec.as_mut() {
        spec.holder_identity = Some("intruder".into());
        spec.renew_time = Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime(
            k8s_openapi::jiff::Timestamp::now(),
        ));
    }
    l.metadata.managed_fields = None;
    leases
        .replace("holdfast-controller", &PostParams::default(), &l)
        .await
        .expect("take the lease");
    let outcome = tokio::time::timeout(Duration::from_secs(20), r.task)
        .await
        .expect("the reconciler stops")
        .expect("joined");
    assert!(
        matches!(
            outcome
                .as_ref()
                .map_err(|e| e.downcast_ref::<LeaderError>()),
            Err(Some(LeaderError::Lost { .. }))
        ),
        "{outcome:?}"
    );
    assert!(!r.readiness.get());
    create_trainjob(&admin, &ns, "after", ctr_ref(&runtime), None).await;
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert!(
        snapshot_cm(&admin, &ns, "after").await.is_none(),
        "no writes without the lease"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn trainer_written_snapshot_is_accepted() {
    let Scene { cp, ns, admin } = Scene::new("snap-trainer").await;
    let runtime = torch_runtime(&admin, &ns).await;
    let job = create_trainjob(&admin, &ns, "by-trainer", ctr_ref(&runtime), None).await;
    // Trainer v2.3.0's own createRuntimeSnapshot, as Trainer's service account.
    let wrote = trainer::run(cp, Identity::Trainer, &ns, "by-trainer", "write").await;
    assert!(wrote.get("error").is_none(), "{wrote:#}");
    let trainers = snapshot_cm(&admin, &ns, "by-trainer")
        .await
        .expect("Trainer's snapshot");
    let managers: Vec<String> = trainers
        .metadata
        .managed_fields
        .clone()
        .unwrap_or_default()
        .into_iter()
        .filter_map(|m| m.manager)
        .collect();
    assert_eq!(managers, vec!["trainer"]);

    let r = start(cp, &ns).await;
    let accepted = WriterLabels {
        writer: "trainer".into(),
    };
    wait_for("holdfast to accept it", Duration::from_secs(30), || async {
        (r.metrics.accepted.get(&accepted).map(|c| c.get()) == Some(1)).then_some(())
    })
    .await;
    let now = snapshot_cm(&admin, &ns, "by-trainer")
        .await
        .expect("still there");
    assert_eq!(
        now.metadata.resource_version,
        trainers.metadata.resource_version
    );
    let writes: Vec<Value> = controller_requests(cp, &ns)
        .into_iter()
        .filter(|e| e["objectRef"]["resource"] == "configmaps" && is_write(e))
        .collect();
    assert!(writes.is_empty(), "holdfast wrote: {writes:#?}");
    assert!(warnings(&admin, &ns, "by-trainer").await.is_empty());
    let job_uid = job.metadata.uid.clone().expect("uid");
    let described = Described {
        kind: "TrainJob",
        namespace: &ns,
        name: "by-trainer",
        uid: &job_uid,
    };
    let adopted = described.wait(&admin, "SnapshotAdopted", |_| true).await;
    assert!(
        note(&adopted).contains("written by Kubeflow Trainer"),
        "{}",
        note(&adopted)
    );
    assert!(
        described
            .with_reason(&admin, "SnapshotTaken")
            .await
            .is_empty(),
        "holdfast took no snapshot of its own"
    );
    let controller = cp.client(Identity::Controller).await.expect("client");
    let resolved = resolve_runtime(&controller, &serde_json::to_value(&job).expect("json"))
        .await
        .expect("resolve");
    assert!(
        matches!(
            resolved.origin,
            RuntimeOrigin::Snapshot {
                writer: Writer::Trainer,
                ..
            }
        ),
        "{:?}",
        resolved.origin
    );
    assert_eq!(runtime_image(&resolved.runtime), "pytorch/pytorch:2.10.0");
    r.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn snapshot_parsed_back_exactly_as_trainers_reader_does() {
    let cp = ControlPlane::shared();
    install_slurm_runtimes(cp).await;
    let ns = cp.namespace("snap-reader").await.expect("namespace");
    let admin = admin(cp).await;
    // Values a YAML 1.1 reader (Go's yaml.v2, under sigs.k8s.io/yaml) would mistake for
    // booleans, numbers, nulls or timestamps unless they are quoted; a multi-line script;
    // unicode; keys with colons.
    let tricky = json!([
        {"name": "YES", "value": "yes"}, {"name": "ON", "value": "on"},
        {"name": "OCTAL", "value": "0755"}, {"name": "FLOAT", "value": "1e3"},
        {"name": "NULL", "value": "null"}, {"name": "TILDE", "value": "~"},
        {"name": "DATE", "value": "2026-11-29"}, {"name": "EMPTY", "value": ""},
        {"name": "COLON", "value": "a: b"}, {"name": "UNICODE", "value": "ünïcødé ✓"},
        {"name": "SPACES", "value": "  padded  "}, {"name": "HASH", "value": "# not a comment"}
    ]);
    let name = format!("tricky-{ns}");
    let mut runtime = runtime_json(&name, "pytorch/pytorch:2.10.0");
    let container = &mut runtime["spec"]["template"]["spec"]["replicatedJobs"][0]["template"]["spec"]
        ["template"]["spec"]["containers"][0];
    container["env"] = tricky.clone();
    container["command"] = json!(["bash", "-c", "set -e\necho 'line two'\n\ttabbed: yes\n"]);
    runtime["metadata"]["labels"]["example.com/tier"] = json!("true");
    runtime["metadata"]["annotations"]["example.com/note"] = json!("key: value, 0x1F");
    let runtime = create_dynamic(&admin, &ctr(), None, runtime).await;
    create_slurm_runtime(&admin, &ns, "partition").await;
    let r = start(cp, &ns).await;
    create_trainjob(&admin, &ns, "typed", ctr_ref(&runtime), None).await;
    create_trainjob(
        &admin,
        &ns,
        "untyped",
        json!({"apiGroup": "hpc.example.com", "kind": "SlurmRuntime", "name": "partition"}),
        None,
    )
    .await;

    // Typed: Trainer decodes into its ClusterTrainingRuntime type; untyped: a kind Trainer
    // does not know, decoded into an Unstructured.
    for (job, resource, namespace) in [
        ("typed", ctr(), None),
        ("untyped", slurm(), Some(ns.as_str())),
    ] {
        let cm = wait_snapshot(&admin, &ns, job).await;
        let read = trainer::run(cp, Identity::Trainer, &ns, job, "read").await;
        assert!(
            read.get("error").is_none(),
            "Trainer's reader refused {job}: {read:#}"
        );
        let decoded = &read["runtime"];
        let live_name = cm_runtime_name(&cm);
        let live = match namespace {
            Some(ns) => Api::<DynamicObject>::namespaced_with(admin.clone(), ns, &resource),
            None => Api::<DynamicObject>::all_with(admin.clone(), &resource),
        }
        .get(&live_name)
        .await
        .expect("live runtime");
        let live = serde_json::to_value(&live).expect("json");
        // Compared with the live runtime decoded the same way (a typed round trip adds
        // empty objects and drops empty strings, on both sides alike).
        let trainer_live = if job == "typed" {
            read["live"].clone()
        } else {
            live.clone()
        };
        assert_eq!(
            decoded["spec"], trainer_live["spec"],
            "{job}: spec as Trainer reads it"
        );
        assert_eq!(decoded["metadata"]["name"], live["metadata"]["name"]);
        assert_eq!(decoded["metadata"]["labels"], live["metadata"]["labels"]);
        let mut annotations = live["metadata"]["annotations"].clone();
        if let Some(a) = annotations.as_object_mut() {
            a.remove("kubectl.kubernetes.io/last-applied-configuration");
        }
        assert_eq!(decoded["metadata"]["annotations"], annotations, "{job}");
        // And holdfast's reader, core::read_snapshot, reads the same thing.
        let job_obj = Api::<DynamicObject>::namespaced_with(admin.clone(), &ns, &tj())
            .get(job)
            .await
            .expect("job");
        let ours = holdfast_core::snapshot::read_snapshot(
            &serde_json::to_value(&cm).expect("json"),
            &serde_json::to_value(&job_obj).expect("json"),
        )
        .expect("holdfast's reader");
        assert_eq!(ours.runtime["spec"], live["spec"], "{job}");
    }
    r.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn admission_race_is_flagged() {
    let Scene { cp, ns, admin } = Scene::new("snap-race").await;
    let name = format!("torch-{ns}");
    let runtime = create_runtime(&admin, &name, "pytorch/pytorch:2.10.0").await;
    let admitted = runtime.metadata.resource_version.clone().expect("rv");
    let r = start(cp, &ns).await;
    // Admitted against the runtime as it was; edited before the first reconcile.
    let edited = set_runtime_image(&admin, &name, "pytorch/pytorch:2.11.0").await;
    let current = edited.metadata.resource_version.clone().expect("rv");
    create_trainjob(&admin, &ns, "raced", ctr_ref(&runtime), Some(&admitted)).await;
    create_trainjob(&admin, &ns, "in-step", ctr_ref(&runtime), Some(&current)).await;

    let event = wait_warning(&admin, &ns, "raced", "RuntimeChangedSinceAdmission").await;
    let note = event.note.unwrap_or_default();
    assert!(
        note.contains(&admitted) && note.contains(&current),
        "{note}"
    );
    assert_eq!(r.metrics.admission_races.get(), 1);
    let cm = wait_snapshot(&admin, &ns, "raced").await;
    let ann = cm.metadata.annotations.unwrap_or_default();
    assert_eq!(ann.get(names::ANN_RUNTIME_RESOURCE_VERSION), Some(&current));
    wait_snapshot(&admin, &ns, "in-step").await;
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert!(warnings(&admin, &ns, "in-step").await.is_empty());
    assert_eq!(r.metrics.admission_races.get(), 1);
    // The controller does not write the annotation itself.
    let patches: Vec<Value> = controller_requests(cp, &ns)
        .into_iter()
        .filter(|e| e["objectRef"]["resource"] == "trainjobs" && is_write(e))
        .collect();
    assert!(patches.is_empty(), "{patches:#?}");
    r.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn oversized_runtime_gets_a_clear_event() {
    let Scene { cp, ns, admin } = Scene::new("snap-large").await;
    let name = format!("huge-{ns}");
    let mut big = runtime_json(&name, "pytorch/pytorch:2.10.0");
    big["spec"]["template"]["spec"]["replicatedJobs"][0]["template"]["spec"]["template"]["spec"]
        ["containers"][0]["env"] = json!([{"name": "BLOB", "value": "x".repeat(1_100_000)}]);
    let runtime = create_dynamic(&admin, &ctr(), None, big).await;
    let r = start(cp, &ns).await;
    create_trainjob(&admin, &ns, "too-big", ctr_ref(&runtime), None).await;

    let event = wait_warning(&admin, &ns, "too-big", "SnapshotTooLarge").await;
    let note = event.note.clone().unwrap_or_default();
    assert!(note.contains("1048576") && note.contains("bytes"), "{note}");
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert!(snapshot_cm(&admin, &ns, "too-big").await.is_none());
    // No crash loop: the reconciler still runs, said it once, and tried no write.
    assert!(!r.task.is_finished());
    let events = warnings(&admin, &ns, "too-big").await;
    assert_eq!(events.len(), 1, "{events:#?}");
    assert!(
        events[0].series.is_none(),
        "reported once: {:?}",
        events[0].series
    );
    let creates = requests(&controller_requests(cp, &ns), "create", "configmaps");
    assert!(creates.is_empty(), "{creates:#?}");
    r.stop().await;
}

/// Seam (issue #12): a `runtimeRef` naming a kind such as `ConfigMap` or `Pod` made the
/// controller watch every object of that kind cluster-wide. Only runtime kinds (Trainer's two,
/// and those listed as `runtimes.extra`) are looked up at all: this one gets a Warning naming
/// what is a runtime, no snapshot, and no request about it beyond the event.
#[tokio::test]
async fn a_runtime_ref_to_a_kind_that_is_no_runtime_is_never_read_or_watched() {
    let Scene { cp, ns, admin } = Scene::new("snap-notruntime").await;
    let r = start(cp, &ns).await;
    for (job, group, kind) in [("pods", "", "Pod"), ("maps", "", "ConfigMap")] {
        create_trainjob(
            &admin,
            &ns,
            job,
            json!({"apiGroup": group, "kind": kind, "name": "anything"}),
            None,
        )
        .await;
        let event = wait_warning(&admin, &ns, job, "NotARuntimeKind").await;
        let note = event.note.clone().unwrap_or_default();
        assert!(
            note.contains("runtimes.extra") && note.contains("trainingruntimes"),
            "{note}"
        );
    }
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert!(snapshot_cm(&admin, &ns, "pods").await.is_none());
    // The reconciler never listed or watched pods of this namespace (a watch of the kind
    // would have been namespaced here: the reconciler is scoped to it).
    let events = cp.settled_audit_events().await.expect("audit");
    let pod_reads: Vec<&Value> = events
        .iter()
        .filter(|e| {
            e["user"]["username"] == Identity::Controller.username()
                && e["objectRef"]["resource"] == "pods"
                && e["objectRef"]["namespace"] == ns.as_str()
        })
        .collect();
    assert!(pod_reads.is_empty(), "{pod_reads:#?}");
    assert!(!r.task.is_finished());
    r.stop().await;
}

// ---------------------------------------------------------------------------------------
// Helpers
// ---------------------------------------------------------------------------------------

/// The SlurmRuntime kind, and read access to it for holdfast as the chart grants it when
/// asked (`runtimes.extra`).
async fn install_slurm_runtimes(cp: &ControlPlane) {
    cp.install_crds(SLURM_RUNTIME_CRD)
        .await
        .expect("install SlurmRuntime");
    let admin = cp.client(Identity::Admin).await.expect("admin");
    rbac::install_holdfast_rbac_with(
        &admin,
        "plain",
        &[
            "runtimes.extra[0].apiGroup=hpc.example.com",
            "runtimes.extra[0].resources={slurmruntimes}",
        ],
    )
    .await
    .expect("the chart's RBAC with runtimes.extra");
}

const SLURM_RUNTIME_CRD: &str = r#"
apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata:
  name: slurmruntimes.hpc.example.com
spec:
  group: hpc.example.com
  scope: Namespaced
  names: {kind: SlurmRuntime, plural: slurmruntimes, singular: slurmruntime, listKind: SlurmRuntimeList}
  versions:
  - name: v1beta1
    served: true
    storage: true
    schema:
      openAPIV3Schema:
        type: object
        x-kubernetes-preserve-unknown-fields: true
"#;

fn resource(group: &str, version: &str, kind: &str, plural: &str) -> ApiResource {
    ApiResource::from_gvk_with_plural(&GroupVersionKind::gvk(group, version, kind), plural)
}
fn ctr() -> ApiResource {
    holdfast_cluster::resources::cluster_training_runtime()
}
fn tj() -> ApiResource {
    holdfast_cluster::resources::trainjob()
}
fn slurm() -> ApiResource {
    resource(
        "hpc.example.com",
        "v1beta1",
        "SlurmRuntime",
        "slurmruntimes",
    )
}

/// The test's ClusterTrainingRuntime, `torch-{ns}`, at the usual image.
async fn torch_runtime(admin: &kube::Client, ns: &str) -> DynamicObject {
    create_runtime(admin, &format!("torch-{ns}"), "pytorch/pytorch:2.10.0").await
}

async fn admin(cp: &ControlPlane) -> kube::Client {
    cp.client(Identity::Admin).await.expect("admin client")
}

fn runtime_json(name: &str, image: &str) -> Value {
    json!({
        "apiVersion": "trainer.kubeflow.org/v1alpha1",
        "kind": "ClusterTrainingRuntime",
        "metadata": {
            "name": name,
            "labels": {"trainer.kubeflow.org/framework": "torch"},
            "annotations": {
                "example.com/owner": "platform",
                "kubectl.kubernetes.io/last-applied-configuration": "{\"stale\":\"copy\"}"
            }
        },
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

async fn create_runtime(client: &kube::Client, name: &str, image: &str) -> DynamicObject {
    create_dynamic(client, &ctr(), None, runtime_json(name, image)).await
}

async fn create_slurm_runtime(client: &kube::Client, ns: &str, name: &str) -> DynamicObject {
    create_dynamic(
        client,
        &slurm(),
        Some(ns),
        json!({
            "apiVersion": "hpc.example.com/v1beta1",
            "kind": "SlurmRuntime",
            "metadata": {"name": name, "labels": {"hpc.example.com/site": "eu-1"}},
            "spec": {
                "partition": "gpu",
                "nodes": 4,
                "exclusive": true,
                "gres": ["gpu:a100:8"],
                "sbatch": "#!/bin/bash\n#SBATCH --time=04:00:00\nsrun python train.py\n",
                "env": {"NCCL_DEBUG": "INFO", "FLAG": "no", "RATIO": "0.5"},
                "empty": {}
            },
            "launcher": {"image": "ghcr.io/example/slurm-launcher:1.2"}
        }),
    )
    .await
}

fn ctr_ref(runtime: &DynamicObject) -> Value {
    json!({"name": runtime.metadata.name})
}

async fn create_trainjob(
    client: &kube::Client,
    ns: &str,
    name: &str,
    runtime_ref: Value,
    admitted: Option<&str>,
) -> DynamicObject {
    let mut job = json!({
        "apiVersion": "trainer.kubeflow.org/v1alpha1",
        "kind": "TrainJob",
        "metadata": {"name": name},
        "spec": {"runtimeRef": runtime_ref}
    });
    if let Some(rv) = admitted {
        job["metadata"]["annotations"] =
            json!({ names::ANN_ADMITTED_RUNTIME_RESOURCE_VERSION: rv });
    }
    create_dynamic(client, &tj(), Some(ns), job).await
}

/// Marks a TrainJob finished (`Complete` or `Failed` true) through its status subresource.
async fn finish(client: &kube::Client, ns: &str, name: &str, condition: &str) {
    let status = json!({"status": {"conditions": [{
        "type": condition, "status": "True", "reason": "Test", "message": "set by the test",
        "lastTransitionTime": "2026-11-29T12:00:00Z"
    }]}});
    Api::<DynamicObject>::namespaced_with(client.clone(), ns, &tj())
        .patch_status(name, &PatchParams::default(), &Patch::Merge(&status))
        .await
        .expect("patch status");
}

fn squatted_cm_data(cm: &ConfigMap) -> Option<BTreeMap<String, String>> {
    cm.data.clone()
}

fn cm_runtime_name(cm: &ConfigMap) -> String {
    let yaml: Value = cm
        .data
        .as_ref()
        .and_then(|d| d.get("runtime"))
        .and_then(|y| serde_saphyr::from_str(y).ok())
        .unwrap_or_default();
    yaml["metadata"]["name"]
        .as_str()
        .unwrap_or_default()
        .to_owned()
}

/// A reconciler running in-process.
struct Running {
    snapshotter: Snapshotter,
    metrics: SnapshotMetrics,
    readiness: Readiness,
    stop: CancellationToken,
    task: JoinHandle<anyhow::Result<()>>,
}

impl Running {
    async fn stop(self) {
        self.stop.cancel();
        let outcome = tokio::time::timeout(Duration::from_secs(30), self.task)
            .await
            .expect("the reconciler stops within 30s")
            .expect("joined");
        outcome.expect("the reconciler ended cleanly");
    }
}

fn test_config(ns: &str) -> Config {
    Config {
        namespace: Some(ns.to_owned()),
        // The test-only SlurmRuntime kind is a runtime, as `runtimes.extra` makes it.
        runtime_resources: holdfast_core::snapshot::RuntimeResources::with_extra([
            "hpc.example.com/slurmruntimes",
        ])
        .expect("runtime resources"),
        retry_min: Duration::from_millis(200),
        retry_max: Duration::from_secs(5),
        drift_interval: Duration::from_secs(1),
        ..Config::default()
    }
}

/// Starts the reconciler as holdfast's controller, watching `ns`, and waits until ready.
async fn start(cp: &ControlPlane, ns: &str) -> Running {
    let client = cp
        .client(Identity::Controller)
        .await
        .expect("controller client");
    let metrics = SnapshotMetrics::default();
    let readiness = Readiness::default();
    let events = holdfast_tests::leader_parts::publisher(&client, None);
    let snapshotter = Snapshotter::new(
        client.clone(),
        test_config(ns),
        metrics.clone(),
        readiness.clone(),
        events,
    );
    let stop = CancellationToken::new();
    let feed = holdfast_tests::leader_parts::trainjob_feed(&client, Some(ns), &stop);
    let task = tokio::spawn({
        let s = snapshotter.clone();
        let stop = stop.clone();
        async move { Ok(s.run_on(feed, stop).await?) }
    });
    wait_for(
        "the reconciler to be ready",
        Duration::from_secs(30),
        || async { readiness.get().then_some(()) },
    )
    .await;
    Running {
        snapshotter,
        metrics,
        readiness,
        stop,
        task,
    }
}

/// Starts a replica under leader election (not waiting for leadership).
async fn start_replica(
    cp: &ControlPlane,
    ns: &str,
    identity: Identity,
    lease: LeaseConfig,
) -> Running {
    start_replica_with(cp.client(identity).await.expect("client"), ns, lease)
}

fn start_replica_with(client: kube::Client, ns: &str, lease: LeaseConfig) -> Running {
    let metrics = SnapshotMetrics::default();
    let readiness = Readiness::default();
    let mut config = test_config(ns);
    config.instance = Some(lease.identity.clone());
    let events = holdfast_tests::leader_parts::publisher(&client, config.instance.clone());
    let snapshotter = Snapshotter::new(
        client.clone(),
        config,
        metrics.clone(),
        readiness.clone(),
        events,
    );
    let stop = CancellationToken::new();
    // As the controller runs it: under the Lease, through the production path.
    let task = tokio::spawn({
        let s = snapshotter.clone();
        let stop = stop.clone();
        let (feed_client, ns) = (client.clone(), ns.to_owned());
        async move {
            let work = move |token: CancellationToken| async move {
                let feed =
                    holdfast_tests::leader_parts::trainjob_feed(&feed_client, Some(&ns), &token);
                s.run_on(feed, token).await
            };
            match leader::run_as_leader(client, lease, LeaderMetrics::default(), stop, work).await {
                Ok(None) => Ok(()),
                Ok(Some(result)) => Ok(result?),
                Err(lost) => Err(lost.into()),
            }
        }
    });
    Running {
        snapshotter,
        metrics,
        readiness,
        stop,
        task,
    }
}

async fn lease_holder(client: &kube::Client, ns: &str) -> String {
    Api::<Lease>::namespaced(client.clone(), ns)
        .get("holdfast-controller")
        .await
        .expect("lease")
        .spec
        .and_then(|s| s.holder_identity)
        .unwrap_or_default()
}

async fn snapshot_cm(client: &kube::Client, ns: &str, job: &str) -> Option<ConfigMap> {
    Api::<ConfigMap>::namespaced(client.clone(), ns)
        .get_opt(&names::snapshot_name(job))
        .await
        .expect("get ConfigMap")
}

async fn wait_snapshot(client: &kube::Client, ns: &str, job: &str) -> ConfigMap {
    wait_for(
        &format!("the snapshot of {job}"),
        Duration::from_secs(60),
        || snapshot_cm(client, ns, job),
    )
    .await
}

/// The Warning events on a TrainJob.
async fn warnings(client: &kube::Client, ns: &str, job: &str) -> Vec<Event> {
    Api::<Event>::namespaced(client.clone(), ns)
        .list(&ListParams::default())
        .await
        .expect("list events")
        .items
        .into_iter()
        .filter(|e| {
            e.type_.as_deref() == Some("Warning")
                && e.regarding.as_ref().and_then(|r| r.name.as_deref()) == Some(job)
        })
        .collect()
}

async fn wait_warning(client: &kube::Client, ns: &str, job: &str, reason: &str) -> Event {
    wait_for(
        &format!("a {reason} event on {job}"),
        Duration::from_secs(30),
        || async {
            warnings(client, ns, job)
                .await
                .into_iter()
                .find(|e| e.reason.as_deref() == Some(reason))
        },
    )
    .await
}

/// Requests by holdfast's controller identity in `ns`, from the apiserver's audit log.
fn controller_requests(cp: &ControlPlane, ns: &str) -> Vec<Value> {
    cp.audit_events()
        .expect("audit log")
        .into_iter()
        .filter(|e| {
            e["user"]["username"] == Identity::Controller.username()
                && e["objectRef"]["namespace"] == ns
        })
        .collect()
}

fn requests(events: &[Value], verb: &str, resource: &str) -> Vec<Value> {
    events
        .iter()
        .filter(|e| e["verb"] == verb && e["objectRef"]["resource"] == resource)
        .cloned()
        .collect()
}

fn requests_all(cp: &ControlPlane, identity: Identity, verb: &str, resource: &str) -> Vec<Value> {
    cp.audit_events()
        .expect("audit log")
        .into_iter()
        .filter(|e| {
            e["user"]["username"] == identity.username()
                && e["verb"] == verb
                && e["objectRef"]["resource"] == resource
        })
        .collect()
}

/// Successful ConfigMap creates in `ns`, by anyone, oldest first.
/// The credential a request was made with: a ServiceAccount token's id (`JTI=...`), as the
/// apiserver records it.
fn credential(event: &Value) -> String {
    event["user"]["extra"]["authentication.kubernetes.io/credential-id"][0]
        .as_str()
        .unwrap_or_default()
        .to_owned()
}

fn creates_in(cp: &ControlPlane, ns: &str) -> Vec<Value> {
    cp.audit_events()
        .expect("audit log")
        .into_iter()
        .filter(|e| {
            e["verb"] == "create"
                && e["objectRef"]["resource"] == "configmaps"
                && e["objectRef"]["namespace"] == ns
                && e["responseStatus"]["code"] == 201
        })
        .collect()
}

fn is_write(e: &Value) -> bool {
    matches!(
        e["verb"].as_str(),
        Some("create" | "update" | "patch" | "delete" | "deletecollection")
    )
}

/// Seam (issue #12): `kubectl delete trainjob --cascade=orphan` left a snapshot nobody could
/// delete (admin's delete refused too), and a new TrainJob of that name was wedged behind it.
/// The controller removes the orphan (it was holdfast's snapshot) and the new job gets its
/// own; an orphan is also deletable by whoever RBAC lets (it protects nothing).
#[tokio::test]
async fn an_orphaned_snapshot_is_removed_and_a_new_job_of_that_name_gets_its_own() {
    let cp = ControlPlane::shared();
    let ns = cp.namespace("snap-orphan").await.expect("namespace");
    let admin = cp.client(Identity::Admin).await.expect("admin");
    let runtime = create_runtime(&admin, &format!("orphan-{ns}"), "pytorch/pytorch:2.10.0").await;
    let r = start(cp, &ns).await;
    let first = create_trainjob(&admin, &ns, "job", ctr_ref(&runtime), None).await;
    let snapshot = wait_snapshot(&admin, &ns, "job").await;
    let owner = |cm: &ConfigMap| {
        cm.metadata
            .owner_references
            .as_ref()
            .and_then(|o| o.first())
            .map(|o| o.uid.clone())
    };
    assert_eq!(owner(&snapshot), first.metadata.uid);
    let jobs: Api<DynamicObject> = Api::namespaced_with(admin.clone(), &ns, &tj());
    jobs.delete(
        "job",
        &DeleteParams {
            propagation_policy: Some(kube::api::PropagationPolicy::Orphan),
            ..Default::default()
        },
    )
    .await
    .expect("delete, orphaning its dependents");
    wait_for("the TrainJob gone", Duration::from_secs(60), || async {
        jobs.get_opt("job")
            .await
            .expect("get")
            .is_none()
            .then_some(())
    })
    .await;
    let second = create_trainjob(&admin, &ns, "job", ctr_ref(&runtime), None).await;
    let taken = wait_for(
        "the new job's own snapshot",
        Duration::from_secs(60),
        || async {
            let cm = snapshot_cm(&admin, &ns, "job").await?;
            (owner(&cm) == second.metadata.uid).then_some(cm)
        },
    )
    .await;
    assert_ne!(taken.metadata.uid, snapshot.metadata.uid, "a new snapshot");
    assert_eq!(
        r.metrics
            .failures
            .get(&ReasonLabels {
                reason: "orphan_removed".into()
            })
            .map(|c| c.get()),
        Some(1)
    );
    r.stop().await;
}

/// Kubeflow Trainer v2.3.0's own snapshot code, built from `tests/cluster/trainer-snapshot`.
pub(crate) mod trainer {
    use super::*;
    use std::path::{Path, PathBuf};
    use std::sync::OnceLock;

    fn binary() -> PathBuf {
        static BIN: OnceLock<Result<PathBuf, String>> = OnceLock::new();
        let built = BIN.get_or_init(|| {
            let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("cluster/trainer-snapshot");
            let out = Path::new(env!("CARGO_TARGET_TMPDIR")).join("trainer-snapshot");
            let status = std::process::Command::new("go")
                .arg("build")
                .arg("-o")
                .arg(&out)
                .arg(".")
                .current_dir(&src)
                .status()
                .map_err(|e| format!("running go build in {}: {e}", src.display()))?;
            if status.success() {
                Ok(out)
            } else {
                Err(format!("go build in {} failed: {status}", src.display()))
            }
        });
        match built {
            Ok(p) => p.clone(),
            Err(e) => panic!("{e}"),
        }
    }

    /// Runs Trainer's reader (`read`) or writer (`write`) for a TrainJob, as `identity`.
    pub async fn run(
        cp: &ControlPlane,
        identity: Identity,
        ns: &str,
        job: &str,
        mode: &str,
    ) -> Value {
        let kubeconfig = cp.kubeconfig(identity);
        let (ns, job, mode) = (ns.to_owned(), job.to_owned(), mode.to_owned());
        let output = tokio::task::spawn_blocking(move || {
            std::process::Command::new(binary())
                .arg("-kubeconfig")
                .arg(kubeconfig)
                .args(["-namespace", &ns, "-trainjob", &job, &mode])
                .output()
        })
        .map(|r| r.expect("joined").expect("run trainer-snapshot"))
        .await;
        assert!(
            output.status.success(),
            "trainer-snapshot failed: {}",
            String::from_utf8_lossy(&output.stderr)
        );
        serde_json::from_slice(&output.stdout).expect("trainer-snapshot prints JSON")
    }
}

// ---------------------------------------------------------------------------------------
// Hostile or oversized input
// ---------------------------------------------------------------------------------------

/// A managed TrainJob (`holdfast.dev/managed: "true"`), created at its closed start gate.
async fn create_managed_trainjob(
    client: &kube::Client,
    ns: &str,
    name: &str,
    runtime_ref: Value,
) -> DynamicObject {
    let job = json!({
        "apiVersion": "trainer.kubeflow.org/v1alpha1",
        "kind": "TrainJob",
        "metadata": {"name": name, "labels": {names::LABEL_MANAGED: "true"}},
        "spec": {"runtimeRef": runtime_ref, "suspend": true}
    });
    create_dynamic(client, &tj(), Some(ns), job).await
}

/// The executor as the controller wires it: Open checks the job's snapshot first.
async fn gated_executor(cp: &ControlPlane) -> holdfast_controller::hold::HoldExecutor {
    holdfast_tests::hold_support::executor(cp)
        .await
        .with_snapshot_gate()
}

fn open_meta(within: Duration) -> holdfast_core::hold::CallMeta {
    holdfast_tests::hold_support::meta(None, within)
}

async fn job_json(admin: &kube::Client, ns: &str, name: &str) -> Value {
    serde_json::to_value(
        Api::<DynamicObject>::namespaced_with(admin.clone(), ns, &tj())
            .get(name)
            .await
            .expect("get TrainJob"),
    )
    .expect("json")
}

fn opened(job: &Value) -> bool {
    job.pointer("/metadata/annotations")
        .and_then(|a| a.get(names::ANN_OPENED))
        .is_some()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn open_refuses_a_managed_job_whose_runtime_is_too_large_to_snapshot() {
    let Scene { cp, ns, admin } = Scene::new("snap-open-large").await;
    let name = format!("huge-{ns}");
    let mut big = runtime_json(&name, "pytorch/pytorch:2.10.0");
    big["spec"]["template"]["spec"]["replicatedJobs"][0]["template"]["spec"]["template"]["spec"]
        ["containers"][0]["env"] = json!([{"name": "BLOB", "value": "x".repeat(1_100_000)}]);
    let runtime = create_dynamic(&admin, &ctr(), None, big).await;
    let r = start(cp, &ns).await;
    create_managed_trainjob(&admin, &ns, "too-big", ctr_ref(&runtime)).await;
    wait_warning(&admin, &ns, "too-big", "SnapshotTooLarge").await;

    let events = holdfast_controller::events::Publisher::start(
        cp.client(Identity::Controller).await.expect("client"),
        holdfast_controller::events::PublisherConfig::default(),
        holdfast_controller::events::EventMetrics::default(),
    );
    let exec = gated_executor(cp).await.with_events(events);
    let started = std::time::Instant::now();
    let answer = exec
        .open(&ns, "too-big", open_meta(Duration::from_secs(20)))
        .await;
    let Err(holdfast_core::hold::HoldError::Unsupported { reason }) = &answer else {
        panic!("Open must not open a managed job without a snapshot: {answer:?}");
    };
    assert!(
        reason.contains("SnapshotTooLarge")
            && reason.contains("1048576")
            && reason.contains("live runtime"),
        "{reason}"
    );
    assert!(
        started.elapsed() < Duration::from_secs(10),
        "refused at once, not at the deadline: {:?}",
        started.elapsed()
    );
    let job = job_json(&admin, &ns, "too-big").await;
    assert_eq!(job["spec"]["suspend"], true, "still at its start gate");
    assert!(!opened(&job), "no opened mark: {job:#}");
    assert_eq!(exec.metrics().opens_without_snapshot("too_large"), 1);
    assert!(snapshot_cm(&admin, &ns, "too-big").await.is_none());
    let event = wait_warning(&admin, &ns, "too-big", "OpenRefused").await;
    let note = event.note.unwrap_or_default();
    assert!(
        note.contains("Unsupported") && note.contains("SnapshotTooLarge"),
        "{note}"
    );
    // Status says what blocks the start too.
    let status = exec.status(&ns, "too-big").await.expect("status");
    let blocked = status.start_blocked.clone().unwrap_or_default();
    assert!(
        blocked.contains("SnapshotTooLarge") && blocked.contains("make the runtime fit"),
        "{status:?}"
    );
    assert!(
        status.body()["startBlocked"]
            .as_str()
            .is_some_and(|s| s == blocked)
    );
    r.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn open_of_a_job_whose_snapshot_is_not_written_yet_fails_and_a_later_open_succeeds() {
    let Scene { cp, ns, admin } = Scene::new("snap-open-later").await;
    let runtime = torch_runtime(&admin, &ns).await;
    create_managed_trainjob(&admin, &ns, "mnist", ctr_ref(&runtime)).await;
    let exec = gated_executor(cp).await;

    // No reconciler yet: the snapshot is a moment behind. Open waits for it within its
    // deadline, then fails saying so, having written nothing. The deadline leaves a loaded
    // apiserver time to answer the preflight and the reads before the first wait (2 s ran
    // out in the TrainJob's GET); a deadline met after it still names the snapshot.
    let answer = exec
        .open(&ns, "mnist", open_meta(Duration::from_secs(15)))
        .await;
    let Err(error) = &answer else {
        panic!("Open must wait for the snapshot: {answer:?}");
    };
    assert_eq!(
        error.cause(),
        Some(holdfast_core::hold::RejectCause::DeadlinePassed),
        "{error:?}"
    );
    assert!(
        error.body().message.contains("no runtime snapshot yet"),
        "{error:?}"
    );
    let job = job_json(&admin, &ns, "mnist").await;
    assert_eq!(job["spec"]["suspend"], true);
    assert!(!opened(&job));
    assert_eq!(exec.metrics().opens_without_snapshot("pending"), 1);
    let status = exec.status(&ns, "mnist").await.expect("status");
    assert!(
        status
            .start_blocked
            .as_deref()
            .is_some_and(|b| b.contains("no runtime snapshot yet")),
        "{status:?}"
    );

    // The reconciler catches up: a later Open opens it, from its snapshot.
    let r = start(cp, &ns).await;
    let opening = exec.open(&ns, "mnist", open_meta(Duration::from_secs(30)));
    let answer = opening.await;
    assert_eq!(
        answer,
        Ok(holdfast_core::hold::Outcome::Opened { started: true })
    );
    assert!(snapshot_cm(&admin, &ns, "mnist").await.is_some());
    let status = exec.status(&ns, "mnist").await.expect("status");
    assert_eq!(status.start_blocked, None, "{status:?}");
    r.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_runtime_nested_deeper_than_a_snapshot_may_be_read_gets_a_warning_once() {
    let cp = ControlPlane::shared();
    install_slurm_runtimes(cp).await;
    let ns = cp.namespace("snap-deep").await.expect("namespace");
    let admin = admin(cp).await;
    // 100 levels: past what a snapshot may hold (64), within what the apiserver and the
    // controller's JSON decoding accept.
    let mut deep = json!("bottom");
    for _ in 0..100 {
        deep = json!({ "x": deep });
    }
    create_dynamic(
        &admin,
        &slurm(),
        Some(&ns),
        json!({
            "apiVersion": "hpc.example.com/v1beta1",
            "kind": "SlurmRuntime",
            "metadata": {"name": "deep"},
            "spec": {"partition": "gpu", "deep": deep},
        }),
    )
    .await;
    let r = start(cp, &ns).await;
    create_trainjob(
        &admin,
        &ns,
        "on-deep",
        json!({"apiGroup": "hpc.example.com", "kind": "SlurmRuntime", "name": "deep"}),
        None,
    )
    .await;
    let event = wait_warning(&admin, &ns, "on-deep", "SnapshotTooDeep").await;
    let note = event.note.clone().unwrap_or_default();
    assert!(note.contains("64 levels"), "{note}");
    assert!(note.len() < 1024, "a bounded note: {note}");
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert!(snapshot_cm(&admin, &ns, "on-deep").await.is_none());
    // Said once, not retried in a loop.
    let events = warnings(&admin, &ns, "on-deep").await;
    assert_eq!(events.len(), 1, "{events:#?}");
    assert!(events[0].series.is_none(), "{:?}", events[0].series);
    assert!(!r.task.is_finished());
    r.stop().await;
}

/// A billion laughs: `levels` anchors, each a sequence of `fan` aliases of the one before.
fn alias_bomb(levels: usize, fan: usize) -> String {
    let mut yaml = String::from("a0: &a0 [\"lol\"]\n");
    for level in 1..=levels {
        let refs = vec![format!("*a{}", level - 1); fan].join(", ");
        yaml.push_str(&format!("a{level}: &a{level} [{refs}]\n"));
    }
    yaml
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn eight_alias_bombs_in_snapshot_named_configmaps_leave_the_controller_leading_and_ready() {
    let Scene { cp, ns, admin } = Scene::new("snap-bombs").await;
    let runtime = torch_runtime(&admin, &ns).await;
    // Planted where the webhook did not see them: each controlled by its TrainJob, as a
    // snapshot Trainer wrote would be, so the controller reads it in full.
    let jobs: Vec<String> = (1..=8).map(|i| format!("bombed-{i}")).collect();
    let cms: Api<ConfigMap> = Api::namespaced(admin.clone(), &ns);
    for job in &jobs {
        let created = create_trainjob(&admin, &ns, job, ctr_ref(&runtime), None).await;
        let bomb: ConfigMap = serde_json::from_value(json!({
            "metadata": {
                "name": names::snapshot_name(job),
                "ownerReferences": [{
                    "apiVersion": "trainer.kubeflow.org/v1alpha1", "kind": "TrainJob",
                    "name": job, "uid": created.metadata.uid, "controller": true
                }]
            },
            "data": {"runtime": alias_bomb(9, 9)}
        }))
        .expect("configmap");
        cms.create(&PostParams::default(), &bomb)
            .await
            .expect("plant the bomb");
    }
    let lease = LeaseConfig::new(&ns, "holdfast-controller", "replica-a")
        .with_lease_duration(Duration::from_secs(6));
    let r = start_replica(cp, &ns, Identity::Controller, lease).await;
    for job in &jobs {
        let event = wait_warning(&admin, &ns, job, "SnapshotInvalid").await;
        let note = event.note.unwrap_or_default();
        assert!(note.contains("alias"), "{note}");
        assert!(note.len() < 2048, "a bounded note: {note}");
    }
    // Still leading, still ready, a Lease renewal later.
    tokio::time::sleep(Duration::from_secs(8)).await;
    assert!(!r.task.is_finished(), "the replica still runs");
    assert_eq!(lease_holder(&admin, &ns).await, "replica-a");
    assert!(r.readiness.get(), "still ready");
    r.stop().await;
}

/// 300 levels: past serde_json's 128, so the controller cannot even decode the runtime (nor
/// list its kind). It says so on the TrainJob, bounded, and retries with backoff.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_runtime_nested_300_levels_deep_gets_a_warning_naming_why() {
    let cp = ControlPlane::shared();
    install_slurm_runtimes(cp).await;
    let ns = cp.namespace("snap-deeper").await.expect("namespace");
    let admin = admin(cp).await;
    let mut deep = json!("bottom");
    for _ in 0..300 {
        deep = json!({ "x": deep });
    }
    // The apiserver stores it; the test's own client cannot decode the answer either.
    let object: DynamicObject = serde_json::from_value(json!({
        "apiVersion": "hpc.example.com/v1beta1",
        "kind": "SlurmRuntime",
        "metadata": {"name": "deeper"},
        "spec": {"partition": "gpu", "deep": deep},
    }))
    .expect("object");
    match Api::<DynamicObject>::namespaced_with(admin.clone(), &ns, &slurm())
        .create(&PostParams::default(), &object)
        .await
    {
        Ok(_) | Err(kube::Error::SerdeError(_)) => {}
        Err(e) => panic!("create: {e}"),
    }
    let r = start(cp, &ns).await;
    create_trainjob(
        &admin,
        &ns,
        "on-deeper",
        json!({"apiGroup": "hpc.example.com", "kind": "SlurmRuntime", "name": "deeper"}),
        None,
    )
    .await;
    let event = wait_for(
        "a RuntimeUnreadable Warning",
        Duration::from_secs(90),
        || async {
            warnings(&admin, &ns, "on-deeper")
                .await
                .into_iter()
                .find(|e| e.reason.as_deref() == Some("RuntimeUnreadable"))
        },
    )
    .await;
    let note = event.note.clone().unwrap_or_default();
    assert!(
        note.contains("recursion limit") && note.contains("128 levels"),
        "{note}"
    );
    assert!(note.len() < 1024, "a bounded note: {note}");
    assert!(!note.contains("bottom"), "no object quoted: {note}");
    assert!(snapshot_cm(&admin, &ns, "on-deeper").await.is_none());
    assert!(!r.task.is_finished());
    r.stop().await;
}
