//! The hold API's token audiences (`--token-audiences`, the chart's
//! `controller.tokenAudiences`), against the real apiserver's TokenReview and the real
//! controller binary: with `holdfast` set, a ServiceAccount token requested for that audience
//! (as a projected volume gives a supervisor) is accepted, and the same ServiceAccount's
//! ordinary token, meant for the apiserver, is refused, as is a person's static token; with
//! both audiences listed, both are accepted. Without audiences (the default), a token meant
//! for holdfast alone is refused: the apiserver reviews it for its own audience.
//! The controller binary must be built first (`cargo build -p holdfast-controller`).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use holdfast_tests::control_plane::free_port;
use holdfast_tests::hold_support::{self, RUNTIME};
use holdfast_tests::holdfast::{serving_cert, start_plain_controller_on, wait_readyz};
use holdfast_tests::objects::{create_dynamic, trainjob};
use holdfast_tests::{ControlPlane, Identity};
use k8s_openapi::api::authentication::v1::{TokenRequest, TokenRequestSpec};
use k8s_openapi::api::core::v1::ServiceAccount;
use k8s_openapi::api::rbac::v1::{PolicyRule, Role, RoleBinding, RoleRef, Subject};
use kube::api::{Api, ObjectMeta, PostParams};
use serde_json::Value;
use std::time::Duration;

/// The apiserver's own audience (the control plane's `--api-audiences`).
const API_AUDIENCE: &str = "https://kubernetes.default.svc.cluster.local";

async fn token_for(admin: &kube::Client, ns: &str, audiences: Option<Vec<String>>) -> String {
    let request = TokenRequest {
        spec: Some(TokenRequestSpec {
            audiences,
            expiration_seconds: Some(3600),
            ..Default::default()
        }),
        ..Default::default()
    };
    Api::<ServiceAccount>::namespaced(admin.clone(), ns)
        .create_token_request("supervisor", &PostParams::default(), &request)
        .await
        .expect("TokenRequest")
        .status
        .and_then(|s| s.token)
        .expect("a token")
}

/// What one token is, the token, and the status it is answered.
type Expect<'a> = (&'a str, &'a str, u16);

/// `GET .../status` of `target` with `token`: the status code and the answer.
async fn status(http: &reqwest::Client, port: u16, ns: &str, token: &str) -> (u16, Value) {
    let r = http
        .get(format!(
            "https://127.0.0.1:{port}/v1/namespaces/{ns}/trainjobs/target/status"
        ))
        .bearer_auth(token)
        .send()
        .await
        .expect("hold API");
    let code = r.status().as_u16();
    let answer = r.json().await.unwrap_or(Value::Null);
    let path = format!("/v1/namespaces/{ns}/trainjobs/target/status");
    holdfast_tests::contract::check_answer("GET", &path, code, &answer);
    (code, answer)
}

#[tokio::test]
async fn a_token_for_the_holdfast_audience_passes_and_an_apiserver_token_is_refused() {
    let cp = ControlPlane::shared();
    let ns = cp.namespace("audience").await.expect("namespace");
    let admin = cp.client(Identity::Admin).await.expect("admin");
    hold_support::ensure_runtime(&admin).await;
    create_dynamic(
        &admin,
        &holdfast_cluster::resources::trainjob(),
        Some(&ns),
        trainjob("target", RUNTIME),
    )
    .await;
    Api::<ServiceAccount>::namespaced(admin.clone(), &ns)
        .create(
            &PostParams::default(),
            &ServiceAccount {
                metadata: ObjectMeta {
                    name: Some("supervisor".into()),
                    ..Default::default()
                },
                ..Default::default()
            },
        )
        .await
        .expect("ServiceAccount");
    let role = Role {
        metadata: ObjectMeta {
            name: Some("status-reader".into()),
            ..Default::default()
        },
        rules: Some(vec![PolicyRule {
            api_groups: Some(vec!["holdfast.dev".into()]),
            resources: Some(vec!["trainjobs/status".into()]),
            verbs: vec!["get".into()],
            ..Default::default()
        }]),
    };
    Api::<Role>::namespaced(admin.clone(), &ns)
        .create(&PostParams::default(), &role)
        .await
        .expect("Role");
    let binding = RoleBinding {
        metadata: ObjectMeta {
            name: Some("status-reader".into()),
            ..Default::default()
        },
        role_ref: RoleRef {
            api_group: Some("rbac.authorization.k8s.io".into()),
            kind: "Role".into(),
            name: "status-reader".into(),
        },
        subjects: Some(vec![
            Subject {
                kind: "ServiceAccount".into(),
                name: "supervisor".into(),
                namespace: Some(ns.clone()),
                ..Default::default()
            },
            Subject {
                kind: "User".into(),
                name: Identity::User.username().into(),
                api_group: Some("rbac.authorization.k8s.io".into()),
                ..Default::default()
            },
        ]),
    };
    Api::<RoleBinding>::namespaced(admin.clone(), &ns)
        .create(&PostParams::default(), &binding)
        .await
        .expect("RoleBinding");

    let scoped = token_for(&admin, &ns, Some(vec!["holdfast".into()])).await;
    let plain = token_for(&admin, &ns, None).await;
    let person = cp.token(Identity::User).to_owned();
    let http = reqwest::Client::builder()
        .add_root_certificate(reqwest::Certificate::from_pem(cp.ca_pem().as_bytes()).expect("CA"))
        .build()
        .expect("http client");
    let (cert, key) = serving_cert(cp, "audience");

    // (audiences flag, [(what, token, status expected)]).
    let scoped_only = "--token-audiences=holdfast".to_string();
    let both = format!("--token-audiences=holdfast,{API_AUDIENCE}");
    let cases: [(Option<&str>, [Expect; 3]); 3] = [
        (
            Some(&scoped_only),
            [
                ("the holdfast-audience token", &scoped, 200),
                ("the ServiceAccount's apiserver token", &plain, 401),
                ("a person's static token", &person, 401),
            ],
        ),
        (
            Some(&both),
            [
                ("the holdfast-audience token", &scoped, 200),
                ("the ServiceAccount's apiserver token", &plain, 200),
                ("a person's static token", &person, 200),
            ],
        ),
        (
            None,
            [
                ("the holdfast-audience token", &scoped, 401),
                ("the ServiceAccount's apiserver token", &plain, 200),
                ("a person's static token", &person, 200),
            ],
        ),
    ];
    for (i, (flag, expectations)) in cases.iter().enumerate() {
        let (admin_port, api_port) = (free_port().expect("port"), free_port().expect("port"));
        let mut args = vec![
            format!("--tls-cert={}", cert.display()),
            format!("--tls-key={}", key.display()),
            format!("--lease-name=audience-{i}"),
        ];
        args.extend(flag.map(str::to_owned));
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        let mut proc = start_plain_controller_on(
            cp,
            &ns,
            &format!("audience-{i}"),
            admin_port,
            api_port,
            &args,
        );
        wait_readyz(&mut proc, admin_port, true, Duration::from_secs(60)).await;
        for (what, token, expected) in expectations {
            let (code, answer) = status(&http, api_port, &ns, token).await;
            assert_eq!(
                code,
                *expected,
                "{what} with {flag:?}: {answer}; log:\n{}",
                proc.log_tail(20)
            );
            if code == 401 && flag.is_some() && *what != "a person's static token" {
                let message = answer["message"].as_str().unwrap_or_default();
                assert!(
                    message.contains("holdfast"),
                    "names the audience: {message}"
                );
            }
        }
    }
}
