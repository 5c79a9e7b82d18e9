//! What the Kueue-mode tests (`holds_kueue.rs`, `faults/kueue.rs`, `seams.rs`, `outage.rs`) share: a fixture with a
//! namespace whose queue requires holdfast's readmission AdmissionCheck, a runtime, a
//! kueue-mode executor acting as the controller and a readmission gate; and helpers that read
//! Workloads.
//!
//! It uses the helpers of `hold_support`.

use holdfast_controller::multikueue::Workers;
use std::future::Future;
use std::time::Duration;

use crate::hold_support::{annotation, client_without_retries, config, meta};
use crate::{ControlPlane, Identity, kueue};
use holdfast_controller::hold::HoldExecutor;
use holdfast_controller::readmission::{self, ReadmissionGate, ReadmissionMetrics};
use holdfast_core::{
    hold::Outcome,
    mode::Mode,
    names::{ANN_ATTEMPT, HOLD_FINALIZER},
};
use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, DeleteParams, DynamicObject, ListParams, Patch, PatchParams, PostParams};
use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;

mod staged;
use holdfast_webhook::workload_holds::WorkloadHolds;
pub use staged::{StagedHolds, StagedRun};

pub const MINUTE: Duration = Duration::from_secs(60);
/// How long Kueue and the gate get for each step, unless [`Setup::settle`] says otherwise.
pub const SETTLE: Duration = Duration::from_secs(60);
/// The readmission AdmissionCheck the tests' ClusterQueues require.
pub const CHECK: &str = "holdfast-readmission";
pub const QUEUE: &str = "main";

/// The TrainJobs in namespace `ns`, as `client`.
pub fn trainjobs(client: &kube::Client, ns: &str) -> Api<DynamicObject> {
    Api::namespaced_with(client.clone(), ns, &holdfast_cluster::resources::trainjob())
}

/// How a [`Fixture`] starts; [`Setup::default`] is a gate running, a queue requiring
/// [`CHECK`] and [`SETTLE`] for each step.
pub struct Setup<'a> {
    /// Run a readmission gate from the start.
    pub gate: bool,
    /// The AdmissionChecks the queue requires.
    pub checks: &'a [&'a str],
    /// How long [`Fixture::workload_when`], [`Fixture::job_when`] and
    /// [`Fixture::delete_pods`] wait.
    pub settle: Duration,
}

impl Default for Setup<'static> {
    fn default() -> Self {
        Setup {
            gate: true,
            checks: &[CHECK],
            settle: SETTLE,
        }
    }
}

/// One test's world: a namespace whose queue requires the AdmissionChecks of its [`Setup`]
/// (the readmission check by default), a runtime, a kueue-mode executor acting as the
/// controller, and a readmission gate (unless the setup leaves it off).
pub struct Fixture {
    pub cp: &'static ControlPlane,
    pub ns: String,
    pub runtime: String,
    pub admin: kube::Client,
    pub exec: HoldExecutor,
    pub metrics: ReadmissionMetrics,
    gate: Option<(CancellationToken, tokio::task::JoinHandle<()>)>,
    /// The running gate (a clone), to ask what it holds.
    running_gate: Option<ReadmissionGate>,
    settle: Duration,
    /// The MultiKueue workers the gate and the executor see ([`Fixture::use_workers`]).
    workers: Workers,
}

impl Fixture {
    /// A fixture on the control plane of the calling file's topic ([`ControlPlane::shared`]).
    #[track_caller]
    pub fn start(prefix: &str) -> impl Future<Output = Fixture> + '_ {
        Fixture::start_with(prefix, Setup::default())
    }

    /// [`Fixture::start`] with [`Setup`].
    #[track_caller]
    pub fn start_with<'a>(prefix: &'a str, setup: Setup<'a>) -> impl Future<Output = Fixture> + 'a {
        let cp = ControlPlane::shared();
        Fixture::start_on(cp, prefix, setup)
    }

    async fn start_on(cp: &'static ControlPlane, prefix: &str, setup: Setup<'_>) -> Fixture {
        cp.start_kueue().await.expect("kueue starts");
        let ns = cp.namespace(prefix).await.expect("namespace");
        let admin = cp.client(Identity::Admin).await.expect("admin");
        ensure_admission_check(&admin).await;
        kueue::create_queues(&admin, &ns, QUEUE, setup.checks)
            .await
            .expect("queues");
        let runtime = format!("torch-{ns}");
        let rt: DynamicObject = serde_json::from_value(json!({
            "apiVersion": "trainer.kubeflow.org/v1alpha1", "kind": "ClusterTrainingRuntime",
            "metadata": {"name": runtime, "labels": {"trainer.kubeflow.org/framework": "torch"}},
            "spec": runtime_spec("1"),
        }))
        .expect("runtime");
        Api::<DynamicObject>::all_with(
            admin.clone(),
            &holdfast_cluster::resources::cluster_training_runtime(),
        )
        .create(&PostParams::default(), &rt)
        .await
        .expect("create runtime");
        let exec = kueue_executor(cp, Workers::default()).await;
        let mut f = Fixture {
            cp,
            ns,
            runtime,
            admin,
            exec,
            metrics: ReadmissionMetrics::default(),
            gate: None,
            running_gate: None,
            settle: setup.settle,
            workers: Workers::default(),
        };
        if setup.gate {
            f.start_gate().await;
        } else if setup.checks.contains(&CHECK) {
            // A gate that is down has run before: Kueue treats a ClusterQueue whose check was
            // never marked Active by its controller as inactive, and admits nothing there.
            // Whether another test's gate marked the shared check already depends on the
            // order tests run in, so the gate runs here until it has.
            f.start_gate().await;
            let checks = Api::<DynamicObject>::all_with(
                f.admin.clone(),
                &holdfast_cluster::resources::admission_check(),
            );
            f.eventually("the readmission check is Active", f.settle, || async {
                let ac = checks.get(CHECK).await.ok()?;
                let active = ac.data["status"]["conditions"]
                    .as_array()?
                    .iter()
                    .any(|c| c["type"] == "Active" && c["status"] == "True");
                active.then_some(())
            })
            .await;
            f.stop_gate().await;
        }
        f
    }

    /// Runs a readmission gate (as holdfast's controller) for this namespace.
    pub async fn start_gate(&mut self) {
        let client = self
            .cp
            .client(Identity::Controller)
            .await
            .expect("controller");
        let gate = ReadmissionGate::new(
            client.clone(),
            readmission::Config {
                namespace: Some(self.ns.clone()),
                retry_min: Duration::from_millis(100),
                retry_max: Duration::from_secs(2),
                resync: Duration::from_secs(3),
                sweep_interval: Duration::from_secs(2),
                ..readmission::Config::default()
            },
            self.metrics.clone(),
            crate::leader_parts::publisher(&client, None),
        )
        .with_workers(self.workers.clone());
        self.running_gate = Some(gate.clone());
        let token = CancellationToken::new();
        let stop = token.clone();
        let feed = crate::leader_parts::trainjob_feed(&client, Some(&self.ns), &stop);
        let task = tokio::spawn(async move {
            if let Err(e) = gate.run_on(feed, stop).await {
                panic!("the readmission gate failed: {e:#}");
            }
        });
        self.gate = Some((token, task));
    }

    /// From now on the gate and the executor see MultiKueue workers `workers`: a gate that
    /// runs is started again with them.
    pub async fn use_workers(&mut self, workers: Workers) {
        let running = self.gate.is_some();
        self.stop_gate().await;
        self.workers = workers.clone();
        self.exec = kueue_executor(self.cp, workers).await;
        if running {
            self.start_gate().await;
        }
    }

    /// The gate started by [`Fixture::start_gate`], if any.
    pub fn gate(&self) -> Option<&ReadmissionGate> {
        self.running_gate.as_ref()
    }

    pub async fn stop_gate(&mut self) {
        self.running_gate = None;
        if let Some((token, mut task)) = self.gate.take() {
            token.cancel();
            // A gate cancelled while it is still starting has been seen not to return (its
            // controller's graceful shutdown waiting on a watch that never listed): the test
            // needs it stopped, not its orderly exit, so its task is aborted after a while.
            if tokio::time::timeout(Duration::from_secs(15), &mut task)
                .await
                .is_err()
            {
                eprintln!(
                    "the readmission gate did not stop within 15 s of its cancellation: aborting it"
                );
                task.abort();
                let _ = task.await;
            }
        }
    }

    /// The TrainJobs of this namespace, as `client`.
    pub fn trainjobs(&self, client: &kube::Client) -> Api<DynamicObject> {
        trainjobs(client, &self.ns)
    }

    pub fn workload_api(&self, client: &kube::Client) -> Api<DynamicObject> {
        Api::namespaced_with(
            client.clone(),
            &self.ns,
            &holdfast_cluster::resources::workload(),
        )
    }

    fn pods(&self) -> Api<Pod> {
        Api::namespaced(self.admin.clone(), &self.ns)
    }

    /// Creates a managed, queued TrainJob (Kueue's webhook suspends it at creation), with
    /// `labels` besides.
    pub async fn create_job(&self, name: &str, labels: Value) -> Value {
        let tj = crate::objects::TrainJob::named(name)
            .runtime(&self.runtime)
            .managed()
            .queued(QUEUE)
            .labels(&labels)
            .object();
        let created = self
            .trainjobs(&self.admin)
            .create(&PostParams::default(), &tj)
            .await
            .expect("create TrainJob");
        let v = serde_json::to_value(created).expect("json");
        assert_eq!(v["spec"]["suspend"], true, "Kueue suspends a queued job");
        v
    }

    pub async fn trainjob(&self, name: &str) -> Value {
        serde_json::to_value(
            self.trainjobs(&self.admin)
                .get(name)
                .await
                .expect("get TrainJob"),
        )
        .expect("json")
    }

    /// The TrainJob's Workloads, as they are now (those being deleted included).
    pub async fn workloads(&self, name: &str) -> Vec<Value> {
        let uid = self.trainjob(name).await["metadata"]["uid"]
            .as_str()
            .expect("uid")
            .to_owned();
        self.workload_api(&self.admin)
            .list(&ListParams::default().labels(&format!("kueue.x-k8s.io/job-uid={uid}")))
            .await
            .expect("list workloads")
            .items
            .into_iter()
            .map(|w| serde_json::to_value(w).expect("json"))
            .collect()
    }

    /// The TrainJob's live Workloads (not being deleted), as they are now.
    pub async fn live_workloads(&self, name: &str) -> Vec<Value> {
        self.workloads(name)
            .await
            .into_iter()
            .filter(|w| w["metadata"].get("deletionTimestamp").is_none())
            .collect()
    }

    /// Polls `probe` until it answers `Some`, for at most `within`.
    pub async fn eventually<T, F, Fut>(&self, what: &str, within: Duration, mut probe: F) -> T
    where
        F: FnMut() -> Fut,
        Fut: Future<Output = Option<T>>,
    {
        let start = std::time::Instant::now();
        loop {
            if let Some(t) = probe().await {
                return t;
            }
            assert!(
                start.elapsed() < within,
                "{what}: not within {within:?}\nkueue log:\n{}",
                self.cp.log_tail("kueue", 25)
            );
            tokio::time::sleep(Duration::from_millis(150)).await;
        }
    }

    /// The TrainJob's one live Workload, once it satisfies `pred`.
    pub async fn workload_when(
        &self,
        job: &str,
        what: &str,
        pred: impl Fn(&Value) -> bool,
    ) -> Value {
        let start = std::time::Instant::now();
        loop {
            let live = self.live_workloads(job).await;
            if let Some(w) = live.iter().find(|w| pred(w)) {
                return w.clone();
            }
            // What the Workloads were at the end says why the wait failed.
            let seen: Vec<Value> = live
                .iter()
                .map(|w| json!({"name": w["metadata"]["name"], "spec.active": w["spec"]["active"], "status": w["status"]}))
                .collect();
            assert!(
                start.elapsed() < self.settle,
                "{what}: not within {:?}; the live Workloads of {job}: {seen:#?}\nkueue log:\n{}",
                self.settle,
                self.cp.log_tail("kueue", 25)
            );
            tokio::time::sleep(Duration::from_millis(150)).await;
        }
    }

    pub async fn job_when(&self, job: &str, what: &str, pred: impl Fn(&Value) -> bool) -> Value {
        self.eventually(what, self.settle, || async {
            let tj = self.trainjob(job).await;
            pred(&tj).then_some(tj)
        })
        .await
    }

    /// Creates `n` pods of TrainJob `job`'s execution, owned by its Job (whose JobSet the
    /// TrainJob owns) and labelled, as Trainer, JobSet and the Job controller make them.
    pub async fn create_pods(&self, job: &str, n: usize) {
        let tj = self.trainjob(job).await;
        let uid = tj["metadata"]["uid"].as_str().expect("uid");
        let owners = crate::execution_owners::ensure(&self.admin, &self.ns, job, uid)
            .await
            .expect("the execution's JobSet and Job");
        for i in 0..n {
            let pod: Pod = serde_json::from_value(crate::execution_owners::pod(
                &format!("{job}-node-0-{i}"),
                job,
                &owners,
                json!({}),
            ))
            .expect("pod");
            self.pods()
                .create(&PostParams::default(), &pod)
                .await
                .expect("create pod");
        }
    }

    /// Deletes the pods of `job`'s execution, as Trainer's JobSet would, and waits until
    /// they are gone. (Pods are the core API's: Kueue plays no part.)
    pub async fn delete_pods(&self, job: &str) {
        let selector = format!("jobset.sigs.k8s.io/jobset-name={job}");
        self.pods()
            .delete_collection(
                &DeleteParams::default(),
                &ListParams::default().labels(&selector),
            )
            .await
            .expect("delete pods");
        self.eventually("the pods are gone", self.settle, || async {
            let left = self
                .pods()
                .list(&ListParams::default().labels(&selector))
                .await
                .expect("list pods");
            left.items.is_empty().then_some(())
        })
        .await;
    }

    /// Runs `job` through its start gate: Open, then the gate lets the first execution
    /// through (A = 1) and Kueue unsuspends the TrainJob, which is returned.
    pub async fn open_and_run(&self, job: &str) -> Value {
        self.open_at_gate(job).await;
        let tj = self
            .job_when(job, "the job runs", |tj| tj["spec"]["suspend"] == false)
            .await;
        assert_eq!(
            annotation(&tj, ANN_ATTEMPT),
            Some("1"),
            "A rose at the gate"
        );
        tj
    }

    /// Waits for `job`'s Workload to reserve quota and wait at the gate, then Opens it.
    pub async fn open_at_gate(&self, job: &str) {
        let workload = self
            .workload_when(job, "the Workload has quota and waits at the gate", |w| {
                check(w).0 == "Pending" && condition(w, "QuotaReserved")
            })
            .await;
        assert!(!condition(&workload, "Admitted"));
        assert_eq!(
            self.exec.open(&self.ns, job, meta(None, MINUTE)).await,
            Ok(Outcome::Opened { started: false }),
            "Kueue mode: Open only writes the mark"
        );
    }

    /// Stops the gate, if it runs.
    pub async fn finish(mut self) {
        self.stop_gate().await;
    }
}

/// The readmission AdmissionCheck (cluster-scoped; shared by every test).
/// A Kueue-mode executor acting as holdfast's controller on `cp`, seeing `workers`.
async fn kueue_executor(cp: &ControlPlane, workers: Workers) -> HoldExecutor {
    HoldExecutor::new(
        client_without_retries(cp, Identity::Controller).await,
        Mode::Kueue,
        config(),
    )
    .with_workers(workers)
}

pub async fn ensure_admission_check(admin: &kube::Client) {
    let ac: DynamicObject = serde_json::from_value(json!({
        "apiVersion": kueue::KUEUE_API_VERSION, "kind": "AdmissionCheck",
        "metadata": {"name": CHECK},
        "spec": {"controllerName": holdfast_core::names::READMISSION_CONTROLLER}
    }))
    .expect("admission check");
    Api::<DynamicObject>::all_with(
        admin.clone(),
        &holdfast_cluster::resources::admission_check(),
    )
    .patch(
        CHECK,
        &PatchParams::apply("holdfast-tests").force(),
        &Patch::Apply(&ac),
    )
    .await
    .expect("apply the AdmissionCheck");
}

/// A ClusterTrainingRuntime's spec: one node, requesting `cpu`.
pub fn runtime_spec(cpu: &str) -> Value {
    json!({"mlPolicy": {"numNodes": 1, "torch": {}},
        "template": {"spec": {"replicatedJobs": [{"name": "node",
            "template": {"metadata": {"labels": {"trainer.kubeflow.org/trainjob-ancestor-step": "trainer"}},
            "spec": {"template": {"spec": {"containers": [{"name": "node", "image": "pytorch/pytorch:2.10.0",
                "resources": {"requests": {"cpu": cpu}}}]}}}}}]}}})
}

/// Our check's `(state, message)` on a Workload.
pub fn check(w: &Value) -> (String, String) {
    w.pointer("/status/admissionChecks")
        .and_then(Value::as_array)
        .and_then(|cs| cs.iter().find(|c| c["name"] == CHECK))
        .map(|c| {
            (
                c["state"].as_str().unwrap_or_default().to_owned(),
                c["message"].as_str().unwrap_or_default().to_owned(),
            )
        })
        .unwrap_or_default()
}

/// Whether condition `kind` is true.
pub fn condition(w: &Value, kind: &str) -> bool {
    condition_reason(w, kind).is_some()
}

/// The reason of condition `kind` if it is true.
pub fn condition_reason(w: &Value, kind: &str) -> Option<String> {
    w.pointer("/status/conditions")
        .and_then(Value::as_array)?
        .iter()
        .find(|c| c["type"] == kind && c["status"] == "True")
        .map(|c| c["reason"].as_str().unwrap_or_default().to_owned())
}

/// Whether the Workload is active (`spec.active` not false).
pub fn active(w: &Value) -> bool {
    w.pointer("/spec/active").and_then(Value::as_bool) != Some(false)
}

pub fn finalizers(w: &Value) -> Vec<String> {
    w.pointer("/metadata/finalizers")
        .and_then(Value::as_array)
        .map(|f| {
            f.iter()
                .filter_map(|s| s.as_str().map(str::to_owned))
                .collect()
        })
        .unwrap_or_default()
}

/// Whether the object carries holdfast's hold finalizer.
pub fn has_hold_finalizer(w: &Value) -> bool {
    finalizers(w).iter().any(|f| f == HOLD_FINALIZER)
}

pub fn uid(o: &Value) -> String {
    o["metadata"]["uid"].as_str().unwrap_or_default().to_owned()
}

/// holdfast's webhook, served in-process (in Kueue mode watching Kueue's queues) and
/// registered for one namespace, under the engine `HOLDFAST_TEST_VALIDATION_ENGINE` names.
pub struct Webhook {
    hook: crate::in_process_webhook::InProcessWebhook,
    registration: crate::registration::Registration,
    admin: kube::Client,
}

impl Webhook {
    /// In Kueue mode.
    pub async fn serve(f: &Fixture) -> Webhook {
        Webhook::serve_in(f, Mode::Kueue).await
    }

    /// In `mode` (plain mode: a cluster switched away from Kueue mode, Kueue still running).
    pub async fn serve_in(f: &Fixture, mode: Mode) -> Webhook {
        Webhook::serve_with_holds(f, mode, |holds| holds).await
    }

    /// In Kueue mode, its lookup of a TrainJob's Workload holds staged by `staged` (see
    /// [`StagedHolds`]).
    pub async fn serve_staged(f: &Fixture, staged: &StagedHolds) -> Webhook {
        let staged = staged.clone();
        Webhook::serve_with_holds(f, Mode::Kueue, move |holds| staged.wrapping(holds)).await
    }

    async fn serve_with_holds(
        f: &Fixture,
        mode: Mode,
        wrap: impl FnOnce(std::sync::Arc<dyn WorkloadHolds>) -> std::sync::Arc<dyn WorkloadHolds>,
    ) -> Webhook {
        use crate::registration::{Engine, Namespaces, Registration, Target};
        let hook =
            crate::in_process_webhook::InProcessWebhook::start_with_holds(f.cp, mode, true, wrap)
                .await
                .expect("webhook starts");
        let registration = Registration::new(
            format!("holdfast-{}", f.ns),
            Target::Url(hook.url()),
            f.cp.ca_pem().as_bytes().to_vec(),
        )
        .with_mode(mode)
        .with_engine(Engine::from_env())
        .with_namespaces(Namespaces::Only(vec![f.ns.clone()]));
        registration
            .install(&f.admin)
            .await
            .expect("register the webhooks and policies");
        // Registration takes effect asynchronously: probe with a dry run alice may not make.
        let alice = f.cp.client(Identity::User).await.expect("alice");
        let dry = PostParams {
            dry_run: true,
            ..Default::default()
        };
        f.eventually(
            "the webhook takes effect",
            Duration::from_secs(30),
            || async {
                let probe: DynamicObject = serde_json::from_value(json!({
                    "apiVersion": "trainer.kubeflow.org/v1alpha1", "kind": "TrainJob",
                    "metadata": {"name": "probe", "annotations": {ANN_ATTEMPT: "9"}},
                    "spec": {"runtimeRef": {"name": f.runtime}}
                }))
                .expect("probe");
                let refused = matches!(
                    f.trainjobs(&alice).create(&dry, &probe).await,
                    Err(kube::Error::Api(s)) if s.code == 403
                );
                refused.then_some(())
            },
        )
        .await;
        Webhook {
            hook,
            registration,
            admin: f.admin.clone(),
        }
    }

    /// An outage: the webhook stops serving while its configurations stay registered, so
    /// the apiserver's calls fail (connection refused) and each entry's failure policy
    /// decides (the admission policies, if the engine has them, go on judging).
    /// [`Outage::end`] removes the registrations.
    pub async fn go_down(self) -> Outage {
        self.hook.stop().await.expect("webhook stops");
        Outage {
            registration: self.registration,
            admin: self.admin,
        }
    }

    pub async fn stop(self) {
        self.registration.uninstall(&self.admin).await;
        self.hook.stop().await.expect("webhook stops");
    }
}

/// The registrations of a webhook that no longer serves.
pub struct Outage {
    registration: crate::registration::Registration,
    admin: kube::Client,
}

impl Outage {
    /// Removes the dead webhook's registrations (before a new one is served).
    pub async fn end(self) {
        self.registration.uninstall(&self.admin).await;
    }
}

/// The message of a refused write; panics if it was not refused by admission.
pub fn refused<T: std::fmt::Debug>(result: Result<T, kube::Error>) -> String {
    match result {
        Err(kube::Error::Api(s)) if s.code == 403 => s.message.clone(),
        other => panic!("expected the webhook to refuse, got {other:?}"),
    }
}
