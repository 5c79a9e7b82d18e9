//! Tier 3: a real node. The control plane of [`ControlPlane`] plus containerd, runc, CNI
//! bridge networking, kubelet, kube-scheduler and kube-proxy, and the real JobSet and
//! Kubeflow Trainer controllers — all inside a network and mount namespace of their own
//! ([`crate::netns`]), so pods are created, scheduled, run, terminated and deleted by the real
//! chain, and no packet of the cluster leaves that namespace.
//!
//! Addresses, all inside the namespace: the node is `10.10.0.1` (a veth inside), pods get
//! `10.244.0.0/24` on the bridge `cni0`, Services `10.0.0.0/24` (kube-proxy, iptables mode).
//! The apiserver listens on every address there; the test process reaches it (and etcd) on
//! the same port of its own loopback, and anything else inside through
//! [`NodeCluster::forward`].
//!
//! JobSet and Trainer run as processes on the node's address, not as pods: no image of theirs
//! can be pulled here, and as processes they can be killed, restarted and read like the
//! control plane's own. Their webhooks are registered as their manifests register them —
//! through their Services (`jobset-system/jobset-webhook-service`,
//! `kubeflow-trainer-controller-manager` in `kubeflow-system`), which here have no selector and
//! an EndpointSlice naming the node's address — with certificates from the harness's CA
//! instead of their own certificate rotators. The node runs Trainer's current controller
//! manager; [`NodeCluster::switch_trainer`] replaces it with the previous version the node build
//! also has (v2.2.1) or back, for upgrade and rollback tests.
//!
//! Teardown ends every process (containerd's shims and the pods' processes too, which leave
//! the process group), removes the cgroups under the node's own cgroup root, and the
//! namespaces go with their last process, taking every mount made in them along.

use crate::binaries::run_build_script;
use crate::control_plane::{ControlPlane, Options};
use crate::identity::Identity;
use crate::netns::Spec;
use crate::process::Supervised;
use anyhow::{Context, bail};
use k8s_openapi::api::core::v1::Node;
use kube::api::{Api, DynamicObject, PostParams};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::{Mutex, OnceLock};
use std::time::{Duration, Instant};

/// The node's name.
pub const NODE_NAME: &str = "holdfast-node";
/// The node's address inside the namespace.
pub const NODE_IP: &str = "10.10.0.1";
/// The pods' subnet.
pub const POD_SUBNET: &str = "10.244.0.0/24";
/// The Services' subnet (the control plane's `--service-cluster-ip-range`).
pub const SERVICE_SUBNET: &str = "10.0.0.0/24";
/// The `kubernetes` Service's address.
pub const KUBERNETES_SERVICE_IP: &str = "10.0.0.1";

const TRAINER_WEBHOOK_PORT: u16 = 9443;
const JOBSET_WEBHOOK_PORT: u16 = 9444;
const TRAINER_HEALTH_PORT: u16 = 8081;
const JOBSET_HEALTH_PORT: u16 = 8082;

/// How many extra nodes one cluster may add ([`crate::extra_node`]): each has an identity in
/// the token file, made at start, and names are never reused.
pub const EXTRA_NODES: usize = 8;

/// The `i`th extra node's name.
pub fn extra_node_name(i: usize) -> String {
    format!("{NODE_NAME}-{}", i + 2)
}

/// The identities of the extra nodes' kubelets (`system:node:<name>`, group `system:nodes`:
/// the Node authorizer and NodeRestriction judge them as any kubelet), for the control plane's
/// token file: (slug, user, groups).
pub fn extra_node_identities() -> Vec<(String, String, Vec<String>)> {
    (0..EXTRA_NODES)
        .map(|i| {
            (
                format!("node-{}", extra_node_name(i)),
                format!("system:node:{}", extra_node_name(i)),
                vec![s("system:nodes"), s("system:authenticated")],
            )
        })
        .collect()
}

/// What differs between two kubelets of the cluster ([`NodeCluster::run_kubelet`]).
pub(crate) struct KubeletSpec<'a> {
    /// The process's name (its log: `{name}.log`).
    pub process: &'a str,
    pub node_name: &'a str,
    /// Its address inside the namespace: it serves there, and the apiserver reaches it there.
    pub ip: &'a str,
    /// The slug of its identity among the control plane's users (`system:node:<node_name>`).
    pub identity: &'a str,
    /// Its cgroup root, relative (`holdfast-node-<pid>` or below it).
    pub cgroup_root: &'a str,
    /// Its containerd's socket.
    pub socket: PathBuf,
    pub root_dir: PathBuf,
    /// Where it has containerd write its pods' logs (`podLogsDir`): a directory of its own,
    /// since a kubelet removes the log directories of pods it does not know.
    pub pod_logs: PathBuf,
    /// 0: none.
    pub healthz_port: u16,
    pub labels: &'a [(&'a str, &'a str)],
    /// `registerWithTaints`.
    pub taints: serde_json::Value,
}

/// kube-controller-manager's `--node-monitor-grace-period` in tier 3 (the default is 50 s): a
/// node whose kubelet has not renewed its lease for that long goes `Ready: Unknown` and gets the
/// `node.kubernetes.io/unreachable` taints, so lost-node tests take seconds. The kubelets
/// renew every 2.5 s.
pub const NODE_MONITOR_GRACE: Duration = Duration::from_secs(20);

/// Which Trainer controller manager the node runs: the version of `versions.env`'s
/// `TRAINER_VERSION` (the default), or `TRAINER_PREVIOUS_VERSION`, for upgrade and rollback
/// tests.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TrainerRelease {
    Current,
    Previous,
}

/// The node's cached build (`tests/cluster/node/build.sh`).
#[derive(Clone, Debug)]
pub struct NodeBinaries {
    pub dir: PathBuf,
}

impl NodeBinaries {
    pub fn bin(&self, name: &str) -> PathBuf {
        self.dir.join("bin").join(name)
    }
    /// An image archive and the name it imports as (`pause`, `workload`).
    pub fn image(&self, name: &str) -> anyhow::Result<(PathBuf, String)> {
        let tar = self.dir.join("images").join(format!("{name}.tar"));
        let name = std::fs::read_to_string(self.dir.join("images").join(format!("{name}.ref")))?;
        Ok((tar, name.trim().to_owned()))
    }
    pub fn manifests(&self) -> PathBuf {
        self.dir.join("manifests")
    }
}

/// Build (or find cached) the node. `HOLDFAST_NODE_DIR` overrides the lookup.
pub fn ensure() -> anyhow::Result<NodeBinaries> {
    static CACHED: OnceLock<Result<NodeBinaries, String>> = OnceLock::new();
    CACHED
        .get_or_init(|| {
            let dir = match std::env::var_os("HOLDFAST_NODE_DIR") {
                Some(d) => PathBuf::from(d),
                None => run_build_script(
                    &crate::binaries::cluster_module_dir()
                        .join("node")
                        .join("build.sh"),
                )
                .map_err(|e| format!("{e:#}"))?,
            };
            let nb = NodeBinaries { dir };
            for b in [
                "kubelet",
                "containerd",
                "runc",
                "trainer-controller-manager",
            ] {
                if !nb.bin(b).is_file() {
                    return Err(format!("the node build has no {b} in {}", nb.dir.display()));
                }
            }
            Ok(nb)
        })
        .clone()
        .map_err(anyhow::Error::msg)
}

/// A running tier-3 cluster.
pub struct NodeCluster {
    cp: ControlPlane,
    node: NodeBinaries,
    cgroup_root: String,
    procs: Mutex<Vec<Supervised>>,
    trainer: Mutex<TrainerRelease>,
    workload_image: String,
    pause_image: String,
    /// The local OCI registry, started on first use ([`NodeCluster::registry`]).
    registry: Mutex<Option<crate::registry::LocalRegistry>>,
    /// How many extra nodes ([`crate::extra_node`]) were added so far.
    pub(crate) extra_nodes: std::sync::atomic::AtomicUsize,
}

impl std::ops::Deref for NodeCluster {
    type Target = ControlPlane;
    fn deref(&self) -> &ControlPlane {
        &self.cp
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

fn s(v: &str) -> String {
    v.to_owned()
}

impl NodeCluster {
    /// The cluster shared by every test that asks for it (started on first use).
    pub fn shared() -> &'static NodeCluster {
        static SHARED: OnceLock<NodeCluster> = OnceLock::new();
        SHARED.get_or_init(|| match std::thread::spawn(NodeCluster::start).join() {
            Ok(Ok(c)) => c,
            Ok(Err(e)) => panic!("the tier-3 cluster did not start: {e:#}"),
            Err(_) => panic!("the tier-3 cluster panicked while starting"),
        })
    }

    /// Build or find everything and start it; returns once the node is Ready and the JobSet
    /// and Trainer webhooks answer through their Services.
    pub fn start() -> anyhow::Result<NodeCluster> {
        let t0 = Instant::now();
        let node = ensure()?;
        let cgroup_root = format!("holdfast-node-{}", std::process::id());
        let spec = Spec {
            address: format!("{NODE_IP}/24"),
            private_dirs: [
                "/run/containerd",
                "/var/lib/cni",
                "/var/log/pods",
                "/var/log/containers",
            ]
            .iter()
            .map(PathBuf::from)
            .collect(),
            // What kubelet would otherwise write into the machine's kernel settings.
            shadow_sysctls: [
                ("vm/overcommit_memory", "1"),
                ("vm/panic_on_oom", "0"),
                ("kernel/panic", "10"),
                ("kernel/panic_on_oops", "1"),
                ("kernel/keys/root_maxkeys", "1000000"),
                ("kernel/keys/root_maxbytes", "25000000"),
            ]
            .iter()
            .map(|(k, v)| (s(k), s(v)))
            .collect(),
            cgroup_root: Some(cgroup_root.clone()),
            routes: vec![s(SERVICE_SUBNET)],
        };
        let sa_groups = |ns: &str| {
            vec![
                s("system:serviceaccounts"),
                format!("system:serviceaccounts:{ns}"),
                s("system:authenticated"),
            ]
        };
        let opts = Options {
            netns: Some(spec),
            apiserver_args: vec![
                s("--authorization-mode=Node,RBAC"),
                s("--enable-admission-plugins=NodeRestriction"),
                s("--endpoint-reconciler-type=lease"),
                s("--kubelet-preferred-address-types=InternalIP"),
                s("--allow-privileged=true"),
            ],
            serving_names: vec![
                s(KUBERNETES_SERVICE_IP),
                s(NODE_IP),
                s("kubernetes"),
                s("kubernetes.default"),
                s("kubernetes.default.svc.cluster.local"),
            ],
            controllers: [
                "serviceaccount-token-controller",
                "root-ca-certificate-publisher-controller",
                "job-controller",
                "endpointslice-controller",
                "replicaset-controller",
                "deployment-controller",
                "disruption-controller",
                // The chart's ResourceQuota admitting the webhook's critical priority class:
                // quota admission refuses pods until this controller has computed its usage.
                "resourcequota-controller",
                "pod-garbage-collector-controller",
                // Lifts the not-ready taint kubelet registers the node with, once it is Ready;
                // taints a node whose kubelet stopped reporting `unreachable`.
                "node-lifecycle-controller",
                // Evicts the pods of a tainted node once their toleration runs out (a lost
                // node's pods go Terminating: crate::extra_node).
                "taint-eviction-controller",
            ]
            .iter()
            .map(|c| s(c))
            .collect(),
            controller_manager_args: vec![
                format!(
                    "--node-monitor-grace-period={}s",
                    NODE_MONITOR_GRACE.as_secs()
                ),
                s("--node-monitor-period=2s"),
            ],
            users: vec![
                (
                    s("node"),
                    format!("system:node:{NODE_NAME}"),
                    vec![s("system:nodes"), s("system:authenticated")],
                ),
                (
                    s("kube-proxy"),
                    s("system:kube-proxy"),
                    vec![s("system:authenticated")],
                ),
                (
                    s("kube-scheduler"),
                    s("system:kube-scheduler"),
                    vec![s("system:authenticated")],
                ),
            ]
            .into_iter()
            .chain(extra_node_identities())
            .chain([(
                s("jobset"),
                crate::rbac::service_account_user("jobset-system", "jobset-controller-manager"),
                sa_groups("jobset-system"),
            )])
            .collect(),
            ..Options::default()
        };
        let cp = ControlPlane::start_with(opts)?;
        let cp_up = t0.elapsed();
        let (_, workload_image) = node.image("workload")?;
        let (_, pause_image) = node.image("pause")?;
        let cluster = NodeCluster {
            cp,
            node,
            cgroup_root,
            procs: Mutex::new(Vec::new()),
            trainer: Mutex::new(TrainerRelease::Current),
            workload_image,
            pause_image,
            registry: Mutex::new(None),
            extra_nodes: std::sync::atomic::AtomicUsize::new(0),
        };
        // From here on a failure must tear down what was started: `cluster` drops the control
        // plane (and the reaper runs cleanup.sh) when this returns an error.
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()?;
        cluster.start_node()?;
        let containerd_up = t0.elapsed();
        rt.block_on(cluster.start_kubelet())?;
        let node_ready = t0.elapsed();
        rt.block_on(cluster.start_controllers())?;
        eprintln!(
            "tier-3 cluster up in {:.1?}: control plane {cp_up:.1?}, containerd {containerd_up:.1?}, node Ready {node_ready:.1?}",
            t0.elapsed()
        );
        Ok(cluster)
    }

    /// The control plane under the node.
    pub fn control_plane(&self) -> &ControlPlane {
        &self.cp
    }

    /// The node's build.
    pub fn node_binaries(&self) -> &NodeBinaries {
        &self.node
    }

    /// The workload image (imported into the node; use `imagePullPolicy: Never`).
    pub fn workload_image(&self) -> &str {
        &self.workload_image
    }

    /// The pod sandbox image.
    pub fn pause_image(&self) -> &str {
        &self.pause_image
    }

    /// A port on the host's loopback whose connections reach `target` inside the cluster's
    /// network namespace (a pod's or a Service's address).
    pub fn forward(&self, target: SocketAddr) -> anyhow::Result<u16> {
        self.cp
            .netns()
            .context("the control plane has no namespace")?
            .forward(target)
    }

    /// The cluster's local OCI registry ([`crate::registry`]), started on first use inside
    /// the node's network namespace and stopped with the cluster; every containerd of the
    /// cluster pulls from it over plain HTTP (its `hosts.toml` in [`Self::registry_hosts_dir`]).
    pub fn registry(&self) -> anyhow::Result<crate::registry::LocalRegistry> {
        let mut registry = lock(&self.registry);
        if let Some(r) = registry.as_ref() {
            return Ok(r.clone());
        }
        let (started, process) =
            crate::registry::LocalRegistry::start(&self.cp, &self.registry_hosts_dir())?;
        lock(&self.procs).push(process);
        *registry = Some(started.clone());
        Ok(started)
    }

    /// The registry configuration directory of the cluster's containerds (`config_path`:
    /// one `<host>/hosts.toml` per registry).
    fn registry_hosts_dir(&self) -> PathBuf {
        self.cp.dir().join("containerd-hosts")
    }

    /// The names of the images in the node's containerd (namespace `k8s.io`), as `ctr images
    /// ls` lists them.
    pub fn image_names(&self) -> anyhow::Result<Vec<String>> {
        let out = Command::new(self.node.bin("ctr"))
            .arg("--address")
            .arg(self.containerd_socket())
            .args(["-n", "k8s.io", "images", "ls", "--quiet"])
            .output()?;
        if !out.status.success() {
            bail!("ctr images ls: {}", String::from_utf8_lossy(&out.stderr));
        }
        Ok(String::from_utf8_lossy(&out.stdout)
            .lines()
            .map(str::to_owned)
            .collect())
    }

    /// Remove image `name` from the node's containerd if it is there (`ctr images rm`), so
    /// the next pod that runs it makes the kubelet pull it.
    pub fn remove_image(&self, name: &str) -> anyhow::Result<()> {
        if !self.image_names()?.iter().any(|n| n == name) {
            return Ok(());
        }
        let out = Command::new(self.node.bin("ctr"))
            .arg("--address")
            .arg(self.containerd_socket())
            .args(["-n", "k8s.io", "images", "rm", "--sync", name])
            .output()?;
        if !out.status.success() {
            bail!(
                "ctr images rm {name}: {}",
                String::from_utf8_lossy(&out.stderr)
            );
        }
        Ok(())
    }

    /// Import an OCI image archive into the containerd of socket `sock`.
    pub(crate) fn import_image_into(&self, sock: &Path, archive: &Path) -> anyhow::Result<()> {
        let out = Command::new(self.node.bin("ctr"))
            .arg("--address")
            .arg(sock)
            .args(["-n", "k8s.io", "images", "import", "--local"])
            .arg(archive)
            .output()?;
        if !out.status.success() {
            bail!(
                "ctr images import {} failed: {}{}",
                archive.display(),
                String::from_utf8_lossy(&out.stderr),
                String::from_utf8_lossy(&out.stdout)
            );
        }
        Ok(())
    }

    /// Give an image already in the node's containerd a second name (`ctr images tag`): the
    /// same content under a reference a test can tell apart on a running pod.
    pub fn tag_image(&self, source: &str, target: &str) -> anyhow::Result<()> {
        let out = Command::new(self.node.bin("ctr"))
            .arg("--address")
            .arg(self.containerd_socket())
            .args(["-n", "k8s.io", "images", "tag", "--force", source, target])
            .output()?;
        if !out.status.success() {
            bail!(
                "ctr images tag {source} {target} failed: {}{}",
                String::from_utf8_lossy(&out.stderr),
                String::from_utf8_lossy(&out.stdout)
            );
        }
        Ok(())
    }

    /// The last lines of a node component's log (`containerd`, `kubelet`, `kube-scheduler`,
    /// `kube-proxy`, `jobset`, `trainer`), or of the control plane's.
    pub fn log_tail(&self, component: &str, lines: usize) -> String {
        let procs = lock(&self.procs);
        match procs.iter().find(|p| p.name == component) {
            Some(p) => p.log_tail(lines),
            None => self.cp.log_tail(component, lines),
        }
    }

    /// Run `f` on the node component `name` (e.g. to kill or restart Trainer).
    pub fn with_process<T>(&self, name: &str, f: impl FnOnce(&mut Supervised) -> T) -> Option<T> {
        let mut procs = lock(&self.procs);
        procs.iter_mut().find(|p| p.name == name).map(f)
    }

    /// Stop everything: the node's components, then the control plane (whose reaper runs the
    /// cleanup script for containers, cgroups and mount points).
    pub fn stop(&self) {
        for p in lock(&self.procs).iter_mut().rev() {
            p.kill();
        }
        self.cp.stop();
    }

    /// The main node's pods' CRI log files (`{ns}_{pod}_{uid}/{container}/N.log`), written by
    /// its containerd.
    pub fn pod_logs_dir(&self) -> PathBuf {
        self.cp.dir().join("pod-logs")
    }

    /// The cgroup root of the main node's kubelet (relative); extra nodes' roots are below it,
    /// so the teardown's cleanup reaches their containers too.
    pub fn cgroup_root(&self) -> &str {
        &self.cgroup_root
    }

    fn containerd_socket(&self) -> PathBuf {
        self.cp.dir().join("containerd").join("containerd.sock")
    }

    pub(crate) fn spawn(
        &self,
        name: &str,
        program: &Path,
        args: Vec<String>,
        env: &[(String, String)],
    ) -> anyhow::Result<()> {
        let p = self.cp.spawn_env(name, program, args, env)?;
        lock(&self.procs).push(p);
        Ok(())
    }

    pub(crate) fn running(&self, name: &str) -> bool {
        self.with_process(name, |p| p.running()).unwrap_or(false)
    }

    /// cgroups, the cleanup script, containerd, the images.
    fn start_node(&self) -> anyhow::Result<()> {
        let dir = self.cp.dir();
        self.create_cgroup(&self.cgroup_root)?;

        let cd = dir.join("containerd");
        std::fs::create_dir_all(self.registry_hosts_dir())?;
        std::fs::create_dir_all(dir.join("cni").join("net.d"))?;
        std::fs::write(
            dir.join("cni").join("net.d").join("10-holdfast.conflist"),
            serde_json::to_string_pretty(&serde_json::json!({
                "cniVersion": "1.0.0",
                "name": "holdfast",
                "plugins": [
                    {
                        "type": "bridge",
                        "bridge": "cni0",
                        "isGateway": true,
                        "ipMasq": false,
                        "hairpinMode": true,
                        "ipam": {
                            "type": "host-local",
                            "ranges": [[{"subnet": POD_SUBNET}]],
                            "routes": [{"dst": "0.0.0.0/0"}],
                            "dataDir": dir.join("cni").join("ipam"),
                        }
                    },
                    {"type": "portmap", "capabilities": {"portMappings": true}}
                ]
            }))?,
        )?;
        self.start_containerd("containerd", &cd, &self.containerd_socket())
    }

    /// Start a containerd named `name` (its process and log) whose state is under `cd` and
    /// whose socket is `sock`; returns once it serves, with the node build's images imported.
    pub(crate) fn start_containerd(
        &self,
        name: &str,
        cd: &Path,
        sock: &Path,
    ) -> anyhow::Result<()> {
        std::fs::create_dir_all(cd.join("root"))?;
        std::fs::create_dir_all(cd.join("state"))?;
        std::fs::write(cd.join("config.toml"), self.containerd_config(cd, sock))?;
        let path = format!(
            "{}:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
            self.node.dir.join("bin").display()
        );
        self.spawn(
            name,
            &self.node.bin("containerd"),
            vec![s("--config"), cd.join("config.toml").display().to_string()],
            &[(s("PATH"), path)],
        )?;
        let start = Instant::now();
        loop {
            if !self.running(name) {
                bail!("{name} exited:\n{}", self.log_tail(name, 30));
            }
            let ok = Command::new(self.node.bin("ctr"))
                .arg("--address")
                .arg(sock)
                .arg("version")
                .output()
                .is_ok_and(|o| o.status.success());
            if ok {
                break;
            }
            if start.elapsed() > Duration::from_secs(60) {
                bail!("{name} not serving after 60s:\n{}", self.log_tail(name, 30));
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        for image in ["pause", "workload"] {
            let (tar, _) = self.node.image(image)?;
            self.import_image_into(sock, &tar)?;
        }
        Ok(())
    }

    /// containerd's configuration for a node whose state is under `cd` (`root/`, `state/`)
    /// and whose socket is `sock`: the CRI runtime runc with the node build's binary, the
    /// cluster's one CNI network (every node on the bridge `cni0`, one IPAM directory, so
    /// two nodes' pods never share an address), the pinned pause image. NRI is off: its socket
    /// is one fixed path, and a second node's containerd would find it taken.
    pub(crate) fn containerd_config(&self, cd: &Path, sock: &Path) -> String {
        let dir = self.cp.dir();
        format!(
            r#"version = 3
root = "{root}"
state = "{state}"

[grpc]
  address = "{sock}"

[ttrpc]
  address = "{sock}.ttrpc"

[debug]
  address = ""
  level = "info"

[metrics]
  address = ""

[plugins.'io.containerd.nri.v1.nri']
  disable = true

[plugins.'io.containerd.cri.v1.runtime']
  # The sandbox lacks CAP_SYS_RESOURCE: a negative oom_score_adj would fail every sandbox.
  restrict_oom_score_adj = true
  enable_selinux = false
  disable_apparmor = true
  netns_mounts_under_state_dir = true
  [plugins.'io.containerd.cri.v1.runtime'.containerd]
    default_runtime_name = "runc"
    [plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.runc.options]
        BinaryName = "{runc}"
        SystemdCgroup = false
  [plugins.'io.containerd.cri.v1.runtime'.cni]
    bin_dirs = ["{cni}"]
    conf_dir = "{cniconf}"
    max_conf_num = 1

[plugins.'io.containerd.cri.v1.images']
  snapshotter = "overlayfs"
  [plugins.'io.containerd.cri.v1.images'.pinned_images]
    sandbox = "{pause}"
  # The local registry's hosts.toml (crate::registry), read at each pull.
  [plugins.'io.containerd.cri.v1.images'.registry]
    config_path = "{hosts}"

[plugins.'io.containerd.grpc.v1.cri']
  disable_tcp_service = true
"#,
            root = cd.join("root").display(),
            state = cd.join("state").display(),
            sock = sock.display(),
            runc = self.node.bin("runc").display(),
            cni = self.node.dir.join("cni").display(),
            cniconf = dir.join("cni").join("net.d").display(),
            pause = self.pause_image,
            hosts = self.registry_hosts_dir().display(),
        )
    }

    /// `/sys/fs/cgroup/<each v1 hierarchy>/<path>` (`path` relative, `a` or `a/b`): a
    /// kubelet's `cgroupRoot` must exist, with cpuset's settings filled in at each level.
    pub(crate) fn create_cgroup(&self, path: &str) -> anyhow::Result<()> {
        for entry in std::fs::read_dir("/sys/fs/cgroup")? {
            let h = entry?.path();
            if h.file_name().is_some_and(|n| n == "unified") || !h.join("cgroup.procs").exists() {
                continue;
            }
            let mut parent = h.clone();
            for part in path.split('/').filter(|p| !p.is_empty()) {
                let d = parent.join(part);
                std::fs::create_dir_all(&d).with_context(|| format!("creating {}", d.display()))?;
                if parent.join("cpuset.cpus").exists() {
                    for f in ["cpuset.cpus", "cpuset.mems"] {
                        let v = std::fs::read_to_string(parent.join(f))?;
                        std::fs::write(d.join(f), v.trim())?;
                    }
                }
                parent = d;
            }
        }
        Ok(())
    }

    async fn start_kubelet(&self) -> anyhow::Result<()> {
        let dir = self.cp.dir();
        std::fs::write(dir.join("resolv.conf"), "")?;
        self.run_kubelet(&KubeletSpec {
            process: "kubelet",
            node_name: NODE_NAME,
            ip: NODE_IP,
            identity: "node",
            cgroup_root: &self.cgroup_root,
            socket: self.containerd_socket(),
            root_dir: dir.join("kubelet"),
            pod_logs: dir.join("pod-logs"),
            healthz_port: 10248,
            labels: &[],
            taints: serde_json::json!([]),
        })
        .await?;

        self.spawn(
            "kube-scheduler",
            &self.node.bin("kube-scheduler"),
            vec![
                format!(
                    "--kubeconfig={}",
                    self.cp.user_kubeconfig("kube-scheduler").display()
                ),
                s("--leader-elect=false"),
                s("--bind-address=127.0.0.1"),
                s("--v=1"),
            ],
            &[],
        )?;
        self.spawn(
            "kube-proxy",
            &self.node.bin("kube-proxy"),
            vec![
                format!(
                    "--kubeconfig={}",
                    self.cp.user_kubeconfig("kube-proxy").display()
                ),
                format!("--hostname-override={NODE_NAME}"),
                s("--proxy-mode=iptables"),
                s("--cluster-cidr=10.244.0.0/16"),
                // The conntrack table size is a machine-wide setting: leave it alone.
                s("--conntrack-max-per-core=0"),
                s("--conntrack-tcp-timeout-established=0"),
                s("--conntrack-tcp-timeout-close-wait=0"),
                s("--metrics-bind-address=127.0.0.1:10249"),
                s("--healthz-bind-address=127.0.0.1:10256"),
                s("--v=1"),
            ],
            &[],
        )?;
        // kube-proxy is serving once the `kubernetes` Service is programmed.
        let start = Instant::now();
        loop {
            if !self.running("kube-proxy") {
                bail!("kube-proxy exited:\n{}", self.log_tail("kube-proxy", 40));
            }
            if !self.running("kube-scheduler") {
                bail!(
                    "kube-scheduler exited:\n{}",
                    self.log_tail("kube-scheduler", 40)
                );
            }
            if self.nat_rules()?.contains(KUBERNETES_SERVICE_IP) {
                break;
            }
            if start.elapsed() > Duration::from_secs(60) {
                bail!(
                    "kube-proxy programmed no Service after 60s:\n{}",
                    self.log_tail("kube-proxy", 40)
                );
            }
            tokio::time::sleep(Duration::from_millis(250)).await;
        }
        Ok(())
    }

    /// Write a kubelet's configuration, start it as process `spec.process`, and wait until its
    /// Node is Ready. Its lease is renewed every 2.5 s (`nodeLeaseDurationSeconds: 10`), well
    /// inside kube-controller-manager's `--node-monitor-grace-period` of [`NODE_MONITOR_GRACE`].
    pub(crate) async fn run_kubelet(&self, spec: &KubeletSpec<'_>) -> anyhow::Result<()> {
        let dir = self.cp.dir();
        let kd = &spec.root_dir;
        std::fs::create_dir_all(kd)?;
        let config = serde_json::json!({
            "apiVersion": "kubelet.config.k8s.io/v1beta1",
            "kind": "KubeletConfiguration",
            "failCgroupV1": false,
            "cgroupDriver": "cgroupfs",
            "cgroupRoot": format!("/{}", spec.cgroup_root),
            "failSwapOn": false,
            "containerRuntimeEndpoint": format!("unix://{}", spec.socket.display()),
            "address": spec.ip,
            "port": 10250,
            "readOnlyPort": 0,
            "healthzBindAddress": "127.0.0.1",
            "healthzPort": spec.healthz_port,
            // Reached only from inside the namespace (the apiserver, for logs).
            "authentication": {"anonymous": {"enabled": true}, "webhook": {"enabled": false}},
            "authorization": {"mode": "AlwaysAllow"},
            // The machine's disk looks nearly full to cAdvisor: no disk-pressure eviction.
            "evictionHard": {
                "memory.available": "100Mi",
                "nodefs.available": "0%",
                "nodefs.inodesFree": "0%",
                "imagefs.available": "0%",
                "imagefs.inodesFree": "0%"
            },
            "imageGCHighThresholdPercent": 100,
            "imageGCLowThresholdPercent": 99,
            "resolvConf": dir.join("resolv.conf"),
            "clusterDomain": "cluster.local",
            "podLogsDir": spec.pod_logs,
            "volumePluginDir": kd.join("volume-plugins"),
            "localStorageCapacityIsolation": false,
            "serializeImagePulls": false,
            "staticPodPath": "",
            "shutdownGracePeriod": "0s",
            "nodeStatusUpdateFrequency": "5s",
            "nodeLeaseDurationSeconds": 10,
            "syncFrequency": "10s",
            "fileCheckFrequency": "10s",
            "registerNode": true,
            "registerWithTaints": spec.taints,
            "rotateCertificates": false,
            "serverTLSBootstrap": false,
            "maxPods": 110,
            "podCIDR": POD_SUBNET,
        });
        let cfg = kd.join("config.yaml");
        std::fs::write(&cfg, serde_json::to_string_pretty(&config)?)?;
        let mut args = vec![
            format!("--config={}", cfg.display()),
            format!(
                "--kubeconfig={}",
                self.cp.user_kubeconfig(spec.identity).display()
            ),
            format!("--root-dir={}", kd.display()),
            format!("--cert-dir={}", kd.join("pki").display()),
            format!("--hostname-override={}", spec.node_name),
            format!("--node-ip={}", spec.ip),
            s("--v=2"),
        ];
        if !spec.labels.is_empty() {
            let labels: Vec<String> = spec
                .labels
                .iter()
                .map(|(k, v)| format!("{k}={v}"))
                .collect();
            args.push(format!("--node-labels={}", labels.join(",")));
        }
        self.spawn(spec.process, &self.node.bin("kubelet"), args, &[])?;
        let admin = self.cp.client(Identity::Admin).await?;
        let nodes: Api<Node> = Api::all(admin.clone());
        let start = Instant::now();
        loop {
            if !self.running(spec.process) {
                bail!(
                    "{} exited:\n{}",
                    spec.process,
                    self.log_tail(spec.process, 40)
                );
            }
            if let Some(n) = nodes.get_opt(spec.node_name).await? {
                let ready = n
                    .status
                    .and_then(|s| s.conditions)
                    .unwrap_or_default()
                    .iter()
                    .any(|c| c.type_ == "Ready" && c.status == "True");
                if ready {
                    return Ok(());
                }
            }
            if start.elapsed() > Duration::from_secs(120) {
                bail!(
                    "node {} not Ready after 120s:\n{}",
                    spec.node_name,
                    self.log_tail(spec.process, 40)
                );
            }
            tokio::time::sleep(Duration::from_millis(250)).await;
        }
    }

    /// `iptables-save -t nat` inside the namespace.
    pub fn nat_rules(&self) -> anyhow::Result<String> {
        let ns = self.cp.netns().context("no namespace")?;
        let out = Command::new("nsenter")
            .args([
                "--target",
                &ns.pid().to_string(),
                "--net",
                "--",
                "iptables-save",
                "-t",
                "nat",
            ])
            .output()?;
        Ok(String::from_utf8_lossy(&out.stdout).into_owned())
    }

    /// JobSet (its CRDs at the version it is), then Trainer: namespaces, Services, webhook
    /// registrations, processes; done when both answer admission through their Services.
    async fn start_controllers(&self) -> anyhow::Result<()> {
        let admin = self.cp.client(Identity::Admin).await?;
        let manifests = self.node.manifests();

        // The JobSet this node runs brings its own CRDs (replacing the control plane's).
        let crds = crate::crds::read_dir(&manifests.join("jobset-crds"))?;
        let names: Vec<String> = crds
            .iter()
            .filter_map(|c| c.metadata.name.clone())
            .collect();
        for crd in &crds {
            crate::rbac::apply(&admin, &serde_json::to_value(crd)?, "default", false).await?;
        }
        wait_established(&admin, &names).await?;

        for ns in ["jobset-system", "kubeflow-system"] {
            let doc = serde_json::json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}});
            crate::rbac::apply(&admin, &doc, ns, false).await?;
        }
        let crb = serde_json::json!({
            "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding",
            "metadata": {"name": "holdfast-test-jobset"},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "cluster-admin"},
            "subjects": [{"kind": "User", "apiGroup": "rbac.authorization.k8s.io",
                "name": crate::rbac::service_account_user("jobset-system", "jobset-controller-manager")}]
        });
        crate::rbac::apply(&admin, &crb, "default", false).await?;

        let dir = self.cp.dir();
        let ca_bundle = base64::Engine::encode(
            &base64::engine::general_purpose::STANDARD,
            self.cp.ca_pem().as_bytes(),
        );

        // JobSet.
        let js_dir = dir.join("jobset");
        let js_certs = js_dir.join("certs");
        std::fs::create_dir_all(&js_certs)?;
        self.write_serving_cert(&js_certs, "jobset-webhook-service", "jobset-system")?;
        self.expose(
            "jobset-system",
            "jobset-webhook-service",
            JOBSET_WEBHOOK_PORT,
        )
        .await?;
        let text = std::fs::read_to_string(manifests.join("jobset-webhooks.yaml"))?;
        for doc in webhook_registrations(
            &text,
            "jobset-system",
            "jobset-webhook-service",
            &ca_bundle,
            |kind| match kind {
                "MutatingWebhookConfiguration" => "jobset-mutating-webhook-configuration",
                _ => "jobset-validating-webhook-configuration",
            },
        )? {
            crate::rbac::apply(&admin, &jobset_patches(doc), "default", false).await?;
        }
        std::fs::write(
            js_dir.join("config.yaml"),
            format!(
                "apiVersion: config.jobset.x-k8s.io/v1alpha1\nkind: Configuration\n\
                 webhook:\n  port: {JOBSET_WEBHOOK_PORT}\n  host: \"\"\n  certDir: {certs}\n\
                 metrics:\n  bindAddress: \"0\"\n\
                 health:\n  healthProbeBindAddress: 127.0.0.1:{JOBSET_HEALTH_PORT}\n\
                 leaderElection:\n  leaderElect: false\n\
                 internalCertManagement:\n  enable: false\n",
                certs = js_certs.display()
            ),
        )?;
        self.spawn(
            "jobset",
            &self.node.bin("jobset-controller"),
            vec![
                format!("--config={}", js_dir.join("config.yaml").display()),
                format!(
                    "--kubeconfig={}",
                    self.cp.user_kubeconfig("jobset").display()
                ),
                s("--zap-devel=false"),
            ],
            &[],
        )?;

        // Trainer.
        let tr_dir = dir.join("trainer");
        let tr_tmp = tr_dir.join("tmp");
        let tr_certs = tr_tmp.join("k8s-webhook-server").join("serving-certs");
        std::fs::create_dir_all(&tr_certs)?;
        self.write_serving_cert(
            &tr_certs,
            "kubeflow-trainer-controller-manager",
            "kubeflow-system",
        )?;
        self.expose(
            "kubeflow-system",
            "kubeflow-trainer-controller-manager",
            TRAINER_WEBHOOK_PORT,
        )
        .await?;
        let text = std::fs::read_to_string(manifests.join("trainer-webhooks.yaml"))?;
        for doc in webhook_registrations(
            &text,
            "kubeflow-system",
            "kubeflow-trainer-controller-manager",
            &ca_bundle,
            |kind| match kind {
                "MutatingWebhookConfiguration" => "defaulter.trainer.kubeflow.org",
                _ => "validator.trainer.kubeflow.org",
            },
        )? {
            crate::rbac::apply(&admin, &trainer_patches(doc), "default", false).await?;
        }
        std::fs::write(
            tr_dir.join("config.yaml"),
            trainer_configuration(TRAINER_HEALTH_PORT, TRAINER_WEBHOOK_PORT, ""),
        )?;
        self.spawn_trainer(TrainerRelease::Current)?;

        // Both answer admission through their Services: server-side dry-run creates that only
        // their webhooks judge.
        let start = Instant::now();
        let mut last;
        loop {
            for name in ["jobset", "trainer"] {
                if !self.running(name) {
                    bail!("{name} exited:\n{}", self.log_tail(name, 40));
                }
            }
            match self.probe_webhooks(&admin).await {
                Ok(()) => return Ok(()),
                Err(e) => last = format!("{e:#}"),
            }
            if start.elapsed() > Duration::from_secs(120) {
                bail!(
                    "JobSet and Trainer webhooks not answering after 120s ({last}):\njobset:\n{}\ntrainer:\n{}",
                    self.log_tail("jobset", 20),
                    self.log_tail("trainer", 20)
                );
            }
            tokio::time::sleep(Duration::from_millis(500)).await;
        }
    }

    /// The Trainer controller manager binary of `release` in the node's build (the previous
    /// version's names its version: `trainer-controller-manager-v2.2.1`).
    pub fn trainer_binary(&self, release: TrainerRelease) -> anyhow::Result<PathBuf> {
        const NAME: &str = "trainer-controller-manager";
        match release {
            TrainerRelease::Current => Ok(self.node.bin(NAME)),
            TrainerRelease::Previous => {
                let prefix = format!("{NAME}-v");
                let mut found = Vec::new();
                for e in std::fs::read_dir(self.node.dir.join("bin"))? {
                    let name = e?.file_name().to_string_lossy().into_owned();
                    if name.starts_with(&prefix) {
                        found.push(self.node.bin(&name));
                    }
                }
                match found.len() {
                    1 => Ok(found.remove(0)),
                    n => bail!("the node build has {n} previous Trainer binaries ({prefix}*)"),
                }
            }
        }
    }

    /// Start Trainer's controller manager of `release` as the node's `trainer` process, with
    /// the configuration, kubeconfig and serving certificate of `start_controllers`.
    fn spawn_trainer(&self, release: TrainerRelease) -> anyhow::Result<()> {
        let binary = self.trainer_binary(release)?;
        let tr_dir = self.cp.dir().join("trainer");
        // controller-runtime's webhook server reads its certificate from
        // $TMPDIR/k8s-webhook-server/serving-certs.
        self.spawn(
            "trainer",
            &binary,
            vec![
                format!("--config={}", tr_dir.join("config.yaml").display()),
                format!(
                    "--kubeconfig={}",
                    self.cp.kubeconfig(Identity::Trainer).display()
                ),
            ],
            &[(s("TMPDIR"), tr_dir.join("tmp").display().to_string())],
        )
    }

    /// Stop the running Trainer controller manager and start the one of `release` with the
    /// same arguments (an upgrade or a rollback of the controller; the CRDs and webhook
    /// registrations stay: v2.2.1's are a subset of v2.3.0's). Returns at once; see
    /// [`NodeCluster::switch_trainer`] for the version that waits for its webhooks.
    pub fn replace_trainer(&self, release: TrainerRelease) -> anyhow::Result<()> {
        {
            let mut procs = lock(&self.procs);
            if let Some(i) = procs.iter().position(|p| p.name == "trainer") {
                let mut old = procs.remove(i);
                old.kill();
            }
        }
        self.spawn_trainer(release)?;
        *lock(&self.trainer) = release;
        Ok(())
    }

    /// Which Trainer controller manager the node runs now.
    pub fn trainer_release(&self) -> TrainerRelease {
        *lock(&self.trainer)
    }

    /// [`NodeCluster::replace_trainer`], then wait until Trainer answers admission through
    /// its Service again.
    pub async fn switch_trainer(&self, release: TrainerRelease) -> anyhow::Result<()> {
        self.replace_trainer(release)?;
        let admin = self.cp.client(Identity::Admin).await?;
        let start = Instant::now();
        loop {
            if !self.running("trainer") {
                bail!("trainer exited:\n{}", self.log_tail("trainer", 40));
            }
            let answer = self.probe_webhooks(&admin).await;
            if answer.is_ok() {
                return Ok(());
            }
            if start.elapsed() > Duration::from_secs(60) {
                bail!(
                    "Trainer's webhooks not answering 60s after the switch ({answer:?}):\n{}",
                    self.log_tail("trainer", 20)
                );
            }
            tokio::time::sleep(Duration::from_millis(250)).await;
        }
    }

    async fn probe_webhooks(&self, admin: &kube::Client) -> anyhow::Result<()> {
        let dry = PostParams {
            dry_run: true,
            ..Default::default()
        };
        let js: Api<DynamicObject> = Api::namespaced_with(
            admin.clone(),
            "default",
            &holdfast_cluster::resources::jobset(),
        );
        let jobset: DynamicObject = serde_json::from_value(serde_json::json!({
            "apiVersion": "jobset.x-k8s.io/v1alpha2", "kind": "JobSet",
            "metadata": {"name": "probe"},
            "spec": {"replicatedJobs": [{"name": "w", "replicas": 1, "template": {"spec": {"template": {"spec": {
                "restartPolicy": "Never",
                "containers": [{"name": "c", "image": self.workload_image}]
            }}}}}]}
        }))?;
        js.create(&dry, &jobset).await.context("JobSet dry-run")?;
        let tr: Api<DynamicObject> = Api::namespaced_with(
            admin.clone(),
            "default",
            &holdfast_cluster::resources::training_runtime(),
        );
        let runtime: DynamicObject = serde_json::from_value(serde_json::json!({
            "apiVersion": "trainer.kubeflow.org/v1alpha1", "kind": "TrainingRuntime",
            "metadata": {"name": "probe"},
            "spec": {"template": {"spec": {"replicatedJobs": [{"name": "node", "template": {"spec": {"template": {"spec": {
                "restartPolicy": "Never",
                "containers": [{"name": "node", "image": self.workload_image}]
            }}}}}]}}}
        }))?;
        tr.create(&dry, &runtime)
            .await
            .context("TrainingRuntime dry-run")?;
        Ok(())
    }

    fn write_serving_cert(&self, dir: &Path, service: &str, namespace: &str) -> anyhow::Result<()> {
        let names = [
            format!("{service}.{namespace}.svc"),
            format!("{service}.{namespace}.svc.cluster.local"),
        ];
        let refs: Vec<&str> = names.iter().map(String::as_str).collect();
        let cert = self
            .cp
            .issue_serving_cert(&refs, Duration::from_secs(7 * 24 * 3600))?;
        std::fs::write(dir.join("tls.crt"), &cert.cert_pem)?;
        std::fs::write(dir.join("tls.key"), &cert.key_pem)?;
        Ok(())
    }

    /// A Service `namespace/name` (port 443) without a selector, and an EndpointSlice that
    /// sends it to `NODE_IP:port`, where the process listens.
    async fn expose(&self, namespace: &str, name: &str, port: u16) -> anyhow::Result<()> {
        let admin = self.cp.client(Identity::Admin).await?;
        let svc = serde_json::json!({
            "apiVersion": "v1", "kind": "Service",
            "metadata": {"name": name, "namespace": namespace},
            "spec": {"ports": [{"name": "webhook", "port": 443, "targetPort": port, "protocol": "TCP"}]}
        });
        crate::rbac::apply(&admin, &svc, namespace, false).await?;
        let slice = serde_json::json!({
            "apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice",
            "metadata": {"name": format!("{name}-node"), "namespace": namespace,
                "labels": {"kubernetes.io/service-name": name,
                    "endpointslice.kubernetes.io/managed-by": "holdfast-tests"}},
            "addressType": "IPv4",
            "ports": [{"name": "webhook", "port": port, "protocol": "TCP"}],
            "endpoints": [{"addresses": [NODE_IP], "conditions": {"ready": true}, "nodeName": NODE_NAME}]
        });
        crate::rbac::apply(&admin, &slice, namespace, false).await?;
        Ok(())
    }
}

impl Drop for NodeCluster {
    fn drop(&mut self) {
        for p in lock(&self.procs).iter_mut().rev() {
            p.kill();
        }
        // The control plane's own Drop stops it and runs the cleanup.
    }
}

async fn wait_established(admin: &kube::Client, names: &[String]) -> anyhow::Result<()> {
    use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
    let api: Api<CustomResourceDefinition> = Api::all(admin.clone());
    let start = Instant::now();
    for name in names {
        loop {
            let crd = api.get(name).await?;
            let gen_ok = crd
                .status
                .as_ref()
                .and_then(|s| s.conditions.as_ref())
                .is_some_and(|cs| {
                    cs.iter()
                        .any(|c| c.type_ == "Established" && c.status == "True")
                });
            if gen_ok {
                break;
            }
            if start.elapsed() > Duration::from_secs(60) {
                bail!("CRD {name} not Established after 60s");
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
    Ok(())
}

/// The webhook configurations of a kubebuilder `manifests.yaml` as the project's kustomize
/// overlays turn them: every `clientConfig.service` pointed at `namespace/service` (port
/// 443), the harness's CA as `caBundle`, and each configuration named by `name_of(kind)`.
pub fn webhook_registrations(
    manifests: &str,
    namespace: &str,
    service: &str,
    ca_bundle: &str,
    name_of: impl Fn(&str) -> &'static str,
) -> anyhow::Result<Vec<serde_json::Value>> {
    let docs: Vec<serde_json::Value> = serde_saphyr::from_multiple(manifests)?;
    let mut out = Vec::new();
    for mut doc in docs.into_iter().filter(|d| d.is_object()) {
        let kind = doc["kind"].as_str().unwrap_or_default().to_owned();
        if !kind.ends_with("WebhookConfiguration") {
            continue;
        }
        doc["metadata"] = serde_json::json!({"name": name_of(&kind)});
        for h in doc["webhooks"].as_array_mut().into_iter().flatten() {
            let path = h["clientConfig"]["service"]["path"].clone();
            h["clientConfig"] = serde_json::json!({
                "service": {"name": service, "namespace": namespace, "path": path, "port": 443},
                "caBundle": ca_bundle,
            });
        }
        out.push(doc);
    }
    if out.is_empty() {
        bail!("no webhook configuration in the manifests");
    }
    Ok(out)
}

/// JobSet's kustomize patches: its pod webhooks see only JobSet's pods.
fn jobset_patches(mut doc: serde_json::Value) -> serde_json::Value {
    for h in doc["webhooks"].as_array_mut().into_iter().flatten() {
        let pods = h["rules"].as_array().into_iter().flatten().any(|r| {
            r["resources"]
                .as_array()
                .is_some_and(|rs| rs.iter().any(|x| x == "pods"))
        });
        if pods {
            h["objectSelector"] = serde_json::json!({"matchExpressions": [
                {"key": "jobset.sigs.k8s.io/jobset-name", "operator": "Exists"}
            ]});
        }
    }
    doc
}

/// Trainer's kustomize patches: its runtime validators skip objects labelled
/// `trainer.kubeflow.org/webhook-validation: disabled`.
fn trainer_patches(mut doc: serde_json::Value) -> serde_json::Value {
    if doc["kind"] == "ValidatingWebhookConfiguration" {
        for h in doc["webhooks"].as_array_mut().into_iter().flatten() {
            let runtime = h["rules"].as_array().into_iter().flatten().any(|r| {
                r["resources"].as_array().is_some_and(|rs| {
                    rs.iter()
                        .any(|x| x == "trainingruntimes" || x == "clustertrainingruntimes")
                })
            });
            if runtime {
                h["objectSelector"] = serde_json::json!({"matchExpressions": [
                    {"key": "trainer.kubeflow.org/webhook-validation", "operator": "NotIn", "values": ["disabled"]}
                ]});
            }
        }
    }
    doc
}

/// Trainer's controller manager's configuration as the tests run it: health on
/// `127.0.0.1:health`, metrics off, its webhook server on `webhook_host:webhook_port`, no
/// leader election, no certificate management (the tests write its serving certificate).
pub fn trainer_configuration(health: u16, webhook_port: u16, webhook_host: &str) -> String {
    format!(
        "apiVersion: config.trainer.kubeflow.org/v1alpha1\nkind: Configuration\n\
         health:\n  healthProbeBindAddress: 127.0.0.1:{health}\n\
         metrics:\n  bindAddress: \"0\"\n\
         webhook:\n  port: {webhook_port}\n  host: \"{webhook_host}\"\n\
         leaderElection:\n  leaderElect: false\n\
         certManagement:\n  enable: false\n"
    )
}
