//! KEP-2599's own test plan (issue #16), run on the real node with holdfast installed by its
//! chart: each test is named after the KEP line it runs.

use super::kep_fixture::{Config, EDITED_IMAGE, Installed, Jobs, creator, runtime_yaml};
use super::snapshot_edit_is_refused;
use holdfast_tests::Identity;
use holdfast_tests::kueue;
use holdfast_tests::node::{NodeCluster, TrainerRelease};
use holdfast_tests::wait::wait_for;
use k8s_openapi::api::core::v1::{ConfigMap, Pod};
use kube::api::{Api, DynamicObject, ListParams, Patch, PatchParams};
use serde_json::json;
use std::time::Duration;

/// The KEP's e2e flow with holdfast's hold as the pause: a managed TrainJob is opened, runs,
/// is held (its pods gone), its runtime updated, released; the new execution runs the
/// original configuration.
async fn paused_by_a_hold_keeps_the_original(cluster: &NodeCluster, installed: &Installed) {
    installed.jobs.create_runtime(cluster, "held").await;
    let first = installed.start(cluster, "held", "held").await;
    installed.hold(cluster, "held").await;
    installed.jobs.edit_runtime("held").await;
    installed.call("held", "release", Some(1), "Released").await;
    installed
        .jobs
        .assert_runs("held", &first, &Config::original(cluster, "held"))
        .await;
    installed.jobs.delete("held").await;
}

/// Priority classes for the preemption case (cluster-scoped; applied, so a rerun finds them).
async fn priority_classes(admin: &kube::Client) {
    let api: Api<DynamicObject> = Api::all_with(
        admin.clone(),
        &holdfast_cluster::resources::kueue("WorkloadPriorityClass", "workloadpriorityclasses"),
    );
    for (name, value) in [("kep-low", 10), ("kep-high", 1000)] {
        let obj = json!({"apiVersion": kueue::KUEUE_API_VERSION, "kind": "WorkloadPriorityClass",
            "metadata": {"name": name}, "value": value});
        api.patch(
            name,
            &PatchParams::apply("holdfast-tests").force(),
            &Patch::Apply(&obj),
        )
        .await
        .expect("WorkloadPriorityClass");
    }
}

/// KEP-2599, e2e: "updating TrainingRuntime does not affect a paused TrainJob: create runtime
/// + train job, allow train job to start, pause train job, update the runtime, restart the
/// train job. TrainJob should use the original configuration." The update changes image,
/// command, env and numNodes; the check reads the new pods' image, command and env (spec and
/// the container's own log) and the JobSet's template. Plain mode: paused by holdfast's hold
/// (through the hold API's Service). Kueue mode: paused by a hold, and separately by Kueue's
/// own preemption (a higher-priority TrainJob in the same ClusterQueue, whose quota fits one).
#[tokio::test]
#[ignore = "tier 3: run with --ignored (builds and starts a real node)"]
async fn e2e_updating_a_training_runtime_does_not_affect_a_paused_trainjob() {
    let cluster = NodeCluster::shared();
    let admin = cluster.client(Identity::Admin).await.expect("client");
    let workload = cluster.workload_image().to_owned();
    cluster.tag_image(&workload, EDITED_IMAGE).expect("tag");

    // Plain mode: a hold.
    let plain = Installed::new(cluster, "kep", false, "kep-e2e-plain").await;
    paused_by_a_hold_keeps_the_original(cluster, &plain).await;
    plain.uninstall(cluster).await;

    // Kueue mode: a hold, then Kueue's preemption.
    let installed = Installed::new(cluster, "kepq", true, "kep-e2e-kueue").await;
    paused_by_a_hold_keeps_the_original(cluster, &installed).await;
    let jobs = &installed.jobs;
    let cq = installed.cluster_queue.clone().expect("kueue mode");

    // Preemption: the ClusterQueue's CPU (25m) fits the running job (10m) or the
    // higher-priority one (two nodes, 20m), not both: Kueue preempts the running one.
    // Unmanaged jobs: no start gate; the readmission gate still applies. Kueue computes a
    // TrainJob's pod sets from the live runtime, so the preempted job, readmitted after its
    // runtime's update, may ask for 20m: the quota fits that too.
    priority_classes(&admin).await;
    let cqs: Api<DynamicObject> =
        Api::all_with(admin.clone(), &holdfast_cluster::resources::cluster_queue());
    cqs.patch(
        &cq,
        &PatchParams::default(),
        &Patch::Merge(json!({"spec": {
            "preemption": {"withinClusterQueue": "LowerPriority"},
            "resourceGroups": [{
                "coveredResources": ["cpu", "memory"],
                "flavors": [{"name": format!("flavor-{}", jobs.ns), "resources": [
                    {"name": "cpu", "nominalQuota": "25m"},
                    {"name": "memory", "nominalQuota": "1000Gi"}
                ]}]
            }]
        }})),
    )
    .await
    .expect("a small quota with preemption");
    for rt in ["preempted", "preemptor"] {
        jobs.create_runtime(cluster, rt).await;
    }
    // The preemptor runs the updated configuration: two nodes.
    jobs.edit_runtime("preemptor").await;
    let with_priority = |class: &str| json!({"kueue.x-k8s.io/queue-name": "main", "kueue.x-k8s.io/priority-class": class});
    jobs.create_trainjob("preempted", "preempted", with_priority("kep-low"))
        .await;
    let original = Config::original(cluster, "preempted");
    let first = jobs.assert_runs("preempted", &[], &original).await;
    jobs.create_trainjob("preemptor", "preemptor", with_priority("kep-high"))
        .await;
    wait_for(
        "Kueue suspends the preempted TrainJob",
        Duration::from_secs(90),
        || async {
            let tj = jobs.trainjobs.get("preempted").await.ok()?;
            (tj.data["spec"]["suspend"] == true).then_some(())
        },
    )
    .await;
    jobs.pods_gone(cluster, "preempted").await;
    jobs.execution("preemptor", &[]).await;
    jobs.edit_runtime("preempted").await;
    // The preemptor done: its quota frees, Kueue readmits the preempted job.
    jobs.delete("preemptor").await;
    jobs.assert_runs("preempted", &first, &original).await;
    jobs.delete("preempted").await;

    installed.uninstall(cluster).await;
}

/// Switches the node back to the current Trainer when dropped (a failing test must not leave
/// the previous one running for the tests after it).
struct CurrentTrainerBack(&'static NodeCluster);

impl Drop for CurrentTrainerBack {
    fn drop(&mut self) {
        if self.0.trainer_release() == TrainerRelease::Current {
            return;
        }
        if let Err(e) = self.0.replace_trainer(TrainerRelease::Current) {
            eprintln!("switching back to the current Trainer: {e:#}");
        }
    }
}

/// No holdfast controller is running anywhere (an earlier test's release is uninstalled
/// without `--wait`; its pods may still be terminating).
async fn no_holdfast_controller(admin: &kube::Client) {
    let pods: Api<Pod> = Api::all(admin.clone());
    wait_for(
        "no holdfast controller pod left",
        Duration::from_secs(90),
        || async {
            let lp = ListParams::default().labels("app.kubernetes.io/component=controller");
            pods.list(&lp).await.ok()?.items.is_empty().then_some(())
        },
    )
    .await;
}

/// The KEP's migration ("a runtime modified after a TrainJob was created but before the
/// upgrade is snapshotted in its modified state"), staged on the real controllers. Control,
/// Trainer alone: v2.2.1 runs a job, its runtime is updated, the controller is upgraded to
/// v2.3.0, which snapshots the *updated* runtime, and the paused and resumed job runs the
/// updated configuration. With holdfast installed while v2.2.1 still runs: the job's snapshot
/// is holdfast's, of the runtime it started from; after the same update and upgrade, the
/// paused and resumed job runs its original configuration.
#[tokio::test]
#[ignore = "tier 3: run with --ignored (builds and starts a real node)"]
async fn upgrade_from_trainer_2_2_with_holdfast_keeps_the_original_configuration_where_trainer_alone_takes_the_updated_runtime()
 {
    let cluster = NodeCluster::shared();
    let admin = cluster.client(Identity::Admin).await.expect("client");
    let workload = cluster.workload_image().to_owned();
    cluster.tag_image(&workload, EDITED_IMAGE).expect("tag");
    let _back = CurrentTrainerBack(cluster);

    // Control: Trainer alone.
    no_holdfast_controller(&admin).await;
    cluster
        .switch_trainer(TrainerRelease::Previous)
        .await
        .expect("Trainer v2.2.1");
    let jobs = Jobs::new(cluster, "kep-upgrade-alone").await;
    jobs.create_runtime(cluster, "rt").await;
    jobs.create_trainjob("alone", "rt", json!({})).await;
    let first = jobs
        .assert_runs("alone", &[], &Config::original(cluster, "rt"))
        .await;
    assert!(
        jobs.snapshots
            .get_opt("alone-runtime-snapshot")
            .await
            .expect("get")
            .is_none(),
        "Trainer v2.2.1 writes no snapshot"
    );
    jobs.edit_runtime("rt").await;
    cluster
        .switch_trainer(TrainerRelease::Current)
        .await
        .expect("Trainer v2.3.0");
    let snap = jobs.snapshot("alone").await;
    assert_eq!(creator(&snap), "trainer", "Trainer's migration wrote it");
    assert!(
        runtime_yaml(&snap).contains(EDITED_IMAGE),
        "Trainer alone snapshots the updated runtime: {}",
        runtime_yaml(&snap)
    );
    // Its JobSet, from the original runtime, differs from the snapshot's: the pause does not
    // take until the JobSet is made again, from the snapshot, and the job then runs the
    // updated configuration.
    jobs.pause_refused(cluster, "alone", &first, jobs.suspend("alone", true))
        .await;
    jobs.recreate_jobset(cluster, "alone").await;
    jobs.suspend("alone", false).await;
    jobs.assert_runs("alone", &first, &Config::edited()).await;
    jobs.delete("alone").await;

    // With holdfast installed before the upgrade, in each mode; paused by a hold.
    for (name, kueue_mode) in [("kepu", false), ("kepuq", true)] {
        let (installed, first, snap) = job_with_holdfast(
            cluster,
            TrainerRelease::Previous,
            (name, kueue_mode),
            "kep-upgrade-holdfast",
            "kept",
        )
        .await;
        let jobs = &installed.jobs;
        assert_eq!(creator(&snap), "holdfast", "holdfast wrote it under v2.2.1");
        assert!(
            runtime_yaml(&snap).contains(&workload) && !runtime_yaml(&snap).contains(EDITED_IMAGE),
            "{}",
            runtime_yaml(&snap)
        );
        jobs.edit_runtime("rt").await;
        cluster
            .switch_trainer(TrainerRelease::Current)
            .await
            .expect("Trainer v2.3.0");
        installed.hold(cluster, "kept").await;
        installed.call("kept", "release", Some(1), "Released").await;
        jobs.assert_runs("kept", &first, &Config::original(cluster, "rt"))
            .await;
        let now = jobs.snapshot("kept").await;
        assert_eq!(
            now.metadata.resource_version, snap.metadata.resource_version,
            "Trainer v2.3.0 used holdfast's snapshot as it was"
        );
        jobs.delete("kept").await;
        installed.uninstall(cluster).await;
    }
}

/// The node on Trainer `trainer`, holdfast installed (release name, kueue mode) and a managed
/// TrainJob `job` of runtime `rt` started: its first execution (uids) and its snapshot.
async fn job_with_holdfast(
    cluster: &NodeCluster,
    trainer: TrainerRelease,
    (name, kueue_mode): (&str, bool),
    prefix: &str,
    job: &str,
) -> (Installed, Vec<String>, ConfigMap) {
    cluster
        .switch_trainer(trainer)
        .await
        .expect("switch Trainer");
    let installed = Installed::new(cluster, name, kueue_mode, prefix).await;
    installed.jobs.create_runtime(cluster, "rt").await;
    let first = installed.start(cluster, job, "rt").await;
    let snap = installed.jobs.snapshot(job).await;
    (installed, first, snap)
}

/// The KEP's rollback ("if the trainer controller is rolled back, TrainJobs reconcile from
/// the runtime again"), with holdfast running, in each mode: Trainer v2.3.0 runs a job from
/// its snapshot, the runtime is updated, the controller is rolled back to v2.2.1, which
/// computes the JobSet from the updated runtime — JobSet refuses that change, so a hold does
/// not stop the job until its JobSet is made again; released, the job runs the updated
/// runtime. The snapshot stays as it was, a user's edit of it is refused, and deleting the
/// TrainJob removes it with the JobSet, Jobs and pods: nothing is orphaned.
#[tokio::test]
#[ignore = "tier 3: run with --ignored (builds and starts a real node)"]
async fn rollback_to_trainer_2_2_reconciles_from_the_runtime_and_holdfasts_snapshots_stay_protected_and_go_with_their_jobs()
 {
    let cluster = NodeCluster::shared();
    let workload = cluster.workload_image().to_owned();
    cluster.tag_image(&workload, EDITED_IMAGE).expect("tag");
    let _back = CurrentTrainerBack(cluster);
    let admin = cluster.client(Identity::Admin).await.expect("client");
    for (name, kueue_mode) in [("kepr", false), ("keprq", true)] {
        let (installed, first, snap) = job_with_holdfast(
            cluster,
            TrainerRelease::Current,
            (name, kueue_mode),
            "kep-rollback",
            "rolled",
        )
        .await;
        let jobs = &installed.jobs;
        jobs.edit_runtime("rt").await;

        // v2.2.1 computes the JobSet from the updated runtime: the pause (a hold) does not
        // take until the JobSet is made again, from the runtime; released, the job runs the
        // updated configuration.
        cluster
            .switch_trainer(TrainerRelease::Previous)
            .await
            .expect("Trainer v2.2.1");
        let hold = installed.call("rolled", "hold", Some(1), "Held");
        jobs.pause_refused(cluster, "rolled", &first, hold).await;
        jobs.recreate_jobset(cluster, "rolled").await;
        installed
            .call("rolled", "release", Some(1), "Released")
            .await;
        jobs.assert_runs("rolled", &first, &Config::edited()).await;
        let now = jobs.snapshot("rolled").await;
        assert_eq!(
            (now.metadata.resource_version, now.data),
            (snap.metadata.resource_version, snap.data),
            "the snapshot stays as it was"
        );
        let user = cluster.client(Identity::User).await.expect("user");
        snapshot_edit_is_refused(&Api::namespaced(user, &jobs.ns), "rolled").await;

        // Deleted, the TrainJob takes its snapshot, JobSet, Jobs and pods along.
        jobs.delete("rolled").await;
        let batch: Api<k8s_openapi::api::batch::v1::Job> = Api::namespaced(admin.clone(), &jobs.ns);
        let snapshots = ListParams::default().labels("holdfast.dev/runtime-snapshot=true");
        let snapshot = "rolled-runtime-snapshot";
        wait_for(
            "nothing left of the TrainJob",
            Duration::from_secs(90),
            || async {
                let all = ListParams::default();
                let left = jobs.trainjobs.list(&all).await.ok()?.items.len()
                    + jobs.snapshots.list(&snapshots).await.ok()?.items.len()
                    + usize::from(jobs.snapshots.get_opt(snapshot).await.ok()?.is_some())
                    + jobs.jobsets.list(&all).await.ok()?.items.len()
                    + batch.list(&all).await.ok()?.items.len()
                    + jobs.pods.list(&all).await.ok()?.items.len();
                (left == 0).then_some(())
            },
        )
        .await;
        installed.uninstall(cluster).await;
    }
    cluster
        .switch_trainer(TrainerRelease::Current)
        .await
        .expect("Trainer v2.3.0 again");
}
