//! The HTTP layer of the admission endpoints, through the router with `oneshot`.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use super::*;
use crate::runtime_lookup::{LookupError, NoRuntimes};
use futures::StreamExt;
use futures::future::BoxFuture;
use holdfast_core::snapshot::RuntimeRef;
use http_body_util::BodyExt;
use serde_json::{Value, json};
use std::sync::Mutex;
use tower::ServiceExt;

const CONTROLLER: &str = "system:serviceaccount:holdfast-system:holdfast-controller";
const GC: &str = "system:serviceaccount:kube-system:generic-garbage-collector";

fn identities() -> Identities {
    Identities::new(
        [CONTROLLER],
        ["system:serviceaccount:kubeflow-system:kubeflow-trainer-controller-manager"],
        [GC],
        ["system:serviceaccount:kueue-system:kueue-controller-manager"],
    )
}

/// A runtime lookup answering from a script, optionally after a wait, and recording calls.
#[derive(Default)]
struct FakeRuntimes {
    answer: Option<Result<Option<String>, &'static str>>,
    wait: Option<Duration>,
    calls: Mutex<Vec<(Option<String>, RuntimeRef)>>,
}

impl RuntimeLookup for FakeRuntimes {
    fn resource_version<'a>(
        &'a self,
        namespace: Option<&'a str>,
        runtime: &'a RuntimeRef,
    ) -> BoxFuture<'a, Result<Option<String>, LookupError>> {
        Box::pin(async move {
            self.calls
                .lock()
                .unwrap()
                .push((namespace.map(str::to_owned), runtime.clone()));
            if let Some(w) = self.wait {
                tokio::time::sleep(w).await;
            }
            match &self.answer {
                None => Ok(None),
                Some(Ok(rv)) => Ok(rv.clone()),
                Some(Err(m)) => Err(LookupError::InvalidRef((*m).to_owned())),
            }
        })
    }
}

fn admission_with(mode: Mode, runtimes: Arc<dyn RuntimeLookup>, limits: Limits) -> Arc<Admission> {
    Arc::new(Admission::new(
        mode,
        identities(),
        runtimes,
        Metrics::unregistered(),
        limits,
    ))
}

fn admission(mode: Mode) -> Arc<Admission> {
    admission_with(mode, Arc::new(NoRuntimes), Limits::DEFAULT)
}

fn request(path: &str, content_type: Option<&str>, body: impl Into<Body>) -> Request {
    let mut b = http::Request::post(path);
    if let Some(ct) = content_type {
        b = b.header(header::CONTENT_TYPE, ct);
    }
    b.body(body.into()).unwrap()
}

async fn send(a: &Arc<Admission>, req: Request) -> (StatusCode, HeaderMap, Value) {
    let resp = a.clone().router().oneshot(req).await.unwrap();
    let status = resp.status();
    let headers = resp.headers().clone();
    let bytes = resp.into_body().collect().await.unwrap().to_bytes();
    let json = serde_json::from_slice(&bytes)
        .unwrap_or_else(|e| panic!("not JSON ({e}): {}", String::from_utf8_lossy(&bytes)));
    (status, headers, json)
}

async fn review(a: &Arc<Admission>, path: &str, body: &Value) -> Value {
    let (status, headers, json) =
        send(a, request(path, Some("application/json"), body.to_string())).await;
    assert_eq!(status, StatusCode::OK, "{json}");
    assert_eq!(headers[header::CONTENT_TYPE], "application/json");
    assert_eq!(json["apiVersion"], "admission.k8s.io/v1");
    assert_eq!(json["kind"], "AdmissionReview");
    json["response"].clone()
}

/// An AdmissionReview v1 as the apiserver sends it.
fn admission_review(
    group: &str,
    resource: &str,
    op: &str,
    user: &str,
    old: Option<Value>,
    new: Option<Value>,
) -> Value {
    let name = new
        .as_ref()
        .or(old.as_ref())
        .and_then(|o| o.pointer("/metadata/name"))
        .cloned()
        .unwrap_or(json!(""));
    json!({
        "apiVersion": "admission.k8s.io/v1",
        "kind": "AdmissionReview",
        "request": {
            "uid": "705ab4f5-6393-11e8-b7cc-42010a800002",
            "kind": {"group": group, "version": "v1", "kind": "X"},
            "resource": {"group": group, "version": "v1", "resource": resource},
            "requestKind": {"group": group, "version": "v1", "kind": "X"},
            "requestResource": {"group": group, "version": "v1", "resource": resource},
            "name": name,
            "namespace": "team-a",
            "operation": op,
            "userInfo": {"username": user, "groups": ["system:authenticated"]},
            "object": new,
            "oldObject": old,
            "dryRun": false,
            "options": {"apiVersion": "meta.k8s.io/v1", "kind": "UpdateOptions"},
        }
    })
}

fn configmap(name: &str, labels: Value) -> Value {
    json!({
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": name, "namespace": "team-a", "labels": labels,
            "ownerReferences": [{"apiVersion": "trainer.kubeflow.org/v1alpha1", "kind": "TrainJob",
                "name": "mnist", "uid": "u-1", "controller": true}]},
        "data": {"runtime": "kind: ClusterTrainingRuntime\n"},
    })
}

fn trainjob(annotations: Value, labels: Value, suspend: Option<bool>) -> Value {
    let mut tj = json!({
        "apiVersion": "trainer.kubeflow.org/v1alpha1",
        "kind": "TrainJob",
        "metadata": {"name": "mnist", "namespace": "team-a", "annotations": annotations, "labels": labels},
        "spec": {"runtimeRef": {"name": "torch-distributed", "apiGroup": "trainer.kubeflow.org", "kind": "ClusterTrainingRuntime"}},
    });
    if let Some(s) = suspend {
        tj["spec"]["suspend"] = json!(s);
    }
    tj
}

/// The object after the answer's patch, as the apiserver would apply it.
fn patched(response: &Value, object: &Value) -> Value {
    assert_eq!(response["allowed"], true, "{response}");
    let mut object = object.clone();
    if let Some(p) = response["patch"].as_str() {
        assert_eq!(response["patchType"], "JSONPatch");
        let patch: json_patch::Patch = serde_json::from_slice(
            &base64::Engine::decode(&base64::engine::general_purpose::STANDARD, p).unwrap(),
        )
        .unwrap();
        json_patch::patch(&mut object, &patch.0).unwrap();
    }
    object
}

// ---------------------------------------------------------------------------------------------
// Errors

#[tokio::test]
async fn malformed_json_gets_a_clear_400() {
    let a = admission(Mode::Plain);
    let (status, _, body) = send(
        &a,
        request("/validate", Some("application/json"), "{not json"),
    )
    .await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    assert_eq!(body["kind"], "Status");
    assert_eq!(body["code"], 400);
    assert_eq!(body["reason"], "BadRequest");
    let message = body["message"].as_str().unwrap();
    assert!(
        message.contains("malformed AdmissionReview: the body is not JSON"),
        "{message}"
    );
}

#[tokio::test]
async fn a_review_that_is_not_one_gets_a_clear_400() {
    let a = admission(Mode::Plain);
    for (body, expected) in [
        (json!([1, 2]), "the body is an array"),
        (
            json!({"apiVersion": "admission.k8s.io/v1beta1", "kind": "AdmissionReview"}),
            "apiVersion is \"admission.k8s.io/v1beta1\"",
        ),
        (
            json!({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview"}),
            "request is missing",
        ),
        (
            json!({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": {}}),
            "request.uid is missing",
        ),
    ] {
        let (status, _, answer) = send(
            &a,
            request("/mutate", Some("application/json"), body.to_string()),
        )
        .await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{answer}");
        assert!(
            answer["message"].as_str().unwrap().contains(expected),
            "{answer}"
        );
    }
}

#[tokio::test]
async fn malformed_review_with_a_uid_is_refused_in_a_review_naming_the_problem() {
    let a = admission(Mode::Plain);
    let mut body = admission_review(
        "",
        "configmaps",
        "CREATE",
        "alice",
        None,
        Some(configmap("x", json!({}))),
    );
    body["request"]["operation"] = json!("PUT");
    let response = review(&a, "/validate", &body).await;
    assert_eq!(response["uid"], "705ab4f5-6393-11e8-b7cc-42010a800002");
    assert_eq!(response["allowed"], false);
    assert_eq!(response["status"]["code"], 400);
    let message = response["status"]["message"].as_str().unwrap();
    assert!(
        message.contains("request.operation is \"PUT\""),
        "{message}"
    );
}

#[tokio::test]
async fn oversized_body_gets_413() {
    let limits = Limits {
        max_body_bytes: 1024,
        ..Limits::DEFAULT
    };
    let a = admission_with(Mode::Plain, Arc::new(NoRuntimes), limits);
    let big = format!("{{\"x\":\"{}\"}}", "a".repeat(4096));
    // Declared by Content-Length: refused before reading.
    let (status, _, body) = send(
        &a,
        request("/validate", Some("application/json"), big.clone()),
    )
    .await;
    assert_eq!(status, StatusCode::PAYLOAD_TOO_LARGE);
    assert_eq!(body["reason"], "RequestEntityTooLarge");
    assert!(
        body["message"]
            .as_str()
            .unwrap()
            .contains("larger than the limit of 1024 bytes"),
        "{body}"
    );
    // Streamed without a length: refused while reading.
    let chunks: Vec<Result<Bytes, std::io::Error>> = big
        .as_bytes()
        .chunks(100)
        .map(|c| Ok(Bytes::copy_from_slice(c)))
        .collect();
    let stream = Body::from_stream(futures::stream::iter(chunks));
    let (status, _, _) = send(&a, request("/validate", Some("application/json"), stream)).await;
    assert_eq!(status, StatusCode::PAYLOAD_TOO_LARGE);
}

#[tokio::test]
async fn the_default_limit_admits_an_update_of_a_full_1_mib_configmap() {
    let a = admission(Mode::Plain);
    let mut cm = configmap("big", json!({}));
    cm["data"]["runtime"] = json!("x".repeat(1024 * 1024));
    let body = admission_review(
        "",
        "configmaps",
        "UPDATE",
        "alice",
        Some(cm.clone()),
        Some(cm),
    );
    let response = review(&a, "/validate", &body).await;
    assert_eq!(response["allowed"], true);
}

#[tokio::test]
async fn wrong_content_type_gets_415() {
    let a = admission(Mode::Plain);
    let good = admission_review(
        "",
        "configmaps",
        "CREATE",
        "alice",
        None,
        Some(configmap("x", json!({}))),
    )
    .to_string();
    for ct in [Some("text/plain"), Some("application/yaml"), None] {
        let (status, _, body) = send(&a, request("/validate", ct, good.clone())).await;
        assert_eq!(status, StatusCode::UNSUPPORTED_MEDIA_TYPE, "{ct:?}");
        assert_eq!(body["reason"], "UnsupportedMediaType");
        assert!(
            body["message"]
                .as_str()
                .unwrap()
                .contains("not application/json"),
            "{body}"
        );
    }
    // Parameters are fine.
    let (status, _, _) = send(
        &a,
        request("/validate", Some("application/json; charset=utf-8"), good),
    )
    .await;
    assert_eq!(status, StatusCode::OK);
}

#[tokio::test]
async fn unknown_path_and_wrong_method_get_json_errors() {
    let a = admission(Mode::Plain);
    let (status, _, body) = send(&a, request("/admit", Some("application/json"), "{}")).await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    assert_eq!(body["kind"], "Status");
    let req = http::Request::get("/validate").body(Body::empty()).unwrap();
    let (status, _, body) = send(&a, req).await;
    assert_eq!(status, StatusCode::METHOD_NOT_ALLOWED);
    assert!(body["message"].as_str().unwrap().contains("GET"), "{body}");
}

#[tokio::test]
async fn a_lookup_holds_no_decision_permit() {
    // The only decision permit, and one lookup slot; each runtime read takes 500 ms.
    let runtimes = Arc::new(FakeRuntimes {
        answer: Some(Ok(Some("7".into()))),
        wait: Some(Duration::from_millis(500)),
        ..Default::default()
    });
    let limits = Limits {
        max_concurrent: 1,
        max_lookups: 1,
        ..Limits::DEFAULT
    };
    let a = admission_with(Mode::Plain, runtimes, limits);
    let create = admission_review(
        "trainer.kubeflow.org",
        "trainjobs",
        "CREATE",
        "alice",
        None,
        Some(trainjob(json!({}), json!({}), None)),
    );
    // Two admissions reading the runtime (a forged flood's, say): one reads, one waits.
    let readers: Vec<_> = (0..2)
        .map(|_| {
            let a = a.clone();
            let body = create.clone();
            tokio::spawn(async move { review(&a, "/mutate", &body).await })
        })
        .collect();
    tokio::time::sleep(Duration::from_millis(100)).await;
    // Meanwhile a review that needs no lookup is decided, not shed: the permit is free.
    let snapshot_edit = admission_review(
        "",
        "configmaps",
        "DELETE",
        "alice",
        Some(configmap("mnist-runtime-snapshot", json!({}))),
        None,
    );
    let (status, _, body) = send(
        &a,
        request(
            "/validate",
            Some("application/json"),
            snapshot_edit.to_string(),
        ),
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(body["response"]["allowed"], false, "{body}");
    // Both readers get their answer, the second after its turn, each with the version read.
    for r in readers {
        let response = r.await.unwrap();
        assert_eq!(response["allowed"], true);
        assert!(response.get("patch").is_some(), "{response}");
    }
}

/// Workload holds answering from a script, after a wait.
struct SlowHolds {
    wait: Duration,
    hold: Option<String>,
}

impl WorkloadHolds for SlowHolds {
    fn hold_of<'a>(
        &'a self,
        _namespace: &'a str,
        _uid: &'a str,
    ) -> BoxFuture<'a, Result<Option<String>, String>> {
        Box::pin(async move {
            tokio::time::sleep(self.wait).await;
            Ok(self.hold.clone())
        })
    }
}

#[tokio::test]
async fn an_unsuspend_whose_lookup_waits_past_its_timeout_is_refused_and_others_are_decided() {
    let limits = Limits {
        max_concurrent: 1,
        max_lookups: 1,
        runtime_lookup_timeout: Duration::from_millis(300),
        ..Limits::DEFAULT
    };
    let a = Arc::new(
        Admission::new(
            Mode::Plain,
            identities(),
            Arc::new(NoRuntimes),
            Metrics::unregistered(),
            limits,
        )
        .with_workload_holds(Arc::new(SlowHolds {
            wait: Duration::from_millis(250),
            hold: None,
        })),
    );
    // alice unsuspends a job that ran under holdfast (plain mode reads its Workloads).
    let mut old = trainjob(json!({"holdfast.dev/opened": "x"}), json!({}), Some(true));
    old["metadata"]["uid"] = json!("u-1");
    let mut new = old.clone();
    new["spec"]["suspend"] = json!(false);
    let unsuspend = admission_review(
        "trainer.kubeflow.org",
        "trainjobs",
        "UPDATE",
        "alice",
        Some(old),
        Some(new),
    );
    let answers: Vec<_> = (0..2)
        .map(|_| {
            let a = a.clone();
            let body = unsuspend.clone();
            tokio::spawn(async move { review(&a, "/validate", &body).await })
        })
        .collect();
    let mut allowed = 0;
    let mut refused = Vec::new();
    for r in answers {
        let response = r.await.unwrap();
        if response["allowed"] == true {
            allowed += 1;
        } else {
            refused.push(response["status"]["message"].as_str().unwrap().to_owned());
        }
    }
    // One read in its slot (250 ms) and was allowed; the other waited past its 300 ms.
    assert_eq!(allowed, 1, "{refused:?}");
    assert_eq!(refused.len(), 1);
    assert!(
        refused[0].contains("could not read its Workloads") && refused[0].contains("retry"),
        "{}",
        refused[0]
    );
}

#[tokio::test]
async fn a_trickled_body_holds_no_permit_and_is_cut_at_its_deadline_with_408() {
    let limits = Limits {
        max_concurrent: 1,
        body_read_timeout: Duration::from_millis(300),
        ..Limits::DEFAULT
    };
    let a = admission_with(Mode::Plain, Arc::new(NoRuntimes), limits);
    // A body that never finishes arriving (two bytes, then nothing).
    let slow = {
        let a = a.clone();
        tokio::spawn(async move {
            let stream =
                futures::stream::iter([Ok::<_, std::io::Error>(Bytes::from_static(b"{\""))])
                    .chain(futures::stream::pending());
            send(
                &a,
                request(
                    "/validate",
                    Some("application/json"),
                    Body::from_stream(stream),
                ),
            )
            .await
        })
    };
    tokio::time::sleep(Duration::from_millis(50)).await;
    // Meanwhile the only permit is free: a whole review is decided.
    let body = admission_review(
        "",
        "configmaps",
        "CREATE",
        "alice",
        None,
        Some(configmap("x", json!({}))),
    );
    let answer = review(&a, "/validate", &body).await;
    assert_eq!(answer["allowed"], true);
    let (status, _, body) = slow.await.unwrap();
    assert_eq!(status, StatusCode::REQUEST_TIMEOUT);
    assert_eq!(body["reason"], "Timeout");
    assert!(
        body["message"]
            .as_str()
            .unwrap()
            .contains("request body did not arrive within"),
        "{body}"
    );
}

#[tokio::test]
async fn an_admission_slower_than_the_request_timeout_gets_504() {
    let runtimes = Arc::new(FakeRuntimes {
        answer: Some(Ok(Some("7".into()))),
        wait: Some(Duration::from_secs(30)),
        ..Default::default()
    });
    let limits = Limits {
        request_timeout: Duration::from_millis(100),
        runtime_lookup_timeout: Duration::from_secs(60),
        ..Limits::DEFAULT
    };
    let a = admission_with(Mode::Plain, runtimes, limits);
    let body = admission_review(
        "trainer.kubeflow.org",
        "trainjobs",
        "CREATE",
        "alice",
        None,
        Some(trainjob(json!({}), json!({}), None)),
    );
    let (status, _, answer) = send(
        &a,
        request("/mutate", Some("application/json"), body.to_string()),
    )
    .await;
    assert_eq!(status, StatusCode::GATEWAY_TIMEOUT);
    assert_eq!(answer["reason"], "Timeout");
}

// ---------------------------------------------------------------------------------------------
// Round trips

#[tokio::test]
async fn deny_round_trip_names_the_field_and_who_may_change_it() {
    let a = admission(Mode::Plain);
    let snap = configmap("mnist-runtime-snapshot", json!({}));
    let body = admission_review("", "configmaps", "DELETE", "alice", Some(snap), None);
    let response = review(&a, "/validate", &body).await;
    assert_eq!(response["uid"], "705ab4f5-6393-11e8-b7cc-42010a800002");
    assert_eq!(response["allowed"], false);
    assert_eq!(response["status"]["code"], 403);
    assert_eq!(response["status"]["reason"], "Forbidden");
    let message = response["status"]["message"].as_str().unwrap();
    assert!(message.contains("is a runtime snapshot"), "{message}");
    assert!(
        message.contains(GC) && message.contains(CONTROLLER),
        "{message}"
    );
    assert!(
        message.contains("user alice may not delete it"),
        "{message}"
    );
    assert_eq!(
        response["status"]["details"]["causes"][0]["field"],
        "ConfigMap team-a/mnist-runtime-snapshot"
    );
    assert!(response.get("patch").is_none());
}

#[tokio::test]
async fn allow_round_trip_has_no_patch() {
    let a = admission(Mode::Plain);
    let cm = configmap("settings", json!({}));
    let mut edited = cm.clone();
    edited["data"]["x"] = json!("y");
    let body = admission_review("", "configmaps", "UPDATE", "alice", Some(cm), Some(edited));
    let response = review(&a, "/validate", &body).await;
    assert_eq!(response["allowed"], true);
    assert!(response.get("patch").is_none() && response.get("status").is_none());
    let response = review(&a, "/mutate", &body).await;
    assert_eq!(response["allowed"], true);
    assert!(response.get("patch").is_none());
}

#[tokio::test]
async fn patch_round_trip_restores_dropped_annotations_with_a_warning() {
    let a = admission(Mode::Plain);
    let held = trainjob(
        json!({"holdfast.dev/hold-instance": "3", "holdfast.dev/hold-reason": "node lost", "team": "a"}),
        json!({}),
        Some(true),
    );
    // `kubectl replace` of a manifest without our annotations.
    let replaced = trainjob(json!({"team": "a"}), json!({}), Some(true));
    let body = admission_review(
        "trainer.kubeflow.org",
        "trainjobs",
        "UPDATE",
        "alice",
        Some(held.clone()),
        Some(replaced.clone()),
    );
    let response = review(&a, "/mutate", &body).await;
    let after = patched(&response, &replaced);
    assert_eq!(
        after["metadata"]["annotations"],
        held["metadata"]["annotations"]
    );
    let warnings = response["warnings"].as_array().unwrap();
    assert_eq!(warnings.len(), 1, "{warnings:?}");
    let w = warnings[0].as_str().unwrap();
    assert!(
        w.contains("holdfast.dev/hold-instance") && w.contains("holdfast.dev/hold-reason"),
        "{w}"
    );
    // The validating side then sees nothing changed and allows.
    let mut validated = body.clone();
    validated["request"]["object"] = after;
    assert_eq!(review(&a, "/validate", &validated).await["allowed"], true);
    // Without annotations at all, the whole map is added back.
    let bare = {
        let mut t = replaced.clone();
        t["metadata"].as_object_mut().unwrap().remove("annotations");
        t
    };
    let mut body2 = body.clone();
    body2["request"]["object"] = bare.clone();
    let after = patched(&review(&a, "/mutate", &body2).await, &bare);
    assert_eq!(
        after["metadata"]["annotations"]["holdfast.dev/hold-instance"],
        "3"
    );
}

#[tokio::test]
async fn a_trainjobs_jobset_is_patched_to_pod_replacement_policy_failed_with_no_lookup() {
    // The JobSet rule reads nothing: the runtime lookup is never asked.
    let runtimes = Arc::new(FakeRuntimes::default());
    let a = admission_with(Mode::Kueue, runtimes.clone(), Limits::DEFAULT);
    let jobset = json!({
        "apiVersion": "jobset.x-k8s.io/v1alpha2", "kind": "JobSet",
        "metadata": {"name": "mnist", "namespace": "team-a", "ownerReferences": [{
            "apiVersion": "trainer.kubeflow.org/v1alpha1", "kind": "TrainJob", "name": "mnist",
            "uid": "u-1", "controller": true}]},
        "spec": {"replicatedJobs": [
            {"name": "node", "template": {"spec": {"podReplacementPolicy": "TerminatingOrFailed",
                "template": {"spec": {"containers": []}}}}},
            {"name": "launcher", "template": {"spec": {"template": {"spec": {"containers": []}}}}},
        ]},
    });
    let body = admission_review(
        "jobset.x-k8s.io",
        "jobsets",
        "CREATE",
        "system:serviceaccount:kubeflow-system:kubeflow-trainer-controller-manager",
        None,
        Some(jobset.clone()),
    );
    let response = review(&a, "/mutate", &body).await;
    let after = patched(&response, &jobset);
    for job in after["spec"]["replicatedJobs"].as_array().unwrap() {
        assert_eq!(
            job["template"]["spec"]["podReplacementPolicy"], "Failed",
            "{job}"
        );
    }
    let warnings = response["warnings"].as_array().unwrap();
    assert_eq!(warnings.len(), 1, "{warnings:?}");
    assert!(
        warnings[0].as_str().unwrap().contains("node"),
        "{warnings:?}"
    );
    // The validating side allows it.
    let mut validated = body.clone();
    validated["request"]["object"] = after;
    assert_eq!(review(&a, "/validate", &validated).await["allowed"], true);
    assert!(runtimes.calls.lock().unwrap().is_empty());
}

#[tokio::test]
async fn admitted_runtime_version_is_recorded_at_create() {
    let runtimes = Arc::new(FakeRuntimes {
        answer: Some(Ok(Some("4711".into()))),
        ..Default::default()
    });
    let a = admission_with(Mode::Kueue, runtimes.clone(), Limits::DEFAULT);
    let tj = trainjob(json!({}), json!({}), None);
    let body = admission_review(
        "trainer.kubeflow.org",
        "trainjobs",
        "CREATE",
        "alice",
        None,
        Some(tj.clone()),
    );
    let response = review(&a, "/mutate", &body).await;
    let after = patched(&response, &tj);
    assert_eq!(
        after["metadata"]["annotations"]["holdfast.dev/admitted-runtime-resource-version"],
        "4711"
    );
    assert!(response.get("warnings").is_none(), "{response}");
    let calls = runtimes.calls.lock().unwrap().clone();
    assert_eq!(calls.len(), 1);
    assert_eq!(calls[0].0.as_deref(), Some("team-a"));
    assert_eq!(calls[0].1.kind, "ClusterTrainingRuntime");
    assert_eq!(calls[0].1.name, "torch-distributed");
    // Updates never look the runtime up.
    let update = admission_review(
        "trainer.kubeflow.org",
        "trainjobs",
        "UPDATE",
        "alice",
        Some(tj.clone()),
        Some(tj),
    );
    review(&a, "/mutate", &update).await;
    assert_eq!(runtimes.calls.lock().unwrap().len(), 1);
}

#[tokio::test]
async fn a_missing_or_unreadable_runtime_records_nothing_and_admits() {
    for answer in [Some(Ok(None)), Some(Err("boom"))] {
        let runtimes = Arc::new(FakeRuntimes {
            answer,
            ..Default::default()
        });
        let a = admission_with(Mode::Kueue, runtimes, Limits::DEFAULT);
        // A user-supplied value is removed: nobody forges it.
        let tj = trainjob(
            json!({"holdfast.dev/admitted-runtime-resource-version": "1"}),
            json!({}),
            None,
        );
        let body = admission_review(
            "trainer.kubeflow.org",
            "trainjobs",
            "CREATE",
            "alice",
            None,
            Some(tj.clone()),
        );
        let after = patched(&review(&a, "/mutate", &body).await, &tj);
        assert!(
            after["metadata"]["annotations"]
                .get("holdfast.dev/admitted-runtime-resource-version")
                .is_none(),
            "{after}"
        );
    }
}

#[tokio::test]
async fn a_slow_runtime_read_is_cut_short_and_admits() {
    let runtimes = Arc::new(FakeRuntimes {
        answer: Some(Ok(Some("9".into()))),
        wait: Some(Duration::from_secs(30)),
        ..Default::default()
    });
    let limits = Limits {
        runtime_lookup_timeout: Duration::from_millis(50),
        ..Limits::DEFAULT
    };
    let a = admission_with(Mode::Plain, runtimes, limits);
    let tj = trainjob(json!({}), json!({}), None);
    let body = admission_review(
        "trainer.kubeflow.org",
        "trainjobs",
        "CREATE",
        "alice",
        None,
        Some(tj.clone()),
    );
    let response = review(&a, "/mutate", &body).await;
    assert_eq!(response["allowed"], true);
    assert!(response.get("patch").is_none(), "{response}");
}

#[tokio::test]
async fn plain_mode_managed_trainjob_is_created_suspended() {
    let a = admission(Mode::Plain);
    let tj = trainjob(json!({}), json!({"holdfast.dev/managed": "true"}), None);
    let body = admission_review(
        "trainer.kubeflow.org",
        "trainjobs",
        "CREATE",
        "alice",
        None,
        Some(tj.clone()),
    );
    let response = review(&a, "/mutate", &body).await;
    let after = patched(&response, &tj);
    assert_eq!(after["spec"]["suspend"], true);
    assert!(
        response["warnings"][0]
            .as_str()
            .unwrap()
            .contains("closed start gate"),
        "{response}"
    );
    // In kueue mode the gate is Kueue's admission: no patch.
    let k = admission(Mode::Kueue);
    assert!(review(&k, "/mutate", &body).await.get("patch").is_none());
}

#[tokio::test]
async fn dry_run_gets_the_same_answer() {
    let a = admission(Mode::Kueue);
    let old = trainjob(
        json!({}),
        json!({"kueue.x-k8s.io/queue-name": "q"}),
        Some(true),
    );
    let new = trainjob(
        json!({}),
        json!({"kueue.x-k8s.io/queue-name": "q"}),
        Some(false),
    );
    let mut body = admission_review(
        "trainer.kubeflow.org",
        "trainjobs",
        "UPDATE",
        "alice",
        Some(old),
        Some(new),
    );
    let real = review(&a, "/validate", &body).await;
    body["request"]["dryRun"] = json!(true);
    let dry = review(&a, "/validate", &body).await;
    assert_eq!(real, dry);
    assert_eq!(dry["allowed"], false);
    assert!(
        dry["status"]["message"]
            .as_str()
            .unwrap()
            .contains("spec.suspend"),
        "{dry}"
    );
}

#[tokio::test]
async fn metrics_count_admissions_by_endpoint_kind_and_verdict() {
    let mut registry = prometheus_client::registry::Registry::default();
    let metrics = Metrics::register(&mut registry);
    let a = Arc::new(Admission::new(
        Mode::Plain,
        identities(),
        Arc::new(NoRuntimes),
        metrics,
        Limits::DEFAULT,
    ));
    let snap = configmap("mnist-runtime-snapshot", json!({}));
    let body = admission_review("", "configmaps", "DELETE", "alice", Some(snap), None);
    review(&a, "/validate", &body).await;
    send(&a, request("/validate", Some("text/plain"), "x")).await;
    let mut text = String::new();
    prometheus_client::encoding::text::encode(&mut text, &registry).unwrap();
    assert!(
        text.contains(
            "holdfast_webhook_admissions_total{endpoint=\"validate\",kind=\"ConfigMap\",operation=\"DELETE\",verdict=\"denied\"} 1"
        ),
        "{text}"
    );
    assert!(
        text.contains(
            "holdfast_webhook_request_errors_total{endpoint=\"validate\",reason=\"unsupported_media_type\"} 1"
        ),
        "{text}"
    );
    assert!(
        text.contains("holdfast_webhook_admission_duration_seconds_count{endpoint=\"validate\"} 2"),
        "{text}"
    );
    assert!(text.contains("holdfast_webhook_in_flight 0"), "{text}");
    // Nothing unbounded: no object, namespace or user name in any label.
    assert!(!text.contains("mnist") && !text.contains("alice") && !text.contains("team-a"));
}
