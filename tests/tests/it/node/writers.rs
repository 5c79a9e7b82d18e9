//! Trainer's and holdfast's snapshot writers on the node.

use super::kep_fixture::{self, Config, EDITED_IMAGE, Installed, Jobs};
use super::*;
use k8s_openapi::api::core::v1::ConfigMap;

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
/// 5; KEP-2599's integration lines, issue #16), in plain mode and in kueue mode. Trainer first
/// (holdfast's controller scaled to 0): Trainer writes the snapshot; the runtime is edited;
/// holdfast's controller comes back and accepts Trainer's snapshot unchanged; a new execution
/// still runs the snapshot's configuration, not the edited one. holdfast first (Trainer
/// stopped): holdfast writes the snapshot; the runtime is edited; Trainer comes back, reads
/// holdfast's snapshot and runs it. The admission race, which is also holdfast's start-up
/// migration (both writers stopped): the TrainJob is created while no holdfast controller
/// runs, then its runtime edited, and it exists with no snapshot; holdfast's controller
/// starts, snapshots the edited version and flags it (`RuntimeChangedSinceAdmission`); the
/// pods run exactly what the snapshot holds. While Trainer is stopped its webhooks are set to
/// `Ignore` (they would refuse every TrainJob and runtime write), and restored after. Every
/// snapshot read here, Trainer's or holdfast's, has KEP-2599's structure and ownerReference
/// ([`kep_fixture::assert_snapshot_structure`]); "runs the configuration" is read from the JobSet's
/// template and the pods' spec and log ([`kep_fixture::Jobs::assert_runs`]).
#[tokio::test]
#[ignore = "tier 3: run with --ignored (builds and starts a real node)"]
async fn snapshot_writers_in_both_orders_and_the_admission_race_run_the_snapshots_image() {
    let cluster = NodeCluster::shared();
    let workload = cluster.workload_image().to_owned();
    cluster.tag_image(&workload, EDITED_IMAGE).expect("tag");
    for (release, mode) in [("hfs", WritersMode::Plain), ("hfsq", WritersMode::Kueue)] {
        let started = std::time::Instant::now();
        writers_in_one_mode(cluster, release, mode).await;
        eprintln!("the writers in {mode:?} mode took {:?}", started.elapsed());
    }
}

/// How the writers test's jobs start and start again, by mode.
#[derive(Clone, Copy, Debug, PartialEq)]
enum WritersMode {
    /// Unmanaged TrainJobs: each starts when Trainer reconciles it; a new execution is
    /// `spec.suspend` set and cleared.
    Plain,
    /// Managed, queued TrainJobs (LocalQueue `main`, whose ClusterQueue names the chart's
    /// AdmissionCheck): each starts once opened through the hold API and its Workload passes
    /// holdfast's start gate; a new execution is a hold and a release, readmitted through
    /// holdfast's readmission gate.
    Kueue,
}

impl WritersMode {
    /// A TrainJob's labels in this mode.
    fn labels(self, installed: &Installed) -> serde_json::Value {
        match self {
            WritersMode::Plain => installed.labels(serde_json::json!({})),
            WritersMode::Kueue => {
                installed.labels(serde_json::json!({"holdfast.dev/managed": "true"}))
            }
        }
    }

    /// Let `job`, whose runtime now runs `live_image`, start: in kueue mode, open it and wait
    /// for its Workload admitted past holdfast's start gate — the Workload Kueue built from
    /// the live runtime, which it replaces an earlier one with (README, "KEP-2599's test plan
    /// on the node"). In plain mode it starts by itself.
    async fn start(
        self,
        cluster: &NodeCluster,
        installed: &Installed,
        job: &str,
        live_image: &str,
    ) {
        if self == WritersMode::Kueue {
            installed.call(job, "open", None, "Opened").await;
            installed
                .admitted_workload(cluster, job, Some(live_image))
                .await;
        }
    }

    /// Stop `job`'s execution and start a new one: `spec.suspend` in plain mode, a hold and
    /// its release in kueue mode.
    async fn restart(self, cluster: &NodeCluster, installed: &Installed, job: &str) {
        let jobs = &installed.jobs;
        match self {
            WritersMode::Plain => {
                jobs.suspend(job, true).await;
                jobs.pods_gone(cluster, job).await;
                jobs.suspend(job, false).await;
            }
            WritersMode::Kueue => {
                installed.hold(cluster, job).await;
                installed.call(job, "release", Some(1), "Released").await;
            }
        }
    }
}

/// Scales the release's controller Deployment to `replicas` and waits until exactly that many
/// of its pods run.
async fn scale_controller(admin: &kube::Client, release: &ChartRelease, replicas: i32) {
    use k8s_openapi::api::apps::v1::Deployment;
    let ns = release.namespace();
    Api::<Deployment>::namespaced(admin.clone(), ns)
        .patch(
            &format!("{}-controller", release.fullname()),
            &PatchParams::default(),
            &Patch::Merge(serde_json::json!({"spec": {"replicas": replicas}})),
        )
        .await
        .expect("scale");
    let pods: Api<Pod> = Api::namespaced(admin.clone(), ns);
    wait_for("the controller scaled", Duration::from_secs(90), || async {
        let ps = controller_pods(&pods, release).await?;
        (ps.len() == replicas as usize && ps.iter().all(is_running)).then_some(())
    })
    .await;
}

/// The release's controller pods (every phase).
async fn controller_pods(pods: &Api<Pod>, release: &ChartRelease) -> Option<Vec<Pod>> {
    let labels = format!(
        "app.kubernetes.io/instance={},app.kubernetes.io/component=controller",
        release.name()
    );
    Some(
        pods.list(&ListParams::default().labels(&labels))
            .await
            .ok()?
            .items,
    )
}

/// Job `job`'s snapshot once it exists, checked for KEP-2599's structure and ownerReference
/// (its runtime has the job's name).
async fn snapshot_of(jobs: &Jobs, job: &str) -> ConfigMap {
    let cm = jobs.snapshot(job).await;
    let tj = jobs.trainjobs.get(job).await.expect("the TrainJob");
    kep_fixture::assert_snapshot_structure(&cm, &tj, job);
    cm
}

/// The writers test in one mode, with release `name` installed in that mode.
async fn writers_in_one_mode(cluster: &'static NodeCluster, name: &str, mode: WritersMode) {
    let installed = Installed::new(cluster, name, mode == WritersMode::Kueue, "node-snap").await;
    let jobs = &installed.jobs;
    let admin = cluster.client(Identity::Admin).await.expect("client");
    let original = |job: &str| Config::original(cluster, job);
    let workload = cluster.workload_image().to_owned();
    for job in ["trainer-first", "holdfast-first", "race"] {
        jobs.create_runtime(cluster, job).await;
    }
    let create = |job: &'static str| jobs.create_trainjob(job, job, mode.labels(&installed));

    // Trainer first: holdfast's controller is down, Trainer writes the snapshot. In plain
    // mode the job runs it; in kueue mode it waits at the start gate, which is holdfast's.
    scale_controller(&admin, &installed.release, 0).await;
    create("trainer-first").await;
    let trainer_first = snapshot_of(jobs, "trainer-first").await;
    assert_eq!(
        kep_fixture::creator(&trainer_first),
        "trainer",
        "Trainer wrote it"
    );
    assert!(
        kep_fixture::runtime_yaml(&trainer_first).contains(&workload),
        "{}",
        kep_fixture::runtime_yaml(&trainer_first)
    );
    let mut first = Vec::new();
    if mode == WritersMode::Plain {
        first = jobs
            .assert_runs("trainer-first", &[], &original("trainer-first"))
            .await;
    }
    jobs.edit_runtime("trainer-first").await;

    // Trainer stops (its webhooks set to Ignore meanwhile). Should the test fail while it
    // is down, the guard starts it again for the tests after this one.
    cluster
        .with_process("trainer", |p| p.kill())
        .expect("trainer");
    let _trainer_back = TrainerBack(cluster);
    trainer_webhooks_failure_policy(&admin, "Ignore").await;

    // The admission race, and holdfast's start-up migration: both writers down; the job is
    // admitted against the original runtime, which is then edited, and it exists with no
    // snapshot while no controller of holdfast's runs.
    let admitted = create("race").await;
    assert!(
        admitted.metadata.annotations.as_ref().is_some_and(
            |a| a.contains_key(holdfast_core::names::ANN_ADMITTED_RUNTIME_RESOURCE_VERSION)
        ),
        "the webhook recorded the runtime it admitted against: {:?}",
        admitted.metadata.annotations
    );
    jobs.edit_runtime("race").await;
    let controller_pods_now = controller_pods(
        &Api::namespaced(admin.clone(), installed.release.namespace()),
        &installed.release,
    )
    .await
    .expect("list the controller's pods");
    assert!(
        controller_pods_now.is_empty(),
        "no holdfast controller runs: {controller_pods_now:?}"
    );
    assert!(
        jobs.snapshots
            .get_opt("race-runtime-snapshot")
            .await
            .expect("get")
            .is_none(),
        "the race job exists without a snapshot"
    );

    // holdfast's controller starts: Trainer's snapshot is kept as it is; the race job is
    // migrated, its snapshot of the edited runtime, and flagged.
    scale_controller(&admin, &installed.release, 2).await;
    let race = snapshot_of(jobs, "race").await;
    assert_eq!(
        kep_fixture::creator(&race),
        "holdfast",
        "holdfast wrote the race job's snapshot"
    );
    assert!(
        kep_fixture::runtime_yaml(&race).contains(EDITED_IMAGE),
        "{}",
        kep_fixture::runtime_yaml(&race)
    );
    let events: Api<k8s_openapi::api::events::v1::Event> = Api::namespaced(admin.clone(), &jobs.ns);
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
    let holdfast_first = snapshot_of(jobs, "holdfast-first").await;
    assert_eq!(
        kep_fixture::creator(&holdfast_first),
        "holdfast",
        "holdfast wrote it"
    );
    assert!(
        kep_fixture::runtime_yaml(&holdfast_first).contains(&workload),
        "{}",
        kep_fixture::runtime_yaml(&holdfast_first)
    );
    jobs.edit_runtime("holdfast-first").await;
    for job in ["trainer-first", "holdfast-first", "race"] {
        mode.start(cluster, &installed, job, EDITED_IMAGE).await;
    }

    // Trainer back: it reads the snapshots, holdfast's and its own, and runs what they hold.
    cluster
        .with_process("trainer", |p| p.restart())
        .expect("trainer")
        .expect("restart");
    trainer_webhooks_failure_policy(&admin, "Fail").await;
    jobs.assert_runs("holdfast-first", &[], &original("holdfast-first"))
        .await;
    jobs.assert_runs("race", &[], &Config::edited()).await;
    if mode == WritersMode::Kueue {
        first = jobs
            .assert_runs("trainer-first", &[], &original("trainer-first"))
            .await;
    }

    // Trainer's snapshot survived holdfast's controller unchanged, and a new execution of
    // its job still runs the snapshot's configuration.
    let now = snapshot_of(jobs, "trainer-first").await;
    assert_eq!(
        now.metadata.resource_version, trainer_first.metadata.resource_version,
        "Trainer's snapshot was not rewritten"
    );
    mode.restart(cluster, &installed, "trainer-first").await;
    jobs.assert_runs("trainer-first", &first, &original("trainer-first"))
        .await;
    let now = snapshot_of(jobs, "race").await;
    assert_eq!(
        now.metadata.resource_version, race.metadata.resource_version,
        "the race job's snapshot was not rewritten"
    );

    for job in ["trainer-first", "holdfast-first", "race"] {
        jobs.delete(job).await;
    }
    installed.uninstall(cluster).await;
}
