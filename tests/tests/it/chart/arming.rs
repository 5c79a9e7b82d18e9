//! Arming a real `helm install`: disarmed until its webhook answers, armed at once when
//! marked, and kept armed across `helm upgrade` and `helm rollback`.

use super::*;

/// The configurations' live JSON, validating then mutating.
async fn live_configurations(admin: &kube::Client, name: &str) -> Vec<Value> {
    let v = Api::<ValidatingWebhookConfiguration>::all(admin.clone())
        .get(name)
        .await
        .expect("validating");
    let m = Api::<MutatingWebhookConfiguration>::all(admin.clone())
        .get(name)
        .await
        .expect("mutating");
    vec![
        serde_json::to_value(v).expect("json"),
        serde_json::to_value(m).expect("json"),
    ]
}

/// Arming, with exactly the chart's RBAC (the controller's ServiceAccount) and its flags: a
/// fresh `helm install` registers every entry disarmed; while no webhook answers the probe
/// the controller's pass arms nothing (it waits, saying the webhook did not answer). A
/// configuration marked armed (holdfast has served: a restart) is armed at once, without a
/// probe: the entries the chart names Fail. `helm upgrade` (another value) keeps them armed
/// and marked: the chart renders what it looks up.
#[tokio::test]
async fn a_disarmed_install_stays_disarmed_until_its_webhook_answers_and_an_armed_one_stays_armed_across_helm_upgrade()
 {
    use holdfast_controller::arming::{self, State};
    let _live = LIVE_WEBHOOKS.lock().await;
    let r = InstalledRelease::install("hf-arm", "arm").await;
    let (admin, name) = (&r.admin, r.name.as_str());
    for c in live_configurations(admin, name).await {
        assert_disarmed(&c);
    }
    let config = controller_args_from_rendered(&r.docs)
        .configs()
        .expect("configs")
        .arming
        .expect("the chart arms its configurations");
    assert_eq!(config.configuration, name);
    let ctl = r.controller().await;

    // No webhook answers (no pod runs here): nothing is armed.
    match arming::pass(&ctl, &config).await {
        State::Waiting(why) => assert!(why.contains("did not answer the probe"), "{why}"),
        State::Armed => panic!("armed without an answer"),
    }
    for c in live_configurations(admin, name).await {
        assert_disarmed(&c);
    }

    // Marked armed (holdfast served before): armed at once.
    Api::<ValidatingWebhookConfiguration>::all(admin.clone())
        .patch(
            name,
            &kube::api::PatchParams::default(),
            &kube::api::Patch::Merge(
                serde_json::json!({"metadata": {"annotations": {"holdfast.dev/armed": "true"}}}),
            ),
        )
        .await
        .expect("mark");
    assert_eq!(arming::pass(&ctl, &config).await, State::Armed);
    let expect_armed = |configs: &[Value], when: &str| {
        for c in configs {
            assert!(holdfast_core::arming::is_marked(c), "{when}: marked");
            assert_eq!(
                holdfast_core::arming::arming(c),
                holdfast_core::arming::Arming::default(),
                "{when}: every entry armed: {c}"
            );
            assert_eq!(
                c["webhooks"]
                    .as_array()
                    .expect("webhooks")
                    .iter()
                    .filter(|w| w["failurePolicy"] == "Fail")
                    .count(),
                holdfast_core::arming::fails_closed(c).len(),
                "{when}: the named entries, and only they, fail closed"
            );
        }
    };
    expect_armed(&live_configurations(admin, name).await, "armed");

    r.helm("upgrade", &["--set", "logFormat=plain"])
        .expect("helm upgrade");
    expect_armed(
        &live_configurations(admin, name).await,
        "after helm upgrade",
    );

    // A rollback to the first revision, rendered before arming, sets its entries back to
    // Ignore but cannot take the mark (the controller's alone, never rendered by the chart):
    // the controller re-arms from the mark, with no probe answered (no pod runs here).
    // Helm 4 applies server-side: the first revision's Ignore conflicts with the controller's
    // Fail, and the rollback stops naming the controller and the fields, until it is told to
    // take them back (`--force-conflicts`, as the upgrade page says).
    r.rollback_over_the_controller(1, "failurePolicy", || async {
        expect_armed(
            &live_configurations(admin, name).await,
            "a refused rollback",
        );
    })
    .await;
    for c in live_configurations(admin, name).await {
        assert!(
            holdfast_core::arming::is_marked(&c),
            "a rollback keeps the controller's mark: {c}"
        );
    }
    assert_eq!(arming::pass(&ctl, &config).await, State::Armed);
    expect_armed(
        &live_configurations(admin, name).await,
        "after helm rollback",
    );

    r.uninstall();
}
