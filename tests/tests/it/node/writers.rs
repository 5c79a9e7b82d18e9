//! Trainer's and holdfast's snapshot writers on the node.

use super::*;

/// Restarts Trainer when dropped, if it is not running.
pub(super) struct TrainerBack(pub(super) &'static NodeCluster);

impl Drop for TrainerBack {
    fn drop(&mut self) {
        let restarted =
            self.0.with_process(
                "trainer",
                |p| {
                    if p.running() { Ok(()) } else { p.restart() }
                },
            );
        if let Some(Err(e)) = restarted {
            eprintln!("restarting Trainer: {e:#}");
        }
    }
}

/// Set `failurePolicy` on every webhook of Trainer's two webhook configurations (as the
/// harness registers them from its manifests).
pub(super) async fn trainer_webhooks_failure_policy(admin: &kube::Client, policy: &str) {
    use k8s_openapi::api::admissionregistration::v1::{
        MutatingWebhookConfiguration, ValidatingWebhookConfiguration,
    };
    let mutating: Api<MutatingWebhookConfiguration> = Api::all(admin.clone());
    let validating: Api<ValidatingWebhookConfiguration> = Api::all(admin.clone());
    let ops = |n: usize| {
        serde_json::from_value::<json_patch::Patch>(serde_json::Value::from(
            (0..n)
                .map(|i| {
                    serde_json::json!({"op": "replace", "path": format!("/webhooks/{i}/failurePolicy"), "value": policy})
                })
                .collect::<Vec<_>>(),
        ))
        .expect("patch")
    };
    let name = "defaulter.trainer.kubeflow.org";
    let n = mutating
        .get(name)
        .await
        .expect("Trainer's mutating webhooks")
        .webhooks
        .unwrap_or_default()
        .len();
    mutating
        .patch(name, &PatchParams::default(), &Patch::<()>::Json(ops(n)))
        .await
        .expect("patch");
    let name = "validator.trainer.kubeflow.org";
    let n = validating
        .get(name)
        .await
        .expect("Trainer's validating webhooks")
        .webhooks
        .unwrap_or_default()
        .len();
    validating
        .patch(name, &PatchParams::default(), &Patch::<()>::Json(ops(n)))
        .await
        .expect("patch");
}

/// Trainer's snapshot writer (v2.3.0) and holdfast's both run on the node (issue #15, item
/// 5). Trainer first (holdfast's controller scaled to 0): Trainer writes the snapshot and the
/// pod runs the runtime's image; the runtime is edited; holdfast's controller comes back and
/// accepts Trainer's snapshot unchanged; a resumed execution still runs the snapshot's image,
/// not the edited one. holdfast first (Trainer stopped): holdfast writes the snapshot; the
/// runtime is edited; Trainer comes back, reads holdfast's snapshot and runs its image, not
/// the edited one. The admission race (both writers stopped): the TrainJob is admitted, then
/// its runtime edited, then holdfast snapshots the edited version and flags it
/// (`RuntimeChangedSinceAdmission`); the pod runs exactly what the snapshot holds. While
/// Trainer is stopped its webhooks are set to `Ignore` (they would refuse every TrainJob and
/// runtime write), and restored after. Every snapshot read here, Trainer's or holdfast's, has
/// KEP-2599's structure and ownerReference ([`kep::assert_snapshot_structure`]).
#[tokio::test]
#[ignore = "tier 3: run with --ignored (builds and starts a real node)"]
async fn snapshot_writers_in_both_orders_and_the_admission_race_run_the_snapshots_image() {
    use k8s_openapi::api::apps::v1::Deployment;
    use k8s_openapi::api::core::v1::ConfigMap;

    let cluster = NodeCluster::shared();
    let release = ChartRelease::install(cluster, "hfs", "hfs-system", &["mode=plain"]).await;
    let admin = cluster.client(Identity::Admin).await.expect("client");
    let ns = cluster.namespace("node-snap").await.expect("namespace");
    let original = cluster.workload_image().to_owned();
    let edited = "localhost/holdfast/workload-edited:1";
    cluster.tag_image(&original, edited).expect("tag");

    let runtimes: Api<DynamicObject> = Api::namespaced_with(
        admin.clone(),
        &ns,
        &trainer_resource("TrainingRuntime", "trainingruntimes"),
    );
    let trainjobs: Api<DynamicObject> = Api::namespaced_with(
        admin.clone(),
        &ns,
        &holdfast_tests::objects::trainjob_resource(),
    );
    let pods: Api<Pod> = Api::namespaced(admin.clone(), &ns);
    let cms: Api<ConfigMap> = Api::namespaced(admin.clone(), &ns);
    let controller: Api<Deployment> = Api::namespaced(admin.clone(), "hfs-system");
    let controller_name = format!("{}-controller", release.fullname());
    for job in ["trainer-first", "holdfast-first", "race"] {
        let rt: DynamicObject =
            serde_json::from_value(training_runtime(job, &original)).expect("runtime");
        runtimes
            .create(&PostParams::default(), &rt)
            .await
            .expect("create runtime");
    }
    let create = |job: &'static str| {
        let trainjobs = trainjobs.clone();
        async move {
            let tj: DynamicObject = serde_json::from_value(serde_json::json!({
                "apiVersion": "trainer.kubeflow.org/v1alpha1", "kind": "TrainJob",
                "metadata": {"name": job},
                "spec": {"runtimeRef": {"name": job, "kind": "TrainingRuntime", "apiGroup": "trainer.kubeflow.org"}}
            }))
            .expect("trainjob");
            trainjobs
                .create(&PostParams::default(), &tj)
                .await
                .expect("create trainjob");
        }
    };
    let edit = |job: &'static str| {
        let runtimes = runtimes.clone();
        async move {
            let container =
                "/spec/template/spec/replicatedJobs/0/template/spec/template/spec/containers/0";
            let patch: json_patch::Patch = serde_json::from_value(serde_json::json!([
                {"op": "replace", "path": format!("{container}/image"), "value": edited},
                {"op": "replace", "path": format!("{container}/env/1/value"), "value": "edited"}
            ]))
            .expect("patch");
            runtimes
                .patch(job, &PatchParams::default(), &Patch::<()>::Json(patch))
                .await
                .expect("edit the runtime");
        }
    };
    // The snapshot once it exists: which image it holds, and who created it; whoever wrote
    // it, its structure and ownerReference are the KEP's.
    let snapshot = |job: &'static str| {
        let cms = cms.clone();
        let trainjobs = trainjobs.clone();
        async move {
            let cm = wait_for("the snapshot", Duration::from_secs(60), || async {
                cms.get_opt(&format!("{job}-runtime-snapshot"))
                    .await
                    .ok()
                    .flatten()
            })
            .await;
            let tj = trainjobs.get(job).await.expect("the TrainJob");
            kep::assert_snapshot_structure(&cm, &tj, job);
            let yaml = cm
                .data
                .as_ref()
                .and_then(|d| d.get("runtime"))
                .cloned()
                .expect("the runtime key");
            let creator = cm
                .metadata
                .managed_fields
                .as_ref()
                .and_then(|f| f.first())
                .and_then(|f| f.manager.clone())
                .unwrap_or_default();
            (
                yaml,
                creator,
                cm.metadata.resource_version.unwrap_or_default(),
            )
        }
    };
    // The image the job's running pod runs, and the runtime version its container reports
    // from inside (the workload logs its WORKLOAD_MARK: `runtime-<job>`, or `edited` after
    // the edit). containerd reports one name for content with two, so the pod's status
    // cannot tell the two tags apart; the pod's spec and the container's own log can.
    let running_image = |job: &'static str| {
        let pods = pods.clone();
        async move {
            let ps = next_execution(
                &pods,
                job,
                &[],
                "the job's pod Running",
                Duration::from_secs(120),
            )
            .await;
            let p = &ps[0];
            let image = p.spec.as_ref().expect("spec").containers[0]
                .image
                .clone()
                .expect("image");
            let config = config_of(&pods, p.metadata.name.as_deref().expect("name"), "node").await;
            let mark = if image == edited {
                "edited".to_owned()
            } else {
                format!("runtime-{job}")
            };
            assert_eq!(
                config["env"]["WORKLOAD_MARK"], mark,
                "the container runs the runtime version its image says: {config}"
            );
            (image, p.metadata.uid.clone().expect("uid"))
        }
    };
    let scale = |replicas: i32| {
        let controller = controller.clone();
        let controller_name = controller_name.clone();
        let pods = Api::<Pod>::namespaced(admin.clone(), "hfs-system");
        async move {
            controller
                .patch(
                    &controller_name,
                    &PatchParams::default(),
                    &Patch::Merge(serde_json::json!({"spec": {"replicas": replicas}})),
                )
                .await
                .expect("scale");
            wait_for("the controller scaled", Duration::from_secs(90), || async {
                let ps = pods
                    .list(&ListParams::default().labels(
                        "app.kubernetes.io/instance=hfs,app.kubernetes.io/component=controller",
                    ))
                    .await
                    .ok()?
                    .items;
                (ps.len() == replicas as usize && ps.iter().all(is_running)).then_some(())
            })
            .await;
        }
    };

    // Trainer first: holdfast's controller is down, Trainer writes the snapshot and runs it.
    scale(0).await;
    create("trainer-first").await;
    let (yaml, creator, version) = snapshot("trainer-first").await;
    assert_eq!(creator, "trainer", "Trainer wrote it");
    assert!(yaml.contains(&original), "{yaml}");
    let (image, first_pod) = running_image("trainer-first").await;
    assert_eq!(image, original);
    edit("trainer-first").await;

    // Trainer stops (its webhooks set to Ignore meanwhile). Should the test fail while it
    // is down, the guard starts it again for the tests after this one.
    cluster
        .with_process("trainer", |p| p.kill())
        .expect("trainer");
    let _trainer_back = TrainerBack(cluster);
    trainer_webhooks_failure_policy(&admin, "Ignore").await;

    // The admission race: both writers down; admitted against the original runtime, which
    // is then edited before any snapshot exists.
    create("race").await;
    let admitted = trainjobs.get("race").await.expect("race");
    assert!(
        admitted.metadata.annotations.as_ref().is_some_and(
            |a| a.contains_key(holdfast_core::names::ANN_ADMITTED_RUNTIME_RESOURCE_VERSION)
        ),
        "the webhook recorded the runtime it admitted against: {:?}",
        admitted.metadata.annotations
    );
    edit("race").await;

    // holdfast's controller back: Trainer's snapshot is kept as it is; the race job's
    // snapshot is of the edited runtime, and flagged.
    scale(2).await;
    let (_, creator, race_version) = snapshot("race").await;
    assert_eq!(
        creator, "holdfast",
        "holdfast wrote the race job's snapshot"
    );
    let (race_yaml, _, _) = snapshot("race").await;
    assert!(race_yaml.contains(edited), "{race_yaml}");
    let events: Api<k8s_openapi::api::events::v1::Event> = Api::namespaced(admin.clone(), &ns);
    wait_for(
        "the admission race flagged",
        Duration::from_secs(60),
        || async {
            events
                .list(&ListParams::default())
                .await
                .ok()?
                .items
                .into_iter()
                .find(|e| {
                    e.reason.as_deref() == Some("RuntimeChangedSinceAdmission")
                        && e.regarding.as_ref().and_then(|r| r.name.as_deref()) == Some("race")
                })
        },
    )
    .await;

    // holdfast first: Trainer is still down; holdfast writes the snapshot; then the edit.
    create("holdfast-first").await;
    let (yaml, creator, _) = snapshot("holdfast-first").await;
    assert_eq!(creator, "holdfast", "holdfast wrote it");
    assert!(yaml.contains(&original), "{yaml}");
    edit("holdfast-first").await;

    // Trainer back: it reads holdfast's snapshots and runs what they hold.
    cluster
        .with_process("trainer", |p| p.restart())
        .expect("trainer")
        .expect("restart");
    trainer_webhooks_failure_policy(&admin, "Fail").await;
    let (image, _) = running_image("holdfast-first").await;
    assert_eq!(image, original, "the snapshot's image, not the edited one");
    let (image, _) = running_image("race").await;
    assert_eq!(image, edited, "exactly the race job's snapshot");

    // Trainer's snapshot survived holdfast's controller unchanged, and a new execution of
    // its job still runs the snapshot's image.
    let (_, _, now) = snapshot("trainer-first").await;
    assert_eq!(now, version, "Trainer's snapshot was not rewritten");
    let pp = PatchParams::default();
    trainjobs
        .patch(
            "trainer-first",
            &pp,
            &Patch::Merge(serde_json::json!({"spec": {"suspend": true}})),
        )
        .await
        .expect("suspend");
    wait_for("the pod gone", Duration::from_secs(90), || async {
        running_pods(&pods, "trainer-first")
            .await
            .is_empty()
            .then_some(())
    })
    .await;
    trainjobs
        .patch(
            "trainer-first",
            &pp,
            &Patch::Merge(serde_json::json!({"spec": {"suspend": false}})),
        )
        .await
        .expect("resume");
    let (image, pod) = running_image("trainer-first").await;
    assert_ne!(pod, first_pod, "a new execution");
    assert_eq!(image, original, "the snapshot's image, not the edited one");
    let (_, _, now) = snapshot("race").await;
    assert_eq!(
        now, race_version,
        "the race job's snapshot was not rewritten"
    );

    for job in ["trainer-first", "holdfast-first", "race"] {
        trainjobs
            .delete(job, &DeleteParams::default())
            .await
            .expect("delete");
    }
    drop(release);
}
