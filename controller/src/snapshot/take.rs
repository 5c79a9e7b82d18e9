//! The reconciler's [`Step::Take`](holdfast_core::snapshot::step::Step::Take): find the
//! runtime, render it, create the snapshot ConfigMap — one request, the create, unless the
//! runtime watch's store cannot be trusted (then one read of the runtime first). What the
//! answer means is [`holdfast_core::snapshot::step`]'s to decide.

use holdfast_core::snapshot::step::{Taken, store_trusted};
use holdfast_core::snapshot::{self as core, Rendered, RuntimeRef, SnapshotError};
use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{Api, DynamicObject, PostParams};
use serde_json::Value;
use std::sync::Arc;

use super::Error;
use super::events::{SnapshotWarning, warn};
use super::reconcile::{Context, Job, Taking};
use super::runtimes::RuntimeKey;
use holdfast_cluster::runtime_kinds::RuntimeKind;

impl Context {
    /// Takes a snapshot of `runtime_ref` for `job`. A runtime kind the cluster does not serve,
    /// that is not a runtime, or whose watch cannot sync is reported and returned as the
    /// error (retried with backoff).
    pub(super) async fn take(
        &self,
        job: &Job<'_>,
        runtime_ref: &RuntimeRef,
    ) -> Result<(Taken, Taking), Error> {
        let watch = match self.runtimes.watch_for(runtime_ref).await {
            Ok(w) => w,
            Err(e) => {
                self.report_unreadable_runtime(job, runtime_ref, &e);
                return Err(e);
            }
        };
        let runtime_key = RuntimeKey::of(runtime_ref, &watch.kind, job.namespace());
        let mut runtime = watch.get(&runtime_key);
        let in_store = runtime
            .as_ref()
            .map(|r| r.metadata.resource_version.as_deref());
        if !store_trusted(in_store, job.object.admitted_runtime_version()) {
            runtime = self
                .runtimes
                .fetch(&watch, &runtime_key)
                .await?
                .map(Arc::new);
        }
        let mut taking = Taking {
            runtime_key,
            runtime_version: String::new(),
            rendered: None,
        };
        let Some(runtime) = runtime else {
            return Ok((Taken::RuntimeNotFound, taking));
        };
        taking.runtime_version = runtime
            .metadata
            .resource_version
            .clone()
            .unwrap_or_default();
        let job_json = job.json()?;
        let built = self
            .rendering(&taking.runtime_key, &runtime, &watch.kind)
            .and_then(|rendered| Ok((core::snapshot_configmap(&job_json, &rendered)?, rendered)));
        let (configmap, rendered) = match built {
            Ok(b) => b,
            Err(error) => return Ok((Taken::Unrenderable(error), taking)),
        };
        let bytes = rendered.yaml.len();
        taking.rendered = Some(rendered);

        let api: Api<ConfigMap> = Api::namespaced(self.client.clone(), job.namespace());
        let configmap: ConfigMap = serde_json::from_value(configmap)?;
        let params = PostParams {
            dry_run: false,
            field_manager: Some(self.config.field_manager.clone()),
        };
        let taken = match api.create(&params, &configmap).await {
            Ok(_) => Taken::Created,
            // Written by someone else since the watch last told us.
            Err(kube::Error::Api(s)) if s.code == 409 => Taken::NameTaken,
            // The apiserver's own size limit (data plus metadata), past the data check.
            Err(kube::Error::Api(s))
                if s.code == 413 || (s.code == 422 && s.message.contains("Too long")) =>
            {
                Taken::TooLarge { bytes }
            }
            Err(e) => return Err(e.into()),
        };
        Ok((taken, taking))
    }

    /// The Warning for a runtime kind that cannot be watched.
    fn report_unreadable_runtime(&self, job: &Job<'_>, runtime: &RuntimeRef, error: &Error) {
        let why = error.to_string();
        let warning = match error {
            Error::KindNotServed { .. } => SnapshotWarning::KindNotServed { runtime },
            Error::NotSynced { .. } => SnapshotWarning::RuntimeUnreadable { runtime, why: &why },
            Error::NotARuntime { .. } => SnapshotWarning::NotARuntime { runtime, why: &why },
            _ => return,
        };
        warn(&self.events, &job.reference(), warning);
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
}
