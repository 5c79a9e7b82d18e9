//! The hold API served on a loopback port, and grants for the caller (alice), as the API
//! tests and the hold benchmark use them.

use std::time::Duration;

use crate::{ControlPlane, Identity};
use holdfast_controller::api::{ApiState, FenceStore, KubeAuth, Unprotected, router};
use holdfast_controller::hold::HoldExecutor;
use holdfast_serve::TlsServer;
use k8s_openapi::api::rbac::v1::{PolicyRule, Role, RoleBinding, RoleRef, Subject};
use kube::api::{Api, ObjectMeta, PostParams};
use serde_json::Value;

use super::settled_audit;
use tokio_util::sync::CancellationToken;

/// The hold API on a loopback port, with a serving certificate from the control plane's CA.
pub struct HoldApi {
    pub base: String,
    pub http: reqwest::Client,
    stop: CancellationToken,
    _dir: tempfile::TempDir,
}

impl Drop for HoldApi {
    fn drop(&mut self) {
        self.stop.cancel();
    }
}

pub async fn start_api(cp: &ControlPlane, exec: HoldExecutor) -> HoldApi {
    start_api_with(cp, exec, Unprotected::default()).await
}

/// [`start_api`] with the namespaces the chart would exclude from admission.
pub async fn start_api_with(
    cp: &ControlPlane,
    exec: HoldExecutor,
    unprotected: Unprotected,
) -> HoldApi {
    holdfast_serve::install_crypto_provider();
    let cert = cp
        .issue_serving_cert(&["127.0.0.1"], Duration::from_secs(3600))
        .expect("cert");
    let (files, dir) = crate::serving_files::write(&cert).expect("write the certificate");
    let server = TlsServer::bind("127.0.0.1:0".parse().expect("addr"), files)
        .await
        .expect("bind");
    let port = server.local_addr().expect("addr").port();
    let auth = KubeAuth::new(cp.client(Identity::Controller).await.expect("client"));
    let stop = CancellationToken::new();
    tokio::spawn(server.serve(
        router(ApiState {
            executor: exec,
            auth,
            snapshots: None,
            // The chart's, for release `holdfast` in `holdfast-system`.
            fences: Some(FenceStore {
                client: cp.client(Identity::Controller).await.expect("client"),
                namespace: "holdfast-system".into(),
                name: "holdfast-fences".into(),
            }),
            unprotected,
        }),
        stop.clone(),
    ));
    let http = reqwest::Client::builder()
        .add_root_certificate(reqwest::Certificate::from_pem(cp.ca_pem().as_bytes()).expect("CA"))
        .build()
        .expect("http client");
    HoldApi {
        base: format!("https://127.0.0.1:{port}"),
        http,
        stop,
        _dir: dir,
    }
}

/// Each answer's body is checked against the contract ([`crate::contract`]).
impl HoldApi {
    pub async fn post(&self, path: &str, token: Option<&str>, body: &Value) -> (u16, Value) {
        let mut req = self.http.post(format!("{}{path}", self.base)).json(body);
        if let Some(t) = token {
            req = req.bearer_auth(t);
        }
        let resp = req.send().await.expect("send");
        let status = resp.status().as_u16();
        let body = resp.json().await.expect("JSON body");
        crate::contract::check_answer("POST", path, status, &body);
        (status, body)
    }

    pub async fn get(&self, path: &str, token: &str) -> (u16, Value) {
        let resp = self
            .http
            .get(format!("{}{path}", self.base))
            .bearer_auth(token)
            .send()
            .await
            .expect("send");
        let status = resp.status().as_u16();
        let body = resp.json().await.expect("JSON body");
        crate::contract::check_answer("GET", path, status, &body);
        (status, body)
    }
}

/// Lets alice make `subresources` calls in `ns`, and waits until the authorizer says so.
pub async fn grant_alice(cp: &ControlPlane, ns: &str, subresources: &[&str], verbs: &[&str]) {
    let admin = cp.client(Identity::Admin).await.expect("admin");
    let role = Role {
        metadata: ObjectMeta {
            name: Some("holdfast-caller".into()),
            ..Default::default()
        },
        rules: Some(vec![PolicyRule {
            api_groups: Some(vec!["holdfast.dev".into()]),
            resources: Some(
                subresources
                    .iter()
                    .map(|s| format!("trainjobs/{s}"))
                    .collect(),
            ),
            verbs: verbs.iter().map(|v| v.to_string()).collect(),
            ..Default::default()
        }]),
    };
    Api::<Role>::namespaced(admin.clone(), ns)
        .create(&PostParams::default(), &role)
        .await
        .expect("role");
    let binding = RoleBinding {
        metadata: ObjectMeta {
            name: Some("holdfast-caller".into()),
            ..Default::default()
        },
        role_ref: RoleRef {
            api_group: Some("rbac.authorization.k8s.io".into()),
            kind: "Role".into(),
            name: "holdfast-caller".into(),
        },
        subjects: Some(vec![Subject {
            kind: "User".into(),
            name: Identity::User.username().into(),
            api_group: Some("rbac.authorization.k8s.io".into()),
            ..Default::default()
        }]),
    };
    Api::<RoleBinding>::namespaced(admin, ns)
        .create(&PostParams::default(), &binding)
        .await
        .expect("role binding");
    // The authorizer's cache catches up with the new binding: await it.
    let alice = cp.client(Identity::User).await.expect("alice");
    crate::rbac::await_grant(
        &alice,
        "holdfast.dev",
        "trainjobs",
        Some(subresources[0]),
        verbs[0],
        ns,
    )
    .await;
}

/// The reviews holdfast's controller asked the apiserver for: `(TokenReviews,
/// SubjectAccessReviews)`, from its audit log.
pub async fn reviews_made(cp: &ControlPlane) -> (usize, usize) {
    reviews_in(&settled_audit(cp).await)
}

/// The TokenReviews and SubjectAccessReviews holdfast's controller made among `events`.
pub fn reviews_in(events: &[Value]) -> (usize, usize) {
    let count = |resource: &str| {
        events
            .iter()
            .filter(|e| {
                e.pointer("/user/username").and_then(Value::as_str)
                    == Some(Identity::Controller.username())
                    && e.pointer("/objectRef/resource").and_then(Value::as_str) == Some(resource)
            })
            .count()
    };
    (count("tokenreviews"), count("subjectaccessreviews"))
}
