//! The chart's match conditions, evaluated by the real apiserver's CEL: every request the
//! policy refuses or patches is sent to the webhook (to a protected entry, `Fail`, where the
//! verdict or patch protects something; to any entry where it is only a best-effort lookup
//! or record), and the controller's and Kueue's writes that the policy allows are not sent to
//! a protected entry, so a holdfast outage does not stop them.
//!
//! How: on a control plane of its own (no Kueue webhooks to muddle the answers), the test
//! creates a catalogue of TrainJobs, Workloads and ConfigMaps (holdfast's annotations, labels
//! and finalizer, Kueue's queue and prebuilt-Workload keys, TrainJob owners, `suspend` and
//! `active` in every state), then registers the chart's entries, one group at a time,
//! pointed at a port where nothing listens, every entry `Fail`. A dry-run request as each
//! identity (impersonated, with `system:masters` so RBAC never answers first) then either
//! succeeds (no entry matched) or fails naming the entry that matched. The expected answer is
//! the policy's own (`holdfast_core::policy`) on the same objects.

use std::collections::BTreeMap;
use std::time::Duration;

use futures::StreamExt;
use holdfast_core::mode::Mode;
use holdfast_core::policy::identities::{GARBAGE_COLLECTOR, NAMESPACE_CONTROLLER};
use holdfast_core::policy::{
    AdmissionInput, Identities, Operation, Resource, UserInfo, mutate, queue_check, requests_check,
    unsuspend_check, validate,
};
use holdfast_tests::registration::{Engine, Namespaces, Registration, Target};
use holdfast_tests::wait::wait_for;
use holdfast_tests::{ControlPlane, Identity};
use k8s_openapi::api::admissionregistration::v1::{
    MutatingWebhookConfiguration, ValidatingWebhookConfiguration,
};
use kube::api::{Api, ApiResource, DeleteParams, DynamicObject, PostParams};
use kube::config::{KubeConfigOptions, Kubeconfig};
use rand::rngs::SmallRng;
use rand::{RngExt, SeedableRng};
use serde_json::{Value, json};

/// Nothing listens there: every call fails at once, naming the entry.
const DEAD: &str = "https://127.0.0.1:1";
const CONFIG: &str = "holdfast-match-conditions";
const KUEUE: &str = "system:serviceaccount:kueue-system:kueue-controller-manager";
/// UPDATE pairs sampled per resource, identity and mode (ConfigMaps: every pair).
const UPDATE_SAMPLES: usize = 150;
/// The runtime resourceVersion the mutating side records at a CREATE, when it could read one.
const RECORDED_VERSION: &str = "77";

pub(crate) fn who() -> Identities {
    Identities::new(
        [Identity::Controller.username()],
        [Identity::Trainer.username()],
        [GARBAGE_COLLECTOR, NAMESPACE_CONTROLLER],
        [KUEUE],
    )
}

pub(crate) fn users() -> [&'static str; 5] {
    [
        Identity::Controller.username(),
        Identity::Trainer.username(),
        GARBAGE_COLLECTOR,
        KUEUE,
        "alice",
    ]
}

pub(crate) fn api_resource(resource: &Resource) -> ApiResource {
    match resource {
        Resource::TrainJob => holdfast_cluster::resources::trainjob(),
        Resource::Workload => holdfast_cluster::resources::workload(),
        _ => ApiResource::erase::<k8s_openapi::api::core::v1::ConfigMap>(&()),
    }
}

/// The metadata and spec of one catalogue object (no name).
#[derive(Clone, Debug)]
pub(crate) struct Variant {
    pub(crate) annotations: BTreeMap<String, String>,
    pub(crate) labels: BTreeMap<String, String>,
    pub(crate) finalizers: Vec<String>,
    pub(crate) owners: Vec<Value>,
    /// The spec (ConfigMaps: the top-level content fields, `data` and `binaryData`).
    pub(crate) spec: Value,
    /// ConfigMaps: the name, which the snapshot rule reads.
    pub(crate) name: Option<String>,
}

pub(crate) fn pairs(kv: &[(&str, &str)]) -> BTreeMap<String, String> {
    kv.iter()
        .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
        .collect()
}

/// The catalogue of `resource`: holdfast's annotations, labels and finalizer, Kueue's keys,
/// TrainJob owners (`owners`: `(name, uid)` of two real TrainJobs), and each resource's
/// `suspend` or `active` in every state.
pub(crate) fn catalogue(resource: &Resource, owners: &[(String, String)]) -> Vec<Variant> {
    if *resource == Resource::ConfigMap {
        let mut out = Vec::new();
        for name in ["settings", "mnist-runtime-snapshot"] {
            for a in [&[][..], &[("holdfast.dev/runtime-uid", "u")]] {
                for l in [
                    &[][..],
                    &[("holdfast.dev/runtime-snapshot", "true")],
                    &[("holdfast.dev/runtime-snapshot", "false")],
                    &[("app", "x")],
                ] {
                    out.push(Variant {
                        annotations: pairs(a),
                        labels: pairs(l),
                        finalizers: Vec::new(),
                        owners: Vec::new(),
                        spec: json!({"data": {"runtime": "kind: A\n"}}),
                        name: Some(name.to_owned()),
                    });
                }
            }
            // A snapshot's content rewritten: other data, binary data, none.
            for content in [
                json!({"data": {"runtime": "kind: B\n"}}),
                json!({"data": {"runtime": "kind: A\n"}, "binaryData": {"b": "AAEC"}}),
                json!({}),
            ] {
                out.push(Variant {
                    annotations: BTreeMap::new(),
                    labels: BTreeMap::new(),
                    finalizers: Vec::new(),
                    owners: Vec::new(),
                    spec: content,
                    name: Some(name.to_owned()),
                });
            }
        }
        // Mixed, seeded: every dimension at once, and owned by a TrainJob (as controller or
        // not), which decides whether a snapshot may be deleted.
        let mut rng = SmallRng::seed_from_u64(7);
        for _ in 0..MIXED {
            let v = &out[rng.random_range(0..out.len())];
            let mut v = v.clone();
            let other = out[rng.random_range(0..out.len())].clone();
            v.labels.extend(other.labels);
            v.annotations.extend(other.annotations);
            v.owners = random_owners(&mut rng, owners);
            out.push(v);
        }
        return out;
    }
    let annotations: &[&[(&str, &str)]] = &[
        &[],
        &[
            ("holdfast.dev/hold-instance", "3"),
            ("holdfast.dev/hold-reason", "x"),
        ],
        &[
            ("holdfast.dev/hold-instance", "3"),
            (
                "holdfast.dev/hold-holder",
                "system:serviceaccount:team-a:dispatch",
            ),
        ],
        &[(
            "holdfast.dev/hold-mark",
            "instance=3 deadline=2026-12-05T00:10:00Z",
        )],
        &[("holdfast.dev/opened", "true")],
        &[("holdfast.dev/attempt", "2")],
        &[("holdfast.dev/admitted-runtime-resource-version", "5")],
        &[("example.com/hold-instance", "1")],
        &[("kueue.x-k8s.io/prebuilt-workload-name", "w")],
    ];
    let labels: &[&[(&str, &str)]] = &[
        &[],
        &[("holdfast.dev/managed", "true")],
        &[("holdfast.dev/managed", "false")],
        &[
            ("holdfast.dev/managed", "true"),
            ("kueue.x-k8s.io/queue-name", "q"),
        ],
        &[("kueue.x-k8s.io/queue-name", "q")],
        &[("kueue.x-k8s.io/queue-name", "r")],
        &[("kueue.x-k8s.io/prebuilt-workload-name", "w")],
        &[("kueue.x-k8s.io/job-uid", "u-1")],
        &[("kueue.x-k8s.io/job-uid", "")],
        &[("app", "x")],
    ];
    let specs: Vec<Value> = match resource {
        Resource::TrainJob => vec![
            json!({"runtimeRef": {"name": "rt"}}),
            json!({"runtimeRef": {"name": "rt"}, "suspend": true}),
            json!({"runtimeRef": {"name": "rt"}, "suspend": false}),
        ],
        _ => {
            let base = json!({"queueName": "q", "podSets": [{"name": "main", "count": 1,
                "template": {"spec": {"containers": [{"name": "c", "image": "i"}]}}}]});
            let with = |active: Option<bool>| {
                let mut s = base.clone();
                if let Some(a) = active {
                    s["active"] = json!(a);
                }
                s
            };
            vec![with(None), with(Some(false)), with(Some(true))]
        }
    };
    let mut out = Vec::new();
    for a in annotations {
        for l in labels {
            for spec in &specs {
                out.push(Variant {
                    annotations: pairs(a),
                    labels: pairs(l),
                    finalizers: Vec::new(),
                    owners: Vec::new(),
                    spec: spec.clone(),
                    name: None,
                });
            }
        }
    }
    // Finalizers and owners, on a plain object and on a held one.
    for held in [false, true] {
        let base = Variant {
            annotations: if held {
                pairs(&[("holdfast.dev/hold-instance", "3")])
            } else {
                BTreeMap::new()
            },
            labels: BTreeMap::new(),
            finalizers: Vec::new(),
            owners: Vec::new(),
            spec: specs[1].clone(),
            name: None,
        };
        for finalizer in ["holdfast.dev/hold", "kueue.x-k8s.io/resource-in-use"] {
            let mut v = base.clone();
            v.finalizers = vec![finalizer.to_owned()];
            out.push(v);
        }
        for (name, uid) in owners {
            let mut v = base.clone();
            v.owners = vec![json!({"apiVersion": "trainer.kubeflow.org/v1alpha1",
                "kind": "TrainJob", "name": name, "uid": uid, "controller": true})];
            out.push(v.clone());
            v.labels = pairs(&[("kueue.x-k8s.io/job-uid", uid)]);
            out.push(v);
        }
    }
    // Mixed, seeded: two variants' annotations and labels at once, with finalizers, owners and
    // a job-uid label drawn independently (the single-dimension variants above never combine
    // them).
    let mut rng = SmallRng::seed_from_u64(match resource {
        Resource::TrainJob => 11,
        _ => 13,
    });
    let base = out.len();
    for _ in 0..MIXED {
        let mut v = out[rng.random_range(0..base)].clone();
        let other = &out[rng.random_range(0..base)];
        v.annotations.extend(other.annotations.clone());
        v.labels.extend(other.labels.clone());
        v.finalizers = ["holdfast.dev/hold", "kueue.x-k8s.io/resource-in-use"]
            .into_iter()
            .filter(|_| rng.random_bool(0.3))
            .map(str::to_owned)
            .collect();
        v.owners = random_owners(&mut rng, owners);
        if let Some(uid) = v.owners.first().and_then(|o| o["uid"].as_str())
            && rng.random_bool(0.5)
        {
            v.labels
                .insert("kueue.x-k8s.io/job-uid".to_owned(), uid.to_owned());
        }
        out.push(v);
    }
    out
}

/// Mixed variants per resource in the catalogue.
const MIXED: usize = 40;

/// Zero to two TrainJob ownerReferences to `owners`, at most one of them the controller.
fn random_owners(rng: &mut SmallRng, owners: &[(String, String)]) -> Vec<Value> {
    let mut out = Vec::new();
    let mut controller = false;
    for (name, uid) in owners {
        if rng.random_bool(0.4) {
            // At most one controller reference (the apiserver refuses two).
            let is_controller = !controller && rng.random_bool(0.5);
            controller |= is_controller;
            out.push(
                json!({"apiVersion": "trainer.kubeflow.org/v1alpha1", "kind": "TrainJob",
                "name": name, "uid": uid, "controller": is_controller}),
            );
        }
    }
    out
}

/// `v` written over `object`'s metadata and spec (or data), keeping its name and identity.
pub(crate) fn apply(object: &Value, v: &Variant, resource: &Resource) -> Value {
    let mut o = object.clone();
    let meta = &mut o["metadata"];
    meta["annotations"] = json!(v.annotations);
    meta["labels"] = json!(v.labels);
    meta["finalizers"] = json!(v.finalizers);
    meta["ownerReferences"] = json!(v.owners);
    match resource {
        // A ConfigMap's variant gives its top-level content fields.
        Resource::ConfigMap => {
            if let Some(top) = o.as_object_mut() {
                top.remove("data");
                top.remove("binaryData");
                for (k, value) in v.spec.as_object().into_iter().flatten() {
                    top.insert(k.clone(), value.clone());
                }
            }
        }
        _ => o["spec"] = v.spec.clone(),
    }
    o
}

pub(crate) fn fresh(name: &str, v: &Variant, resource: &Resource, ns: &str) -> Value {
    let ar = api_resource(resource);
    let skeleton = json!({"apiVersion": ar.api_version, "kind": ar.kind,
        "metadata": {"name": name, "namespace": ns}});
    apply(&skeleton, v, resource)
}

/// A client acting as `user` (impersonated by the admin, with `system:masters` so RBAC never
/// answers before admission).
pub(crate) async fn as_user(cp: &ControlPlane, user: &str) -> kube::Client {
    let kc = Kubeconfig::read_from(cp.kubeconfig(Identity::Admin)).expect("kubeconfig");
    let mut cfg = kube::Config::from_custom_kubeconfig(kc, &KubeConfigOptions::default())
        .await
        .expect("config");
    cfg.auth_info.impersonate = Some(user.to_owned());
    cfg.auth_info.impersonate_groups = Some(vec![
        "system:masters".to_owned(),
        "system:authenticated".to_owned(),
    ]);
    kube::Client::try_from(cfg).expect("client")
}

/// Which group of entries is registered in a pass.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Pass {
    MutatingProtected,
    MutatingBestEffort,
    ValidatingProtected,
    ValidatingBestEffort,
}

impl Pass {
    const ALL: [Pass; 4] = [
        Pass::MutatingProtected,
        Pass::MutatingBestEffort,
        Pass::ValidatingProtected,
        Pass::ValidatingBestEffort,
    ];

    fn mutating(self) -> bool {
        matches!(self, Pass::MutatingProtected | Pass::MutatingBestEffort)
    }

    fn protected(self) -> bool {
        matches!(self, Pass::MutatingProtected | Pass::ValidatingProtected)
    }
}

/// The chart's entries of `pass` (as `engine` renders them), every one `Fail`, pointed at
/// [`DEAD`], for namespace `ns`.
async fn register(admin: &kube::Client, mode: Mode, engine: Engine, pass: Pass, ns: &str) -> usize {
    let reg = Registration::new(CONFIG, Target::Url(DEAD.into()), b"unused".to_vec())
        .with_mode(mode)
        .with_engine(engine)
        .with_namespaces(Namespaces::Only(vec![ns.to_owned()]));
    let (config, ar) = if pass.mutating() {
        (
            serde_json::to_value(reg.mutating()),
            ApiResource::erase::<MutatingWebhookConfiguration>(&()),
        )
    } else {
        (
            serde_json::to_value(reg.validating()),
            ApiResource::erase::<ValidatingWebhookConfiguration>(&()),
        )
    };
    let mut config = config.expect("configuration as JSON");
    let Some(hooks) = config["webhooks"].as_array_mut() else {
        return 0;
    };
    // Not the arming probe's entry: it sends only the controller's labelled dry run.
    hooks.retain(|w| {
        w["name"] != holdfast_core::arming::PROBE_ENTRY
            && (w["failurePolicy"] == "Fail") == pass.protected()
    });
    hooks
        .iter_mut()
        .for_each(|w| w["failurePolicy"] = json!("Fail"));
    let n = hooks.len();
    if n > 0 {
        let config: DynamicObject = serde_json::from_value(config).expect("configuration");
        Api::<DynamicObject>::all_with(admin.clone(), &ar)
            .create(&PostParams::default(), &config)
            .await
            .expect("register");
    }
    n
}

async fn unregister(admin: &kube::Client) {
    let dp = DeleteParams::default();
    let _ = Api::<MutatingWebhookConfiguration>::all(admin.clone())
        .delete(CONFIG, &dp)
        .await;
    let _ = Api::<ValidatingWebhookConfiguration>::all(admin.clone())
        .delete(CONFIG, &dp)
        .await;
}

/// One request of the run.
#[derive(Clone, Debug)]
pub(crate) struct Case {
    pub(crate) resource: Resource,
    pub(crate) op: Operation,
    pub(crate) user: &'static str,
    pub(crate) old: Option<Value>,
    pub(crate) new: Option<Value>,
}

impl Case {
    pub(crate) fn input(&self, object: Option<Value>) -> AdmissionInput {
        let name = object
            .as_ref()
            .or(self.old.as_ref())
            .and_then(|o| o.pointer("/metadata/name"))
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_owned();
        AdmissionInput {
            operation: self.op,
            resource: self.resource.clone(),
            subresource: None,
            name,
            namespace: self
                .old
                .as_ref()
                .or(self.new.as_ref())
                .and_then(|o| o.pointer("/metadata/namespace"))
                .and_then(Value::as_str)
                .map(str::to_owned),
            user: UserInfo::new(self.user),
            object,
            old_object: self.old.clone(),
            dry_run: true,
        }
    }

    /// The object the validating entries are sent: after the mutating webhook's protective
    /// patch, without the best-effort record (as while the webhook is down, where the
    /// best-effort entries matter; with the record a CREATE carries holdfast state and goes
    /// to `jobs.validate`, which runs the same checks and fails closed).
    pub(crate) fn mutated(&self, mode: Mode, patched: bool) -> Option<Value> {
        let mut o = self.new.clone()?;
        if !patched {
            return Some(o);
        }
        let patch = mutate(&self.input(self.new.clone()), &who(), mode, None).patch;
        json_patch::patch(&mut o, &patch).expect("the policy's own patch applies");
        Some(o)
    }

    /// What the policy needs of `pass`: `(protected, any)` — must reach a protected entry;
    /// must reach some entry.
    fn needs(&self, mode: Mode, pass: Pass, patched: bool) -> (bool, bool) {
        let who = who();
        if pass.mutating() {
            let input = self.input(self.new.clone());
            let protective = !mutate(&input, &who, mode, None).is_empty();
            let any = !mutate(&input, &who, mode, Some(RECORDED_VERSION)).is_empty();
            (protective, protective || any)
        } else {
            let input = self.input(self.mutated(mode, patched));
            let refused = !validate(&input, &who, mode).is_allowed();
            let lookup = queue_check(&input, &who, mode).is_some()
                || unsuspend_check(&input, &who, mode).is_some();
            let protected = refused || requests_nothing(&input, mode);
            (protected, protected || lookup)
        }
    }

    /// `patched`: the protected mutating entry was sent this request, so the validating
    /// entries see its patch.
    async fn send(&self, client: &kube::Client, mode: Mode, pass: Pass, patched: bool) -> Sent {
        let object = if pass.mutating() {
            self.new.clone()
        } else {
            self.mutated(mode, patched)
        };
        self.deliver(client, object).await
    }

    /// Sends the request with `object` as its new object, a dry run.
    async fn deliver(&self, client: &kube::Client, object: Option<Value>) -> Sent {
        match self.attempt(client, object).await {
            Ok(()) => Sent::NotMatched,
            Err(kube::Error::Api(s)) if s.message.contains("failed calling webhook") => {
                Sent::Matched
            }
            Err(e) => Sent::Other(format!("{e}")),
        }
    }

    /// Sends the request with `object` as its new object, a dry run, and gives the answer.
    pub(crate) async fn attempt(
        &self,
        client: &kube::Client,
        object: Option<Value>,
    ) -> Result<(), kube::Error> {
        let ar = api_resource(&self.resource);
        let ns = self
            .old
            .as_ref()
            .or(self.new.as_ref())
            .and_then(|o| o.pointer("/metadata/namespace"))
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_owned();
        let api: Api<DynamicObject> = Api::namespaced_with(client.clone(), &ns, &ar);
        let pp = PostParams {
            dry_run: true,
            ..Default::default()
        };
        let to_dynamic =
            |v: Value| -> DynamicObject { serde_json::from_value(v).expect("dynamic object") };
        match self.op {
            Operation::Create => api
                .create(&pp, &to_dynamic(object.expect("new")))
                .await
                .map(|_| ()),
            Operation::Update => {
                let o = object.expect("new");
                let name = o["metadata"]["name"].as_str().expect("name").to_owned();
                api.replace(&name, &pp, &to_dynamic(o)).await.map(|_| ())
            }
            _ => {
                let name = self.old.as_ref().expect("old")["metadata"]["name"]
                    .as_str()
                    .expect("name")
                    .to_owned();
                let dp = DeleteParams {
                    dry_run: true,
                    ..Default::default()
                };
                api.delete(&name, &dp).await.map(|_| ())
            }
        }
    }
}

#[derive(Clone, Debug, PartialEq, Eq)]
enum Sent {
    Matched,
    NotMatched,
    Other(String),
}

/// Whether `o` carries holdfast state: a `holdfast.dev/` annotation, label or finalizer.
fn carries_state(o: Option<&Value>) -> bool {
    o.is_some_and(|o| {
        ["annotations", "labels"].iter().any(|m| {
            o["metadata"][m]
                .as_object()
                .is_some_and(|a| a.keys().any(|k| k.starts_with("holdfast.dev/")))
        }) || o["metadata"]["finalizers"].as_array().is_some_and(|f| {
            f.iter()
                .any(|f| f.as_str().is_some_and(|f| f.starts_with("holdfast.dev/")))
        })
    })
}

/// Whether `case` adds, removes or changes a `holdfast.dev/` annotation, label or finalizer
/// (a CREATE: carries one), or a TrainJob's queue keys.
fn changes_state_or_queue(case: &Case) -> bool {
    let empty = json!({});
    let old = case.old.as_ref().unwrap_or(&empty);
    let new = case.new.as_ref().unwrap_or(&empty);
    let keys = |o: &Value, field: &str, prefix: &str| -> BTreeMap<String, Value> {
        match &o["metadata"][field] {
            Value::Object(m) => m
                .iter()
                .filter(|(k, _)| k.starts_with(prefix))
                .map(|(k, v)| (k.clone(), v.clone()))
                .collect(),
            Value::Array(a) => a
                .iter()
                .filter_map(Value::as_str)
                .filter(|f| f.starts_with(prefix))
                .map(|f| (f.to_owned(), Value::Null))
                .collect(),
            _ => BTreeMap::new(),
        }
    };
    let differs = |field: &str, prefix: &str| keys(old, field, prefix) != keys(new, field, prefix);
    ["annotations", "labels", "finalizers"]
        .iter()
        .any(|f| differs(f, "holdfast.dev/"))
        || (case.resource == Resource::TrainJob
            && (differs("labels", "kueue.x-k8s.io/queue-name")
                || differs("labels", "kueue.x-k8s.io/prebuilt-workload-name")
                || differs("annotations", "kueue.x-k8s.io/prebuilt-workload-name")))
}

/// The run's requests for `mode`: every CREATE of the catalogue as each identity, a seeded
/// sample of UPDATE pairs (every pair for ConfigMaps), and every DELETE of a ConfigMap.
pub(crate) fn cases(
    stored: &BTreeMap<String, Vec<(Value, Variant)>>,
    catalogues: &BTreeMap<String, Vec<Variant>>,
    ns: &str,
    seed: u64,
) -> Vec<Case> {
    let mut rng = SmallRng::seed_from_u64(seed);
    let mut out = Vec::new();
    for resource in [Resource::TrainJob, Resource::Workload, Resource::ConfigMap] {
        let key = format!("{resource:?}");
        let olds = &stored[&key];
        let news = &catalogues[&key];
        for user in users() {
            for (i, v) in news.iter().enumerate() {
                let name = v.name.clone().unwrap_or_else(|| format!("new-{i}"));
                out.push(Case {
                    resource: resource.clone(),
                    op: Operation::Create,
                    user,
                    old: None,
                    new: Some(fresh(&name, v, &resource, ns)),
                });
            }
            let update = |old: &Value, new: &Variant| Case {
                resource: resource.clone(),
                op: Operation::Update,
                user,
                old: Some(old.clone()),
                new: Some(apply(old, new, &resource)),
            };
            if resource == Resource::ConfigMap {
                // Every pair of the single-dimension variants, a sample of those with a
                // mixed one, and every DELETE.
                let base = news.len() - MIXED;
                for (old, _) in &olds[..base] {
                    for new in &news[..base] {
                        out.push(update(old, new));
                    }
                }
                for _ in 0..UPDATE_SAMPLES {
                    let (old, _) = &olds[rng.random_range(0..olds.len())];
                    let new = &news[rng.random_range(base..news.len())];
                    out.push(update(old, new));
                }
                for (old, _) in olds {
                    out.push(Case {
                        resource: resource.clone(),
                        op: Operation::Delete,
                        user,
                        old: Some(old.clone()),
                        new: None,
                    });
                }
            } else {
                for _ in 0..UPDATE_SAMPLES {
                    let (old, _) = &olds[rng.random_range(0..olds.len())];
                    let new = &news[rng.random_range(0..news.len())];
                    out.push(update(old, new));
                }
            }
        }
    }
    out
}

/// A TrainJob CREATE by alice carrying `annotations` and `labels`, with `spec`: the probe that
/// shows a registration has taken effect (or is gone).
pub(crate) fn probe(
    ns: &str,
    annotations: &[(&str, &str)],
    labels: &[(&str, &str)],
    spec: Value,
) -> Case {
    Case {
        resource: Resource::TrainJob,
        op: Operation::Create,
        user: "alice",
        old: None,
        new: Some(fresh(
            "probe",
            &Variant {
                annotations: pairs(annotations),
                labels: pairs(labels),
                finalizers: Vec::new(),
                owners: Vec::new(),
                spec,
                name: None,
            },
            &Resource::TrainJob,
            ns,
        )),
    }
}

/// The requests a run counted (its `"<mode> requests"` counters).
pub(crate) fn requests_counted(counts: &BTreeMap<String, usize>) -> usize {
    counts
        .iter()
        .filter(|(k, _)| k.ends_with(" requests"))
        .map(|(_, n)| n)
        .sum()
}

/// Registers `pass` of `engine` for `ns`, waits until it takes effect, sends every case
/// (`patched(i)`: the protected mutating entry was sent case i) and unregisters; gives what
/// each case met.
async fn run_pass(
    admin: &kube::Client,
    clients: &BTreeMap<&'static str, kube::Client>,
    ns: &str,
    (mode, engine, pass): (Mode, Engine, Pass),
    cases: &[Case],
    patched: impl Fn(usize) -> bool,
) -> Vec<(usize, Sent)> {
    if register(admin, mode, engine, pass, ns).await == 0 {
        return Vec::new();
    }
    // Takes effect asynchronously: wait until a request the pass's entries match is sent: a
    // forged hold on a TrainJob, by alice (the policy engine's protected entry: a managed
    // queued TrainJob; best-effort entries: a queued TrainJob without holdfast state).
    type Pairs<'a> = &'a [(&'a str, &'a str)];
    let (annotations, labels): (Pairs, Pairs) = match (pass.protected(), engine) {
        (true, Engine::Policy) if !pass.mutating() => (
            &[],
            &[
                ("holdfast.dev/managed", "true"),
                ("kueue.x-k8s.io/queue-name", "q"),
            ],
        ),
        (true, _) => (
            &[("holdfast.dev/hold-instance", "1")],
            &[("kueue.x-k8s.io/queue-name", "q")],
        ),
        (false, _) => (&[], &[("kueue.x-k8s.io/queue-name", "q")]),
    };
    let probe = probe(
        ns,
        annotations,
        labels,
        json!({"runtimeRef": {"name": "rt"}}),
    );
    let probe_meets = |want: Sent| {
        let probe = &probe;
        let client = &clients["alice"];
        move || {
            let want = want.clone();
            async move { (probe.send(client, mode, pass, true).await == want).then_some(()) }
        }
    };
    wait_for(
        &format!("{pass:?} to take effect"),
        Duration::from_secs(60),
        probe_meets(Sent::Matched),
    )
    .await;
    let results: Vec<(usize, Sent)> = futures::stream::iter(cases.iter().enumerate())
        .map(|(i, case)| {
            let client = clients[case.user].clone();
            let patched = patched(i);
            async move { (i, case.send(&client, mode, pass, patched).await) }
        })
        .buffer_unordered(16)
        .collect()
        .await;
    unregister(admin).await;
    // Wait until the entries are gone: the probe goes through again.
    wait_for(
        &format!("{pass:?} to be removed"),
        Duration::from_secs(60),
        probe_meets(Sent::NotMatched),
    )
    .await;
    results
}

/// The catalogue, its stored objects (UPDATEs and DELETEs start from them) and a client per
/// identity.
pub(crate) struct World {
    pub(crate) stored: BTreeMap<String, Vec<(Value, Variant)>>,
    pub(crate) catalogues: BTreeMap<String, Vec<Variant>>,
    pub(crate) clients: BTreeMap<&'static str, kube::Client>,
}

impl World {
    /// Creates the catalogue's stored objects in `ns` (before any entry is registered).
    pub(crate) async fn create(cp: &ControlPlane, admin: &kube::Client, ns: &str) -> World {
        let (ns, admin) = (ns.to_owned(), admin.clone());

        // Two real TrainJobs to own catalogue objects (the garbage collector deletes objects
        // whose owner does not exist).
        let tjs: Api<DynamicObject> =
            Api::namespaced_with(admin.clone(), &ns, &api_resource(&Resource::TrainJob));
        let mut owners = Vec::new();
        for name in ["mnist", "other"] {
            let o: DynamicObject = serde_json::from_value(json!({
                "apiVersion": "trainer.kubeflow.org/v1alpha1", "kind": "TrainJob",
                "metadata": {"name": name}, "spec": {"runtimeRef": {"name": "rt"}}}))
            .expect("owner");
            let created = tjs.create(&PostParams::default(), &o).await.expect("owner");
            owners.push((name.to_owned(), created.metadata.uid.expect("uid")));
        }

        // The stored objects UPDATEs and DELETEs start from, created before any entry exists.
        let mut stored = BTreeMap::new();
        let mut catalogues = BTreeMap::new();
        for resource in [Resource::TrainJob, Resource::Workload, Resource::ConfigMap] {
            let catalogue = catalogue(&resource, &owners);
            let api: Api<DynamicObject> =
                Api::namespaced_with(admin.clone(), &ns, &api_resource(&resource));
            let mut objects = Vec::new();
            for (i, v) in catalogue.iter().enumerate() {
                let name = match &v.name {
                    Some(n) => format!("old-{i}-{n}"),
                    None => format!("old-{i}"),
                };
                let o: DynamicObject =
                    serde_json::from_value(fresh(&name, v, &resource, &ns)).expect("object");
                let created = api
                    .create(&PostParams::default(), &o)
                    .await
                    .unwrap_or_else(|e| panic!("create {resource:?} {v:?}: {e}"));
                objects.push((serde_json::to_value(created).expect("json"), v.clone()));
            }
            stored.insert(format!("{resource:?}"), objects);
            catalogues.insert(format!("{resource:?}"), catalogue);
        }

        let mut clients = BTreeMap::new();
        for user in users() {
            clients.insert(user, as_user(cp, user).await);
        }

        World {
            stored,
            catalogues,
            clients,
        }
    }
}

#[tokio::test]
async fn the_charts_match_conditions_send_every_request_the_policy_refuses_or_patches() {
    let cp = holdfast_tests::holdfast::owned_control_plane().await;
    let admin = cp.client(Identity::Admin).await.expect("admin");
    let ns = cp.namespace("match").await.expect("namespace");
    let World {
        stored,
        catalogues,
        clients,
    } = World::create(&cp, &admin, &ns).await;

    let mut failures = Vec::new();
    let mut counts: BTreeMap<String, usize> = BTreeMap::new();
    for (mode, seed) in [(Mode::Plain, 20261201), (Mode::Kueue, 20261202)] {
        let cases = cases(&stored, &catalogues, &ns, seed);
        // `reached[i][p]`: the apiserver sent case i to an entry of pass `Pass::ALL[p]`.
        let mut reached = vec![[false; 4]; cases.len()];
        for (p, pass) in Pass::ALL.into_iter().enumerate() {
            run_pass(
                &admin,
                &clients,
                &ns,
                (mode, Engine::Webhook, pass),
                &cases,
                |i| reached[i][0],
            )
            .await
            .into_iter()
            .for_each(|(i, sent)| match sent {
                Sent::Matched => reached[i][p] = true,
                Sent::NotMatched => {}
                Sent::Other(e) => failures.push(format!(
                    "[{mode} {pass:?}] answered neither by admission nor by storage: {e}: {:?}",
                    cases[i]
                )),
            });
        }
        for (case, r) in cases.iter().zip(&reached) {
            let [mp, mb, vp, vb] = *r;
            let protected = mp || vp;
            *counts.entry(format!("{mode} requests")).or_default() += 1;
            // The mutating policy's protective patch (restoring a dropped annotation, closing
            // a start gate, replacing a forged record) must reach jobs.mutate — or the request
            // must be refused by jobs.validate as it stands (Kueue's drop of holdfast state in
            // kueue mode: refused, not repaired).
            let (patch_protects, patch_any) = case.needs(mode, Pass::MutatingProtected, mp);
            let refused_unpatched = case.op != Operation::Delete
                && !validate(&case.input(case.new.clone()), &who(), mode).is_allowed();
            if patch_protects && !mp && !(vp && refused_unpatched) {
                failures.push(format!(
                    "[{mode}] the policy patches it, but no protected mutating entry is sent it (nor does a protected validating one refuse it): {case:?}"
                ));
            }
            if patch_any && !patch_protects && !mp && !mb {
                failures.push(format!(
                    "[{mode}] the policy records on it, but no mutating entry is sent it: {case:?}"
                ));
            }
            let (refuses, looks_up) = case.needs(mode, Pass::ValidatingProtected, mp);
            if refuses && !vp {
                failures.push(format!(
                    "[{mode}] the policy refuses it, but no protected validating entry is sent it: {case:?}"
                ));
            }
            if looks_up && !refuses && !vp && !vb {
                failures.push(format!(
                    "[{mode}] the policy looks it up (queue, held Workloads), but no validating entry is sent it: {case:?}"
                ));
            }
            // A lookup (queue, Workload holds) may be sent to a protected entry too.
            let (needs_m, needs_v) = (patch_protects, looks_up);
            if protected {
                *counts
                    .entry(format!("{mode} sent to a protected entry"))
                    .or_default() += 1;
            }
            // What an outage must not stop: the controller's and Kueue's writes the policy
            // allows (Kueue's on a held Workload excepted), and creating a TrainJob that
            // carries no holdfast state.
            let held_workload = case.resource == Resource::Workload
                && case
                    .old
                    .as_ref()
                    .and_then(|o| o.pointer("/metadata/annotations/holdfast.dev~1hold-instance"))
                    .is_some();
            let spared = match (mode, case.user) {
                // The controller creates no TrainJob or Workload; it updates them.
                (_, u) if u == Identity::Controller.username() => {
                    case.resource != Resource::ConfigMap && case.op == Operation::Update
                }
                // Kueue's writes that leave holdfast state and the queue keys alone (it
                // creates no TrainJob; a holdfast.dev/ key it wrote would be sent, by design).
                (Mode::Kueue, KUEUE) => {
                    let creates_trainjob =
                        case.resource == Resource::TrainJob && case.op == Operation::Create;
                    !(held_workload
                        || case.resource == Resource::ConfigMap
                        || creates_trainjob
                        || changes_state_or_queue(case))
                }
                _ => {
                    case.resource == Resource::TrainJob
                        && case.op == Operation::Create
                        && !carries_state(case.new.as_ref())
                }
            };
            if spared && protected && !needs_m && !needs_v {
                failures.push(format!(
                    "[{mode}] allowed and unpatched by the policy, yet sent to a protected entry (an outage would refuse it): {case:?}"
                ));
            }
        }
    }
    println!("{counts:#?}");
    let requests = requests_counted(&counts);
    assert!(requests > 8_000, "too few requests checked: {counts:?}");
    // The failures by kind, identity, resource and operation.
    let mut kinds: BTreeMap<String, usize> = BTreeMap::new();
    for f in &failures {
        let between = |from: &str, to: &str| {
            f.split_once(from)
                .and_then(|(_, rest)| rest.split_once(to))
                .map(|(v, _)| v.to_owned())
                .unwrap_or_default()
        };
        let head = f.split(": Case {").next().unwrap_or_default();
        let key = format!(
            "{head} [{} {} {}]",
            between("user: \"", "\""),
            between("resource: ", ","),
            between("op: ", ",")
        );
        *kinds.entry(key).or_default() += 1;
    }
    assert!(
        failures.is_empty(),
        "{} failures, by kind: {kinds:#?}\ne.g.:\n{}",
        failures.len(),
        failures
            .iter()
            .take(8)
            .cloned()
            .collect::<Vec<_>>()
            .join("\n")
    );
}

/// Whether `input` is one the webhook judges by its ClusterQueue (`workload-requests.validate`,
/// failing closed, under every engine): `requests_check` names it, and its pods request and
/// limit no non-zero quantity (the entry's match conditions send zeros too).
fn requests_nothing(input: &AdmissionInput, mode: Mode) -> bool {
    requests_check(input, mode).is_some()
        && input
            .object
            .as_ref()
            .is_some_and(|w| only_zero_quantities(&w["spec"]["podSets"]))
}

/// Whether every request, limit and overhead quantity under `pod_sets` is zero.
fn only_zero_quantities(pod_sets: &Value) -> bool {
    let zero = |q: &Value| match q {
        Value::Number(n) => n.as_f64() == Some(0.0),
        Value::String(s) => {
            let digits = s.trim_start_matches(['+', '-']);
            let number: String = digits
                .chars()
                .take_while(|c| c.is_ascii_digit() || *c == '.')
                .collect();
            !number.is_empty() && number.chars().all(|c| c == '0' || c == '.')
        }
        _ => false,
    };
    let lists = |spec: &Value| -> Vec<Value> {
        let mut out = vec![
            spec["overhead"].clone(),
            spec["resources"]["requests"].clone(),
            spec["resources"]["limits"].clone(),
        ];
        for key in ["containers", "initContainers"] {
            for c in spec[key].as_array().into_iter().flatten() {
                out.push(c["resources"]["requests"].clone());
                out.push(c["resources"]["limits"].clone());
            }
        }
        out
    };
    pod_sets.as_array().into_iter().flatten().all(|ps| {
        lists(&ps["template"]["spec"])
            .iter()
            .filter_map(Value::as_object)
            .all(|m| m.values().all(zero))
    })
}

/// With `validation.engine: policy` the ValidatingAdmissionPolicies judge every rule (their
/// equivalence with the policy is `validation_engines`); the webhook keeps only the lookups
/// CEL cannot make, in kueue mode (plain mode has none). Each lookup the policy needs is sent
/// to an entry, and exactly the queue checks `jobs.validate` made fail closed under the
/// webhook engine — every UPDATE the check judges, every CREATE carrying holdfast state (a
/// managed job's start gate among them) — go to the protected one, so an outage refuses what
/// it refused before and nothing more.
#[tokio::test]
async fn with_the_policy_engine_every_lookup_is_sent_and_the_queue_checks_fail_closed_as_before() {
    let cp = holdfast_tests::holdfast::owned_control_plane().await;
    let admin = cp.client(Identity::Admin).await.expect("admin");
    let ns = cp.namespace("match-policy").await.expect("namespace");
    let world = World::create(&cp, &admin, &ns).await;
    let mode = Mode::Kueue;
    let cases = cases(&world.stored, &world.catalogues, &ns, 20261205);
    let mut reached = vec![(false, false); cases.len()];
    let mut failures = Vec::new();
    for pass in [Pass::ValidatingProtected, Pass::ValidatingBestEffort] {
        let sent = run_pass(
            &admin,
            &world.clients,
            &ns,
            (mode, Engine::Policy, pass),
            &cases,
            |_| true,
        )
        .await;
        for (i, sent) in sent {
            match (sent, pass) {
                (Sent::Matched, Pass::ValidatingProtected) => reached[i].0 = true,
                (Sent::Matched, _) => reached[i].1 = true,
                (Sent::NotMatched, _) => {}
                (Sent::Other(e), _) => failures.push(format!("[{pass:?}] {e}: {:?}", cases[i])),
            }
        }
    }
    let (mut gates, mut lookups) = (0, 0);
    for (case, (protected, best_effort)) in cases.iter().zip(&reached) {
        let input = case.input(case.mutated(mode, true));
        let queue = queue_check(&input, &who(), mode);
        let gate = (queue.is_some()
            && (case.op == Operation::Update || carries_state(input.object.as_ref())))
            || requests_nothing(&input, mode);
        gates += usize::from(gate);
        if *protected != gate {
            failures.push(format!(
                "sent to the protected entry: {protected}, a lookup that fails closed: {gate}: {case:?}"
            ));
        }
        let allowed = validate(&input, &who(), mode).is_allowed();
        let lookup = queue.is_some() || unsuspend_check(&input, &who(), mode).is_some();
        lookups += usize::from(lookup && allowed);
        if allowed && lookup && !protected && !best_effort {
            failures.push(format!(
                "the policy looks it up, but no entry is sent it: {case:?}"
            ));
        }
    }
    println!(
        "{} requests, {gates} queue checks that fail closed, {lookups} lookups",
        cases.len()
    );
    assert!(
        gates > 50 && lookups > 50,
        "too few lookups to check: {gates}, {lookups}"
    );
    assert!(
        failures.is_empty(),
        "{} failures; e.g.:\n{}",
        failures.len(),
        failures
            .iter()
            .take(8)
            .cloned()
            .collect::<Vec<_>>()
            .join("\n")
    );
}
