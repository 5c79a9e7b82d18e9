//! holdfast's chart installed on the tier-3 node the way users install it: holdfast's image
//! (built locally from the Dockerfile's recipe, `tests/cluster/node/holdfast-image.sh`) and
//! the chart (`helm package`) pushed to the cluster's local OCI registry
//! ([`crate::registry`]), then `helm install oci://…/charts/holdfast --version V` with the
//! image pointed at that registry, so the node's containerd pulls it as a user's node does;
//! and the hold API reached through the controller's Service. Used by the node tests and the
//! demo's node mode.

use crate::identity::Identity;
use crate::node::NodeCluster;
use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, ListParams};
use std::time::{Duration, Instant};

/// holdfast's image, built from the Dockerfile's recipe (cached): its OCI archive and the
/// `repository:tag` it was built as (`localhost/holdfast/holdfast:<content hash>`). Built once
/// per test process, so every install of a run runs the same image.
pub fn holdfast_image() -> (std::path::PathBuf, String) {
    static BUILT: std::sync::OnceLock<(std::path::PathBuf, String)> = std::sync::OnceLock::new();
    BUILT
        .get_or_init(|| {
            let script = crate::binaries::cluster_module_dir().join("node/holdfast-image.sh");
            let image_dir = crate::binaries::run_build_script(&script).expect("holdfast image");
            let archive = image_dir.join("image.tar");
            let reference = std::fs::read_to_string(image_dir.join("image.ref")).expect("ref");
            (archive, reference.trim().to_owned())
        })
        .clone()
}

/// What [`publish`] pushed to the cluster's registry.
#[derive(Clone, Debug)]
pub struct Published {
    /// `oci://127.0.0.1:P/charts/holdfast`.
    pub chart: String,
    /// The chart's version (the tree's `Chart.yaml` version).
    pub version: String,
    /// `127.0.0.1:P/holdfast`: the chart value `image.repository` that points at it.
    pub image_repository: String,
    /// `127.0.0.1:P/holdfast:<tag>`, the tag being the chart's appVersion.
    pub image: String,
}

/// Push holdfast's image and the tree's chart to the cluster's registry, as a release is
/// pushed (`tests/release.sh`: the image as `REGISTRY/holdfast`, the chart to
/// `oci://REGISTRY/charts`). The chart is packaged with the tree's version and, as its
/// appVersion, the image's tag, so its default tag is the pushed image's. Pushing again is
/// cheap (the registry has the blobs) and leaves the same content.
pub fn publish(cluster: &NodeCluster, helm: &crate::helm::Helm) -> Published {
    let (archive, built) = holdfast_image();
    let chart_yaml: serde_json::Value = serde_saphyr::from_str(
        &std::fs::read_to_string(crate::helm::chart_dir().join("Chart.yaml")).expect("Chart.yaml"),
    )
    .expect("Chart.yaml parses");
    let version = chart_yaml["version"].as_str().expect("version").to_owned();
    publish_build(
        cluster,
        helm,
        &archive,
        &built,
        &crate::helm::chart_dir(),
        &version,
    )
}

/// The previous release the upgrade tests start from (`tests/cluster/node/previous-release.env`),
/// built from its commit's own tree by `previous-release.sh` (cached).
#[derive(Clone, Debug)]
pub struct PreviousRelease {
    /// The commit it was built from.
    pub commit: String,
    /// The version its chart is packaged as.
    pub version: String,
    /// Its image's OCI archive, and the reference it was built as.
    pub archive: std::path::PathBuf,
    pub built: String,
    /// Its chart, as that commit's tree has it.
    pub chart_dir: std::path::PathBuf,
}

/// Build (or find cached) the previous release. Built once per test process.
pub fn previous_release() -> PreviousRelease {
    static BUILT: std::sync::OnceLock<PreviousRelease> = std::sync::OnceLock::new();
    BUILT
        .get_or_init(|| {
            let script = crate::binaries::cluster_module_dir().join("node/previous-release.sh");
            let dir = crate::binaries::run_build_script(&script).expect("the previous release");
            let read = |f: &str| {
                std::fs::read_to_string(dir.join(f))
                    .unwrap_or_else(|e| panic!("{}: {e}", dir.join(f).display()))
                    .trim()
                    .to_owned()
            };
            PreviousRelease {
                commit: read("commit"),
                version: read("version"),
                archive: dir.join("image.tar"),
                built: read("image.ref"),
                chart_dir: dir.join("chart"),
            }
        })
        .clone()
}

/// Push the previous release's image and chart to the cluster's registry, as
/// [`publish`] pushes this tree's.
pub fn publish_previous(cluster: &NodeCluster, helm: &crate::helm::Helm) -> Published {
    let previous = previous_release();
    publish_build(
        cluster,
        helm,
        &previous.archive,
        &previous.built,
        &previous.chart_dir,
        &previous.version,
    )
}

/// Push image `archive` (built as `built`, `repository:tag`) as `REGISTRY/holdfast:tag`, and
/// the chart of `chart_dir` packaged as `version` with that tag as its appVersion.
fn publish_build(
    cluster: &NodeCluster,
    helm: &crate::helm::Helm,
    archive: &std::path::Path,
    built: &str,
    chart_dir: &std::path::Path,
    version: &str,
) -> Published {
    let (_, tag) = built.rsplit_once(':').expect("a tagged image");
    let registry = cluster.registry().expect("the cluster's registry");
    let image = registry
        .push_image(archive, "holdfast", tag)
        .expect("crane push of holdfast's image");
    let out = tempfile::tempdir().expect("tempdir");
    helm.run(&[
        "package".into(),
        chart_dir.display().to_string(),
        "--version".into(),
        version.to_owned(),
        "--app-version".into(),
        tag.to_owned(),
        "--destination".into(),
        out.path().display().to_string(),
    ])
    .expect("helm package");
    let package = out.path().join(format!("holdfast-{version}.tgz"));
    let repo = registry
        .push_chart(helm, &package)
        .expect("helm push of the chart");
    Published {
        chart: format!("{repo}/holdfast"),
        version: version.to_owned(),
        image_repository: format!("{}/holdfast", registry.host()),
        image,
    }
}

/// The pods of namespace `ns`, each with its phase and container states: what a failed
/// install or rollout is explained by.
pub async fn pod_states(admin: &kube::Client, ns: &str) -> Vec<String> {
    let pods: Api<Pod> = Api::namespaced(admin.clone(), ns);
    pods.list(&ListParams::default())
        .await
        .map(|l| {
            l.items
                .iter()
                .map(|p| {
                    format!(
                        "{:?} {:?}",
                        p.metadata.name,
                        p.status.as_ref().map(|s| (&s.phase, &s.container_statuses))
                    )
                })
                .collect()
        })
        .unwrap_or_default()
}

/// A release of the chart installed on the node from the cluster's registry (`helm install
/// oci://… --wait`). Dropped while still installed, it is uninstalled, so a failing test leaves
/// no webhook of its own guarding the next test's writes.
pub struct ChartRelease {
    /// The helm binary the release was installed with.
    pub helm: crate::helm::Helm,
    name: String,
    namespace: String,
    /// The admin's kubeconfig, as helm is given it.
    pub kubeconfig: String,
    /// The chart and image it was installed from.
    pub published: Published,
    installed: bool,
}

impl ChartRelease {
    /// Publish ([`publish`]), then `helm install` of release `name` in `namespace` from the
    /// registry, with `sets` besides the image's repository.
    pub async fn install(
        cluster: &NodeCluster,
        name: &str,
        namespace: &str,
        sets: &[&str],
    ) -> Self {
        let helm = crate::helm::ensure().expect("helm");
        let published = publish(cluster, &helm);
        Self::install_published(cluster, name, namespace, sets, published).await
    }

    /// `helm install` of release `name` in `namespace` from what `published` pushed (this
    /// tree's chart, or the previous release's), with `sets` besides the image's repository.
    pub async fn install_published(
        cluster: &NodeCluster,
        name: &str,
        namespace: &str,
        sets: &[&str],
        published: Published,
    ) -> Self {
        let helm = crate::helm::ensure().expect("helm");
        let mut release = ChartRelease {
            helm,
            name: name.to_owned(),
            namespace: namespace.to_owned(),
            kubeconfig: cluster.kubeconfig(Identity::Admin).display().to_string(),
            published,
            installed: false,
        };
        let started = Instant::now();
        let out = release.helm_run("install", &["--create-namespace"], sets);
        release.installed = out.is_ok();
        release.explain(cluster, "helm install", out).await;
        release.webhook_answers(cluster).await;
        eprintln!(
            "helm install {name} {} --version {} ({sets:?}) --wait took {:?} (webhook answering through its Service)",
            release.published.chart,
            release.published.version,
            started.elapsed()
        );
        release
    }

    /// Waits until the apiserver reaches the webhook through its Service: `helm --wait` ends
    /// when the pods are Ready, and kube-proxy may route the new Service a moment later (a
    /// write meanwhile fails with "connection refused"). The probe is an admin's dry-run
    /// create of a snapshot-named ConfigMap in `default`, which the webhook refuses (403);
    /// while it cannot be reached the apiserver answers 500.
    pub async fn webhook_answers(&self, cluster: &NodeCluster) {
        use k8s_openapi::api::core::v1::ConfigMap;
        use kube::api::PostParams;
        let admin = cluster.client(Identity::Admin).await.expect("admin client");
        let cms: Api<ConfigMap> = Api::namespaced(admin, "default");
        let probe: ConfigMap = serde_json::from_value(serde_json::json!({
            "metadata": {"name": format!("{}-probe-runtime-snapshot", self.name)}
        }))
        .expect("probe");
        let dry = PostParams {
            dry_run: true,
            ..Default::default()
        };
        crate::wait::wait_for(
            "holdfast's webhook to answer through its Service",
            Duration::from_secs(60),
            || async {
                matches!(
                    cms.create(&dry, &probe).await,
                    Err(kube::Error::Api(s)) if s.code == 403
                )
                .then_some(())
            },
        )
        .await;
    }

    /// `helm upgrade` to the same chart with `sets` (the image's repository is always set;
    /// nothing is reused).
    pub async fn upgrade(&self, cluster: &NodeCluster, sets: &[&str]) {
        let out = self.helm_run("upgrade", &[], sets);
        self.explain(cluster, "helm upgrade", out).await;
    }

    /// `helm uninstall`, as the chart README says (without `--wait`: a kueue-mode
    /// AdmissionCheck stays until no ClusterQueue names it, Kueue's finalizer says).
    pub fn uninstall(&mut self) -> anyhow::Result<String> {
        self.installed = false;
        self.helm.run(
            &[
                "uninstall",
                &self.name,
                "--namespace",
                &self.namespace,
                "--kubeconfig",
                &self.kubeconfig,
            ]
            .map(str::to_owned),
        )
    }

    /// The arguments of `helm upgrade` to the chart `to` pushed, with `flags` (for example
    /// `--reset-then-reuse-values`) and `sets` besides the image's repository, for a caller
    /// that runs it beside other work ([`crate::helm::Helm::run`] blocks); after it succeeds,
    /// [`Self::upgraded_to`] records the new chart.
    pub fn upgrade_args(&self, to: &Published, flags: &[&str], sets: &[&str]) -> Vec<String> {
        self.args("upgrade", to, flags, sets)
    }

    /// Record that the release now runs the chart `to` pushed.
    pub fn upgraded_to(&mut self, to: Published) {
        self.published = to;
    }

    /// The arguments of `helm rollback` of this release to `revision`, waiting for the pods.
    /// (Under Helm 4, a revision rendered before the controller armed the webhooks or rotated
    /// the CA conflicts with its fields until `--force-conflicts` is added: the book's upgrade
    /// page says why.)
    pub fn rollback_args(&self, revision: u32) -> Vec<String> {
        [
            "rollback",
            &self.name,
            &revision.to_string(),
            "--namespace",
            &self.namespace,
            "--kubeconfig",
            &self.kubeconfig,
            "--wait",
            "--timeout",
            "5m",
        ]
        .map(str::to_owned)
        .to_vec()
    }

    fn helm_run(&self, verb: &str, extra: &[&str], sets: &[&str]) -> anyhow::Result<String> {
        self.helm
            .run(&self.args(verb, &self.published, extra, sets))
    }

    fn args(&self, verb: &str, chart: &Published, extra: &[&str], sets: &[&str]) -> Vec<String> {
        let mut args: Vec<String> = [
            verb,
            &self.name,
            &chart.chart,
            "--version",
            &chart.version,
            // The registry is plain HTTP on the node's loopback (crate::registry).
            "--plain-http",
            "--namespace",
            &self.namespace,
            "--kubeconfig",
            &self.kubeconfig,
            "--wait",
            "--timeout",
            "5m",
        ]
        .map(str::to_owned)
        .to_vec();
        args.extend(extra.iter().map(|s| s.to_string()));
        // The chart's default tag is the pushed image's (its appVersion); the pull policy is
        // the chart's (IfNotPresent), so the node pulls the image the first time.
        let image = format!("image.repository={}", chart.image_repository);
        for s in std::iter::once(image.as_str()).chain(sets.iter().copied()) {
            args.push("--set".into());
            args.push(s.to_owned());
        }
        args
    }

    /// Panics with the release's pods and the kubelet's log if `out` failed.
    async fn explain(&self, cluster: &NodeCluster, what: &str, out: anyhow::Result<String>) {
        if let Err(e) = out {
            let admin = cluster.client(Identity::Admin).await.expect("client");
            panic!(
                "{what}: {e:#}\npods: {:#?}\nkubelet:\n{}",
                pod_states(&admin, &self.namespace).await,
                cluster.log_tail("kubelet", 30)
            );
        }
    }

    /// The release's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The namespace the release is installed in.
    pub fn namespace(&self) -> &str {
        &self.namespace
    }

    /// The chart's names for this release (`<fullname>`): the release name, or
    /// `<release>-holdfast`.
    pub fn fullname(&self) -> String {
        if self.name.contains("holdfast") {
            self.name.clone()
        } else {
            format!("{}-holdfast", self.name)
        }
    }

    /// The hold API through the controller's Service, as a caller inside the cluster reaches
    /// it: by the Service's DNS name, verified against the CA the controller issued its
    /// serving certificate from (the endpoint's `ca_pem`), with connections to that name sent
    /// to a loopback port forwarded to the Service's address.
    pub async fn hold_api_endpoint(&self, cluster: &NodeCluster) -> HoldApiEndpoint {
        use k8s_openapi::api::core::v1::{Secret, Service};
        let admin = cluster.client(Identity::Admin).await.expect("client");
        let service = format!("{}-controller", self.fullname());
        let svc = Api::<Service>::namespaced(admin.clone(), &self.namespace)
            .get(&service)
            .await
            .expect("the controller's Service");
        let spec = svc.spec.expect("spec");
        let ip: std::net::IpAddr = spec
            .cluster_ip
            .as_deref()
            .expect("cluster IP")
            .parse()
            .expect("an IP");
        let port = spec
            .ports
            .unwrap_or_default()
            .iter()
            .find(|p| p.name.as_deref() == Some("https"))
            .map(|p| p.port)
            .expect("the https port");
        let local_port = cluster
            .forward(std::net::SocketAddr::new(ip, port as u16))
            .expect("forward");
        let tls = Api::<Secret>::namespaced(admin, &self.namespace)
            .get(&format!("{}-controller-tls", self.fullname()))
            .await
            .expect("the controller's serving Secret");
        let ca = tls
            .data
            .and_then(|d| d.get("ca.crt").cloned())
            .expect("ca.crt");
        HoldApiEndpoint {
            host: format!("{service}.{}.svc", self.namespace),
            service: std::net::SocketAddr::new(ip, port as u16),
            local_port,
            ca_pem: ca.0,
        }
    }

    /// A client of the hold API through the controller's Service ([`Self::hold_api_endpoint`]).
    pub async fn hold_api(&self, cluster: &NodeCluster) -> ServiceHoldApi {
        holdfast_serve::install_crypto_provider();
        let ep = self.hold_api_endpoint(cluster).await;
        let http = reqwest::Client::builder()
            .add_root_certificate(reqwest::Certificate::from_pem(&ep.ca_pem).expect("CA"))
            .resolve(
                &ep.host,
                std::net::SocketAddr::from(([127, 0, 0, 1], ep.local_port)),
            )
            .timeout(Duration::from_secs(90))
            .build()
            .expect("http client");
        let api = ServiceHoldApi {
            base: format!("https://{}:{}", ep.host, ep.local_port),
            http,
        };
        // kube-proxy may route the Service a moment after its pods are Ready: wait until the
        // hold API answers anything at all through it (a call without a token: 401).
        let probe = format!("{}/v1/preflight", api.base);
        crate::wait::wait_for(
            "the hold API to answer through its Service",
            Duration::from_secs(60),
            || async { api.http.get(&probe).send().await.ok().map(|_| ()) },
        )
        .await;
        api
    }
}

/// Where the hold API's Service is, and how to reach and trust it from the host.
pub struct HoldApiEndpoint {
    /// The Service's DNS name (`<fullname>-controller.<namespace>.svc`).
    pub host: String,
    /// The Service's cluster IP and port, inside the cluster's network namespace.
    pub service: std::net::SocketAddr,
    /// The loopback port forwarded to `service`.
    pub local_port: u16,
    /// The CA (PEM) that signed the controller's serving certificate.
    pub ca_pem: Vec<u8>,
}

impl Drop for ChartRelease {
    fn drop(&mut self) {
        if !self.installed {
            return;
        }
        if let Err(e) = self.uninstall() {
            eprintln!("helm uninstall {} on drop: {e:#}", self.name);
        }
    }
}

/// The hold API reached through the controller's Service.
pub struct ServiceHoldApi {
    base: String,
    http: reqwest::Client,
}

impl ServiceHoldApi {
    /// `POST .../trainjobs/{name}/{call}` as the holder of `token`; the status and JSON body.
    pub async fn call(
        &self,
        token: &str,
        ns: &str,
        name: &str,
        call: &str,
        instance: Option<u64>,
    ) -> (u16, serde_json::Value) {
        // A connection that could not be made sent nothing: kube-proxy may route the Service
        // to a controller pod a moment after it is Ready again (scaled back up, failed over),
        // so that alone is tried again, a bounded number of times; any other error fails.
        let mut tries = 0;
        loop {
            match self.try_call(token, ns, name, call, instance).await {
                Ok(answer) => break answer,
                Err(e) if e.is_connect() && tries < 30 => {
                    tries += 1;
                    tokio::time::sleep(Duration::from_secs(1)).await;
                }
                Err(e) => panic!("{call} through the Service: {e:?}"),
            }
        }
    }

    /// [`Self::call`] once, its transport error returned (a reset or a timeout may or may not
    /// have reached the controller); an answer is checked against the API's contract.
    pub async fn try_call(
        &self,
        token: &str,
        ns: &str,
        name: &str,
        call: &str,
        instance: Option<u64>,
    ) -> Result<(u16, serde_json::Value), reqwest::Error> {
        let deadline = jiff::Timestamp::now() + jiff::SignedDuration::from_secs(60);
        let mut body = serde_json::json!({"deadline": deadline.to_string(), "reason": "node lost"});
        if let Some(i) = instance {
            body["instance"] = i.into();
        }
        let url = format!("{}/v1/namespaces/{ns}/trainjobs/{name}/{call}", self.base);
        let resp = self
            .http
            .post(&url)
            .bearer_auth(token)
            .json(&body)
            .send()
            .await?;
        let status = resp.status().as_u16();
        let answer = resp.json().await?;
        let path = format!("/v1/namespaces/{ns}/trainjobs/{name}/{call}");
        crate::contract::check_answer("POST", &path, status, &answer);
        Ok((status, answer))
    }

    /// [`Self::status`] once, its transport error returned.
    pub async fn try_status(
        &self,
        token: &str,
        ns: &str,
        name: &str,
    ) -> Result<(u16, serde_json::Value), reqwest::Error> {
        let resp = self
            .http
            .get(format!(
                "{}/v1/namespaces/{ns}/trainjobs/{name}/status",
                self.base
            ))
            .bearer_auth(token)
            .send()
            .await?;
        let status = resp.status().as_u16();
        let answer = resp.json().await?;
        let path = format!("/v1/namespaces/{ns}/trainjobs/{name}/status");
        crate::contract::check_answer("GET", &path, status, &answer);
        Ok((status, answer))
    }

    /// `GET .../trainjobs/{name}/status` as the holder of `token`; the status and JSON body.
    pub async fn status(&self, token: &str, ns: &str, name: &str) -> (u16, serde_json::Value) {
        self.try_status(token, ns, name)
            .await
            .unwrap_or_else(|e| panic!("status through the Service: {e:#}"))
    }

    /// `POST /v1/nodes/{node}/fence` as the fencer of `token`; the status and JSON body.
    pub async fn fence(&self, token: &str, node: &str) -> (u16, serde_json::Value) {
        let resp = self
            .http
            .post(format!("{}/v1/nodes/{node}/fence", self.base))
            .bearer_auth(token)
            .json(&serde_json::json!({}))
            .send()
            .await
            .unwrap_or_else(|e| panic!("fence through the Service: {e:#}"));
        let status = resp.status().as_u16();
        let answer = resp.json().await.expect("a JSON body");
        crate::contract::check_answer("POST", &format!("/v1/nodes/{node}/fence"), status, &answer);
        (status, answer)
    }
}
