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
//!
//! One file per concern: `values` (rendering, the schema, the values table), `webhooks` (the
//! webhook configurations as rendered), `network_policy`, `roles` (RBAC), `certificates`, `arming`
//! (a real install, upgrade and rollback) and `apply` (every combination on the apiserver).
//! What they share is here; the files share one control plane, as one topic.

mod apply;
mod arming;
mod certificates;
mod network_policy;
mod roles;
mod values;
mod webhooks;

use holdfast_certs::CertificateAuthority;
use holdfast_tests::Identity;
use holdfast_tests::helm::{self, Helm, Install};
use holdfast_tests::rbac;
use k8s_openapi::api::admissionregistration::v1::{
    MutatingWebhookConfiguration, ValidatingWebhookConfiguration,
};
use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{Api, ObjectMeta, PostParams};
use serde_json::Value;
use std::collections::BTreeMap;
use std::time::Duration;

/// The chart topic's control plane: one for all of this directory's files, as when they were
/// one file (the harness's [`holdfast_tests::ControlPlane::shared`] keys it by the calling
/// file), so the tests that register webhook configurations still meet on one apiserver and
/// take turns by [`LIVE_WEBHOOKS`]. Named as the harness's type so the tests read as every
/// other topic's.
struct ControlPlane;

impl ControlPlane {
    fn shared() -> &'static holdfast_tests::ControlPlane {
        holdfast_tests::ControlPlane::shared_by(file!())
    }
}

const MODES: [&str; 2] = ["plain", "kueue"];
const CERT_MODES: [&str; 3] = ["self-managed", "cert-manager", "secret"];

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

/// A real `helm install` of the chart into a fresh namespace of the topic's control plane,
/// for the tests that then upgrade, roll back and reconcile it (no kubelet: its pods never
/// run, which none of them needs).
struct InstalledRelease {
    cp: &'static holdfast_tests::ControlPlane,
    helm: Helm,
    admin: kube::Client,
    ns: String,
    kubeconfig: String,
    chart: String,
    /// The release, its namespace and the values it was installed with.
    install: Install,
    /// The chart's fullname, `<release>-holdfast`: its webhook configurations' name.
    name: String,
    /// The chart as rendered for this release, as installed.
    docs: Vec<Value>,
}

impl InstalledRelease {
    /// With the chart's defaults.
    async fn install(namespace_prefix: &str, release: &str) -> Self {
        Self::install_with(namespace_prefix, release, |i| i).await
    }

    /// With the values `values` sets on the release's [`Install`].
    async fn install_with(
        namespace_prefix: &str,
        release: &str,
        values: impl FnOnce(Install) -> Install,
    ) -> Self {
        let cp = ControlPlane::shared();
        let admin = cp.client(Identity::Admin).await.expect("admin");
        let ns = cp.namespace(namespace_prefix).await.expect("namespace");
        let helm = helm();
        let install = values(Install::new(release, &ns));
        let docs = helm.render(&install).expect("render");
        let kubeconfig = cp.kubeconfig(Identity::Admin).display().to_string();
        helm.install(&install, &kubeconfig).expect("helm install");
        InstalledRelease {
            cp,
            helm,
            admin,
            kubeconfig,
            chart: helm::chart_dir().display().to_string(),
            name: format!("{release}-holdfast"),
            install,
            docs,
            ns,
        }
    }

    /// `helm VERB RELEASE CHART --namespace NS --kubeconfig KUBECONFIG EXTRA…`: an upgrade to
    /// this tree's chart.
    fn helm(&self, verb: &str, extra: &[&str]) -> anyhow::Result<String> {
        self.run(verb, Some(&self.chart), extra)
    }

    /// `helm rollback RELEASE REVISION`. Under Helm 4 the rollback is first made as is and
    /// must be refused on a conflict with the controller's field manager, naming `field`, and
    /// write nothing `unchanged` can see; then it is made again with `--force-conflicts` (the
    /// book's upgrade page says why). Helm 3 writes it at once.
    async fn rollback_over_the_controller<F, Fut>(&self, revision: u32, field: &str, unchanged: F)
    where
        F: Fn() -> Fut,
        Fut: std::future::Future<Output = ()>,
    {
        let revision = revision.to_string();
        if self.helm.major >= 4 {
            let refused = self
                .run("rollback", None, &[&revision])
                .expect_err("Helm 4's rollback conflicts with the controller's fields");
            let refused = format!("{refused:#}");
            // The field manager, quoted as the apiserver names it ("conflict with" one
            // manager, "conflicts with" several), not the release's objects of that suffix.
            assert!(
                refused.contains("conflict")
                    && refused.contains("with \"holdfast-controller\"")
                    && refused.contains(field),
                "{refused}"
            );
            unchanged().await;
            self.run("rollback", None, &[&revision, "--force-conflicts"])
                .expect("helm rollback --force-conflicts");
        } else {
            self.run("rollback", None, &[&revision])
                .expect("helm rollback");
        }
    }

    /// A client as the chart's controller ServiceAccount: exactly the chart's RBAC.
    async fn controller(&self) -> kube::Client {
        self.cp
            .service_account_client(&self.ns, &format!("{}-controller", self.name))
            .await
            .expect("the controller's token")
    }

    fn uninstall(&self) {
        self.helm
            .uninstall(&self.install, &self.kubeconfig)
            .expect("helm uninstall");
    }

    fn run(&self, verb: &str, chart: Option<&str>, extra: &[&str]) -> anyhow::Result<String> {
        let args: Vec<String> = [verb, self.install.release.as_str()]
            .into_iter()
            .chain(chart)
            .chain(["--namespace", &self.ns, "--kubeconfig", &self.kubeconfig])
            .chain(extra.iter().copied())
            .map(str::to_owned)
            .collect();
        self.helm.run(&args)
    }
}
