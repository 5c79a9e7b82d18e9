//! The window before a hold: a TrainJob's JobSet is stored with `podReplacementPolicy:
//! Failed` on every replicated Job (the chart's `jobsets.mutate.holdfast.dev`, served
//! in-process and registered by URL for the test's namespace alone), so no Job JobSet makes
//! from it replaces a pod still terminating on a lost node.
//!
//! The JobSets are written as Trainer writes them: server-side apply with Trainer's field
//! manager, by Trainer's identity, owned by the TrainJob as controller. JobSet's own webhooks
//! do not run here; what they would refuse (a change of a replicated Job after creation) is
//! never what holdfast's patch makes.
//!
//! Every test is named after the behaviour it proves.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use holdfast_core::mode::Mode;
use holdfast_tests::in_process_webhook::InProcessWebhook;
use holdfast_tests::registration::{Engine, Namespaces, Registration, Target};
use holdfast_tests::{ControlPlane, Identity};
use kube::api::{Api, DynamicObject, Patch, PatchParams, PostParams};
use serde_json::{Value, json};
use std::time::{Duration, Instant};

/// Trainer's field manager for the objects it applies.
const TRAINER_MANAGER: &str = "trainer";
const FAILED: &str = "Failed";

/// One test's namespace with holdfast's webhook serving and registered for it alone.
struct Harness {
    ns: String,
    registration: Registration,
    hook: Option<InProcessWebhook>,
    admin: kube::Client,
    trainer: kube::Client,
}

impl Harness {
    /// A namespace; `register` decides whether the webhook is registered yet (see
    /// [`Harness::register`]).
    async fn start(prefix: &str, mode: Mode, register: bool) -> Harness {
        let cp = ControlPlane::shared();
        let ns = cp.namespace(prefix).await.expect("namespace");
        let hook = InProcessWebhook::start(cp, mode, false)
            .await
            .expect("webhook starts");
        let registration = Registration::new(
            format!("holdfast-{ns}"),
            Target::Url(hook.url()),
            cp.ca_pem().as_bytes().to_vec(),
        )
        .with_mode(mode)
        .with_engine(Engine::from_env())
        .with_namespaces(Namespaces::Only(vec![ns.clone()]));
        let h = Harness {
            ns,
            registration,
            hook: Some(hook),
            admin: cp.client(Identity::Admin).await.expect("admin"),
            trainer: cp.client(Identity::Trainer).await.expect("trainer"),
        };
        if register {
            h.register().await;
        }
        h
    }

    /// Registers the chart's configurations and waits until a dry-run JobSet of a TrainJob
    /// comes back patched.
    async fn register(&self) {
        self.registration
            .install(&self.admin)
            .await
            .expect("register the webhooks");
        let owner = self.trainjob("probe-owner").await;
        let deadline = Instant::now() + Duration::from_secs(30);
        let dry = PostParams {
            dry_run: true,
            ..Default::default()
        };
        loop {
            let probe = jobset("probe", Some(&owner), &[("node", None)]);
            let created = self
                .jobsets(&self.trainer)
                .create(&dry, &dynamic(probe))
                .await
                .expect("dry-run JobSet");
            if policies(&created) == [Some(FAILED.to_owned())] {
                return;
            }
            assert!(
                Instant::now() < deadline,
                "the mutating configuration did not take effect within 30s"
            );
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }

    fn jobsets(&self, client: &kube::Client) -> Api<DynamicObject> {
        Api::namespaced_with(
            client.clone(),
            &self.ns,
            &holdfast_cluster::resources::jobset(),
        )
    }

    /// Creates TrainJob `name` (so the garbage collector keeps what it owns) and returns the
    /// ownerReference Trainer puts on its JobSet.
    async fn trainjob(&self, name: &str) -> Value {
        let api: Api<DynamicObject> = Api::namespaced_with(
            self.admin.clone(),
            &self.ns,
            &holdfast_cluster::resources::trainjob(),
        );
        let tj = json!({
            "apiVersion": "trainer.kubeflow.org/v1alpha1", "kind": "TrainJob",
            "metadata": {"name": name},
            "spec": {"runtimeRef": {"name": "torch-distributed"}},
        });
        let tj = api
            .create(&PostParams::default(), &dynamic(tj))
            .await
            .expect("TrainJob");
        json!({
            "apiVersion": "trainer.kubeflow.org/v1alpha1", "kind": "TrainJob", "name": name,
            "uid": tj.metadata.uid.expect("uid"), "controller": true, "blockOwnerDeletion": true,
        })
    }

    /// Server-side apply of `js` as Trainer does it (its identity and field manager).
    async fn apply_as_trainer(&self, js: &Value) -> Result<DynamicObject, kube::Error> {
        let name = js["metadata"]["name"].as_str().expect("name");
        let pp = PatchParams::apply(TRAINER_MANAGER).force();
        self.jobsets(&self.trainer)
            .patch(name, &pp, &Patch::Apply(js))
            .await
    }

    async fn stop_webhook(&mut self) {
        if let Some(hook) = self.hook.take() {
            hook.stop().await.expect("webhook stops");
        }
    }

    async fn finish(mut self) {
        self.registration.uninstall(&self.admin).await;
        self.stop_webhook().await;
    }
}

fn dynamic(v: Value) -> DynamicObject {
    serde_json::from_value(v).expect("object json")
}

/// A JobSet named `name`, owned by `owner` if given, with one replicated Job per
/// `(name, podReplacementPolicy)`, suspended as Trainer creates one at a closed gate.
fn jobset(name: &str, owner: Option<&Value>, jobs: &[(&str, Option<&str>)]) -> Value {
    let replicated: Vec<Value> = jobs
        .iter()
        .map(|(job, policy)| {
            let mut spec = json!({"template": {"spec": {"restartPolicy": "Never",
                "containers": [{"name": "node", "image": "pytorch/pytorch:2.10.0"}]}}});
            if let Some(p) = policy {
                spec["podReplacementPolicy"] = json!(p);
            }
            json!({"name": job, "replicas": 1, "template": {"spec": spec}})
        })
        .collect();
    let mut metadata = json!({"name": name});
    if let Some(o) = owner {
        metadata["ownerReferences"] = json!([o]);
    }
    json!({
        "apiVersion": "jobset.x-k8s.io/v1alpha2", "kind": "JobSet",
        "metadata": metadata,
        "spec": {"suspend": true, "replicatedJobs": replicated},
    })
}

/// Each replicated Job's `podReplacementPolicy`, in order.
fn policies(js: &DynamicObject) -> Vec<Option<String>> {
    js.data["spec"]["replicatedJobs"]
        .as_array()
        .expect("replicatedJobs")
        .iter()
        .map(|j| {
            j.pointer("/template/spec/podReplacementPolicy")
                .and_then(Value::as_str)
                .map(str::to_owned)
        })
        .collect()
}

fn failed(n: usize) -> Vec<Option<String>> {
    vec![Some(FAILED.to_owned()); n]
}

#[tokio::test]
async fn a_trainjobs_jobset_created_as_trainer_creates_it_is_stored_with_failed_on_every_replicated_job()
 {
    for mode in [Mode::Plain, Mode::Kueue] {
        let h = Harness::start("replacement-create", mode, true).await;
        let owner = h.trainjob("mnist").await;
        // The runtime asks for the Job controller's default on one replicated Job, and says
        // nothing on the other: both are overridden, fail closed.
        let js = jobset(
            "mnist",
            Some(&owner),
            &[("initializer", None), ("node", Some("TerminatingOrFailed"))],
        );
        let stored = h.apply_as_trainer(&js).await.expect("Trainer's apply");
        assert_eq!(policies(&stored), failed(2), "{mode}");
        let read = h.jobsets(&h.admin).get("mnist").await.expect("get");
        assert_eq!(policies(&read), failed(2), "{mode}");
        h.finish().await;
    }
}

#[tokio::test]
async fn trainers_next_apply_or_a_replace_without_the_field_keeps_failed() {
    let h = Harness::start("replacement-update", Mode::Plain, true).await;
    let owner = h.trainjob("mnist").await;
    let js = jobset(
        "mnist",
        Some(&owner),
        &[("initializer", None), ("node", None)],
    );
    h.apply_as_trainer(&js).await.expect("create");

    // Trainer applies again (a TrainJob unsuspended: its next apply) with the template it
    // has, which never had the field.
    let mut again = js.clone();
    again["spec"]["suspend"] = json!(false);
    let stored = h.apply_as_trainer(&again).await.expect("Trainer's apply");
    assert_eq!(policies(&stored), failed(2));
    assert_eq!(stored.data["spec"]["suspend"], json!(false));

    // A runtime asking otherwise, re-applied: the stored Failed stays (JobSet would refuse
    // the change).
    let asking = jobset(
        "mnist",
        Some(&owner),
        &[("initializer", None), ("node", Some("TerminatingOrFailed"))],
    );
    let stored = h.apply_as_trainer(&asking).await.expect("Trainer's apply");
    assert_eq!(policies(&stored), failed(2));

    // A whole-object replace from a manifest without the field (a GitOps sync, kubectl
    // replace): Failed is put back.
    let current = h.jobsets(&h.admin).get("mnist").await.expect("get");
    let mut replaced = jobset(
        "mnist",
        Some(&owner),
        &[("initializer", None), ("node", None)],
    );
    replaced["metadata"]["resourceVersion"] = json!(current.metadata.resource_version);
    let stored = h
        .jobsets(&h.trainer)
        .replace("mnist", &PostParams::default(), &dynamic(replaced))
        .await
        .expect("replace");
    assert_eq!(policies(&stored), failed(2));
    h.finish().await;
}

#[tokio::test]
async fn a_jobset_owned_by_nothing_or_by_something_else_is_stored_as_sent() {
    let h = Harness::start("replacement-others", Mode::Plain, true).await;
    let owner = h.trainjob("mnist").await;
    let mut not_controller = owner.clone();
    not_controller["controller"] = json!(false);
    // A real owner, so that the garbage collector keeps what it owns.
    let cm: k8s_openapi::api::core::v1::ConfigMap = Api::namespaced(h.admin.clone(), &h.ns)
        .create(
            &PostParams::default(),
            &serde_json::from_value(json!({"metadata": {"name": "c"}})).unwrap(),
        )
        .await
        .expect("ConfigMap");
    let other = json!({"apiVersion": "v1", "kind": "ConfigMap", "name": "c",
        "uid": cm.metadata.uid.expect("uid"), "controller": true});
    let jobs = [("node", None), ("launcher", Some("TerminatingOrFailed"))];
    let sent = |js: &Value| {
        js["spec"]["replicatedJobs"]
            .as_array()
            .unwrap()
            .iter()
            .map(|j| {
                j.pointer("/template/spec/podReplacementPolicy")
                    .and_then(Value::as_str)
                    .map(str::to_owned)
            })
            .collect::<Vec<_>>()
    };
    for (name, owner) in [
        ("unowned", None),
        ("not-controller", Some(&not_controller)),
        ("configmaps", Some(&other)),
    ] {
        let js = jobset(name, owner, &jobs);
        let stored = h
            .jobsets(&h.admin)
            .create(&PostParams::default(), &dynamic(js.clone()))
            .await
            .expect("create");
        assert_eq!(policies(&stored), sent(&js), "{name}");
        // Nor is an update of it touched.
        let mut js2 = js.clone();
        js2["metadata"]["labels"] = json!({"team": "a"});
        let stored = h.apply_as_trainer(&js2).await.expect("apply");
        assert_eq!(policies(&stored), sent(&js), "{name}");
    }
    h.finish().await;
}

#[tokio::test]
async fn a_jobset_created_before_holdfast_is_updatable_and_left_alone() {
    let h = Harness::start("replacement-before", Mode::Plain, false).await;
    let owner = h.trainjob("mnist").await;
    let js = jobset("mnist", Some(&owner), &[("node", None)]);
    let stored = h
        .apply_as_trainer(&js)
        .await
        .expect("create before holdfast");
    assert_eq!(policies(&stored), [None]);

    h.register().await;
    let mut again = js.clone();
    again["spec"]["suspend"] = json!(false);
    let stored = h.apply_as_trainer(&again).await.expect("Trainer's apply");
    assert_eq!(policies(&stored), [None], "no change JobSet would refuse");
    assert_eq!(stored.data["spec"]["suspend"], json!(false));
    let labelled = h
        .jobsets(&h.admin)
        .patch(
            "mnist",
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"labels": {"team": "a"}}})),
        )
        .await
        .expect("merge patch");
    assert_eq!(policies(&labelled), [None]);
    h.finish().await;
}

#[tokio::test]
async fn while_the_webhook_is_down_only_the_writes_it_would_patch_are_refused() {
    let mut h = Harness::start("replacement-outage", Mode::Plain, true).await;
    let owner = h.trainjob("mnist").await;
    let mut js = jobset("mnist", Some(&owner), &[("node", None)]);
    js["spec"]["suspend"] = json!(false);
    let stored = h.apply_as_trainer(&js).await.expect("create");
    // The field the webhook set during Trainer's apply is owned by no field manager: Trainer's
    // next apply, which does not send it, keeps it.
    let owned = serde_json::to_string(&stored.metadata.managed_fields).expect("json");
    assert!(!owned.contains("podReplacementPolicy"), "{owned}");
    h.stop_webhook().await;

    // A hold (plain mode: spec.suspend) reaches the JobSet through Trainer's apply, which
    // keeps the stored Failed and so is not sent to the webhook.
    let mut suspended = js.clone();
    suspended["spec"]["suspend"] = json!(true);
    let stored = h
        .apply_as_trainer(&suspended)
        .await
        .expect("Trainer's apply while the webhook is down");
    assert_eq!(policies(&stored), failed(1));
    assert_eq!(stored.data["spec"]["suspend"], json!(true));

    // Not sent either: a JobSet no TrainJob controls, and a TrainJob's JobSet that asks for
    // Failed everywhere.
    h.jobsets(&h.admin)
        .create(
            &PostParams::default(),
            &dynamic(jobset("unowned", None, &[("node", None)])),
        )
        .await
        .expect("a JobSet no TrainJob controls");
    let owner3 = h.trainjob("third").await;
    h.apply_as_trainer(&jobset("third", Some(&owner3), &[("node", Some(FAILED))]))
        .await
        .expect("a JobSet with Failed everywhere");

    // Refused (fail closed): a new TrainJob's JobSet that would run without the policy
    // (Trainer retries), and a replace that drops it.
    let owner2 = h.trainjob("second").await;
    let created = h
        .apply_as_trainer(&jobset("second", Some(&owner2), &[("node", None)]))
        .await;
    let current = h.jobsets(&h.admin).get("mnist").await.expect("get");
    let mut dropped = suspended.clone();
    dropped["metadata"]["resourceVersion"] = json!(current.metadata.resource_version);
    let replaced = h
        .jobsets(&h.trainer)
        .replace("mnist", &PostParams::default(), &dynamic(dropped))
        .await;
    for (what, r) in [("create", created), ("replace", replaced)] {
        match r {
            Err(kube::Error::Api(s)) => assert!(
                s.message.contains("jobsets.mutate.holdfast.dev"),
                "{what}: {}",
                s.message
            ),
            other => panic!("{what}: expected the failed call to refuse it, got {other:?}"),
        }
    }
    h.finish().await;
}

/// Nothing listens there: every call fails at once, naming the entry.
const DEAD: &str = "https://127.0.0.1:1";

/// Whether the request reached a webhook entry of the chart's: it failed naming
/// `jobsets.mutate.holdfast.dev` (the dead port answers nothing, and the entry fails closed).
fn sent_to_jobsets_mutate(r: &Result<DynamicObject, kube::Error>) -> bool {
    matches!(r, Err(kube::Error::Api(s)) if s.message.contains("jobsets.mutate.holdfast.dev"))
}

/// What the policy would patch on this JobSet request.
fn policy_patches(op: holdfast_core::policy::Operation, old: Option<&Value>, new: &Value) -> bool {
    use holdfast_core::policy::{AdmissionInput, Identities, Resource, UserInfo, mutate};
    let input = AdmissionInput {
        operation: op,
        resource: Resource::JobSet,
        subresource: None,
        name: new["metadata"]["name"]
            .as_str()
            .unwrap_or_default()
            .to_owned(),
        namespace: Some("ns".to_owned()),
        user: UserInfo::new(Identity::Trainer.username()),
        object: Some(new.clone()),
        old_object: old.cloned(),
        dry_run: true,
    };
    let who = Identities::new(
        [Identity::Controller.username()],
        [Identity::Trainer.username()],
        Vec::<String>::new(),
        Vec::<String>::new(),
    );
    !mutate(&input, &who, Mode::Plain, None).is_empty()
}

/// The chart's conditions, evaluated by the apiserver's CEL, send a JobSet CREATE or UPDATE
/// to `jobsets.mutate` exactly when the policy patches it: a catalogue of owners (none, a
/// TrainJob as controller or not, another kind as controller) times replicated Jobs (with and
/// without `Failed`, another value, no Job template spec), every CREATE and every UPDATE
/// from one stored variant to another, as dry runs against the entry pointed at a dead port.
#[tokio::test]
async fn the_charts_conditions_send_a_jobset_request_exactly_when_the_policy_patches_it() {
    use holdfast_core::policy::Operation;
    let mut h = Harness::start("replacement-conditions", Mode::Plain, false).await;
    h.stop_webhook().await;
    let tj = h.trainjob("mnist").await;
    let mut tj_not_controller = tj.clone();
    tj_not_controller["controller"] = json!(false);
    let cm: k8s_openapi::api::core::v1::ConfigMap = Api::namespaced(h.admin.clone(), &h.ns)
        .create(
            &PostParams::default(),
            &serde_json::from_value(json!({"metadata": {"name": "c"}})).unwrap(),
        )
        .await
        .expect("ConfigMap");
    let other = json!({"apiVersion": "v1", "kind": "ConfigMap", "name": "c",
        "uid": cm.metadata.uid.expect("uid"), "controller": true});
    let owners = [None, Some(&tj), Some(&tj_not_controller), Some(&other)];
    let t = Some("TerminatingOrFailed");
    let f = Some(FAILED);
    let job_sets: [&[(&str, Option<&str>)]; 8] = [
        &[],
        &[("node", None)],
        &[("node", f)],
        &[("node", t)],
        &[("node", f), ("launcher", None)],
        &[("node", t), ("launcher", f)],
        &[("node", f), ("launcher", f)],
        &[("launcher", f)],
    ];
    let mut variants: Vec<Value> = Vec::new();
    for owner in owners {
        for jobs in job_sets {
            variants.push(jobset("v", owner, jobs));
        }
        // A replicated Job without a Job template spec.
        let mut bare = jobset("v", owner, &[("node", None)]);
        bare["spec"]["replicatedJobs"][0]["template"] = json!({});
        variants.push(bare);
    }

    // The stored side of every UPDATE, created before the entry is registered.
    let api = h.jobsets(&h.admin);
    let mut stored = Vec::new();
    for (i, v) in variants.iter().enumerate() {
        let mut v = v.clone();
        v["metadata"]["name"] = json!(format!("stored-{i}"));
        if let Ok(s) = api.create(&PostParams::default(), &dynamic(v)).await {
            stored.push(serde_json::to_value(s).expect("json"));
        }
    }
    assert!(
        stored.len() >= 30,
        "the catalogue is stored: {}",
        stored.len()
    );

    let mut registration = h.registration.clone();
    registration.target = Target::Url(DEAD.to_owned());
    registration.install(&h.admin).await.expect("register");
    let dry = PostParams {
        dry_run: true,
        ..Default::default()
    };
    let probe = jobset("probe", Some(&tj), &[("node", None)]);
    let deadline = Instant::now() + Duration::from_secs(30);
    while !sent_to_jobsets_mutate(&api.create(&dry, &dynamic(probe.clone())).await) {
        assert!(Instant::now() < deadline, "the entry did not take effect");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }

    let mut wrong = Vec::new();
    let mut sent = 0;
    let mut total = 0;
    for (i, v) in variants.iter().enumerate() {
        let mut v = v.clone();
        v["metadata"]["name"] = json!(format!("new-{i}"));
        let r = api.create(&dry, &dynamic(v.clone())).await;
        total += 1;
        sent += usize::from(sent_to_jobsets_mutate(&r));
        if sent_to_jobsets_mutate(&r) != policy_patches(Operation::Create, None, &v) {
            wrong.push(format!("CREATE {v}: {r:?}"));
        }
    }
    for old in &stored {
        for v in &variants {
            let mut new = v.clone();
            new["metadata"]["name"] = old["metadata"]["name"].clone();
            new["metadata"]["resourceVersion"] = old["metadata"]["resourceVersion"].clone();
            let name = new["metadata"]["name"].as_str().expect("name").to_owned();
            let r = api.replace(&name, &dry, &dynamic(new.clone())).await;
            total += 1;
            sent += usize::from(sent_to_jobsets_mutate(&r));
            if sent_to_jobsets_mutate(&r) != policy_patches(Operation::Update, Some(old), &new) {
                wrong.push(format!("UPDATE {old} -> {new}: {r:?}"));
            }
        }
    }
    registration.uninstall(&h.admin).await;
    assert!(
        wrong.is_empty(),
        "{} of {total} requests disagree:\n{}",
        wrong.len(),
        wrong.join("\n")
    );
    assert!(sent > 0 && sent < total, "{sent} of {total} sent");
    eprintln!("{sent} of {total} JobSet requests sent to jobsets.mutate, as the policy patches");
    h.finish().await;
}
