//! Drift: which unfinished TrainJobs' snapshots no longer equal their live runtime, so
//! admins see which jobs an edit did not reach.
//!
//! Computed from memory, per TrainJob: the snapshot's digest (holdfast's provenance
//! annotation, from the ConfigMap metadata watch; or the ledger's entry for a snapshot
//! someone else wrote) against the live runtime in the runtime watch. holdfast's snapshots
//! are verbatim renderings, so "in sync" is "the live runtime renders to the same digest" —
//! one rendering per runtime version, not per job. Snapshots someone else wrote (a whole
//! typed object) are compared structurally with `holdfast_core::snapshot::drift`, once per
//! (snapshot content, runtime version).
//!
//! The gauge `holdfast_snapshot_drifted_trainjobs{kind,runtime}` is recomputed every
//! [`super::Config::drift_interval`] and shortly after any runtime changes. The listing
//! (`GET /v1/drift`) also names the differing paths; for that it needs the snapshot's
//! content, read once per distinct snapshot content if this process has not seen it.
//!
//! A TrainJob whose runtime was deleted counts as drifted (`runtimeMissing`). Finished
//! TrainJobs are left out: they never read their runtime again.

use holdfast_core::snapshot::{self as core, Drift, RuntimeRef};
use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{Api, DynamicObject};
use serde::Serialize;
use serde_json::Value;
use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio_util::sync::CancellationToken;

use super::ledger::digest;
use super::metrics::RuntimeLabels;
use super::reconcile::Context;
use super::runtimes::RuntimeKey;
use crate::trainjob::TrainJob;
use holdfast_core::names;

/// The `GET /v1/drift` answer.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, serde::Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct DriftReport {
    /// Unfinished TrainJobs whose snapshot differs from the live runtime.
    pub trainjobs: Vec<DriftedTrainJob>,
}

/// One drifted TrainJob.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, serde::Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct DriftedTrainJob {
    pub namespace: String,
    pub trainjob: String,
    /// `spec.runtimeRef`.
    pub runtime: RuntimeRef,
    /// JSON pointers into the runtime of the first differences (at most
    /// `holdfast_core::snapshot::MAX_DRIFT_PATHS`); empty when the runtime is gone.
    pub paths: Vec<String>,
    /// The runtime no longer exists.
    pub runtime_missing: bool,
}

/// What a snapshot is, for comparing.
struct Facts {
    digest: String,
    /// A verbatim holdfast rendering (compare by digest) or a whole-object copy.
    holdfasts: bool,
}

/// Caches across passes, keyed by runtime version so they never go stale.
#[derive(Default)]
pub struct DriftCache {
    /// (runtime, resourceVersion) → digest of its rendering.
    live_digests: HashMap<(RuntimeKey, String), String>,
    /// (snapshot digest, runtime, resourceVersion) → the comparison.
    compared: HashMap<(String, RuntimeKey, String), Drift>,
    /// The gauge's label sets last published.
    published: HashSet<RuntimeLabels>,
}

/// Which TrainJobs a computation covers.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Scope<'a> {
    /// Every namespace: the gauge's pass, and a cluster-wide `GET /v1/drift`.
    All,
    /// One namespace's TrainJobs (`GET /v1/drift?namespace=NS`): no other job is compared,
    /// and no snapshot of another namespace is read.
    Namespace(&'a str),
}

impl Scope<'_> {
    fn covers(self, job: &TrainJob) -> bool {
        match self {
            Scope::All => true,
            Scope::Namespace(ns) => job.metadata.namespace.as_deref() == Some(ns),
        }
    }
}

/// Computes the drift of the TrainJobs in `scope`, and the count per runtime; with `paths`,
/// also what differs (reading snapshot contents this process has not seen).
pub async fn compute(
    ctx: &Context,
    cache: &Mutex<DriftCache>,
    paths: bool,
    scope: Scope<'_>,
) -> (DriftReport, BTreeMap<RuntimeLabels, i64>) {
    let watched = ctx.trainjobs.state();
    let jobs: Vec<&TrainJob> = watched
        .iter()
        .filter_map(|w| w.0.as_ref().ok())
        .filter(|job| scope.covers(job))
        .collect();
    // Start the watches of the runtime kinds in use (after a restart no reconciliation
    // may have needed them yet).
    let mut kinds: HashSet<(String, String)> = HashSet::new();
    for job in &jobs {
        if let Ok(r) = job.runtime_ref() {
            kinds.insert((r.api_group, r.kind));
        }
    }
    for (group, kind) in kinds {
        let reference = RuntimeRef {
            api_group: group,
            kind,
            name: String::new(),
        };
        if let Err(e) = ctx.runtimes.watch_for(&reference).await {
            tracing::debug!(error = %e, "drift: runtime kind not watched");
        }
    }

    let mut report = DriftReport::default();
    let mut counts: BTreeMap<RuntimeLabels, i64> = BTreeMap::new();
    let mut referenced: HashSet<String> = HashSet::new();
    let mut live_jobs: HashSet<(String, String)> = HashSet::new();
    for job in &jobs {
        let (Some(namespace), Some(name), Some(uid)) = (
            job.metadata.namespace.as_deref(),
            job.metadata.name.as_deref(),
            job.metadata.uid.as_deref(),
        ) else {
            continue;
        };
        live_jobs.insert((namespace.to_owned(), name.to_owned()));
        let Ok(reference) = job.runtime_ref() else {
            continue;
        };
        let Some(watch) = ctx.runtimes.running(&reference.api_group, &reference.kind) else {
            continue;
        };
        let key = RuntimeKey::of(&reference, &watch.kind, namespace);
        let Some(facts) = facts(ctx, namespace, name, uid) else {
            continue;
        };
        referenced.insert(facts.digest.clone());
        if job.finished() || job.metadata.deletion_timestamp.is_some() {
            continue;
        }
        let labels = RuntimeLabels {
            kind: reference.kind.clone(),
            runtime: key.label(),
        };
        let count = counts.entry(labels).or_insert(0);
        let drifted = match watch.get(&key) {
            None => Some(DriftedTrainJob {
                namespace: namespace.to_owned(),
                trainjob: name.to_owned(),
                runtime: reference.clone(),
                paths: Vec::new(),
                runtime_missing: true,
            }),
            Some(live) => {
                let drift = compare(ctx, cache, &facts, &key, &live, job, paths).await;
                drift.map(|paths| DriftedTrainJob {
                    namespace: namespace.to_owned(),
                    trainjob: name.to_owned(),
                    runtime: reference.clone(),
                    paths,
                    runtime_missing: false,
                })
            }
        };
        if let Some(d) = drifted {
            *count += 1;
            report.trainjobs.push(d);
        }
    }
    // Only a pass over every job knows which ledger entries no job needs any more.
    if scope == Scope::All {
        ctx.ledger
            .retain(&|k| live_jobs.contains(k), &|d| referenced.contains(d));
    }
    report
        .trainjobs
        .sort_by(|a, b| (&a.namespace, &a.trainjob).cmp(&(&b.namespace, &b.trainjob)));
    (report, counts)
}

/// The gauge: set every runtime in use, remove the ones no longer in use.
fn publish(ctx: &Context, cache: &Mutex<DriftCache>, counts: &BTreeMap<RuntimeLabels, i64>) {
    for (labels, n) in counts {
        ctx.metrics.drifted.get_or_create(labels).set(*n);
    }
    if let Ok(mut cache) = cache.lock() {
        for old in &cache.published {
            if !counts.contains_key(old) {
                ctx.metrics.drifted.remove(old);
            }
        }
        cache.published = counts.keys().cloned().collect();
    }
}

/// The snapshot of a TrainJob, if it has one it owns and its digest is known.
fn facts(ctx: &Context, namespace: &str, name: &str, uid: &str) -> Option<Facts> {
    let cm = ctx.configmaps.snapshot_of(namespace, name)?;
    if cm.controller_uid() != Some(uid) {
        return None;
    }
    if cm.holdfasts {
        return Some(Facts {
            digest: cm.sha256()?.to_owned(),
            holdfasts: true,
        });
    }
    let known = ctx
        .ledger
        .known(&(namespace.to_owned(), name.to_owned()), uid)?;
    Some(Facts {
        digest: known.digest,
        holdfasts: known.holdfasts,
    })
}

/// `None` when in sync (or not comparable); the differing paths otherwise (empty when not
/// asked for).
async fn compare(
    ctx: &Context,
    cache: &Mutex<DriftCache>,
    facts: &Facts,
    key: &RuntimeKey,
    live: &DynamicObject,
    job: &TrainJob,
    paths: bool,
) -> Option<Vec<String>> {
    let version = live.metadata.resource_version.clone().unwrap_or_default();
    if facts.holdfasts {
        let live_digest = {
            let cached = cache
                .lock()
                .ok()?
                .live_digests
                .get(&(key.clone(), version.clone()))
                .cloned();
            match cached {
                Some(d) => d,
                None => {
                    let live_json = runtime_json(ctx, key, live)?;
                    let d = core::render(&live_json).ok()?.provenance.sha256;
                    cache
                        .lock()
                        .ok()?
                        .live_digests
                        .insert((key.clone(), version.clone()), d.clone());
                    d
                }
            }
        };
        if live_digest == facts.digest {
            return None;
        }
        if !paths {
            return Some(Vec::new());
        }
    }
    let compared_key = (facts.digest.clone(), key.clone(), version);
    if let Some(d) = cache.lock().ok()?.compared.get(&compared_key).cloned() {
        return paths_of(d);
    }
    let live_json = runtime_json(ctx, key, live)?;
    let content = match ctx.ledger.content(&facts.digest) {
        Some(c) => c,
        None => fetch_content(ctx, job).await?,
    };
    let d = core::drift(&content, &live_json);
    if let Ok(mut c) = cache.lock() {
        c.compared.insert(compared_key, d.clone());
    }
    paths_of(d)
}

fn paths_of(d: Drift) -> Option<Vec<String>> {
    match d {
        Drift::InSync => None,
        Drift::Drifted { paths } => Some(paths),
    }
}

fn runtime_json(ctx: &Context, key: &RuntimeKey, live: &DynamicObject) -> Option<Value> {
    let mut v = serde_json::to_value(live).ok()?;
    let watch = ctx.runtimes.running(&key.group, &key.kind)?;
    if let Value::Object(map) = &mut v {
        map.entry("apiVersion")
            .or_insert_with(|| Value::String(watch.kind.resource.api_version.clone()));
        map.entry("kind")
            .or_insert_with(|| Value::String(watch.kind.resource.kind.clone()));
    }
    Some(v)
}

/// Reads a TrainJob's snapshot to learn its content (interned by digest).
async fn fetch_content(ctx: &Context, job: &TrainJob) -> Option<Arc<Value>> {
    let namespace = job.metadata.namespace.as_deref()?;
    let name = job.metadata.name.as_deref()?;
    let api: Api<ConfigMap> = Api::namespaced(ctx.client.clone(), namespace);
    let cm = match api.get_opt(&names::snapshot_name(name)).await {
        Ok(cm) => cm?,
        Err(e) => {
            tracing::warn!(namespace, trainjob = name, error = %e, "drift: reading the snapshot failed");
            return None;
        }
    };
    let cm_json = serde_json::to_value(&cm).ok()?;
    let job_json = job.as_json().ok()?;
    let snapshot = super::read::read_snapshot(cm_json.clone(), job_json)
        .await
        .ok()?;
    let yaml = cm_json.pointer("/data/runtime").and_then(Value::as_str)?;
    let d = digest(yaml);
    ctx.ledger.record_content(&d, snapshot.runtime);
    ctx.ledger.content(&d)
}

/// Recomputes the gauge every `interval`, and half a second after runtimes change.
pub async fn keep_gauge(ctx: Arc<Context>, interval: Duration, shutdown: CancellationToken) {
    let cache = Mutex::new(DriftCache::default());
    let changed = ctx.runtimes.changed();
    loop {
        tokio::select! {
            () = shutdown.cancelled() => return,
            () = tokio::time::sleep(interval) => {}
            () = changed.notified() => {
                tokio::time::sleep(Duration::from_millis(500)).await;
            }
        }
        let (report, counts) = compute(&ctx, &cache, false, Scope::All).await;
        publish(&ctx, &cache, &counts);
        tracing::debug!(drifted = report.trainjobs.len(), "drift recomputed");
        // Bound the caches (old runtime versions accumulate); they refill in one pass.
        if let Ok(mut c) = cache.lock()
            && (c.live_digests.len() > 4096 || c.compared.len() > 4096)
        {
            c.live_digests.clear();
            c.compared.clear();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn job(namespace: &str) -> TrainJob {
        serde_json::from_value(serde_json::json!({
            "metadata": {"namespace": namespace, "name": "j", "uid": "u"},
        }))
        .unwrap_or_else(|e| panic!("a TrainJob: {e}"))
    }

    #[test]
    fn a_namespace_scope_covers_that_namespaces_jobs_only() {
        assert!(Scope::Namespace("team-a").covers(&job("team-a")));
        assert!(!Scope::Namespace("team-a").covers(&job("team-b")));
        assert!(!Scope::Namespace("team-a").covers(&job("team-a-b")));
        assert!(Scope::All.covers(&job("team-b")));
    }
}
