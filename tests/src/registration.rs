//! Registering holdfast's webhooks exactly as the chart does: the chart's
//! `webhookconfigurations.yaml` is the one source of every webhook entry, rule, failure
//! policy and match condition; the tests render it with helm (once per mode, for release
//! `holdfast` in `holdfast-system`, whose identities are the harness's) and change only where
//! the apiserver sends requests (a URL on loopback instead of the release's Service), which
//! namespaces it covers, the configurations' name and `timeoutSeconds`.

use std::sync::OnceLock;

use holdfast_core::mode::Mode;
use k8s_openapi::ByteString;
use k8s_openapi::api::admissionregistration::v1::{
    MutatingWebhookConfiguration, ValidatingWebhookConfiguration, WebhookClientConfig,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, LabelSelectorRequirement};
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
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Namespaces {
    AllExcept(Vec<String>),
    Only(Vec<String>),
}

impl Namespaces {
    fn selector(&self) -> LabelSelector {
        let (operator, values) = match self {
            Namespaces::AllExcept(v) => ("NotIn", v),
            Namespaces::Only(v) => ("In", v),
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

/// The chart's two webhook configurations, re-pointed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Registration {
    pub name: String,
    pub target: Target,
    pub ca_bundle: Vec<u8>,
    pub namespaces: Namespaces,
    pub timeout_seconds: i32,
    pub mode: Mode,
}

/// The chart's (validating, mutating) configurations for `mode`, rendered once per process.
fn rendered(mode: Mode) -> &'static (Value, Value) {
    static PLAIN: OnceLock<(Value, Value)> = OnceLock::new();
    static KUEUE: OnceLock<(Value, Value)> = OnceLock::new();
    let cell = match mode {
        Mode::Plain => &PLAIN,
        Mode::Kueue => &KUEUE,
    };
    cell.get_or_init(|| {
        let install = Install::new(crate::rbac::RELEASE, crate::rbac::RELEASE_NAMESPACE)
            .set(format!("mode={mode}"));
        let docs = helm::ensure()
            .and_then(|h| h.render(&install))
            .unwrap_or_else(|e| panic!("rendering the chart's webhook configurations: {e:#}"));
        let one = |kind: &str| -> Value {
            let found = helm::of_kind(&docs, kind);
            assert_eq!(found.len(), 1, "the chart renders one {kind}");
            found[0].clone()
        };
        (
            one("ValidatingWebhookConfiguration"),
            one("MutatingWebhookConfiguration"),
        )
    })
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
        }
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

    /// The chart's object with our name, no annotations (cert-manager's injection), and each
    /// entry re-pointed: our URL, namespaces and timeout.
    fn object(&self, chart: &Value) -> Value {
        let mut o = chart.clone();
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
        serde_json::from_value(self.object(&rendered(self.mode).0))
            .unwrap_or_else(|e| panic!("the chart's validating configuration: {e}"))
    }

    /// The chart's `MutatingWebhookConfiguration`, re-pointed.
    pub fn mutating(&self) -> MutatingWebhookConfiguration {
        serde_json::from_value(self.object(&rendered(self.mode).1))
            .unwrap_or_else(|e| panic!("the chart's mutating configuration: {e}"))
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
