//! Proof that the local control plane's parts are real: RBAC, the garbage collector,
//! resourceVersion preconditions, webhooks called by URL, and the upstream CRDs.

use holdfast_tests::Identity;
use holdfast_tests::scene::Scene;
use k8s_openapi::ByteString;
use k8s_openapi::api::admissionregistration::v1::{
    RuleWithOperations, ValidatingWebhook, ValidatingWebhookConfiguration, WebhookClientConfig,
};
use k8s_openapi::api::core::v1::{ConfigMap, Secret};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, OwnerReference};
use kube::api::{Api, DeleteParams, DynamicObject, ListParams, ObjectMeta, PostParams};
use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

fn cm(name: &str) -> ConfigMap {
    ConfigMap {
        metadata: ObjectMeta {
            name: Some(name.into()),
            ..Default::default()
        },
        data: Some(BTreeMap::from([("k".to_string(), "v".to_string())])),
        ..Default::default()
    }
}

fn status_code(e: &kube::Error) -> Option<u16> {
    match e {
        kube::Error::Api(s) => Some(s.code),
        _ => None,
    }
}

#[tokio::test]
async fn plain_user_is_refused_by_rbac_where_admin_is_allowed() {
    let s = Scene::new("rbac").await;
    let ns = &s.ns;
    let user = s.client(Identity::User).await;
    let admin = s.admin.clone();

    let err = Api::<Secret>::namespaced(user.clone(), "kube-system")
        .list(&ListParams::default())
        .await
        .expect_err("a plain user may not list kube-system's secrets");
    assert_eq!(status_code(&err), Some(403), "{err}");
    Api::<Secret>::namespaced(admin, "kube-system")
        .list(&ListParams::default())
        .await
        .expect("the admin may");

    // In its own namespace, the user's role lets it write ConfigMaps.
    Api::<ConfigMap>::namespaced(user, ns)
        .create(&PostParams::default(), &cm("mine"))
        .await
        .expect("the user may create a ConfigMap in its namespace");
}

#[tokio::test]
async fn configmap_owned_by_a_deleted_owner_is_garbage_collected() {
    let s = Scene::new("gc").await;
    let ns = &s.ns;
    let admin = s.admin.clone();
    let cms: Api<ConfigMap> = Api::namespaced(admin, ns);
    let owner = cms
        .create(&PostParams::default(), &cm("owner"))
        .await
        .expect("owner");
    let mut child = cm("child");
    child.metadata.owner_references = Some(vec![OwnerReference {
        api_version: "v1".into(),
        kind: "ConfigMap".into(),
        name: "owner".into(),
        uid: owner.metadata.uid.clone().expect("uid"),
        controller: Some(true),
        block_owner_deletion: Some(true),
    }]);
    cms.create(&PostParams::default(), &child)
        .await
        .expect("child");
    cms.delete("owner", &DeleteParams::default())
        .await
        .expect("delete owner");

    let deadline = tokio::time::Instant::now() + Duration::from_secs(90);
    loop {
        if cms.get_opt("child").await.expect("get child").is_none() {
            break;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "the garbage collector did not delete the orphan within 90s:\n{}",
            s.cp.log_tail("kube-controller-manager", 20)
        );
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
}

#[tokio::test]
async fn update_with_a_stale_resource_version_gets_409() {
    let s = Scene::new("conflict").await;
    let ns = &s.ns;
    let admin = s.admin.clone();
    let cms: Api<ConfigMap> = Api::namespaced(admin, ns);
    let first = cms
        .create(&PostParams::default(), &cm("c"))
        .await
        .expect("create");
    let mut newer = first.clone();
    newer.data = Some(BTreeMap::from([("k".to_string(), "newer".to_string())]));
    cms.replace("c", &PostParams::default(), &newer)
        .await
        .expect("first update");
    let mut stale = first;
    stale.data = Some(BTreeMap::from([("k".to_string(), "stale".to_string())]));
    let err = cms
        .replace("c", &PostParams::default(), &stale)
        .await
        .expect_err("a write preconditioned on an old resourceVersion must fail");
    assert_eq!(status_code(&err), Some(409), "{err}");
    let now = cms.get("c").await.expect("get");
    assert_eq!(
        now.data.and_then(|d| d.get("k").cloned()).as_deref(),
        Some("newer")
    );
}

#[tokio::test]
async fn webhook_registered_by_url_is_called_and_sees_user_info() {
    let s = Scene::new("hook").await;
    let ns = &s.ns;
    let seen: Arc<Mutex<Vec<String>>> = Arc::default();
    let cert =
        s.cp.issue_serving_cert(&["127.0.0.1"], Duration::from_secs(3600))
            .expect("cert");
    let port = recording_webhook::serve(cert, seen.clone())
        .await
        .expect("serve");

    let admin = s.admin.clone();
    let name = format!("smoke-{ns}");
    let hook = ValidatingWebhookConfiguration {
        metadata: ObjectMeta {
            name: Some(name.clone()),
            ..Default::default()
        },
        webhooks: Some(vec![ValidatingWebhook {
            name: "smoke.holdfast.dev".into(),
            admission_review_versions: vec!["v1".into()],
            side_effects: "None".into(),
            failure_policy: Some("Fail".into()),
            timeout_seconds: Some(5),
            client_config: WebhookClientConfig {
                url: Some(format!("https://127.0.0.1:{port}/validate")),
                ca_bundle: Some(ByteString(s.cp.ca_pem().as_bytes().to_vec())),
                service: None,
            },
            namespace_selector: Some(LabelSelector {
                match_labels: Some(BTreeMap::from([(
                    "kubernetes.io/metadata.name".to_string(),
                    ns.clone(),
                )])),
                ..Default::default()
            }),
            rules: Some(vec![RuleWithOperations {
                api_groups: Some(vec!["".into()]),
                api_versions: Some(vec!["v1".into()]),
                operations: Some(vec!["CREATE".into()]),
                resources: Some(vec!["configmaps".into()]),
                scope: Some("Namespaced".into()),
            }]),
            ..Default::default()
        }]),
    };
    Api::<ValidatingWebhookConfiguration>::all(admin.clone())
        .create(&PostParams::default(), &hook)
        .await
        .expect("register webhook");

    // The apiserver caches webhook configurations: retry until the hook answers.
    let user = s.client(Identity::User).await;
    let cms: Api<ConfigMap> = Api::namespaced(user, ns);
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    let message = loop {
        match cms.create(&PostParams::default(), &cm("probe")).await {
            Err(kube::Error::Api(s))
                if s.code == 403 && s.message.contains("recording-webhook") =>
            {
                break s.message;
            }
            Ok(_) => {
                let _ = cms.delete("probe", &DeleteParams::default()).await;
            }
            Err(e) => panic!("unexpected error: {e}"),
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "the webhook was never called"
        );
        tokio::time::sleep(Duration::from_millis(250)).await;
    };
    assert!(message.contains("alice"), "{message}");
    let seen = seen.lock().expect("lock").clone();
    assert!(seen.iter().any(|u| u == "alice"), "{seen:?}");
    Api::<ValidatingWebhookConfiguration>::all(admin)
        .delete(&name, &DeleteParams::default())
        .await
        .expect("unregister");
}

#[tokio::test]
async fn trainjob_and_cluster_training_runtime_from_upstream_crds_can_be_created_and_read() {
    let s = Scene::new("crds").await;
    let ns = &s.ns;
    let admin = s.admin.clone();
    let ctr_ar = holdfast_cluster::resources::cluster_training_runtime();
    let tj_ar = holdfast_cluster::resources::trainjob();
    let runtime_name = format!("torch-{ns}");
    let runtime: DynamicObject = serde_json::from_value(serde_json::json!({
        "apiVersion": "trainer.kubeflow.org/v1alpha1",
        "kind": "ClusterTrainingRuntime",
        "metadata": {"name": runtime_name, "labels": {"trainer.kubeflow.org/framework": "torch"}},
        "spec": {
            "mlPolicy": {"numNodes": 1, "torch": {}},
            "template": {"spec": {"replicatedJobs": [{
                "name": "node",
                "template": {"spec": {"template": {"spec": {"containers": [
                    {"name": "node", "image": "pytorch/pytorch:2.10.0"}
                ]}}}}
            }]}}
        }
    }))
    .expect("runtime json");
    Api::<DynamicObject>::all_with(admin.clone(), &ctr_ar)
        .create(&PostParams::default(), &runtime)
        .await
        .expect("create ClusterTrainingRuntime");
    let tj: DynamicObject = serde_json::from_value(serde_json::json!({
        "apiVersion": "trainer.kubeflow.org/v1alpha1",
        "kind": "TrainJob",
        "metadata": {"name": "mnist"},
        "spec": {"runtimeRef": {"name": runtime_name}}
    }))
    .expect("trainjob json");
    let tjs = Api::<DynamicObject>::namespaced_with(admin.clone(), ns, &tj_ar);
    tjs.create(&PostParams::default(), &tj)
        .await
        .expect("create TrainJob");
    let read = tjs.get("mnist").await.expect("read TrainJob");
    // The CRD's defaults are applied by the real apiserver.
    assert_eq!(
        read.data["spec"]["runtimeRef"]["name"],
        runtime_name.as_str()
    );
    assert_eq!(
        read.data["spec"]["runtimeRef"]["kind"],
        "ClusterTrainingRuntime"
    );
    assert_eq!(
        read.data["spec"]["runtimeRef"]["apiGroup"],
        "trainer.kubeflow.org"
    );
    let back = Api::<DynamicObject>::all_with(admin, &ctr_ar)
        .get(&runtime_name)
        .await
        .expect("read runtime");
    assert_eq!(back.data["spec"]["mlPolicy"]["numNodes"], 1);
}

/// A TLS webhook that records who called it and denies, naming the caller.
mod recording_webhook {
    use bytes::Bytes;
    use http_body_util::{BodyExt, Full};
    use hyper::{Request, Response, body::Incoming};
    use hyper_util::rt::{TokioExecutor, TokioIo};
    use rustls::pki_types::{CertificateDer, PrivateKeyDer, pem::PemObject};
    use std::sync::{Arc, Mutex};

    pub async fn serve(
        cert: holdfast_certs::IssuedCertificate,
        seen: Arc<Mutex<Vec<String>>>,
    ) -> anyhow::Result<u16> {
        let _ = rustls::crypto::ring::default_provider().install_default();
        let chain: Vec<CertificateDer<'static>> =
            CertificateDer::pem_slice_iter(cert.cert_pem.as_bytes()).collect::<Result<_, _>>()?;
        let key = PrivateKeyDer::from_pem_slice(cert.key_pem.as_bytes())?;
        let mut cfg = rustls::ServerConfig::builder()
            .with_no_client_auth()
            .with_single_cert(chain, key)?;
        cfg.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
        let acceptor = tokio_rustls::TlsAcceptor::from(Arc::new(cfg));
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
        let port = listener.local_addr()?.port();
        tokio::spawn(async move {
            while let Ok((tcp, _)) = listener.accept().await {
                let acceptor = acceptor.clone();
                let seen = seen.clone();
                tokio::spawn(async move {
                    let Ok(tls) = acceptor.accept(tcp).await else {
                        return;
                    };
                    let svc = hyper::service::service_fn(move |req: Request<Incoming>| {
                        let seen = seen.clone();
                        async move {
                            let body = req.into_body().collect().await?.to_bytes();
                            let review: serde_json::Value =
                                serde_json::from_slice(&body).unwrap_or_default();
                            let user = review["request"]["userInfo"]["username"]
                                .as_str()
                                .unwrap_or_default()
                                .to_string();
                            if let Ok(mut s) = seen.lock() {
                                s.push(user.clone());
                            }
                            let out = serde_json::json!({
                                "apiVersion": "admission.k8s.io/v1",
                                "kind": "AdmissionReview",
                                "response": {
                                    "uid": review["request"]["uid"],
                                    "allowed": false,
                                    "status": {"code": 403, "message": format!("recording-webhook saw {user}")}
                                }
                            });
                            Ok::<_, hyper::Error>(Response::new(Full::new(Bytes::from(
                                out.to_string(),
                            ))))
                        }
                    });
                    let _ = hyper_util::server::conn::auto::Builder::new(TokioExecutor::new())
                        .serve_connection(TokioIo::new(tls), svc)
                        .await;
                });
            }
        });
        Ok(port)
    }
}
