//! The Events a user sees in `kubectl describe`, read back as kubectl reads them (core `v1`
//! Events by `involvedObject` kind, namespace, name and uid): holds placed, released and
//! refused with their cause, the start gate opened, repeats counted in one Event, the
//! publisher's bounds under a burst, and certificate rotation on its Secrets. (Readmission
//! waiting and passed: `holds_kueue::`; snapshot taken and adopted: `snapshots::`.)

use holdfast_tests::hold_support;
use holdfast_tests::scene::Scene;

use std::time::Duration;

use hold_support::*;
use holdfast_controller::events::{EventMetrics, Notice, Publisher, PublisherConfig, Severity};
use holdfast_controller::webhook_certs::{self as certs, CertConfig, ServingSecret};
use holdfast_core::hold::{HoldError, Outcome};
use holdfast_tests::described::{Described, note, occurrences};
use holdfast_tests::wait::wait_for;
use holdfast_tests::{ControlPlane, Identity};
use k8s_openapi::api::core::v1::{ObjectReference, Pod, Secret};
use kube::api::{Api, PostParams};
use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;

const MINUTE: Duration = Duration::from_secs(60);

/// A publisher writing as holdfast's controller.
async fn publisher(cp: &ControlPlane, config: PublisherConfig) -> Publisher {
    let client = cp.client(Identity::Controller).await.expect("controller");
    Publisher::start(client, config, EventMetrics::default())
}

fn uid(obj: &Value) -> String {
    obj["metadata"]["uid"].as_str().expect("uid").to_owned()
}

/// The TrainJob as `kubectl describe trainjob` names it.
fn trainjob<'a>(ns: &'a str, name: &'a str, uid: &'a str) -> Described<'a> {
    Described {
        kind: "TrainJob",
        namespace: ns,
        name,
        uid,
    }
}

#[tokio::test]
async fn open_hold_and_release_leave_normal_events_on_the_trainjob() {
    let s = Scene::new("ev-cycle").await;
    let ns = &s.ns;
    let tj = s.job("job", true).await;
    let exec = executor(s.cp)
        .await
        .with_events(publisher(s.cp, PublisherConfig::default()).await);
    let admin = s.admin.clone();
    let uid = uid(&tj);
    let job = trainjob(ns, "job", &uid);

    assert_eq!(
        exec.open(ns, "job", meta(None, MINUTE)).await,
        Ok(Outcome::Opened { started: true })
    );
    let opened = job.wait(&admin, "StartGateOpened", |_| true).await;
    assert_eq!(note(&opened), "Start gate opened: the TrainJob starts.");
    assert_eq!(opened.type_.as_deref(), Some("Normal"));

    let mut m = meta(Some(3), MINUTE);
    m.reason = Some("node lost".into());
    assert_eq!(exec.hold(ns, "job", m).await, Ok(Outcome::Held));
    let placed = job.wait(&admin, "HoldPlaced", |_| true).await;
    assert_eq!(
        note(&placed),
        "Hold 3 is in force (reason: node lost): spec.suspend is true."
    );
    assert_eq!(placed.action.as_deref(), Some("Hold"));
    assert_eq!(
        placed.reporting_component.as_deref(),
        Some("holdfast-controller")
    );

    assert_eq!(
        exec.release(ns, "job", meta(Some(3), MINUTE)).await,
        Ok(Outcome::Released { resumed: true })
    );
    let released = job.wait(&admin, "HoldReleased", |_| true).await;
    assert_eq!(note(&released), "Hold 3 released: the TrainJob resumes.");
    let reasons: Vec<String> = job
        .events(&admin)
        .await
        .into_iter()
        .filter_map(|e| e.reason)
        .collect();
    assert_eq!(
        reasons,
        ["StartGateOpened", "HoldPlaced", "HoldReleased"],
        "one Event per call, in order"
    );
}

#[tokio::test]
async fn a_refused_release_is_a_warning_naming_its_cause_and_the_pods_that_remain() {
    let s = Scene::new("ev-refused").await;
    let ns = &s.ns;
    let tj = s.job("job", true).await;
    let exec = executor(s.cp)
        .await
        .with_events(publisher(s.cp, PublisherConfig::default()).await);
    let admin = s.admin.clone();
    let uid = uid(&tj);
    let job = trainjob(ns, "job", &uid);
    // Started through its gate, then held: a Release would resume it.
    assert_eq!(
        exec.open(ns, "job", meta(None, MINUTE)).await,
        Ok(Outcome::Opened { started: true })
    );
    assert_eq!(
        exec.hold(ns, "job", meta(Some(2), MINUTE)).await,
        Ok(Outcome::Held)
    );
    // A pod of the held execution, owned by its Job as the Job controller's are (no node
    // runs it: it stays Pending).
    let owners = holdfast_tests::execution_owners::ensure(&admin, ns, "job", &uid)
        .await
        .expect("the execution's owners");
    let pod: Pod = serde_json::from_value(holdfast_tests::execution_owners::pod(
        "job-node-0-0",
        "job",
        &owners,
        json!({}),
    ))
    .expect("pod");
    Api::<Pod>::namespaced(admin.clone(), ns)
        .create(&PostParams::default(), &pod)
        .await
        .expect("create pod");

    assert_eq!(
        exec.release(ns, "job", meta(Some(2), MINUTE)).await,
        Err(HoldError::PodsRemain)
    );
    let refused = job.wait(&admin, "ReleaseRefused", |_| true).await;
    assert_eq!(refused.type_.as_deref(), Some("Warning"));
    assert_eq!(
        note(&refused),
        "Release 2 refused: PodsRemain: pods of the held execution remain; nothing was written: job-node-0-0"
    );

    // A release of an older instance: Rejected, its cause named.
    let stale = exec
        .release(ns, "job", meta(Some(1), MINUTE))
        .await
        .expect_err("hold 2 is in force");
    let event = job
        .wait(&admin, "ReleaseRefused", |e| {
            note(e).starts_with("Release 1 refused: Rejected (StaleHold): ")
        })
        .await;
    assert!(
        note(&event).ends_with(&stale.body().message),
        "{}",
        note(&event)
    );
}

#[tokio::test]
async fn identical_calls_are_one_event_with_a_count() {
    let s = Scene::new("ev-series").await;
    let ns = &s.ns;
    let tj = s.job("job", false).await;
    let exec = executor(s.cp)
        .await
        .with_events(publisher(s.cp, PublisherConfig::default()).await);
    let admin = s.admin.clone();
    let uid = uid(&tj);
    let job = trainjob(ns, "job", &uid);

    // dispatch retrying one hold: the first lands, the rest find it in force.
    for _ in 0..6 {
        exec.hold(ns, "job", meta(Some(5), MINUTE))
            .await
            .expect("hold");
    }
    let event = job
        .wait(&admin, "HoldPlaced", |e| occurrences(e) == 6)
        .await;
    assert_eq!(
        job.with_reason(&admin, "HoldPlaced").await.len(),
        1,
        "one Event object: {event:#?}"
    );
    assert!(event.series.is_some(), "counted in its series");

    // The same calls again later are counted in the same Event (within the series window).
    for _ in 0..3 {
        exec.hold(ns, "job", meta(Some(5), MINUTE))
            .await
            .expect("hold");
    }
    job.wait(&admin, "HoldPlaced", |e| occurrences(e) == 9)
        .await;
    assert_eq!(job.events(&admin).await.len(), 1);
}

#[tokio::test]
async fn a_burst_beyond_the_queue_is_dropped_and_counted_and_warnings_still_go_out() {
    let s = Scene::new("ev-burst").await;
    let ns = &s.ns;
    let tj = s.job("job", false).await;
    let admin = s.admin.clone();
    let uid = uid(&tj);
    let job = trainjob(ns, "job", &uid);
    let events = publisher(
        s.cp,
        PublisherConfig {
            queue_per_severity: 4,
            writes_per_second: 20,
            burst: 2,
            ..PublisherConfig::default()
        },
    )
    .await;
    let regarding = ObjectReference {
        api_version: Some("trainer.kubeflow.org/v1alpha1".into()),
        kind: Some("TrainJob".into()),
        namespace: Some(ns.clone()),
        name: Some("job".into()),
        uid: Some(uid.clone()),
        ..ObjectReference::default()
    };
    // 100 distinct Normal Events at once (this test's runtime has one thread: the worker
    // cannot write while this loop runs), then a Warning.
    for i in 0..100 {
        events.publish(
            &regarding,
            Notice::normal("BurstStep", "Test", format!("step {i}")),
        );
    }
    events.publish(
        &regarding,
        Notice::warning("BurstWarning", "Test", "after the burst"),
    );
    let m = events.metrics().clone();
    assert_eq!(m.count(Severity::Normal, "dropped"), 96);
    assert_eq!(m.queued(), 5);

    let mut written = wait_for("the queue written", Duration::from_secs(30), || async {
        let all = job.events(&admin).await;
        (all.len() == 5).then_some(all)
    })
    .await;
    // Named `{object}.{time of the write}`: by name is the order they were written in.
    written.sort_by(|a, b| a.metadata.name.cmp(&b.metadata.name));
    assert_eq!(
        written[0].reason.as_deref(),
        Some("BurstWarning"),
        "the Warning is written before the queued Normals"
    );
    let notes: Vec<&str> = written[1..].iter().map(note).collect();
    assert_eq!(notes, ["step 0", "step 1", "step 2", "step 3"]);
    assert_eq!(m.count(Severity::Normal, "created"), 4);
    assert_eq!(m.count(Severity::Warning, "created"), 1);
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert_eq!(
        job.events(&admin).await.len(),
        5,
        "nothing beyond the bound"
    );
}

#[tokio::test]
async fn certificate_management_leaves_events_on_the_secrets_it_writes() {
    let s = Scene::new("ev-certs").await;
    let ns = &s.ns;
    let admin = s.admin.clone();
    // The chart's release-namespace Role is bound here too: the controller may write the
    // release's certificate Secrets in this namespace.
    let controller = s.client(Identity::Controller).await;
    let config = CertConfig {
        namespace: ns.clone(),
        ca_secret: "holdfast-ca".into(),
        ca_common_name: "holdfast-events-test".into(),
        serving: vec![ServingSecret {
            name: "holdfast-webhook-tls".into(),
            dns_names: vec!["holdfast-webhook.holdfast-system.svc".into()],
        }],
        mutating_webhooks: vec![],
        validating_webhooks: vec![],
        policy: holdfast_certs::RotationPolicy::default(),
        check_interval: Duration::from_secs(60),
        hold_api_ca: None,
    };
    let stop = CancellationToken::new();
    let task = tokio::spawn(certs::run(
        controller.clone(),
        config,
        holdfast_serve::CertificateExpiry::default(),
        Some(publisher(s.cp, PublisherConfig::default()).await),
        stop.clone(),
    ));
    let secrets: Api<Secret> = Api::namespaced(admin.clone(), ns);
    let secret_uid = |name: &'static str| {
        let secrets = secrets.clone();
        async move {
            wait_for(name, Duration::from_secs(30), || async {
                secrets.get_opt(name).await.ok().flatten()?.metadata.uid
            })
            .await
        }
    };
    let ca_uid = secret_uid("holdfast-ca").await;
    let ca = Described {
        kind: "Secret",
        namespace: ns,
        name: "holdfast-ca",
        uid: &ca_uid,
    };
    let created = ca
        .wait(&admin, "CertificateAuthorityCreated", |_| true)
        .await;
    assert!(
        note(&created).contains("there was none"),
        "{}",
        note(&created)
    );
    assert_eq!(created.action.as_deref(), Some("RotateCertificate"));
    let tls_uid = secret_uid("holdfast-webhook-tls").await;
    let tls = Described {
        kind: "Secret",
        namespace: ns,
        name: "holdfast-webhook-tls",
        uid: &tls_uid,
    };
    let issued = tls.wait(&admin, "ServingCertificateIssued", |_| true).await;
    assert!(
        note(&issued).contains("holdfast-webhook.holdfast-system.svc"),
        "{}",
        note(&issued)
    );
    stop.cancel();
    task.await.expect("certificate task");
    assert_eq!(ca.events(&admin).await.len(), 1, "one Event per write");
}
