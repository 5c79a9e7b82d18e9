//! Tier 3's other nodes: a second kubelet with a containerd of its own, inside the cluster's
//! network and mount namespaces (an address of its own there, its own state, sockets, cgroup
//! root and pod-log directory, the cluster's one CNI bridge), that a test can **lose** and
//! **fence**, as the seed's lost node.
//!
//! - Lost: its kubelet is frozen (SIGSTOP). It stops renewing its lease and reporting pod
//!   statuses, while its containerd keeps the containers running and keeps writing their
//!   output, as on a machine cut off from the apiserver. After
//!   [`crate::node::NODE_MONITOR_GRACE`] the node goes `Ready: Unknown` and is tainted
//!   `node.kubernetes.io/unreachable`.
//! - Fenced: everything of the node is killed at once — the kubelet, containerd, its shims and
//!   every process in the node's cgroups — as a power-off through a BMC would.
//!
//! What ran, and when, is read from containerd's own records, not the API: the CRI log files
//! containerd writes for each container, one timestamped line per line of output
//! ([`cri_lines`]). The tests' workload prints a heartbeat line, so a container's first and last
//! lines bound when its process ran, whatever a frozen kubelet did or did not report.
//!
//! An extra node registers with the taint [`EXTRA_NODE_TAINT`] (`NoSchedule`): only pods that
//! tolerate it (the lost-node tests' runtimes) run there, never holdfast's own pods nor
//! another test's. It carries the label [`POOL_LABEL`] with the value the test gives, which the
//! main node can be given too ([`label_main_node`]) when a test wants a replacement to land
//! there.

use crate::identity::Identity;
use crate::node::{KubeletSpec, NODE_NAME, NodeCluster};
use anyhow::{Context, bail};
use k8s_openapi::api::core::v1::Node;
use kube::api::{Api, DeleteParams, Patch, PatchParams};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::Ordering;

pub use crate::node::{EXTRA_NODES, extra_node_identities as identities, extra_node_name as name};
/// The taint an extra node registers with.
pub const EXTRA_NODE_TAINT: &str = "holdfast.dev/extra-node";
/// The label that places a lost-node test's pods (`In [pool]`, required).
pub const POOL_LABEL: &str = "holdfast.dev/test-pool";

fn slug(i: usize) -> String {
    format!("node-{}", name(i))
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum State {
    Running,
    Lost,
    Fenced,
}

/// An extra node of a [`NodeCluster`].
pub struct ExtraNode<'a> {
    cluster: &'a NodeCluster,
    /// The Node's name.
    pub name: String,
    /// Its address inside the namespace.
    pub ip: String,
    dir: PathBuf,
    cgroup: String,
    socket: PathBuf,
    kubelet: String,
    containerd: String,
    state: State,
    /// How many processes of the node's containers the fence killed.
    killed: usize,
}

impl NodeCluster {
    /// Start an extra node labelled `POOL_LABEL=pool`; returns once it is Ready.
    pub async fn add_node(&self, pool: &str) -> anyhow::Result<ExtraNode<'_>> {
        let t0 = std::time::Instant::now();
        let i = self.extra_nodes.fetch_add(1, Ordering::SeqCst);
        if i >= EXTRA_NODES {
            bail!("no identity left for an extra node ({EXTRA_NODES} per cluster)");
        }
        let name = name(i);
        // An earlier extra node whose test ended without deleting it (a failed test) would
        // stay NotReady: with several, the node lifecycle controller sees a disrupted zone and
        // stops evicting. Nothing of those runs any more (each was fenced when dropped).
        for earlier in 0..i {
            delete_node(self, &self::name(earlier)).await?;
        }
        let ip = format!("10.10.0.{}", i + 2);
        let ns = self.netns().context("tier 3 runs in a namespace")?;
        let out = Command::new("nsenter")
            .args(["--target", &ns.pid().to_string(), "--net", "--"])
            .args(["ip", "addr", "add", &format!("{ip}/24"), "dev", "node0"])
            .output()?;
        if !out.status.success() {
            bail!(
                "adding {ip} inside the namespace: {}",
                String::from_utf8_lossy(&out.stderr)
            );
        }
        let dir = self.control_plane().dir().join(&name);
        let cgroup = format!("{}/{name}", self.cgroup_root());
        self.create_cgroup(&cgroup)?;
        let socket = dir.join("containerd").join("containerd.sock");
        let node = ExtraNode {
            cluster: self,
            kubelet: format!("kubelet-{name}"),
            containerd: format!("containerd-{name}"),
            name,
            ip,
            dir,
            cgroup,
            socket,
            state: State::Running,
            killed: 0,
        };
        self.start_containerd(&node.containerd, &node.dir.join("containerd"), &node.socket)?;
        self.run_kubelet(&KubeletSpec {
            process: &node.kubelet,
            node_name: &node.name,
            ip: &node.ip,
            identity: &slug(i),
            cgroup_root: &node.cgroup,
            socket: node.socket.clone(),
            root_dir: node.dir.join("kubelet"),
            pod_logs: node.pod_logs_dir(),
            healthz_port: 0,
            labels: &[(POOL_LABEL, pool)],
            taints: serde_json::json!([
                {"key": EXTRA_NODE_TAINT, "value": "true", "effect": "NoSchedule"}
            ]),
        })
        .await?;
        let rss_kib: u64 = [&node.kubelet, &node.containerd]
            .iter()
            .filter_map(|p| self.with_process(p, |p| p.pid()).flatten())
            .filter_map(rss_kib)
            .sum();
        eprintln!(
            "extra node {} Ready in {:.1?}; its kubelet and containerd use {} MiB",
            node.name,
            t0.elapsed(),
            rss_kib / 1024
        );
        Ok(node)
    }
}

/// A process's resident memory (`VmRSS` of `/proc/<pid>/status`), in KiB.
fn rss_kib(pid: u32) -> Option<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))?
        .split_whitespace()
        .next()?
        .parse()
        .ok()
}

impl ExtraNode<'_> {
    /// Where containerd writes this node's pods' CRI logs.
    pub fn pod_logs_dir(&self) -> PathBuf {
        self.dir.join("pod-logs")
    }

    /// Lose the node: freeze its kubelet. Its containers run on.
    pub fn lose(&mut self) -> anyhow::Result<()> {
        self.cluster
            .with_process(&self.kubelet, |p| p.signal("STOP"))
            .context("the node's kubelet")??;
        self.state = State::Lost;
        Ok(())
    }

    /// Whether the node's kubelet is frozen and its processes not yet fenced.
    pub fn is_lost(&self) -> bool {
        self.state == State::Lost
    }

    /// Fence the node as a power-off would: kill its kubelet, every process in its cgroups
    /// (the containers), its containerd and containerd's shims, and wait until none is left.
    /// Returns the moment after which nothing of the node ran.
    pub fn fence(&mut self) -> anyhow::Result<jiff::Timestamp> {
        self.cluster.with_process(&self.kubelet, |p| p.kill());
        let mut killed = std::collections::BTreeSet::new();
        for _ in 0..100 {
            let containers = self.cgroup_pids();
            killed.extend(containers.iter().copied());
            let mut pids = containers;
            pids.extend(shims_of(&self.socket));
            if pids.is_empty() {
                break;
            }
            for pid in &pids {
                let _ = Command::new("kill")
                    .args(["-KILL", &pid.to_string()])
                    .status();
            }
            std::thread::sleep(std::time::Duration::from_millis(100));
        }
        self.cluster.with_process(&self.containerd, |p| p.kill());
        let left = self.cgroup_pids();
        if !left.is_empty() {
            bail!("processes of {} left after the fence: {left:?}", self.name);
        }
        self.state = State::Fenced;
        self.killed = killed.len();
        Ok(jiff::Timestamp::now())
    }

    /// How many processes in the node's cgroups (its containers, their pause processes) the
    /// fence killed: a fence of a node that ran pods kills some.
    pub fn killed_processes(&self) -> usize {
        self.killed
    }

    /// Every pid in the node's cgroups (each v1 hierarchy, recursively).
    fn cgroup_pids(&self) -> Vec<u32> {
        let mut out = Vec::new();
        let Ok(hierarchies) = std::fs::read_dir("/sys/fs/cgroup") else {
            return out;
        };
        for h in hierarchies.flatten() {
            collect_pids(&h.path().join(&self.cgroup), &mut out);
        }
        out.sort_unstable();
        out.dedup();
        out
    }

    /// Delete the Node object (after a fence: nothing answers for it any more).
    pub async fn delete_node(&self) -> anyhow::Result<()> {
        delete_node(self.cluster, &self.name).await
    }

    /// The kubelet's log, for failures.
    pub fn kubelet_log(&self, lines: usize) -> String {
        self.cluster.log_tail(&self.kubelet, lines)
    }
}

impl Drop for ExtraNode<'_> {
    /// A node a test leaves behind is fenced, so no process of it outlives its test.
    fn drop(&mut self) {
        if self.state != State::Fenced
            && let Err(e) = self.fence()
        {
            eprintln!("fencing {} on drop: {e:#}", self.name);
        }
    }
}

/// Delete Node `name` if it exists.
async fn delete_node(cluster: &NodeCluster, name: &str) -> anyhow::Result<()> {
    let admin = cluster.client(Identity::Admin).await?;
    let nodes: Api<Node> = Api::all(admin);
    match nodes.delete(name, &DeleteParams::default()).await {
        Ok(_) => Ok(()),
        Err(kube::Error::Api(s)) if s.code == 404 => Ok(()),
        Err(e) => Err(e.into()),
    }
}

fn collect_pids(dir: &Path, out: &mut Vec<u32>) {
    if let Ok(procs) = std::fs::read_to_string(dir.join("cgroup.procs")) {
        out.extend(procs.lines().filter_map(|l| l.trim().parse::<u32>().ok()));
    }
    if let Ok(entries) = std::fs::read_dir(dir) {
        for e in entries.flatten() {
            if e.file_type().is_ok_and(|t| t.is_dir()) {
                collect_pids(&e.path(), out);
            }
        }
    }
}

/// The pids of containerd shims serving the containerd of `socket` (their command line names
/// it: `-address <socket>`).
fn shims_of(socket: &Path) -> Vec<u32> {
    let want = socket.display().to_string();
    let mut out = Vec::new();
    let Ok(procs) = std::fs::read_dir("/proc") else {
        return out;
    };
    for p in procs.flatten() {
        let Some(pid) = p.file_name().to_str().and_then(|n| n.parse::<u32>().ok()) else {
            continue;
        };
        let Ok(cmdline) = std::fs::read(p.path().join("cmdline")) else {
            continue;
        };
        let args: Vec<&[u8]> = cmdline.split(|b| *b == 0).collect();
        let is_shim = args
            .first()
            .is_some_and(|a| String::from_utf8_lossy(a).contains("containerd-shim"));
        if is_shim && args.contains(&want.as_bytes()) {
            out.push(pid);
        }
    }
    out
}

/// Label the main node `POOL_LABEL=pool` (`None`: remove the label), so that a pool's pods
/// may run there too.
pub async fn label_main_node(cluster: &NodeCluster, pool: Option<&str>) -> anyhow::Result<()> {
    let admin = cluster.client(Identity::Admin).await?;
    Api::<Node>::all(admin)
        .patch(
            NODE_NAME,
            &PatchParams::default(),
            &Patch::Merge(serde_json::json!({"metadata": {"labels": {POOL_LABEL: pool}}})),
        )
        .await?;
    Ok(())
}

/// One line of a CRI log file, as containerd wrote it: when it read the line, from which
/// stream, and the text.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CriLine {
    pub at: jiff::Timestamp,
    pub stream: String,
    pub text: String,
}

/// Parse one CRI log line (`<RFC 3339 nano> <stdout|stderr> <F|P> <text>`); `None` if it is
/// not one.
pub fn parse_cri_line(line: &str) -> Option<CriLine> {
    let mut parts = line.splitn(4, ' ');
    let at = parts.next()?.parse::<jiff::Timestamp>().ok()?;
    let stream = parts.next()?;
    let tag = parts.next()?;
    if !matches!(stream, "stdout" | "stderr") || !matches!(tag, "F" | "P") {
        return None;
    }
    Some(CriLine {
        at,
        stream: stream.to_owned(),
        text: parts.next().unwrap_or_default().to_owned(),
    })
}

/// Every CRI log line containerd wrote for `container` of pod `ns/pod` (uid `uid`) under a
/// node's pod-log directory `dir`, every restart's file in order.
pub fn cri_lines(
    dir: &Path,
    ns: &str,
    pod: &str,
    uid: &str,
    container: &str,
) -> anyhow::Result<Vec<CriLine>> {
    let cdir = dir.join(format!("{ns}_{pod}_{uid}")).join(container);
    let mut files: Vec<(u32, PathBuf)> = std::fs::read_dir(&cdir)
        .with_context(|| {
            let near: Vec<String> = std::fs::read_dir(dir)
                .into_iter()
                .flatten()
                .flatten()
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .collect();
            format!(
                "reading {} (in {}: {near:?})",
                cdir.display(),
                dir.display()
            )
        })?
        .flatten()
        .filter_map(|e| {
            let name = e.file_name().to_string_lossy().into_owned();
            let n = name.strip_suffix(".log")?.parse::<u32>().ok()?;
            Some((n, e.path()))
        })
        .collect();
    files.sort();
    let mut out = Vec::new();
    for (_, f) in files {
        let text = std::fs::read_to_string(&f)?;
        out.extend(text.lines().filter_map(parse_cri_line));
    }
    Ok(out)
}

/// When a container ran by containerd's records: its first and last line.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Ran {
    pub first: jiff::Timestamp,
    pub last: jiff::Timestamp,
}

/// The span of `lines` (`None`: no line).
pub fn ran(lines: &[CriLine]) -> Option<Ran> {
    Some(Ran {
        first: lines.iter().map(|l| l.at).min()?,
        last: lines.iter().map(|l| l.at).max()?,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_cri_log_line_gives_containerds_time_the_stream_and_the_text() {
        let l = parse_cri_line("2026-12-04T21:30:01.123456789Z stdout F workload: heartbeat 3s")
            .expect("a CRI line");
        assert_eq!(l.at.to_string(), "2026-12-04T21:30:01.123456789Z");
        assert_eq!(l.stream, "stdout");
        assert_eq!(l.text, "workload: heartbeat 3s");
        let partial = parse_cri_line("2026-12-04T21:30:01Z stderr P part").expect("partial");
        assert_eq!(partial.text, "part");
    }

    #[test]
    fn a_line_that_is_not_a_cri_line_is_none() {
        assert_eq!(parse_cri_line("workload: heartbeat"), None);
        assert_eq!(parse_cri_line("2026-12-04T21:30:01Z stdin F x"), None);
        assert_eq!(parse_cri_line("not-a-time stdout F x"), None);
        assert_eq!(parse_cri_line(""), None);
    }

    #[test]
    fn a_containers_span_is_its_first_and_last_line() {
        let lines: Vec<CriLine> = [
            "2026-12-04T21:30:02Z stdout F b",
            "2026-12-04T21:30:01Z stdout F a",
            "2026-12-04T21:30:05Z stdout F c",
        ]
        .iter()
        .filter_map(|l| parse_cri_line(l))
        .collect();
        let span = ran(&lines).expect("span");
        assert_eq!(span.first.to_string(), "2026-12-04T21:30:01Z");
        assert_eq!(span.last.to_string(), "2026-12-04T21:30:05Z");
        assert_eq!(ran(&[]), None);
    }

    #[test]
    fn extra_nodes_have_distinct_names_and_node_identities() {
        let ids = identities();
        assert_eq!(ids.len(), EXTRA_NODES);
        assert_eq!(ids[0].1, "system:node:holdfast-node-2");
        let mut names: Vec<&str> = ids.iter().map(|i| i.1.as_str()).collect();
        names.dedup();
        assert_eq!(names.len(), EXTRA_NODES);
    }
}
