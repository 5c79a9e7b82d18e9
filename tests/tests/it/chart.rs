//! The Helm chart: it lints and renders for every documented values combination, a wrong value
//! fails at install, the real apiserver accepts what it renders, its webhook entries follow the
//! failure policy and name the identities the values give (the tests register exactly what it
//! renders: `holdfast_tests::registration`), its RBAC grants exactly
//! the documented table (and nothing else), and self-managed certificates work with exactly
//! that RBAC and survive `helm upgrade` without rotating.
//!
//! helm is built from its Go module by `tests/cluster/helm/build.sh` (cached like the control
//! plane). CRDs the chart can use but the control plane does not ship (Prometheus Operator's
//! ServiceMonitor, cert-manager's Issuer and Certificate) are installed as minimal CRDs
//! (`x-kubernetes-preserve-unknown-fields`): the apiserver stores and admits those objects,
//! but their own operators' schemas are not checked here.

use holdfast_certs::{CertificateAuthority, CertificateInfo};
use holdfast_controller::webhook_certs::{self as certs, CertConfig, Injection};
use holdfast_tests::helm::{self, Helm, Install};
use holdfast_tests::objects::{cluster_training_runtime, create_dynamic, trainjob};
use holdfast_tests::process::Supervised;
use holdfast_tests::rbac;
use holdfast_tests::wait::wait_for;
use holdfast_tests::{ControlPlane, Identity};
use k8s_openapi::api::admissionregistration::v1::{
    MutatingWebhookConfiguration, ValidatingWebhookConfiguration,
};
use k8s_openapi::api::authorization::v1::{
    ResourceAttributes, SubjectAccessReview, SubjectAccessReviewSpec,
};
use k8s_openapi::api::core::v1::{ConfigMap, Secret};
use kube::api::{Api, DeleteParams, ObjectMeta, PostParams};
use serde_json::Value;
use std::collections::BTreeMap;
use std::time::Duration;

const MODES: [&str; 2] = ["plain", "kueue"];
const CERT_MODES: [&str; 3] = ["self-managed", "cert-manager", "secret"];

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

/// One documented values combination.
#[derive(Clone, Copy, Debug)]
struct Combo {
    mode: &'static str,
    certs: &'static str,
    service_monitor: bool,
}

impl Combo {
    fn all() -> Vec<Combo> {
        let mut out = Vec::new();
        for mode in MODES {
            for certs in CERT_MODES {
                for service_monitor in [false, true] {
                    out.push(Combo {
                        mode,
                        certs,
                        service_monitor,
                    });
                }
            }
        }
        out
    }

    fn install(&self, release: &str, namespace: &str, ca_file: &std::path::Path) -> Install {
        let mut i = Install::new(release, namespace)
            .set(format!("mode={}", self.mode))
            .set(format!("certs.mode={}", self.certs))
            .set(format!(
                "metrics.serviceMonitor.enabled={}",
                self.service_monitor
            ));
        if self.certs == "secret" {
            i = i
                .set(format!("certs.secret.webhookSecretName={release}-tls"))
                .set_file(format!("certs.secret.caBundle={}", ca_file.display()));
        }
        i
    }
}

/// A CA PEM file for the `secret` certificate mode.
fn ca_file() -> (tempfile::TempDir, std::path::PathBuf, String) {
    let dir = tempfile::tempdir().expect("tempdir");
    let ca = CertificateAuthority::generate("user-ca", Duration::from_secs(3600)).expect("ca");
    let path = dir.path().join("ca.crt");
    std::fs::write(&path, ca.cert_pem()).expect("write ca");
    (dir, path, ca.cert_pem().to_owned())
}

/// Tests that register the chart's (unserved) webhook configurations run one at a time: each
/// one's configurations would refuse the other's snapshot writes.
static LIVE_WEBHOOKS: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

fn helm() -> Helm {
    helm::ensure().expect("helm (tests/cluster/helm/build.sh)")
}

fn strs(v: &Value) -> Vec<&str> {
    v.as_array()
        .map(|a| a.iter().filter_map(Value::as_str).collect())
        .unwrap_or_default()
}

/// The properties every Deployment must have, whatever the values.
fn check_deployment(d: &Value) {
    let what = helm::id(d);
    assert_eq!(d["spec"]["replicas"], 2, "{what}: two replicas");
    let pod = &d["spec"]["template"]["spec"];
    assert_eq!(pod["securityContext"]["runAsNonRoot"], true, "{what}");
    assert_eq!(
        pod["securityContext"]["seccompProfile"]["type"], "RuntimeDefault",
        "{what}"
    );
    assert!(
        pod["affinity"]["podAntiAffinity"].is_object(),
        "{what}: anti-affinity"
    );
    let containers = pod["containers"].as_array().expect("containers");
    assert_eq!(containers.len(), 1, "{what}");
    let c = &containers[0];
    let sc = &c["securityContext"];
    assert_eq!(sc["allowPrivilegeEscalation"], false, "{what}");
    assert_eq!(sc["readOnlyRootFilesystem"], true, "{what}");
    assert_eq!(sc["runAsNonRoot"], true, "{what}");
    assert_eq!(sc["seccompProfile"]["type"], "RuntimeDefault", "{what}");
    assert_eq!(strs(&sc["capabilities"]["drop"]), ["ALL"], "{what}");
    assert!(
        c["resources"]["requests"]["cpu"].is_string()
            && c["resources"]["requests"]["memory"].is_string(),
        "{what}: resource requests"
    );
    assert!(
        c["readinessProbe"].is_object() && c["livenessProbe"].is_object(),
        "{what}"
    );
}

fn env_of(d: &Value) -> BTreeMap<String, String> {
    d["spec"]["template"]["spec"]["containers"][0]["env"]
        .as_array()
        .map(|env| {
            env.iter()
                .filter_map(|e| {
                    Some((
                        e["name"].as_str()?.to_owned(),
                        e["value"].as_str().unwrap_or_default().to_owned(),
                    ))
                })
                .collect()
        })
        .unwrap_or_default()
}

fn find<'a>(docs: &'a [Value], kind: &str, name_suffix: &str) -> &'a Value {
    docs.iter()
        .find(|d| {
            d["kind"] == kind
                && d["metadata"]["name"]
                    .as_str()
                    .is_some_and(|n| n.ends_with(name_suffix))
        })
        .unwrap_or_else(|| panic!("no {kind} *{name_suffix} rendered"))
}

fn rules_of(role: &Value) -> Vec<&Value> {
    role["rules"]
        .as_array()
        .map(|r| r.iter().collect())
        .unwrap_or_default()
}

fn grants(role: &Value, group: &str, resource: &str) -> bool {
    rules_of(role).iter().any(|r| {
        strs(&r["apiGroups"]).contains(&group) && strs(&r["resources"]).contains(&resource)
    })
}

#[test]
fn helm_lint_and_template_pass_for_every_documented_values_combination() {
    let helm = helm();
    let (_dir, ca_path, ca_pem) = ca_file();
    for combo in Combo::all() {
        let install = combo.install("holdfast", "holdfast-system", &ca_path);
        helm.lint(&install)
            .unwrap_or_else(|e| panic!("{combo:?}: lint: {e:#}"));
        let docs = helm
            .render(&install)
            .unwrap_or_else(|e| panic!("{combo:?}: template: {e:#}"));
        let kinds: Vec<&str> = docs.iter().filter_map(|d| d["kind"].as_str()).collect();
        let count = |k: &str| kinds.iter().filter(|x| **x == k).count();

        // Both components, each with its PDB, ServiceAccount and Service.
        assert_eq!(count("Deployment"), 2, "{combo:?}");
        assert_eq!(count("PodDisruptionBudget"), 2, "{combo:?}");
        assert_eq!(count("ServiceAccount"), 2, "{combo:?}");
        assert_eq!(count("Service"), 2, "{combo:?}");
        for d in helm::of_kind(&docs, "Deployment") {
            check_deployment(d);
        }
        assert_eq!(count("ValidatingWebhookConfiguration"), 1, "{combo:?}");
        assert_eq!(count("MutatingWebhookConfiguration"), 1, "{combo:?}");
        // Helm never owns a Secret: self-managed ones are the controller's, the others are
        // cert-manager's or the user's.
        assert_eq!(count("Secret"), 0, "{combo:?}");
        assert_eq!(
            count("AdmissionCheck"),
            usize::from(combo.mode == "kueue"),
            "{combo:?}"
        );
        assert_eq!(
            count("ServiceMonitor"),
            usize::from(combo.service_monitor),
            "{combo:?}"
        );
        assert_eq!(
            count("Certificate") > 0,
            combo.certs == "cert-manager",
            "{combo:?}"
        );

        // The webhook's identities and mode, as its flags' environment variables.
        let webhook = find(&docs, "Deployment", "-webhook");
        let env = env_of(webhook);
        assert_eq!(env["HOLDFAST_MODE"], combo.mode);
        // Its limits (README, "Flood protection"), and no client certificates by default.
        assert_eq!(env["HOLDFAST_MAX_CONCURRENT"], "64");
        assert_eq!(env["HOLDFAST_BODY_READ_TIMEOUT"], "2s");
        assert_eq!(env["HOLDFAST_MAX_CONNECTIONS"], "512");
        assert_eq!(env["HOLDFAST_MAX_CONNECTIONS_PER_IP"], "32");
        assert_eq!(env["HOLDFAST_MAX_LOOKUPS"], "16");
        assert!(!env.contains_key("HOLDFAST_CLIENT_CA_FILE"), "{combo:?}");
        // The NetworkPolicies, on by default: the webhook port from any address (the apiserver,
        // wherever it calls from), the metrics port from nobody but the node; the controller's
        // (its own test below).
        assert_eq!(count("NetworkPolicy"), 2, "{combo:?}");
        let np = find(&docs, "NetworkPolicy", "-webhook");
        assert_eq!(
            np["spec"]["podSelector"]["matchLabels"], webhook["spec"]["selector"]["matchLabels"],
            "the policy selects the webhook pods"
        );
        assert_eq!(strs(&np["spec"]["policyTypes"]), ["Ingress"]);
        let rules = np["spec"]["ingress"].as_array().expect("ingress rules");
        assert_eq!(rules.len(), 1, "only the webhook port: {rules:?}");
        assert_eq!(
            rules[0]["ports"],
            serde_json::json!([{"port": 9443, "protocol": "TCP"}])
        );
        assert_eq!(
            rules[0]["from"],
            serde_json::json!([{"ipBlock": {"cidr": "0.0.0.0/0"}}, {"ipBlock": {"cidr": "::/0"}}])
        );
        assert_eq!(
            env["HOLDFAST_CONTROLLER_USERS"],
            "system:serviceaccount:holdfast-system:holdfast-controller"
        );
        assert_eq!(
            env["HOLDFAST_SNAPSHOT_CREATORS"],
            "system:serviceaccount:kubeflow-system:kubeflow-trainer-controller-manager"
        );
        assert!(env["HOLDFAST_KUEUE_USERS"].contains("kueue-controller-manager"));
        let controller = find(&docs, "Deployment", "-controller");
        let cenv = env_of(controller);
        assert_eq!(cenv["HOLDFAST_APISERVER_REQUEST_TIMEOUT"], "60s");
        // The namespaces admission does not judge (a Hold there is Unsupported), and the
        // validation engine (preflight probes the policies under policy and both).
        assert!(
            cenv["HOLDFAST_UNPROTECTED_NAMESPACES"].starts_with("kube-system,"),
            "{combo:?}"
        );
        assert_eq!(cenv["HOLDFAST_VALIDATION_ENGINE"], "webhook", "{combo:?}");
        // Every variable either Deployment sets is a flag of its binary, and parses.
        let webhook_args = webhook_args_from_rendered(&docs);
        assert_eq!(webhook_args.limits(), holdfast_webhook::Limits::DEFAULT);
        controller_args_from_rendered(&docs)
            .configs()
            .unwrap_or_else(|e| panic!("{combo:?}: the controller's flags: {e:#}"));
        assert_eq!(
            cenv["HOLDFAST_CERT_MODE"],
            if combo.certs == "self-managed" {
                "self-managed"
            } else {
                "external"
            }
        );

        // The caBundle: only the secret mode templates it.
        let vwc = find(&docs, "ValidatingWebhookConfiguration", "holdfast");
        assert_disarmed(vwc);
        let vwc = &armed(vwc);
        for hook in vwc["webhooks"].as_array().expect("webhooks") {
            // Once armed, the best-effort entries and the probe's always Ignore (see
            // protected_webhook_entries_render_disarmed_and_once_armed_follow_failure_policy).
            let best_effort = [
                "probe.validate.holdfast.dev",
                "queues.validate.holdfast.dev",
                "kueue-unsuspend.validate.holdfast.dev",
            ]
            .contains(&hook["name"].as_str().unwrap_or_default());
            assert_eq!(
                hook["failurePolicy"],
                if best_effort { "Ignore" } else { "Fail" }
            );
            assert_eq!(hook["sideEffects"], "None");
            assert!(hook["matchConditions"].is_array());
            let bundle = &hook["clientConfig"]["caBundle"];
            if combo.certs == "secret" {
                let expected =
                    serde_json::to_value(k8s_openapi::ByteString(ca_pem.as_bytes().to_vec()))
                        .expect("b64");
                assert_eq!(bundle, &expected, "{combo:?}");
            } else {
                assert!(bundle.is_null(), "{combo:?}: {bundle}");
            }
        }
        let injects = vwc["metadata"]["annotations"]["cert-manager.io/inject-ca-from"].as_str();
        assert_eq!(
            injects,
            (combo.certs == "cert-manager").then_some("holdfast-system/holdfast-webhook"),
            "{combo:?}"
        );

        // Least privilege follows the values.
        let role = find(&docs, "ClusterRole", "holdfast-controller");
        // Workloads in both modes (plain: a hold left from kueue mode is released on its
        // Workload); the readmission gate's status writes in kueue mode only.
        assert!(grants(role, "kueue.x-k8s.io", "workloads"), "{combo:?}");
        assert_eq!(
            grants(role, "kueue.x-k8s.io", "workloads/status"),
            combo.mode == "kueue",
            "{combo:?}"
        );
        // Its own webhook configurations, every certificate mode: it arms them.
        assert!(
            grants(
                role,
                "admissionregistration.k8s.io",
                "validatingwebhookconfigurations"
            ),
            "{combo:?}"
        );
        let ns_role = find(&docs, "Role", "holdfast-controller");
        assert_eq!(
            grants(ns_role, "", "secrets"),
            combo.certs == "self-managed",
            "{combo:?}"
        );
    }
}

#[test]
fn a_wrong_value_fails_at_install_with_a_message_naming_it() {
    let helm = helm();
    let cases = [
        ("mode=suspend", "/mode"),
        ("certs.mode=vault", "/certs/mode"),
        ("webhook.failurePolicy=Retry", "/webhook/failurePolicy"),
        ("timeouts.apiserverRequest=1h", "/timeouts/apiserverRequest"),
        ("timeouts.webhook=60", "/timeouts/webhook"),
        ("controller.replicas=0", "/controller/replicas"),
        ("webhook.replicaz=2", "replicaz"),
        (
            "certs.selfManaged.servingValidity=90 days",
            "/certs/selfManaged/servingValidity",
        ),
        (
            "kueue.admissionCheck.apiVersion=kueue.x-k8s.io/v1",
            "/kueue/admissionCheck/apiVersion",
        ),
        // The secret mode needs the Secret's name and the CA.
        ("certs.mode=secret", "/certs"),
        (
            "webhook.limits.maxConnections=0",
            "/webhook/limits/maxConnections",
        ),
        (
            "webhook.limits.bodyReadTimeout=60s",
            "/webhook/limits/bodyReadTimeout",
        ),
        // Client certificates need the CA's Secret or ConfigMap.
        ("webhook.clientAuth.enabled=true", "/webhook/clientAuth"),
        (
            "networkPolicy.webhook.exceptCIDRs={10.244.0.0}",
            "/networkPolicy/webhook/exceptCIDRs/0",
        ),
        ("validation.engine=cel", "/validation/engine"),
    ];
    for (set, names) in cases {
        let install = Install::new("holdfast", "holdfast-system").set(set);
        let err = helm
            .template(&install)
            .expect_err(&format!("--set {set} must be refused"));
        let msg = format!("{err:#}");
        assert!(msg.contains("schema"), "--set {set}: {msg}");
        assert!(
            msg.contains(names),
            "--set {set} should name {names}: {msg}"
        );
    }
    // Durations the controller parses are accepted; so are seconds as a number.
    let ok = Install::new("holdfast", "holdfast-system")
        .set("timeouts.apiserverRequest=90")
        .set("certs.selfManaged.servingValidity=30d");
    let docs = helm.render(&ok).expect("valid values");
    let env = env_of(find(&docs, "Deployment", "-controller"));
    assert_eq!(env["HOLDFAST_APISERVER_REQUEST_TIMEOUT"], "90s");
    let ok = Install::new("holdfast", "holdfast-system").set("timeouts.apiserverRequest=2m");
    let env = env_of(find(
        &helm.render(&ok).expect("2m"),
        "Deployment",
        "-controller",
    ));
    assert_eq!(env["HOLDFAST_APISERVER_REQUEST_TIMEOUT"], "2m");
    let args = controller_args_from_rendered(&helm.render(&ok).expect("2m"));
    assert_eq!(args.apiserver_request_timeout, Duration::from_secs(120));
}

/// The non-default values of the NetworkPolicy and of client certificates render as the
/// chart's README documents them, and the real apiserver accepts the policy.
#[tokio::test]
async fn network_policy_and_client_certificate_values_render_as_documented() {
    let helm = helm();
    let install = Install::new("holdfast", "holdfast-system")
        .set("networkPolicy.webhook.exceptCIDRs={10.244.0.0/16,fd00:10:244::/56}")
        .set("networkPolicy.webhook.extraFrom[0].namespaceSelector.matchLabels.kubernetes\\.io/metadata\\.name=kube-system")
        .set("networkPolicy.webhook.extraFrom[0].podSelector.matchLabels.k8s-app=konnectivity-agent")
        .set("networkPolicy.metrics.from[0].namespaceSelector.matchLabels.kubernetes\\.io/metadata\\.name=monitoring")
        .set("webhook.clientAuth.enabled=true")
        .set("webhook.clientAuth.caConfigMapName=apiserver-client-ca");
    helm.lint(&install).expect("lint");
    let docs = helm.render(&install).expect("render");
    let np = find(&docs, "NetworkPolicy", "-webhook");
    let rules = np["spec"]["ingress"].as_array().expect("rules");
    assert_eq!(rules.len(), 2, "{rules:?}");
    // Each except goes to the cidr of its family.
    assert_eq!(
        rules[0]["from"],
        serde_json::json!([
            {"ipBlock": {"cidr": "0.0.0.0/0", "except": ["10.244.0.0/16"]}},
            {"ipBlock": {"cidr": "::/0", "except": ["fd00:10:244::/56"]}},
            {"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "kube-system"}},
             "podSelector": {"matchLabels": {"k8s-app": "konnectivity-agent"}}}
        ])
    );
    assert_eq!(
        rules[1]["ports"],
        serde_json::json!([{"port": 9091, "protocol": "TCP"}])
    );
    assert_eq!(
        rules[1]["from"],
        serde_json::json!([{"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "monitoring"}}}])
    );
    let webhook = find(&docs, "Deployment", "-webhook");
    assert_eq!(
        env_of(webhook)["HOLDFAST_CLIENT_CA_FILE"],
        "/etc/holdfast/client-ca/ca.crt"
    );
    let pod = &webhook["spec"]["template"]["spec"];
    let volume = pod["volumes"]
        .as_array()
        .expect("volumes")
        .iter()
        .find(|v| v["name"] == "client-ca")
        .expect("the client CA volume");
    assert_eq!(volume["configMap"]["name"], "apiserver-client-ca");
    assert!(
        pod["containers"][0]["volumeMounts"]
            .as_array()
            .expect("mounts")
            .iter()
            .any(|m| m["name"] == "client-ca" && m["mountPath"] == "/etc/holdfast/client-ca")
    );

    // The real apiserver accepts the policy (an except must lie inside its cidr).
    let cp = ControlPlane::shared();
    let admin = cp.client(Identity::Admin).await.expect("admin");
    let ns = cp.namespace("hf-netpol").await.expect("namespace");
    let mut np = np.clone();
    np["metadata"]["namespace"] = serde_json::json!(ns);
    let stored = rbac::apply(&admin, &np, &ns, false)
        .await
        .expect("apply the NetworkPolicy");
    assert!(stored.metadata.uid.is_some());

    // Off: no policy. Nothing allowed in at all would lock the apiserver out: refused.
    let off = helm
        .render(&Install::new("holdfast", "holdfast-system").set("networkPolicy.enabled=false"))
        .expect("render");
    assert!(helm::of_kind(&off, "NetworkPolicy").is_empty());
    let err = helm
        .template(
            &Install::new("holdfast", "holdfast-system").set("networkPolicy.webhook.cidrs=null"),
        )
        .expect_err("no source for the apiserver");
    assert!(
        format!("{err:#}").contains("the apiserver could not reach the webhook"),
        "{err:#}"
    );
}

/// The entries of the chart's webhook configurations as (name, failurePolicy, match
/// condition names).
fn entries(doc: &Value) -> Vec<(String, String, Vec<String>)> {
    doc["webhooks"]
        .as_array()
        .expect("webhooks")
        .iter()
        .map(|w| {
            assert_eq!(w["sideEffects"], "None");
            assert_eq!(w["matchPolicy"], "Equivalent");
            assert_eq!(w["admissionReviewVersions"], serde_json::json!(["v1"]));
            (
                w["name"].as_str().expect("name").to_owned(),
                w["failurePolicy"]
                    .as_str()
                    .expect("failurePolicy")
                    .to_owned(),
                w["matchConditions"]
                    .as_array()
                    .expect("matchConditions")
                    .iter()
                    .map(|c| c["name"].as_str().expect("condition name").to_owned())
                    .collect(),
            )
        })
        .collect()
}

/// Each entry's rules as `(name, [(resources, operations)])`, checking every rule is
/// namespaced and names no subresource.
fn rules(doc: &Value) -> Vec<(String, Vec<(String, String)>)> {
    doc["webhooks"]
        .as_array()
        .expect("webhooks")
        .iter()
        .map(|w| {
            let rules = w["rules"].as_array().expect("rules");
            let rules = rules
                .iter()
                .map(|r| {
                    assert_eq!(r["scope"], "Namespaced", "{r}");
                    let list = |k: &str| {
                        r[k].as_array()
                            .expect("list")
                            .iter()
                            .map(|x| x.as_str().expect("string").to_owned())
                            .collect::<Vec<_>>()
                    };
                    let resources = list("resources");
                    assert!(
                        resources.iter().all(|r| !r.contains('/')),
                        "no subresource: status writes carry no state the policy reads: {r}"
                    );
                    (resources.join(","), list("operations").join(","))
                })
                .collect();
            (w["name"].as_str().expect("name").to_owned(), rules)
        })
        .collect()
}

/// What each entry is sent decides what an outage stops and what the policy sees: no DELETE
/// of TrainJobs or Workloads (the policy refuses none; the hold finalizer keeps a held
/// Workload), DELETE of ConfigMaps (snapshots), Workload CREATE only to the validating side.
#[test]
fn webhook_entries_are_sent_the_resources_and_operations_the_policy_reads() {
    let helm = helm();
    let (_dir, ca_path, _) = ca_file();
    let r = |v: &[(&str, &str)]| {
        v.iter()
            .map(|(a, b)| ((*a).to_owned(), (*b).to_owned()))
            .collect::<Vec<_>>()
    };
    for mode in ["plain", "kueue"] {
        let install = Combo {
            mode,
            certs: "secret",
            service_monitor: false,
        }
        .install("holdfast", "holdfast-system", &ca_path);
        let docs = helm.render(&install).expect("render");
        let v = rules(find(&docs, "ValidatingWebhookConfiguration", "holdfast"));
        let m = rules(find(&docs, "MutatingWebhookConfiguration", "holdfast"));
        let jobs = r(&[
            ("trainjobs", "CREATE,UPDATE"),
            ("workloads", "CREATE,UPDATE"),
        ]);
        let mut want_v = vec![
            (
                "probe.validate.holdfast.dev".to_owned(),
                r(&[("configmaps", "CREATE")]),
            ),
            (
                "snapshots.validate.holdfast.dev".to_owned(),
                r(&[("configmaps", "CREATE,UPDATE,DELETE")]),
            ),
            ("jobs.validate.holdfast.dev".to_owned(), jobs),
        ];
        if mode == "kueue" {
            want_v.push((
                "queues.validate.holdfast.dev".to_owned(),
                r(&[("trainjobs", "CREATE")]),
            ));
            want_v.push((
                "kueue-unsuspend.validate.holdfast.dev".to_owned(),
                r(&[("trainjobs", "UPDATE")]),
            ));
            want_v.push((
                "workload-requests.validate.holdfast.dev".to_owned(),
                r(&[("workloads", "CREATE,UPDATE")]),
            ));
        }
        assert_eq!(v, want_v, "{mode}");
        let want_m = vec![
            (
                "jobs.mutate.holdfast.dev".to_owned(),
                r(&[("trainjobs", "CREATE,UPDATE"), ("workloads", "UPDATE")]),
            ),
            (
                "records.mutate.holdfast.dev".to_owned(),
                r(&[("trainjobs", "CREATE")]),
            ),
            (
                "jobsets.mutate.holdfast.dev".to_owned(),
                r(&[("jobsets", "CREATE,UPDATE")]),
            ),
        ];
        assert_eq!(m, want_m, "{mode}");
    }
}

/// `doc` (a webhook configuration) armed as holdfast's controller arms it: the entries its
/// `holdfast.dev/fails-closed` annotation names set to Fail.
fn armed(doc: &Value) -> Value {
    let names: Vec<String> = holdfast_core::arming::fails_closed(doc)
        .into_iter()
        .map(str::to_owned)
        .collect();
    let mut doc = doc.clone();
    for w in doc["webhooks"].as_array_mut().into_iter().flatten() {
        if w["name"]
            .as_str()
            .is_some_and(|n| names.iter().any(|a| a == n))
        {
            w["failurePolicy"] = Value::from("Fail");
        }
    }
    doc
}

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

/// Every entry rendered disarmed (Ignore) and the configuration not marked armed: what a
/// fresh install registers.
fn assert_disarmed(doc: &Value) {
    for w in doc["webhooks"].as_array().into_iter().flatten() {
        assert_eq!(
            w["failurePolicy"], "Ignore",
            "rendered disarmed: {}",
            w["name"]
        );
    }
    assert!(
        !holdfast_core::arming::is_marked(doc),
        "rendered without the armed mark"
    );
}

#[test]
fn protected_webhook_entries_render_disarmed_and_once_armed_follow_failure_policy() {
    let helm = helm();
    let (_dir, ca_path, _) = ca_file();
    let s = |v: &[&str]| v.iter().map(|x| (*x).to_owned()).collect::<Vec<_>>();
    for (mode, policy) in [
        ("plain", "Fail"),
        ("kueue", "Fail"),
        ("kueue", "Ignore"),
        ("plain", "Ignore"),
    ] {
        let install = Combo {
            mode,
            certs: "secret",
            service_monitor: false,
        }
        .install("holdfast", "holdfast-system", &ca_path)
        .set(format!("webhook.failurePolicy={policy}"));
        let docs = helm.render(&install).expect("render");
        let (vdoc, mdoc) = (
            find(&docs, "ValidatingWebhookConfiguration", "holdfast"),
            find(&docs, "MutatingWebhookConfiguration", "holdfast"),
        );
        assert_disarmed(vdoc);
        assert_disarmed(mdoc);
        let v = entries(&armed(vdoc));
        let m = entries(&armed(mdoc));
        let p = policy.to_owned();
        let i = "Ignore".to_owned();
        let mut want_v = vec![
            (
                "probe.validate.holdfast.dev".to_owned(),
                i.clone(),
                s(&["the-controllers-dry-run-probe"]),
            ),
            (
                "snapshots.validate.holdfast.dev".to_owned(),
                p.clone(),
                s(&["runtime-snapshot", "not-decided-by-identity"]),
            ),
            (
                "jobs.validate.holdfast.dev".to_owned(),
                p.clone(),
                if mode == "kueue" {
                    s(&[
                        "holdfast-state",
                        "not-the-controller",
                        "kueue-only-on-holdfast-state",
                    ])
                } else {
                    s(&["holdfast-state", "not-the-controller"])
                },
            ),
        ];
        if mode == "kueue" {
            want_v.push((
                "queues.validate.holdfast.dev".to_owned(),
                i.clone(),
                s(&["queued-without-holdfast-state", "not-the-controller"]),
            ));
            want_v.push((
                "kueue-unsuspend.validate.holdfast.dev".to_owned(),
                i.clone(),
                s(&["kueue-unsuspends"]),
            ));
            want_v.push((
                "workload-requests.validate.holdfast.dev".to_owned(),
                p.clone(),
                s(&[
                    "a-trainjobs-workload",
                    "its-pods-request-nothing",
                    "created-adopted-or-its-pod-sets-or-queue-changed",
                ]),
            ));
        }
        assert_eq!(v, want_v, "{mode}, {policy}");
        assert_eq!(
            m,
            vec![
                (
                    "jobs.mutate.holdfast.dev".to_owned(),
                    p.clone(),
                    s(&["holdfast-state", "not-the-controller"])
                ),
                (
                    "records.mutate.holdfast.dev".to_owned(),
                    i.clone(),
                    s(&["without-holdfast-state"])
                ),
                (
                    "jobsets.mutate.holdfast.dev".to_owned(),
                    p.clone(),
                    s(&[
                        "a-trainjobs-jobset",
                        "created-without-failed-or-updated-dropping-it"
                    ])
                ),
            ],
            "{mode}, {policy}"
        );
    }
}

#[test]
fn validation_engine_policy_moves_the_validating_rules_into_admission_policies() {
    let helm = helm();
    let (_dir, ca_path, _) = ca_file();
    let s = |v: &[&str]| v.iter().map(|x| (*x).to_owned()).collect::<Vec<_>>();
    for mode in ["plain", "kueue"] {
        let render = |engine: &str| {
            let install = Combo {
                mode,
                certs: "secret",
                service_monitor: false,
            }
            .install("holdfast", "holdfast-system", &ca_path)
            .set(format!("validation.engine={engine}"));
            helm.render(&install)
                .unwrap_or_else(|e| panic!("{mode}, {engine}: {e:#}"))
        };
        let webhook = render("webhook");
        let both = render("both");
        let policy = render("policy");
        // The execution finalizer's policy and the controller's ConfigMap policy are the same
        // under every engine (they guard pods and the controller's own ConfigMap writes,
        // which no validating rule of the webhook covers), in every namespace, and need no
        // webhook; the webhook engine renders no other policy (the default); both keeps
        // every webhook entry.
        let execution = "holdfast-execution-finalizer";
        let configmaps = "holdfast-controller-configmaps";
        for always in [execution, configmaps] {
            let always_policy = |docs: &[Value]| -> Vec<Value> {
                [
                    "ValidatingAdmissionPolicy",
                    "ValidatingAdmissionPolicyBinding",
                ]
                .into_iter()
                .map(|kind| find(docs, kind, always).clone())
                .collect()
            };
            let guarded = always_policy(&webhook);
            assert_eq!(
                guarded[0]["spec"]["failurePolicy"], "Fail",
                "{mode}, {always}"
            );
            assert!(
                guarded[0]["spec"]["matchConstraints"]["namespaceSelector"].is_null(),
                "every namespace: {mode}, {always}"
            );
            assert!(
                guarded[0]["spec"]["paramKind"].is_null(),
                "no lookups: {mode}, {always}"
            );
            assert_eq!(
                guarded[1]["spec"]["validationActions"],
                serde_json::json!(["Deny"])
            );
            assert_eq!(always_policy(&both), guarded, "{mode}, {always}");
            assert_eq!(always_policy(&policy), guarded, "{mode}, {always}");
        }
        // kueue mode: the readmission gate's policy, the same under every engine (Kueue's
        // admission of a TrainJob's Workload, which no webhook entry judges); none in plain
        // mode.
        let gate = "holdfast-readmission-gate";
        let gate_docs = |docs: &[Value]| -> Vec<Value> {
            docs.iter()
                .filter(|d| d["metadata"]["name"] == gate)
                .cloned()
                .collect()
        };
        if mode == "kueue" {
            let guarded = gate_docs(&webhook);
            assert_eq!(guarded.len(), 2, "the policy and its binding");
            assert_eq!(guarded[0]["spec"]["failurePolicy"], "Fail");
            assert!(guarded[0]["spec"]["paramKind"].is_null(), "no lookups");
            assert_eq!(gate_docs(&both), guarded);
            assert_eq!(gate_docs(&policy), guarded);
        } else {
            assert!(gate_docs(&webhook).is_empty(), "{mode}");
        }
        let rules = |docs: &[Value], kind: &str| -> Vec<Value> {
            helm::of_kind(docs, kind)
                .into_iter()
                .filter(|d| {
                    d["metadata"]["name"] != execution
                        && d["metadata"]["name"] != configmaps
                        && d["metadata"]["name"] != gate
                })
                .cloned()
                .collect()
        };
        assert!(rules(&webhook, "ValidatingAdmissionPolicy").is_empty());
        let validating = |docs: &[Value]| -> Vec<(String, String, Vec<String>)> {
            let doc = find(docs, "ValidatingWebhookConfiguration", "holdfast");
            if doc["webhooks"].as_array().is_some_and(Vec::is_empty) {
                return Vec::new();
            }
            // As the controller arms it, and without the probe's entry (every engine has it).
            let mut e = entries(&armed(doc));
            assert_eq!(
                e.first().map(|x| x.0.as_str()),
                Some("probe.validate.holdfast.dev")
            );
            e.remove(0);
            e
        };
        assert_eq!(validating(&both), validating(&webhook), "{mode}");
        // The mutating side is the webhook's whatever the engine.
        for docs in [&both, &policy] {
            assert_eq!(
                entries(find(docs, "MutatingWebhookConfiguration", "holdfast")),
                entries(find(&webhook, "MutatingWebhookConfiguration", "holdfast")),
                "{mode}"
            );
        }
        // policy: the webhook keeps only the lookups, failing closed where jobs.validate did.
        let want = if mode == "kueue" {
            vec![
                (
                    "queue-checks.validate.holdfast.dev".to_owned(),
                    "Fail".to_owned(),
                    s(&["queue-checked-and-protected", "not-the-controller"]),
                ),
                (
                    "queues.validate.holdfast.dev".to_owned(),
                    "Ignore".to_owned(),
                    s(&["queued-without-holdfast-state", "not-the-controller"]),
                ),
                (
                    "kueue-unsuspend.validate.holdfast.dev".to_owned(),
                    "Ignore".to_owned(),
                    s(&["kueue-unsuspends"]),
                ),
                (
                    "workload-requests.validate.holdfast.dev".to_owned(),
                    "Fail".to_owned(),
                    s(&[
                        "a-trainjobs-workload",
                        "its-pods-request-nothing",
                        "created-adopted-or-its-pod-sets-or-queue-changed",
                    ]),
                ),
            ]
        } else {
            vec![(
                "held-workloads.validate.holdfast.dev".to_owned(),
                "Fail".to_owned(),
                s(&["unsuspends-a-job-with-holdfast-state", "not-the-controller"]),
            )]
        };
        assert_eq!(validating(&policy), want, "{mode}");
        for docs in [&both, &policy] {
            let policies = rules(docs, "ValidatingAdmissionPolicy");
            let bindings = rules(docs, "ValidatingAdmissionPolicyBinding");
            let names: Vec<&str> = policies
                .iter()
                .filter_map(|p| p["metadata"]["name"].as_str())
                .collect();
            assert_eq!(
                names,
                [
                    "holdfast-snapshots",
                    "holdfast-trainjobs",
                    "holdfast-workloads"
                ],
                "{mode}"
            );
            for p in &policies {
                assert_eq!(p["apiVersion"], "admissionregistration.k8s.io/v1");
                assert_eq!(p["spec"]["failurePolicy"], "Fail", "{mode}");
                let excluded =
                    &p["spec"]["matchConstraints"]["namespaceSelector"]["matchExpressions"][0];
                assert_eq!(excluded["operator"], "NotIn");
                assert_eq!(
                    excluded["values"],
                    serde_json::json!(["kube-system", "holdfast-system"])
                );
            }
            let bound: Vec<(&str, &Value)> = bindings
                .iter()
                .map(|b| {
                    (
                        b["spec"]["policyName"].as_str().unwrap_or_default(),
                        &b["spec"]["validationActions"],
                    )
                })
                .collect();
            assert_eq!(
                bound,
                [
                    ("holdfast-snapshots", &serde_json::json!(["Deny"])),
                    ("holdfast-trainjobs", &serde_json::json!(["Deny"])),
                    ("holdfast-workloads", &serde_json::json!(["Deny"]))
                ],
                "{mode}"
            );
        }
    }
}

#[test]
fn webhook_availability_defaults_render_as_documented() {
    let helm = helm();
    let docs = helm
        .render(&Install::new("holdfast", "holdfast-system"))
        .expect("render");
    let spec = &find(&docs, "Deployment", "-webhook")["spec"];
    assert_eq!(spec["replicas"], 2);
    let pod = &spec["template"]["spec"];
    assert_eq!(pod["priorityClassName"], "system-cluster-critical");
    let spread = &pod["topologySpreadConstraints"][0];
    assert_eq!(spread["topologyKey"], "topology.kubernetes.io/zone");
    assert_eq!(spread["whenUnsatisfiable"], "ScheduleAnyway");
    assert_eq!(
        spread["labelSelector"]["matchLabels"], spec["selector"]["matchLabels"],
        "the spread counts the webhook's own pods"
    );
    let pdb = find(&docs, "PodDisruptionBudget", "-webhook");
    assert_eq!(pdb["spec"]["maxUnavailable"], 1);
    let quota = find(&docs, "ResourceQuota", "-critical-pods");
    assert_eq!(
        quota["spec"]["scopeSelector"]["matchExpressions"][0]["values"],
        serde_json::json!(["system-cluster-critical"])
    );

    // Opting out: no class, no quota; the user's own constraints replace the zone spread.
    let docs = helm
        .render(
            &Install::new("holdfast", "holdfast-system")
                .set("webhook.priorityClassName=")
                .set("webhook.topologySpreadConstraints[0].maxSkew=2")
                .set("webhook.topologySpreadConstraints[0].topologyKey=kubernetes.io/hostname")
                .set("webhook.topologySpreadConstraints[0].whenUnsatisfiable=DoNotSchedule"),
        )
        .expect("render");
    let pod = &find(&docs, "Deployment", "-webhook")["spec"]["template"]["spec"];
    assert!(pod.get("priorityClassName").is_none());
    assert_eq!(
        pod["topologySpreadConstraints"],
        serde_json::json!([{"maxSkew": 2, "topologyKey": "kubernetes.io/hostname",
            "whenUnsatisfiable": "DoNotSchedule"}])
    );
    assert!(helm::of_kind(&docs, "ResourceQuota").is_empty());
}

#[test]
fn match_conditions_name_the_identities_the_values_give() {
    let helm = helm();
    let (_dir, ca_path, _) = ca_file();
    let install = Combo {
        mode: "kueue",
        certs: "secret",
        service_monitor: false,
    }
    .install("hf", "ops", &ca_path)
    .set("identities.kueueUsers={system:serviceaccount:kq:kueue,kueue-admin}")
    .set("identities.extraControllerUsers={ops-robot}");
    let docs = helm.render(&install).expect("render");
    let v = find(&docs, "ValidatingWebhookConfiguration", "hf-holdfast");
    let text = v.to_string();
    assert!(
        text.contains("['system:serviceaccount:ops:hf-holdfast-controller', 'ops-robot']"),
        "the controller list: {text}"
    );
    assert!(
        text.contains("['system:serviceaccount:kq:kueue', 'kueue-admin']"),
        "the Kueue list: {text}"
    );
    let err = helm
        .render(
            &Combo {
                mode: "kueue",
                certs: "secret",
                service_monitor: false,
            }
            .install("hf", "ops", &ca_path)
            .set("identities.kueueUsers={it's}"),
        )
        .expect_err("a quote in a user name cannot be put into CEL");
    assert!(format!("{err:#}").contains("contain quotes"), "{err:#}");
    // The webhook reads the list comma-separated and trimmed: a name it would read otherwise
    // than the CEL does is refused too (by the schema; the template checks again).
    for bad in [" ops-robot", "a\\,b"] {
        let err = helm
            .render(
                &Combo {
                    mode: "plain",
                    certs: "secret",
                    service_monitor: false,
                }
                .install("hf", "ops", &ca_path)
                .set(format!("identities.extraControllerUsers[0]={bad}")),
            )
            .expect_err("a name the webhook would read differently");
        assert!(
            format!("{err:#}").contains("extraControllerUsers"),
            "{bad}: {err:#}"
        );
    }
}

/// Whether `user` (a service account of `sa_namespace`) may do something, by
/// SubjectAccessReview.
#[allow(clippy::too_many_arguments)]
async fn may(
    admin: &kube::Client,
    sa_namespace: &str,
    sa: &str,
    verb: &str,
    group: &str,
    resource: &str,
    namespace: Option<&str>,
    name: Option<&str>,
) -> bool {
    let (resource, subresource) = match resource.split_once('/') {
        Some((r, s)) => (r, Some(s.to_owned())),
        None => (resource, None),
    };
    let review = SubjectAccessReview {
        spec: SubjectAccessReviewSpec {
            user: Some(rbac::service_account_user(sa_namespace, sa)),
            groups: Some(vec![
                "system:serviceaccounts".into(),
                format!("system:serviceaccounts:{sa_namespace}"),
                "system:authenticated".into(),
            ]),
            resource_attributes: Some(ResourceAttributes {
                verb: Some(verb.into()),
                group: Some(group.into()),
                resource: Some(resource.into()),
                subresource,
                namespace: namespace.map(str::to_owned),
                name: name.map(str::to_owned),
                ..Default::default()
            }),
            ..Default::default()
        },
        ..Default::default()
    };
    let answer = Api::<SubjectAccessReview>::all(admin.clone())
        .create(&PostParams::default(), &review)
        .await
        .expect("SubjectAccessReview");
    answer.status.is_some_and(|s| s.allowed)
}

/// `(verb, group, resource, namespace: "release"|"tenant"|"", name)`.
type Access = (
    &'static str,
    &'static str,
    &'static str,
    &'static str,
    &'static str,
);

async fn check_table(
    admin: &kube::Client,
    release_ns: &str,
    tenant_ns: &str,
    sa: &str,
    allowed: &[Access],
    denied: &[Access],
) {
    let mut wrong = Vec::new();
    for (expect, table) in [(true, allowed), (false, denied)] {
        for (verb, group, resource, ns, name) in table {
            let namespace = match *ns {
                "release" => Some(release_ns),
                "tenant" => Some(tenant_ns),
                _ => None,
            };
            let name = (!name.is_empty()).then_some(*name);
            let got = may(
                admin, release_ns, sa, verb, group, resource, namespace, name,
            )
            .await;
            if got != expect {
                wrong.push(format!(
                    "{sa} {} {verb} {group}/{resource} ns={ns} name={name:?}",
                    if expect {
                        "should be allowed to"
                    } else {
                        "must not"
                    }
                ));
            }
        }
    }
    assert!(
        wrong.is_empty(),
        "RBAC differs from the table:\n{}",
        wrong.join("\n")
    );
}

#[tokio::test]
async fn the_charts_rbac_grants_exactly_the_documented_table() {
    let cp = ControlPlane::shared();
    let helm = helm();
    let admin = cp.client(Identity::Admin).await.expect("admin");
    let tenant = cp.namespace("tenant").await.expect("namespace");

    // plain mode, self-managed certificates, one extra runtime kind.
    let release_ns = cp.namespace("hf-plain").await.expect("namespace");
    let install = Install::new("tbl", &release_ns)
        .set("runtimes.extra[0].apiGroup=slurm.example.com")
        .set("runtimes.extra[0].resources[0]=slurmruntimes");
    let docs = helm.render(&install).expect("render");
    rbac::apply_kinds(&admin, &docs, &rbac::RBAC_KINDS, &release_ns)
        .await
        .expect("apply RBAC");
    let ctl = "tbl-holdfast-controller";
    let tj = "trainer.kubeflow.org";
    let adm = "admissionregistration.k8s.io";
    let allowed: Vec<Access> = vec![
        ("get", tj, "trainjobs", "tenant", ""),
        ("list", tj, "trainjobs", "", ""),
        ("watch", tj, "trainjobs", "", ""),
        ("update", tj, "trainjobs", "tenant", "job"),
        ("get", tj, "trainingruntimes", "tenant", "rt"),
        ("watch", tj, "trainingruntimes", "", ""),
        ("list", tj, "clustertrainingruntimes", "", ""),
        ("get", "slurm.example.com", "slurmruntimes", "tenant", "s"),
        // A hold left from kueue mode is read and released on its Workload; Workloads are
        // watched (metadata only) for such holds.
        ("get", "kueue.x-k8s.io", "workloads", "tenant", "w"),
        ("list", "kueue.x-k8s.io", "workloads", "", ""),
        ("watch", "kueue.x-k8s.io", "workloads", "", ""),
        ("update", "kueue.x-k8s.io", "workloads", "tenant", "w"),
        ("list", "slurm.example.com", "slurmruntimes", "", ""),
        ("get", "", "configmaps", "tenant", "job-runtime-snapshot"),
        ("watch", "", "configmaps", "", ""),
        ("create", "", "configmaps", "tenant", ""),
        ("delete", "", "configmaps", "tenant", "job-runtime-snapshot"),
        ("list", "", "pods", "", ""),
        ("watch", "", "pods", "tenant", ""),
        // A pod is a TrainJob's by ownership: its Job's, whose JobSet the TrainJob owns;
        // the execution finalizer goes on and off its pods (update).
        ("list", "batch", "jobs", "tenant", ""),
        ("watch", "batch", "jobs", "", ""),
        ("list", "jobset.x-k8s.io", "jobsets", "tenant", ""),
        ("watch", "jobset.x-k8s.io", "jobsets", "", ""),
        ("patch", "", "pods", "tenant", "p"),
        // Fenced nodes: one ConfigMap in the release namespace.
        ("update", "", "configmaps", "release", "tbl-holdfast-fences"),
        ("watch", "", "configmaps", "release", "tbl-holdfast-fences"),
        // The hold API's CA, published for its clients.
        (
            "update",
            "",
            "configmaps",
            "release",
            "tbl-holdfast-hold-api-ca",
        ),
        // Status says whether a remaining pod's node is Ready.
        ("get", "", "nodes", "", "n"),
        ("create", "events.k8s.io", "events", "tenant", ""),
        ("patch", "events.k8s.io", "events", "tenant", "e"),
        ("create", "events.k8s.io", "events", "release", ""),
        ("create", "authentication.k8s.io", "tokenreviews", "", ""),
        (
            "create",
            "authorization.k8s.io",
            "subjectaccessreviews",
            "",
            "",
        ),
        ("create", "coordination.k8s.io", "leases", "release", ""),
        (
            "get",
            "coordination.k8s.io",
            "leases",
            "release",
            "tbl-holdfast-controller",
        ),
        (
            "update",
            "coordination.k8s.io",
            "leases",
            "release",
            "tbl-holdfast-controller",
        ),
        ("create", "", "secrets", "release", ""),
        ("get", "", "secrets", "release", "tbl-holdfast-ca"),
        (
            "update",
            "",
            "secrets",
            "release",
            "tbl-holdfast-webhook-tls",
        ),
        (
            "get",
            "",
            "secrets",
            "release",
            "tbl-holdfast-controller-tls",
        ),
        (
            "get",
            adm,
            "validatingwebhookconfigurations",
            "",
            "tbl-holdfast",
        ),
        (
            "patch",
            adm,
            "mutatingwebhookconfigurations",
            "",
            "tbl-holdfast",
        ),
    ];
    let denied: Vec<Access> = vec![
        (
            "update",
            "",
            "configmaps",
            "release",
            "tbl-holdfast-ca-copy",
        ),
        ("patch", tj, "trainjobs", "tenant", "job"),
        ("delete", tj, "trainjobs", "tenant", "job"),
        ("create", tj, "trainjobs", "tenant", ""),
        ("update", tj, "trainjobs/status", "tenant", "job"),
        ("update", tj, "clustertrainingruntimes", "", "rt"),
        ("update", "", "configmaps", "tenant", "job-runtime-snapshot"),
        ("patch", "", "configmaps", "tenant", "job-runtime-snapshot"),
        ("get", "", "pods", "tenant", "p"),
        ("delete", "", "pods", "tenant", "p"),
        ("get", "", "secrets", "tenant", "x"),
        ("list", "", "secrets", "release", ""),
        ("get", "", "secrets", "release", "someone-elses"),
        ("delete", "", "secrets", "release", "tbl-holdfast-ca"),
        ("create", "", "secrets", "tenant", ""),
        ("create", "coordination.k8s.io", "leases", "tenant", ""),
        (
            "update",
            "coordination.k8s.io",
            "leases",
            "release",
            "another-lease",
        ),
        (
            "get",
            adm,
            "validatingwebhookconfigurations",
            "",
            "someone-elses",
        ),
        ("list", adm, "validatingwebhookconfigurations", "", ""),
        (
            "update",
            adm,
            "validatingwebhookconfigurations",
            "",
            "tbl-holdfast",
        ),
        (
            "delete",
            adm,
            "mutatingwebhookconfigurations",
            "",
            "tbl-holdfast",
        ),
        ("list", "kueue.x-k8s.io", "admissionchecks", "", ""),
        ("create", "", "events", "tenant", ""),
        ("get", "events.k8s.io", "events", "tenant", "e"),
        ("create", "", "namespaces", "", ""),
        ("list", "", "nodes", "", ""),
        ("update", "", "nodes", "", "n"),
        ("update", "", "pods", "tenant", "p"),
        ("update", "", "configmaps", "release", "another"),
        ("update", "", "configmaps", "tenant", "tbl-holdfast-fences"),
        ("delete", "batch", "jobs", "tenant", "j"),
        ("get", "jobset.x-k8s.io", "jobsets", "tenant", "j"),
    ];
    check_table(&admin, &release_ns, &tenant, ctl, &allowed, &denied).await;

    let hook = "tbl-holdfast-webhook";
    let allowed: Vec<Access> = vec![
        ("get", tj, "trainingruntimes", "tenant", "rt"),
        ("get", tj, "clustertrainingruntimes", "", "rt"),
        ("get", "slurm.example.com", "slurmruntimes", "tenant", "s"),
        // An unsuspend is refused while the job's Workload carries a hold.
        ("list", "kueue.x-k8s.io", "workloads", "tenant", ""),
    ];
    let denied: Vec<Access> = vec![
        ("list", tj, "trainingruntimes", "tenant", ""),
        ("watch", tj, "clustertrainingruntimes", "", ""),
        ("get", tj, "trainjobs", "tenant", "job"),
        ("get", "", "configmaps", "tenant", "job-runtime-snapshot"),
        ("get", "", "secrets", "release", "tbl-holdfast-webhook-tls"),
        ("create", "", "events", "tenant", ""),
        (
            "get",
            "coordination.k8s.io",
            "leases",
            "release",
            "tbl-holdfast-controller",
        ),
    ];
    check_table(&admin, &release_ns, &tenant, hook, &allowed, &denied).await;

    // kueue mode with cert-manager: the Kueue rules appear, the certificate rules go.
    let release_ns = cp.namespace("hf-kueue").await.expect("namespace");
    let install = Install::new("tbk", &release_ns)
        .set("mode=kueue")
        .set("certs.mode=cert-manager");
    let docs = helm.render(&install).expect("render");
    rbac::apply_kinds(&admin, &docs, &rbac::RBAC_KINDS, &release_ns)
        .await
        .expect("apply RBAC");
    let ctl = "tbk-holdfast-controller";
    let kq = "kueue.x-k8s.io";
    let allowed: Vec<Access> = vec![
        ("get", kq, "workloads", "tenant", "w"),
        ("list", kq, "workloads", "", ""),
        ("watch", kq, "workloads", "", ""),
        ("update", kq, "workloads", "tenant", "w"),
        ("update", kq, "workloads/status", "tenant", "w"),
        ("patch", kq, "workloads/status", "tenant", "w"),
        ("get", kq, "admissionchecks", "", "tbk-holdfast-readmission"),
        ("watch", kq, "admissionchecks", "", ""),
        (
            "update",
            kq,
            "admissionchecks/status",
            "",
            "tbk-holdfast-readmission",
        ),
        ("update", tj, "trainjobs", "tenant", "job"),
        ("list", kq, "localqueues", "", ""),
        ("watch", kq, "clusterqueues", "", ""),
        // Preflight reads the readmission-gate policy and its binding, by name.
        (
            "get",
            adm,
            "validatingadmissionpolicies",
            "",
            "tbk-holdfast-readmission-gate",
        ),
        (
            "get",
            adm,
            "validatingadmissionpolicybindings",
            "",
            "tbk-holdfast-readmission-gate",
        ),
        // Arming its own two webhook configurations, in every certificate mode.
        (
            "get",
            adm,
            "validatingwebhookconfigurations",
            "",
            "tbk-holdfast",
        ),
        (
            "patch",
            adm,
            "validatingwebhookconfigurations",
            "",
            "tbk-holdfast",
        ),
        (
            "patch",
            adm,
            "mutatingwebhookconfigurations",
            "",
            "tbk-holdfast",
        ),
    ];
    let denied: Vec<Access> = vec![
        ("delete", kq, "workloads", "tenant", "w"),
        ("update", kq, "localqueues", "tenant", "q"),
        ("patch", kq, "workloads", "tenant", "w"),
        (
            "update",
            kq,
            "admissionchecks",
            "",
            "tbk-holdfast-readmission",
        ),
        ("create", kq, "admissionchecks", "", ""),
        ("update", kq, "clusterqueues", "", "q"),
        ("create", "", "secrets", "release", ""),
        ("get", "", "secrets", "release", "tbk-holdfast-ca"),
        (
            "get",
            adm,
            "validatingadmissionpolicies",
            "",
            "someone-elses",
        ),
        ("list", adm, "validatingadmissionpolicybindings", "", ""),
        (
            "get",
            adm,
            "validatingwebhookconfigurations",
            "",
            "someone-elses",
        ),
        (
            "patch",
            adm,
            "mutatingwebhookconfigurations",
            "",
            "someone-elses",
        ),
    ];
    check_table(&admin, &release_ns, &tenant, ctl, &allowed, &denied).await;
    let hook = "tbk-holdfast-webhook";
    let allowed: Vec<Access> = vec![
        ("list", kq, "localqueues", "", ""),
        ("watch", kq, "clusterqueues", "", ""),
        ("watch", kq, "admissionchecks", "", ""),
    ];
    let denied: Vec<Access> = vec![
        ("get", kq, "workloads", "tenant", "w"),
        ("update", kq, "clusterqueues", "", "q"),
    ];
    check_table(&admin, &release_ns, &tenant, hook, &allowed, &denied).await;
}

fn status_code(e: &kube::Error) -> Option<u16> {
    match e {
        kube::Error::Api(s) => Some(s.code),
        _ => None,
    }
}

fn configmap(name: &str, labels: &[(&str, &str)]) -> ConfigMap {
    ConfigMap {
        metadata: ObjectMeta {
            name: Some(name.into()),
            labels: Some(
                labels
                    .iter()
                    .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
                    .collect(),
            ),
            ..Default::default()
        },
        data: Some(BTreeMap::from([("k".to_string(), "v".to_string())])),
        ..Default::default()
    }
}

/// Remove `verb` from every rule of the rendered object `kind/name` that grants `resource`.
fn without_verb(docs: &[Value], kind: &str, name: &str, resource: &str, verb: &str) -> Value {
    let mut doc = docs
        .iter()
        .find(|d| d["kind"] == kind && d["metadata"]["name"] == name)
        .cloned()
        .unwrap_or_else(|| panic!("no {kind}/{name}"));
    if let Some(rules) = doc["rules"].as_array_mut() {
        for r in rules {
            if strs(&r["resources"]).contains(&resource)
                && let Some(verbs) = r["verbs"].as_array_mut()
            {
                verbs.retain(|v| v != verb);
            }
        }
    }
    doc
}

#[tokio::test]
async fn the_controller_service_account_token_can_snapshot_and_loses_exactly_a_removed_verb() {
    let cp = ControlPlane::shared();
    let helm = helm();
    let admin = cp.client(Identity::Admin).await.expect("admin");
    let release_ns = cp.namespace("hf-token").await.expect("namespace");
    let tenant = cp.namespace("tenant").await.expect("namespace");
    let docs = helm
        .render(&Install::new("tok", &release_ns))
        .expect("render");
    rbac::apply_kinds(&admin, &docs, &rbac::RBAC_KINDS, &release_ns)
        .await
        .expect("apply RBAC");
    // A real token for the chart's ServiceAccount, minted by the TokenRequest API.
    let sa = "tok-holdfast-controller";
    let ctl = cp
        .service_account_client(&release_ns, sa)
        .await
        .expect("token");

    // What snapshots need: create and read a ConfigMap in a tenant namespace.
    let cms: Api<ConfigMap> = Api::namespaced(ctl.clone(), &tenant);
    cms.create(&PostParams::default(), &configmap("probe-1", &[]))
        .await
        .expect("the controller may create a ConfigMap in any namespace");
    cms.get("probe-1").await.expect("and read it");
    // What it must not do: rewrite a ConfigMap (it deletes orphaned snapshots only, and
    // creates, never updates).
    let mut edited = cms.get("probe-1").await.expect("read");
    edited.data = Some(BTreeMap::from([("k".to_string(), "changed".to_string())]));
    let err = cms
        .replace("probe-1", &PostParams::default(), &edited)
        .await
        .expect_err("the controller never updates ConfigMaps");
    assert_eq!(status_code(&err), Some(403), "{err}");
    cms.create(&PostParams::default(), &configmap("probe-2", &[]))
        .await
        .expect("create a second");
    cms.delete("probe-2", &DeleteParams::default())
        .await
        .expect("it may delete one (an orphaned snapshot)");
    let err = Api::<Secret>::namespaced(ctl.clone(), &tenant)
        .list(&Default::default())
        .await
        .expect_err("no secrets outside its namespace");
    assert_eq!(status_code(&err), Some(403), "{err}");
    let err = Api::<Secret>::namespaced(ctl.clone(), &release_ns)
        .get("someone-elses")
        .await
        .expect_err("only its own secrets by name");
    assert_eq!(status_code(&err), Some(403), "{err}");

    // Remove `create` on configmaps from the chart's ClusterRole: snapshots break, with an
    // error that says what is missing.
    let cut = without_verb(&docs, "ClusterRole", sa, "configmaps", "create");
    rbac::apply(&admin, &cut, &release_ns, false)
        .await
        .expect("apply the cut role");
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    let mut n = 0;
    let err = loop {
        n += 1;
        match cms
            .create(
                &PostParams::default(),
                &configmap(&format!("probe-{}", n + 1), &[]),
            )
            .await
        {
            Err(e) => break e,
            Ok(_) => {
                assert!(
                    tokio::time::Instant::now() < deadline,
                    "removing create from the ClusterRole did not take effect"
                );
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
        }
    };
    assert_eq!(status_code(&err), Some(403), "{err}");
    let msg = err.to_string();
    assert!(
        msg.contains(&format!("system:serviceaccount:{release_ns}:{sa}"))
            && msg.contains("cannot create resource \"configmaps\""),
        "{msg}"
    );
    // Reading still works: only the removed verb is gone.
    cms.get("probe-1").await.expect("get is still granted");
}

/// The controller binary, run with a token of the chart's ServiceAccount whose ClusterRole
/// lacks `create` on ConfigMaps: the TrainJob gets no snapshot, the log says exactly which
/// permission is missing, and putting the verb back is all it takes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn controller_missing_one_verb_takes_no_snapshot_and_its_log_names_the_permission() {
    let cp = ControlPlane::shared();
    let helm = helm();
    let admin = cp.client(Identity::Admin).await.expect("admin");
    let release_ns = cp.namespace("hf-cut").await.expect("namespace");
    let tenant = cp.namespace("cut-tenant").await.expect("namespace");
    let docs = helm
        .render(&Install::new("cut", &release_ns))
        .expect("render");
    let sa = "cut-holdfast-controller";
    let cut = without_verb(&docs, "ClusterRole", sa, "configmaps", "create");
    let mut kept: Vec<Value> = docs
        .iter()
        .filter(|d| !(d["kind"] == "ClusterRole" && d["metadata"]["name"] == sa))
        .cloned()
        .collect();
    kept.push(cut);
    rbac::apply_kinds(&admin, &kept, &rbac::RBAC_KINDS, &release_ns)
        .await
        .expect("apply RBAC without the verb");

    // The real binary, as the chart runs it: its ServiceAccount's token, its Lease.
    let token = rbac::mint_token(&admin, &release_ns, sa, 3600)
        .await
        .expect("token");
    let kubeconfig = cp.dir().join(format!("kubeconfig-{release_ns}.yaml"));
    std::fs::write(&kubeconfig, cp.kubeconfig_yaml("u", &token, "default")).expect("kubeconfig");
    let free = || holdfast_tests::control_plane::free_port().expect("port");
    let mut ctl = Supervised::start(
        &format!("holdfast-controller-{release_ns}"),
        &holdfast_tests::holdfast::binary("holdfast-controller"),
        vec![
            "--mode=plain".into(),
            format!("--kubeconfig={}", kubeconfig.display()),
            format!("--api-addr=127.0.0.1:{}", free()),
            format!("--admin-addr=127.0.0.1:{}", free()),
            format!("--lease-namespace={release_ns}"),
            "--lease-name=cut-holdfast-controller".into(),
            format!("--watch-namespace={tenant}"),
        ],
        cp.dir(),
        cp.process_group(),
    )
    .expect("start holdfast-controller");

    let runtime = format!("torch-{tenant}");
    let (ctr, tjs) = (
        holdfast_cluster::resources::cluster_training_runtime(),
        holdfast_cluster::resources::trainjob(),
    );
    create_dynamic(
        &admin,
        &ctr,
        None,
        cluster_training_runtime(&runtime, "pytorch/pytorch:2.10.0"),
    )
    .await;
    create_dynamic(&admin, &tjs, Some(&tenant), trainjob("mnist", &runtime)).await;

    let needle = format!(
        "User \\\"system:serviceaccount:{release_ns}:{sa}\\\" cannot create resource \\\"configmaps\\\""
    );
    let plain_needle = format!(
        "User \"system:serviceaccount:{release_ns}:{sa}\" cannot create resource \"configmaps\""
    );
    let log = wait_for(
        "the controller to log the missing permission",
        Duration::from_secs(60),
        || {
            let log = ctl.log_tail(400);
            let found = log.contains(&needle) || log.contains(&plain_needle);
            async move { found.then_some(log) }
        },
    )
    .await;
    let line = log
        .lines()
        .find(|l| l.contains(&needle) || l.contains(&plain_needle))
        .unwrap_or_default();
    eprintln!("the controller logged: {line}");
    assert!(
        line.contains("\"level\":\"ERROR\"") && line.contains("\"trainjob\":\"mnist\""),
        "an error naming the TrainJob: {line}"
    );
    assert!(ctl.running(), "a missing permission is not a crash:\n{log}");
    let cms: Api<ConfigMap> = Api::namespaced(admin.clone(), &tenant);
    assert!(
        cms.get_opt("mnist-runtime-snapshot")
            .await
            .expect("get")
            .is_none(),
        "no snapshot without create"
    );

    // Exactly that verb was missing: restore the chart's role and the snapshot is taken.
    let full = docs
        .iter()
        .find(|d| d["kind"] == "ClusterRole" && d["metadata"]["name"] == sa)
        .expect("the controller's ClusterRole");
    rbac::apply(&admin, full, &release_ns, false)
        .await
        .expect("restore the role");
    wait_for(
        "the snapshot once create is granted",
        Duration::from_secs(90),
        || {
            let cms = cms.clone();
            async move { cms.get_opt("mnist-runtime-snapshot").await.ok().flatten() }
        },
    )
    .await;
    ctl.kill();
}

/// A rendered Deployment's environment as its binary's command line: each variable the
/// chart sets becomes the flag that reads it (a variable no flag reads fails the test).
/// `RUST_LOG` is the log filter, and an empty value comes from a `fieldRef`.
fn argv_from_env(command: &clap::Command, deployment: &Value) -> Vec<String> {
    let name = command.get_name().to_owned();
    let mut argv = vec![name.clone()];
    for (var, value) in env_of(deployment) {
        if var == "RUST_LOG" || value.is_empty() {
            continue;
        }
        let flag = command
            .get_arguments()
            .find(|a| a.get_env() == Some(std::ffi::OsStr::new(&var)))
            .and_then(|a| a.get_long())
            .unwrap_or_else(|| panic!("the chart sets {var}, which no flag of {name} reads"));
        argv.push(format!("--{flag}={value}"));
    }
    argv
}

/// The controller's flags, exactly as the rendered Deployment passes them.
fn controller_args_from_rendered(docs: &[Value]) -> holdfast_controller::Args {
    use clap::{CommandFactory, Parser};
    let argv = argv_from_env(
        &holdfast_controller::Args::command(),
        find(docs, "Deployment", "-controller"),
    );
    holdfast_controller::Args::try_parse_from(&argv)
        .unwrap_or_else(|e| panic!("the chart's controller variables do not parse: {e}"))
}

/// The webhook's flags, exactly as the rendered Deployment passes them.
fn webhook_args_from_rendered(docs: &[Value]) -> holdfast_webhook::Args {
    use clap::{CommandFactory, Parser};
    let argv = argv_from_env(
        &holdfast_webhook::Args::command(),
        find(docs, "Deployment", "-webhook"),
    );
    holdfast_webhook::Args::try_parse_from(&argv)
        .unwrap_or_else(|e| panic!("the chart's webhook variables do not parse: {e}"))
}

/// The controller's certificate configuration, as the rendered Deployment asks for it.
fn cert_config_from_rendered(docs: &[Value]) -> CertConfig {
    controller_args_from_rendered(docs)
        .certs
        .config()
        .expect("config")
        .expect("self-managed")
}

async fn ca_bundles(admin: &kube::Client, name: &str) -> Vec<Option<Vec<u8>>> {
    let mut out = Vec::new();
    if let Some(v) = Api::<ValidatingWebhookConfiguration>::all(admin.clone())
        .get_opt(name)
        .await
        .expect("get vwc")
    {
        for w in v.webhooks.unwrap_or_default() {
            out.push(w.client_config.ca_bundle.map(|b| b.0));
        }
    }
    if let Some(m) = Api::<MutatingWebhookConfiguration>::all(admin.clone())
        .get_opt(name)
        .await
        .expect("get mwc")
    {
        for w in m.webhooks.unwrap_or_default() {
            out.push(w.client_config.ca_bundle.map(|b| b.0));
        }
    }
    out
}

async fn secret_versions(admin: &kube::Client, ns: &str, names: &[&str]) -> Vec<String> {
    let api: Api<Secret> = Api::namespaced(admin.clone(), ns);
    let mut out = Vec::new();
    for n in names {
        let s = api.get(n).await.expect("secret");
        out.push(s.metadata.resource_version.unwrap_or_default());
    }
    out
}

/// `helm VERB RELEASE [CHART] --namespace NS --kubeconfig KUBECONFIG EXTRA…` against the
/// control plane: the install, upgrades and rollbacks of the tests that run real helm.
fn helm_on_release(
    helm: &Helm,
    verb: &str,
    release: &str,
    chart: Option<&str>,
    ns: &str,
    kubeconfig: &str,
    extra: &[&str],
) -> anyhow::Result<String> {
    let args: Vec<String> = [verb, release]
        .into_iter()
        .chain(chart)
        .chain(["--namespace", ns, "--kubeconfig", kubeconfig])
        .chain(extra.iter().copied())
        .map(str::to_owned)
        .collect();
    helm.run(&args)
}

#[tokio::test]
async fn self_managed_certificates_work_with_the_charts_rbac_and_survive_helm_upgrade_without_rotating()
 {
    let _live = LIVE_WEBHOOKS.lock().await;
    let cp = ControlPlane::shared();
    let helm = helm();
    let admin = cp.client(Identity::Admin).await.expect("admin");
    let ns = cp.namespace("hf-certs").await.expect("namespace");
    let kubeconfig = cp.kubeconfig(Identity::Admin).display().to_string();
    let chart = helm::chart_dir().display().to_string();
    let release = "crt";
    let helm_cmd = |verb: &str, extra: &[&str]| {
        helm_on_release(&helm, verb, release, Some(&chart), &ns, &kubeconfig, extra)
    };
    // A real `helm install` into the control plane (no kubelet: the pods never run, which
    // does not matter to what is checked here).
    helm_cmd("install", &[]).expect("helm install");
    let docs = helm.render(&Install::new(release, &ns)).expect("render");
    let config = cert_config_from_rendered(&docs);
    let name = "crt-holdfast";
    assert!(
        ca_bundles(&admin, name).await.iter().all(Option::is_none),
        "a fresh install has no caBundle until the controller injects it"
    );

    // The certificate reconcile, authenticated as the chart's controller ServiceAccount.
    let ctl = cp
        .service_account_client(&ns, "crt-holdfast-controller")
        .await
        .expect("token");
    let first = certs::reconcile(&ctl, &config)
        .await
        .expect("reconcile with exactly the chart's RBAC");
    assert!(first.changed());
    assert!(
        first
            .injections
            .iter()
            .all(|(_, i)| *i == Injection::Injected),
        "{:?}",
        first.injections
    );
    let bundle = first.bundle_pem.clone().into_bytes();
    let injected = ca_bundles(&admin, name).await;
    assert_eq!(
        injected.len(),
        6,
        "three validating (the probe's among them) and three mutating entries (plain mode)"
    );
    assert!(
        injected
            .iter()
            .all(|b| b.as_deref() == Some(bundle.as_slice()))
    );
    let secrets = [
        "crt-holdfast-ca",
        "crt-holdfast-webhook-tls",
        "crt-holdfast-controller-tls",
    ];
    let tls = Api::<Secret>::namespaced(admin.clone(), &ns)
        .get("crt-holdfast-webhook-tls")
        .await
        .expect("webhook secret");
    assert_eq!(tls.type_.as_deref(), Some("kubernetes.io/tls"));
    let cert = tls
        .data
        .as_ref()
        .and_then(|d| d.get("tls.crt"))
        .map(|b| String::from_utf8_lossy(&b.0).into_owned())
        .expect("tls.crt");
    let info = CertificateInfo::parse_pem(&cert).expect("parse");
    assert!(
        info.names
            .contains(&format!("crt-holdfast-webhook.{ns}.svc")),
        "{:?}",
        info.names
    );
    let versions = secret_versions(&admin, &ns, &secrets).await;

    // A second pass changes nothing.
    let again = certs::reconcile(&ctl, &config).await.expect("reconcile");
    assert!(!again.changed(), "{again:?}");

    // `helm upgrade` with a changed value, then `helm upgrade --force` (which replaces every
    // object): the caBundle stays (merge keeps the injected field; --force re-renders it from
    // the CA Secret by lookup), and the certificates are not rotated.
    helm_cmd("upgrade", &["--set", "logLevel=debug"]).expect("helm upgrade");
    assert_eq!(
        ca_bundles(&admin, name).await,
        injected,
        "after helm upgrade"
    );
    // Helm 4 applies server-side, where replacing is refused: its replace is client-side.
    let force: &[&str] = if helm.major >= 4 {
        &["--force-replace", "--server-side=false"]
    } else {
        &["--force"]
    };
    helm_cmd("upgrade", &[force, &["--set", "logLevel=info"]].concat())
        .expect("helm upgrade --force");
    assert_eq!(
        ca_bundles(&admin, name).await,
        injected,
        "after helm upgrade --force"
    );
    let after = certs::reconcile(&ctl, &config).await.expect("reconcile");
    assert!(
        !after.changed(),
        "an upgrade must not rotate anything: {after:?}"
    );
    assert_eq!(secret_versions(&admin, &ns, &secrets).await, versions);

    // Remove `patch` on webhook configurations from the chart's ClusterRole: injection fails,
    // naming the missing permission.
    let mut vwc = Api::<ValidatingWebhookConfiguration>::all(admin.clone())
        .get(name)
        .await
        .expect("vwc");
    for w in vwc.webhooks.iter_mut().flatten() {
        w.client_config.ca_bundle = Some(k8s_openapi::ByteString(b"stale".to_vec()));
    }
    // (An invalid PEM is refused by nobody: the apiserver only stores the bytes.)
    Api::<ValidatingWebhookConfiguration>::all(admin.clone())
        .replace(name, &PostParams::default(), &vwc)
        .await
        .expect("make the caBundle stale");
    let cut = without_verb(
        &docs,
        "ClusterRole",
        "crt-holdfast-controller",
        "validatingwebhookconfigurations",
        "patch",
    );
    rbac::apply(&admin, &cut, &ns, false)
        .await
        .expect("apply cut role");
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    let err = loop {
        match certs::reconcile(&ctl, &config).await {
            Err(e) => break e,
            Ok(_) => {
                assert!(
                    tokio::time::Instant::now() < deadline,
                    "the cut role never took effect"
                );
                // It may have re-injected before the cut took effect: make it stale again.
                let mut vwc = Api::<ValidatingWebhookConfiguration>::all(admin.clone())
                    .get(name)
                    .await
                    .expect("vwc");
                for w in vwc.webhooks.iter_mut().flatten() {
                    w.client_config.ca_bundle = Some(k8s_openapi::ByteString(b"stale".to_vec()));
                }
                let _ = Api::<ValidatingWebhookConfiguration>::all(admin.clone())
                    .replace(name, &PostParams::default(), &vwc)
                    .await;
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
        }
    };
    let msg = err.to_string();
    assert!(
        msg.contains("cannot patch resource \"validatingwebhookconfigurations\""),
        "{msg}"
    );

    // `helm uninstall` leaves the self-managed Secrets (helm never owned them) and removes
    // the webhook configurations.
    helm.run(&[
        "uninstall".into(),
        release.into(),
        "--namespace".into(),
        ns.clone(),
        "--kubeconfig".into(),
        kubeconfig.clone(),
    ])
    .expect("helm uninstall");
    assert!(ca_bundles(&admin, name).await.is_empty());
    assert_eq!(secret_versions(&admin, &ns, &secrets).await.len(), 3);
}

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
    let cp = ControlPlane::shared();
    let helm = helm();
    let admin = cp.client(Identity::Admin).await.expect("admin");
    let ns = cp.namespace("hf-arm").await.expect("namespace");
    let kubeconfig = cp.kubeconfig(Identity::Admin).display().to_string();
    let chart = helm::chart_dir().display().to_string();
    let release = "arm";
    let name = "arm-holdfast";
    let helm_cmd = |verb: &str, extra: &[&str]| {
        helm_on_release(&helm, verb, release, Some(&chart), &ns, &kubeconfig, extra)
    };
    helm_cmd("install", &[]).expect("helm install");
    for c in live_configurations(&admin, name).await {
        assert_disarmed(&c);
    }
    let docs = helm.render(&Install::new(release, &ns)).expect("render");
    let config = controller_args_from_rendered(&docs)
        .configs()
        .expect("configs")
        .arming
        .expect("the chart arms its configurations");
    assert_eq!(config.configuration, name);
    let ctl = cp
        .service_account_client(&ns, "arm-holdfast-controller")
        .await
        .expect("token");

    // No webhook answers (no pod runs here): nothing is armed.
    match arming::pass(&ctl, &config).await {
        State::Waiting(why) => assert!(why.contains("did not answer the probe"), "{why}"),
        State::Armed => panic!("armed without an answer"),
    }
    for c in live_configurations(&admin, name).await {
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
    expect_armed(&live_configurations(&admin, name).await, "armed");

    helm_cmd("upgrade", &["--set", "logFormat=plain"]).expect("helm upgrade");
    expect_armed(
        &live_configurations(&admin, name).await,
        "after helm upgrade",
    );

    // A rollback to the first revision, rendered before arming, sets its entries back to
    // Ignore but cannot take the mark (the controller's alone, never rendered by the chart):
    // the controller re-arms from the mark, with no probe answered (no pod runs here).
    // Helm 4 applies server-side: the first revision's Ignore conflicts with the controller's
    // Fail, and the rollback stops naming the controller and the fields, until it is told to
    // take them back (`--force-conflicts`, as the upgrade page says).
    let rollback_args: &[&str] = if helm.major >= 4 {
        let refused = helm_on_release(&helm, "rollback", release, None, &ns, &kubeconfig, &["1"])
            .expect_err("Helm 4's rollback conflicts with the controller's arming");
        let refused = format!("{refused:#}");
        assert!(
            refused.contains("conflict")
                && refused.contains("holdfast-controller")
                && refused.contains("failurePolicy"),
            "{refused}"
        );
        &["1", "--force-conflicts"]
    } else {
        &["1"]
    };
    helm_on_release(
        &helm,
        "rollback",
        release,
        None,
        &ns,
        &kubeconfig,
        rollback_args,
    )
    .expect("helm rollback");
    for c in live_configurations(&admin, name).await {
        assert!(
            holdfast_core::arming::is_marked(&c),
            "a rollback keeps the controller's mark: {c}"
        );
    }
    assert_eq!(arming::pass(&ctl, &config).await, State::Armed);
    expect_armed(
        &live_configurations(&admin, name).await,
        "after helm rollback",
    );

    helm.run(&[
        "uninstall".into(),
        release.into(),
        "--namespace".into(),
        ns.clone(),
        "--kubeconfig".into(),
        kubeconfig.clone(),
    ])
    .expect("helm uninstall");
}

/// The hold API's CA is published in the ConfigMap `<fullname>-hold-api-ca`: written by the
/// certificate reconcile with exactly the chart's RBAC, readable by name (and by name only)
/// by a ServiceAccount of another namespace, and its `ca.crt` verifies the hold API's serving
/// certificate (and a client trusting another CA does not).
#[tokio::test]
async fn the_hold_api_ca_is_published_where_any_namespace_can_read_it() {
    let _live = LIVE_WEBHOOKS.lock().await;
    let cp = ControlPlane::shared();
    let helm = helm();
    let admin = cp.client(Identity::Admin).await.expect("admin");
    let ns = cp.namespace("hf-ca").await.expect("namespace");
    let kubeconfig = cp.kubeconfig(Identity::Admin).display().to_string();
    let install = Install::new("pub", &ns);
    helm.install(&install, &kubeconfig).expect("helm install");
    let docs = helm.render(&install).expect("render");
    let config = cert_config_from_rendered(&docs);
    let ctl = cp
        .service_account_client(&ns, "pub-holdfast-controller")
        .await
        .expect("token");
    let outcome = certs::reconcile(&ctl, &config)
        .await
        .expect("reconcile with exactly the chart's RBAC");
    assert!(outcome.ca_published, "{outcome:?}");

    // dispatch, a ServiceAccount of another namespace, granted nothing but what every
    // authenticated user has.
    let tenant = cp.namespace("hf-ca-tenant").await.expect("namespace");
    let account = k8s_openapi::api::core::v1::ServiceAccount {
        metadata: ObjectMeta {
            name: Some("dispatch".into()),
            ..Default::default()
        },
        ..Default::default()
    };
    Api::namespaced(admin.clone(), &tenant)
        .create(&PostParams::default(), &account)
        .await
        .expect("ServiceAccount");
    let dispatch = cp
        .service_account_client(&tenant, "dispatch")
        .await
        .expect("token");
    let configmaps: Api<ConfigMap> = Api::namespaced(dispatch, &ns);
    let published = wait_for("the reader grant", Duration::from_secs(30), || async {
        configmaps.get("pub-holdfast-hold-api-ca").await.ok()
    })
    .await;
    let ca = published
        .data
        .as_ref()
        .and_then(|d| d.get(holdfast_controller::hold_api_ca::KEY))
        .cloned()
        .expect("ca.crt");
    assert_eq!(ca, outcome.bundle_pem);
    let listed = configmaps.list(&Default::default()).await;
    assert!(
        matches!(&listed, Err(kube::Error::Api(e)) if e.code == 403),
        "only the one ConfigMap, by name: {listed:?}"
    );

    // The hold API's serving certificate, served: verified by the published CA only.
    let tls = Api::<Secret>::namespaced(admin.clone(), &ns)
        .get("pub-holdfast-controller-tls")
        .await
        .expect("the hold API's Secret");
    let dir = tempfile::tempdir().expect("tempdir");
    let files = holdfast_serve::CertFiles {
        cert: dir.path().join("tls.crt"),
        key: dir.path().join("tls.key"),
    };
    for (key, path) in [("tls.crt", &files.cert), ("tls.key", &files.key)] {
        let bytes = tls
            .data
            .as_ref()
            .and_then(|d| d.get(key))
            .map(|b| b.0.clone())
            .expect(key);
        std::fs::write(path, bytes).expect("write");
    }
    holdfast_serve::install_crypto_provider();
    let server = holdfast_serve::TlsServer::bind("127.0.0.1:0".parse().expect("addr"), files)
        .await
        .expect("bind");
    let addr = server.local_addr().expect("addr");
    let stop = tokio_util::sync::CancellationToken::new();
    tokio::spawn(server.serve(axum::Router::new(), stop.clone()));
    let host = format!("pub-holdfast-controller.{ns}.svc");
    let trusting = |pem: &str| {
        reqwest::Client::builder()
            .add_root_certificate(reqwest::Certificate::from_pem(pem.as_bytes()).expect("PEM"))
            .resolve(&host, addr)
            .build()
            .expect("client")
    };
    let url = format!("https://{host}:{}/v1/openapi.json", addr.port());
    let answer = trusting(&ca).get(&url).send().await;
    assert!(answer.is_ok(), "the published CA verifies it: {answer:?}");
    let other = trusting(cp.ca_pem()).get(&url).send().await;
    assert!(other.is_err(), "another CA does not: {other:?}");
    stop.cancel();
    helm.uninstall(&install, &kubeconfig)
        .expect("helm uninstall");
}

/// With certificates of your own (`certs.mode: secret`, and so with cert-manager), the
/// controller copies the caBundle the apiserver was given into the same ConfigMap, with
/// exactly the chart's RBAC and the flags its Deployment passes.
#[tokio::test]
async fn with_external_certificates_the_hold_api_ca_is_copied_from_the_webhook_configuration() {
    let _live = LIVE_WEBHOOKS.lock().await;
    let cp = ControlPlane::shared();
    let helm = helm();
    let admin = cp.client(Identity::Admin).await.expect("admin");
    let ns = cp.namespace("hf-ca-ext").await.expect("namespace");
    let kubeconfig = cp.kubeconfig(Identity::Admin).display().to_string();
    let (_dir, ca_path, ca_pem) = ca_file();
    let release = "ext";
    let install = Install::new(release, &ns)
        .set("certs.mode=secret")
        .set(format!("certs.secret.webhookSecretName={release}-tls"))
        .set_file(format!("certs.secret.caBundle={}", ca_path.display()));
    helm.install(&install, &kubeconfig).expect("helm install");
    let docs = helm.render(&install).expect("render");
    let args = controller_args_from_rendered(&docs);
    assert!(args.certs.config().expect("config").is_none(), "external");
    let to = args.certs.hold_api_ca().expect("published");
    assert_eq!(
        (to.namespace.as_str(), to.name.as_str()),
        (ns.as_str(), "ext-holdfast-hold-api-ca")
    );
    let ctl = cp
        .service_account_client(&ns, "ext-holdfast-controller")
        .await
        .expect("token");
    let source = args.certs.hold_api_ca_source.clone();
    let written = wait_for(
        "the controller's grants",
        Duration::from_secs(30),
        || async {
            holdfast_controller::hold_api_ca::copy_once(&ctl, &source, &to)
                .await
                .ok()
        },
    )
    .await;
    assert!(written, "the first copy writes the ConfigMap");
    let published = Api::<ConfigMap>::namespaced(admin, &ns)
        .get("ext-holdfast-hold-api-ca")
        .await
        .expect("the ConfigMap");
    assert_eq!(
        published
            .data
            .as_ref()
            .and_then(|d| d.get(holdfast_controller::hold_api_ca::KEY)),
        Some(&ca_pem)
    );
    assert!(
        !holdfast_controller::hold_api_ca::copy_once(&ctl, &source, &to)
            .await
            .expect("copy"),
        "an unchanged bundle is not written again"
    );
    helm.uninstall(&install, &kubeconfig)
        .expect("helm uninstall");
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

/// The values table of the book's reference page (`docs/src/reference/values.md`) is what
/// `values.yaml` says, so the two cannot drift. `HOLDFAST_BLESS=1` rewrites the table instead
/// of comparing.
#[test]
fn the_chart_readme_values_table_is_generated_from_values_yaml() {
    use holdfast_tests::values_table;
    let dir = holdfast_tests::helm::chart_dir();
    let values = std::fs::read_to_string(dir.join("values.yaml")).expect("values.yaml");
    let rows = values_table::rows(&values).expect("values.yaml reads");
    // Every top-level value is in the table.
    let top: serde_json::Map<String, Value> =
        serde_saphyr::from_str(&values).expect("values.yaml parses");
    for key in top.keys() {
        assert!(
            rows.iter()
                .any(|r| r.key == *key || r.key.starts_with(&format!("{key}."))),
            "{key} has no row"
        );
    }
    let readme_path = dir.join("../../docs/src/reference/values.md");
    let readme = std::fs::read_to_string(&readme_path).expect("the book's values page");
    let want = values_table::replace(&readme, &values_table::markdown(&rows)).expect("markers");
    if std::env::var_os("HOLDFAST_BLESS").is_some() {
        std::fs::write(&readme_path, &want).expect("rewrite the values page");
        return;
    }
    assert!(
        want == readme,
        "the values table of docs/src/reference/values.md differs from values.yaml; run\n  HOLDFAST_BLESS=1 cargo test -p holdfast-tests --test it -- chart::the_chart_readme_values_table\n"
    );
}

/// The conventions the Kueue and Trainer charts' users rely on (issue #18 item 4), rendered:
/// `image.registry`, `commonLabels` on every object, service accounts supplied by the user
/// (and their user name the controller identity everywhere), probes and the controller's
/// startup probe, `hostNetwork`, extra volumes and `envFrom`, the rollout strategy and grace
/// period, and per-namespace hold-caller RoleBindings.
#[test]
fn chart_conventions_render_as_documented() {
    let helm = helm();
    let install = helm::Install::new("hf", "holdfast-system")
        .set("mode=kueue")
        .set("image.registry=registry.example/mirror/")
        .set("image.repository=holdfast/holdfast")
        .set("image.tag=1.2.3")
        .set("commonLabels.team=ml-platform")
        .set("controller.serviceAccount.create=false")
        .set("controller.serviceAccount.name=ctl-sa")
        .set("webhook.hostNetwork=true")
        .set("webhook.terminationGracePeriodSeconds=45")
        .set("controller.strategy.type=Recreate")
        .set("controller.startupProbe.failureThreshold=90")
        .set("webhook.envFrom[0].configMapRef.name=proxy-env")
        .set("controller.extraVolumes[0].name=extra")
        .set("controller.extraVolumes[0].emptyDir.medium=Memory")
        .set("controller.extraVolumeMounts[0].name=extra")
        .set("controller.extraVolumeMounts[0].mountPath=/extra")
        .set("rbac.holdCallerBindings[0].namespace=team-a")
        .set("rbac.holdCallerBindings[0].subjects[0].kind=ServiceAccount")
        .set("rbac.holdCallerBindings[0].subjects[0].name=dispatch")
        .set("rbac.holdCallerBindings[0].subjects[0].namespace=team-a");
    let docs = helm.render(&install).expect("render");
    for d in &docs {
        assert_eq!(
            d["metadata"]["labels"]["team"],
            "ml-platform",
            "{} lacks commonLabels",
            helm::id(d)
        );
    }
    let controller = find(&docs, "Deployment", "-controller");
    let webhook = find(&docs, "Deployment", "-webhook");
    for d in [controller, webhook] {
        check_deployment(d);
        assert_eq!(
            d["spec"]["template"]["spec"]["containers"][0]["image"],
            "registry.example/mirror/holdfast/holdfast:1.2.3"
        );
        // Selectors stay as they were: commonLabels would make a Deployment's selector
        // immutable-changing on upgrade.
        assert!(d["spec"]["selector"]["matchLabels"]["team"].is_null());
    }
    // The controller's service account is the user's: not rendered, used by the pod and the
    // bindings, and its user name is the controller identity of the webhook and policies.
    let accounts: Vec<&str> = helm::of_kind(&docs, "ServiceAccount")
        .iter()
        .filter_map(|a| a["metadata"]["name"].as_str())
        .collect();
    assert_eq!(accounts, ["hf-holdfast-webhook"]);
    let cpod = &controller["spec"]["template"]["spec"];
    assert_eq!(cpod["serviceAccountName"], "ctl-sa");
    let user = "system:serviceaccount:holdfast-system:ctl-sa";
    assert_eq!(env_of(webhook)["HOLDFAST_CONTROLLER_USERS"], user);
    let bound: Vec<&Value> = ["ClusterRoleBinding", "RoleBinding"]
        .iter()
        .flat_map(|k| helm::of_kind(&docs, k))
        .filter(|b| {
            b["roleRef"]["name"]
                .as_str()
                .is_some_and(|n| n.ends_with("-controller"))
        })
        .collect();
    assert!(!bound.is_empty());
    for b in bound {
        assert_eq!(b["subjects"][0]["name"], "ctl-sa", "{}", helm::id(b));
    }
    let vwc = find(&docs, "ValidatingWebhookConfiguration", "hf-holdfast");
    assert!(
        serde_json::to_string(vwc).expect("json").contains(user),
        "the match conditions name the controller by its service account"
    );
    assert!(
        !serde_json::to_string(vwc)
            .expect("json")
            .contains("serviceaccount:holdfast-system:hf-holdfast-controller")
    );
    // Probes, strategy, grace, volumes.
    let cc = &cpod["containers"][0];
    assert_eq!(cc["startupProbe"]["failureThreshold"], 90);
    assert_eq!(cc["startupProbe"]["httpGet"]["path"], "/livez");
    assert_eq!(controller["spec"]["strategy"]["type"], "Recreate");
    assert!(cpod["volumes"].as_array().is_some_and(|v| {
        v.iter()
            .any(|v| v["name"] == "extra" && v["emptyDir"]["medium"] == "Memory")
    }));
    assert!(cc["volumeMounts"].as_array().is_some_and(|v| {
        v.iter()
            .any(|m| m["name"] == "extra" && m["mountPath"] == "/extra")
    }));
    let wpod = &webhook["spec"]["template"]["spec"];
    assert_eq!(wpod["hostNetwork"], true);
    assert_eq!(wpod["dnsPolicy"], "ClusterFirstWithHostNet");
    assert_eq!(wpod["terminationGracePeriodSeconds"], 45);
    assert_eq!(
        webhook["spec"]["strategy"]["rollingUpdate"]["maxUnavailable"],
        0
    );
    assert_eq!(
        wpod["containers"][0]["envFrom"][0]["configMapRef"]["name"],
        "proxy-env"
    );
    // Tenant delegation: the hold-caller ClusterRole bound in team-a only.
    let rb = helm::of_kind(&docs, "RoleBinding")
        .into_iter()
        .find(|b| b["roleRef"]["name"] == "hf-holdfast-hold-caller")
        .expect("the hold-caller RoleBinding");
    assert_eq!(rb["metadata"]["namespace"], "team-a");
    assert_eq!(rb["roleRef"]["kind"], "ClusterRole");
    assert_eq!(rb["subjects"][0]["name"], "dispatch");
    // Two bindings in one namespace are two objects.
    let twice = helm
        .render(
            &install
                .clone()
                .set("rbac.holdCallerBindings[1].namespace=team-a")
                .set("rbac.holdCallerBindings[1].subjects[0].kind=User")
                .set("rbac.holdCallerBindings[1].subjects[0].name=bob"),
        )
        .expect("two bindings");
    let names: Vec<&str> = helm::of_kind(&twice, "RoleBinding")
        .iter()
        .filter(|b| b["roleRef"]["name"] == "hf-holdfast-hold-caller")
        .filter_map(|b| b["metadata"]["name"].as_str())
        .collect();
    assert_eq!(
        names,
        ["hf-holdfast-hold-caller-0", "hf-holdfast-hold-caller-1"]
    );
    // The same subjects may find the hold API (`kubectl holdfast` without --server): the
    // finder Role in the release namespace (the Lease by name only) and the webhook
    // configuration's caBundle by name only, both bound to every holdCallerBindings subject.
    let finder = helm::of_kind(&twice, "Role")
        .into_iter()
        .find(|r| r["metadata"]["name"] == "hf-holdfast-hold-api-finder")
        .expect("the finder Role");
    let rules = finder["rules"].as_array().expect("rules");
    assert!(rules.iter().any(
        |r| r["resources"] == serde_json::json!(["pods/portforward"])
            && r["verbs"] == serde_json::json!(["get", "create"])
    ));
    assert!(
        rules
            .iter()
            .any(|r| r["resources"] == serde_json::json!(["leases"])
                && r["resourceNames"] == serde_json::json!(["hf-holdfast-controller"]))
    );
    let ca = helm::of_kind(&twice, "ClusterRole")
        .into_iter()
        .find(|r| r["metadata"]["name"] == "hf-holdfast-hold-api-ca")
        .expect("the CA ClusterRole");
    assert_eq!(
        ca["rules"][0]["resourceNames"],
        serde_json::json!(["hf-holdfast"])
    );
    assert_eq!(ca["rules"][0]["verbs"], serde_json::json!(["get"]));
    for (kind, name) in [
        ("RoleBinding", "hf-holdfast-hold-api-finder"),
        ("ClusterRoleBinding", "hf-holdfast-hold-api-ca"),
    ] {
        let binding = helm::of_kind(&twice, kind)
            .into_iter()
            .find(|b| b["metadata"]["name"] == name)
            .unwrap_or_else(|| panic!("{kind} {name}"));
        let subjects: Vec<&str> = binding["subjects"]
            .as_array()
            .expect("subjects")
            .iter()
            .filter_map(|s| s["name"].as_str())
            .collect();
        assert_eq!(subjects, ["dispatch", "bob"], "{kind} {name}");
    }
    let without = helm
        .render(&install.clone().set("rbac.holdApiFinder=false"))
        .expect("without the finder");
    assert!(
        helm::of_kind(&without, "Role")
            .iter()
            .all(|r| r["metadata"]["name"] != "hf-holdfast-hold-api-finder")
    );
    // Values that would hand the controller identity to others, or take the chart's own
    // labels, are refused with a message naming them.
    for (set, names) in [
        (
            "controller.serviceAccount.name=default",
            "controller.serviceAccount.name=default",
        ),
        (
            "webhook.serviceAccount.name=ctl-sa",
            "webhook.serviceAccount.name",
        ),
        (
            "commonLabels.app\\.kubernetes\\.io/instance=x",
            "commonLabels",
        ),
    ] {
        let err = helm.render(&install.clone().set(set)).expect_err(set);
        assert!(format!("{err:#}").contains(names), "{set}: {err:#}");
    }
    // Without the ClusterRole there is nothing to bind: a clear error.
    let err = helm
        .render(&install.clone().set("rbac.holdCallerRole=false"))
        .expect_err("bindings without the role");
    assert!(
        format!("{err:#}").contains("rbac.holdCallerRole=true"),
        "{err:#}"
    );
    // Defaults: the chart's own service accounts, no host network, no startup probe on the
    // webhook, the webhook's careful rollout.
    let defaults = helm
        .render(&helm::Install::new("hf", "holdfast-system"))
        .expect("render defaults");
    let accounts = helm::of_kind(&defaults, "ServiceAccount").len();
    assert_eq!(accounts, 2);
    let w = find(&defaults, "Deployment", "-webhook");
    assert!(w["spec"]["template"]["spec"]["hostNetwork"].is_null());
    assert_eq!(
        w["spec"]["template"]["spec"]["terminationGracePeriodSeconds"],
        30
    );
    assert_eq!(
        find(&defaults, "Deployment", "-controller")["spec"]["template"]["spec"]["containers"][0]["startupProbe"]
            ["httpGet"]["path"],
        "/livez"
    );
}

/// The controller's NetworkPolicy: by default nothing but the node and port-forwards reach the
/// controller pods (an empty `ingress`); `networkPolicy.holdApi.from` admits the supervisors to
/// the hold API port and `networkPolicy.metrics.from` the scraper to the admin port. The hold
/// API's bounds and token audiences reach the controller's flags; the chart's FlowSchemas put
/// the controller ServiceAccount's reviews and its other requests on two priority levels. The
/// real apiserver accepts all of them.
#[tokio::test]
async fn the_controller_network_policy_bounds_audiences_and_flow_control_render_as_documented() {
    let helm = helm();
    let defaults = helm
        .render(&Install::new("holdfast", "holdfast-system"))
        .expect("render");
    let np = find(&defaults, "NetworkPolicy", "-controller");
    assert_eq!(np["spec"]["policyTypes"], serde_json::json!(["Ingress"]));
    // No pod admitted by default but the release's own `helm test` pod, to the hold API.
    assert_eq!(
        np["spec"]["ingress"],
        serde_json::json!([{
            "ports": [{"port": 8443, "protocol": "TCP"}],
            "from": [{"podSelector": {"matchLabels": {
                "app.kubernetes.io/name": "holdfast",
                "app.kubernetes.io/instance": "holdfast",
                "app.kubernetes.io/component": "install-check",
            }}}],
        }]),
        "no pod admitted by default but the install check"
    );
    let args = controller_args_from_rendered(&defaults);
    let (connections, api) = args.hold_api.limits();
    assert_eq!(connections, holdfast_controller::args::HOLD_API_LIMITS);
    assert_eq!(api, holdfast_controller::api::ApiLimits::DEFAULT);
    assert!(args.hold_api.audiences().is_empty());

    let install = Install::new("holdfast", "holdfast-system")
        .set("networkPolicy.holdApi.from[0].namespaceSelector.matchLabels.kubernetes\\.io/metadata\\.name=dispatch")
        .set("networkPolicy.holdApi.from[1].ipBlock.cidr=192.0.2.0/24")
        .set("networkPolicy.metrics.from[0].namespaceSelector.matchLabels.kubernetes\\.io/metadata\\.name=monitoring")
        .set("controller.tokenAudiences={holdfast,https://kubernetes.default.svc}")
        .set("controller.apiLimits.maxProvisionalConnections=100")
        .set("controller.apiLimits.maxReviewsInFlight=4")
        .set("controller.apiLimits.bodyReadTimeout=2s");
    helm.lint(&install).expect("lint");
    let docs = helm.render(&install).expect("render");
    let np = find(&docs, "NetworkPolicy", "-controller");
    let rules = &np["spec"]["ingress"].as_array().expect("rules")[1..];
    assert_eq!(rules.len(), 2, "{rules:?}");
    assert_eq!(
        rules[0]["ports"],
        serde_json::json!([{"port": 8443, "protocol": "TCP"}])
    );
    assert_eq!(
        rules[0]["from"],
        serde_json::json!([
            {"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "dispatch"}}},
            {"ipBlock": {"cidr": "192.0.2.0/24"}}
        ])
    );
    assert_eq!(
        rules[1]["ports"],
        serde_json::json!([{"port": 9090, "protocol": "TCP"}])
    );
    let args = controller_args_from_rendered(&docs);
    let (connections, api) = args.hold_api.limits();
    assert_eq!(connections.admission.map(|a| a.max_provisional), Some(100));
    assert_eq!(api.max_reviews_in_flight, 4);
    assert_eq!(api.body_read_timeout, Duration::from_secs(2));
    assert_eq!(
        args.hold_api.audiences(),
        ["holdfast", "https://kubernetes.default.svc"]
    );

    // Flow control: the reviews first, everything else of the controller next, each on its
    // own level; both match the controller's ServiceAccount, before service-accounts (9000).
    let schemas = helm::of_kind(&docs, "FlowSchema");
    let levels = helm::of_kind(&docs, "PriorityLevelConfiguration");
    assert_eq!((schemas.len(), levels.len()), (2, 2));
    let reviews = find(&docs, "FlowSchema", "-controller-reviews");
    let rest = find(&docs, "FlowSchema", "holdfast-controller");
    assert_eq!(reviews["spec"]["matchingPrecedence"], 1000);
    assert_eq!(rest["spec"]["matchingPrecedence"], 1001);
    for fs in [reviews, rest] {
        assert_eq!(
            fs["spec"]["rules"][0]["subjects"],
            serde_json::json!([{"kind": "ServiceAccount", "serviceAccount": {"namespace": "holdfast-system", "name": "holdfast-controller"}}])
        );
    }
    let reviewed: Vec<&str> = reviews["spec"]["rules"][0]["resourceRules"]
        .as_array()
        .expect("rules")
        .iter()
        .filter_map(|r| r["resources"][0].as_str())
        .collect();
    assert_eq!(reviewed, ["tokenreviews", "subjectaccessreviews"]);
    let off = helm
        .render(
            &Install::new("holdfast", "holdfast-system")
                .set("controller.flowControl.enabled=false"),
        )
        .expect("render");
    assert!(helm::of_kind(&off, "FlowSchema").is_empty());

    // The real apiserver accepts them (server-side dry run: the shared control plane's
    // priority and fairness is left alone).
    let cp = ControlPlane::shared();
    let admin = cp.client(Identity::Admin).await.expect("admin");
    let ns = cp.namespace("hf-ctrl-netpol").await.expect("namespace");
    let mut np = np.clone();
    np["metadata"]["namespace"] = serde_json::json!(ns);
    for doc in std::iter::once(&np).chain(levels).chain(schemas) {
        rbac::apply(&admin, doc, &ns, true)
            .await
            .unwrap_or_else(|e| panic!("the apiserver accepts {}: {e:#}", doc["kind"]));
    }
}
