//! Concurrent holds and releases in plain mode: see `hold_support::race` for what is run
//! and checked. `HOLDFAST_RACE_CALLS` sets the number of calls (default 1000).

use holdfast_tests::hold_support;

use std::time::Duration;

use hold_support::*;
use holdfast_core::mode::Mode;
use holdfast_tests::{ControlPlane, Identity};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_holds_and_releases_never_let_an_older_instance_replace_a_newer_one() {
    let cp = ControlPlane::shared();
    let ns = cp.namespace("race").await.expect("namespace");
    create_trainjob(cp, &ns, "race", true).await;
    executor(cp)
        .await
        .open(&ns, "race", meta(None, Duration::from_secs(30)))
        .await
        .expect("open");
    let admin = cp.client(Identity::Admin).await.expect("admin");
    race::run(
        cp,
        Mode::Plain,
        &ns,
        "race",
        trainjobs(&admin, &ns),
        "race",
        race::calls(),
    )
    .await;
}
