//! The holder rule in Kueue mode, where the hold (and its holder) is on the TrainJob's
//! Workload: against the real Kueue controller, with the readmission gate running.

use holdfast_core::names::{ANN_HOLD_HOLDER, ANN_HOLD_INSTANCE};
use holdfast_tests::hold_support::annotation;
use holdfast_tests::hold_support::api::start_api;
use holdfast_tests::kueue_support::{Fixture, active};
use serde_json::json;

use super::{Callers, assert_not_holder, call};

#[tokio::test]
async fn a_second_caller_may_neither_release_nor_replace_the_holders_hold_on_a_workload() {
    let f = Fixture::start("holder-kq").await;
    f.create_job("job", json!({})).await;
    f.open_and_run("job").await;
    let callers = Callers::new(f.cp, &f.ns).await;
    let api = start_api(f.cp, f.exec.clone()).await;
    let (dispatch, intruder, ops) = (&callers.dispatch, &callers.intruder, &callers.ops);
    let workload = async || {
        f.live_workloads("job")
            .await
            .into_iter()
            .next()
            .expect("the job's Workload")
    };

    let (status, body) = call(&api, &f.ns, "job", dispatch, "hold", 1).await;
    assert_eq!((status, &body["outcome"]), (200, &json!("Held")), "{body}");
    let held = workload().await;
    assert!(!active(&held));
    assert_eq!(
        annotation(&held, ANN_HOLD_HOLDER),
        Some(dispatch.user.as_str())
    );

    let refused = call(&api, &f.ns, "job", intruder, "release", 1).await;
    assert_not_holder(&refused, &dispatch.user, &intruder.user);
    let refused = call(&api, &f.ns, "job", intruder, "hold", u64::MAX).await;
    assert_not_holder(&refused, &dispatch.user, &intruder.user);
    // Kueue writes the Workload's status meanwhile (its eviction); the hold is as it was.
    let still = workload().await;
    assert_eq!(annotation(&still, ANN_HOLD_INSTANCE), Some("1"));
    assert_eq!(
        annotation(&still, ANN_HOLD_HOLDER),
        Some(dispatch.user.as_str())
    );
    assert!(!active(&still));

    // The overrider takes the hold over; then only it releases.
    let (status, body) = call(&api, &f.ns, "job", ops, "hold", 2).await;
    assert_eq!((status, &body["outcome"]), (200, &json!("Held")), "{body}");
    let taken = workload().await;
    assert_eq!(annotation(&taken, ANN_HOLD_INSTANCE), Some("2"));
    assert_eq!(annotation(&taken, ANN_HOLD_HOLDER), Some(ops.user.as_str()));
    let refused = call(&api, &f.ns, "job", dispatch, "release", 2).await;
    assert_not_holder(&refused, &ops.user, &dispatch.user);
    let (status, body) = call(&api, &f.ns, "job", ops, "release", 2).await;
    assert_eq!(
        (status, &body["outcome"]),
        (200, &json!("Released")),
        "{body}"
    );
    let released = workload().await;
    assert!(active(&released));
    assert_eq!(annotation(&released, ANN_HOLD_HOLDER), None);
    f.finish().await;
}
