//! The hold API's CA, published where any namespace's supervisor can read it: the ConfigMap
//! `<fullname>-hold-api-ca` (key [`KEY`]) in holdfast's namespace, which the chart lets the
//! subjects of `rbac.holdApiCaReaders` (every authenticated user by default) `get` by name.
//!
//! With self-managed certificates the reconcile ([`crate::webhook_certs::reconcile`]) writes
//! it after the webhook configurations' caBundle and before any serving certificate is issued
//! from a new CA, so a client that re-reads it trusts a certificate before it is served.
//! Otherwise (cert-manager, or a Secret you supply) [`keep_copied`] copies the caBundle of
//! holdfast's mutating webhook configuration — the one the apiserver trusts holdfast's
//! serving certificates by — every interval.

use std::collections::BTreeMap;
use std::time::Duration;

use k8s_openapi::api::admissionregistration::v1::MutatingWebhookConfiguration;
use k8s_openapi::api::core::v1::ConfigMap;
use kube::Client;
use kube::api::{Api, ObjectMeta, PostParams};
use tokio_util::sync::CancellationToken;

/// The ConfigMap's key: the PEM bundle (the current CA first).
pub const KEY: &str = "ca.crt";

/// Where the CA is published.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Published {
    pub namespace: String,
    pub name: String,
}

/// Makes the ConfigMap hold `bundle_pem`: created if missing, replaced (preconditioned on
/// the resourceVersion read) if different. Whether it was written.
pub async fn publish(
    client: &Client,
    to: &Published,
    bundle_pem: &str,
) -> Result<bool, kube::Error> {
    let api: Api<ConfigMap> = Api::namespaced(client.clone(), &to.namespace);
    let data = BTreeMap::from([(KEY.to_owned(), bundle_pem.to_owned())]);
    match api.get_opt(&to.name).await? {
        Some(cm) if cm.data.as_ref() == Some(&data) => Ok(false),
        Some(mut cm) => {
            cm.data = Some(data);
            api.replace(&to.name, &PostParams::default(), &cm).await?;
            Ok(true)
        }
        None => {
            let cm = ConfigMap {
                metadata: ObjectMeta {
                    name: Some(to.name.clone()),
                    namespace: Some(to.namespace.clone()),
                    labels: Some(BTreeMap::from([(
                        "app.kubernetes.io/managed-by".to_owned(),
                        "holdfast-controller".to_owned(),
                    )])),
                    ..Default::default()
                },
                data: Some(data),
                ..Default::default()
            };
            api.create(&PostParams::default(), &cm).await?;
            Ok(true)
        }
    }
}

/// The caBundle of the first webhook of `configuration` that carries one, as text.
pub async fn ca_bundle_of(
    client: &Client,
    configuration: &str,
) -> Result<Option<String>, kube::Error> {
    let api: Api<MutatingWebhookConfiguration> = Api::all(client.clone());
    let Some(config) = api.get_opt(configuration).await? else {
        return Ok(None);
    };
    Ok(config
        .webhooks
        .iter()
        .flatten()
        .find_map(|w| w.client_config.ca_bundle.as_ref())
        .and_then(|b| String::from_utf8(b.0.clone()).ok())
        .filter(|pem| !pem.trim().is_empty()))
}

/// One copy of `configuration`'s caBundle into the ConfigMap. Whether it was written.
pub async fn copy_once(
    client: &Client,
    configuration: &str,
    to: &Published,
) -> Result<bool, kube::Error> {
    match ca_bundle_of(client, configuration).await? {
        Some(pem) => publish(client, to, &pem).await,
        None => {
            tracing::warn!(
                configuration,
                "the webhook configuration carries no caBundle yet: the hold API's CA is not published"
            );
            Ok(false)
        }
    }
}

/// [`copy_once`] now and every `every` until `shutdown`.
pub async fn keep_copied(
    client: Client,
    configuration: String,
    to: Published,
    every: Duration,
    shutdown: CancellationToken,
) {
    loop {
        match copy_once(&client, &configuration, &to).await {
            Ok(true) => tracing::info!(configmap = %to.name, "hold API CA published"),
            Ok(false) => {}
            Err(e) => {
                tracing::warn!(configmap = %to.name, error = %e, "publishing the hold API CA failed")
            }
        }
        tokio::select! {
            _ = shutdown.cancelled() => return,
            _ = tokio::time::sleep(every) => {}
        }
    }
}
