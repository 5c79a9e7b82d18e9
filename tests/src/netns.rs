//! Tier 3's own network and mount namespaces, and loopback forwarding into them.
//!
//! A holder process (`unshare --net --mount --propagation private`) creates both namespaces,
//! gives the network one loopback and a veth pair (both ends inside; this kernel has no
//! dummy interfaces) with the node's address, and mounts
//! tmpfs over the few host paths the node's components write to whatever their flags say
//! (`/run/containerd` for shim sockets, `/var/lib/cni`, `/var/log/pods`,
//! `/var/log/containers`), then sleeps. Every process of the cluster is started inside both
//! namespaces with `nsenter --target HOLDER --net --mount`: no packet of the cluster leaves
//! that network namespace (it has no route out), and every mount made in it (kubelet's volumes,
//! containerd's snapshots, pod network namespaces) is private to it and disappears with its
//! last process.
//!
//! The test process reaches a service inside through [`NetNs::forward`]: a listener on the
//! host's 127.0.0.1 whose connections a thread — moved into the namespace with setns(2) —
//! relays to an address inside. [`NetNs::forward_same_port`] gives a port that is the same
//! number on both sides, so one URL (`https://127.0.0.1:PORT`) works from the test process
//! and from inside the namespace alike.

use crate::process::Supervised;
use anyhow::{Context, bail};
use std::fs::File;
use std::io::{Read, Write};
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream};
use std::os::fd::AsFd;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

/// What the namespace is given when it is created.
#[derive(Clone, Debug)]
pub struct Spec {
    /// The node's address with its prefix (`10.10.0.1/24`), on `node0`, one end of a veth
    /// pair whose other end is inside too.
    pub address: String,
    /// Host directories covered by a tmpfs inside the mount namespace (created first if
    /// missing, and removed again by [`NetNs::cleanup_script`] if they were).
    pub private_dirs: Vec<PathBuf>,
    /// Machine-wide sysctls (`kernel/panic`, …) that processes inside must see with these
    /// values without the host's being changed: inside the mount namespace a file holding
    /// the value is bind-mounted over `/proc/sys/<name>`. (kubelet sets a few machine-wide
    /// kernel settings it wants unless they already read as it wants them.)
    pub shadow_sysctls: Vec<(String, String)>,
    /// A cgroup name (`holdfast-node-<pid>`) made under every hierarchy for what runs
    /// inside (kubelet's `cgroupRoot`); [`NetNs::cleanup_script`] kills what is in it and
    /// removes it.
    pub cgroup_root: Option<String>,
    /// Subnets routed to `node0` (the Service range: a connection from the namespace's own
    /// processes to a Service address needs a route before kube-proxy's DNAT rewrites it).
    pub routes: Vec<String>,
}

/// The namespaces, held by a process in the control plane's process group.
#[derive(Debug)]
pub struct NetNs {
    holder: std::sync::Mutex<Supervised>,
    pid: u32,
    ns: File,
    inode: u64,
    created_dirs: Vec<PathBuf>,
    cgroup_root: Option<String>,
    stopped: Arc<AtomicBool>,
    listeners: std::sync::Mutex<Vec<SocketAddr>>,
}

impl NetNs {
    /// Create the namespaces; `dir` holds the holder's log, `group` is the reaper's group.
    pub fn create(spec: &Spec, dir: &Path, group: i32) -> anyhow::Result<NetNs> {
        let mut created_dirs = Vec::new();
        for d in &spec.private_dirs {
            if !d.exists() {
                std::fs::create_dir_all(d).with_context(|| format!("creating {}", d.display()))?;
                created_dirs.push(d.clone());
            }
        }
        let ready = dir.join("netns.ready");
        let shadow = dir.join("sysctl-shadow");
        std::fs::create_dir_all(&shadow)?;
        let mut shadows = String::new();
        for (name, value) in &spec.shadow_sysctls {
            let file = shadow.join(name.replace('/', "_"));
            std::fs::write(&file, format!("{value}\n"))?;
            shadows.push_str(&format!(
                "mount --bind {} /proc/sys/{name}\n",
                file.display()
            ));
        }
        let routes: String = spec
            .routes
            .iter()
            .map(|r| format!("ip route add {r} dev node0\n"))
            .collect();
        let script = format!(
            "set -e\n\
             for d in \"$@\"; do mount -t tmpfs -o mode=0755,size=256m holdfast-node \"$d\"; done\n\
             {shadows}\
             ip link set lo up\n\
             ip link add node0 type veth peer name node0-peer\n\
             ip addr add {address} dev node0\n\
             ip link set node0-peer up\n\
             ip link set node0 up\n\
             {routes}\
             sysctl -qw net.ipv4.ip_forward=1\n\
             sysctl -qw net.bridge.bridge-nf-call-iptables=1 || echo 'br_netfilter: no per-namespace sysctl' >&2\n\
             touch {ready}\n\
             exec sleep infinity\n",
            address = spec.address,
            ready = ready.display(),
        );
        let mut args: Vec<String> = vec![
            "--net".into(),
            "--mount".into(),
            "--propagation".into(),
            "private".into(),
            "--".into(),
            "bash".into(),
            "-c".into(),
            script,
            "netns-holder".into(),
        ];
        args.extend(spec.private_dirs.iter().map(|d| d.display().to_string()));
        let mut holder = Supervised::start("netns", Path::new("unshare"), args, dir, group)?;
        let start = Instant::now();
        while !ready.exists() {
            let failed = if !holder.running() {
                Some(format!(
                    "the namespace holder exited:\n{}",
                    holder.log_tail(20)
                ))
            } else if start.elapsed() > Duration::from_secs(20) {
                Some(format!(
                    "the namespace holder not ready after 20s:\n{}",
                    holder.log_tail(20)
                ))
            } else {
                None
            };
            if let Some(msg) = failed {
                holder.kill();
                for d in &created_dirs {
                    let _ = std::fs::remove_dir(d);
                }
                bail!(msg);
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        let pid = holder.pid().context("holder has no pid")?;
        let ns = File::open(format!("/proc/{pid}/ns/net"))?;
        let inode = ns.metadata()?.ino();
        Ok(NetNs {
            holder: std::sync::Mutex::new(holder),
            pid,
            ns,
            inode,
            created_dirs,
            cgroup_root: spec.cgroup_root.clone(),
            stopped: Arc::new(AtomicBool::new(false)),
            listeners: std::sync::Mutex::new(Vec::new()),
        })
    }

    /// The holder's pid (what `nsenter --target` takes).
    pub fn pid(&self) -> u32 {
        self.pid
    }

    /// `program args…` as a command line that runs inside the namespaces, with `env` set.
    pub fn wrap(
        &self,
        program: &Path,
        args: Vec<String>,
        env: &[(String, String)],
    ) -> (PathBuf, Vec<String>) {
        let mut out = vec![
            "--target".to_string(),
            self.pid.to_string(),
            "--net".into(),
            "--mount".into(),
            "--".into(),
        ];
        if !env.is_empty() {
            out.push("env".into());
            out.extend(env.iter().map(|(k, v)| format!("{k}={v}")));
        }
        out.push(program.display().to_string());
        out.extend(args);
        (PathBuf::from("nsenter"), out)
    }

    /// A port P on the host's 127.0.0.1 whose connections go to 127.0.0.1:P inside.
    pub fn forward_same_port(&self) -> anyhow::Result<u16> {
        let listener = TcpListener::bind("127.0.0.1:0")?;
        let port = listener.local_addr()?.port();
        self.relay(listener, SocketAddr::from(([127, 0, 0, 1], port)))?;
        Ok(port)
    }

    /// A port on the host's 127.0.0.1 whose connections go to `target` inside (a pod's
    /// address, a Service's, a component's).
    pub fn forward(&self, target: SocketAddr) -> anyhow::Result<u16> {
        let listener = TcpListener::bind("127.0.0.1:0")?;
        let port = listener.local_addr()?.port();
        self.relay(listener, target)?;
        Ok(port)
    }

    fn relay(&self, listener: TcpListener, target: SocketAddr) -> anyhow::Result<()> {
        let ns = self.ns.try_clone()?;
        let stopped = self.stopped.clone();
        self.listeners
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .push(listener.local_addr()?);
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::Builder::new()
            .name(format!("netns-forward-{target}"))
            .spawn(move || {
                // This thread, and the ones it starts, live in the namespace from here on;
                // the listener was bound on the host before.
                let moved = rustix::thread::move_into_link_name_space(
                    ns.as_fd(),
                    Some(rustix::thread::LinkNameSpaceType::Network),
                );
                let _ = tx.send(moved.map_err(std::io::Error::from));
                for client in listener.incoming() {
                    if stopped.load(Ordering::SeqCst) {
                        break;
                    }
                    let Ok(client) = client else { continue };
                    let Ok(upstream) = TcpStream::connect_timeout(&target, Duration::from_secs(5))
                    else {
                        continue; // the client sees the connection closed, as if refused
                    };
                    let _ = client.set_nodelay(true);
                    let _ = upstream.set_nodelay(true);
                    pipe(client, upstream);
                }
            })?;
        rx.recv()
            .context("the forwarding thread ended early")?
            .context("setns into the cluster's network namespace")?;
        Ok(())
    }

    /// A shell script that ends what the process group's kill does not reach: processes
    /// still in the network namespace (containerd's shims daemonize out of the group), every
    /// process in the cgroups under [`Spec::cgroup_root`] (the pods' containers), then
    /// removes those cgroups and the directories created for the tmpfs mounts. The control
    /// plane writes it into its directory as `cleanup.sh`, which the reaper runs.
    pub fn cleanup_script(&self) -> String {
        // With no cgroup root, a name that matches nothing.
        let cgroup_root = self
            .cgroup_root
            .clone()
            .unwrap_or_else(|| "holdfast-no-cgroup-root".into());
        let created: Vec<String> = self
            .created_dirs
            .iter()
            .map(|d| format!("'{}'", d.display()))
            .collect();
        format!(
            "#!/bin/bash\n\
             # Written by holdfast-tests (tests/src/netns.rs); run by the reaper at teardown.\n\
             ns='net:[{inode}]'\n\
             root='{cgroup_root}'\n\
             for round in $(seq 1 100); do\n\
             \x20 pids=''\n\
             \x20 for f in $(find /sys/fs/cgroup/*/\"$root\" -name cgroup.procs 2>/dev/null); do pids=\"$pids $(cat \"$f\" 2>/dev/null)\"; done\n\
             \x20 for p in /proc/[0-9]*; do [ \"$(readlink \"$p/ns/net\" 2>/dev/null)\" = \"$ns\" ] && pids=\"$pids ${{p#/proc/}}\"; done\n\
             \x20 [ -z \"${{pids// /}}\" ] && break\n\
             \x20 kill -KILL $pids 2>/dev/null\n\
             \x20 sleep 0.1\n\
             done\n\
             # Killed processes leave their cgroup only once reaped: retry for a while.\n\
             for round in $(seq 1 100); do\n\
             \x20 left=0\n\
             \x20 for h in /sys/fs/cgroup/*; do\n\
             \x20   [ -d \"$h/$root\" ] || continue\n\
             \x20   find \"$h/$root\" -depth -type d -exec rmdir {{}} \\; 2>/dev/null\n\
             \x20   [ -d \"$h/$root\" ] && left=1\n\
             \x20 done\n\
             \x20 [ $left = 0 ] && break\n\
             \x20 sleep 0.1\n\
             done\n\
             for d in {created}; do rmdir \"$d\" 2>/dev/null; done\n\
             exit 0\n",
            inode = self.inode,
            created = created.join(" "),
        )
    }

    /// Stop forwarding and end the holder (the processes inside must be gone already).
    pub fn stop(&self) {
        self.stopped.store(true, Ordering::SeqCst);
        for addr in self
            .listeners
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .drain(..)
        {
            // Wake the accept loop so that it sees the flag.
            let _ = TcpStream::connect_timeout(&addr, Duration::from_millis(200));
        }
        self.holder
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .kill();
    }
}

impl Drop for NetNs {
    fn drop(&mut self) {
        self.stop();
    }
}

/// Copy both ways between two connections on two threads; each direction's end is passed
/// on as a half-close.
fn pipe(a: TcpStream, b: TcpStream) {
    let (Ok(a2), Ok(b2)) = (a.try_clone(), b.try_clone()) else {
        return;
    };
    let one = move |mut from: TcpStream, mut to: TcpStream| {
        let mut buf = vec![0u8; 64 * 1024];
        loop {
            match from.read(&mut buf) {
                Ok(0) | Err(_) => break,
                Ok(n) => {
                    if to.write_all(&buf[..n]).is_err() {
                        break;
                    }
                }
            }
        }
        let _ = to.shutdown(Shutdown::Write);
        let _ = from.shutdown(Shutdown::Read);
    };
    let _ = std::thread::Builder::new()
        .name("netns-pipe".into())
        .spawn(move || one(a, b));
    let _ = std::thread::Builder::new()
        .name("netns-pipe".into())
        .spawn(move || one(b2, a2));
}
