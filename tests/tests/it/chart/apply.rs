//! Every documented values combination applied to the real apiserver; the first release's
//! configurations, armed, are sent the snapshot writes and nothing else.

use super::*;
use kube::api::DeleteParams;

/// Minimal CRDs for the optional kinds the chart renders.
const OPTIONAL_CRDS: &str = r#"
apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata: {name: servicemonitors.monitoring.coreos.com}
spec:
  group: monitoring.coreos.com
  scope: Namespaced
  names: {kind: ServiceMonitor, plural: servicemonitors, singular: servicemonitor, listKind: ServiceMonitorList}
  versions:
    - name: v1
      served: true
      storage: true
      schema: {openAPIV3Schema: {type: object, x-kubernetes-preserve-unknown-fields: true}}
---
apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata: {name: certificates.cert-manager.io}
spec:
  group: cert-manager.io
  scope: Namespaced
  names: {kind: Certificate, plural: certificates, singular: certificate, listKind: CertificateList}
  versions:
    - name: v1
      served: true
      storage: true
      schema: {openAPIV3Schema: {type: object, x-kubernetes-preserve-unknown-fields: true}}
---
apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata: {name: issuers.cert-manager.io}
spec:
  group: cert-manager.io
  scope: Namespaced
  names: {kind: Issuer, plural: issuers, singular: issuer, listKind: IssuerList}
  versions:
    - name: v1
      served: true
      storage: true
      schema: {openAPIV3Schema: {type: object, x-kubernetes-preserve-unknown-fields: true}}
"#;

/// Configurations `name` armed as holdfast's controller arms them ([`armed`], and marked).
async fn arm_as_the_controller(admin: &kube::Client, name: &str) {
    let mark = |v: &Value| {
        let mut v = armed(v);
        v["metadata"]["annotations"]["holdfast.dev/armed"] = Value::from("true");
        v
    };
    let api = Api::<ValidatingWebhookConfiguration>::all(admin.clone());
    let c = serde_json::to_value(api.get(name).await.expect("validating")).expect("json");
    api.replace(
        name,
        &PostParams::default(),
        &serde_json::from_value(mark(&c)).expect("vwc"),
    )
    .await
    .expect("arm");
    let api = Api::<MutatingWebhookConfiguration>::all(admin.clone());
    let c = serde_json::to_value(api.get(name).await.expect("mutating")).expect("json");
    api.replace(
        name,
        &PostParams::default(),
        &serde_json::from_value(mark(&c)).expect("mwc"),
    )
    .await
    .expect("arm");
}

#[tokio::test]
async fn rendered_manifests_are_accepted_by_the_real_apiserver() {
    let _live = LIVE_WEBHOOKS.lock().await;
    let cp = ControlPlane::shared();
    let helm = helm();
    let admin = cp.client(Identity::Admin).await.expect("admin");
    cp.install_crds(OPTIONAL_CRDS).await.expect("optional CRDs");
    let (_dir, ca_path, _) = ca_file();
    let mut configurations = Vec::new();
    let mut release_namespaces = Vec::new();
    for (i, combo) in Combo::all().into_iter().enumerate() {
        let ns = cp.namespace("hf-apply").await.expect("namespace");
        let release = format!("ap{i}");
        let docs = helm
            .render(&combo.install(&release, &ns, &ca_path))
            .unwrap_or_else(|e| panic!("{combo:?}: {e:#}"));
        for doc in &docs {
            let stored = rbac::apply(&admin, doc, &ns, false)
                .await
                .unwrap_or_else(|e| panic!("{combo:?}: {e:#}"));
            assert!(
                stored.metadata.uid.is_some(),
                "{combo:?}: {}",
                helm::id(doc)
            );
        }
        configurations.push(format!("{release}-holdfast"));
        release_namespaces.push(ns);
    }

    // Only the first release's configurations stay registered (pointing at a Service with no
    // pods): a ConfigMap that is not a snapshot never reaches them; a snapshot ConfigMap does,
    // and with failurePolicy Fail and no webhook serving it is refused; the release namespace
    // is not watched.
    let dp = DeleteParams::default();
    for name in &configurations[1..] {
        let _ = Api::<ValidatingWebhookConfiguration>::all(admin.clone())
            .delete(name, &dp)
            .await;
        let _ = Api::<MutatingWebhookConfiguration>::all(admin.clone())
            .delete(name, &dp)
            .await;
    }
    // Armed as the controller arms them once its webhook answers (none answers here).
    arm_as_the_controller(&admin, &configurations[0]).await;
    let tenant = cp.namespace("tenant").await.expect("namespace");
    let cms: Api<ConfigMap> = Api::namespaced(admin.clone(), &tenant);
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    loop {
        // The apiserver picks up new configurations asynchronously.
        match cms
            .create(
                &PostParams::default(),
                &configmap("job-runtime-snapshot", &[]),
            )
            .await
        {
            Err(e) => {
                let msg = e.to_string();
                assert!(msg.contains("snapshots.validate.holdfast.dev"), "{msg}");
                break;
            }
            Ok(_) => {
                let _ = cms.delete("job-runtime-snapshot", &dp).await;
                assert!(
                    tokio::time::Instant::now() < deadline,
                    "the snapshot webhook was never called"
                );
                tokio::time::sleep(Duration::from_millis(250)).await;
            }
        }
    }
    let labelled = configmap("renamed", &[("holdfast.dev/runtime-snapshot", "true")]);
    cms.create(&PostParams::default(), &labelled)
        .await
        .expect_err("a labelled snapshot goes to the webhook too");
    for i in 0..20 {
        cms.create(
            &PostParams::default(),
            &configmap(&format!("plain-{i}"), &[("app", "x")]),
        )
        .await
        .expect("an unrelated ConfigMap never reaches the webhook");
    }
    // The deleted configurations may still be cached by the apiserver for a moment.
    let own: Api<ConfigMap> = Api::namespaced(admin.clone(), &release_namespaces[0]);
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    while let Err(e) = own
        .create(
            &PostParams::default(),
            &configmap("own-runtime-snapshot", &[]),
        )
        .await
    {
        assert!(
            tokio::time::Instant::now() < deadline,
            "the release namespace must be excluded: {e}"
        );
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    let _ = Api::<ValidatingWebhookConfiguration>::all(admin.clone())
        .delete(&configurations[0], &dp)
        .await;
    let _ = Api::<MutatingWebhookConfiguration>::all(admin.clone())
        .delete(&configurations[0], &dp)
        .await;
}
