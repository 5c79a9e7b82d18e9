//! The two validation engines decide alike. The chart's validating rules run either in
//! holdfast's webhook or as ValidatingAdmissionPolicies (CEL inside the apiserver), chosen by
//! `validation.engine`. Through the real apiserver, every request of the match-conditions
//! catalogue (every CREATE as each identity, a seeded sample of UPDATEs, every ConfigMap
//! DELETE; both modes) is judged by:
//!
//! 1. the policies alone, whose every verdict must equal `holdfast_core::policy::validate`'s;
//! 2. each engine registered as the chart registers it (`webhook`, `policy`, `both`: the
//!    policies together with the webhook entries that engine keeps), with holdfast's webhook
//!    serving, whose verdicts must all be the same.
//!
//! The requests are sent as the validating side sees them: after the mutating webhook's
//! protective patch (the match-conditions test proves that patch is always made).

use std::collections::BTreeMap;
use std::time::Duration;

use futures::StreamExt;
use holdfast_core::mode::Mode;
use holdfast_core::policy::{queue_check, requests_check, unsuspend_check, validate};
use holdfast_tests::control_plane::Options;
use holdfast_tests::in_process_webhook::InProcessWebhook;
use holdfast_tests::registration::{Engine, Namespaces, Registration, Target, refused_by_policy};
use holdfast_tests::wait::wait_for;
use holdfast_tests::{ControlPlane, Identity};
use serde_json::json;

use crate::match_conditions::{Case, World, cases, requests_counted, who};

/// Who refused a request.
#[derive(Clone, Debug, PartialEq, Eq)]
enum Verdict {
    Allowed,
    /// By a ValidatingAdmissionPolicy, with its message.
    ByPolicy(String),
    /// By holdfast's webhook, with its message.
    ByWebhook(String),
}

impl Verdict {
    fn allowed(&self) -> bool {
        *self == Verdict::Allowed
    }
}

async fn judge(case: &Case, client: &kube::Client, mode: Mode) -> Result<Verdict, String> {
    match case.attempt(client, case.mutated(mode, true)).await {
        Ok(()) => Ok(Verdict::Allowed),
        Err(kube::Error::Api(s)) if refused_by_policy(&s.message) => {
            Ok(Verdict::ByPolicy(s.message))
        }
        Err(kube::Error::Api(s))
            if s.message
                .contains("validate.holdfast.dev\" denied the request") =>
        {
            Ok(Verdict::ByWebhook(s.message))
        }
        Err(e) => Err(format!("answered by neither engine: {e}")),
    }
}

/// A TrainJob CREATE by alice carrying `annotations` and `labels`: the registration probes.
fn probe(ns: &str, annotations: &[(&str, &str)], labels: &[(&str, &str)]) -> Case {
    crate::match_conditions::probe(
        ns,
        annotations,
        labels,
        json!({"runtimeRef": {"name": "rt"}, "suspend": true}),
    )
}

/// Waits (bounded) until `probe` gets an answer `accept` takes.
async fn wait_until(
    what: &str,
    probe: &Case,
    client: &kube::Client,
    mode: Mode,
    accept: impl Fn(&Verdict) -> bool,
) {
    wait_for(what, Duration::from_secs(60), || async {
        judge(probe, client, mode)
            .await
            .is_ok_and(|v| accept(&v))
            .then_some(())
    })
    .await;
}

/// What one pass registers.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Pass {
    /// The policies alone: no webhook entry.
    PoliciesAlone,
    /// An engine, as the chart registers it.
    Engine(Engine),
}

/// The run's control plane, its namespace and the catalogue in it.
struct Scene {
    cp: ControlPlane,
    admin: kube::Client,
    world: World,
    ns: String,
    /// An unsuspend of a TrainJob whose Workload carries a hold: what plain mode's lookup
    /// entry refuses (see [`held_probe`]).
    held: Case,
}

/// A TrainJob carrying holdfast state (suspended, opened) and a Workload it owns carrying a
/// hold, stored as the admin before anything is registered; the probe is alice's unsuspend
/// of the job, which only the plain-mode Workload lookup refuses (under the policy engine the
/// lookup's entry, `held-workloads.validate`, is plain mode's only webhook entry). Neither
/// object is in the catalogue, so no case reads them.
async fn held_probe(admin: &kube::Client, ns: &str) -> Case {
    use kube::api::{Api, DynamicObject, PostParams};
    let trainjobs: Api<DynamicObject> =
        Api::namespaced_with(admin.clone(), ns, &holdfast_cluster::resources::trainjob());
    let job: DynamicObject = serde_json::from_value(json!({
        "apiVersion": "trainer.kubeflow.org/v1alpha1", "kind": "TrainJob",
        "metadata": {"name": "held-probe", "annotations": {"holdfast.dev/opened": "true"}},
        "spec": {"runtimeRef": {"name": "rt"}, "suspend": true}
    }))
    .expect("trainjob");
    let stored = trainjobs
        .create(&PostParams::default(), &job)
        .await
        .expect("the probe's TrainJob");
    let uid = stored.metadata.uid.clone().expect("uid");
    let workload: DynamicObject = serde_json::from_value(json!({
        "apiVersion": holdfast_tests::kueue::KUEUE_API_VERSION, "kind": "Workload",
        "metadata": {"name": "held-probe", "labels": {"kueue.x-k8s.io/job-uid": uid},
            "annotations": {"holdfast.dev/hold-instance": "1"},
            "ownerReferences": [{"apiVersion": "trainer.kubeflow.org/v1alpha1", "kind": "TrainJob",
                "name": "held-probe", "uid": uid, "controller": true}]},
        "spec": {"queueName": "q", "active": false, "podSets": [{"name": "main", "count": 1,
            "template": {"spec": {"containers": [{"name": "c", "image": "i"}]}}}]}
    }))
    .expect("workload");
    Api::<DynamicObject>::namespaced_with(
        admin.clone(),
        ns,
        &holdfast_cluster::resources::workload(),
    )
    .create(&PostParams::default(), &workload)
    .await
    .expect("the probe's Workload");
    let old = serde_json::to_value(&stored).expect("json");
    let mut new = old.clone();
    new["spec"]["suspend"] = json!(false);
    Case {
        resource: holdfast_core::policy::Resource::TrainJob,
        op: holdfast_core::policy::Operation::Update,
        user: "alice",
        old: Some(old),
        new: Some(new),
    }
}

impl Scene {
    /// Registers `pass` for the namespace, waits until it judges, sends every case, and
    /// unregisters.
    async fn run_pass(
        &self,
        cases: &[Case],
        mode: Mode,
        pass: Pass,
        webhook: &InProcessWebhook,
    ) -> Vec<Result<Verdict, String>> {
        let Scene {
            cp,
            admin,
            world,
            ns,
            held,
        } = self;
        let engine = match pass {
            Pass::PoliciesAlone => Engine::Policy,
            Pass::Engine(e) => e,
        };
        let registration = Registration::new(
            format!("holdfast-engines-{mode}"),
            Target::Url(webhook.url()),
            cp.ca_pem().as_bytes().to_vec(),
        )
        .with_mode(mode)
        .with_engine(engine)
        .with_namespaces(Namespaces::Only(vec![ns.to_owned()]));
        let alice = &world.clients["alice"];
        let forged = probe(ns, &[("holdfast.dev/hold-instance", "1")], &[]);
        // The webhook entries first, then the policies: the apiserver asks the policies before
        // the webhooks, so once the policies judge the forged hold the webhook is not asked.
        let validating = registration.validating();
        let entries = validating.webhooks.as_ref().map_or(0, Vec::len);
        if pass != Pass::PoliciesAlone && entries > 0 {
            kube::Api::<k8s_openapi::api::admissionregistration::v1::ValidatingWebhookConfiguration>::all(
            admin.clone(),
        )
        .create(&Default::default(), &validating)
        .await
        .expect("register the validating entries");
            // Policy engine: only the lookups' entries remain. Kueue mode: a managed queued
            // TrainJob reaches the queue check (refused: this webhook watches no queues);
            // plain mode: an unsuspend of a job whose Workload carries a hold.
            let webhook_probe = if engine == Engine::Policy && mode == Mode::Plain {
                held.clone()
            } else if engine == Engine::Policy {
                probe(
                    ns,
                    &[],
                    &[
                        ("holdfast.dev/managed", "true"),
                        ("kueue.x-k8s.io/queue-name", "q"),
                    ],
                )
            } else {
                forged.clone()
            };
            wait_until(
                "the webhook entries judge",
                &webhook_probe,
                alice,
                mode,
                |v| matches!(v, Verdict::ByWebhook(_)),
            )
            .await;
        }
        if engine.policies() {
            registration
                .install_policies(admin)
                .await
                .expect("register the policies");
            wait_until("the policies judge", &forged, alice, mode, |v| {
                matches!(v, Verdict::ByPolicy(_))
            })
            .await;
            assert_type_checked(admin, &registration).await;
        }
        let verdicts: Vec<(usize, Result<Verdict, String>)> =
            futures::stream::iter(cases.iter().enumerate())
                .map(|(i, case)| {
                    let client = world.clients[case.user].clone();
                    async move { (i, judge(case, &client, mode).await) }
                })
                .buffer_unordered(16)
                .collect()
                .await;
        registration.uninstall(admin).await;
        wait_until("the registrations are gone", &forged, alice, mode, |v| {
            v.allowed()
        })
        .await;
        let mut ordered = vec![Err("not sent".to_owned()); cases.len()];
        for (i, v) in verdicts {
            ordered[i] = v;
        }
        ordered
    }
}

/// The apiserver type-checks a policy's CEL against the schemas of the resources it matches
/// (TrainJob's and Workload's CRDs, ConfigMap's built-in one) and reports what does not fit
/// as warnings: a misspelt field would be a runtime error, which `failurePolicy: Fail` turns
/// into a refusal. It skips rules whose versions are a wildcard, as the TrainJob and Workload
/// policies' are (they must match every served version), so each policy is checked as a copy with the versions
/// pinned (`v1alpha1` TrainJobs, `v1beta2` Workloads; not bound, so it judges nothing).
/// There must be no warning.
async fn assert_type_checked(admin: &kube::Client, registration: &Registration) {
    for p in registration.policies() {
        let policy = serde_json::to_value(&p).expect("policy as JSON");
        let name = p.metadata.name.clone().unwrap_or_default();
        let warnings = holdfast_tests::registration::type_check_warnings(admin, &policy).await;
        assert!(
            warnings.as_array().is_none_or(Vec::is_empty),
            "{name}-typecheck: the apiserver's type check warns: {warnings:#}"
        );
    }
}

#[tokio::test]
async fn the_admission_policies_and_the_webhook_decide_every_request_alike() {
    // The policies' type check runs in kube-controller-manager.
    let cp = holdfast_tests::holdfast::owned_control_plane_with(Options {
        controllers: vec!["validatingadmissionpolicy-status-controller".to_owned()],
        ..Default::default()
    })
    .await;
    let admin = cp.client(Identity::Admin).await.expect("admin");
    let ns = cp.namespace("engines").await.expect("namespace");
    let world = World::create(&cp, &admin, &ns).await;
    let held = held_probe(&admin, &ns).await;
    let scene = Scene {
        cp,
        admin,
        world,
        ns,
        held,
    };
    let (cp, world, ns) = (&scene.cp, &scene.world, &scene.ns);

    let mut failures = Vec::new();
    let mut counts: BTreeMap<String, usize> = BTreeMap::new();
    for (mode, seed) in [(Mode::Plain, 20261203), (Mode::Kueue, 20261204)] {
        let cases = cases(&world.stored, &world.catalogues, ns, seed);
        let webhook = InProcessWebhook::start(cp, mode, false)
            .await
            .expect("the webhook serves");
        let alone = scene
            .run_pass(&cases, mode, Pass::PoliciesAlone, &webhook)
            .await;
        let mut engines = Vec::new();
        for engine in Engine::ALL {
            let verdicts = scene
                .run_pass(&cases, mode, Pass::Engine(engine), &webhook)
                .await;
            engines.push((engine, verdicts));
        }
        webhook.stop().await.expect("the webhook stops");

        for (i, case) in cases.iter().enumerate() {
            *counts.entry(format!("{mode} requests")).or_default() += 1;
            let input = case.input(case.mutated(mode, true));
            let rust = validate(&input, &who(), mode);
            let expected = rust.is_allowed();
            match &alone[i] {
                Ok(v) if v.allowed() == expected => {
                    if let Verdict::ByPolicy(message) = v {
                        *counts.entry(format!("{mode} refused")).or_default() += 1;
                        // The message expression ran (a failed one falls back to a generic
                        // text without the user).
                        if !message.contains(case.user) {
                            failures.push(format!(
                                "[{mode}] the policy's message does not name the user: {message}"
                            ));
                        }
                        // The apiserver reports the first refusing validation: the rule
                        // the webhook refuses by.
                        let want = rust.rule().map(|r| r.tag());
                        if want.as_deref().is_none_or(|tag| !message.ends_with(tag)) {
                            failures.push(format!(
                                "[{mode}] the policy refused by another rule than the webhook's {want:?}: {message}"
                            ));
                        }
                    }
                }
                Ok(v) => failures.push(format!(
                    "[{mode}] the policies alone say {v:?}, holdfast_core::policy::validate says allowed={expected}: {case:?}"
                )),
                Err(e) => failures.push(format!("[{mode}] policies alone: {e}: {case:?}")),
            }
            let lookup = queue_check(&input, &who(), mode).is_some()
                || unsuspend_check(&input, &who(), mode).is_some()
                || requests_check(&input, mode).is_some();
            if lookup {
                *counts.entry(format!("{mode} with a lookup")).or_default() += 1;
            }
            let answers: Vec<(Engine, Option<bool>)> = engines
                .iter()
                .map(|(e, verdicts)| (*e, verdicts[i].as_ref().ok().map(Verdict::allowed)))
                .collect();
            for (engine, verdicts) in &engines {
                if let Err(e) = &verdicts[i] {
                    failures.push(format!("[{mode} {engine:?}] {e}: {case:?}"));
                }
            }
            let first = answers[0].1;
            if answers.iter().any(|(_, a)| *a != first) {
                failures.push(format!(
                    "[{mode}] the engines disagree {answers:?}: {case:?}"
                ));
            }
            // Without a lookup the webhook's verdict is the policy's own.
            if !lookup && first.is_some_and(|a| a != expected) {
                failures.push(format!(
                    "[{mode}] the webhook engine says allowed={first:?}, validate says {expected}: {case:?}"
                ));
            }
        }
    }
    println!("{counts:#?}");
    let requests = requests_counted(&counts);
    assert!(requests > 8_000, "too few requests judged: {counts:?}");
    for mode in [Mode::Plain, Mode::Kueue] {
        assert!(
            counts.get(&format!("{mode} refused")).copied().unwrap_or(0) > 500,
            "too few refusals in {mode} mode to compare: {counts:?}"
        );
    }
    assert!(
        failures.is_empty(),
        "{} disagreements; e.g.:\n{}",
        failures.len(),
        failures
            .iter()
            .take(12)
            .cloned()
            .collect::<Vec<_>>()
            .join("\n")
    );
}
