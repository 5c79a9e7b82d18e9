//! The webhook configurations to register: one `ValidatingWebhookConfiguration` and one
//! `MutatingWebhookConfiguration`, for a client config given by URL (tests, out-of-cluster
//! runs) or by Service (the chart). The chart mirrors exactly what this module builds; a test
//! renders both objects and checks every field below.
//!
//! # Common to every webhook
//!
//! | field | value | why |
//! | --- | --- | --- |
//! | `admissionReviewVersions` | `["v1"]` | the only version served |
//! | `failurePolicy` | `Fail` | a protection that lapses while the webhook is down protects nothing |
//! | `sideEffects` | `None` | the only I/O is a read of the runtime; dry-run requests are sent and answered as real ones |
//! | `timeoutSeconds` | `5` (configurable) | above the server's own 4 s request timeout, far below the apiserver's 30 s cap |
//! | `matchPolicy` | `Equivalent` | a write through another served version (Workload `v1beta1`/`v1beta2`) is still sent |
//! | `namespaceSelector` | `kubernetes.io/metadata.name NotIn [kube-system, holdfast-system]` (configurable) | never stand in the way of the control plane's or holdfast's own namespace |
//! | `clientConfig` | `url: {base}/validate` or `/mutate`, or `service: {namespace, name, port, path}`, with `caBundle` | |
//!
//! # Validating: `snapshots.validate.holdfast.dev` → `/validate`
//!
//! Rule: `apiGroups: [""]`, `apiVersions: ["v1"]`, `resources: ["configmaps"]`,
//! `operations: [CREATE, UPDATE, DELETE]`, `scope: Namespaced`. A `deletecollection` reaches
//! admission as one DELETE per item, so it is covered, item by item.
//!
//! `matchConditions` (one, named `runtime-snapshot`) keep every other ConfigMap away from the
//! webhook, so ConfigMap writes do not depend on it: the request's name, or the new or the
//! old object's name, ends in `-runtime-snapshot`, or either object carries the label key
//! `holdfast.dev/runtime-snapshot` (any value: the policy checks the value). `object` is
//! `null` on DELETE and `oldObject` on CREATE, so each side is tested for `null` first, and
//! `has()` guards the optional `metadata.name` (absent with `generateName`) and `labels`, and
//! `request.name`, which is empty (absent to CEL) on each item of a `deletecollection`: an
//! expression that errors counts as a failed call, and with `failurePolicy: Fail` would refuse
//! every unrelated ConfigMap in a `deletecollection`:
//!
//! ```text
//! (has(request.name) && request.name.endsWith('-runtime-snapshot')) || (object != null && ((has(object.metadata.name) && object.metadata.name.endsWith('-runtime-snapshot')) || (has(object.metadata.labels) && 'holdfast.dev/runtime-snapshot' in object.metadata.labels))) || (oldObject != null && ((has(oldObject.metadata.name) && oldObject.metadata.name.endsWith('-runtime-snapshot')) || (has(oldObject.metadata.labels) && 'holdfast.dev/runtime-snapshot' in oldObject.metadata.labels)))
//! ```
//!
//! # Validating: `jobs.validate.holdfast.dev` → `/validate`
//!
//! Rules: `trainer.kubeflow.org` `trainjobs` and `kueue.x-k8s.io` `workloads`, `apiVersions:
//! ["*"]`, `operations: [CREATE, UPDATE]`, `scope: Namespaced`. No subresources: the only one
//! either serves is `status`, and for a custom resource's `status` the apiserver keeps
//! everything outside `.status` from the stored object, so such a write cannot change what
//! the policy protects. No DELETE: the policy allows every DELETE of a TrainJob or Workload,
//! and sending them would only make job cleanup and namespace deletion depend on the webhook
//! being up.
//!
//! `matchConditions` (one, named `holdfast-state`): the new or the old object carries an
//! annotation, a label or a finalizer whose key starts with `holdfast.dev/`, or Kueue's
//! `kueue.x-k8s.io/queue-name` label or `kueue.x-k8s.io/prebuilt-workload-name` label or
//! annotation; or the new object carries an ownerReference to a TrainJob that the old one did
//! not (a Workload made a TrainJob's); or `spec.suspend` changes (in kueue mode it is Kueue's
//! whatever the labels). Every request the policy can refuse has one of those (hold
//! annotations and finalizer, `opened`, `attempt`, the admitted version, the `managed` label
//! of the start gate, the queue name and prebuilt Workload of a suspended job, a decoy
//! Workload, a suspend flip); a unit test walks the policy over a catalogue of requests and
//! checks none it refuses is filtered out:
//!
//! ```text
//! (object != null && ((has(object.metadata.annotations) && object.metadata.annotations.exists(k, k.startsWith('holdfast.dev/') || k == 'kueue.x-k8s.io/prebuilt-workload-name')) || (has(object.metadata.labels) && object.metadata.labels.exists(k, k.startsWith('holdfast.dev/') || k == 'kueue.x-k8s.io/queue-name' || k == 'kueue.x-k8s.io/prebuilt-workload-name')) || (has(object.metadata.finalizers) && object.metadata.finalizers.exists(f, f.startsWith('holdfast.dev/'))))) || (oldObject != null && ((has(oldObject.metadata.annotations) && oldObject.metadata.annotations.exists(k, k.startsWith('holdfast.dev/') || k == 'kueue.x-k8s.io/prebuilt-workload-name')) || (has(oldObject.metadata.labels) && oldObject.metadata.labels.exists(k, k.startsWith('holdfast.dev/') || k == 'kueue.x-k8s.io/queue-name' || k == 'kueue.x-k8s.io/prebuilt-workload-name')) || (has(oldObject.metadata.finalizers) && oldObject.metadata.finalizers.exists(f, f.startsWith('holdfast.dev/')))))
//! ```
//!
//! In kueue mode also a new ownerReference to a TrainJob, and every `spec.suspend` flip:
//!
//! ```text
//! (object != null && ((has(object.metadata.annotations) && object.metadata.annotations.exists(k, k.startsWith('holdfast.dev/') || k == 'kueue.x-k8s.io/prebuilt-workload-name')) || (has(object.metadata.labels) && object.metadata.labels.exists(k, k.startsWith('holdfast.dev/') || k == 'kueue.x-k8s.io/queue-name' || k == 'kueue.x-k8s.io/prebuilt-workload-name')) || (has(object.metadata.finalizers) && object.metadata.finalizers.exists(f, f.startsWith('holdfast.dev/'))))) || (oldObject != null && ((has(oldObject.metadata.annotations) && oldObject.metadata.annotations.exists(k, k.startsWith('holdfast.dev/') || k == 'kueue.x-k8s.io/prebuilt-workload-name')) || (has(oldObject.metadata.labels) && oldObject.metadata.labels.exists(k, k.startsWith('holdfast.dev/') || k == 'kueue.x-k8s.io/queue-name' || k == 'kueue.x-k8s.io/prebuilt-workload-name')) || (has(oldObject.metadata.finalizers) && oldObject.metadata.finalizers.exists(f, f.startsWith('holdfast.dev/'))))) || (object != null && ((has(object.metadata.ownerReferences) && object.metadata.ownerReferences.exists(r, r.kind == 'TrainJob')) || (oldObject != null && has(oldObject.metadata.ownerReferences) && oldObject.metadata.ownerReferences.exists(r, r.kind == 'TrainJob'))) && (oldObject == null || !has(object.metadata.ownerReferences) || !has(oldObject.metadata.ownerReferences) || object.metadata.ownerReferences != oldObject.metadata.ownerReferences)) || (object != null && oldObject != null && has(oldObject.metadata.ownerReferences) && oldObject.metadata.ownerReferences.exists(r, r.kind == 'TrainJob') && (has(object.metadata.labels) && 'kueue.x-k8s.io/job-uid' in object.metadata.labels ? object.metadata.labels['kueue.x-k8s.io/job-uid'] : '') != (has(oldObject.metadata.labels) && 'kueue.x-k8s.io/job-uid' in oldObject.metadata.labels ? oldObject.metadata.labels['kueue.x-k8s.io/job-uid'] : '')) || (object != null && oldObject != null && has(object.spec) && has(oldObject.spec) && (has(object.spec.suspend) && object.spec.suspend == true) != (has(oldObject.spec.suspend) && oldObject.spec.suspend == true))
//! ```
//!
//! # Mutating: `jobs.mutate.holdfast.dev` → `/mutate`
//!
//! Rules: `trainer.kubeflow.org` `trainjobs` with `operations: [CREATE, UPDATE]`, and
//! `kueue.x-k8s.io` `workloads` with `operations: [UPDATE]`; `apiVersions: ["*"]`, `scope:
//! Namespaced`. `reinvocationPolicy: IfNeeded`: if a later mutating webhook drops a restored
//! annotation again, ours runs again.
//!
//! `matchConditions` (one, named `create-or-holdfast-state`): every CREATE (of a TrainJob: it
//! gets the admitted runtime version, and in plain mode a managed one its closed start gate),
//! or an UPDATE whose old object carries an annotation whose key starts with `holdfast.dev/`
//! (the only ones with something to restore):
//!
//! ```text
//! request.operation == 'CREATE' || (oldObject != null && has(oldObject.metadata.annotations) && oldObject.metadata.annotations.exists(k, k.startsWith('holdfast.dev/')))
//! ```

use k8s_openapi::ByteString;
use k8s_openapi::api::admissionregistration::v1::{
    MatchCondition, MutatingWebhook, MutatingWebhookConfiguration, RuleWithOperations,
    ServiceReference, ValidatingWebhook, ValidatingWebhookConfiguration, WebhookClientConfig,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{
    LabelSelector, LabelSelectorRequirement, ObjectMeta,
};

/// The namespaces the chart excludes by default.
pub const DEFAULT_EXCLUDED_NAMESPACES: [&str; 2] = ["kube-system", "holdfast-system"];
/// `timeoutSeconds` of every webhook by default.
pub const DEFAULT_TIMEOUT_SECONDS: i32 = 5;

/// The validating webhook protecting snapshot ConfigMaps.
pub const SNAPSHOTS_WEBHOOK: &str = "snapshots.validate.holdfast.dev";
/// The validating webhook protecting hold state on TrainJobs and Workloads.
pub const JOBS_VALIDATING_WEBHOOK: &str = "jobs.validate.holdfast.dev";
/// The mutating webhook on TrainJobs and Workloads.
pub const JOBS_MUTATING_WEBHOOK: &str = "jobs.mutate.holdfast.dev";

/// `matchConditions` of [`SNAPSHOTS_WEBHOOK`].
pub const SNAPSHOT_CONDITION: &str = "(has(request.name) && request.name.endsWith('-runtime-snapshot')) || (object != null && ((has(object.metadata.name) && object.metadata.name.endsWith('-runtime-snapshot')) || (has(object.metadata.labels) && 'holdfast.dev/runtime-snapshot' in object.metadata.labels))) || (oldObject != null && ((has(oldObject.metadata.name) && oldObject.metadata.name.endsWith('-runtime-snapshot')) || (has(oldObject.metadata.labels) && 'holdfast.dev/runtime-snapshot' in oldObject.metadata.labels)))";
/// `matchConditions` of [`JOBS_VALIDATING_WEBHOOK`] in plain mode.
pub const JOBS_VALIDATING_CONDITION: &str = "(object != null && ((has(object.metadata.annotations) && object.metadata.annotations.exists(k, k.startsWith('holdfast.dev/') || k == 'kueue.x-k8s.io/prebuilt-workload-name')) || (has(object.metadata.labels) && object.metadata.labels.exists(k, k.startsWith('holdfast.dev/') || k == 'kueue.x-k8s.io/queue-name' || k == 'kueue.x-k8s.io/prebuilt-workload-name')) || (has(object.metadata.finalizers) && object.metadata.finalizers.exists(f, f.startsWith('holdfast.dev/'))))) || (oldObject != null && ((has(oldObject.metadata.annotations) && oldObject.metadata.annotations.exists(k, k.startsWith('holdfast.dev/') || k == 'kueue.x-k8s.io/prebuilt-workload-name')) || (has(oldObject.metadata.labels) && oldObject.metadata.labels.exists(k, k.startsWith('holdfast.dev/') || k == 'kueue.x-k8s.io/queue-name' || k == 'kueue.x-k8s.io/prebuilt-workload-name')) || (has(oldObject.metadata.finalizers) && oldObject.metadata.finalizers.exists(f, f.startsWith('holdfast.dev/')))))";
/// `matchConditions` of [`JOBS_VALIDATING_WEBHOOK`] in kueue mode: also a Workload made a
/// TrainJob's or no longer a TrainJob's, a TrainJob's Workload whose `kueue.x-k8s.io/job-uid`
/// label changes, and every `spec.suspend` flip (Kueue's, whatever the labels).
pub const JOBS_VALIDATING_CONDITION_KUEUE: &str = "(object != null && ((has(object.metadata.annotations) && object.metadata.annotations.exists(k, k.startsWith('holdfast.dev/') || k == 'kueue.x-k8s.io/prebuilt-workload-name')) || (has(object.metadata.labels) && object.metadata.labels.exists(k, k.startsWith('holdfast.dev/') || k == 'kueue.x-k8s.io/queue-name' || k == 'kueue.x-k8s.io/prebuilt-workload-name')) || (has(object.metadata.finalizers) && object.metadata.finalizers.exists(f, f.startsWith('holdfast.dev/'))))) || (oldObject != null && ((has(oldObject.metadata.annotations) && oldObject.metadata.annotations.exists(k, k.startsWith('holdfast.dev/') || k == 'kueue.x-k8s.io/prebuilt-workload-name')) || (has(oldObject.metadata.labels) && oldObject.metadata.labels.exists(k, k.startsWith('holdfast.dev/') || k == 'kueue.x-k8s.io/queue-name' || k == 'kueue.x-k8s.io/prebuilt-workload-name')) || (has(oldObject.metadata.finalizers) && oldObject.metadata.finalizers.exists(f, f.startsWith('holdfast.dev/'))))) || (object != null && ((has(object.metadata.ownerReferences) && object.metadata.ownerReferences.exists(r, r.kind == 'TrainJob')) || (oldObject != null && has(oldObject.metadata.ownerReferences) && oldObject.metadata.ownerReferences.exists(r, r.kind == 'TrainJob'))) && (oldObject == null || !has(object.metadata.ownerReferences) || !has(oldObject.metadata.ownerReferences) || object.metadata.ownerReferences != oldObject.metadata.ownerReferences)) || (object != null && oldObject != null && has(oldObject.metadata.ownerReferences) && oldObject.metadata.ownerReferences.exists(r, r.kind == 'TrainJob') && (has(object.metadata.labels) && 'kueue.x-k8s.io/job-uid' in object.metadata.labels ? object.metadata.labels['kueue.x-k8s.io/job-uid'] : '') != (has(oldObject.metadata.labels) && 'kueue.x-k8s.io/job-uid' in oldObject.metadata.labels ? oldObject.metadata.labels['kueue.x-k8s.io/job-uid'] : '')) || (object != null && oldObject != null && has(object.spec) && has(oldObject.spec) && (has(object.spec.suspend) && object.spec.suspend == true) != (has(oldObject.spec.suspend) && oldObject.spec.suspend == true))";
/// `matchConditions` of [`JOBS_MUTATING_WEBHOOK`].
pub const JOBS_MUTATING_CONDITION: &str = "request.operation == 'CREATE' || (oldObject != null && has(oldObject.metadata.annotations) && oldObject.metadata.annotations.exists(k, k.startsWith('holdfast.dev/')))";

/// Where the apiserver reaches the webhook.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Target {
    /// `https://host:port` (no path): the configurations use `{base}/validate` and
    /// `{base}/mutate`.
    Url(String),
    /// A Service in the cluster (port 443 when `None`).
    Service {
        namespace: String,
        name: String,
        port: Option<i32>,
    },
}

/// Which namespaces the webhooks see.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Namespaces {
    /// Every namespace but these (the chart: [`DEFAULT_EXCLUDED_NAMESPACES`]).
    AllExcept(Vec<String>),
    /// Only these (tests, each scoped to its own namespace).
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

/// What to register, and where.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Registration {
    /// `metadata.name` of both configurations.
    pub name: String,
    pub target: Target,
    /// PEM of the CA that signed the serving certificate.
    pub ca_bundle: Vec<u8>,
    pub namespaces: Namespaces,
    pub timeout_seconds: i32,
    /// The mode the webhook runs in: kueue mode sees more (see
    /// [`JOBS_VALIDATING_CONDITION_KUEUE`]).
    pub mode: holdfast_core::mode::Mode,
}

fn strings(items: &[&str]) -> Option<Vec<String>> {
    Some(items.iter().map(|s| (*s).to_owned()).collect())
}

fn rule(group: &str, versions: &[&str], resource: &str, ops: &[&str]) -> RuleWithOperations {
    RuleWithOperations {
        api_groups: strings(&[group]),
        api_versions: strings(versions),
        resources: strings(&[resource]),
        operations: strings(ops),
        scope: Some("Namespaced".to_owned()),
    }
}

fn condition(name: &str, expression: &str) -> Option<Vec<MatchCondition>> {
    Some(vec![MatchCondition {
        name: name.to_owned(),
        expression: expression.to_owned(),
    }])
}

impl Registration {
    /// The chart's defaults: named `name`, every namespace but [`DEFAULT_EXCLUDED_NAMESPACES`],
    /// [`DEFAULT_TIMEOUT_SECONDS`].
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
            mode: holdfast_core::mode::Mode::Plain,
        }
    }

    /// The configurations of a webhook running in `mode`.
    pub fn with_mode(mut self, mode: holdfast_core::mode::Mode) -> Self {
        self.mode = mode;
        self
    }

    pub fn with_namespaces(mut self, namespaces: Namespaces) -> Self {
        self.namespaces = namespaces;
        self
    }

    fn client_config(&self, path: &str) -> WebhookClientConfig {
        let ca_bundle = Some(ByteString(self.ca_bundle.clone()));
        match &self.target {
            Target::Url(base) => WebhookClientConfig {
                url: Some(format!("{}{path}", base.trim_end_matches('/'))),
                ca_bundle,
                service: None,
            },
            Target::Service {
                namespace,
                name,
                port,
            } => WebhookClientConfig {
                url: None,
                ca_bundle,
                service: Some(ServiceReference {
                    namespace: namespace.clone(),
                    name: name.clone(),
                    path: Some(path.to_owned()),
                    port: Some(port.unwrap_or(443)),
                }),
            },
        }
    }

    fn meta(&self) -> ObjectMeta {
        ObjectMeta {
            name: Some(self.name.clone()),
            labels: Some(
                [(
                    "app.kubernetes.io/part-of".to_owned(),
                    "holdfast".to_owned(),
                )]
                .into(),
            ),
            ..Default::default()
        }
    }

    fn validating_webhook(
        &self,
        name: &str,
        rules: Vec<RuleWithOperations>,
        condition_name: &str,
        expression: &str,
    ) -> ValidatingWebhook {
        ValidatingWebhook {
            name: name.to_owned(),
            admission_review_versions: vec!["v1".to_owned()],
            client_config: self.client_config("/validate"),
            failure_policy: Some("Fail".to_owned()),
            match_policy: Some("Equivalent".to_owned()),
            match_conditions: condition(condition_name, expression),
            namespace_selector: Some(self.namespaces.selector()),
            object_selector: None,
            rules: Some(rules),
            side_effects: "None".to_owned(),
            timeout_seconds: Some(self.timeout_seconds),
        }
    }

    /// The `ValidatingWebhookConfiguration`: [`SNAPSHOTS_WEBHOOK`] and
    /// [`JOBS_VALIDATING_WEBHOOK`].
    pub fn validating(&self) -> ValidatingWebhookConfiguration {
        ValidatingWebhookConfiguration {
            metadata: self.meta(),
            webhooks: Some(vec![
                self.validating_webhook(
                    SNAPSHOTS_WEBHOOK,
                    vec![rule(
                        "",
                        &["v1"],
                        "configmaps",
                        &["CREATE", "UPDATE", "DELETE"],
                    )],
                    "runtime-snapshot",
                    SNAPSHOT_CONDITION,
                ),
                self.validating_webhook(
                    JOBS_VALIDATING_WEBHOOK,
                    vec![
                        rule(
                            "trainer.kubeflow.org",
                            &["*"],
                            "trainjobs",
                            &["CREATE", "UPDATE"],
                        ),
                        rule("kueue.x-k8s.io", &["*"], "workloads", &["CREATE", "UPDATE"]),
                    ],
                    "holdfast-state",
                    match self.mode {
                        holdfast_core::mode::Mode::Plain => JOBS_VALIDATING_CONDITION,
                        holdfast_core::mode::Mode::Kueue => JOBS_VALIDATING_CONDITION_KUEUE,
                    },
                ),
            ]),
        }
    }

    /// The `MutatingWebhookConfiguration`: [`JOBS_MUTATING_WEBHOOK`].
    pub fn mutating(&self) -> MutatingWebhookConfiguration {
        MutatingWebhookConfiguration {
            metadata: self.meta(),
            webhooks: Some(vec![MutatingWebhook {
                name: JOBS_MUTATING_WEBHOOK.to_owned(),
                admission_review_versions: vec!["v1".to_owned()],
                client_config: self.client_config("/mutate"),
                failure_policy: Some("Fail".to_owned()),
                match_policy: Some("Equivalent".to_owned()),
                match_conditions: condition("create-or-holdfast-state", JOBS_MUTATING_CONDITION),
                namespace_selector: Some(self.namespaces.selector()),
                object_selector: None,
                reinvocation_policy: Some("IfNeeded".to_owned()),
                rules: Some(vec![
                    rule(
                        "trainer.kubeflow.org",
                        &["*"],
                        "trainjobs",
                        &["CREATE", "UPDATE"],
                    ),
                    rule("kueue.x-k8s.io", &["*"], "workloads", &["UPDATE"]),
                ]),
                side_effects: "None".to_owned(),
                timeout_seconds: Some(self.timeout_seconds),
            }]),
        }
    }
}

#[cfg(test)]
mod tests;
