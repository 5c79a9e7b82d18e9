//! Child processes of the control plane, and the reaper that ends them with their parent.

use anyhow::Context;
use std::fs::File;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};

/// A process started with its output in a log file, in the reaper's process group.
#[derive(Debug)]
pub struct Supervised {
    pub name: String,
    pub log: PathBuf,
    program: PathBuf,
    args: Vec<String>,
    group: i32,
    child: Option<Child>,
}

impl Supervised {
    /// Start `program args…`, logging to `dir/name.log`, in process group `group`.
    pub fn start(
        name: &str,
        program: &Path,
        args: Vec<String>,
        dir: &Path,
        group: i32,
    ) -> anyhow::Result<Self> {
        let mut s = Supervised {
            name: name.to_owned(),
            log: dir.join(format!("{name}.log")),
            program: program.to_owned(),
            args,
            group,
            child: None,
        };
        s.spawn()?;
        Ok(s)
    }

    fn spawn(&mut self) -> anyhow::Result<()> {
        let log = File::options()
            .create(true)
            .append(true)
            .open(&self.log)
            .with_context(|| format!("opening {}", self.log.display()))?;
        let child = Command::new(&self.program)
            .args(&self.args)
            .stdin(Stdio::null())
            .stdout(log.try_clone()?)
            .stderr(log)
            .process_group(self.group)
            .spawn()
            .with_context(|| format!("starting {}", self.program.display()))?;
        self.child = Some(child);
        Ok(())
    }

    pub fn pid(&self) -> Option<u32> {
        self.child.as_ref().map(Child::id)
    }

    /// Whether the process is still running.
    pub fn running(&mut self) -> bool {
        match self.child.as_mut() {
            Some(c) => matches!(c.try_wait(), Ok(None)),
            None => false,
        }
    }

    /// Stop it with SIGKILL and reap it.
    pub fn kill(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }

    /// Send a signal by name (`STOP`, `CONT`, `TERM`, …) with kill(1).
    pub fn signal(&self, signal: &str) -> anyhow::Result<()> {
        let pid = self.pid().context("process not running")?;
        let st = Command::new("kill")
            .arg(format!("-{signal}"))
            .arg(pid.to_string())
            .status()?;
        anyhow::ensure!(st.success(), "kill -{signal} {pid} failed");
        Ok(())
    }

    /// Start it again with the same arguments (after `kill`).
    pub fn restart(&mut self) -> anyhow::Result<()> {
        self.kill();
        self.spawn()
    }

    /// The last lines of its log, for error messages.
    pub fn log_tail(&self, lines: usize) -> String {
        let text = std::fs::read_to_string(&self.log).unwrap_or_default();
        // kube components print every flag at start-up: those lines never explain a failure.
        let all: Vec<&str> = text.lines().filter(|l| !l.contains("FLAG: --")).collect();
        all[all.len().saturating_sub(lines)..].join("\n")
    }
}

impl Drop for Supervised {
    fn drop(&mut self) {
        self.kill();
    }
}

/// A shell process that leads the process group of every child and, once `parent` is gone
/// (normal exit, panic, or kill -9 of the test binary), kills the group and removes `dir`.
#[derive(Debug)]
pub struct Reaper {
    child: Child,
}

impl Reaper {
    pub fn start(dir: &Path) -> anyhow::Result<Self> {
        let parent = std::process::id();
        // The reaper ignores TERM itself, ends the group, runs the directory's `cleanup.sh`
        // if there is one (tier 3: what lives outside the group, such as containers), removes
        // the directory, then ends the group again with KILL (itself included).
        let script = format!(
            "trap '' TERM INT HUP; \
             while kill -0 {parent} 2>/dev/null && [ ! -e \"$1/.stop\" ]; do sleep 0.3; done; \
             kill -TERM -- -$$ 2>/dev/null; sleep 1; \
             if [ -f \"$1/cleanup.sh\" ]; then bash \"$1/cleanup.sh\" >\"$1/cleanup.log\" 2>&1; fi; \
             rm -rf \"$1\"; kill -KILL -- -$$ 2>/dev/null"
        );
        let child = Command::new("bash")
            .arg("-c")
            .arg(script)
            .arg("reaper")
            .arg(dir)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .process_group(0)
            .spawn()
            .context("starting the reaper")?;
        Ok(Reaper { child })
    }

    /// The process group every supervised child joins.
    pub fn group(&self) -> i32 {
        i32::try_from(self.child.id()).unwrap_or(0)
    }

    /// Ask the reaper to end everything now and wait for it.
    pub fn finish(&mut self, dir: &Path) {
        let _ = File::create(dir.join(".stop"));
        let _ = self.child.wait();
    }
}
