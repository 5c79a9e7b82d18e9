//! One TrainJob's snapshot reconciliation.
//!
//! 1. A TrainJob that has finished or is being deleted gets no snapshot.
//! 2. If a ConfigMap of the snapshot's name exists (known from the metadata watch, no
//!    request): one not controlled by this TrainJob is refused (Warning event, once per
//!    ConfigMap version) and never written to; holdfast's own is the snapshot; one someone
//!    else wrote (Kubeflow Trainer) is read once, checked as Trainer's reader checks it, and
//!    accepted. Either way nothing is written.
//! 3. Otherwise the runtime is taken from the runtime watch's store (no request), rendered,
//!    and the ConfigMap created — one request. A create that finds the name taken (someone
//!    wrote between the watch and us) reads the ConfigMap once and goes on as in 2.
//!
//! The store is bypassed, with one read of the runtime, only when it cannot be trusted: it
//! lacks the runtime (it may have been created a moment ago), or the TrainJob was admitted
//! against another resourceVersion than the store holds (the watch may lag the edit the
//! webhook saw). A snapshot of another version than the admitted one is flagged.

use holdfast_core::names;
use holdfast_core::snapshot::{
    self as core, Integrity, MAX_CONFIGMAP_DATA_BYTES, Rendered, RuntimeRef, SnapshotError,
    SnapshotFault, Writer,
};
use k8s_openapi::api::core::v1::{ConfigMap, ObjectReference};
use kube::Resource;
use kube::api::{Api, DynamicObject, PostParams};
use kube::runtime::controller::Action;
use kube::runtime::reflector::{ObjectRef, Store};
use serde_json::Value;
use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::time::Instant;

use super::config::Config;
use super::configmaps::{ConfigMapIndex, SnapshotMeta};
use super::events::{self as snapshot_events, SnapshotWarning, warn};
use super::ledger::{JobKey, Known, Ledger, Refused, digest};
use super::runtimes::{RuntimeIndex, RuntimeKey};
use super::{Error, SnapshotMetrics};
use crate::backoff::Backoffs;
use crate::trainjob::{TrainJob, Watched};
use holdfast_cluster::runtime_kinds::RuntimeKind;

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

/// A TrainJob being reconciled.
struct Job<'a> {
    object: &'a TrainJob,
    key: JobKey,
    uid: String,
}

impl Job<'_> {
    fn namespace(&self) -> &str {
        &self.key.0
    }
    fn name(&self) -> &str {
        &self.key.1
    }
    /// As JSON, for `holdfast_core::snapshot` (built only when a snapshot is read or taken).
    fn json(&self) -> Result<Value, Error> {
        Ok(self.object.as_json()?)
    }
    /// For events.
    fn reference(&self) -> ObjectReference {
        self.object.object_ref(&())
    }
}

impl Context {
    async fn reconcile(&self, object: &TrainJob) -> Result<Action, Error> {
        let (Some(name), Some(namespace), Some(uid)) = (
            object.metadata.name.clone(),
            object.metadata.namespace.clone(),
            object.metadata.uid.clone(),
        ) else {
            return Ok(Action::await_change());
        };
        if object.metadata.deletion_timestamp.is_some() || object.finished() {
            return Ok(Action::await_change());
        }
        let job = Job {
            object,
            key: (namespace, name),
            uid,
        };
        let runtime_ref = match object.runtime_ref() {
            Ok(r) => r,
            Err(error) => {
                // The TrainJob CRD requires runtimeRef.name; this is a hand-made object.
                self.metrics.failure(error.metric_label());
                warn(
                    &self.events,
                    &job.reference(),
                    SnapshotWarning::Unsnapshottable { error: &error },
                );
                return Ok(Action::await_change());
            }
        };

        if let Some(cm) = self.configmaps.snapshot_of(job.namespace(), job.name()) {
            return self.existing(&job, &runtime_ref, &cm).await;
        }
        self.take(&job, &runtime_ref).await
    }

    /// A ConfigMap of the snapshot's name exists.
    async fn existing(
        &self,
        job: &Job<'_>,
        runtime_ref: &RuntimeRef,
        cm: &SnapshotMeta,
    ) -> Result<Action, Error> {
        let owner = cm.controller_uid();
        if owner != Some(job.uid.as_str()) {
            if cm.owned_by_earlier_trainjob() {
                // A TrainJob of this name was deleted and created again before the garbage
                // collector removed the old one's snapshot. It will (its owner's uid no longer
                // exists); its deletion reconciles this TrainJob again.
                tracing::info!(
                    namespace = job.namespace(),
                    trainjob = job.name(),
                    "the snapshot of an earlier TrainJob of this name awaits garbage collection"
                );
                return Ok(Action::requeue(Duration::from_secs(30)));
            }
            if owner.is_none()
                && let Some(action) = self.remove_orphan(job).await?
            {
                return Ok(action);
            }
            let fault = SnapshotFault::Squatted {
                owner: owner.map(str::to_owned),
            };
            self.refuse(job, cm_identity(cm), fault).await;
            return Ok(Action::await_change());
        }
        if cm.holdfasts {
            // Written by holdfast (this process or another): immutable, with its provenance
            // in the annotations. Trusted as it is.
            return Ok(Action::await_change());
        }
        // Someone else's: read it once per ConfigMap version.
        if let Some(known) = self.ledger.known(&job.key, &job.uid)
            && known.configmap_uid.as_deref() == cm.uid()
            && known.configmap_resource_version.as_deref() == cm.resource_version()
        {
            return Ok(Action::await_change());
        }
        self.read_existing(job, runtime_ref).await
    }

    /// A snapshot whose owner is gone (`kubectl delete trainjob --cascade=orphan` strips the
    /// ownerReference and leaves it) would hold the TrainJob's name forever: nobody may
    /// delete a snapshot, and a new TrainJob of that name cannot use another's. If the
    /// ConfigMap at the snapshot's name has no controller and was demonstrably a snapshot —
    /// holdfast's label, or written by Kubeflow Trainer's snapshot writer (field manager
    /// `trainer`) — it is deleted, preconditioned on its uid and resourceVersion, and the
    /// TrainJob gets its own. Anything else (a ConfigMap that was never a snapshot) is
    /// left alone and reported as squatting. `None`: not removed.
    async fn remove_orphan(&self, job: &Job<'_>) -> Result<Option<Action>, Error> {
        let api: Api<ConfigMap> = Api::namespaced(self.client.clone(), job.namespace());
        let name = snapshot_name(job);
        let Some(cm) = api.get_opt(&name).await? else {
            return Ok(Some(Action::requeue(Duration::from_secs(1))));
        };
        let meta = &cm.metadata;
        let has_controller = meta
            .owner_references
            .iter()
            .flatten()
            .any(|r| r.controller == Some(true));
        let ours = meta
            .labels
            .as_ref()
            .and_then(|l| l.get(names::LABEL_RUNTIME_SNAPSHOT))
            .is_some_and(|v| v == "true");
        let trainers = meta
            .managed_fields
            .iter()
            .flatten()
            .any(|f| f.manager.as_deref() == Some(TRAINER_FIELD_MANAGER));
        if has_controller || !(ours || trainers) {
            return Ok(None);
        }
        let params = kube::api::DeleteParams {
            preconditions: Some(kube::api::Preconditions {
                uid: meta.uid.clone(),
                resource_version: meta.resource_version.clone(),
            }),
            ..Default::default()
        };
        match api.delete(&name, &params).await {
            Ok(_) => {}
            Err(kube::Error::Api(s)) if s.code == 404 || s.code == 409 => {
                return Ok(Some(Action::requeue(Duration::from_secs(1))));
            }
            Err(e) => return Err(e.into()),
        }
        self.metrics.failure("orphan_removed");
        tracing::info!(
            namespace = job.namespace(),
            trainjob = job.name(),
            configmap = name,
            writer = if ours { "holdfast" } else { "trainer" },
            "removed the snapshot of a TrainJob that no longer exists (orphaned); taking this TrainJob's own"
        );
        Ok(Some(Action::requeue(Duration::from_millis(200))))
    }

    /// Reads the ConfigMap at the snapshot's name and accepts or refuses it.
    async fn read_existing(
        &self,
        job: &Job<'_>,
        runtime_ref: &RuntimeRef,
    ) -> Result<Action, Error> {
        let api: Api<ConfigMap> = Api::namespaced(self.client.clone(), job.namespace());
        let Some(cm) = api.get_opt(&snapshot_name(job)).await? else {
            // Gone again since: start over.
            return Ok(Action::requeue(Duration::from_secs(1)));
        };
        let cm_json = serde_json::to_value(&cm)?;
        let identity = Refused {
            configmap_uid: cm.metadata.uid.clone(),
            configmap_resource_version: cm.metadata.resource_version.clone(),
        };
        let snapshot = match super::read::read_snapshot(cm_json.clone(), job.json()?).await {
            Ok(s) => s,
            Err(fault) => {
                self.refuse(job, identity, fault).await;
                return Ok(Action::await_change());
            }
        };
        let yaml = cm_json
            .pointer("/data/runtime")
            .and_then(Value::as_str)
            .unwrap_or_default();
        let snapshot_digest = digest(yaml);
        let writer = match snapshot.writer {
            Writer::Holdfast => "holdfast",
            Writer::Trainer => "trainer",
        };
        tracing::info!(
            namespace = job.namespace(),
            trainjob = job.name(),
            writer,
            runtime = %runtime_ref,
            "accepted the existing runtime snapshot"
        );
        self.metrics.accepted(writer);
        if snapshot.writer == Writer::Trainer {
            self.events.publish(
                &job.reference(),
                snapshot_events::adopted(runtime_ref, &snapshot_name(job)),
            );
        }
        if let Integrity::Altered { .. } = snapshot.integrity {
            self.metrics.failure("altered");
            let name = snapshot_name(job);
            warn(
                &self.events,
                &job.reference(),
                SnapshotWarning::Altered { configmap: &name },
            );
        }
        self.check_admission(job, runtime_ref, snapshot.resource_version())
            .await;
        self.ledger.record_known(
            job.key.clone(),
            Known {
                trainjob_uid: job.uid.clone(),
                configmap_uid: identity.configmap_uid,
                configmap_resource_version: identity.configmap_resource_version,
                digest: snapshot_digest.clone(),
                source_resource_version: snapshot.source.resource_version.clone(),
                holdfasts: snapshot.writer == Writer::Holdfast,
            },
        );
        self.ledger
            .record_content(&snapshot_digest, snapshot.runtime);
        Ok(Action::await_change())
    }

    /// Reports an untrusted ConfigMap, once per ConfigMap version. It is never written to.
    async fn refuse(&self, job: &Job<'_>, identity: Refused, fault: SnapshotFault) {
        if self.ledger.already_refused(&job.key, &identity) {
            return;
        }
        self.metrics.failure(fault.metric_label());
        let name = snapshot_name(job);
        let notice = match &fault {
            SnapshotFault::Squatted { .. } => SnapshotWarning::Squatted {
                configmap: &name,
                fault: &fault,
            },
            _ => SnapshotWarning::Invalid {
                configmap: &name,
                fault: &fault,
            },
        };
        warn(&self.events, &job.reference(), notice);
        self.ledger.record_refused(job.key.clone(), identity);
    }

    /// No snapshot exists: take one.
    async fn take(&self, job: &Job<'_>, runtime_ref: &RuntimeRef) -> Result<Action, Error> {
        let watch = match self.runtimes.watch_for(runtime_ref).await {
            Ok(w) => w,
            Err(e @ Error::KindNotServed { .. }) => {
                warn(
                    &self.events,
                    &job.reference(),
                    SnapshotWarning::KindNotServed {
                        runtime: runtime_ref,
                    },
                );
                return Err(e);
            }
            Err(e @ Error::NotSynced { .. }) => {
                let why = e.to_string();
                warn(
                    &self.events,
                    &job.reference(),
                    SnapshotWarning::RuntimeUnreadable {
                        runtime: runtime_ref,
                        why: &why,
                    },
                );
                return Err(e);
            }
            Err(e @ Error::NotARuntime { .. }) => {
                warn(
                    &self.events,
                    &job.reference(),
                    SnapshotWarning::NotARuntime {
                        runtime: runtime_ref,
                        why: &e.to_string(),
                    },
                );
                return Err(e);
            }
            Err(e) => return Err(e),
        };
        let runtime_key = RuntimeKey::of(runtime_ref, &watch.kind, job.namespace());
        let admitted = job.object.admitted_runtime_version();
        let mut runtime = watch.get(&runtime_key);
        let trusted = match (&runtime, admitted) {
            (None, _) => false,
            (Some(r), Some(admitted)) => r.metadata.resource_version.as_deref() == Some(admitted),
            (Some(_), None) => true,
        };
        if !trusted {
            runtime = self
                .runtimes
                .fetch(&watch, &runtime_key)
                .await?
                .map(Arc::new);
        }
        let job_ref = crate::trainjob::trainjob_ref(job.namespace(), job.name());
        let Some(runtime) = runtime else {
            self.runtimes.wait_for(runtime_key, job_ref);
            warn(
                &self.events,
                &job.reference(),
                SnapshotWarning::RuntimeNotFound {
                    runtime: runtime_ref,
                },
            );
            return Err(Error::RuntimeNotFound(runtime_ref.clone()));
        };

        let runtime_version = runtime
            .metadata
            .resource_version
            .clone()
            .unwrap_or_default();
        let job_json = job.json()?;
        let built = self
            .rendering(&runtime_key, &runtime, &watch.kind)
            .and_then(|rendered| Ok((core::snapshot_configmap(&job_json, &rendered)?, rendered)));
        let (configmap, rendered) = match built {
            Ok(b) => b,
            Err(error) => {
                self.runtimes.wait_for(runtime_key, job_ref);
                self.unsnapshottable(job, &runtime_version, &error).await;
                return Ok(Action::await_change());
            }
        };

        let api: Api<ConfigMap> = Api::namespaced(self.client.clone(), job.namespace());
        let configmap: ConfigMap = serde_json::from_value(configmap)?;
        let params = PostParams {
            dry_run: false,
            field_manager: Some(self.config.field_manager.clone()),
        };
        match api.create(&params, &configmap).await {
            Ok(_) => {
                self.metrics.created.inc();
                tracing::info!(
                    namespace = job.namespace(),
                    trainjob = job.name(),
                    runtime = %runtime_ref,
                    runtime_resource_version = %rendered.provenance.resource_version,
                    "runtime snapshot created"
                );
                self.events.publish(
                    &job.reference(),
                    snapshot_events::taken(
                        runtime_ref,
                        &rendered.provenance.resource_version,
                        &snapshot_name(job),
                    ),
                );
                self.ledger
                    .record_content(&rendered.provenance.sha256, rendered.object.clone());
                self.check_admission(
                    job,
                    runtime_ref,
                    Some(&rendered.provenance.resource_version),
                )
                .await;
                Ok(Action::await_change())
            }
            Err(kube::Error::Api(s)) if s.code == 409 => {
                // Written by someone else since the watch last told us: read it once.
                self.read_existing(job, runtime_ref).await
            }
            Err(kube::Error::Api(s))
                if s.code == 413 || (s.code == 422 && s.message.contains("Too long")) =>
            {
                // The apiserver's own size limit (data plus metadata), past the data check.
                let error = SnapshotError::TooLarge {
                    bytes: rendered.yaml.len(),
                    limit: MAX_CONFIGMAP_DATA_BYTES,
                };
                self.runtimes.wait_for(runtime_key, job_ref);
                self.unsnapshottable(job, &runtime_version, &error).await;
                Ok(Action::await_change())
            }
            Err(e) => Err(e.into()),
        }
    }

    /// The runtime rendered for a snapshot: once per runtime version, shared by every
    /// TrainJob snapshotting it.
    fn rendering(
        &self,
        key: &RuntimeKey,
        runtime: &DynamicObject,
        kind: &RuntimeKind,
    ) -> Result<Arc<Rendered>, SnapshotError> {
        let current = |r: &Rendered| {
            Some(r.provenance.uid.as_str()) == runtime.metadata.uid.as_deref()
                && Some(r.provenance.resource_version.as_str())
                    == runtime.metadata.resource_version.as_deref()
        };
        if let Ok(cache) = self.renderings.lock()
            && let Some(r) = cache.get(key)
            && current(r)
        {
            return Ok(r.clone());
        }
        let mut json =
            serde_json::to_value(runtime).map_err(|e| SnapshotError::Yaml(e.to_string()))?;
        if let Value::Object(map) = &mut json {
            // Objects from a list may come without their type.
            map.entry("apiVersion")
                .or_insert_with(|| Value::String(kind.resource.api_version.clone()));
            map.entry("kind")
                .or_insert_with(|| Value::String(kind.resource.kind.clone()));
        }
        let rendered = Arc::new(core::render(&json)?);
        if let Ok(mut cache) = self.renderings.lock() {
            cache.insert(key.clone(), rendered.clone());
        }
        Ok(rendered)
    }

    /// The runtime cannot be snapshotted: say so once per runtime version; no retry loop (the
    /// TrainJob is reconciled again when the runtime changes).
    async fn unsnapshottable(&self, job: &Job<'_>, runtime_version: &str, error: &SnapshotError) {
        self.metrics.failure(error.metric_label());
        if self
            .ledger
            .already_unsnapshottable(&job.key, runtime_version)
        {
            return;
        }
        warn(
            &self.events,
            &job.reference(),
            SnapshotWarning::Unsnapshottable { error },
        );
        self.ledger
            .record_unsnapshottable(job.key.clone(), runtime_version.to_owned());
    }

    /// Flags a snapshot of another runtime version than the TrainJob was admitted against.
    ///
    /// The admitted version is recorded by the mutating webhook when it admits the TrainJob.
    /// When it is absent (a TrainJob admitted before holdfast ran, or with the webhook down)
    /// nothing is flagged, and the controller does not record it either: what it would write
    /// is the version it snapshotted, which says nothing about what was admitted, and the
    /// write would double the requests per TrainJob.
    async fn check_admission(
        &self,
        job: &Job<'_>,
        runtime_ref: &RuntimeRef,
        snapshotted: Option<&str>,
    ) {
        let admitted = job.object.admitted_runtime_version();
        let (Some(admitted), Some(snapshotted)) = (admitted, snapshotted) else {
            return;
        };
        if core::admission_race(Some(admitted), snapshotted) {
            self.metrics.admission_races.inc();
            warn(
                &self.events,
                &job.reference(),
                SnapshotWarning::AdmissionRace {
                    runtime: runtime_ref,
                    admitted,
                    snapshotted,
                },
            );
        }
    }
}

/// The field manager of Kubeflow Trainer 2.3's snapshot writer (server-side apply).
const TRAINER_FIELD_MANAGER: &str = "trainer";

fn snapshot_name(job: &Job<'_>) -> String {
    holdfast_core::names::snapshot_name(job.name())
}

fn cm_identity(cm: &SnapshotMeta) -> Refused {
    Refused {
        configmap_uid: cm.uid().map(str::to_owned),
        configmap_resource_version: cm.resource_version().map(str::to_owned),
    }
}
