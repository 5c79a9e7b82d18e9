//! The seams between holdfast, Kueue and Trainer, each as it was found: a short sequence of
//! ordinary requests (a namespace editor's, or a late call of dispatch's own) that got around
//! a hold, the start gate or a snapshot, against the real apiserver and, in Kueue mode, the
//! real Kueue v0.19.2. Each test failed before its fix and is named after what it shows; each
//! section names its row of the threat model's table (`docs/src/security/threat-model.md`).
//!
//! The webhook runs in-process with the chart's registration (kueue mode: `Webhook::serve`;
//! plain mode: the real binary, `holdfast::WebhookReplica`), the executor and the
//! readmission gate as holdfast's controller identity.

use holdfast_tests::hold_support;
use holdfast_tests::kueue_support;
use holdfast_tests::objects::TrainJob;
use holdfast_tests::scene::Scene;

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use hold_support::{annotation, meta};
use holdfast_controller::hold::{ExecutorConfig, HoldExecutor, client_without_retry};
use holdfast_core::{
    hold::classify::{ObjectState, Underlying},
    hold::{HoldError, Outcome, RejectCause},
    mode::Mode,
    names::{ANN_ATTEMPT, ANN_HOLD_FOUND, ANN_HOLD_INSTANCE, HOLD_FINALIZER, QUEUE_NAME_LABEL},
};
use holdfast_tests::{ControlPlane, Identity, kueue};
use kube::api::{Api, DynamicObject, Patch, PatchParams, PostParams};
use kueue_support::{
    Fixture, MINUTE, QUEUE, SETTLE, Webhook, active, check, condition, condition_reason, refused,
};
use serde_json::{Value, json};

/// Polls `what` every 100 ms for `for_`, failing if it ever answers false.
async fn stays<F, Fut>(what: &str, for_: Duration, mut probe: F)
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    let start = std::time::Instant::now();
    while start.elapsed() < for_ {
        assert!(probe().await, "{what} stopped holding");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

fn merge(v: Value) -> Patch<Value> {
    Patch::Merge(v)
}

// ---------------------------------------------------------------------------------------
// Threat model, row 1: a Kueue-mode hold (or a closed start gate) lifted in two ordinary
// requests.

/// Tried as a new user would: drop the queue name of the held (Kueue-suspended) TrainJob,
/// then unsuspend it. Both requests are refused, by the webhook, with who may; the job stays
/// suspended, its Workload held, and Status says so truthfully.
#[tokio::test]
async fn a_kueue_hold_is_not_lifted_by_dropping_the_queue_name_then_unsuspending() {
    let f = Fixture::start("seam1-hold").await;
    let webhook = Webhook::serve(&f).await;
    let alice = f.cp.client(Identity::User).await.expect("alice");
    f.create_job("job", json!({})).await;
    f.open_and_run("job").await;
    f.exec
        .hold(&f.ns, "job", meta(Some(1), MINUTE))
        .await
        .expect("hold");
    f.job_when("job", "Kueue suspends the held job", |tj| {
        tj["spec"]["suspend"] == true
    })
    .await;
    let pp = PatchParams::default();
    let drop_queue = json!({"metadata": {"labels": {QUEUE_NAME_LABEL: null}}});
    let message = refused(
        f.trainjobs(&alice)
            .patch("job", &pp, &merge(drop_queue))
            .await,
    );
    assert!(
        message.contains(QUEUE_NAME_LABEL) && message.contains("suspended"),
        "{message}"
    );
    let unsuspend = json!({"spec": {"suspend": false}});
    let message = refused(
        f.trainjobs(&alice)
            .patch("job", &pp, &merge(unsuspend))
            .await,
    );
    assert!(message.contains("whatever labels"), "{message}");
    stays("the job stays held", Duration::from_secs(3), || async {
        let tj = f.trainjob("job").await;
        let wl = f.live_workloads("job").await;
        tj["spec"]["suspend"] == true
            && tj["metadata"]["labels"][QUEUE_NAME_LABEL] == QUEUE
            && wl.iter().all(|w| !active(w))
    })
    .await;
    let status = f.exec.status(&f.ns, "job").await.expect("status");
    assert!(
        matches!(
            status.state,
            ObjectState::HeldByUs {
                instance: Some(1),
                ..
            }
        ),
        "{status:?}"
    );
    webhook.stop().await;
    f.finish().await;
}

/// The same two steps against a never-opened managed job (its start gate closed).
#[tokio::test]
async fn a_closed_start_gate_is_not_opened_by_dropping_the_queue_name_then_unsuspending() {
    let f = Fixture::start("seam1-gate").await;
    let webhook = Webhook::serve(&f).await;
    let alice = f.cp.client(Identity::User).await.expect("alice");
    f.create_job("job", json!({})).await;
    f.workload_when("job", "at the start gate", |w| {
        check(w).1.contains("start gate")
    })
    .await;
    let pp = PatchParams::default();
    let drop_queue = json!({"metadata": {"labels": {QUEUE_NAME_LABEL: null}}});
    refused(
        f.trainjobs(&alice)
            .patch("job", &pp, &merge(drop_queue))
            .await,
    );
    let unsuspend = json!({"spec": {"suspend": false}});
    refused(
        f.trainjobs(&alice)
            .patch("job", &pp, &merge(unsuspend))
            .await,
    );
    // Server-side apply, forced, as alice's field manager: refused just the same.
    let apply = json!({"apiVersion": "trainer.kubeflow.org/v1alpha1", "kind": "TrainJob",
        "metadata": {"name": "job"}, "spec": {"suspend": false}});
    refused(
        f.trainjobs(&alice)
            .patch(
                "job",
                &PatchParams::apply("alice").force(),
                &Patch::Apply(&apply),
            )
            .await,
    );
    stays(
        "the job waits at its gate",
        Duration::from_secs(3),
        || async { f.trainjob("job").await["spec"]["suspend"] == true },
    )
    .await;
    webhook.stop().await;
    f.finish().await;
}

// ---------------------------------------------------------------------------------------
// Threat model, row 2: dropping holdfast.dev/managed opened the start gate in Kueue mode.

#[tokio::test]
async fn dropping_the_managed_label_does_not_open_the_kueue_start_gate() {
    let f = Fixture::start("seam2").await;
    let webhook = Webhook::serve(&f).await;
    let alice = f.cp.client(Identity::User).await.expect("alice");
    f.create_job("job", json!({})).await;
    f.workload_when("job", "at the start gate", |w| {
        check(w).1.contains("start gate")
    })
    .await;
    for patch in [
        json!({"metadata": {"labels": {"holdfast.dev/managed": null}}}),
        json!({"metadata": {"labels": {"holdfast.dev/managed": "false"}}}),
    ] {
        let message = refused(
            f.trainjobs(&alice)
                .patch("job", &PatchParams::default(), &merge(patch))
                .await,
        );
        assert!(message.contains("start gate is closed"), "{message}");
    }
    stays("the gate stays closed", Duration::from_secs(4), || async {
        let tj = f.trainjob("job").await;
        let wl = f.live_workloads("job").await;
        tj["spec"]["suspend"] == true && wl.iter().all(|w| check(w).0 == "Pending")
    })
    .await;
    webhook.stop().await;
    f.finish().await;
}

// ---------------------------------------------------------------------------------------
// Threat model, row 3: a managed TrainJob without a queue name was never gated in Kueue mode.

#[tokio::test]
async fn a_managed_trainjob_without_a_queue_is_refused_and_a_running_one_never_reported_waiting() {
    let f = Fixture::start("seam3").await;
    let webhook = Webhook::serve(&f).await;
    let alice = f.cp.client(Identity::User).await.expect("alice");
    let job = |name: &str, labels: Value| -> DynamicObject {
        TrainJob::named(name)
            .runtime(&f.runtime)
            .labels(&labels)
            .object()
    };
    let message = refused(
        f.trainjobs(&alice)
            .create(
                &PostParams::default(),
                &job("managed", json!({"holdfast.dev/managed": "true"})),
            )
            .await,
    );
    assert!(
        message.contains(&format!("add {QUEUE_NAME_LABEL}: <local-queue>")),
        "says what to add: {message}"
    );
    // Nor can a queued one be made managed by dropping its queue later, or an unqueued one
    // be labelled managed.
    f.trainjobs(&alice)
        .create(&PostParams::default(), &job("plain", json!({})))
        .await
        .expect("an unmanaged, unqueued TrainJob: not Kueue's, runs at once");
    refused(
        f.trainjobs(&alice)
            .patch(
                "plain",
                &PatchParams::default(),
                &merge(json!({"metadata": {"labels": {"holdfast.dev/managed": "true"}}})),
            )
            .await,
    );
    // That job runs without a Workload: Status says Running, never that it waits.
    let status = f.exec.status(&f.ns, "plain").await.expect("status");
    assert_eq!(status.state, ObjectState::Running);
    let err = f
        .exec
        .hold(&f.ns, "plain", meta(Some(1), MINUTE))
        .await
        .expect_err("no Workload");
    assert_eq!(err.cause(), Some(RejectCause::NoWorkload));
    webhook.stop().await;
    f.finish().await;
}

// ---------------------------------------------------------------------------------------
// Threat model, row 4: the readmission gate acts only where the ClusterQueue lists
// holdfast's check.

#[tokio::test]
async fn a_queue_without_the_readmission_check_refuses_release_and_open_not_hold_and_is_seen() {
    let f = Fixture::start("seam4").await;
    let webhook = Webhook::serve(&f).await;
    let cq = format!("cq-{}", f.ns);
    f.create_job("job", json!({})).await;
    f.open_and_run("job").await;
    f.exec
        .hold(&f.ns, "job", meta(Some(1), MINUTE))
        .await
        .expect("hold");
    f.job_when("job", "suspended", |tj| tj["spec"]["suspend"] == true)
        .await;
    // An admin drops the check from the ClusterQueue.
    let cqs = Api::<DynamicObject>::all_with(
        f.admin.clone(),
        &holdfast_cluster::resources::cluster_queue(),
    );
    cqs.patch(
        &cq,
        &PatchParams::default(),
        &Patch::Json::<()>(
            serde_json::from_value(json!([
                {"op": "remove", "path": "/spec/admissionChecksStrategy"}
            ]))
            .expect("patch"),
        ),
    )
    .await
    .expect("drop the check");
    // Release would let Kueue readmit it beside the old pods: refused, naming the queue.
    let err = f
        .eventually("release refuses", SETTLE, || async {
            match f.exec.release(&f.ns, "job", meta(Some(1), MINUTE)).await {
                Err(e @ HoldError::Unsupported { .. }) => Some(e),
                _ => None,
            }
        })
        .await;
    assert!(
        err.to_string().contains(&format!("ClusterQueue {cq}")),
        "{err}"
    );
    let open = f.exec.open(&f.ns, "job", meta(None, MINUTE)).await;
    assert!(
        matches!(&open, Err(HoldError::Unsupported { reason }) if reason.contains(&cq)),
        "open: {open:?}"
    );
    // Stopping is always safe: a newer hold replaces the one in force there.
    let hold = f.exec.hold(&f.ns, "job", meta(Some(2), MINUTE)).await;
    assert_eq!(hold, Ok(Outcome::Held), "hold: {hold:?}");
    let release = f.exec.release(&f.ns, "job", meta(Some(2), MINUTE)).await;
    assert!(
        matches!(&release, Err(HoldError::Unsupported { reason }) if reason.contains(&cq)),
        "release: {release:?}"
    );
    let report = f.exec.preflight(Some((&f.ns, "job"))).await;
    assert!(
        report.ungated_cluster_queues.iter().any(|q| q.name == cq),
        "preflight lists it: {:?}",
        report.ungated_cluster_queues
    );
    // The gate makes it visible: a Warning Event on the TrainJob, and the gauge.
    let events = Api::<k8s_openapi::api::events::v1::Event>::namespaced(f.admin.clone(), &f.ns);
    f.eventually("the Event", SETTLE, || async {
        let list = events.list(&Default::default()).await.expect("events");
        list.items
            .iter()
            .any(|e| e.reason.as_deref() == Some("QueueWithoutReadmissionCheck"))
            .then_some(())
    })
    .await;
    assert!(f.metrics.ungated() >= 1);
    stays("still held", Duration::from_secs(2), || async {
        f.live_workloads("job").await.iter().all(|w| !active(w))
    })
    .await;
    // And a managed job cannot be created into that queue at all.
    let alice = f.cp.client(Identity::User).await.expect("alice");
    let tj = TrainJob::named("late")
        .runtime(&f.runtime)
        .managed()
        .queued(QUEUE)
        .object();
    let message = refused(
        f.trainjobs(&alice)
            .create(&PostParams::default(), &tj)
            .await,
    );
    assert!(message.contains(&cq), "{message}");
    webhook.stop().await;
    f.finish().await;
}

// ---------------------------------------------------------------------------------------
// Threat model, row 5: Release lifted stops that were not the hold's.

/// Kueue deactivates a job for exceeding its maximum execution time; dispatch holds it and
/// releases the hold: the Workload stays inactive with Kueue's reason (Release used to write
/// `active: true`, resetting Kueue's decision), and Status shows that reason under the hold.
#[tokio::test]
async fn release_leaves_kueues_own_deactivation_in_place() {
    let f = Fixture::start("seam5-kueue").await;
    f.create_job("job", json!({"kueue.x-k8s.io/max-exec-time-seconds": "1"}))
        .await;
    // Not `open_and_run`: with one second to run, a loaded machine can miss the moment the
    // job is unsuspended (seen once in the version matrix). Kueue's deactivation for its
    // time, and A raised at the gate, say it ran.
    f.open_at_gate("job").await;
    f.workload_when("job", "Kueue deactivates it for its time", |w| {
        !active(w)
            && condition_reason(w, "Evicted")
                .is_some_and(|r| r == "DeactivatedDueToMaximumExecutionTimeExceeded")
    })
    .await;
    f.job_when("job", "A rose at the gate", |tj| {
        annotation(tj, ANN_ATTEMPT) == Some("1")
    })
    .await;
    assert_eq!(
        f.exec.hold(&f.ns, "job", meta(Some(1), MINUTE)).await,
        Ok(Outcome::Held)
    );
    let held = f
        .workload_when("job", "held", |w| {
            annotation(w, ANN_HOLD_INSTANCE) == Some("1")
        })
        .await;
    assert_eq!(
        annotation(&held, ANN_HOLD_FOUND),
        Some("DeactivatedDueToMaximumExecutionTimeExceeded")
    );
    let status = f.exec.status(&f.ns, "job").await.expect("status");
    assert_eq!(
        status.state,
        ObjectState::HeldByUs {
            instance: Some(1),
            underlying: Some(Underlying::DeactivatedByKueue {
                reason: "DeactivatedDueToMaximumExecutionTimeExceeded".into()
            })
        }
    );
    assert_eq!(
        f.exec.release(&f.ns, "job", meta(Some(1), MINUTE)).await,
        Ok(Outcome::Released { resumed: false })
    );
    stays(
        "Kueue's deactivation stays",
        Duration::from_secs(3),
        || async {
            f.live_workloads("job").await.iter().all(|w| {
                !active(w)
                    && annotation(w, ANN_HOLD_INSTANCE).is_none()
                    && !kueue_support::has_hold_finalizer(w)
            })
        },
    )
    .await;
    let status = f.exec.status(&f.ns, "job").await.expect("status");
    assert_eq!(
        status.state,
        ObjectState::DeactivatedByKueue {
            reason: "DeactivatedDueToMaximumExecutionTimeExceeded".into()
        }
    );
    f.finish().await;
}

/// Plain mode: an opened job someone suspended, held and released, stays suspended.
#[tokio::test]
async fn plain_release_leaves_someone_elses_suspend_in_place() {
    let s = Scene::new("seam5-plain").await;
    let ns = &s.ns;
    let exec = s.executor().await;
    s.job("job", true).await;
    exec.open(ns, "job", meta(None, MINUTE))
        .await
        .expect("open");
    let admin = s.admin.clone();
    hold_support::trainjobs(&admin, ns)
        .patch(
            "job",
            &PatchParams::default(),
            &merge(json!({"spec": {"suspend": true}})),
        )
        .await
        .expect("its owner suspends it");
    exec.hold(ns, "job", meta(Some(1), MINUTE))
        .await
        .expect("hold");
    let tj = s.read("job").await;
    assert_eq!(annotation(&tj, ANN_HOLD_FOUND), Some("suspended"));
    assert_eq!(
        exec.release(ns, "job", meta(Some(1), MINUTE)).await,
        Ok(Outcome::Released { resumed: false })
    );
    let tj = s.read("job").await;
    assert!(hold_support::suspended(&tj), "the owner's suspend stays");
    assert!(hold_support::hold_annotations(&tj).is_empty(), "{tj:#}");
    assert_eq!(
        exec.status(ns, "job").await.expect("status").state,
        ObjectState::DeactivatedBySomeoneElse
    );
}

// ---------------------------------------------------------------------------------------
// Threat model, row 6: a decoy Workload captured the hold.

#[tokio::test]
async fn a_decoy_workload_never_captures_the_hold() {
    let f = Fixture::start("seam6").await;
    let webhook = Webhook::serve(&f).await;
    let alice = f.cp.client(Identity::User).await.expect("alice");
    f.create_job("job", json!({})).await;
    f.open_and_run("job").await;
    let real = f.live_workloads("job").await.remove(0);
    let uid = f.trainjob("job").await["metadata"]["uid"]
        .as_str()
        .expect("uid")
        .to_owned();
    let decoy = |name: &str, owned: bool| -> DynamicObject {
        let mut w = json!({
            "apiVersion": kueue::KUEUE_API_VERSION, "kind": "Workload",
            "metadata": {"name": name, "labels": {"kueue.x-k8s.io/job-uid": uid}},
            "spec": {"queueName": QUEUE, "podSets": [{"name": "node", "count": 1,
                "template": {"spec": {"containers": [{"name": "node", "image": "busybox"}]}}}]}
        });
        if owned {
            w["metadata"]["ownerReferences"] = json!([{"apiVersion": "trainer.kubeflow.org/v1alpha1",
                "kind": "TrainJob", "name": "job", "uid": uid, "controller": true}]);
        }
        serde_json::from_value(w).expect("workload")
    };
    // Owned by the TrainJob: only Kueue may make one.
    let message = refused(
        f.workload_api(&alice)
            .create(&PostParams::default(), &decoy("decoy-owned", true))
            .await,
    );
    assert!(message.contains("ownerReferences"), "{message}");
    // Labelled only: it may exist, and it is never the TrainJob's.
    f.workload_api(&alice)
        .create(&PostParams::default(), &decoy("decoy-labelled", false))
        .await
        .expect("a labelled Workload");
    assert_eq!(
        f.exec.hold(&f.ns, "job", meta(Some(1), MINUTE)).await,
        Ok(Outcome::Held)
    );
    let api = f.workload_api(&f.admin);
    let name = real["metadata"]["name"].as_str().expect("name");
    let real = serde_json::to_value(api.get(name).await.expect("real")).expect("json");
    assert_eq!(
        annotation(&real, ANN_HOLD_INSTANCE),
        Some("1"),
        "the real one is held"
    );
    let decoy =
        serde_json::to_value(api.get("decoy-labelled").await.expect("decoy")).expect("json");
    assert_eq!(annotation(&decoy, ANN_HOLD_INSTANCE), None, "{decoy:#}");
    webhook.stop().await;
    f.finish().await;
}

// ---------------------------------------------------------------------------------------
// Threat model, row 7: outcomes misreported after ambiguous writes.

/// A reverse proxy in front of the apiserver (TLS in and out) that forwards every request
/// and, for the PUTs chosen by `lose`, forwards them and then answers `504` instead of the
/// apiserver's answer: a write that landed and whose answer was lost. [`Self::start_with`]
/// chooses by method and path too (and may hold a request back).
struct LossyProxy {
    url: String,
    puts: Arc<AtomicUsize>,
    stop: tokio_util::sync::CancellationToken,
    _dir: tempfile::TempDir,
}

impl LossyProxy {
    async fn start(cp: &ControlPlane, lose: fn(usize) -> Loss) -> LossyProxy {
        Self::start_with(cp, Arc::new(move |_, _, put| put.map_or(Loss::None, lose))).await
    }

    /// `decide` is given each request's method, path and, for a PUT, how many PUTs came
    /// before it.
    async fn start_with(cp: &ControlPlane, decide: Decide) -> LossyProxy {
        let cert = cp
            .issue_serving_cert(&["127.0.0.1"], Duration::from_secs(3600))
            .expect("cert");
        let (files, dir) =
            holdfast_tests::serving_files::write(&cert).expect("write the certificate");
        let upstream = reqwest::Client::builder()
            .add_root_certificate(
                reqwest::Certificate::from_pem(cp.ca_pem().as_bytes()).expect("CA"),
            )
            .build()
            .expect("client");
        let puts = Arc::new(AtomicUsize::new(0));
        let state = (upstream, cp.server.clone(), puts.clone(), decide);
        let router = axum::Router::new().fallback(
            |axum::extract::State((client, server, puts, decide)): axum::extract::State<
                ProxyState,
            >,
             req: axum::extract::Request| async move {
                let (parts, body) = req.into_parts();
                let body = axum::body::to_bytes(body, 16 << 20).await.expect("body");
                let put = (parts.method == http::Method::PUT)
                    .then(|| puts.fetch_add(1, Ordering::SeqCst));
                let loss = decide(&parts.method, parts.uri.path(), put);
                if let Loss::Delay(held) = loss {
                    tokio::time::sleep(held).await;
                }
                if loss == Loss::Refuse {
                    return (
                        http::StatusCode::SERVICE_UNAVAILABLE,
                        "refused by the proxy",
                    )
                        .into_response();
                }
                let uri = format!(
                    "{server}{}",
                    parts
                        .uri
                        .path_and_query()
                        .map(|p| p.as_str())
                        .unwrap_or("/")
                );
                let mut out = client
                    .request(parts.method.clone(), uri)
                    .body(body.to_vec());
                for (k, v) in &parts.headers {
                    if k != http::header::HOST {
                        out = out.header(k, v);
                    }
                }
                let answer = out.send().await.expect("upstream");
                if loss == Loss::AfterForwarding {
                    return (
                        http::StatusCode::GATEWAY_TIMEOUT,
                        "answer lost by the proxy",
                    )
                        .into_response();
                }
                let status = answer.status();
                let ct = answer.headers().get(http::header::CONTENT_TYPE).cloned();
                let bytes = answer.bytes().await.expect("upstream body");
                let mut response = (status, bytes.to_vec()).into_response();
                if let Some(ct) = ct {
                    response
                        .headers_mut()
                        .insert(http::header::CONTENT_TYPE, ct);
                }
                response
            },
        );
        use axum::response::IntoResponse;
        let router = router.with_state(state);
        let server = holdfast_serve::TlsServer::bind("127.0.0.1:0".parse().expect("addr"), files)
            .await
            .expect("bind");
        let url = format!(
            "https://127.0.0.1:{}",
            server.local_addr().expect("addr").port()
        );
        let stop = tokio_util::sync::CancellationToken::new();
        tokio::spawn(server.serve(router, stop.clone()));
        LossyProxy {
            url,
            puts,
            stop,
            _dir: dir,
        }
    }

    /// An executor acting as the controller through the proxy.
    async fn executor(&self, cp: &ControlPlane, mode: Mode) -> HoldExecutor {
        let kc = kube::config::Kubeconfig::read_from(cp.kubeconfig(Identity::Controller))
            .expect("kubeconfig");
        let mut cfg =
            kube::Config::from_custom_kubeconfig(kc, &kube::config::KubeConfigOptions::default())
                .await
                .expect("config");
        cfg.cluster_url = self.url.parse().expect("url");
        HoldExecutor::new(
            client_without_retry(cfg).expect("client"),
            mode,
            ExecutorConfig {
                transient_backoff: Duration::from_millis(20),
                ..hold_support::config()
            },
        )
    }
}

impl Drop for LossyProxy {
    fn drop(&mut self) {
        self.stop.cancel();
    }
}

/// What the proxy's handler shares: the upstream client, the apiserver's URL, the count of
/// PUTs so far, and which requests to lose.
type ProxyState = (reqwest::Client, String, Arc<AtomicUsize>, Decide);

/// Which requests the proxy loses: by method, path, and for a PUT the PUTs before it.
type Decide = Arc<dyn Fn(&http::Method, &str, Option<usize>) -> Loss + Send + Sync>;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Loss {
    None,
    /// Forwarded, answer replaced by 504.
    AfterForwarding,
    /// Not forwarded: 503.
    Refuse,
    /// Held back this long, then forwarded.
    Delay(Duration),
}

/// A Release whose update landed but whose answer was lost used to answer `StaleHold`; the
/// next read shows no hold, so it is `Released`, and exactly one update was stored.
#[tokio::test]
async fn a_release_whose_answer_was_lost_reports_released() {
    let s = Scene::new("seam7-lost").await;
    let ns = &s.ns;
    let direct = s.executor().await;
    s.job("job", true).await;
    direct
        .open(ns, "job", meta(None, MINUTE))
        .await
        .expect("open");
    direct
        .hold(ns, "job", meta(Some(1), MINUTE))
        .await
        .expect("hold");
    let proxy = LossyProxy::start(s.cp, |n| {
        if n == 0 {
            Loss::AfterForwarding
        } else {
            Loss::None
        }
    })
    .await;
    let exec = proxy.executor(s.cp, Mode::Plain).await;
    assert_eq!(
        exec.release(ns, "job", meta(Some(1), MINUTE)).await,
        Ok(Outcome::Released { resumed: true }),
        "the re-read proves the release took effect"
    );
    assert_eq!(proxy.puts.load(Ordering::SeqCst), 1, "no second write");
    let tj = s.read("job").await;
    assert!(!hold_support::suspended(&tj) && hold_support::hold_annotations(&tj).is_empty());
}

/// Transient failures used to spend the eight tries and end `Conflict` though no 409 came:
/// ten refused writes in a row, then one that goes through: the call succeeds.
#[tokio::test]
async fn transient_failures_spend_no_tries_and_never_end_conflict() {
    let s = Scene::new("seam7-503").await;
    let ns = &s.ns;
    s.job("job", true).await;
    let proxy = LossyProxy::start(s.cp, |n| if n < 10 { Loss::Refuse } else { Loss::None }).await;
    let exec = proxy.executor(s.cp, Mode::Plain).await;
    let outcome = exec
        .hold(ns, "job", meta(Some(1), MINUTE))
        .await
        .expect("held once a write goes through");
    assert_eq!(outcome, Outcome::Held);
    assert_eq!(proxy.puts.load(Ordering::SeqCst), 11);
    // Refused to the end: not Conflict; the outcome of those writes is unknown to the call.
    let proxy = LossyProxy::start(s.cp, |_| Loss::Refuse).await;
    let exec = proxy.executor(s.cp, Mode::Plain).await;
    let err = exec
        .hold(ns, "job", meta(Some(2), Duration::from_secs(2)))
        .await
        .expect_err("never lands");
    assert_eq!(err.kind(), "Unknown", "{err}");
}

/// Open waits for the runtime snapshot within its deadline. When the deadline passes in a
/// read after the wait (the proxy holds back every GET of the TrainJob once Open has looked
/// for its snapshot), not in the pause between reads, the answer still names the missing
/// snapshot, and counts the wait.
#[tokio::test]
async fn an_open_whose_deadline_passes_in_a_read_after_its_wait_names_the_missing_snapshot() {
    const DEADLINE: Duration = Duration::from_secs(15);
    let cp = ControlPlane::shared();
    let ns = cp
        .namespace("seam-open-late-read")
        .await
        .expect("namespace");
    // Managed and suspended; no snapshot reconciler runs here, so none is ever written.
    hold_support::create_trainjob(cp, &ns, "job", true).await;
    let job = format!("/apis/trainer.kubeflow.org/v1alpha1/namespaces/{ns}/trainjobs/job");
    let snapshot = format!(
        "/api/v1/namespaces/{ns}/configmaps/{}",
        holdfast_core::names::snapshot_name("job")
    );
    // Once Open has read for the snapshot (its wait follows), each GET of the job is held
    // back past the call's deadline; the GETs before it (and their retries) pass.
    let (looked, held) = (Arc::new(AtomicUsize::new(0)), Arc::new(AtomicUsize::new(0)));
    let proxy = LossyProxy::start_with(cp, {
        let (looked, held) = (looked.clone(), held.clone());
        Arc::new(move |method, p, _| {
            if method != http::Method::GET {
                Loss::None
            } else if p == snapshot {
                looked.fetch_add(1, Ordering::SeqCst);
                Loss::None
            } else if p == job && looked.load(Ordering::SeqCst) > 0 {
                held.fetch_add(1, Ordering::SeqCst);
                Loss::Delay(DEADLINE + Duration::from_secs(5))
            } else {
                Loss::None
            }
        })
    })
    .await;
    let exec = proxy.executor(cp, Mode::Plain).await.with_snapshot_gate();
    // The preflight first (it reads no snapshot), so that Open's own requests are its reads.
    exec.preflight(None).await;

    let err = exec
        .open(&ns, "job", meta(None, DEADLINE))
        .await
        .expect_err("no snapshot: Open cannot open");
    assert_eq!(
        held.load(Ordering::SeqCst),
        1,
        "the TrainJob was read again after the wait, and that read met the deadline"
    );
    assert_eq!(
        err.cause(),
        Some(holdfast_core::hold::RejectCause::DeadlinePassed),
        "{err}"
    );
    let message = err.body().message;
    assert!(
        message.contains("no runtime snapshot yet") && message.contains("reading TrainJob"),
        "names what it waited for, and where the deadline passed: {message}"
    );
    assert_eq!(exec.metrics().opens_without_snapshot("pending"), 1);
    let job = hold_support::read_trainjob(cp, &ns, "job").await;
    assert_eq!(annotation(&job, holdfast_core::names::ANN_OPENED), None);
    assert_eq!(job["spec"]["suspend"], true);
}

/// A TrainJob that does not exist (or was deleted) is `Rejected/NotFound`, never `Invalid`.
#[tokio::test]
async fn a_missing_trainjob_is_not_found_not_invalid() {
    let s = Scene::new("seam7-gone").await;
    let ns = &s.ns;
    let exec = s.executor().await;
    for result in [
        exec.hold(ns, "nope", meta(Some(1), MINUTE)).await,
        exec.release(ns, "nope", meta(Some(1), MINUTE)).await,
        exec.open(ns, "nope", meta(None, MINUTE)).await,
    ] {
        let err = result.expect_err("no such TrainJob");
        assert_eq!(err.cause(), Some(RejectCause::NotFound), "{err}");
        assert_eq!(err.http_status(), 404);
    }
    let err = exec.status(ns, "nope").await.expect_err("no such TrainJob");
    assert_eq!(err.cause(), Some(RejectCause::NotFound), "{err}");
}

// ---------------------------------------------------------------------------------------
// Threat model, row 8: the capability was decided once at start-up and failed open.

/// An executor whose identity lacks the RBAC to hold answers `Unsupported`; once the role
/// is bound it holds, without a restart (a call probes again itself).
#[tokio::test]
async fn the_capability_is_probed_again_and_fails_closed() {
    use k8s_openapi::api::core::v1::ServiceAccount;
    use k8s_openapi::api::rbac::v1::{ClusterRoleBinding, RoleRef, Subject};
    let s = Scene::new("seam8").await;
    let ns = &s.ns;
    let admin = s.admin.clone();
    s.job("job", true).await;
    // A service account of holdfast's kind, bound to nothing yet.
    let sa = "late-controller";
    Api::<ServiceAccount>::namespaced(admin.clone(), ns)
        .create(
            &PostParams::default(),
            &serde_json::from_value(json!({"metadata": {"name": sa}})).expect("sa"),
        )
        .await
        .expect("service account");
    let token = holdfast_tests::rbac::mint_token(&admin, ns, sa, 3600)
        .await
        .expect("token");
    let kc = kube::config::Kubeconfig::from_yaml(&s.cp.kubeconfig_yaml("late", &token, ns))
        .expect("kubeconfig");
    let cfg = kube::Config::from_custom_kubeconfig(kc, &kube::config::KubeConfigOptions::default())
        .await
        .expect("config");
    let exec = HoldExecutor::new(
        client_without_retry(cfg).expect("client"),
        Mode::Plain,
        hold_support::config(),
    );
    let err = exec
        .hold(ns, "job", meta(Some(1), MINUTE))
        .await
        .expect_err("no RBAC yet");
    assert_eq!(err.kind(), "Unsupported", "{err}");
    // Bind the chart's controller role: the next call (after REPROBE_AFTER) holds.
    let binding: ClusterRoleBinding = ClusterRoleBinding {
        metadata: kube::api::ObjectMeta {
            name: Some(format!("seam8-{ns}")),
            ..Default::default()
        },
        role_ref: RoleRef {
            api_group: Some("rbac.authorization.k8s.io".into()),
            kind: "ClusterRole".into(),
            name: format!("{}-controller", holdfast_tests::rbac::RELEASE),
        },
        subjects: Some(vec![Subject {
            kind: "ServiceAccount".into(),
            name: sa.into(),
            namespace: Some(ns.clone()),
            ..Default::default()
        }]),
    };
    Api::<ClusterRoleBinding>::all(admin.clone())
        .create(&PostParams::default(), &binding)
        .await
        .expect("bind");
    let held = holdfast_tests::wait::wait_for(
        "the hold, once allowed",
        Duration::from_secs(30),
        || async { exec.hold(ns, "job", meta(Some(1), MINUTE)).await.ok() },
    )
    .await;
    assert_eq!(held, Outcome::Held);
}

// ---------------------------------------------------------------------------------------
// Threat model, row 10: smaller holes.

/// The hold finalizer could be set at CREATE (and on objects the webhook never saw).
#[tokio::test]
async fn the_hold_finalizer_is_the_controllers_at_create_too() {
    let f = Fixture::start("seam10-fin").await;
    let webhook = Webhook::serve(&f).await;
    let alice = f.cp.client(Identity::User).await.expect("alice");
    let tj: DynamicObject = serde_json::from_value(json!({
        "apiVersion": "trainer.kubeflow.org/v1alpha1", "kind": "TrainJob",
        "metadata": {"name": "fin", "finalizers": [HOLD_FINALIZER], "labels": {QUEUE_NAME_LABEL: QUEUE}},
        "spec": {"runtimeRef": {"name": f.runtime}}
    }))
    .expect("trainjob");
    let message = refused(
        f.trainjobs(&alice)
            .create(&PostParams::default(), &tj)
            .await,
    );
    assert!(message.contains(HOLD_FINALIZER), "{message}");
    // On a Workload that carries no hold (no holdfast annotation for a matchCondition).
    f.create_job("job", json!({})).await;
    let wl = f.workload_when("job", "a Workload", |_| true).await;
    let name = wl["metadata"]["name"].as_str().expect("name");
    let message = refused(
        f.workload_api(&alice)
            .patch(
                name,
                &PatchParams::default(),
                &merge(json!({"metadata": {"finalizers": [HOLD_FINALIZER]}})),
            )
            .await,
    );
    assert!(message.contains(HOLD_FINALIZER), "{message}");
    webhook.stop().await;
    f.finish().await;
}

// ---------------------------------------------------------------------------------------
// Found by the adversary (tests/adversary-corpus/kueue-hold-racing-admission.json): Kueue
// acts on its cache. A hold deactivates the Workload a moment after Kueue saw it admitted;
// Kueue unsuspends the held job anyway, and its pods start until Kueue's own eviction
// catches up. The webhook reads the Workloads fresh and refuses that unsuspend.

/// Kueue's late unsuspend, sent as Kueue would send it (its identity, the TrainJob it last
/// read): refused while the Workload carries the hold; allowed once the holder released it.
#[tokio::test]
async fn kueue_unsuspending_a_held_job_on_a_stale_view_is_refused() {
    let f = Fixture::start("stale-unsuspend").await;
    let webhook = Webhook::serve(&f).await;
    let kueue_client = f.cp.client(Identity::Kueue).await.expect("kueue");
    f.create_job("job", json!({})).await;
    f.open_and_run("job").await;
    f.exec
        .hold(&f.ns, "job", meta(Some(1), MINUTE))
        .await
        .expect("hold");
    f.job_when("job", "Kueue suspends the held job", |tj| {
        tj["spec"]["suspend"] == true
    })
    .await;
    let unsuspend = merge(json!({"spec": {"suspend": false}}));
    let message = refused(
        f.trainjobs(&kueue_client)
            .patch("job", &PatchParams::default(), &unsuspend)
            .await,
    );
    // Refused on the TrainJob's hold mark (written before the Workload was deactivated): the
    // webhook names the instance, the `policy` engine's CEL quotes the mark as written.
    assert!(
        message.contains("spec.suspend")
            && (message.contains("marked for hold 1")
                || message.contains("marked for hold instance=1 ")),
        "{message}"
    );
    assert_eq!(f.trainjob("job").await["spec"]["suspend"], true);
    // Released: Kueue readmits through the gate and unsuspends the job itself.
    f.exec
        .release(&f.ns, "job", meta(Some(1), MINUTE))
        .await
        .expect("release");
    f.job_when("job", "Kueue runs the released job", |tj| {
        tj["spec"]["suspend"] == false
    })
    .await;
    webhook.stop().await;
    f.finish().await;
}

/// Found by the adversary (kueue-answer-no-workload-after-relabel.json): the editor removed
/// Kueue's job-uid label from the TrainJob's Workload, and Hold answered `NoWorkload` although
/// the Workload still names the TrainJob as its controller. The editor may no longer change
/// that label (`an_editor_cannot_detach_a_trainjobs_workload_from_it`); should it be missing
/// anyway (here Kueue's own identity removes it), ownership still decides: Hold finds the
/// Workload, holds it, and Kueue suspends the job.
#[tokio::test]
async fn a_workload_whose_job_uid_label_was_removed_is_still_held() {
    let f = Fixture::start("relabel").await;
    let webhook = Webhook::serve(&f).await;
    let kueue_client = f.cp.client(Identity::Kueue).await.expect("kueue");
    f.create_job("job", json!({})).await;
    f.open_and_run("job").await;
    let wl = f.live_workloads("job").await.remove(0);
    let wl_name = wl["metadata"]["name"].as_str().expect("name").to_owned();
    f.workload_api(&kueue_client)
        .patch(
            &wl_name,
            &PatchParams::default(),
            &merge(json!({"metadata": {"labels": {"kueue.x-k8s.io/job-uid": null}}})),
        )
        .await
        .expect("Kueue may relabel its Workload");
    f.exec
        .hold(&f.ns, "job", meta(Some(1), MINUTE))
        .await
        .expect("hold finds the Workload by its owner");
    f.job_when("job", "Kueue suspends the held job", |tj| {
        tj["spec"]["suspend"] == true
    })
    .await;
    let status = f.exec.status(&f.ns, "job").await.expect("status");
    assert_eq!(
        status.hold.as_ref().map(|h| h.instance),
        Some(Some(1)),
        "{status:?}"
    );
    webhook.stop().await;
    f.finish().await;
}

/// Found by the adversary (kueue-answer-no-workload-after-owner-removed.json): the editor
/// clears the ownerReferences of the running job's Workload. By SPEC the Workload is then no
/// TrainJob's, so Hold found none while the job ran on it. Only Kueue and the garbage
/// collector may remove or change a Workload's TrainJob ownerReference.
#[tokio::test]
async fn an_editor_cannot_detach_a_trainjobs_workload_from_it() {
    let f = Fixture::start("detach").await;
    let webhook = Webhook::serve(&f).await;
    let alice = f.cp.client(Identity::User).await.expect("alice");
    f.create_job("job", json!({})).await;
    f.open_and_run("job").await;
    let wl = f.live_workloads("job").await.remove(0);
    let wl_name = wl["metadata"]["name"].as_str().expect("name").to_owned();
    for patch in [
        json!({"metadata": {"ownerReferences": null}}),
        json!({"metadata": {"ownerReferences": []}}),
    ] {
        let message = refused(
            f.workload_api(&alice)
                .patch(&wl_name, &PatchParams::default(), &merge(patch))
                .await,
        );
        assert!(
            message.contains("metadata.ownerReferences") && message.contains("may not"),
            "{message}"
        );
    }
    // Nor hide it from the label lookup (the attack: unlabel a held Workload, delete it, and
    // let its replacement be the only one the label finds).
    let message = refused(
        f.workload_api(&alice)
            .patch(
                &wl_name,
                &PatchParams::default(),
                &merge(json!({"metadata": {"labels": {"kueue.x-k8s.io/job-uid": null}}})),
            )
            .await,
    );
    assert!(message.contains("kueue.x-k8s.io/job-uid"), "{message}");
    f.exec
        .hold(&f.ns, "job", meta(Some(1), MINUTE))
        .await
        .expect("the Workload is still the TrainJob's: hold");
    f.job_when("job", "Kueue suspends the held job", |tj| {
        tj["spec"]["suspend"] == true
    })
    .await;
    webhook.stop().await;
    f.finish().await;
}

/// A managed TrainJob `name`, queued, whose runtime (`<name>-<namespace>`) is the fixture's
/// with every container's resources replaced by `resources` (none: removed).
async fn job_with_resources(f: &Fixture, name: &str, resources: Option<Value>) {
    let runtime = format!("{name}-{}", f.ns);
    let mut spec = kueue_support::runtime_spec("1");
    if let Some(containers) = spec
        .pointer_mut("/template/spec/replicatedJobs/0/template/spec/template/spec/containers")
        .and_then(Value::as_array_mut)
    {
        for c in containers.iter_mut().filter_map(Value::as_object_mut) {
            match &resources {
                Some(r) => c.insert("resources".to_owned(), r.clone()),
                None => c.remove("resources"),
            };
        }
    }
    let rt: DynamicObject = serde_json::from_value(json!({
        "apiVersion": "trainer.kubeflow.org/v1alpha1", "kind": "ClusterTrainingRuntime",
        "metadata": {"name": runtime, "labels": {"trainer.kubeflow.org/framework": "torch"}},
        "spec": spec,
    }))
    .expect("runtime");
    Api::<DynamicObject>::all_with(
        f.admin.clone(),
        &holdfast_cluster::resources::cluster_training_runtime(),
    )
    .create(&PostParams::default(), &rt)
    .await
    .expect("create the runtime");
    let tj: DynamicObject = serde_json::from_value(json!({
        "apiVersion": "trainer.kubeflow.org/v1alpha1", "kind": "TrainJob",
        "metadata": {"name": name, "labels": {
            "holdfast.dev/managed": "true", "kueue.x-k8s.io/queue-name": QUEUE}},
        "spec": {"runtimeRef": {"name": runtime}}
    }))
    .expect("trainjob");
    f.trainjobs(&f.admin)
        .create(&PostParams::default(), &tj)
        .await
        .expect("create the TrainJob");
}

/// Seam 12's backstop: a Workload Kueue admitted with no flavor anyway (before holdfast's
/// webhook was installed, as here, or where Kueue drops a request holdfast counts) passed no
/// AdmissionCheck, so holdfast treats its job as ungated: Release and Open answer
/// `Unsupported`, naming why, rather than promise a readmission gate that never ran; Hold
/// stops it (stopping is always safe). Once the hold's eviction has cleared the admission,
/// Release is still refused: the pods request nothing the queue covers, so the next admission
/// would skip the gate too.
#[tokio::test]
async fn a_workload_admitted_with_no_flavor_is_not_held_as_if_the_gate_kept_it() {
    let f = Fixture::start("no-flavor").await;
    job_with_resources(&f, "bare", None).await;
    let wl = f
        .workload_when("bare", "Kueue admits it (no webhook yet)", |w| {
            !w["status"]["admission"].is_null()
        })
        .await;
    assert!(
        holdfast_core::readmission::queues::admitted_without_flavor(&wl),
        "admitted with a flavor: {wl:#}"
    );
    for (what, result) in [
        ("open", f.exec.open(&f.ns, "bare", meta(None, MINUTE)).await),
        (
            "release",
            f.exec.release(&f.ns, "bare", meta(Some(1), MINUTE)).await,
        ),
    ] {
        assert!(
            matches!(&result, Err(HoldError::Unsupported { reason }) if reason.contains("with no flavor")),
            "{what}: {result:?}"
        );
    }
    let hold = f.exec.hold(&f.ns, "bare", meta(Some(1), MINUTE)).await;
    assert_eq!(hold, Ok(Outcome::Held), "hold: {hold:?}");
    // Kueue evicts the deactivated Workload and clears its admission: the next one would be
    // flavorless too, so a release is still refused (it was answered Released once the
    // admission was gone).
    f.workload_when(
        "bare",
        "deactivated by the hold, its admission cleared",
        |w| !active(w) && w["status"]["admission"].is_null(),
    )
    .await;
    let release = f.exec.release(&f.ns, "bare", meta(Some(1), MINUTE)).await;
    assert!(
        matches!(&release, Err(HoldError::Unsupported { reason }) if reason.contains("with no flavor")),
        "release: {release:?}"
    );
    f.finish().await;
}

/// Seam 12 (found on the real node): Kueue runs a ClusterQueue's AdmissionChecks by the
/// flavors it assigns at admission, and assigns a pod set a flavor only for a requested
/// resource the queue covers, so a Workload whose pods request nothing would be admitted with
/// no check at all — past the start gate and the readmission gate. The webhook refuses such a
/// Workload when Kueue creates it (`workload-requests.validate`), naming the remedy; so is
/// one whose only request is a zero of a resource the queue does not cover. A
/// LimitRange default does not get it through (the editor who adds one could delete it once
/// the Workload exists, and Kueue reads it afresh at every admission); a runtime whose
/// containers request resources does, and its job is admitted only through the check.
#[tokio::test]
async fn a_trainjob_whose_pods_request_nothing_is_admitted_only_through_the_readmission_check() {
    let f = Fixture::start("no-requests").await;
    let webhook = Webhook::serve(&f).await;
    job_with_resources(&f, "bare", None).await;

    // Kueue's creation of the Workload is refused, with the remedy, and so the job has no
    // Workload Kueue could admit.
    let refusals = || {
        let events = f
            .cp
            .audit_events_where(|l| l.contains(&f.ns) && l.contains("workload-requests.validate"))
            .unwrap_or_default();
        events
            .into_iter()
            .filter(|e| {
                e["verb"] == "create"
                    && e["objectRef"]["resource"] == "workloads"
                    && e["responseStatus"]["code"] == 403
            })
            .collect::<Vec<Value>>()
    };
    let refusal = f
        .eventually(
            "the webhook refuses Kueue's Workload for the job",
            MINUTE,
            || async { refusals().into_iter().next() },
        )
        .await;
    let message = refusal["responseStatus"]["message"]
        .as_str()
        .unwrap_or_default();
    for part in [
        "request none of the resources",
        "cpu, memory",
        "resource requests",
    ] {
        assert!(message.contains(part), "{part:?} missing from {message}");
    }
    assert!(
        f.live_workloads("bare").await.is_empty(),
        "a Workload was created for pods that request nothing"
    );
    assert_eq!(
        f.trainjob("bare").await["spec"]["suspend"],
        true,
        "the job started"
    );

    // Nor does a zero request of a resource the queue does not cover (Kueue skips it when it
    // assigns flavors): the match conditions send zero quantities to the webhook too.
    job_with_resources(
        &f,
        "zero",
        Some(json!({"requests": {"ephemeral-storage": "0"}})),
    )
    .await;
    let refused_zero = f
        .eventually("the zero-request Workload is refused", MINUTE, || async {
            refusals().into_iter().find(|e| {
                e["objectRef"]["name"]
                    .as_str()
                    .is_some_and(|n| n.starts_with("trainjob-zero-"))
            })
        })
        .await;
    assert!(
        refused_zero["responseStatus"]["message"]
            .as_str()
            .is_some_and(|m| m.contains("they request: ephemeral-storage, pods")),
        "{refused_zero:#}"
    );
    assert!(f.live_workloads("zero").await.is_empty());

    // A LimitRange default request does not get it through: Kueue's next try (the job is
    // touched so that it tries now rather than at the end of its backoff) is refused again.
    let limits: k8s_openapi::api::core::v1::LimitRange = serde_json::from_value(json!({
        "metadata": {"name": "default-requests"},
        "spec": {"limits": [{"type": "Container", "defaultRequest": {"cpu": "100m"}}]}
    }))
    .expect("limit range");
    Api::<k8s_openapi::api::core::v1::LimitRange>::namespaced(f.admin.clone(), &f.ns)
        .create(&PostParams::default(), &limits)
        .await
        .expect("create the LimitRange");
    let before = refusals().len();
    f.trainjobs(&f.admin)
        .patch(
            "bare",
            &PatchParams::default(),
            &merge(json!({"metadata": {"labels": {"touched": "1"}}})),
        )
        .await
        .expect("touch the TrainJob");
    f.eventually("Kueue tries again and is refused again", MINUTE, || async {
        (refusals().len() > before).then_some(())
    })
    .await;
    assert!(
        f.live_workloads("bare").await.is_empty(),
        "a LimitRange default let the Workload through"
    );

    // The remedy: a runtime whose containers request resources (the fixture's). Its job is
    // admitted, and only through holdfast's check: once Kueue has reserved quota the Workload
    // carries it, or nothing would keep the job at its start gate.
    // Kueue lists a queue's checks on the Workload in its own write after reserving quota, so
    // the Workload is judged once it lists some, or once it is admitted (with none listed
    // then, the check was skipped).
    f.create_job("requesting", json!({})).await;
    let wl = f
        .workload_when(
            "requesting",
            "Kueue reserves quota and lists the checks, or admits it",
            |w| {
                !w["status"]["admission"].is_null()
                    && (w["status"]["admissionChecks"]
                        .as_array()
                        .is_some_and(|c| !c.is_empty())
                        || kueue_support::condition(w, "Admitted"))
            },
        )
        .await;
    let checks: Vec<&str> = wl["status"]["admissionChecks"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|c| c["name"].as_str())
        .collect();
    assert!(
        checks.contains(&kueue_support::CHECK),
        "admitted with checks {checks:?}: the readmission check (and so the start gate) was skipped; workload: {wl:#}"
    );
    webhook.stop().await;
    f.finish().await;
}

/// Found by the adversary's long run (kueue mode, twice in 1,000 sequences): an unmanaged
/// TrainJob waiting for admission is labelled `holdfast.dev/managed: "true"` by its editor
/// after the readmission check turned `Ready` for it; Kueue, admitting on that check,
/// unsuspended a managed job that never passed Open. Kueue's unsuspend is sent here as
/// Kueue sends it (its identity, the TrainJob it read), the check held `Pending` by a gate
/// that is down: refused, naming the closed start gate, and the job stays suspended.
#[tokio::test]
async fn kueue_does_not_unsuspend_a_trainjob_labelled_managed_while_it_waited_for_admission() {
    let f = Fixture::start_with(
        "gate-after-label",
        kueue_support::Setup {
            gate: false,
            ..Default::default()
        },
    )
    .await;
    let webhook = Webhook::serve(&f).await;
    let kueue_client = f.cp.client(Identity::Kueue).await.expect("kueue");
    f.create_job("job", json!({"holdfast.dev/managed": "false"}))
        .await;
    f.workload_when("job", "the Workload reserves quota", |w| {
        condition(w, "QuotaReserved")
    })
    .await;
    f.trainjobs(&f.admin)
        .patch(
            "job",
            &PatchParams::default(),
            &merge(json!({"metadata": {"labels": {"holdfast.dev/managed": "true"}}})),
        )
        .await
        .expect("the editor labels the waiting job managed");
    let message = refused(
        f.trainjobs(&kueue_client)
            .patch(
                "job",
                &PatchParams::default(),
                &merge(json!({"spec": {"suspend": false}})),
            )
            .await,
    );
    assert!(
        message.contains("spec.suspend") && message.contains("holdfast.dev/opened"),
        "{message}"
    );
    assert_eq!(f.trainjob("job").await["spec"]["suspend"], true);
    webhook.stop().await;
    f.finish().await;
}
