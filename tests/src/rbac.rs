//! Acting with exactly the chart's permissions: apply rendered manifests (its ServiceAccounts,
//! Roles and bindings) by server-side apply, then mint a token for a ServiceAccount through the
//! TokenRequest API and hand out a client that authenticates with it.
//!
//! Every control plane installs the chart's RBAC as release [`RELEASE`] in
//! [`RELEASE_NAMESPACE`] at start ([`install_holdfast_rbac`]), and
//! [`Identity::Controller`](crate::identity::Identity::Controller) and
//! [`Identity::Webhook`](crate::identity::Identity::Webhook) authenticate with TokenRequest tokens of its two
//! ServiceAccounts: the whole e2e suite runs holdfast with exactly the chart's permissions.
//! The one addition: tests keep each controller's Lease in the test's own namespace (so tests
//! run side by side), so the chart's release-namespace Role is also created there, bound to
//! the same accounts ([`grant_release_roles_in`]) — the same rules a release installed in that
//! namespace would have.

use crate::helm::Install;
use anyhow::Context;
use k8s_openapi::api::authentication::v1::{TokenRequest, TokenRequestSpec};
use k8s_openapi::api::core::v1::ServiceAccount;
use kube::api::{Api, DynamicObject, Patch, PatchParams, PostParams};
use kube::core::GroupVersionKind;
use kube::discovery::{self, Scope};
use std::sync::OnceLock;

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

/// A token for ServiceAccount `namespace/name` from the TokenRequest API, valid for
/// `seconds`, as the kubelet mints for a pod of that account.
pub async fn mint_token(
    admin: &kube::Client,
    namespace: &str,
    name: &str,
    seconds: i64,
) -> anyhow::Result<String> {
    let request = TokenRequest {
        spec: Some(TokenRequestSpec {
            expiration_seconds: Some(seconds),
            ..Default::default()
        }),
        ..Default::default()
    };
    let answer = Api::<ServiceAccount>::namespaced(admin.clone(), namespace)
        .create_token_request(name, &PostParams::default(), &request)
        .await
        .with_context(|| format!("TokenRequest for ServiceAccount {namespace}/{name}"))?;
    answer
        .status
        .and_then(|s| s.token)
        .context("TokenRequest answered without a token")
}

/// The user name a ServiceAccount's token authenticates as.
pub fn service_account_user(namespace: &str, name: &str) -> String {
    format!("system:serviceaccount:{namespace}:{name}")
}

/// The release name the harness installs holdfast's RBAC as: its ServiceAccounts are then
/// `holdfast-controller` and `holdfast-webhook`, the names [`Identity`](crate::identity::Identity) authenticates as.
pub const RELEASE: &str = "holdfast";
/// The namespace of that release.
pub const RELEASE_NAMESPACE: &str = "holdfast-system";

/// The chart's RBAC objects (ServiceAccounts, Roles, bindings) for release [`RELEASE`] in
/// `mode` (`plain` or `kueue`) with every other value at its default; rendered once per
/// process and mode.
pub fn holdfast_rbac(mode: &str) -> anyhow::Result<Vec<serde_json::Value>> {
    static PLAIN: OnceLock<Result<Vec<serde_json::Value>, String>> = OnceLock::new();
    static KUEUE: OnceLock<Result<Vec<serde_json::Value>, String>> = OnceLock::new();
    let cell = match mode {
        "plain" => &PLAIN,
        "kueue" => &KUEUE,
        other => anyhow::bail!("no mode {other}"),
    };
    cell.get_or_init(|| render_holdfast_rbac(mode, &[]).map_err(|e| format!("{e:#}")))
        .clone()
        .map_err(anyhow::Error::msg)
}

/// The chart's RBAC objects for release [`RELEASE`] in `mode`, with more `--set` values.
pub fn render_holdfast_rbac(mode: &str, sets: &[&str]) -> anyhow::Result<Vec<serde_json::Value>> {
    let mut install = Install::new(RELEASE, RELEASE_NAMESPACE).set(format!("mode={mode}"));
    for s in sets {
        install = install.set(*s);
    }
    let docs = crate::helm::ensure()?.render(&install)?;
    Ok(docs
        .into_iter()
        .filter(|d| RBAC_KINDS.iter().any(|k| d["kind"] == *k))
        .collect())
}

/// Install the chart's RBAC for `mode` (its namespace included); applying the other mode's
/// afterwards replaces the ClusterRoles' rules with that mode's.
pub async fn install_holdfast_rbac(admin: &kube::Client, mode: &str) -> anyhow::Result<()> {
    install_rendered(admin, &holdfast_rbac(mode)?).await
}

/// [`install_holdfast_rbac`] with more `--set` values: what an administrator installs when
/// the defaults are not enough (e.g. `runtimes.extra` for a runtime kind of their own).
pub async fn install_holdfast_rbac_with(
    admin: &kube::Client,
    mode: &str,
    sets: &[&str],
) -> anyhow::Result<()> {
    install_rendered(admin, &render_holdfast_rbac(mode, sets)?).await
}

async fn install_rendered(admin: &kube::Client, docs: &[serde_json::Value]) -> anyhow::Result<()> {
    let ns = serde_json::json!({
        "apiVersion": "v1", "kind": "Namespace", "metadata": {"name": RELEASE_NAMESPACE}
    });
    apply(admin, &ns, RELEASE_NAMESPACE, false).await?;
    apply_kinds(admin, docs, &RBAC_KINDS, RELEASE_NAMESPACE).await
}

/// The chart's release-namespace Roles and RoleBindings (the controller's Lease, its
/// certificate Secrets) created in `namespace` too, bound to the same ServiceAccounts of
/// [`RELEASE_NAMESPACE`].
pub async fn grant_release_roles_in(admin: &kube::Client, namespace: &str) -> anyhow::Result<()> {
    for doc in holdfast_rbac("plain")? {
        if doc["kind"] == "Role" || doc["kind"] == "RoleBinding" {
            let mut copy = doc.clone();
            copy["metadata"]["namespace"] = serde_json::Value::from(namespace);
            apply(admin, &copy, namespace, false).await?;
        }
    }
    Ok(())
}

/// Whether `user` may `create trainjobs/<subresource>` (group `holdfast.dev`) in `namespace`,
/// by a SubjectAccessReview as `admin`; a review that could not be made reads as not allowed.
pub async fn may_call(
    admin: &kube::Client,
    user: &str,
    namespace: &str,
    subresource: &str,
) -> bool {
    use k8s_openapi::api::authorization::v1::{
        ResourceAttributes, SubjectAccessReview, SubjectAccessReviewSpec,
    };
    let review = SubjectAccessReview {
        spec: SubjectAccessReviewSpec {
            user: Some(user.to_owned()),
            resource_attributes: Some(ResourceAttributes {
                group: Some("holdfast.dev".into()),
                resource: Some("trainjobs".into()),
                subresource: Some(subresource.into()),
                verb: Some("create".into()),
                namespace: Some(namespace.into()),
                ..Default::default()
            }),
            ..Default::default()
        },
        ..Default::default()
    };
    Api::<SubjectAccessReview>::all(admin.clone())
        .create(&PostParams::default(), &review)
        .await
        .ok()
        .and_then(|r| r.status)
        .is_some_and(|s| s.allowed)
}

/// Waits (at most a minute) until [`may_call`] says `user` may call `subresource` in
/// `namespace`: RBAC grants reach the authorizer's cache a moment after they are written.
pub async fn wait_until_may_call(
    admin: &kube::Client,
    user: &str,
    namespace: &str,
    subresource: &str,
) {
    crate::wait::wait_for(
        &format!("{user} may {subresource} in {namespace}"),
        std::time::Duration::from_secs(60),
        || async {
            may_call(admin, user, namespace, subresource)
                .await
                .then_some(())
        },
    )
    .await;
}

/// Waits until `client`'s user may `verb` `resource` (of `group`, `subresource` if given) in
/// `namespace`: the authorizer's cache catches up with a binding just created only after a
/// moment, and a request sent before then is refused. Panics after 60 s.
pub async fn await_grant(
    client: &kube::Client,
    group: &str,
    resource: &str,
    subresource: Option<&str>,
    verb: &str,
    namespace: &str,
) {
    use k8s_openapi::api::authorization::v1::{
        ResourceAttributes, SelfSubjectAccessReview, SelfSubjectAccessReviewSpec,
    };
    let review = SelfSubjectAccessReview {
        spec: SelfSubjectAccessReviewSpec {
            resource_attributes: Some(ResourceAttributes {
                group: Some(group.into()),
                resource: Some(resource.into()),
                subresource: subresource.map(Into::into),
                verb: Some(verb.into()),
                namespace: Some(namespace.into()),
                ..Default::default()
            }),
            ..Default::default()
        },
        ..Default::default()
    };
    let reviews: Api<SelfSubjectAccessReview> = Api::all(client.clone());
    let start = std::time::Instant::now();
    loop {
        let answer = match reviews.create(&PostParams::default(), &review).await {
            Ok(a) => a,
            Err(e) => panic!("review: {e}"),
        };
        if answer.status.is_some_and(|s| s.allowed) {
            return;
        }
        assert!(
            start.elapsed() < std::time::Duration::from_secs(60),
            "the grant to {verb} {resource} in {namespace} never took effect"
        );
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
}
