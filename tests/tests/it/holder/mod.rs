//! The holder is an identity: a hold records who placed it (`holdfast.dev/hold-holder`, the
//! caller's authenticated username), and only that username releases it or replaces it with
//! another instance, unless the caller may override (`create` on `holdfast.dev`
//! `trainjobs/override`, the chart's `<fullname>-overrider`, bound to nobody by default).
//!
//! Every call here goes over HTTPS to the hold API with a real ServiceAccount token from the
//! TokenRequest API, reviewed by the real apiserver (TokenReview, SubjectAccessReview), and
//! every caller is allowed the calls by the chart's own `<fullname>-hold-caller` ClusterRole:
//! what RBAC allows, the holder rule narrows. Plain mode here; Kueue mode in [`kueue`].

mod kueue;

use holdfast_controller::hold::{HoldExecutor, MetricCall};
use holdfast_core::names::{ANN_HOLD_HOLDER, ANN_HOLD_INSTANCE};
use holdfast_tests::hold_support::api::{HoldApi, start_api};
use holdfast_tests::hold_support::{
    annotation, create_trainjob, executor, read_trainjob, resource_version, suspended, trainjobs,
};
use holdfast_tests::rbac::{self, RELEASE, mint_token, service_account_user};
use holdfast_tests::{ControlPlane, Identity};
use k8s_openapi::api::core::v1::ServiceAccount;
use k8s_openapi::api::rbac::v1::{RoleBinding, RoleRef, Subject};
use kube::api::{Api, ObjectMeta, Patch, PatchParams, PostParams};
use serde_json::{Value, json};

/// Three ServiceAccounts of one namespace, each bound to the chart's hold-caller ClusterRole
/// there: the supervisor (`dispatch`), a second caller RBAC lets make every call
/// (`intruder`), and `ops`, also bound to the chart's overrider ClusterRole there.
pub struct Callers {
    pub ns: String,
    pub dispatch: Caller,
    pub intruder: Caller,
    pub ops: Caller,
}

/// A caller: its username (what the hold records) and its token.
pub struct Caller {
    pub user: String,
    pub token: String,
}

impl Callers {
    /// Creates the accounts and bindings in `ns` and waits until the authorizer allows them.
    pub async fn new(cp: &ControlPlane, ns: &str) -> Callers {
        let admin = cp.client(Identity::Admin).await.expect("admin");
        let names = ["dispatch", "intruder", "ops"];
        for name in names {
            let sa = ServiceAccount {
                metadata: ObjectMeta {
                    name: Some(name.into()),
                    ..Default::default()
                },
                ..Default::default()
            };
            Api::<ServiceAccount>::namespaced(admin.clone(), ns)
                .create(&PostParams::default(), &sa)
                .await
                .expect("ServiceAccount");
        }
        let bind = |role: String, subjects: &[&str]| RoleBinding {
            metadata: ObjectMeta {
                name: Some(role.clone()),
                ..Default::default()
            },
            role_ref: RoleRef {
                api_group: Some("rbac.authorization.k8s.io".into()),
                kind: "ClusterRole".into(),
                name: role,
            },
            subjects: Some(
                subjects
                    .iter()
                    .map(|s| Subject {
                        kind: "ServiceAccount".into(),
                        name: (*s).into(),
                        namespace: Some(ns.into()),
                        ..Default::default()
                    })
                    .collect(),
            ),
        };
        let bindings = Api::<RoleBinding>::namespaced(admin.clone(), ns);
        for binding in [
            bind(format!("{RELEASE}-hold-caller"), &names),
            bind(format!("{RELEASE}-overrider"), &["ops"]),
        ] {
            bindings
                .create(&PostParams::default(), &binding)
                .await
                .expect("RoleBinding of the chart's ClusterRole");
        }
        for (name, subresource) in [
            ("dispatch", "release"),
            ("intruder", "release"),
            ("ops", "release"),
            ("ops", "override"),
        ] {
            rbac::wait_until_may_call(&admin, &service_account_user(ns, name), ns, subresource)
                .await;
        }
        assert!(
            !rbac::may_call(
                &admin,
                &service_account_user(ns, "intruder"),
                ns,
                "override"
            )
            .await,
            "the hold-caller role does not let anyone override"
        );
        let caller = async |name: &str| Caller {
            user: service_account_user(ns, name),
            token: mint_token(&admin, ns, name, 3600).await.expect("token"),
        };
        Callers {
            ns: ns.to_owned(),
            dispatch: caller("dispatch").await,
            intruder: caller("intruder").await,
            ops: caller("ops").await,
        }
    }
}

/// `POST .../{call}` of TrainJob `job` as `who`, with a deadline a minute away.
pub async fn call(
    api: &HoldApi,
    ns: &str,
    job: &str,
    who: &Caller,
    call: &str,
    instance: u64,
) -> (u16, Value) {
    let deadline = (jiff::Timestamp::now() + jiff::SignedDuration::from_mins(1)).to_string();
    api.post(
        &format!("/v1/namespaces/{ns}/trainjobs/{job}/{call}"),
        Some(&who.token),
        &json!({"instance": instance, "deadline": deadline, "reason": format!("{call} {instance}")}),
    )
    .await
}

/// Asserts a `NotHolder` refusal that names the holder and who else may act.
#[track_caller]
pub fn assert_not_holder(answer: &(u16, Value), holder: &str, caller: &str) {
    let (status, body) = answer;
    assert_eq!(*status, 403, "{body}");
    assert_eq!(
        (body["error"].as_str(), body["cause"].as_str()),
        (Some("Rejected"), Some("NotHolder")),
        "{body}"
    );
    let message = body["message"].as_str().unwrap_or_default();
    assert!(
        message.contains(&format!("placed by {holder}")) && message.contains(caller),
        "names the holder and the caller: {message}"
    );
    assert!(
        message.contains("trainjobs/override"),
        "says who else may: {message}"
    );
}

struct Scene {
    cp: &'static ControlPlane,
    callers: Callers,
    api: HoldApi,
    exec: HoldExecutor,
}

impl Scene {
    /// A namespace with the three callers, the hold API (plain mode), and an opened running
    /// TrainJob `mnist`.
    async fn new(prefix: &str) -> Scene {
        let cp = ControlPlane::shared();
        let ns = cp.namespace(prefix).await.expect("namespace");
        create_trainjob(cp, &ns, "mnist", true).await;
        let exec = executor(cp).await;
        let api = start_api(cp, exec.clone()).await;
        let callers = Callers::new(cp, &ns).await;
        let s = Scene {
            cp,
            callers,
            api,
            exec,
        };
        let (status, body) = s.call(&s.callers.dispatch, "open", 0).await;
        assert_eq!(status, 200, "{body}");
        assert!(!suspended(&s.trainjob().await));
        s
    }

    async fn call(&self, who: &Caller, what: &str, instance: u64) -> (u16, Value) {
        call(&self.api, &self.callers.ns, "mnist", who, what, instance).await
    }

    async fn trainjob(&self) -> Value {
        read_trainjob(self.cp, &self.callers.ns, "mnist").await
    }
}

#[tokio::test]
async fn a_second_caller_may_not_release_the_holders_hold() {
    let s = Scene::new("holder-release").await;
    let (dispatch, intruder) = (&s.callers.dispatch, &s.callers.intruder);
    let (status, body) = s.call(dispatch, "hold", 1).await;
    assert_eq!((status, &body["outcome"]), (200, &json!("Held")), "{body}");
    let held = s.trainjob().await;
    assert_eq!(
        annotation(&held, ANN_HOLD_HOLDER),
        Some(dispatch.user.as_str())
    );

    let refused = s.call(intruder, "release", 1).await;
    assert_not_holder(&refused, &dispatch.user, &intruder.user);
    let after = s.trainjob().await;
    assert_eq!(
        resource_version(&after),
        resource_version(&held),
        "nothing written"
    );
    assert!(suspended(&after));
    assert_eq!(
        s.exec
            .metrics()
            .count(MetricCall::release, "rejected", "not_holder"),
        1
    );

    // The holder's own release lands.
    let (status, body) = s.call(dispatch, "release", 1).await;
    assert_eq!(
        (status, &body["outcome"]),
        (200, &json!("Released")),
        "{body}"
    );
    let tj = s.trainjob().await;
    assert!(!suspended(&tj));
    assert_eq!(
        annotation(&tj, ANN_HOLD_HOLDER),
        None,
        "removed with the hold"
    );
}

/// The `Hold(u64::MAX)` attack: the instance is readable from the annotations, and a hold of
/// the largest instance would make every later Hold of the supervisor's answer `StaleHold`.
#[tokio::test]
async fn a_second_caller_may_not_replace_the_hold_with_a_newer_instance() {
    let s = Scene::new("holder-replace").await;
    let (dispatch, intruder) = (&s.callers.dispatch, &s.callers.intruder);
    let (status, body) = s.call(dispatch, "hold", 1).await;
    assert_eq!(status, 200, "{body}");

    let refused = s.call(intruder, "hold", u64::MAX).await;
    assert_not_holder(&refused, &dispatch.user, &intruder.user);
    let tj = s.trainjob().await;
    assert_eq!(annotation(&tj, ANN_HOLD_INSTANCE), Some("1"));

    // Hold of the instance in force by another identity changes nothing.
    let (status, body) = s.call(intruder, "hold", 1).await;
    assert_eq!(
        (status, &body["outcome"]),
        (200, &json!("AlreadyInForce")),
        "{body}"
    );
    assert_eq!(
        annotation(&s.trainjob().await, ANN_HOLD_HOLDER),
        Some(dispatch.user.as_str()),
        "the holder is unchanged"
    );

    // The supervisor's next hold is still its own to place, and Status names its holder.
    let (status, body) = s.call(dispatch, "hold", 2).await;
    assert_eq!((status, &body["outcome"]), (200, &json!("Held")), "{body}");
    let (status, body) = s
        .api
        .get(
            &format!("/v1/namespaces/{}/trainjobs/mnist/status", s.callers.ns),
            &dispatch.token,
        )
        .await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["hold"]["instance"], 2);
    assert_eq!(body["hold"]["holder"], dispatch.user.as_str());
}

#[tokio::test]
async fn an_overrider_may_release_and_becomes_the_holder() {
    let s = Scene::new("holder-override").await;
    let (dispatch, ops) = (&s.callers.dispatch, &s.callers.ops);
    let (status, body) = s.call(dispatch, "hold", 1).await;
    assert_eq!(status, 200, "{body}");

    // An override Hold of a newer instance records the overrider.
    let (status, body) = s.call(ops, "hold", 2).await;
    assert_eq!((status, &body["outcome"]), (200, &json!("Held")), "{body}");
    let tj = s.trainjob().await;
    assert_eq!(annotation(&tj, ANN_HOLD_INSTANCE), Some("2"));
    assert_eq!(annotation(&tj, ANN_HOLD_HOLDER), Some(ops.user.as_str()));
    // The hold is the overrider's now: the supervisor may not release it.
    let refused = s.call(dispatch, "release", 2).await;
    assert_not_holder(&refused, &ops.user, &dispatch.user);
    // Override does not lift the stale rules.
    let (status, body) = s.call(ops, "release", 1).await;
    assert_eq!(
        (status, body["cause"].as_str()),
        (409, Some("StaleHold")),
        "{body}"
    );

    // The overrider, its holder now, releases it.
    let (status, body) = s.call(ops, "release", 2).await;
    assert_eq!(
        (status, &body["outcome"]),
        (200, &json!("Released")),
        "{body}"
    );
    let tj = s.trainjob().await;
    assert!(!suspended(&tj));
    assert_eq!(annotation(&tj, ANN_HOLD_HOLDER), None);

    // And an overrider releases another holder's hold outright.
    let (status, _) = s.call(dispatch, "hold", 3).await;
    assert_eq!(status, 200);
    let (status, body) = s.call(ops, "release", 3).await;
    assert_eq!(
        (status, &body["outcome"]),
        (200, &json!("Released")),
        "{body}"
    );
}

/// A hold written by a holdfast that recorded no holder (before an upgrade) is released or
/// replaced by any caller RBAC allows, as before; the next Hold records its caller.
#[tokio::test]
async fn a_hold_from_before_holders_were_recorded_is_released_as_before() {
    let s = Scene::new("holder-legacy").await;
    let (dispatch, intruder) = (&s.callers.dispatch, &s.callers.intruder);
    // The hold an older controller wrote: suspend and the annotations, no holder (written
    // here as the admin: no webhook runs on this topic's control plane).
    let controller = s.cp.client(Identity::Admin).await.expect("admin");
    let legacy = json!({
        "metadata": {"annotations": {ANN_HOLD_INSTANCE: "1",
            "holdfast.dev/hold-placed-at": holdfast_core::rfc3339::seconds(jiff::Timestamp::now())}},
        "spec": {"suspend": true}
    });
    trainjobs(&controller, &s.callers.ns)
        .patch("mnist", &PatchParams::default(), &Patch::Merge(&legacy))
        .await
        .expect("an older controller's hold");
    let tj = s.trainjob().await;
    assert!(suspended(&tj));
    assert_eq!(annotation(&tj, ANN_HOLD_HOLDER), None);

    // Any caller allowed the call replaces it; that Hold records its caller.
    let (status, body) = s.call(intruder, "hold", 2).await;
    assert_eq!((status, &body["outcome"]), (200, &json!("Held")), "{body}");
    assert_eq!(
        annotation(&s.trainjob().await, ANN_HOLD_HOLDER),
        Some(intruder.user.as_str())
    );
    // From then on the holder rule applies.
    let refused = s.call(dispatch, "release", 2).await;
    assert_not_holder(&refused, &intruder.user, &dispatch.user);

    // A second legacy hold is released by any caller, as before.
    let (status, _) = s.call(intruder, "release", 2).await;
    assert_eq!(status, 200);
    trainjobs(&controller, &s.callers.ns)
        .patch("mnist", &PatchParams::default(), &Patch::Merge(&legacy))
        .await
        .expect("an older controller's hold");
    let (status, body) = s.call(dispatch, "release", 1).await;
    assert_eq!(
        (status, &body["outcome"]),
        (200, &json!("Released")),
        "{body}"
    );
}
