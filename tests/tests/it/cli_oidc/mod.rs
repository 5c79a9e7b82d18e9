//! `kubectl holdfast` with a kubeconfig user of the `auth-provider: oidc` form (what on-prem
//! clusters behind Dex or Keycloak hand out), against a real apiserver that trusts a real (if
//! tiny) OpenID Connect issuer on loopback TLS ([`issuer`]): the apiserver runs with the
//! `--oidc-*` flags pointing at it, the chart's hold-caller role is bound to the OIDC user,
//! and the built `kubectl-holdfast` binary is run with a kubeconfig whose id-token has
//! expired and whose refresh token is good.
//! Needs `cargo build -p holdfast-cli` first (`tests/run.sh` builds every binary).

mod issuer;

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use holdfast_core::names::ANN_HOLD_INSTANCE;
use holdfast_tests::control_plane::Options;
use holdfast_tests::helm::{self, Install};
use holdfast_tests::hold_support::api::start_api;
use holdfast_tests::hold_support::{
    annotation, create_trainjob, executor, hold_annotations, read_trainjob, suspended,
};
use holdfast_tests::holdfast::owned_control_plane_with;
use holdfast_tests::wait::wait_for;
use holdfast_tests::{ControlPlane, Identity};
use k8s_openapi::api::rbac::v1::{ClusterRole, RoleBinding};
use kube::api::{Api, PostParams};
use serde_json::{Value, json};

use crate::cli::{code, holdfast, json, kubectl_holdfast, stderr, stdout};
use issuer::{CLIENT_ID, Issuer};

/// The apiserver's OIDC flags for `issuer`: users are `oidc:<sub>`.
fn oidc_apiserver(issuer: &Issuer) -> Options {
    Options {
        apiserver_files: vec![("oidc-ca.crt".into(), issuer.ca_pem.clone())],
        apiserver_args: vec![
            format!("--oidc-issuer-url={}", issuer.url),
            format!("--oidc-client-id={CLIENT_ID}"),
            "--oidc-ca-file={dir}/oidc-ca.crt".into(),
            "--oidc-username-claim=sub".into(),
            "--oidc-username-prefix=oidc:".into(),
            "--oidc-signing-algs=ES256".into(),
        ],
        ..Options::default()
    }
}

/// A kubeconfig (for the apiserver at `server`, trusting `server_ca`) whose user `user` is
/// an `oidc` auth-provider of `issuer` with `id_token` and `refresh_token`, trusting the
/// issuer's CA through `idp-certificate-authority`, as kubectl's users write it.
fn oidc_kubeconfig(
    dir: &Path,
    (server, server_ca): (&str, &Path),
    issuer: &Issuer,
    user: &str,
    (id_token, refresh_token): (&str, &str),
) -> PathBuf {
    let idp_ca = dir.join("idp-ca.crt");
    std::fs::write(&idp_ca, &issuer.ca_pem).expect("write the issuer's CA");
    let path = dir.join(format!("kubeconfig-{user}.yaml"));
    std::fs::write(
        &path,
        format!(
            "apiVersion: v1\nkind: Config\nclusters:\n- name: c\n  cluster:\n    server: {server}\n    certificate-authority: {server_ca}\nusers:\n- name: {user}\n  user:\n    auth-provider:\n      name: oidc\n      config:\n        idp-issuer-url: {url}\n        client-id: {CLIENT_ID}\n        id-token: {id_token}\n        refresh-token: {refresh_token}\n        idp-certificate-authority: {idp_ca}\ncontexts:\n- name: {user}\n  context:\n    cluster: c\n    user: {user}\ncurrent-context: {user}\n",
            server_ca = server_ca.display(),
            url = issuer.url,
            idp_ca = idp_ca.display(),
        ),
    )
    .expect("write the kubeconfig");
    path
}

/// The auth-provider config of the kubeconfig's (only) user, as the file holds it now.
fn auth_provider_config(kubeconfig: &Path) -> HashMap<String, String> {
    let kc = kube::config::Kubeconfig::read_from(kubeconfig).expect("a kubeconfig");
    kc.auth_infos
        .into_iter()
        .next()
        .and_then(|u| u.auth_info)
        .and_then(|a| a.auth_provider)
        .map(|p| p.config)
        .expect("an auth-provider")
}

/// Who the apiserver takes `token` for (a SelfSubjectReview); None if it refuses it.
async fn whoami(cp: &ControlPlane, token: &str) -> Option<String> {
    let http = reqwest::Client::builder()
        .add_root_certificate(reqwest::Certificate::from_pem(cp.ca_pem().as_bytes()).expect("CA"))
        .timeout(Duration::from_secs(10))
        .build()
        .expect("http client");
    let resp = http
        .post(format!(
            "{}/apis/authentication.k8s.io/v1/selfsubjectreviews",
            cp.server
        ))
        .bearer_auth(token)
        .json(&json!({"apiVersion": "authentication.k8s.io/v1", "kind": "SelfSubjectReview"}))
        .send()
        .await
        .expect("reach the apiserver");
    if !resp.status().is_success() {
        return None;
    }
    let review: Value = resp.json().await.expect("a SelfSubjectReview");
    review["status"]["userInfo"]["username"]
        .as_str()
        .map(str::to_owned)
}

/// The chart's hold-caller ClusterRole, bound to `user` in `ns` through the chart's own
/// tenant delegation (`rbac.holdCallerBindings`), as rendered by helm; waits until the
/// authorizer says so.
async fn bind_the_charts_hold_caller_role(cp: &ControlPlane, ns: &str, user: &str) {
    let b = "rbac.holdCallerBindings[0]";
    let docs = helm::ensure()
        .expect("helm (tests/cluster/helm/build.sh)")
        .render(
            &Install::new("hf", "holdfast-system")
                .set(format!("{b}.namespace={ns}"))
                .set(format!("{b}.subjects[0].kind=User"))
                .set(format!("{b}.subjects[0].name={user}"))
                .set(format!(
                    "{b}.subjects[0].apiGroup=rbac.authorization.k8s.io"
                )),
        )
        .expect("render the chart");
    let find = |kind: &str, name: &str| {
        docs.iter()
            .find(|d| d["kind"] == kind && d["metadata"]["name"] == name)
            .cloned()
            .unwrap_or_else(|| panic!("the chart renders no {kind} {name}"))
    };
    let role: ClusterRole =
        serde_json::from_value(find("ClusterRole", "hf-holdfast-hold-caller")).expect("role");
    let binding: RoleBinding =
        serde_json::from_value(find("RoleBinding", "hf-holdfast-hold-caller-0")).expect("binding");
    let admin = cp.client(Identity::Admin).await.expect("admin");
    Api::<ClusterRole>::all(admin.clone())
        .create(&PostParams::default(), &role)
        .await
        .expect("create the hold-caller ClusterRole");
    Api::<RoleBinding>::namespaced(admin.clone(), ns)
        .create(&PostParams::default(), &binding)
        .await
        .expect("create the hold-caller RoleBinding");
    holdfast_tests::rbac::wait_until_may_call(&admin, user, ns, "hold").await;
}

#[tokio::test]
async fn kubectl_holdfast_with_an_oidc_kubeconfig_refreshes_an_expired_id_token_and_holds_as_that_user()
 {
    let issuer = Issuer::start().await;
    let cp = owned_control_plane_with(oidc_apiserver(&issuer)).await;
    // The apiserver fetches the issuer's discovery document and keys after it starts: until
    // then it authenticates no id-token. Probe with a fresh one.
    let fresh = issuer.id_token("jane", 600);
    let who = wait_for(
        "the apiserver to authenticate the issuer's id-tokens",
        Duration::from_secs(90),
        || whoami(&cp, &fresh),
    )
    .await;
    assert_eq!(who, "oidc:jane");
    let expired = issuer.id_token("jane", -600);
    assert_eq!(
        whoami(&cp, &expired).await,
        None,
        "the apiserver refuses the expired id-token"
    );

    let ns = cp.namespace("cli-oidc").await.expect("namespace");
    create_trainjob(&cp, &ns, "mnist", false).await;
    bind_the_charts_hold_caller_role(&cp, &ns, "oidc:jane").await;
    let api = start_api(&cp, executor(&cp).await).await;
    let dir = tempfile::tempdir().expect("tempdir");
    let server = (cp.server.as_str(), &*cp.dir().join("ca.crt"));
    let refresh = issuer.refresh_token("jane");
    let kubeconfig = oidc_kubeconfig(dir.path(), server, &issuer, "jane", (&expired, &refresh));
    let job = format!("{ns}/mnist");

    let out = holdfast(
        &cp,
        &kubeconfig,
        &api.base,
        &["hold", &job, "--instance", "1", "--reason", "oidc"],
    )
    .await;
    assert_eq!(code(&out), 0, "{}{}", stdout(&out), stderr(&out));
    assert_eq!(json(&out)["outcome"], "Held");
    assert_eq!(
        issuer.presented(),
        [refresh.as_str()],
        "the token endpoint was called with the kubeconfig's refresh token"
    );
    let tj = read_trainjob(&cp, &ns, "mnist").await;
    assert_eq!(annotation(&tj, ANN_HOLD_INSTANCE), Some("1"));
    assert!(suspended(&tj));
    // As kubectl does, the refreshed id-token and the rotated refresh token are written
    // back: the file's id-token is one the apiserver takes for jane.
    let written = auth_provider_config(&kubeconfig);
    assert_ne!(written["refresh-token"], refresh, "{written:?}");
    assert_ne!(written["id-token"], expired);
    assert_eq!(
        whoami(&cp, &written["id-token"]).await.as_deref(),
        Some("oidc:jane")
    );
    assert_eq!(written["client-id"], CLIENT_ID, "the rest is kept");

    let out = holdfast(&cp, &kubeconfig, &api.base, &["status", &job, "-o", "json"]).await;
    assert_eq!(code(&out), 0, "{}{}", stdout(&out), stderr(&out));
    assert_eq!(json(&out)["hold"]["instance"], 1);
    // Listing reads the TrainJobs with the kube client, as jane.
    let out = holdfast(
        &cp,
        &kubeconfig,
        &api.base,
        &["status", "-n", &ns, "-o", "json"],
    )
    .await;
    assert_eq!(code(&out), 0, "{}{}", stdout(&out), stderr(&out));
    let listed = json(&out);
    assert_eq!(listed["items"][0]["name"], "mnist", "{listed}");
    assert_eq!(listed["items"][0]["hold"]["reason"], "oidc", "{listed}");

    let out = holdfast(
        &cp,
        &kubeconfig,
        &api.base,
        &["release", &job, "--instance", "1"],
    )
    .await;
    assert_eq!(code(&out), 0, "{}{}", stdout(&out), stderr(&out));
    assert_eq!(json(&out)["outcome"], "Released");
    assert!(hold_annotations(&read_trainjob(&cp, &ns, "mnist").await).is_empty());
    assert_eq!(
        issuer.presented(),
        [refresh.as_str()],
        "later runs used the written-back id-token: no second refresh"
    );

    // The calls were made as jane: mallory, whose refresh works just as well but who has no
    // hold-caller binding, is refused by the hold API.
    let mallory_refresh = issuer.refresh_token("mallory");
    let mallory = oidc_kubeconfig(
        dir.path(),
        server,
        &issuer,
        "mallory",
        (&issuer.id_token("mallory", -600), &mallory_refresh),
    );
    let out = holdfast(&cp, &mallory, &api.base, &["hold", &job, "--instance", "2"]).await;
    assert_eq!(
        code(&out),
        10,
        "Forbidden: {}{}",
        stdout(&out),
        stderr(&out)
    );
    assert_eq!(
        issuer.presented(),
        [refresh.clone(), mallory_refresh.clone()]
    );
    assert!(hold_annotations(&read_trainjob(&cp, &ns, "mnist").await).is_empty());

    // Two runs at once with an expired id-token, and a slow issuer that rotates refresh
    // tokens: the first refreshes under the kubeconfig's lock; the second waits for the lock,
    // reads the file again and uses the token the first wrote. Without the lock both would
    // present the same refresh token, and the second would be refused it as spent.
    let again = issuer.refresh_token("jane");
    let both = oidc_kubeconfig(
        dir.path(),
        server,
        &issuer,
        "jane",
        (&issuer.id_token("jane", -600), &again),
    );
    issuer.set_token_delay(Duration::from_secs(1));
    let status = ["status", job.as_str(), "-o", "json"];
    let (one, two) = tokio::join!(
        holdfast(&cp, &both, &api.base, &status),
        holdfast(&cp, &both, &api.base, &status)
    );
    for out in [&one, &two] {
        assert_eq!(code(out), 0, "{}{}", stdout(out), stderr(out));
    }
    assert_eq!(
        issuer.presented(),
        [refresh, mallory_refresh, again],
        "one refresh for the two runs"
    );
    assert!(
        !PathBuf::from(format!("{}.lock", both.display())).exists(),
        "no lock is left behind"
    );
}

/// A refresh the issuer refuses (a spent or revoked refresh token) ends the run before
/// anything is sent: exit 11 (credentials), the issuer's reason on stderr, no panic, and the
/// kubeconfig left as it was.
#[tokio::test]
async fn an_oidc_refresh_the_issuer_refuses_exits_with_the_credentials_code_and_its_reason() {
    let issuer = Issuer::start().await;
    let dir = tempfile::tempdir().expect("tempdir");
    let server_ca = dir.path().join("server-ca.crt");
    std::fs::write(&server_ca, &issuer.ca_pem).expect("write");
    let expired = issuer.id_token("jane", -600);
    let kubeconfig = oidc_kubeconfig(
        dir.path(),
        ("https://127.0.0.1:9", &server_ca),
        &issuer,
        "jane",
        (&expired, "refresh-revoked"),
    );
    let before = std::fs::read(&kubeconfig).expect("read");

    let out = kubectl_holdfast(
        &kubeconfig,
        &[
            "--server",
            "https://127.0.0.1:9",
            "hold",
            "ns/mnist",
            "--instance",
            "1",
        ],
    )
    .await;
    assert_eq!(code(&out), 11, "{}{}", stdout(&out), stderr(&out));
    let err = stderr(&out);
    assert!(
        err.contains("invalid_grant")
            && err.contains("log in again")
            && err.contains(&issuer.url)
            && !err.contains("panicked"),
        "{err}"
    );
    assert_eq!(issuer.presented(), ["refresh-revoked"]);
    assert_eq!(
        std::fs::read(&kubeconfig).expect("read"),
        before,
        "the kubeconfig is untouched"
    );
}
