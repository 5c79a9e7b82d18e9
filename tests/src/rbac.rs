//! Acting with exactly the chart's permissions: apply rendered manifests (its ServiceAccounts,
//! Roles and bindings) by server-side apply, then mint a token for a ServiceAccount through the
//! TokenRequest API and hand out a client that authenticates with it.

use crate::ControlPlane;
use crate::identity::Identity;
use anyhow::Context;
use k8s_openapi::api::authentication::v1::{TokenRequest, TokenRequestSpec};
use k8s_openapi::api::core::v1::ServiceAccount;
use kube::api::{Api, DynamicObject, Patch, PatchParams, PostParams};
use kube::config::{KubeConfigOptions, Kubeconfig};
use kube::core::GroupVersionKind;
use kube::discovery::{self, Scope};

/// Field manager of the applies made here.
pub const FIELD_MANAGER: &str = "holdfast-tests";

/// The kinds of the chart's RBAC, in the order they are applied.
pub const RBAC_KINDS: [&str; 5] = [
    "ServiceAccount",
    "ClusterRole",
    "Role",
    "ClusterRoleBinding",
    "RoleBinding",
];

/// Server-side apply one object (namespaced ones into their `metadata.namespace`, or
/// `default_namespace`). `dry_run` asks the apiserver to validate and admit without storing.
pub async fn apply(
    client: &kube::Client,
    doc: &serde_json::Value,
    default_namespace: &str,
    dry_run: bool,
) -> anyhow::Result<DynamicObject> {
    let what = crate::helm::id(doc);
    let api_version = doc["apiVersion"].as_str().context("no apiVersion")?;
    let kind = doc["kind"].as_str().context("no kind")?;
    let name = doc["metadata"]["name"]
        .as_str()
        .context("no metadata.name")?;
    let (group, version) = match api_version.split_once('/') {
        Some((g, v)) => (g, v),
        None => ("", api_version),
    };
    let gvk = GroupVersionKind::gvk(group, version, kind);
    let (resource, caps) = discovery::pinned_kind(client, &gvk)
        .await
        .with_context(|| format!("{what}: the apiserver does not serve {api_version} {kind}"))?;
    let api: Api<DynamicObject> = match caps.scope {
        Scope::Namespaced => {
            let ns = doc["metadata"]["namespace"]
                .as_str()
                .unwrap_or(default_namespace);
            Api::namespaced_with(client.clone(), ns, &resource)
        }
        Scope::Cluster => Api::all_with(client.clone(), &resource),
    };
    let mut params = PatchParams::apply(FIELD_MANAGER).force();
    params.dry_run = dry_run;
    api.patch(name, &params, &Patch::Apply(doc))
        .await
        .with_context(|| format!("server-side apply of {what}"))
}

/// Apply every object of the given kinds, in that kind order.
pub async fn apply_kinds(
    client: &kube::Client,
    docs: &[serde_json::Value],
    kinds: &[&str],
    default_namespace: &str,
) -> anyhow::Result<()> {
    for kind in kinds {
        for doc in docs.iter().filter(|d| d["kind"] == *kind) {
            apply(client, doc, default_namespace, false).await?;
        }
    }
    Ok(())
}

/// A client that authenticates as ServiceAccount `namespace/name` with a token from the
/// TokenRequest API (valid for an hour), as a pod of that account would.
pub async fn service_account_client(
    cp: &ControlPlane,
    namespace: &str,
    name: &str,
) -> anyhow::Result<kube::Client> {
    let admin = cp.client(Identity::Admin).await?;
    let request = TokenRequest {
        spec: Some(TokenRequestSpec {
            expiration_seconds: Some(3600),
            ..Default::default()
        }),
        ..Default::default()
    };
    let answer = Api::<ServiceAccount>::namespaced(admin, namespace)
        .create_token_request(name, &PostParams::default(), &request)
        .await
        .with_context(|| format!("TokenRequest for ServiceAccount {namespace}/{name}"))?;
    let token = answer
        .status
        .and_then(|s| s.token)
        .context("TokenRequest answered without a token")?;
    let text = format!(
        "apiVersion: v1\nkind: Config\nclusters:\n- name: holdfast-local\n  cluster:\n    server: {server}\n    certificate-authority: {ca}\nusers:\n- name: sa\n  user:\n    token: {token}\ncontexts:\n- name: sa\n  context:\n    cluster: holdfast-local\n    user: sa\n    namespace: {namespace}\ncurrent-context: sa\n",
        server = cp.server,
        ca = cp.dir().join("ca.crt").display(),
    );
    let kc = Kubeconfig::from_yaml(&text)?;
    let cfg = kube::Config::from_custom_kubeconfig(kc, &KubeConfigOptions::default()).await?;
    Ok(kube::Client::try_from(cfg)?)
}

/// The user name a ServiceAccount's token authenticates as.
pub fn service_account_user(namespace: &str, name: &str) -> String {
    format!("system:serviceaccount:{namespace}:{name}")
}
