//! One TrainJob's snapshot reconciliation: the I/O around
//! [`holdfast_core::snapshot::step`], which decides.
//!
//! What needs no request is read first: the TrainJob, the ConfigMap at its snapshot's name as
//! the metadata watch knows it, and the ledger (a snapshot someone else wrote, already read
//! and accepted). Then each request the step asks for is made and its answer given back —
//! read the ConfigMap for the orphan check, delete an orphan, read a snapshot someone else
//! wrote, take a snapshot ([`super::take`]) — until the step ends the reconciliation; what
//! it ended with (refused, accepted, created, a runtime missing or that cannot be
//! snapshotted) is recorded and reported ([`super::report`]).
//!
//! So a TrainJob whose snapshot exists costs no request, and one without costs one, the
//! create. The runtime watch's store is bypassed, with one read of the runtime, only when
//! it cannot be trusted ([`holdfast_core::snapshot::step::store_trusted`]). A snapshot of
//! another version than the admitted one is flagged.

use holdfast_core::names;
use holdfast_core::snapshot::step::{
    Again, ConfigMapVersion, Controller, Deleted, Indexed, OrphanCheck, Readable, Seen, Step,
    TRAINER_FIELD_MANAGER, Version, step,
};
use holdfast_core::snapshot::{Integrity, Rendered, SnapshotFault, SnapshotRuntime, Writer};
use k8s_openapi::api::core::v1::{ConfigMap, ObjectReference};
use kube::Resource;
use kube::api::{Api, DynamicObject};
use kube::runtime::controller::Action;
use kube::runtime::reflector::{ObjectRef, Store};
use serde_json::Value;
use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use tokio::time::Instant;

use super::config::Config;
use super::configmaps::{ConfigMapIndex, SnapshotMeta};
use super::events::{SnapshotWarning, warn};
use super::ledger::{JobKey, Ledger, Refused, digest};
use super::runtimes::{RuntimeIndex, RuntimeKey};
use super::{Error, SnapshotMetrics};
use crate::backoff::Backoffs;
use crate::trainjob::{TrainJob, Watched};

/// Everything a reconciliation reads from and writes with.
pub struct Context {
    pub client: kube::Client,
    pub config: Config,
    pub metrics: SnapshotMetrics,
    /// Where the reconciler's Events go (never waited for).
    pub events: crate::events::Publisher,
    pub configmaps: ConfigMapIndex,
    pub runtimes: Arc<RuntimeIndex>,
    pub ledger: Ledger,
    /// Per TrainJob, keyed as the Controller names it in `ObjectNotFound` (erased), so that a
    /// deleted TrainJob is forgotten.
    pub backoff: Backoffs<ObjectRef<DynamicObject>>,
    pub trainjobs: Store<Watched>,
    /// The latest rendering of each runtime snapshotted.
    pub renderings: Mutex<HashMap<RuntimeKey, Arc<Rendered>>>,
    /// The reconciler's shutdown.
    pub shutdown: tokio_util::sync::CancellationToken,
}

impl Context {
    /// Waits until the snapshot ConfigMaps are listed; false if the watch stopped first or
    /// the reconciler is shutting down.
    pub async fn configmaps_listed(&self) -> bool {
        tokio::select! {
            listed = self.configmaps.ready() => listed,
            () = self.shutdown.cancelled() => false,
        }
    }
}

/// The reconciler kube-runtime's `Controller` calls.
pub async fn reconcile(job: Arc<Watched>, ctx: Arc<Context>) -> Result<Action, Error> {
    // The TrainJobs are listed while the ConfigMaps are: the first reconciles wait for them.
    if !ctx.configmaps_listed().await {
        return Err(Error::NotRunning);
    }
    let started = Instant::now();
    let outcome = match &job.0 {
        Ok(decoded) => ctx.reconcile(decoded).await,
        Err(invalid) => {
            // Reported once per version of the object; the rest of the watch goes on.
            tracing::warn!(
                namespace = invalid.metadata.namespace.as_deref().unwrap_or_default(),
                trainjob = invalid.metadata.name.as_deref().unwrap_or_default(),
                error = %invalid.error,
                "a TrainJob that does not decode is not snapshotted"
            );
            ctx.metrics.failure("trainjob_undecodable");
            Ok(Action::await_change())
        }
    };
    ctx.metrics
        .reconcile_duration
        .observe(started.elapsed().as_secs_f64());
    let job_ref = ObjectRef::from_obj(job.as_ref()).erase();
    match &outcome {
        Ok(_) => ctx.backoff.succeeded(&job_ref),
        Err(e) => ctx.metrics.failure(e.metric_label()),
    }
    outcome
}

/// The error policy: retry the TrainJob with its own exponential backoff.
pub fn error_policy(job: Arc<Watched>, error: &Error, ctx: Arc<Context>) -> Action {
    let job_ref = ObjectRef::from_obj(job.as_ref()).erase();
    let delay = ctx.backoff.failed(&job_ref);
    let meta = job.meta();
    let (namespace, trainjob) = (
        meta.namespace.as_deref().unwrap_or_default(),
        meta.name.as_deref().unwrap_or_default(),
    );
    if error.is_forbidden() {
        // Not a passing failure: the controller's roles lack a permission (the chart's
        // ClusterRole has every one it needs). Retried, in case RBAC is being fixed.
        tracing::error!(
            namespace,
            trainjob,
            error = %error,
            retry_in = ?delay,
            "snapshot not taken: holdfast-controller is not allowed to do what snapshots need; grant its ServiceAccount the chart's roles"
        );
    } else {
        tracing::info!(
            namespace,
            trainjob,
            error = %error,
            retry_in = ?delay,
            "snapshot not taken; retrying"
        );
    }
    Action::requeue(delay)
}

/// A TrainJob being reconciled. A TrainJob without a name, namespace or uid has empty ones
/// here; the step asks for no request for it.
pub(super) struct Job<'a> {
    pub object: &'a TrainJob,
    pub key: JobKey,
    pub uid: String,
}

impl<'a> Job<'a> {
    fn of(object: &'a TrainJob) -> Self {
        let meta = &object.metadata;
        Job {
            object,
            key: (
                meta.namespace.clone().unwrap_or_default(),
                meta.name.clone().unwrap_or_default(),
            ),
            uid: meta.uid.clone().unwrap_or_default(),
        }
    }
}

impl Job<'_> {
    pub fn namespace(&self) -> &str {
        &self.key.0
    }
    pub fn name(&self) -> &str {
        &self.key.1
    }
    /// As JSON, for `holdfast_core::snapshot` (built only when a snapshot is read or taken).
    pub fn json(&self) -> Result<Value, Error> {
        Ok(self.object.as_json()?)
    }
    /// For events.
    pub fn reference(&self) -> ObjectReference {
        self.object.object_ref(&())
    }
    pub fn snapshot_name(&self) -> String {
        names::snapshot_name(self.name())
    }
}

/// A snapshot read in full, kept for the step after the read.
pub(super) struct Read {
    pub identity: Refused,
    /// The SHA-256 of its `runtime` data, if the reader accepted it.
    pub digest: String,
    pub snapshot: Result<SnapshotRuntime, SnapshotFault>,
}

/// What a take found, for the steps after it.
pub(super) struct Taking {
    pub runtime_key: RuntimeKey,
    /// The runtime's resourceVersion (empty if it was not found).
    pub runtime_version: String,
    /// The runtime rendered, if it could be.
    pub rendered: Option<Arc<Rendered>>,
}

impl Context {
    /// Drives [`step`]: reads what needs no request, then makes each request the step asks
    /// for and gives it the answer, until it ends the reconciliation.
    async fn reconcile(&self, object: &TrainJob) -> Result<Action, Error> {
        let meta = &object.metadata;
        let job = Job::of(object);
        let runtime_ref = object.runtime_ref();
        let mut seen = Seen::new(
            meta.name.is_some() && meta.namespace.is_some() && meta.uid.is_some(),
            meta.deletion_timestamp.is_some() || object.finished(),
            runtime_ref.as_ref().map(|_| ()).map_err(Clone::clone),
        );
        let indexed = self.configmaps.snapshot_of(job.namespace(), job.name());
        seen.indexed = indexed.as_deref().map(|cm| Indexed {
            version: version_of(cm),
            controller: Controller::of(
                cm.controller_uid(),
                cm.owned_by_earlier_trainjob(),
                &job.uid,
            ),
            holdfasts: cm.holdfasts,
        });
        seen.accepted = self
            .ledger
            .known(&job.key, &job.uid)
            .map(|known| ConfigMapVersion {
                uid: known.configmap_uid,
                resource_version: known.configmap_resource_version,
            });
        // Never an error: the step asks for no request without a runtimeRef.
        let runtime = || runtime_ref.as_ref().map_err(|e| Error::Snapshot(e.clone()));

        let mut orphan: Option<ConfigMap> = None;
        let mut read: Option<Read> = None;
        let mut taking: Option<Taking> = None;
        loop {
            match step(&seen) {
                Step::Rest(_) => return Ok(Action::await_change()),
                Step::Again(again) => {
                    if again == Again::EarlierTrainJobsSnapshot {
                        tracing::info!(
                            namespace = job.namespace(),
                            trainjob = job.name(),
                            "the snapshot of an earlier TrainJob of this name awaits garbage collection"
                        );
                    }
                    return Ok(Action::requeue(again.after()));
                }
                Step::NoRuntimeRef(error) => {
                    // The TrainJob CRD requires runtimeRef.name; this is a hand-made object.
                    self.metrics.failure(error.metric_label());
                    warn(
                        &self.events,
                        &job.reference(),
                        SnapshotWarning::Unsnapshottable { error: &error },
                    );
                    return Ok(Action::await_change());
                }
                Step::CheckOrphan => {
                    orphan = self.configmap(&job).get_opt(&job.snapshot_name()).await?;
                    seen.orphan = Some(orphan.as_ref().map(orphan_check));
                }
                Step::DeleteOrphan { writer } => {
                    seen.deleted = Some(self.delete_orphan(&job, orphan.as_ref(), writer).await?);
                }
                Step::Read => {
                    read = self.read(&job).await?;
                    seen.read = Some(read.as_ref().map(|r| match &r.snapshot {
                        Ok(s) => Ok(Readable {
                            writer: s.writer,
                            altered: matches!(s.integrity, Integrity::Altered { .. }),
                        }),
                        Err(fault) => Err(fault.clone()),
                    }));
                }
                Step::Refuse { fault, of } => {
                    let identity = match (of, &read, &indexed) {
                        (Version::Read, Some(read), _) => read.identity.clone(),
                        (_, _, Some(cm)) => refused(version_of(cm)),
                        _ => refused(ConfigMapVersion::default()),
                    };
                    self.refuse(&job, identity, fault).await;
                    return Ok(Action::await_change());
                }
                Step::Accept { adopted, altered } => {
                    if let Some(read) = read.take() {
                        self.accept(&job, runtime()?, read, adopted, altered).await;
                    }
                    return Ok(Action::await_change());
                }
                Step::Take => {
                    let (taken, took) = self.take(&job, runtime()?).await?;
                    seen.taken = Some(taken);
                    taking = Some(took);
                }
                Step::Created => {
                    if let Some(rendered) = taking.and_then(|t| t.rendered) {
                        self.created(&job, runtime()?, &rendered).await;
                    }
                    return Ok(Action::await_change());
                }
                Step::RuntimeNotFound => {
                    let runtime_ref = runtime()?;
                    if let Some(taking) = taking {
                        self.runtimes
                            .wait_for(taking.runtime_key, job.trainjob_ref());
                    }
                    warn(
                        &self.events,
                        &job.reference(),
                        SnapshotWarning::RuntimeNotFound {
                            runtime: runtime_ref,
                        },
                    );
                    return Err(Error::RuntimeNotFound(runtime_ref.clone()));
                }
                Step::Unsnapshottable(error) => {
                    let mut runtime_version = String::new();
                    if let Some(taking) = taking {
                        self.runtimes
                            .wait_for(taking.runtime_key, job.trainjob_ref());
                        runtime_version = taking.runtime_version;
                    }
                    self.unsnapshottable(&job, &runtime_version, &error).await;
                    return Ok(Action::await_change());
                }
            }
        }
    }

    fn configmap(&self, job: &Job<'_>) -> Api<ConfigMap> {
        Api::namespaced(self.client.clone(), job.namespace())
    }

    /// Deletes the orphaned snapshot `cm` (read for the orphan check), preconditioned on its
    /// uid and resourceVersion, so a new TrainJob of its name can get its own. A snapshot
    /// whose owner is gone (`kubectl delete trainjob --cascade=orphan` strips the
    /// ownerReference and leaves it) would otherwise hold the name forever: nobody may delete
    /// a snapshot, and a TrainJob cannot use another's.
    async fn delete_orphan(
        &self,
        job: &Job<'_>,
        cm: Option<&ConfigMap>,
        writer: Writer,
    ) -> Result<Deleted, Error> {
        let Some(cm) = cm else {
            return Ok(Deleted::Raced);
        };
        let name = job.snapshot_name();
        let params = kube::api::DeleteParams {
            preconditions: Some(kube::api::Preconditions {
                uid: cm.metadata.uid.clone(),
                resource_version: cm.metadata.resource_version.clone(),
            }),
            ..Default::default()
        };
        match self.configmap(job).delete(&name, &params).await {
            Ok(_) => {}
            Err(kube::Error::Api(s)) if s.code == 404 || s.code == 409 => {
                return Ok(Deleted::Raced);
            }
            Err(e) => return Err(e.into()),
        }
        self.metrics.failure("orphan_removed");
        tracing::info!(
            namespace = job.namespace(),
            trainjob = job.name(),
            configmap = name,
            writer = writer.label(),
            "removed the snapshot of a TrainJob that no longer exists (orphaned); taking this TrainJob's own"
        );
        Ok(Deleted::Yes)
    }

    /// Reads the ConfigMap at the snapshot's name and checks it as Trainer's reader does;
    /// `None` if it is gone.
    async fn read(&self, job: &Job<'_>) -> Result<Option<Read>, Error> {
        let Some(cm) = self.configmap(job).get_opt(&job.snapshot_name()).await? else {
            return Ok(None);
        };
        let identity = Refused {
            configmap_uid: cm.metadata.uid.clone(),
            configmap_resource_version: cm.metadata.resource_version.clone(),
        };
        let cm_json = serde_json::to_value(&cm)?;
        let snapshot = super::read::read_snapshot(cm_json.clone(), job.json()?).await;
        let digest = match snapshot {
            Ok(_) => digest(
                cm_json
                    .pointer("/data/runtime")
                    .and_then(Value::as_str)
                    .unwrap_or_default(),
            ),
            Err(_) => String::new(),
        };
        Ok(Some(Read {
            identity,
            digest,
            snapshot,
        }))
    }
}

impl Job<'_> {
    fn trainjob_ref(&self) -> crate::trainjob::JobRef {
        crate::trainjob::trainjob_ref(self.namespace(), self.name())
    }
}

/// What the orphan check needs of the ConfigMap read.
fn orphan_check(cm: &ConfigMap) -> OrphanCheck {
    let meta = &cm.metadata;
    OrphanCheck {
        has_controller: meta
            .owner_references
            .iter()
            .flatten()
            .any(|r| r.controller == Some(true)),
        holdfasts: meta
            .labels
            .as_ref()
            .and_then(|l| l.get(names::LABEL_RUNTIME_SNAPSHOT))
            .is_some_and(|v| v == "true"),
        trainers: meta
            .managed_fields
            .iter()
            .flatten()
            .any(|f| f.manager.as_deref() == Some(TRAINER_FIELD_MANAGER)),
    }
}

fn version_of(cm: &SnapshotMeta) -> ConfigMapVersion {
    ConfigMapVersion {
        uid: cm.uid().map(str::to_owned),
        resource_version: cm.resource_version().map(str::to_owned),
    }
}

fn refused(version: ConfigMapVersion) -> Refused {
    Refused {
        configmap_uid: version.uid,
        configmap_resource_version: version.resource_version,
    }
}
