//! The process metrics every Prometheus client library exports, under their standard names,
//! read from `/proc/self` at scrape time (nothing is sampled in between):
//!
//! | metric | from |
//! | --- | --- |
//! | `process_resident_memory_bytes` | `/proc/self/status` `VmRSS` |
//! | `process_virtual_memory_bytes` | `/proc/self/status` `VmSize` |
//! | `process_cpu_seconds_total` | `/proc/self/stat` `utime + stime`, in clock ticks |
//! | `process_open_fds` | entries of `/proc/self/fd` |
//! | `process_max_fds` | `/proc/self/limits` `Max open files` (soft limit) |
//! | `process_start_time_seconds` | `/proc/self/stat` `starttime` after `/proc/stat` `btime` |
//! | `process_threads` | `/proc/self/status` `Threads` |
//!
//! A value that cannot be read (no `/proc`: not Linux) is left out of the scrape, never
//! reported as zero. Clock ticks are Linux's `USER_HZ`, which the kernel fixes at 100 for
//! every architecture it reports `/proc` times in.

use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeMetric};
use prometheus_client::metrics::MetricType;
use prometheus_client::metrics::counter::ConstCounter;
use prometheus_client::metrics::gauge::ConstGauge;
use prometheus_client::registry::Registry;
use std::path::{Path, PathBuf};

/// Linux's `USER_HZ`: the unit of the times in `/proc/<pid>/stat`.
const USER_HZ: f64 = 100.0;

/// The process collector, reading the `/proc` of one process (`/proc/self` in the binaries).
#[derive(Clone, Debug)]
pub struct ProcessCollector {
    proc_dir: PathBuf,
    proc_root: PathBuf,
}

impl ProcessCollector {
    /// Registers the process metrics of this process into `registry`.
    pub fn register(registry: &mut Registry) {
        registry.register_collector(Box::new(ProcessCollector {
            proc_dir: PathBuf::from("/proc/self"),
            proc_root: PathBuf::from("/proc"),
        }));
    }

    /// What one scrape reads now.
    pub fn sample(&self) -> Sample {
        let status = std::fs::read_to_string(self.proc_dir.join("status")).ok();
        let stat = std::fs::read_to_string(self.proc_dir.join("stat")).ok();
        let stat = stat.as_deref().and_then(StatFields::parse);
        let boot = std::fs::read_to_string(self.proc_root.join("stat"))
            .ok()
            .and_then(|s| boot_time(&s));
        let limits = std::fs::read_to_string(self.proc_dir.join("limits")).ok();
        Sample {
            resident_bytes: status.as_deref().and_then(|s| status_kib(s, "VmRSS")),
            virtual_bytes: status.as_deref().and_then(|s| status_kib(s, "VmSize")),
            threads: status.as_deref().and_then(|s| status_value(s, "Threads")),
            cpu_seconds: stat.map(|s| (s.utime + s.stime) as f64 / USER_HZ),
            start_time_seconds: match (stat, boot) {
                (Some(s), Some(b)) => Some(b as f64 + s.starttime as f64 / USER_HZ),
                _ => None,
            },
            open_fds: count_entries(&self.proc_dir.join("fd")),
            max_fds: limits.as_deref().and_then(max_open_files),
        }
    }
}

/// One reading of the process.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Sample {
    pub resident_bytes: Option<u64>,
    pub virtual_bytes: Option<u64>,
    pub threads: Option<u64>,
    pub cpu_seconds: Option<f64>,
    pub start_time_seconds: Option<f64>,
    pub open_fds: Option<u64>,
    pub max_fds: Option<u64>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct StatFields {
    utime: u64,
    stime: u64,
    starttime: u64,
}

impl StatFields {
    /// Fields 14, 15 and 22 of `/proc/<pid>/stat`. The command name (field 2) is in
    /// parentheses and may itself hold spaces and parentheses: fields are counted after the
    /// last `)`.
    fn parse(stat: &str) -> Option<Self> {
        let rest = &stat[stat.rfind(')')? + 1..];
        // `rest` starts at field 3 (state).
        let fields: Vec<&str> = rest.split_whitespace().collect();
        let field = |n: usize| fields.get(n - 3)?.parse::<u64>().ok();
        Some(StatFields {
            utime: field(14)?,
            stime: field(15)?,
            starttime: field(22)?,
        })
    }
}

fn status_value(status: &str, key: &str) -> Option<u64> {
    status.lines().find_map(|line| {
        let (k, v) = line.split_once(':')?;
        if k != key {
            return None;
        }
        v.split_whitespace().next()?.parse().ok()
    })
}

fn status_kib(status: &str, key: &str) -> Option<u64> {
    status_value(status, key)?.checked_mul(1024)
}

fn boot_time(proc_stat: &str) -> Option<u64> {
    proc_stat
        .lines()
        .find_map(|l| l.strip_prefix("btime ")?.trim().parse().ok())
}

fn max_open_files(limits: &str) -> Option<u64> {
    let line = limits.lines().find(|l| l.starts_with("Max open files"))?;
    let soft = line
        .strip_prefix("Max open files")?
        .split_whitespace()
        .next()?;
    // "unlimited" has no number: left out.
    soft.parse().ok()
}

fn count_entries(dir: &Path) -> Option<u64> {
    let entries = std::fs::read_dir(dir).ok()?;
    // Reading the directory opens one more descriptor, counted here as client libraries do.
    Some(entries.count() as u64)
}

fn gauge(
    encoder: &mut DescriptorEncoder,
    name: &str,
    help: &str,
    value: Option<f64>,
) -> Result<(), std::fmt::Error> {
    if let Some(v) = value {
        let metric = encoder.encode_descriptor(name, help, None, MetricType::Gauge)?;
        ConstGauge::new(v).encode(metric)?;
    }
    Ok(())
}

impl Collector for ProcessCollector {
    fn encode(&self, mut encoder: DescriptorEncoder) -> Result<(), std::fmt::Error> {
        let s = self.sample();
        let f = |v: Option<u64>| v.map(|v| v as f64);
        if let Some(cpu) = s.cpu_seconds {
            // A counter: the text encoder adds `_total`.
            let metric = encoder.encode_descriptor(
                "process_cpu_seconds",
                "Total user and system CPU time spent in seconds",
                None,
                MetricType::Counter,
            )?;
            ConstCounter::new(cpu).encode(metric)?;
        }
        gauge(
            &mut encoder,
            "process_resident_memory_bytes",
            "Resident memory size in bytes",
            f(s.resident_bytes),
        )?;
        gauge(
            &mut encoder,
            "process_virtual_memory_bytes",
            "Virtual memory size in bytes",
            f(s.virtual_bytes),
        )?;
        gauge(
            &mut encoder,
            "process_open_fds",
            "Number of open file descriptors",
            f(s.open_fds),
        )?;
        gauge(
            &mut encoder,
            "process_max_fds",
            "Maximum number of open file descriptors",
            f(s.max_fds),
        )?;
        gauge(
            &mut encoder,
            "process_start_time_seconds",
            "Start time of the process since unix epoch in seconds",
            s.start_time_seconds,
        )?;
        gauge(
            &mut encoder,
            "process_threads",
            "Number of OS threads in the process",
            f(s.threads),
        )?;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stat_fields_are_counted_after_the_last_parenthesis() {
        // A command name with spaces and a parenthesis of its own.
        let stat = "4242 (holdfast (x) y) S 1 4242 4242 0 -1 4194560 1000 0 0 0 \
                    250 50 0 0 20 0 9 0 123456 1000000 2000 18446744073709551615";
        assert_eq!(
            StatFields::parse(stat),
            Some(StatFields {
                utime: 250,
                stime: 50,
                starttime: 123456
            })
        );
        assert_eq!(StatFields::parse("garbage"), None);
        assert_eq!(StatFields::parse("1 (x) S 1 2"), None);
    }

    #[test]
    fn status_limits_and_boot_time_are_read_by_key() {
        let status = "Name:\tholdfast\nVmSize:\t  20000 kB\nVmRSS:\t    5120 kB\nThreads:\t9\n";
        assert_eq!(status_kib(status, "VmRSS"), Some(5120 * 1024));
        assert_eq!(status_kib(status, "VmSize"), Some(20000 * 1024));
        assert_eq!(status_value(status, "Threads"), Some(9));
        assert_eq!(status_value(status, "VmSwap"), None);
        let limits = "Limit                     Soft Limit           Hard Limit           Units     \n\
                      Max open files            1024                 524288               files     \n";
        assert_eq!(max_open_files(limits), Some(1024));
        let unlimited =
            "Max open files            unlimited            unlimited            files\n";
        assert_eq!(max_open_files(unlimited), None);
        assert_eq!(
            boot_time("cpu  1 2 3\nbtime 1700000000\nprocesses 9\n"),
            Some(1_700_000_000)
        );
    }

    #[test]
    fn this_process_is_read_and_encoded_under_the_standard_names() {
        let mut registry = Registry::default();
        ProcessCollector::register(&mut registry);
        let mut text = String::new();
        prometheus_client::encoding::text::encode(&mut text, &registry).expect("encode");
        for name in [
            "process_cpu_seconds_total ",
            "process_resident_memory_bytes ",
            "process_open_fds ",
            "process_max_fds ",
            "process_start_time_seconds ",
        ] {
            assert!(text.lines().any(|l| l.starts_with(name)), "{name}: {text}");
        }
        let s = ProcessCollector {
            proc_dir: PathBuf::from("/proc/self"),
            proc_root: PathBuf::from("/proc"),
        }
        .sample();
        assert!(s.resident_bytes.is_some_and(|b| b > 0), "{s:?}");
        assert!(s.open_fds.is_some_and(|n| n >= 3), "{s:?}");
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .expect("after 1970")
            .as_secs_f64();
        // Started after 2020 and not in the future (a tick of rounding allowed).
        assert!(
            s.start_time_seconds
                .is_some_and(|t| t > 1_577_836_800.0 && t <= now + 0.01),
            "{s:?}"
        );
    }

    #[test]
    fn without_proc_nothing_is_reported() {
        let c = ProcessCollector {
            proc_dir: PathBuf::from("/nonexistent/self"),
            proc_root: PathBuf::from("/nonexistent"),
        };
        assert_eq!(c.sample(), Sample::default());
        let mut registry = Registry::default();
        registry.register_collector(Box::new(c));
        let mut text = String::new();
        prometheus_client::encoding::text::encode(&mut text, &registry).expect("encode");
        assert!(!text.contains("process_"), "{text}");
    }
}
