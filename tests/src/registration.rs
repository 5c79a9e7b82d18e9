//! Registering holdfast's webhooks exactly as the chart does: the chart's
//! `webhookconfigurations.yaml` is the one source of every webhook entry, rule, failure
//! policy and match condition; the tests render it with helm (once per mode, for release
//! `holdfast` in `holdfast-system`, whose identities are the harness's) and change only where
//! the apiserver sends requests (a URL on loopback instead of the release's Service), which
//! namespaces it covers, the configurations' name and `timeoutSeconds`. With
//! `validation.engine` `policy` or `both` the chart's ValidatingAdmissionPolicies come with
//! them, renamed and re-pointed at the same namespaces.

use std::collections::BTreeMap;
use std::sync::{Mutex, OnceLock};

use holdfast_core::mode::Mode;
use k8s_openapi::ByteString;
use k8s_openapi::api::admissionregistration::v1::{
    MutatingWebhookConfiguration, ValidatingWebhookConfiguration, WebhookClientConfig,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, LabelSelectorRequirement};
use kube::api::{Api, ApiResource, DeleteParams, DynamicObject, PostParams};
use kube::core::GroupVersionKind;
use serde_json::Value;

use crate::helm::{self, Install};

/// The namespaces the chart excludes by default.
pub const DEFAULT_EXCLUDED_NAMESPACES: [&str; 2] = ["kube-system", "holdfast-system"];
/// The chart's default `timeouts.webhook`.
pub const DEFAULT_TIMEOUT_SECONDS: i32 = 5;

/// Where the apiserver reaches the webhook: `https://host:port` (no path); the
/// configurations use `{base}/validate` and `{base}/mutate`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Target {
    Url(String),
}

/// Which namespaces the webhooks see.
#[derive(Clone, Debug, PartialEq)]
pub enum Namespaces {
    AllExcept(Vec<String>),
    Only(Vec<String>),
    /// Those this selector selects.
    Selected(LabelSelector),
}

impl Namespaces {
    fn selector(&self) -> LabelSelector {
        let (operator, values) = match self {
            Namespaces::AllExcept(v) => ("NotIn", v),
            Namespaces::Only(v) => ("In", v),
            Namespaces::Selected(s) => return s.clone(),
        };
        LabelSelector {
            match_expressions: Some(vec![LabelSelectorRequirement {
                key: "kubernetes.io/metadata.name".to_owned(),
                operator: operator.to_owned(),
                values: Some(values.clone()),
            }]),
            match_labels: None,
        }
    }
}

/// The chart's `validation.engine`: who judges the validating rules.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Engine {
    Webhook,
    Policy,
    Both,
}

impl Engine {
    pub const ALL: [Engine; 3] = [Engine::Webhook, Engine::Policy, Engine::Both];

    /// The chart value.
    pub fn value(self) -> &'static str {
        match self {
            Engine::Webhook => "webhook",
            Engine::Policy => "policy",
            Engine::Both => "both",
        }
    }

    /// `HOLDFAST_TEST_VALIDATION_ENGINE` (webhook, policy or both; default webhook): the
    /// engine the webhook suites register, so the same tests run under each engine.
    pub fn from_env() -> Engine {
        match std::env::var("HOLDFAST_TEST_VALIDATION_ENGINE").as_deref() {
            Err(_) | Ok("") | Ok("webhook") => Engine::Webhook,
            Ok("policy") => Engine::Policy,
            Ok("both") => Engine::Both,
            Ok(other) => panic!(
                "HOLDFAST_TEST_VALIDATION_ENGINE={other:?}: expected webhook, policy or both"
            ),
        }
    }

    /// Whether the ValidatingAdmissionPolicies judge.
    pub fn policies(self) -> bool {
        self != Engine::Webhook
    }
}

/// Whether an apiserver refusal's message is one of holdfast's admission policies' (the
/// apiserver names the policy and its binding: `ValidatingAdmissionPolicy 'holdfast-…'`).
pub fn refused_by_policy(message: &str) -> bool {
    message.contains("ValidatingAdmissionPolicy 'holdfast-")
}

/// The chart's webhook configurations (and, by engine, its admission policies), re-pointed.
#[derive(Clone, Debug, PartialEq)]
pub struct Registration {
    pub name: String,
    pub target: Target,
    pub ca_bundle: Vec<u8>,
    pub namespaces: Namespaces,
    pub timeout_seconds: i32,
    pub mode: Mode,
    pub engine: Engine,
}

/// What the chart renders for one mode and engine.
#[derive(Clone, Debug)]
struct Rendered {
    validating: Value,
    mutating: Value,
    policies: Vec<Value>,
    bindings: Vec<Value>,
}

/// The chart's objects for `mode` and `engine`, rendered once per process.
fn rendered(mode: Mode, engine: Engine) -> Rendered {
    static CACHE: OnceLock<Mutex<BTreeMap<(String, Engine), Rendered>>> = OnceLock::new();
    let cache = CACHE.get_or_init(|| Mutex::new(BTreeMap::new()));
    let mut cache = cache.lock().unwrap_or_else(|p| p.into_inner());
    cache
        .entry((mode.to_string(), engine))
        .or_insert_with(|| {
            let install = Install::new(crate::rbac::RELEASE, crate::rbac::RELEASE_NAMESPACE)
                .set(format!("mode={mode}"))
                .set(format!("validation.engine={}", engine.value()));
            let docs = helm::ensure()
                .and_then(|h| h.render(&install))
                .unwrap_or_else(|e| panic!("rendering the chart's webhook configurations: {e:#}"));
            let one = |kind: &str| -> Value {
                let found = helm::of_kind(&docs, kind);
                assert_eq!(found.len(), 1, "the chart renders one {kind}");
                found[0].clone()
            };
            // The execution finalizer's policy guards pods under every engine; the topics that
            // need it register it themselves (`crate::lost_node::register_policy`). So does
            // the controller's ConfigMap policy (`crate::controller_policy::register`): it
            // names the release namespace for the fences, and the tests record fences in
            // their own namespaces.
            // So does the readmission gate's policy (kueue mode; `crate::readmission_policy`):
            // it judges Kueue's admissions in every namespace.
            let execution = format!("{}-execution-finalizer", crate::rbac::RELEASE);
            let configmaps = crate::controller_policy::name();
            let gate = crate::readmission_policy::name();
            let all = |kind: &str| -> Vec<Value> {
                helm::of_kind(&docs, kind)
                    .into_iter()
                    .filter(|d| {
                        d["metadata"]["name"] != execution.as_str()
                            && d["metadata"]["name"] != configmaps.as_str()
                            && d["metadata"]["name"] != gate.as_str()
                    })
                    .cloned()
                    .collect()
            };
            Rendered {
                validating: one("ValidatingWebhookConfiguration"),
                mutating: one("MutatingWebhookConfiguration"),
                policies: all("ValidatingAdmissionPolicy"),
                bindings: all("ValidatingAdmissionPolicyBinding"),
            }
        })
        .clone()
}

/// `admissionregistration.k8s.io/v1` `kind`, for the dynamic API.
fn admission_resource(kind: &str, plural: &str) -> ApiResource {
    ApiResource::from_gvk_with_plural(
        &GroupVersionKind::gvk("admissionregistration.k8s.io", "v1", kind),
        plural,
    )
}

pub fn policy_resource() -> ApiResource {
    admission_resource("ValidatingAdmissionPolicy", "validatingadmissionpolicies")
}

/// The apiserver's type check of a ValidatingAdmissionPolicy's CEL against the schemas of the
/// resources it matches (run by kube-controller-manager's
/// `validatingadmissionpolicy-status-controller`): its warnings, empty when every field the
/// CEL names exists with the type it is used as. The apiserver skips rules whose versions are
/// a wildcard, so the check runs on an unbound copy (it judges nothing) named
/// `<name>-typecheck`, with each rule's versions pinned: `v1alpha1` TrainJobs, `v1beta2`
/// Workloads; rules of other groups are left as they are.
pub async fn type_check_warnings(admin: &kube::Client, policy: &Value) -> Value {
    let mut copy = policy.clone();
    let name = format!(
        "{}-typecheck",
        policy["metadata"]["name"].as_str().unwrap_or_default()
    );
    copy["metadata"] = serde_json::json!({ "name": name });
    for rule in copy["spec"]["matchConstraints"]["resourceRules"]
        .as_array_mut()
        .into_iter()
        .flatten()
    {
        let pinned = match rule["apiGroups"][0].as_str() {
            Some("trainer.kubeflow.org") => "v1alpha1",
            Some("kueue.x-k8s.io") => "v1beta2",
            _ => continue,
        };
        rule["apiVersions"] = serde_json::json!([pinned]);
    }
    let api = Api::<DynamicObject>::all_with(admin.clone(), &policy_resource());
    let copy: DynamicObject = serde_json::from_value(copy).expect("the copy");
    api.create(&PostParams::default(), &copy)
        .await
        .expect("create the pinned copy");
    let status = crate::wait::wait_for(
        &format!("{name} to be type-checked"),
        std::time::Duration::from_secs(60),
        || async {
            let stored = api.get(&name).await.expect("the copy");
            let status = stored.data["status"].clone();
            status["observedGeneration"]
                .as_i64()
                .is_some()
                .then_some(status)
        },
    )
    .await;
    let _ = api.delete(&name, &DeleteParams::default()).await;
    status["typeChecking"]["expressionWarnings"].clone()
}

pub fn binding_resource() -> ApiResource {
    admission_resource(
        "ValidatingAdmissionPolicyBinding",
        "validatingadmissionpolicybindings",
    )
}

impl Registration {
    pub fn new(name: impl Into<String>, target: Target, ca_bundle: impl Into<Vec<u8>>) -> Self {
        Self {
            name: name.into(),
            target,
            ca_bundle: ca_bundle.into(),
            namespaces: Namespaces::AllExcept(
                DEFAULT_EXCLUDED_NAMESPACES
                    .iter()
                    .map(|s| (*s).to_owned())
                    .collect(),
            ),
            timeout_seconds: DEFAULT_TIMEOUT_SECONDS,
            mode: Mode::Plain,
            engine: Engine::Webhook,
        }
    }

    pub fn with_engine(mut self, engine: Engine) -> Self {
        self.engine = engine;
        self
    }

    pub fn with_mode(mut self, mode: Mode) -> Self {
        self.mode = mode;
        self
    }

    pub fn with_namespaces(mut self, namespaces: Namespaces) -> Self {
        self.namespaces = namespaces;
        self
    }

    fn client_config(&self, path: &str) -> WebhookClientConfig {
        let Target::Url(base) = &self.target;
        WebhookClientConfig {
            url: Some(format!("{}{path}", base.trim_end_matches('/'))),
            ca_bundle: Some(ByteString(self.ca_bundle.clone())),
            service: None,
        }
    }

    /// The chart's object with our name, no annotations (cert-manager's injection), armed as
    /// holdfast's controller arms it once its webhook answers (the entries the chart names in
    /// `holdfast.dev/fails-closed` set to Fail: registered, they fail closed as installed
    /// ones do once serving), and each entry re-pointed: our URL, namespaces and timeout.
    fn object(&self, chart: &Value) -> Value {
        let mut o = chart.clone();
        let armed: Vec<String> = holdfast_core::arming::fails_closed(chart)
            .into_iter()
            .map(str::to_owned)
            .collect();
        for w in o["webhooks"].as_array_mut().into_iter().flatten() {
            if w["name"]
                .as_str()
                .is_some_and(|n| armed.iter().any(|a| a == n))
            {
                w["failurePolicy"] = Value::from(holdfast_core::arming::ARMED_POLICY);
            }
        }
        o["metadata"]["name"] = Value::String(self.name.clone());
        if let Some(m) = o["metadata"].as_object_mut() {
            m.remove("annotations");
        }
        let json = |v: Result<Value, serde_json::Error>| v.expect("a configuration as JSON");
        for w in o["webhooks"].as_array_mut().into_iter().flatten() {
            w["clientConfig"] = json(serde_json::to_value(
                self.client_config(path(&w["clientConfig"])),
            ));
            w["namespaceSelector"] = json(serde_json::to_value(self.namespaces.selector()));
            w["timeoutSeconds"] = Value::from(self.timeout_seconds);
        }
        o
    }

    /// The chart's `ValidatingWebhookConfiguration`, re-pointed.
    pub fn validating(&self) -> ValidatingWebhookConfiguration {
        serde_json::from_value(self.object(&rendered(self.mode, self.engine).validating))
            .unwrap_or_else(|e| panic!("the chart's validating configuration: {e}"))
    }

    /// The chart's `MutatingWebhookConfiguration`, re-pointed.
    pub fn mutating(&self) -> MutatingWebhookConfiguration {
        serde_json::from_value(self.object(&rendered(self.mode, self.engine).mutating))
            .unwrap_or_else(|e| panic!("the chart's mutating configuration: {e}"))
    }

    /// The chart's policy name `chart` (e.g. `holdfast-jobs`) as registered: our name
    /// instead of the chart's prefix.
    fn policy_name(&self, chart: &str) -> String {
        let suffix = chart
            .rsplit_once('-')
            .map(|(_, s)| s)
            .unwrap_or_else(|| panic!("the chart's policy name {chart:?} has no suffix"));
        format!("{}-{suffix}", self.name)
    }

    /// The chart's ValidatingAdmissionPolicies (none for the webhook engine), renamed and
    /// re-pointed at our namespaces.
    pub fn policies(&self) -> Vec<DynamicObject> {
        rendered(self.mode, self.engine)
            .policies
            .iter()
            .map(|p| {
                let mut p = p.clone();
                let name = self.policy_name(p["metadata"]["name"].as_str().unwrap_or_default());
                p["metadata"]["name"] = Value::String(name);
                p["spec"]["matchConstraints"]["namespaceSelector"] =
                    serde_json::to_value(self.namespaces.selector()).expect("selector as JSON");
                serde_json::from_value(p).expect("a policy")
            })
            .collect()
    }

    /// Their bindings, renamed with them.
    pub fn bindings(&self) -> Vec<DynamicObject> {
        rendered(self.mode, self.engine)
            .bindings
            .iter()
            .map(|b| {
                let mut b = b.clone();
                let name = self.policy_name(b["metadata"]["name"].as_str().unwrap_or_default());
                b["metadata"]["name"] = Value::String(name.clone());
                b["spec"]["policyName"] = Value::String(name);
                serde_json::from_value(b).expect("a binding")
            })
            .collect()
    }

    /// Creates everything the engine registers: both webhook configurations, and the
    /// policies with their bindings.
    pub async fn install(&self, admin: &kube::Client) -> Result<(), kube::Error> {
        let pp = PostParams::default();
        Api::<ValidatingWebhookConfiguration>::all(admin.clone())
            .create(&pp, &self.validating())
            .await?;
        Api::<MutatingWebhookConfiguration>::all(admin.clone())
            .create(&pp, &self.mutating())
            .await?;
        self.install_policies(admin).await
    }

    /// Creates the policies and their bindings alone.
    pub async fn install_policies(&self, admin: &kube::Client) -> Result<(), kube::Error> {
        let pp = PostParams::default();
        let policies = Api::<DynamicObject>::all_with(admin.clone(), &policy_resource());
        for p in self.policies() {
            policies.create(&pp, &p).await?;
        }
        let bindings = Api::<DynamicObject>::all_with(admin.clone(), &binding_resource());
        for b in self.bindings() {
            bindings.create(&pp, &b).await?;
        }
        Ok(())
    }

    /// Deletes what [`install`](Self::install) created (what is already gone is skipped).
    pub async fn uninstall(&self, admin: &kube::Client) {
        let dp = DeleteParams::default();
        let _ = Api::<ValidatingWebhookConfiguration>::all(admin.clone())
            .delete(&self.name, &dp)
            .await;
        let _ = Api::<MutatingWebhookConfiguration>::all(admin.clone())
            .delete(&self.name, &dp)
            .await;
        self.uninstall_policies(admin).await;
    }

    /// Deletes the policies and their bindings alone.
    pub async fn uninstall_policies(&self, admin: &kube::Client) {
        let dp = DeleteParams::default();
        let bindings = Api::<DynamicObject>::all_with(admin.clone(), &binding_resource());
        for b in self.bindings() {
            let _ = bindings
                .delete(&b.metadata.name.unwrap_or_default(), &dp)
                .await;
        }
        let policies = Api::<DynamicObject>::all_with(admin.clone(), &policy_resource());
        for p in self.policies() {
            let _ = policies
                .delete(&p.metadata.name.unwrap_or_default(), &dp)
                .await;
        }
    }
}

/// The path the chart's entry is served on.
fn path(config: &Value) -> &'static str {
    match config.pointer("/service/path").and_then(Value::as_str) {
        Some("/mutate") => "/mutate",
        Some("/validate") => "/validate",
        other => panic!("the chart's webhook path {other:?} is neither /validate nor /mutate"),
    }
}
