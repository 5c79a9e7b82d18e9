//! Tier 2: the real Kueue controller against the local control plane.
//!
//! Kueue (v0.19, `cmd/kueue`) runs as a process with the TrainJob integration on, internal
//! certificate management off, and its webhook server on a loopback port with a certificate
//! from the control plane's CA. Its webhooks for the kinds the tests use (TrainJobs,
//! Workloads, ClusterQueues, LocalQueues, ResourceFlavors, Cohorts) are registered by URL,
//! rewritten from the manifests shipped in Kueue's module. Kueue's CRDs carry no conversion
//! webhook in their bases (strategy None); every client here speaks v1beta2, the storage
//! version.

use crate::identity::Identity;
use crate::process::Supervised;
use anyhow::{Context, bail};
use k8s_openapi::api::admissionregistration::v1::{
    MutatingWebhookConfiguration, ValidatingWebhookConfiguration,
};
use kube::api::{Api, DynamicObject, Patch, PatchParams};
use kube::core::ApiResource;
use std::path::Path;
use std::time::{Duration, Instant};

/// Kueue's API version used throughout.
pub const KUEUE_API_VERSION: &str = "kueue.x-k8s.io/v1beta2";

/// Which of Kueue's webhooks the tests register (by their path).
const KEPT_WEBHOOKS: [&str; 6] = [
    "trainjob",
    "workload",
    "clusterqueue",
    "localqueue",
    "resourceflavor",
    "cohort",
];

/// The Kueue configuration file for a run.
pub fn config_yaml(webhook_port: u16, health_port: u16, cert_dir: &Path) -> String {
    format!(
        "apiVersion: config.kueue.x-k8s.io/v1beta2\n\
         kind: Configuration\n\
         health:\n  healthProbeBindAddress: 127.0.0.1:{health_port}\n\
         metrics:\n  bindAddress: \"0\"\n\
         webhook:\n  host: 127.0.0.1\n  port: {webhook_port}\n  certDir: {cert_dir}\n\
         leaderElection:\n  leaderElect: false\n\
         internalCertManagement:\n  enable: false\n\
         manageJobsWithoutQueueName: false\n\
         integrations:\n  frameworks:\n  - trainer.kubeflow.org/trainjob\n",
        cert_dir = cert_dir.display()
    )
}

/// Rewrite Kueue's shipped webhook manifests: keep the webhooks of the kinds we use, point
/// them at `https://127.0.0.1:{port}{path}` with `ca_pem`, and give them fresh names.
pub fn webhook_configurations(
    manifests: &str,
    port: u16,
    ca_pem: &str,
) -> anyhow::Result<(MutatingWebhookConfiguration, ValidatingWebhookConfiguration)> {
    let docs: Vec<serde_json::Value> = serde_saphyr::from_multiple(manifests)?;
    let mut mutating = None;
    let mut validating = None;
    for mut doc in docs {
        let kind = doc["kind"].as_str().unwrap_or_default().to_owned();
        if let Some(hooks) = doc.get_mut("webhooks").and_then(|w| w.as_array_mut()) {
            hooks.retain(|h| {
                let path = h["clientConfig"]["service"]["path"]
                    .as_str()
                    .unwrap_or_default();
                KEPT_WEBHOOKS
                    .iter()
                    .any(|k| path.ends_with(&format!("-{k}")))
            });
            for h in hooks.iter_mut() {
                let path = h["clientConfig"]["service"]["path"]
                    .as_str()
                    .unwrap_or_default()
                    .to_owned();
                h["clientConfig"] = serde_json::json!({
                    "url": format!("https://127.0.0.1:{port}{path}"),
                    "caBundle": base64::Engine::encode(&base64::engine::general_purpose::STANDARD, ca_pem.as_bytes()),
                });
                h["timeoutSeconds"] = serde_json::json!(10);
            }
        }
        match kind.as_str() {
            "MutatingWebhookConfiguration" => {
                doc["metadata"] =
                    serde_json::json!({"name": "kueue-mutating-webhook-configuration"});
                mutating = Some(serde_json::from_value(doc)?);
            }
            "ValidatingWebhookConfiguration" => {
                doc["metadata"] =
                    serde_json::json!({"name": "kueue-validating-webhook-configuration"});
                validating = Some(serde_json::from_value(doc)?);
            }
            _ => {}
        }
    }
    match (mutating, validating) {
        (Some(m), Some(v)) => Ok((m, v)),
        _ => bail!("Kueue's webhook manifests lack a mutating or validating configuration"),
    }
}

/// Start Kueue as a process (its identity: [`Identity::Kueue`]), register its webhooks, and
/// wait until its webhook server answers and its health probe is ready.
pub(crate) async fn start(
    cp: &crate::ControlPlane,
    binary: &Path,
    manifests: &Path,
) -> anyhow::Result<Supervised> {
    let dir = cp.dir().join("kueue");
    let certs = dir.join("certs");
    std::fs::create_dir_all(&certs)?;
    let serving = cp.issue_serving_cert(
        &["127.0.0.1", "localhost"],
        Duration::from_secs(7 * 24 * 3600),
    )?;
    std::fs::write(certs.join("tls.crt"), &serving.cert_pem)?;
    std::fs::write(certs.join("tls.key"), &serving.key_pem)?;
    let webhook_port = crate::control_plane::free_port()?;
    let health_port = crate::control_plane::free_port()?;
    let config = dir.join("config.yaml");
    std::fs::write(&config, config_yaml(webhook_port, health_port, &certs))?;

    // With internal certificate management off, Kueue v0.19 reads its metrics serving
    // certificate from a fixed path and exits if there is none: give it one (any valid pair;
    // the metrics endpoint itself is disabled). This is the one file the harness writes
    // outside its temporary directory.
    let metrics_certs = Path::new("/etc/kueue/metrics/certs");
    if !metrics_certs.join("tls.key").is_file() {
        std::fs::create_dir_all(metrics_certs)
            .with_context(|| format!("creating {}", metrics_certs.display()))?;
        for (name, body) in [
            ("tls.crt", &serving.cert_pem),
            ("tls.key", &serving.key_pem),
        ] {
            let tmp = metrics_certs.join(format!(".{name}.{}", std::process::id()));
            std::fs::write(&tmp, body)?;
            std::fs::rename(&tmp, metrics_certs.join(name))?;
        }
    }

    let proc = cp.spawn(
        "kueue",
        binary,
        vec![
            format!("--config={}", config.display()),
            format!("--kubeconfig={}", cp.kubeconfig(Identity::Kueue).display()),
            // The visibility server binds a fixed port; the tests do not use it.
            "--feature-gates=VisibilityOnDemand=false".into(),
            "--zap-log-level=info".into(),
        ],
    )?;

    let text = std::fs::read_to_string(manifests)
        .with_context(|| format!("reading {}", manifests.display()))?;
    let (m, v) = webhook_configurations(&text, webhook_port, cp.ca_pem())?;
    let admin = cp.client(Identity::Admin).await?;
    let pp = PatchParams::apply("holdfast-tests").force();
    Api::<MutatingWebhookConfiguration>::all(admin.clone())
        .patch(
            "kueue-mutating-webhook-configuration",
            &pp,
            &Patch::Apply(&m),
        )
        .await?;
    Api::<ValidatingWebhookConfiguration>::all(admin.clone())
        .patch(
            "kueue-validating-webhook-configuration",
            &pp,
            &Patch::Apply(&v),
        )
        .await?;

    // Ready when the health probe says so; the webhook port accepting TLS follows it. Inside
    // a network namespace (the tier-3 node) Kueue's ports are on the namespace's loopback:
    // the probe goes through a forward, and the webhook is asked through the apiserver (a
    // dry-run create only Kueue's webhook judges), since a forward accepts before its target.
    let health = match cp.netns() {
        Some(ns) => ns.forward(std::net::SocketAddr::from(([127, 0, 0, 1], health_port)))?,
        None => health_port,
    };
    let start = Instant::now();
    let mut proc = proc;
    loop {
        if !proc.running() {
            bail!("kueue exited:\n{}", proc.log_tail(40));
        }
        let webhook_up = match cp.netns() {
            None => std::net::TcpStream::connect(("127.0.0.1", webhook_port)).is_ok(),
            Some(_) => flavor_dry_run(&admin).await.is_ok(),
        };
        if probe(health, "/readyz").is_ok() && webhook_up {
            break;
        }
        if start.elapsed() > Duration::from_secs(120) {
            bail!("kueue not ready after 120s:\n{}", proc.log_tail(40));
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    Ok(proc)
}

/// A server-side dry-run create of a ResourceFlavor: answered only once Kueue's webhook is.
async fn flavor_dry_run(admin: &kube::Client) -> anyhow::Result<()> {
    let flavor: DynamicObject = serde_json::from_value(serde_json::json!({
        "apiVersion": KUEUE_API_VERSION, "kind": "ResourceFlavor",
        "metadata": {"name": "holdfast-probe"}
    }))?;
    Api::<DynamicObject>::all_with(
        admin.clone(),
        &holdfast_cluster::resources::kueue("ResourceFlavor", "resourceflavors"),
    )
    .create(
        &kube::api::PostParams {
            dry_run: true,
            ..Default::default()
        },
        &flavor,
    )
    .await?;
    Ok(())
}

fn probe(port: u16, path: &str) -> anyhow::Result<()> {
    use std::io::{Read, Write};
    let mut s = std::net::TcpStream::connect(("127.0.0.1", port))?;
    s.set_read_timeout(Some(Duration::from_secs(2)))?;
    s.write_all(format!("GET {path} HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n").as_bytes())?;
    let mut buf = String::new();
    let _ = s.read_to_string(&mut buf);
    if buf.starts_with("HTTP/1.1 200") || buf.starts_with("HTTP/1.0 200") {
        Ok(())
    } else {
        bail!("{path}: {}", buf.lines().next().unwrap_or_default())
    }
}

/// The cluster-scoped objects [`create_queues`] makes for `namespace`: its ResourceFlavor's
/// name and its ClusterQueue's.
pub fn queue_names(namespace: &str) -> (String, String) {
    (format!("flavor-{namespace}"), format!("cq-{namespace}"))
}

/// Deletes the cluster-scoped objects [`create_queues`] made for `namespace` (its ClusterQueue,
/// then its ResourceFlavor), in the background: Kueue lets them go once nothing uses them.
pub async fn delete_queues(client: &kube::Client, namespace: &str) -> anyhow::Result<()> {
    let (flavor, cq) = queue_names(namespace);
    for (resource, name) in [
        (holdfast_cluster::resources::cluster_queue(), cq),
        (
            holdfast_cluster::resources::kueue("ResourceFlavor", "resourceflavors"),
            flavor,
        ),
    ] {
        Api::<DynamicObject>::all_with(client.clone(), &resource)
            .delete(&name, &kube::api::DeleteParams::background())
            .await
            .with_context(|| format!("deleting {name}"))?;
    }
    Ok(())
}

/// A ResourceFlavor, a ClusterQueue with ample CPU and memory quota and, in `namespace`, a
/// LocalQueue named `queue` pointing at it. `admission_checks` are required by the
/// ClusterQueue (e.g. holdfast's readmission gate).
pub async fn create_queues(
    client: &kube::Client,
    namespace: &str,
    queue: &str,
    admission_checks: &[&str],
) -> anyhow::Result<()> {
    let pp = PatchParams::apply("holdfast-tests").force();
    let (flavor, cq) = queue_names(namespace);
    let apply = |ar: ApiResource, ns: Option<&str>, obj: serde_json::Value| {
        let client = client.clone();
        let pp = pp.clone();
        let ns = ns.map(str::to_owned);
        async move {
            let obj: DynamicObject = serde_json::from_value(obj)?;
            let name = obj.metadata.name.clone().unwrap_or_default();
            let api: Api<DynamicObject> = match ns {
                Some(ns) => Api::namespaced_with(client, &ns, &ar),
                None => Api::all_with(client, &ar),
            };
            api.patch(&name, &pp, &Patch::Apply(&obj)).await?;
            anyhow::Ok(())
        }
    };
    apply(
        holdfast_cluster::resources::kueue("ResourceFlavor", "resourceflavors"),
        None,
        serde_json::json!({"apiVersion": KUEUE_API_VERSION, "kind": "ResourceFlavor", "metadata": {"name": flavor}}),
    )
    .await?;
    let mut cq_spec = serde_json::json!({
        "namespaceSelector": {},
        "resourceGroups": [{
            "coveredResources": ["cpu", "memory"],
            "flavors": [{"name": flavor, "resources": [
                {"name": "cpu", "nominalQuota": "1000"},
                {"name": "memory", "nominalQuota": "1000Gi"}
            ]}]
        }]
    });
    if !admission_checks.is_empty() {
        cq_spec["admissionChecksStrategy"] = serde_json::json!({
            "admissionChecks": admission_checks.iter().map(|c| serde_json::json!({"name": c})).collect::<Vec<_>>()
        });
    }
    apply(
        holdfast_cluster::resources::cluster_queue(),
        None,
        serde_json::json!({"apiVersion": KUEUE_API_VERSION, "kind": "ClusterQueue", "metadata": {"name": cq}, "spec": cq_spec}),
    )
    .await?;
    apply(
        holdfast_cluster::resources::local_queue(),
        Some(namespace),
        serde_json::json!({"apiVersion": KUEUE_API_VERSION, "kind": "LocalQueue",
            "metadata": {"name": queue, "namespace": namespace}, "spec": {"clusterQueue": cq}}),
    )
    .await?;
    Ok(())
}

#[cfg(test)]
mod tests {
    #[test]
    fn the_api_version_is_the_one_holdfast_reads() {
        assert_eq!(
            super::KUEUE_API_VERSION,
            holdfast_cluster::resources::workload().api_version
        );
    }
}
