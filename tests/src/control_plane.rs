//! Start, reach and stop the local control plane.

use crate::binaries::{self, Binaries};
use crate::identity::Identity;
use crate::process::{Reaper, Supervised};
use anyhow::bail;
use holdfast_certs::{CertificateAuthority, IssuedCertificate};
use k8s_openapi::api::core::v1::Namespace;
use k8s_openapi::api::rbac::v1::{
    ClusterRole, ClusterRoleBinding, PolicyRule, RoleBinding, RoleRef, Subject,
};
use kube::api::{Api, ObjectMeta, PostParams};
use kube::config::{KubeConfigOptions, Kubeconfig};
use std::collections::{BTreeMap, HashMap};
use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::sync::{Mutex, OnceLock};
use std::time::{Duration, Instant};

/// The apiserver's `--request-timeout`: the bound a request on the wire may still commit in.
pub const APISERVER_REQUEST_TIMEOUT: Duration = Duration::from_secs(60);

/// ClusterRole given to [`Identity::User`] in each test namespace.
pub const TEST_USER_ROLE: &str = "holdfast-test-user";

/// How a control plane is started. The default is tiers 1–2: every process on the test
/// process's loopback. Tier 3 ([`crate::node`]) puts them in a network namespace of their
/// own and adds flags, certificate names, controllers and users for the node.
#[derive(Clone, Debug, Default)]
pub struct Options {
    /// Start every process inside a network and mount namespace of its own
    /// ([`crate::netns`]); the apiserver and etcd are reached through loopback forwarding.
    pub netns: Option<crate::netns::Spec>,
    /// More kube-apiserver flags (`--name=value`); each replaces a default of the same name.
    /// `{dir}` stands for the control plane's directory.
    pub apiserver_args: Vec<String>,
    /// Files written into the control plane's directory before the apiserver starts: (file
    /// name, contents); `{dir}` in the contents stands for that directory. E.g. an admission
    /// configuration giving the apiserver a client certificate for webhooks
    /// (`admission.yaml`, `webhook-kubeconfig.yaml`, and the flag
    /// `--admission-control-config-file={dir}/admission.yaml`).
    pub apiserver_files: Vec<(String, String)>,
    /// More names (DNS names or IPs) in the apiserver's serving certificate.
    pub serving_names: Vec<String>,
    /// More kube-controller-manager controllers.
    pub controllers: Vec<String>,
    /// More kube-controller-manager flags (`--name=value`), e.g. tier 3's shortened
    /// node-monitor timings.
    pub controller_manager_args: Vec<String>,
    /// More identities in the static token file: (slug for the kubeconfig file, user name,
    /// groups). [`ControlPlane::user_kubeconfig`] gives a kubeconfig for each.
    pub users: Vec<(String, String, Vec<String>)>,
}

/// A running etcd + kube-apiserver + kube-controller-manager on loopback.
pub struct ControlPlane {
    dir: PathBuf,
    /// `https://127.0.0.1:PORT`.
    pub server: String,
    /// etcd's client URL, `http://127.0.0.1:PORT`.
    etcd_url: String,
    ca: CertificateAuthority,
    tokens: BTreeMap<Identity, String>,
    procs: Mutex<Processes>,
    reaper: Mutex<Reaper>,
    binaries: Binaries,
    /// Tier 3's namespaces (dropped after the processes, which `stop` ends first).
    netns: Option<crate::netns::NetNs>,
    /// Tokens of [`Options::users`], by slug.
    user_tokens: BTreeMap<String, String>,
}

struct Processes {
    etcd: Supervised,
    apiserver: Supervised,
    controller_manager: Supervised,
    kueue: Option<Supervised>,
}

/// A free TCP port on loopback (bound and released).
pub fn free_port() -> anyhow::Result<u16> {
    let l = TcpListener::bind("127.0.0.1:0")?;
    Ok(l.local_addr()?.port())
}

fn random_token() -> String {
    use rand::RngExt;
    let mut rng = rand::rng();
    (0..32)
        .map(|_| format!("{:x}", rng.random_range(0..16u8)))
        .collect()
}

impl ControlPlane {
    /// The control plane shared by the tests of the calling file (a topic of the integration
    /// test binary), started on first use. Keyed by the caller's file, so one topic's
    /// cluster-scoped objects (webhook configurations, Kueue's queues) never reach another's
    /// tests; a helper that calls this for its callers is `#[track_caller]` itself.
    #[track_caller]
    pub fn shared() -> &'static ControlPlane {
        Self::shared_by(std::panic::Location::caller().file())
    }

    /// The shared control plane of topic `topic` (see [`ControlPlane::shared`]).
    pub fn shared_by(topic: &str) -> &'static ControlPlane {
        static SHARED: OnceLock<Mutex<HashMap<String, &'static OnceLock<ControlPlane>>>> =
            OnceLock::new();
        let cell: &'static OnceLock<ControlPlane> = {
            let mut planes = SHARED
                .get_or_init(Default::default)
                .lock()
                .unwrap_or_else(|poisoned| poisoned.into_inner());
            planes
                .entry(topic.to_string())
                .or_insert_with(|| Box::leak(Box::new(OnceLock::new())))
        };
        cell.get_or_init(|| {
            // Started on a thread of its own: callers are usually inside a tokio runtime.
            match std::thread::spawn(ControlPlane::start).join() {
                Ok(Ok(cp)) => cp,
                Ok(Err(e)) => panic!("the local control plane of {topic} did not start: {e:#}"),
                Err(_) => panic!("the local control plane of {topic} panicked while starting"),
            }
        })
    }

    /// Build or find the binaries, start everything, install the CRDs and test RBAC.
    pub fn start() -> anyhow::Result<ControlPlane> {
        Self::start_with(Options::default())
    }

    /// [`ControlPlane::start`] with [`Options`].
    pub fn start_with(opts: Options) -> anyhow::Result<ControlPlane> {
        let binaries = binaries::ensure()?;
        let dir = tempfile::Builder::new()
            .prefix("holdfast-cp-")
            .tempdir()?
            .keep();
        let reaper = Reaper::start(&dir)?;
        let group = reaper.group();
        let netns = match &opts.netns {
            Some(spec) => {
                let ns = crate::netns::NetNs::create(spec, &dir, group)?;
                // Run by the reaper at teardown, however the test binary ends.
                std::fs::write(dir.join("cleanup.sh"), ns.cleanup_script())?;
                Some(ns)
            }
            None => None,
        };
        let node_address = opts
            .netns
            .as_ref()
            .and_then(|s| s.address.split('/').next().map(str::to_owned));

        let ca =
            CertificateAuthority::generate("holdfast-test-ca", Duration::from_secs(7 * 24 * 3600))?;
        std::fs::write(dir.join("ca.crt"), ca.cert_pem())?;
        let mut names = vec![
            "127.0.0.1".to_string(),
            "localhost".into(),
            "kubernetes.default.svc".into(),
        ];
        names.extend(opts.serving_names.iter().cloned());
        let serving = ca.issue_serving(&names, Duration::from_secs(7 * 24 * 3600))?;
        std::fs::write(dir.join("apiserver.crt"), &serving.cert_pem)?;
        std::fs::write(dir.join("apiserver.key"), &serving.key_pem)?;
        let sa_key = rcgen::KeyPair::generate()?;
        std::fs::write(dir.join("sa.key"), sa_key.serialize_pem())?;
        std::fs::write(dir.join("sa.pub"), sa_key.public_key_pem())?;

        let mut tokens = BTreeMap::new();
        let mut csv = String::new();
        for id in Identity::ALL.into_iter().filter(|id| id.from_token_file()) {
            let t = random_token();
            csv.push_str(&format!(
                "{t},{},{},\"{}\"\n",
                id.username(),
                id.slug(),
                id.groups().join(",")
            ));
            tokens.insert(id, t);
        }
        let mut user_tokens = BTreeMap::new();
        for (slug, user, groups) in &opts.users {
            let t = random_token();
            csv.push_str(&format!("{t},{user},{slug},\"{}\"\n", groups.join(",")));
            user_tokens.insert(slug.clone(), t);
        }
        std::fs::write(dir.join("tokens.csv"), csv)?;
        // Every request is audited (metadata only), so tests can count what reached the
        // apiserver: requests sent after a deadline, writes to a snapshot, and so on.
        std::fs::write(
            dir.join("audit-policy.yaml"),
            "apiVersion: audit.k8s.io/v1\nkind: Policy\nomitStages: [RequestReceived]\nrules:\n- level: Metadata\n",
        )?;

        // In a namespace of their own, etcd and the apiserver listen on ports that are
        // forwarded from the same numbers on the host's loopback: one URL works on both sides.
        let (etcd_port, api_port) = match &netns {
            Some(ns) => (ns.forward_same_port()?, ns.forward_same_port()?),
            None => (free_port()?, free_port()?),
        };
        let peer_port = free_port()?;
        let server = format!("https://127.0.0.1:{api_port}");
        let etcd_url = format!("http://127.0.0.1:{etcd_port}");
        let peer_url = format!("http://127.0.0.1:{peer_port}");

        let etcd = launch(
            netns.as_ref(),
            "etcd",
            &binaries.bin("etcd"),
            vec![
                format!("--data-dir={}", dir.join("etcd").display()),
                format!("--listen-client-urls={etcd_url}"),
                format!("--advertise-client-urls={etcd_url}"),
                format!("--listen-peer-urls={peer_url}"),
                format!("--initial-advertise-peer-urls={peer_url}"),
                format!("--initial-cluster=default={peer_url}"),
                "--unsafe-no-fsync".into(),
                "--log-level=warn".into(),
            ],
            &[],
            &dir,
            group,
        )?;
        wait_etcd(etcd_port, &etcd)?;

        let d = |f: &str| dir.join(f).display().to_string();
        let in_dir = |s: &str| s.replace("{dir}", &dir.display().to_string());
        for (name, contents) in &opts.apiserver_files {
            std::fs::write(dir.join(name), in_dir(contents))?;
        }
        let mut apiserver_args = vec![
            format!("--etcd-servers={etcd_url}"),
            // Inside tier 3's namespace: every address there, the node's advertised.
            format!(
                "--bind-address={}",
                if netns.is_some() {
                    "0.0.0.0"
                } else {
                    "127.0.0.1"
                }
            ),
            format!(
                "--advertise-address={}",
                node_address.as_deref().unwrap_or("127.0.0.1")
            ),
            format!("--secure-port={api_port}"),
            format!("--tls-cert-file={}", d("apiserver.crt")),
            format!("--tls-private-key-file={}", d("apiserver.key")),
            format!("--client-ca-file={}", d("ca.crt")),
            format!("--token-auth-file={}", d("tokens.csv")),
            "--authorization-mode=RBAC".into(),
            "--service-account-issuer=https://kubernetes.default.svc.cluster.local".into(),
            "--api-audiences=https://kubernetes.default.svc.cluster.local".into(),
            format!("--service-account-key-file={}", d("sa.pub")),
            format!("--service-account-signing-key-file={}", d("sa.key")),
            "--service-cluster-ip-range=10.0.0.0/24".into(),
            "--endpoint-reconciler-type=none".into(),
            "--enable-priority-and-fairness=false".into(),
            format!("--request-timeout={}s", APISERVER_REQUEST_TIMEOUT.as_secs()),
            format!("--audit-policy-file={}", d("audit-policy.yaml")),
            format!("--audit-log-path={}", d("audit.log")),
            "--audit-log-mode=blocking".into(),
            "--audit-log-maxsize=0".into(),
            "--v=1".into(),
        ];
        // An extra flag replaces a default of the same name (list flags such as
        // --authorization-mode would otherwise accumulate).
        for extra in opts.apiserver_args.iter().map(|a| in_dir(a)) {
            let name = extra.split('=').next().unwrap_or_default().to_owned();
            apiserver_args.retain(|a| a.split('=').next() != Some(name.as_str()));
            apiserver_args.push(extra);
        }
        let apiserver = launch(
            netns.as_ref(),
            "kube-apiserver",
            &binaries.bin("kube-apiserver"),
            apiserver_args,
            &[],
            &dir,
            group,
        )?;

        let mut cp = ControlPlane {
            dir: dir.clone(),
            server: server.clone(),
            etcd_url: etcd_url.clone(),
            ca,
            tokens,
            procs: Mutex::new(Processes {
                etcd,
                apiserver,
                // Started once the CRDs exist, so the garbage collector knows them at once.
                controller_manager: placeholder(&dir, group)?,
                kueue: None,
            }),
            reaper: Mutex::new(reaper),
            binaries,
            netns,
            user_tokens,
        };
        for id in Identity::ALL.into_iter().filter(|id| id.from_token_file()) {
            cp.write_kubeconfig(id)?;
        }
        for (slug, token) in &cp.user_tokens {
            let text = cp.kubeconfig_yaml(slug, token, "default");
            std::fs::write(cp.user_kubeconfig(slug), text)?;
        }
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()?;
        for (id, token) in rt.block_on(cp.bootstrap())? {
            cp.tokens.insert(id, token);
            cp.write_kubeconfig(id)?;
        }

        let mut controllers = vec![
            "garbage-collector-controller".to_string(),
            "namespace-controller".into(),
            "serviceaccount-controller".into(),
        ];
        controllers.extend(opts.controllers.iter().cloned());
        let mut kcm_args = vec![
            format!(
                "--kubeconfig={}",
                cp.kubeconfig(Identity::ControllerManager).display()
            ),
            format!("--controllers={}", controllers.join(",")),
            "--use-service-account-credentials=true".into(),
            "--leader-elect=false".into(),
            "--secure-port=0".into(),
            format!("--root-ca-file={}", d("ca.crt")),
            // The token controller (tier 3) signs legacy tokens with the same key.
            format!("--service-account-private-key-file={}", d("sa.key")),
            "--v=1".into(),
        ];
        kcm_args.extend(opts.controller_manager_args.iter().cloned());
        let kcm = cp.spawn(
            "kube-controller-manager",
            &cp.binaries.bin("kube-controller-manager"),
            kcm_args,
        )?;
        lock(&cp.procs).controller_manager = kcm;
        rt.block_on(cp.wait_controller_manager())?;
        Ok(cp)
    }

    /// The process group the control plane's processes (and any started with it) join, so
    /// the reaper ends them all with the test binary.
    pub fn process_group(&self) -> i32 {
        lock(&self.reaper).group()
    }

    /// Start a process the way the control plane's own are: in its process group (ended with
    /// the test binary), logging to `{dir}/{name}.log`, and in tier 3's namespaces if it
    /// has them, with `env` added to its environment.
    pub fn spawn_env(
        &self,
        name: &str,
        program: &Path,
        args: Vec<String>,
        env: &[(String, String)],
    ) -> anyhow::Result<Supervised> {
        launch(
            self.netns.as_ref(),
            name,
            program,
            args,
            env,
            &self.dir,
            self.process_group(),
        )
    }

    /// [`ControlPlane::spawn_env`] without environment.
    pub fn spawn(
        &self,
        name: &str,
        program: &Path,
        args: Vec<String>,
    ) -> anyhow::Result<Supervised> {
        self.spawn_env(name, program, args, &[])
    }

    /// Tier 3's namespaces, if the control plane runs in them.
    pub fn netns(&self) -> Option<&crate::netns::NetNs> {
        self.netns.as_ref()
    }

    /// The built control-plane binaries and CRDs.
    pub fn binaries(&self) -> &Binaries {
        &self.binaries
    }

    /// Path of the kubeconfig of one of [`Options::users`], by its slug.
    pub fn user_kubeconfig(&self, slug: &str) -> PathBuf {
        self.dir.join(format!("kubeconfig-{slug}.yaml"))
    }

    /// etcd's client URL (`http://127.0.0.1:PORT`, no TLS): its gRPC gateway serves the v3
    /// API as JSON (`/v3/kv/range`, `/v3/kv/compaction`), for fault tests.
    pub fn etcd_url(&self) -> &str {
        &self.etcd_url
    }

    /// The temporary directory holding logs, certificates and kubeconfigs.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// The CA that signed the apiserver's certificate; it also signs test webhooks' certificates.
    pub fn ca_pem(&self) -> &str {
        self.ca.cert_pem()
    }

    /// A serving certificate from the control plane's CA (for webhooks registered by URL).
    pub fn issue_serving_cert(
        &self,
        names: &[&str],
        valid_for: Duration,
    ) -> anyhow::Result<IssuedCertificate> {
        let names: Vec<String> = names.iter().map(|s| s.to_string()).collect();
        Ok(self.ca.issue_serving(&names, valid_for)?)
    }

    /// The bearer token of an identity.
    pub fn token(&self, id: Identity) -> &str {
        self.tokens.get(&id).map(String::as_str).unwrap_or_default()
    }

    /// Path of a kubeconfig that acts as `id`.
    pub fn kubeconfig(&self, id: Identity) -> PathBuf {
        self.dir.join(format!("kubeconfig-{}.yaml", id.slug()))
    }

    fn write_kubeconfig(&self, id: Identity) -> anyhow::Result<()> {
        let text = self.kubeconfig_yaml(id.slug(), self.token(id), "default");
        std::fs::write(self.kubeconfig(id), text)?;
        Ok(())
    }

    /// A kubeconfig for this control plane that authenticates with bearer `token` (as user
    /// `user` of the file) in namespace `namespace`.
    pub fn kubeconfig_yaml(&self, user: &str, token: &str, namespace: &str) -> String {
        self.kubeconfig_yaml_with(user, &format!("    token: {token}\n"), namespace)
    }

    /// A kubeconfig for this control plane whose user `user` has the credentials `user_yaml`
    /// (the lines under `user:`, indented four spaces: a token, a client certificate, an exec
    /// plugin), in namespace `namespace`.
    pub fn kubeconfig_yaml_with(&self, user: &str, user_yaml: &str, namespace: &str) -> String {
        format!(
            "apiVersion: v1\nkind: Config\nclusters:\n- name: holdfast-local\n  cluster:\n    server: {server}\n    certificate-authority: {ca}\nusers:\n- name: {user}\n  user:\n{user_yaml}contexts:\n- name: {user}\n  context:\n    cluster: holdfast-local\n    user: {user}\n    namespace: {namespace}\ncurrent-context: {user}\n",
            server = self.server,
            ca = self.dir.join("ca.crt").display(),
        )
    }

    /// A client certificate for user `common_name` from the CA the apiserver trusts for
    /// clients (`--client-ca-file`).
    pub fn issue_client_cert(
        &self,
        common_name: &str,
        valid_for: Duration,
    ) -> anyhow::Result<IssuedCertificate> {
        Ok(self.ca.issue_client(common_name, valid_for)?)
    }

    /// A client acting as `id`, bound to the calling tokio runtime.
    pub async fn client(&self, id: Identity) -> anyhow::Result<kube::Client> {
        let kc = Kubeconfig::read_from(self.kubeconfig(id))?;
        let cfg = kube::Config::from_custom_kubeconfig(kc, &KubeConfigOptions::default()).await?;
        Ok(kube::Client::try_from(cfg)?)
    }

    /// A client that authenticates as ServiceAccount `namespace/name` with a token from the
    /// TokenRequest API (valid for an hour), as a pod of that account would.
    pub async fn service_account_client(
        &self,
        namespace: &str,
        name: &str,
    ) -> anyhow::Result<kube::Client> {
        let admin = self.client(Identity::Admin).await?;
        let token = crate::rbac::mint_token(&admin, namespace, name, 3600).await?;
        let text = self.kubeconfig_yaml("sa", &token, namespace);
        let kc = Kubeconfig::from_yaml(&text)?;
        let cfg = kube::Config::from_custom_kubeconfig(kc, &KubeConfigOptions::default()).await?;
        Ok(kube::Client::try_from(cfg)?)
    }

    /// A fresh namespace `{prefix}-{random}` in which [`Identity::User`] may edit ConfigMaps,
    /// TrainJobs and Pods, and holdfast's controller has the chart's release-namespace Role
    /// (its Lease), as if the test's namespace were the release's.
    pub async fn namespace(&self, prefix: &str) -> anyhow::Result<String> {
        let client = self.client(Identity::Admin).await?;
        let name = format!("{prefix}-{}", &random_token()[..8]);
        let ns = Namespace {
            metadata: ObjectMeta {
                name: Some(name.clone()),
                ..Default::default()
            },
            ..Default::default()
        };
        Api::<Namespace>::all(client.clone())
            .create(&PostParams::default(), &ns)
            .await?;
        let rb = RoleBinding {
            metadata: ObjectMeta {
                name: Some("test-user".into()),
                namespace: Some(name.clone()),
                ..Default::default()
            },
            role_ref: RoleRef {
                api_group: Some("rbac.authorization.k8s.io".into()),
                kind: "ClusterRole".into(),
                name: TEST_USER_ROLE.into(),
            },
            subjects: Some(vec![Subject {
                kind: "User".into(),
                name: Identity::User.username().into(),
                api_group: Some("rbac.authorization.k8s.io".into()),
                ..Default::default()
            }]),
        };
        Api::<RoleBinding>::namespaced(client.clone(), &name)
            .create(&PostParams::default(), &rb)
            .await?;
        crate::rbac::grant_release_roles_in(&client, &name).await?;
        Ok(name)
    }

    /// Install more CRDs (e.g. a test-only runtime kind) and wait until they are served.
    pub async fn install_crds(&self, yaml: &str) -> anyhow::Result<()> {
        let client = self.client(Identity::Admin).await?;
        crate::crds::install(&client, crate::crds::parse(yaml)?).await
    }

    /// Every audit event the apiserver has written so far (one JSON object per request, at
    /// stage ResponseComplete or Panic), oldest first.
    pub fn audit_events(&self) -> anyhow::Result<Vec<serde_json::Value>> {
        self.audit_events_where(|_| true)
    }

    /// The audit events whose raw line passes `keep` (e.g. contains a user name): a large
    /// log is read line by line and only the kept lines are parsed.
    pub fn audit_events_where(
        &self,
        keep: impl Fn(&str) -> bool,
    ) -> anyhow::Result<Vec<serde_json::Value>> {
        use std::io::BufRead;
        let file = std::fs::File::open(self.dir.join("audit.log"))?;
        let mut out = Vec::new();
        for line in std::io::BufReader::new(file).lines() {
            let line = line?;
            if keep(&line)
                && let Ok(v) = serde_json::from_str(&line)
            {
                out.push(v);
            }
        }
        Ok(out)
    }

    /// Every audit event, once every request made before this call is in the log: a sentinel
    /// request is made now and awaited in the log (the apiserver writes it in blocking mode,
    /// but a request still in flight is logged when it ends).
    pub async fn settled_audit_events(&self) -> anyhow::Result<Vec<serde_json::Value>> {
        let admin = self.client(Identity::Admin).await?;
        let sentinel = format!("audit-sentinel-{}", random_token());
        let _ = Api::<k8s_openapi::api::core::v1::ConfigMap>::namespaced(admin, "default")
            .get_opt(&sentinel)
            .await;
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            let events = self.audit_events()?;
            if events.iter().any(|e| {
                e.pointer("/objectRef/name")
                    .and_then(serde_json::Value::as_str)
                    == Some(&sentinel)
            }) {
                return Ok(events);
            }
            if Instant::now() > deadline {
                bail!("the audit log did not show the sentinel request {sentinel} within 20s");
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    /// Tier 2: start the real Kueue controller (once; later calls return at once) with the
    /// TrainJob integration, its webhooks registered by URL. holdfast's accounts get the
    /// chart's kueue-mode roles first.
    pub async fn start_kueue(&self) -> anyhow::Result<()> {
        static STARTING: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());
        let _one = STARTING.lock().await;
        if lock(&self.procs).kueue.is_some() {
            return Ok(());
        }
        // The chart's kueue-mode rules (Workloads, AdmissionChecks) for holdfast's accounts.
        let admin = self.client(Identity::Admin).await?;
        crate::rbac::install_holdfast_rbac(&admin, "kueue").await?;
        let proc = crate::kueue::start(
            self,
            &self.binaries.bin("kueue"),
            &self.binaries.dir.join("crds").join("kueue-webhooks.yaml"),
        )
        .await?;
        lock(&self.procs).kueue = Some(proc);
        Ok(())
    }

    /// Kill Kueue (SIGKILL) and start it again with the same flags — for fault tests.
    pub fn restart_kueue(&self) -> anyhow::Result<()> {
        match lock(&self.procs).kueue.as_mut() {
            Some(k) => k.restart(),
            None => bail!("kueue was never started"),
        }
    }

    /// Kill Kueue (SIGKILL) and leave it down until [`ControlPlane::restart_kueue`] starts
    /// it again — for fault tests. While it is down its webhooks refuse what they cover.
    pub fn stop_kueue(&self) -> anyhow::Result<()> {
        match lock(&self.procs).kueue.as_mut() {
            Some(k) => {
                k.kill();
                Ok(())
            }
            None => bail!("kueue was never started"),
        }
    }

    /// Kill the apiserver (SIGKILL) — for fault tests.
    pub fn stop_apiserver(&self) {
        lock(&self.procs).apiserver.kill();
    }

    /// Start the apiserver again with the same flags and wait until it is ready.
    pub async fn restart_apiserver(&self) -> anyhow::Result<()> {
        lock(&self.procs).apiserver.restart()?;
        self.wait_ready().await
    }

    /// Kill etcd (SIGKILL) and start it again on the same data directory and port, then wait
    /// until it is healthy — for fault tests (stop the apiserver first for a whole-cluster
    /// outage).
    pub async fn restart_etcd(&self) -> anyhow::Result<()> {
        lock(&self.procs).etcd.restart()?;
        let health = format!("{}/health", self.etcd_url);
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            if let Ok(r) = reqwest::get(&health).await
                && r.text()
                    .await
                    .is_ok_and(|t| t.contains("\"health\":\"true\""))
            {
                return Ok(());
            }
            if Instant::now() > deadline {
                bail!(
                    "etcd not healthy 60s after its restart:\n{}",
                    self.log_tail("etcd", 30)
                );
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// The last lines of a component's log (`etcd`, `kube-apiserver`, `kube-controller-manager`).
    pub fn log_tail(&self, component: &str, lines: usize) -> String {
        let p = lock(&self.procs);
        match component {
            "etcd" => p.etcd.log_tail(lines),
            "kube-apiserver" => p.apiserver.log_tail(lines),
            "kueue" => p
                .kueue
                .as_ref()
                .map(|k| k.log_tail(lines))
                .unwrap_or_default(),
            _ => p.controller_manager.log_tail(lines),
        }
    }

    async fn wait_ready(&self) -> anyhow::Result<()> {
        let start = Instant::now();
        let mut last = String::new();
        while start.elapsed() < Duration::from_secs(120) {
            if !lock(&self.procs).apiserver.running() {
                bail!(
                    "kube-apiserver exited:\n{}",
                    self.log_tail("kube-apiserver", 30)
                );
            }
            if let Ok(client) = self.client(Identity::Admin).await {
                let req = http::Request::get("/readyz").body(Vec::new())?;
                match client.request_text(req).await {
                    Ok(t) if t.trim() == "ok" => return Ok(()),
                    Ok(t) => last = t,
                    Err(e) => last = e.to_string(),
                }
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
        bail!(
            "kube-apiserver not ready after 120s ({last}):\n{}",
            self.log_tail("kube-apiserver", 30)
        )
    }

    /// CRDs, RBAC (holdfast's from the chart), and the tokens of holdfast's ServiceAccounts.
    async fn bootstrap(&self) -> anyhow::Result<Vec<(Identity, String)>> {
        self.wait_ready().await?;
        let client = self.client(Identity::Admin).await?;
        for group in ["trainer", "jobset", "kueue"] {
            let crds = crate::crds::read_dir(&self.binaries.crd_dir().join(group))?;
            crate::crds::install(&client, crds).await?;
        }
        // holdfast's controller and webhook get exactly the chart's roles, and tokens of its
        // ServiceAccounts (see `crate::rbac`). Kueue and Trainer, whose RBAC is not ours to
        // test, act as cluster-admin; the plain user gets a namespaced role only.
        crate::rbac::install_holdfast_rbac(&client, "plain").await?;
        let mut minted = Vec::new();
        for id in [Identity::Controller, Identity::Webhook] {
            let (ns, sa) = id
                .username()
                .strip_prefix("system:serviceaccount:")
                .and_then(|rest| rest.split_once(':'))
                .ok_or_else(|| anyhow::anyhow!("{id:?} is not a service account"))?;
            let token = crate::rbac::mint_token(&client, ns, sa, 48 * 3600).await?;
            minted.push((id, token));
        }
        let crbs: Api<ClusterRoleBinding> = Api::all(client.clone());
        for id in [Identity::Kueue, Identity::Trainer] {
            let crb = ClusterRoleBinding {
                metadata: ObjectMeta {
                    name: Some(format!("holdfast-test-{}", id.slug())),
                    ..Default::default()
                },
                role_ref: RoleRef {
                    api_group: Some("rbac.authorization.k8s.io".into()),
                    kind: "ClusterRole".into(),
                    name: "cluster-admin".into(),
                },
                subjects: Some(vec![Subject {
                    kind: "User".into(),
                    name: id.username().into(),
                    api_group: Some("rbac.authorization.k8s.io".into()),
                    ..Default::default()
                }]),
            };
            crbs.create(&PostParams::default(), &crb).await?;
        }
        let rule = |groups: &[&str], resources: &[&str]| PolicyRule {
            api_groups: Some(groups.iter().map(|s| s.to_string()).collect()),
            resources: Some(resources.iter().map(|s| s.to_string()).collect()),
            verbs: [
                "get",
                "list",
                "watch",
                "create",
                "update",
                "patch",
                "delete",
                "deletecollection",
            ]
            .iter()
            .map(|s| s.to_string())
            .collect(),
            ..Default::default()
        };
        let role = ClusterRole {
            metadata: ObjectMeta {
                name: Some(TEST_USER_ROLE.into()),
                ..Default::default()
            },
            rules: Some(vec![
                rule(&[""], &["configmaps", "pods"]),
                rule(
                    &["trainer.kubeflow.org"],
                    &["trainjobs", "trainingruntimes"],
                ),
                rule(&["kueue.x-k8s.io"], &["workloads"]),
            ]),
            ..Default::default()
        };
        Api::<ClusterRole>::all(client)
            .create(&PostParams::default(), &role)
            .await?;
        Ok(minted)
    }

    async fn wait_controller_manager(&self) -> anyhow::Result<()> {
        // The service-account controller creates `default` in kube-system once it runs.
        let client = self.client(Identity::Admin).await?;
        let sas: Api<k8s_openapi::api::core::v1::ServiceAccount> =
            Api::namespaced(client, "kube-system");
        let start = Instant::now();
        while start.elapsed() < Duration::from_secs(120) {
            if !lock(&self.procs).controller_manager.running() {
                bail!(
                    "kube-controller-manager exited:\n{}",
                    self.log_tail("kube-controller-manager", 30)
                );
            }
            if sas.get_opt("default").await?.is_some() {
                return Ok(());
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
        bail!(
            "kube-controller-manager not working after 120s:\n{}",
            self.log_tail("kube-controller-manager", 30)
        )
    }

    /// Stop every process and remove the directory.
    pub fn stop(&self) {
        {
            let mut p = lock(&self.procs);
            if let Some(k) = p.kueue.as_mut() {
                k.kill();
            }
            p.controller_manager.kill();
            p.apiserver.kill();
            p.etcd.kill();
        }
        lock(&self.reaper).finish(&self.dir);
        if let Some(ns) = self.netns.as_ref() {
            ns.stop();
        }
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

impl Drop for ControlPlane {
    fn drop(&mut self) {
        self.stop();
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// Start a process in `group`, logging to `dir/{name}.log` — inside `netns` if given.
fn launch(
    netns: Option<&crate::netns::NetNs>,
    name: &str,
    program: &Path,
    args: Vec<String>,
    env: &[(String, String)],
    dir: &Path,
    group: i32,
) -> anyhow::Result<Supervised> {
    match netns {
        Some(ns) => {
            let (program, args) = ns.wrap(program, args, env);
            Supervised::start(name, &program, args, dir, group)
        }
        None if env.is_empty() => Supervised::start(name, program, args, dir, group),
        None => {
            let mut all: Vec<String> = env.iter().map(|(k, v)| format!("{k}={v}")).collect();
            all.push(program.display().to_string());
            all.extend(args);
            Supervised::start(name, Path::new("env"), all, dir, group)
        }
    }
}

/// A stand-in process slot until kube-controller-manager starts (`true` exits at once).
fn placeholder(dir: &Path, group: i32) -> anyhow::Result<Supervised> {
    Supervised::start("placeholder", Path::new("/bin/true"), vec![], dir, group)
}

fn wait_etcd(port: u16, etcd: &Supervised) -> anyhow::Result<()> {
    let start = Instant::now();
    while start.elapsed() < Duration::from_secs(60) {
        if let Ok(mut s) = TcpStream::connect(("127.0.0.1", port)) {
            let _ = s.set_read_timeout(Some(Duration::from_secs(2)));
            let _ = s.write_all(b"GET /health HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n");
            let mut buf = String::new();
            let _ = s.read_to_string(&mut buf);
            if buf.contains("\"health\":\"true\"") {
                return Ok(());
            }
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    bail!("etcd not healthy after 60s:\n{}", etcd.log_tail(30))
}
