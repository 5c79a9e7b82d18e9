//! Tier 3 smoke tests: a real node (containerd, runc, CNI, kubelet, kube-scheduler,
//! kube-proxy) with the real JobSet and Trainer controllers, one cluster shared by the tests of
//! this module (`NodeCluster::shared`).
//!
//! Opt-in: the node takes minutes to build the first time, so these tests are ignored unless
//! asked for:
//!
//! ```sh
//! cargo test -p holdfast-tests --test it -- --ignored node:: --test-threads 1
//! ```

mod chart;
mod kep;
mod kueue;
mod pods;
mod writers;

use futures::{AsyncBufReadExt, StreamExt};
use holdfast_tests::Identity;
use holdfast_tests::node::{NodeCluster, jobset_resource};
use holdfast_tests::objects::trainer_resource;
use holdfast_tests::wait::wait_for;
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::Pod;
use kube::api::{
    Api, DeleteParams, DynamicObject, ListParams, LogParams, Patch, PatchParams, PostParams,
};
use std::time::{Duration, Instant};

pub(super) fn is_running(p: &Pod) -> bool {
    p.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Running")
        && p.status
            .as_ref()
            .and_then(|s| s.container_statuses.as_ref())
            .is_some_and(|cs| cs.iter().all(|c| c.ready))
}

/// The `workload: config {...}` line of a pod's log, parsed.
pub(super) async fn config_of(pods: &Api<Pod>, name: &str, container: &str) -> serde_json::Value {
    wait_for(
        "the workload's config line",
        Duration::from_secs(30),
        || async {
            let log = pods
                .logs(
                    name,
                    &LogParams {
                        container: Some(container.into()),
                        ..Default::default()
                    },
                )
                .await
                .ok()?;
            let line = log
                .lines()
                .find_map(|l| l.strip_prefix("workload: config "))?;
            serde_json::from_str(line).ok()
        },
    )
    .await
}

pub(super) fn training_runtime(name: &str, image: &str) -> serde_json::Value {
    serde_json::json!({
        "apiVersion": "trainer.kubeflow.org/v1alpha1",
        "kind": "TrainingRuntime",
        "metadata": {"name": name, "labels": {"trainer.kubeflow.org/framework": "torch"}},
        "spec": {
            "mlPolicy": {"numNodes": 1, "torch": {}},
            "template": {"spec": {"replicatedJobs": [{
                "name": "node",
                "template": {
                    "metadata": {"labels": {"trainer.kubeflow.org/trainjob-ancestor-step": "trainer"}},
                    "spec": {"template": {"spec": {
                        "terminationGracePeriodSeconds": 30,
                        "containers": [{
                            "name": "node",
                            "image": image,
                            "imagePullPolicy": "Never",
                            "env": [
                                {"name": "WORKLOAD_TERM_GRACE_SECONDS", "value": "1"},
                                {"name": "WORKLOAD_MARK", "value": format!("runtime-{name}")}
                            ]
                        }]
                    }}}
                }
            }]}}
        }
    })
}

pub(super) async fn running_pods(pods: &Api<Pod>, jobset: &str) -> Vec<Pod> {
    let lp = ListParams::default().labels(&format!("jobset.sigs.k8s.io/jobset-name={jobset}"));
    pods.list(&lp).await.map(|l| l.items).unwrap_or_default()
}

/// Every pod in `ps` Running, and none of them one of `old` (uids): a new set replaced them.
pub(super) fn all_running_and_new(ps: &[Pod], old: &[String]) -> bool {
    ps.iter().all(is_running)
        && ps
            .iter()
            .all(|p| !old.contains(p.metadata.uid.as_ref().unwrap_or(&String::new())))
}

/// The pods of `jobset`'s next execution, once there are some, all Running and none of `old`
/// (the previous execution's uids); panics after `within`.
pub(super) async fn next_execution(
    pods: &Api<Pod>,
    jobset: &str,
    old: &[String],
    within: Duration,
) -> Vec<Pod> {
    wait_for("the second execution Running", within, || async {
        let ps = running_pods(pods, jobset).await;
        (!ps.is_empty() && all_running_and_new(&ps, old)).then_some(ps)
    })
    .await
}

pub(super) fn owner_kind(meta: &kube::api::ObjectMeta) -> Option<(String, String)> {
    meta.owner_references
        .as_ref()?
        .iter()
        .find(|o| o.controller == Some(true))
        .map(|o| (o.kind.clone(), o.name.clone()))
}

/// holdfast's image, built from the Dockerfile's recipe (cached) and imported into the node:
/// its archive and its `repository:tag` reference.
pub(super) fn holdfast_image(cluster: &NodeCluster) -> (std::path::PathBuf, String) {
    let script = holdfast_tests::binaries::cluster_module_dir().join("node/holdfast-image.sh");
    let image_dir = holdfast_tests::binaries::run_build_script(&script).expect("holdfast image");
    let archive = image_dir.join("image.tar");
    let reference = std::fs::read_to_string(image_dir.join("image.ref")).expect("ref");
    cluster.import_image(&archive).expect("import");
    (archive, reference.trim().to_owned())
}

/// The pods of namespace `ns`, each with its phase and container states: what a failed
/// install or rollout is explained by.
pub(super) async fn pod_states(admin: &kube::Client, ns: &str) -> Vec<String> {
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

/// The last lines of each of holdfast's controller pods' logs in `ns`.
pub(super) async fn controller_logs(admin: &kube::Client, ns: &str) -> Vec<String> {
    let pods: Api<Pod> = Api::namespaced(admin.clone(), ns);
    let mut out = Vec::new();
    let list = pods
        .list(&ListParams::default().labels("app.kubernetes.io/component=controller"))
        .await
        .map(|l| l.items)
        .unwrap_or_default();
    for p in list {
        let name = p.metadata.name.unwrap_or_default();
        let log = pods
            .logs(
                &name,
                &LogParams {
                    tail_lines: Some(15),
                    ..Default::default()
                },
            )
            .await
            .unwrap_or_else(|e| format!("no log: {e}"));
        out.push(format!("{name}:\n{log}"));
    }
    out
}

/// A release of the chart installed on the node from the local image (`helm install --wait`).
/// Dropped while still installed, it is uninstalled, so a failing test leaves no webhook of
/// its own guarding the next test's writes.
pub(super) struct ChartRelease {
    helm: holdfast_tests::helm::Helm,
    name: String,
    namespace: String,
    kubeconfig: String,
    image: (String, String),
    installed: bool,
}

impl ChartRelease {
    /// `helm install` of release `name` in `namespace` with `sets` besides the image's.
    pub(super) async fn install(
        cluster: &NodeCluster,
        name: &str,
        namespace: &str,
        sets: &[&str],
    ) -> Self {
        let (_, reference) = holdfast_image(cluster);
        let (repository, tag) = reference.rsplit_once(':').expect("tag");
        let mut release = ChartRelease {
            helm: holdfast_tests::helm::ensure().expect("helm"),
            name: name.to_owned(),
            namespace: namespace.to_owned(),
            kubeconfig: cluster.kubeconfig(Identity::Admin).display().to_string(),
            image: (repository.to_owned(), tag.to_owned()),
            installed: false,
        };
        let started = Instant::now();
        let out = release.helm_run("install", &["--create-namespace"], sets);
        release.installed = out.is_ok();
        release.explain(cluster, "helm install", out).await;
        eprintln!(
            "helm install {name} ({sets:?}) --wait took {:?}",
            started.elapsed()
        );
        release
    }

    /// `helm upgrade` with `sets` (the image's are always set; nothing is reused).
    async fn upgrade(&self, cluster: &NodeCluster, sets: &[&str]) {
        let out = self.helm_run("upgrade", &[], sets);
        self.explain(cluster, "helm upgrade", out).await;
    }

    /// `helm uninstall`, as the chart README says (without `--wait`: a kueue-mode
    /// AdmissionCheck stays until no ClusterQueue names it, Kueue's finalizer says).
    pub(super) fn uninstall(&mut self) -> anyhow::Result<String> {
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

    fn helm_run(&self, verb: &str, extra: &[&str], sets: &[&str]) -> anyhow::Result<String> {
        let mut args: Vec<String> = [
            verb,
            &self.name,
            &holdfast_tests::helm::chart_dir().display().to_string(),
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
        // The tag is a content hash that can be all digits: as a string, or helm reads a
        // number (which the chart's schema refuses).
        args.push("--set-string".into());
        args.push(format!("image.tag={}", self.image.1));
        let image = [
            format!("image.repository={}", self.image.0),
            "image.pullPolicy=Never".to_owned(),
        ];
        for s in image.iter().map(String::as_str).chain(sets.iter().copied()) {
            args.push("--set".into());
            args.push(s.to_owned());
        }
        self.helm.run(&args)
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

    /// The chart's names for this release (`<fullname>`): the release name, or
    /// `<release>-holdfast`.
    pub(super) fn fullname(&self) -> String {
        if self.name.contains("holdfast") {
            self.name.clone()
        } else {
            format!("{}-holdfast", self.name)
        }
    }

    /// A client of the hold API through the controller's Service, as a caller inside the
    /// cluster reaches it: by the Service's DNS name, verified against the CA the controller
    /// issued its serving certificate from.
    pub(super) async fn hold_api(&self, cluster: &NodeCluster) -> ServiceHoldApi {
        use k8s_openapi::api::core::v1::{Secret, Service};
        holdfast_serve::install_crypto_provider();
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
        let local = cluster
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
        let host = format!("{service}.{}.svc", self.namespace);
        let http = reqwest::Client::builder()
            .add_root_certificate(reqwest::Certificate::from_pem(&ca.0).expect("CA"))
            .resolve(&host, std::net::SocketAddr::from(([127, 0, 0, 1], local)))
            .timeout(Duration::from_secs(90))
            .build()
            .expect("http client");
        ServiceHoldApi {
            base: format!("https://{host}:{local}"),
            http,
        }
    }
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
pub(super) struct ServiceHoldApi {
    base: String,
    http: reqwest::Client,
}

impl ServiceHoldApi {
    /// `POST .../trainjobs/{name}/{call}` as the holder of `token`; the status and JSON body.
    pub(super) async fn call(
        &self,
        token: &str,
        ns: &str,
        name: &str,
        call: &str,
        instance: Option<u64>,
    ) -> (u16, serde_json::Value) {
        let deadline = jiff::Timestamp::now() + jiff::SignedDuration::from_secs(60);
        let mut body = serde_json::json!({"deadline": deadline.to_string(), "reason": "node lost"});
        if let Some(i) = instance {
            body["instance"] = i.into();
        }
        let resp = self
            .http
            .post(format!(
                "{}/v1/namespaces/{ns}/trainjobs/{name}/{call}",
                self.base
            ))
            .bearer_auth(token)
            .json(&body)
            .send()
            .await
            .unwrap_or_else(|e| panic!("{call} through the Service: {e:#}"));
        let status = resp.status().as_u16();
        (status, resp.json().await.expect("a JSON body"))
    }
}

/// A user's edit of job `job`'s snapshot (through `cms`, a user's client) is refused by
/// holdfast's webhook, called by the apiserver through its Service.
pub(super) async fn snapshot_edit_is_refused(
    cms: &Api<k8s_openapi::api::core::v1::ConfigMap>,
    job: &str,
) {
    let edit = cms
        .patch(
            &format!("{job}-runtime-snapshot"),
            &PatchParams::default(),
            &Patch::Merge(serde_json::json!({"metadata": {"labels": {"edited": "yes"}}})),
        )
        .await;
    match edit {
        Err(kube::Error::Api(s)) => assert!(
            s.message
                .contains("validate.holdfast.dev\" denied the request"),
            "refused by holdfast's webhook: {}",
            s.message
        ),
        other => panic!("a user's snapshot edit was not refused: {other:?}"),
    }
}
