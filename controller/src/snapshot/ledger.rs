//! What this process has learned about TrainJobs' snapshots beyond what the ConfigMap
//! metadata shows: snapshots someone else wrote, read in full once and accepted; ConfigMaps
//! it refused and runtimes it could not snapshot (so each is reported once, not on every
//! reconciliation) — and the runtime content of snapshots, interned by digest (thousands of
//! TrainJobs snapshotting one runtime version share one copy), for drift.

use serde_json::Value;
use std::collections::HashMap;
use std::sync::{Arc, Mutex};

/// A TrainJob by namespace and name.
pub type JobKey = (String, String);

/// A snapshot known to be this TrainJob's.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Known {
    /// The TrainJob's uid it is controlled by.
    pub trainjob_uid: String,
    /// The ConfigMap's uid and resourceVersion when it was read.
    pub configmap_uid: Option<String>,
    pub configmap_resource_version: Option<String>,
    /// SHA-256 of the `runtime` data (the key into the content cache).
    pub digest: String,
    /// The runtime resourceVersion the snapshot copied, if recorded.
    pub source_resource_version: Option<String>,
    /// Whether holdfast wrote it (verbatim snapshot form) or someone else (whole object).
    pub holdfasts: bool,
}

/// A ConfigMap at the snapshot's name that is not used.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Refused {
    pub configmap_uid: Option<String>,
    pub configmap_resource_version: Option<String>,
}

#[derive(Clone, Debug)]
enum Entry {
    Known(Known),
    Refused(Refused),
    /// The runtime at this resourceVersion cannot be snapshotted (reported once).
    Unsnapshottable {
        runtime_resource_version: String,
    },
}

/// The ledger. Cheap to clone.
#[derive(Clone, Default)]
pub struct Ledger {
    inner: Arc<Mutex<Inner>>,
}

#[derive(Default)]
struct Inner {
    jobs: HashMap<JobKey, Entry>,
    contents: HashMap<String, Arc<Value>>,
}

impl Ledger {
    /// The snapshot known for a TrainJob (of this uid).
    pub fn known(&self, job: &JobKey, trainjob_uid: &str) -> Option<Known> {
        match self.lock()?.jobs.get(job) {
            Some(Entry::Known(k)) if k.trainjob_uid == trainjob_uid => Some(k.clone()),
            _ => None,
        }
    }

    pub fn record_known(&self, job: JobKey, known: Known) {
        if let Some(mut inner) = self.lock() {
            inner.jobs.insert(job, Entry::Known(known));
        }
    }

    /// Whether this exact ConfigMap version was already refused (and reported).
    pub fn already_refused(&self, job: &JobKey, refused: &Refused) -> bool {
        matches!(self.lock().and_then(|i| i.jobs.get(job).cloned()), Some(Entry::Refused(r)) if &r == refused)
    }

    pub fn record_refused(&self, job: JobKey, refused: Refused) {
        if let Some(mut inner) = self.lock() {
            inner.jobs.insert(job, Entry::Refused(refused));
        }
    }

    /// Whether this runtime version was already found unsnapshottable for this TrainJob.
    pub fn already_unsnapshottable(&self, job: &JobKey, runtime_resource_version: &str) -> bool {
        matches!(
            self.lock().and_then(|i| i.jobs.get(job).cloned()),
            Some(Entry::Unsnapshottable { runtime_resource_version: rv }) if rv == runtime_resource_version
        )
    }

    pub fn record_unsnapshottable(&self, job: JobKey, runtime_resource_version: String) {
        if let Some(mut inner) = self.lock() {
            inner.jobs.insert(
                job,
                Entry::Unsnapshottable {
                    runtime_resource_version,
                },
            );
        }
    }

    /// The runtime content of a snapshot digest, if seen.
    pub fn content(&self, digest: &str) -> Option<Arc<Value>> {
        self.lock()?.contents.get(digest).cloned()
    }

    /// Interns a snapshot's runtime content by digest.
    pub fn record_content(&self, digest: &str, runtime: Value) {
        if let Some(mut inner) = self.lock() {
            inner
                .contents
                .entry(digest.to_owned())
                .or_insert_with(|| Arc::new(runtime));
        }
    }

    /// Drops what is known of TrainJobs not in `live` (deleted), and contents no snapshot of
    /// a live TrainJob references any more.
    pub fn retain(&self, live: &dyn Fn(&JobKey) -> bool, referenced: &dyn Fn(&str) -> bool) {
        if let Some(mut inner) = self.lock() {
            inner.jobs.retain(|k, _| live(k));
            let in_ledger: std::collections::HashSet<String> = inner
                .jobs
                .values()
                .filter_map(|e| match e {
                    Entry::Known(k) => Some(k.digest.clone()),
                    _ => None,
                })
                .collect();
            inner
                .contents
                .retain(|d, _| in_ledger.contains(d) || referenced(d));
        }
    }

    fn lock(&self) -> Option<std::sync::MutexGuard<'_, Inner>> {
        self.inner.lock().ok()
    }
}

/// Lower-case hex SHA-256 of a snapshot's `runtime` data (what holdfast records in
/// `holdfast.dev/runtime-sha256`).
pub fn digest(yaml: &str) -> String {
    use sha2::{Digest, Sha256};
    hex::encode(Sha256::digest(yaml.as_bytes()))
}
