//! The readmission gate enforced where Kueue admits: the chart's readmission-gate policy
//! (`readmissionpolicy.yaml`) against the real apiserver and the real Kueue (v0.19).
//!
//! Kueue waits for holdfast's AdmissionCheck only while the Workload's ClusterQueue lists
//! it, and reads the ClusterQueue afresh from the Workload's LocalQueue. So after a Release,
//! a LocalQueue re-created pointing at a ClusterQueue without the check, or the check dropped
//! from the ClusterQueue, would let Kueue admit the released Workload beside the previous
//! execution's pods. Each test registers the policy as the chart installs it (kueue mode),
//! runs its own gate scoped to its namespace, and, where an execution's pods matter, creates
//! them itself (no kubelet or Trainer runs here).

use holdfast_tests::hold_support::{annotation, meta, settled_audit};
use holdfast_tests::kueue_support::{
    self, CHECK, Fixture, MINUTE, QUEUE, SETTLE, Setup, check, condition,
};
use holdfast_tests::objects::TrainJob;
use holdfast_tests::readmission_policy::{self, bare_workload};
use holdfast_tests::{Identity, kueue};

use holdfast_core::{hold::Outcome, names::ANN_ATTEMPT};
use holdfast_tests::described::Described;
use k8s_openapi::api::core::v1::ConfigMap;
use k8s_openapi::api::rbac::v1::{Role, RoleBinding};
use kube::api::{Api, DeleteParams, DynamicObject, Patch, PatchParams, PostParams};
use serde_json::{Value, json};

/// The job `job` ran (execution 1), two pods of it remain, it was held and released: Kueue
/// reserved quota again and the gate waits for the pods, the TrainJob suspended.
async fn released_while_its_pods_remain(f: &Fixture) {
    f.create_job("job", json!({})).await;
    f.open_and_run("job").await;
    f.create_pods("job", 2).await;
    assert_eq!(
        f.exec.hold(&f.ns, "job", meta(Some(1), MINUTE)).await,
        Ok(Outcome::Held)
    );
    f.job_when("job", "Kueue suspends the TrainJob", |tj| {
        tj["spec"]["suspend"] == true
    })
    .await;
    assert_eq!(
        f.exec.release(&f.ns, "job", meta(Some(1), MINUTE)).await,
        Ok(Outcome::Released { resumed: true })
    );
    f.workload_when("job", "the gate waits for the old pods", |w| {
        condition(w, "QuotaReserved") && check(w).1.contains("pods of the previous execution")
    })
    .await;
}

/// After the gate was taken out of the Workload's path (Kueue dropped holdfast's entry from
/// it): Kueue tries to admit it and the policy refuses (a 403 on Kueue's status write in the
/// audit log), and the job stays suspended beside its old pods. Fails, naming what happened,
/// if Kueue admits it.
async fn kueue_is_refused_the_admission(f: &Fixture) {
    let workload = f
        .workload_when(
            "job",
            "Kueue drops holdfast's check from the Workload",
            |w| check(w).0.is_empty(),
        )
        .await;
    let name = workload["metadata"]["name"]
        .as_str()
        .expect("name")
        .to_owned();
    let refusal = f
        .eventually(
            "Kueue's admission of the Workload is refused",
            SETTLE,
            || async {
                let live = f.live_workloads("job").await;
                if let Some(w) = live.iter().find(|w| condition(w, "Admitted")) {
                    let tj = f.trainjob("job").await;
                    panic!(
                        "Kueue admitted the released Workload past the gate while its previous \
                     execution's pods remain (TrainJob spec.suspend: {}): {:#}",
                        tj["spec"]["suspend"], w["status"]
                    );
                }
                settled_audit(f.cp).await.into_iter().find(|e| {
                    e["user"]["username"] == Identity::Kueue.username()
                        && e["objectRef"]["resource"] == "workloads"
                        && e["objectRef"]["subresource"] == "status"
                        && e["objectRef"]["namespace"] == f.ns.as_str()
                        && e["objectRef"]["name"] == name.as_str()
                        && e["responseStatus"]["code"] == 403
                })
            },
        )
        .await;
    let message = refusal["responseStatus"]["message"]
        .as_str()
        .unwrap_or_default();
    assert!(
        message.contains("status.conditions[Admitted]")
            && message.contains(&format!("holdfast's readmission check {CHECK} is absent")),
        "the refusal says why: {message}"
    );
    let tj = f.trainjob("job").await;
    assert_eq!(tj["spec"]["suspend"], true, "the job does not run");
    assert_eq!(annotation(&tj, ANN_ATTEMPT), Some("1"), "A did not rise");
    let now = f.live_workloads("job").await;
    assert!(
        now.iter().all(|w| !condition(w, "Admitted")),
        "not admitted: {now:#?}"
    );
}

/// Once the gate is back in the Workload's path and the old pods are gone, the job runs as
/// execution 2, through the gate.
async fn runs_through_the_gate_once_the_pods_are_gone(f: &Fixture) {
    f.workload_when("job", "Kueue puts holdfast's check back", |w| {
        check(w).0 == "Pending"
    })
    .await;
    f.delete_pods("job").await;
    let tj = f
        .job_when("job", "the job runs again", |tj| {
            tj["spec"]["suspend"] == false
        })
        .await;
    assert_eq!(annotation(&tj, ANN_ATTEMPT), Some("2"));
    let admitted = f
        .workload_when("job", "admitted through the gate", |w| {
            condition(w, "Admitted")
        })
        .await;
    assert_eq!(check(&admitted).0, "Ready");
}

/// A ClusterQueue without holdfast's check, with the fixture's flavor (a cluster admin's
/// queue for other teams).
async fn ungated_cluster_queue(f: &Fixture) -> String {
    let name = format!("cq-{}-ungated", f.ns);
    let cq: DynamicObject = serde_json::from_value(json!({
        "apiVersion": kueue::KUEUE_API_VERSION, "kind": "ClusterQueue",
        "metadata": {"name": name},
        "spec": {"namespaceSelector": {}, "resourceGroups": [{
            "coveredResources": ["cpu", "memory"],
            "flavors": [{"name": format!("flavor-{}", f.ns), "resources": [
                {"name": "cpu", "nominalQuota": "1000"},
                {"name": "memory", "nominalQuota": "1000Gi"}]}]}]}
    }))
    .expect("cluster queue");
    Api::<DynamicObject>::all_with(
        f.admin.clone(),
        &holdfast_cluster::resources::cluster_queue(),
    )
    .patch(
        &name,
        &PatchParams::apply("holdfast-tests").force(),
        &Patch::Apply(&cq),
    )
    .await
    .expect("apply the ungated ClusterQueue");
    name
}

/// Lets alice manage the namespace's LocalQueues, as Kueue's batch-admin role does.
async fn alice_is_batch_admin(f: &Fixture) -> kube::Client {
    let role: Role = serde_json::from_value(json!({
        "metadata": {"name": "batch-admin"},
        "rules": [{"apiGroups": ["kueue.x-k8s.io"], "resources": ["localqueues"],
            "verbs": ["get", "list", "watch", "create", "update", "patch", "delete"]}]
    }))
    .expect("role");
    Api::<Role>::namespaced(f.admin.clone(), &f.ns)
        .create(&PostParams::default(), &role)
        .await
        .expect("role");
    let binding: RoleBinding = serde_json::from_value(json!({
        "metadata": {"name": "batch-admin"},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "batch-admin"},
        "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User",
            "name": Identity::User.username()}]
    }))
    .expect("binding");
    Api::<RoleBinding>::namespaced(f.admin.clone(), &f.ns)
        .create(&PostParams::default(), &binding)
        .await
        .expect("binding");
    let alice = f.cp.client(Identity::User).await.expect("alice");
    for verb in ["create", "delete"] {
        holdfast_tests::rbac::await_grant(
            &alice,
            "kueue.x-k8s.io",
            "localqueues",
            None,
            verb,
            &f.ns,
        )
        .await;
    }
    alice
}

/// Deletes LocalQueue [`QUEUE`] as `client` and creates it again pointing at `cluster_queue`.
async fn swap_local_queue(f: &Fixture, client: &kube::Client, cluster_queue: &str) {
    let queues: Api<DynamicObject> = Api::namespaced_with(
        client.clone(),
        &f.ns,
        &holdfast_cluster::resources::local_queue(),
    );
    queues
        .delete(QUEUE, &DeleteParams::default())
        .await
        .expect("delete the LocalQueue");
    f.eventually("the LocalQueue is gone", SETTLE, || async {
        queues
            .get_opt(QUEUE)
            .await
            .expect("get")
            .is_none()
            .then_some(())
    })
    .await;
    let lq: DynamicObject = serde_json::from_value(json!({
        "apiVersion": kueue::KUEUE_API_VERSION, "kind": "LocalQueue",
        "metadata": {"name": QUEUE}, "spec": {"clusterQueue": cluster_queue}
    }))
    .expect("local queue");
    queues
        .create(&PostParams::default(), &lq)
        .await
        .expect("re-create the LocalQueue");
}

#[tokio::test]
async fn a_localqueue_swapped_after_release_does_not_admit_past_the_gate() {
    let f = Fixture::start("rq-swap").await;
    readmission_policy::register(f.cp, &f.ns).await;
    released_while_its_pods_remain(&f).await;

    // The namespace's batch-admin points the job's LocalQueue at a ClusterQueue without the
    // check; Kueue re-reads the queue and drops holdfast's check from the Workload.
    let ungated = ungated_cluster_queue(&f).await;
    let alice = alice_is_batch_admin(&f).await;
    swap_local_queue(&f, &alice, &ungated).await;
    kueue_is_refused_the_admission(&f).await;

    // Pointed back at the gated ClusterQueue, it passes the gate like any readmission.
    swap_local_queue(&f, &alice, &format!("cq-{}", f.ns)).await;
    runs_through_the_gate_once_the_pods_are_gone(&f).await;
    f.finish().await;
}

#[tokio::test]
async fn a_check_dropped_from_the_clusterqueue_does_not_admit_past_the_gate() {
    let f = Fixture::start("rq-drop").await;
    readmission_policy::register(f.cp, &f.ns).await;
    released_while_its_pods_remain(&f).await;

    // A cluster admin drops the check from the ClusterQueue.
    kueue::create_queues(&f.admin, &f.ns, QUEUE, &[])
        .await
        .expect("the ClusterQueue without the check");
    kueue_is_refused_the_admission(&f).await;
    // What the user is told: the gate's Warning on the TrainJob names the queue.
    let tj = f.trainjob("job").await;
    let uid = kueue_support::uid(&tj);
    Described {
        kind: "TrainJob",
        namespace: &f.ns,
        name: "job",
        uid: &uid,
    }
    .wait(&f.admin, "QueueWithoutReadmissionCheck", |_| true)
    .await;

    // The check back on the ClusterQueue: the gate lets it through once the pods are gone.
    kueue::create_queues(&f.admin, &f.ns, QUEUE, &[CHECK])
        .await
        .expect("the ClusterQueue with the check");
    runs_through_the_gate_once_the_pods_are_gone(&f).await;
    f.finish().await;
}

/// The Workloads of namespace `f.ns`, as `client`.
fn workloads(f: &Fixture, client: &kube::Client) -> Api<DynamicObject> {
    f.workload_api(client)
}

async fn admitted(f: &Fixture, name: &str) -> Value {
    let api = workloads(f, &f.admin);
    f.eventually(&format!("Kueue admits Workload {name}"), SETTLE, || async {
        let w = serde_json::to_value(api.get(name).await.ok()?).ok()?;
        condition(&w, "Admitted").then_some(w)
    })
    .await
}

#[tokio::test]
async fn an_unmanaged_workload_in_an_ungated_queue_is_admitted_as_before() {
    let f = Fixture::start_with(
        "rq-plain",
        Setup {
            gate: false,
            checks: &[],
            settle: SETTLE,
        },
    )
    .await;
    readmission_policy::register(f.cp, &f.ns).await;
    let api = workloads(&f, &f.admin);

    // A Workload of nobody, and one a non-TrainJob owner controls (as Kueue makes a batch
    // Job's): Kueue admits both with no check.
    let bare: DynamicObject =
        serde_json::from_value(bare_workload("bare", QUEUE, "1")).expect("bare");
    api.create(&PostParams::default(), &bare)
        .await
        .expect("create the bare Workload");
    let owner: ConfigMap =
        serde_json::from_value(json!({"metadata": {"name": "owner"}})).expect("configmap");
    let owner = Api::<ConfigMap>::namespaced(f.admin.clone(), &f.ns)
        .create(&PostParams::default(), &owner)
        .await
        .expect("owner");
    let mut owned = bare_workload("owned", QUEUE, "1");
    owned["metadata"]["ownerReferences"] = json!([{"apiVersion": "v1", "kind": "ConfigMap",
        "name": "owner", "uid": owner.metadata.uid, "controller": true}]);
    let owned: DynamicObject = serde_json::from_value(owned).expect("owned");
    api.create(&PostParams::default(), &owned)
        .await
        .expect("create the owned Workload");
    for name in ["bare", "owned"] {
        let w = admitted(&f, name).await;
        assert!(
            w["status"]["admissionChecks"].is_null(),
            "no check: {:#}",
            w["status"]
        );
        // An edit of the admitted Workload itself goes through as ever.
        api.patch(
            name,
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"labels": {"team": "a"}}})),
        )
        .await
        .expect("an ordinary edit of the Workload");
    }
    f.finish().await;
}

#[tokio::test]
async fn only_holdfasts_controller_turns_its_check_ready() {
    // The gate is down: nothing but the test writes holdfast's check.
    let f = Fixture::start_with(
        "rq-forge",
        Setup {
            gate: false,
            ..Setup::default()
        },
    )
    .await;
    readmission_policy::register(f.cp, &f.ns).await;
    let api = workloads(&f, &f.admin);
    let w: DynamicObject =
        serde_json::from_value(bare_workload("forged", QUEUE, "1")).expect("workload");
    api.create(&PostParams::default(), &w)
        .await
        .expect("create");
    let api_ref = &api;
    let pending = f
        .eventually(
            "Kueue reserves quota, the check Pending",
            SETTLE,
            || async {
                let w = serde_json::to_value(api_ref.get("forged").await.ok()?).ok()?;
                (condition(&w, "QuotaReserved") && check(&w).0 == "Pending").then_some(w)
            },
        )
        .await;
    let mut ready = pending.clone();
    let entries = ready["status"]["admissionChecks"]
        .as_array_mut()
        .expect("checks");
    for entry in entries.iter_mut().filter(|c| c["name"] == CHECK) {
        entry["state"] = json!("Ready");
        entry["message"] = json!("forged");
    }
    let ready: DynamicObject = serde_json::from_value(ready).expect("object");
    // A cluster admin who may write Workload status may not pass the gate for it.
    let message = kueue_support::refused(
        api.replace_status("forged", &PostParams::default(), &ready)
            .await,
    );
    assert!(
        message.contains(&format!("status.admissionChecks[{CHECK}]"))
            && message.contains("turns Ready only by the holdfast controller"),
        "{message}"
    );
    // The controller's write of the same goes through.
    let controller = f.cp.client(Identity::Controller).await.expect("controller");
    workloads(&f, &controller)
        .replace_status("forged", &PostParams::default(), &ready)
        .await
        .expect("the controller turns its check Ready");
    admitted(&f, "forged").await;
    f.finish().await;
}

#[tokio::test]
async fn an_admitted_workload_is_not_made_a_trainjobs_past_the_gate() {
    let f = Fixture::start_with(
        "rq-adopt",
        Setup {
            gate: false,
            checks: &[],
            settle: SETTLE,
        },
    )
    .await;
    readmission_policy::register(f.cp, &f.ns).await;
    let api = workloads(&f, &f.admin);
    let prebuilt: DynamicObject =
        serde_json::from_value(bare_workload("prebuilt", QUEUE, "1")).expect("workload");
    api.create(&PostParams::default(), &prebuilt)
        .await
        .expect("create");
    admitted(&f, "prebuilt").await;
    // A TrainJob (unqueued: Kueue leaves it alone) to adopt it.
    let tj = TrainJob::named("adopter").runtime(&f.runtime).object();
    let tj = f
        .trainjobs(&f.admin)
        .create(&PostParams::default(), &tj)
        .await
        .expect("create TrainJob");
    let adopt = json!({"metadata": {"ownerReferences": [{
        "apiVersion": "trainer.kubeflow.org/v1alpha1", "kind": "TrainJob", "name": "adopter",
        "uid": tj.metadata.uid, "controller": true, "blockOwnerDeletion": true}]}});
    let message = kueue_support::refused(
        api.patch("prebuilt", &PatchParams::default(), &Patch::Merge(&adopt))
            .await,
    );
    assert!(
        message.contains("may not become TrainJob adopter's Workload"),
        "{message}"
    );
    f.finish().await;
}

#[tokio::test]
async fn the_readmission_gate_policy_fits_the_workload_schema() {
    // The policies' type check runs in kube-controller-manager.
    let cp = holdfast_tests::holdfast::owned_control_plane_with(
        holdfast_tests::control_plane::Options {
            controllers: vec!["validatingadmissionpolicy-status-controller".to_owned()],
            ..Default::default()
        },
    )
    .await;
    let admin = cp.client(Identity::Admin).await.expect("admin");
    let warnings = readmission_policy::type_check_warnings(&admin).await;
    assert!(
        warnings.as_array().is_none_or(Vec::is_empty),
        "the apiserver's type check warns: {warnings:#}"
    );
}

/// Preflight reads the chart's readmission-gate policy and its binding by name: while they are
/// missing (an install that skipped them, or someone deleted them), Release and Open answer
/// `Unsupported` naming the policy, since Kueue could admit a released job before the gate is
/// Ready; once they exist as the chart renders them, the probe passes.
#[tokio::test]
async fn release_and_open_are_unsupported_while_the_readmission_gate_policy_is_missing() {
    use holdfast_controller::hold::preflight::{CheckResult, Gated, Probe};
    use holdfast_controller::hold::{ExecutorConfig, HoldExecutor};
    use holdfast_core::hold::HoldError;
    use holdfast_core::mode::Mode;
    use holdfast_tests::hold_support::{client_without_retries, config};

    let f = Fixture::start("rq-probe").await;
    f.create_job("job", json!({})).await;
    let executor = |policy: String| async move {
        HoldExecutor::new(
            client_without_retries(f.cp, Identity::Controller).await,
            Mode::Kueue,
            ExecutorConfig {
                gate_policy: Some(policy),
                ..config()
            },
        )
    };
    let probe = |report: &holdfast_controller::hold::preflight::PreflightReport| {
        report
            .checks
            .iter()
            .find(|c| c.probe == Probe::ReadmissionGatePolicy)
            .cloned()
            .expect("the probe is made in kueue mode")
    };

    // The chart grants the controller a get of its own release's policy only, so a policy of
    // another name reads as forbidden; an apiserver without it reads as absent. Both fail.
    let missing = executor(format!("{}-gone", readmission_policy::name())).await;
    let report = missing.preflight(None).await;
    let check = probe(&report);
    assert_eq!(check.result, CheckResult::Failed, "{check:?}");
    assert!(report.check(Gated::Release).is_err(), "{report:?}");
    assert!(report.check(Gated::Open).is_err(), "{report:?}");
    let open = missing.open(&f.ns, "job", meta(None, MINUTE)).await;
    assert!(
        matches!(&open, Err(HoldError::Unsupported { reason }) if reason.contains("-gone")),
        "open: {open:?}"
    );

    // The release's own name, before the policy is installed (a cluster where no other test
    // installed it yet), then after.
    let ours = executor(readmission_policy::name()).await;
    readmission_policy::register(f.cp, &f.ns).await;
    let check = probe(&ours.preflight(None).await);
    assert_eq!(check.result, CheckResult::Passed, "{check:?}");
    f.finish().await;
}
