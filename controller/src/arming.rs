//! Arming holdfast's webhook configurations: the I/O around `holdfast_core::arming`.
//!
//! [`until_armed`] runs before anything of the controller writes or serves: until the
//! configurations are armed it probes — a dry-run create of the fences ConfigMap labelled
//! [`LABEL_PROBE`], in the release namespace, which the chart's probe entry sends to the
//! webhook (and nothing else does) and the webhook denies. That denial, through the apiserver,
//! the webhook's Service and the caBundle the apiserver trusts, is the proof that the webhook
//! answers; only then are the protected entries set to `Fail` and the configurations marked
//! armed. A configuration already marked is armed at once, with no probe (holdfast has
//! served: a restart or an upgrade never disarms). [`keep_armed`] then re-arms, every
//! [`KEEP_INTERVAL`], an entry someone (a `kubectl apply` of the rendered manifests) set back.
//!
//! Each write is one JSON patch preconditioned on the resourceVersion read.

use crate::install_check::{WriteVerdict, judge_write};
use crate::webhook_certs::FIELD_MANAGER;
use holdfast_core::arming::{ANN_ARMED, ARMED_POLICY, LABEL_PROBE, PROBE_ENTRY, arming, is_marked};
use json_patch::{AddOperation, Patch as JsonPatch, PatchOperation, TestOperation};
use jsonptr::PointerBuf;
use k8s_openapi::api::admissionregistration::v1::{
    MutatingWebhookConfiguration, ValidatingWebhookConfiguration,
};
use k8s_openapi::api::core::v1::ConfigMap;
use kube::Client;
use kube::api::{Api, DynamicObject, ObjectMeta, Patch, PatchParams, PostParams};
use kube::core::ApiResource;
use std::collections::BTreeMap;
use std::time::Duration;
use tokio_util::sync::CancellationToken;

/// How often [`keep_armed`] reads the configurations once they are armed.
pub const KEEP_INTERVAL: Duration = Duration::from_secs(10);
/// The longest wait between two probes while not armed.
const MAX_PROBE_WAIT: Duration = Duration::from_secs(5);

/// What is armed, and how the probe is made.
#[derive(Clone, Debug)]
pub struct ArmingConfig {
    /// The validating and the mutating configuration (the chart gives both one name).
    pub configuration: String,
    /// The probe's namespace (the release's) and name (the fences ConfigMap's, which the
    /// controller may create there).
    pub probe_namespace: String,
    pub probe_name: String,
}

/// Where the configurations stand after one pass.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum State {
    Armed,
    /// Not armed yet: why, in words for the log.
    Waiting(String),
}

fn kinds() -> [ApiResource; 2] {
    [
        ApiResource::erase::<ValidatingWebhookConfiguration>(&()),
        ApiResource::erase::<MutatingWebhookConfiguration>(&()),
    ]
}

/// The probe: the webhook's answer through the apiserver. `Ok(())`: it answered (denied the
/// probe); otherwise what was seen instead.
pub async fn probe(client: &Client, config: &ArmingConfig) -> Result<(), String> {
    let cm = ConfigMap {
        metadata: ObjectMeta {
            name: Some(config.probe_name.clone()),
            namespace: Some(config.probe_namespace.clone()),
            labels: Some(BTreeMap::from([(
                LABEL_PROBE.to_owned(),
                "true".to_owned(),
            )])),
            ..Default::default()
        },
        ..Default::default()
    };
    let dry = PostParams {
        dry_run: true,
        field_manager: Some(FIELD_MANAGER.into()),
    };
    let outcome = match Api::<ConfigMap>::namespaced(client.clone(), &config.probe_namespace)
        .create(&dry, &cm)
        .await
    {
        Ok(_) => Ok(()),
        Err(kube::Error::Api(s)) => Err((s.code, s.message)),
        Err(e) => return Err(format!("the probe could not be sent: {e}")),
    };
    match judge_write(outcome, &[PROBE_ENTRY.to_owned()]) {
        WriteVerdict::Protected(_) => Ok(()),
        WriteVerdict::LetThrough => Err(format!(
            "the webhook did not answer the probe (entry {PROBE_ENTRY}, failurePolicy Ignore): \
             its pods are not serving, its Service has no ready endpoint, or the apiserver cannot \
             reach or trust it"
        )),
        WriteVerdict::RefusedOtherwise(code, message) => Err(format!(
            "the probe was refused ({code}), not by the webhook: {message}"
        )),
    }
}

/// Arms configuration `name` of kind `resource`: its named entries `Fail`, the mark. `Ok(true)`:
/// it was armed already; `Ok(false)`: armed now.
async fn arm(client: &Client, resource: &ApiResource, name: &str) -> Result<bool, String> {
    let api: Api<DynamicObject> = Api::all_with(client.clone(), resource);
    let what = format!("{} {name}", resource.kind);
    let Some(obj) = api
        .get_opt(name)
        .await
        .map_err(|e| format!("{what}: {e}"))?
    else {
        return Err(format!("{what} not found"));
    };
    let value = serde_json::to_value(&obj).map_err(|e| format!("{what}: {e}"))?;
    let plan = arming(&value);
    if plan.is_done() {
        return Ok(true);
    }
    let rv = obj.metadata.resource_version.clone().unwrap_or_default();
    let mut ops = vec![PatchOperation::Test(TestOperation {
        path: PointerBuf::from_tokens(["metadata", "resourceVersion"]),
        value: serde_json::Value::String(rv),
    })];
    for i in &plan.entries {
        let index = i.to_string();
        ops.push(PatchOperation::Add(AddOperation {
            path: PointerBuf::from_tokens(["webhooks", index.as_str(), "failurePolicy"]),
            value: serde_json::Value::String(ARMED_POLICY.to_owned()),
        }));
    }
    if plan.mark {
        if obj.metadata.annotations.is_none() {
            ops.push(PatchOperation::Add(AddOperation {
                path: PointerBuf::from_tokens(["metadata", "annotations"]),
                value: serde_json::json!({}),
            }));
        }
        ops.push(PatchOperation::Add(AddOperation {
            path: PointerBuf::from_tokens(["metadata", "annotations", ANN_ARMED]),
            value: serde_json::Value::String("true".to_owned()),
        }));
    }
    let pp = PatchParams {
        field_manager: Some(FIELD_MANAGER.into()),
        ..Default::default()
    };
    api.patch(name, &pp, &Patch::Json::<()>(JsonPatch(ops)))
        .await
        .map_err(|e| format!("arming {what}: {e}"))?;
    if plan.mark {
        tracing::info!(configuration = %name, kind = %resource.kind, entries = plan.entries.len(), "webhook configuration armed: its protected entries fail closed");
    } else {
        tracing::warn!(configuration = %name, kind = %resource.kind, entries = plan.entries.len(), "protected webhook entries had been set back to Ignore; armed again");
    }
    Ok(false)
}

/// One pass: read both configurations; if either is marked, or the webhook answers the
/// probe, arm both.
pub async fn pass(client: &Client, config: &ArmingConfig) -> State {
    let mut marked = false;
    for resource in kinds() {
        let api: Api<DynamicObject> = Api::all_with(client.clone(), &resource);
        match api.get_opt(&config.configuration).await {
            Ok(Some(obj)) => {
                marked |= serde_json::to_value(&obj).is_ok_and(|v| is_marked(&v));
            }
            Ok(None) => {
                return State::Waiting(format!(
                    "{} {} not found",
                    resource.kind, config.configuration
                ));
            }
            Err(e) => {
                return State::Waiting(format!(
                    "reading {} {}: {e}",
                    resource.kind, config.configuration
                ));
            }
        }
    }
    if !marked && let Err(why) = probe(client, config).await {
        return State::Waiting(why);
    }
    for resource in kinds() {
        if let Err(why) = arm(client, &resource, &config.configuration).await {
            return State::Waiting(why);
        }
    }
    State::Armed
}

/// Passes until armed (`true`) or `shutdown` (`false`), the wait doubling from a second to
/// [`MAX_PROBE_WAIT`]; each new reason for waiting is logged.
pub async fn until_armed(
    client: &Client,
    config: &ArmingConfig,
    shutdown: &CancellationToken,
) -> bool {
    let mut wait = Duration::from_secs(1);
    let mut last = String::new();
    loop {
        match pass(client, config).await {
            State::Armed => return true,
            State::Waiting(why) => {
                if why != last {
                    tracing::warn!(reason = %why, "not serving until holdfast's webhook configurations are armed");
                    last = why;
                }
            }
        }
        tokio::select! {
            _ = shutdown.cancelled() => return false,
            _ = tokio::time::sleep(wait) => {}
        }
        wait = (wait * 2).min(MAX_PROBE_WAIT);
    }
}

/// A pass every [`KEEP_INTERVAL`] until `shutdown`: an entry set back to `Ignore` is armed
/// again.
pub async fn keep_armed(client: Client, config: ArmingConfig, shutdown: CancellationToken) {
    loop {
        tokio::select! {
            _ = shutdown.cancelled() => return,
            _ = tokio::time::sleep(KEEP_INTERVAL) => {}
        }
        if let State::Waiting(why) = pass(&client, &config).await {
            tracing::warn!(reason = %why, "holdfast's webhook configurations are not armed");
        }
    }
}
