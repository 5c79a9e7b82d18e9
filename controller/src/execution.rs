//! The execution finalizer's I/O: the leader keeps `holdfast.dev/execution` on every bound
//! pod of a TrainJob's execution, and takes it off a pod being deleted once its processes are
//! provably gone (the decisions: `holdfast_core::execution::finalizer`). Fences are the hold
//! API's (`POST /v1/nodes/{node}/fence`), recorded in one ConfigMap in the release's
//! namespace.
//!
//! # What it runs
//!
//! kube-runtime's `Controller` over the pods JobSet labels (`jobset.sigs.k8s.io/jobset-name`;
//! a pod carrying the finalizer keeps the label: the chart's policy refuses its removal),
//! with metadata-only reflectors of Jobs and JobSets to tell a TrainJob's pods from other
//! JobSets', and a watch of the fences ConfigMap: a new fence reconciles every pod again.
//! Writes are PUTs of the pod as read (its resourceVersion the precondition): a conflict is
//! read again on the next event.

use std::collections::BTreeMap;
use std::sync::{Arc, RwLock};
use std::time::Duration;

use futures::StreamExt;
use holdfast_core::execution::finalizer::{self, EXECUTION_FINALIZER, Fences, Gone, Step};
use holdfast_core::execution::{self, BATCH_GROUP, JOBSET_GROUP, JOBSET_NAME_LABEL};
use jiff::Timestamp;
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::{ConfigMap, Pod};
use kube::api::{Api, DynamicObject, Patch, PatchParams, PostParams};
use kube::core::PartialObjectMeta;
use kube::runtime::controller::Action;
use kube::runtime::reflector::{self, Store, reflector};
use kube::runtime::{Controller, WatchStreamExt, controller, watcher};
use serde_json::Value;
use tokio_util::sync::CancellationToken;

/// What the tracker watches and where fences are kept.
#[derive(Clone, Debug)]
pub struct Config {
    /// The namespace whose pods it tracks; `None`: every namespace.
    pub namespace: Option<String>,
    /// The fences ConfigMap: its namespace (the release's) and name.
    pub fences_namespace: String,
    pub fences_name: String,
    /// How soon a pod whose owners are not seen yet is looked at again.
    pub unresolved_retry: Duration,
}

impl Config {
    pub fn new(namespace: Option<String>, fences_namespace: &str, fences_name: &str) -> Self {
        Config {
            namespace,
            fences_namespace: fences_namespace.to_owned(),
            fences_name: fences_name.to_owned(),
            unresolved_retry: Duration::from_secs(2),
        }
    }
}

/// The execution finalizer's keeper. Only the leader may run it.
#[derive(Clone)]
pub struct ExecutionTracker {
    client: kube::Client,
    config: Config,
}

struct Context {
    client: kube::Client,
    jobs: Store<PartialObjectMeta<Job>>,
    jobsets: Store<PartialObjectMeta<DynamicObject>>,
    fences: Arc<RwLock<Fences>>,
    retry: Duration,
}

#[derive(Debug, thiserror::Error)]
enum Error {
    #[error(transparent)]
    Kube(#[from] kube::Error),
    #[error(transparent)]
    Json(#[from] serde_json::Error),
}

impl ExecutionTracker {
    pub fn new(client: kube::Client, config: Config) -> Self {
        ExecutionTracker { client, config }
    }

    /// Runs until `shutdown` is cancelled.
    pub async fn run(&self, shutdown: CancellationToken) -> anyhow::Result<()> {
        let client = &self.client;
        let config = &self.config;
        let namespace = config.namespace.as_deref();

        let jobs_api: Api<PartialObjectMeta<Job>> = match namespace {
            Some(ns) => Api::namespaced(client.clone(), ns),
            None => Api::all(client.clone()),
        };
        let (jobs, jobs_writer) = reflector::store();
        let jobs_stream = reflector(
            jobs_writer,
            watcher(jobs_api, watcher::Config::default().any_semantic()),
        )
        .default_backoff()
        .touched_objects()
        .map(|j| j.map(|_| ()));

        let jobset_ar = holdfast_cluster::resources::jobset();
        let jobsets_api: Api<PartialObjectMeta<DynamicObject>> = match namespace {
            Some(ns) => Api::namespaced_with(client.clone(), ns, &jobset_ar),
            None => Api::all_with(client.clone(), &jobset_ar),
        };
        let jobsets_writer = reflector::store::Writer::new(jobset_ar);
        let jobsets = jobsets_writer.as_reader();
        let jobsets_stream = reflector(
            jobsets_writer,
            watcher(jobsets_api, watcher::Config::default().any_semantic()),
        )
        .default_backoff()
        .touched_objects()
        .map(|j| j.map(|_| ()));

        // The fences: one ConfigMap, watched; every change reconciles every pod.
        let fences = Arc::new(RwLock::new(Fences::new()));
        let (fenced_tx, fenced_rx) = futures::channel::mpsc::unbounded::<()>();
        let fences_api: Api<ConfigMap> = Api::namespaced(client.clone(), &config.fences_namespace);
        let fences_stream = watcher(
            fences_api,
            watcher::Config::default().fields(&format!("metadata.name={}", config.fences_name)),
        )
        .default_backoff()
        .applied_objects();
        let fences_task = {
            let fences = fences.clone();
            let token = shutdown.clone();
            tokio::spawn(async move {
                let mut stream = std::pin::pin!(fences_stream.take_until(token.cancelled_owned()));
                while let Some(event) = stream.next().await {
                    match event {
                        Ok(cm) => {
                            let (read, unreadable) =
                                finalizer::read_fences(cm.data.as_ref(), Timestamp::now());
                            if !unreadable.is_empty() {
                                tracing::warn!(nodes = ?unreadable, "fences ConfigMap: entries that are not RFC 3339 times are no fence");
                            }
                            if let Ok(mut f) = fences.write() {
                                *f = read;
                            }
                            let _ = fenced_tx.unbounded_send(());
                        }
                        Err(e) => tracing::warn!(error = %e, "fences watch failed; retrying"),
                    }
                }
            })
        };

        let pods_api: Api<Pod> = match namespace {
            Some(ns) => Api::namespaced(client.clone(), ns),
            None => Api::all(client.clone()),
        };
        let ctx = Arc::new(Context {
            client: client.clone(),
            jobs,
            jobsets,
            fences,
            retry: config.unresolved_retry,
        });
        tracing::info!(
            namespace = namespace.unwrap_or("(all)"),
            "execution finalizer keeper starting"
        );
        let drivers = tokio::spawn({
            let token = shutdown.clone();
            async move {
                let jobs = jobs_stream.for_each(|_| futures::future::ready(()));
                let jobsets = jobsets_stream.for_each(|_| futures::future::ready(()));
                tokio::select! {
                    _ = token.cancelled() => {}
                    _ = futures::future::join(jobs, jobsets) => {}
                }
            }
        });
        Controller::new(
            pods_api,
            watcher::Config::default()
                .labels(JOBSET_NAME_LABEL)
                .any_semantic(),
        )
        .reconcile_all_on(fenced_rx)
        .with_config(controller::Config::default().concurrency(4))
        .graceful_shutdown_on(shutdown.clone().cancelled_owned())
        .run(reconcile, error_policy, ctx)
        .for_each(|outcome| {
            if let Err(e) = outcome
                && !matches!(e, controller::Error::ObjectNotFound(_))
            {
                tracing::warn!(error = %e, "execution finalizer keeper");
            }
            futures::future::ready(())
        })
        .await;
        drivers.abort();
        fences_task.abort();
        tracing::info!("execution finalizer keeper stopped");
        Ok(())
    }
}

async fn reconcile(pod: Arc<Pod>, ctx: Arc<Context>) -> Result<Action, Error> {
    let value = serde_json::to_value(pod.as_ref())?;
    let job = execution::controller_uid(&value, BATCH_GROUP, "Job")
        .and_then(|uid| find(&ctx.jobs.state(), uid))
        .map(|j| meta_value(&j.metadata));
    let jobset = job
        .as_ref()
        .and_then(|j| execution::controller_uid(j, JOBSET_GROUP, "JobSet"))
        .and_then(|uid| find(&ctx.jobsets.state(), uid))
        .map(|s| meta_value(&s.metadata));
    let of_an_execution = execution::of_an_execution(&value, job.as_ref(), jobset.as_ref());
    let fences = ctx.fences.read().map(|f| f.clone()).unwrap_or_default();
    let step = finalizer::step(&value, of_an_execution, &fences);
    let (Some(namespace), Some(name)) = (
        pod.metadata.namespace.as_deref(),
        pod.metadata.name.as_deref(),
    ) else {
        return Ok(Action::await_change());
    };
    let rv = pod.metadata.resource_version.clone().unwrap_or_default();
    let finalizers = pod.metadata.finalizers.clone().unwrap_or_default();
    // A JSON patch of the finalizers alone, tested on the resourceVersion the decision read:
    // nothing else of the pod is written (the chart's policy allows the controller nothing
    // else), and a pod changed since is decided again.
    let mut ops =
        vec![serde_json::json!({"op": "test", "path": "/metadata/resourceVersion", "value": rv})];
    match step {
        Step::Keep => {
            // Owners not seen yet (their watch lags the pod's): look again soon.
            let owner_unseen = match &job {
                None => execution::controller_uid(&value, BATCH_GROUP, "Job").is_some(),
                Some(j) => {
                    jobset.is_none()
                        && execution::controller_uid(j, JOBSET_GROUP, "JobSet").is_some()
                }
            };
            let unresolved =
                !finalizer::carries(&value) && finalizer::node(&value).is_some() && owner_unseen;
            return Ok(if unresolved {
                Action::requeue(ctx.retry)
            } else {
                Action::await_change()
            });
        }
        Step::Add if finalizers.is_empty() => ops.push(serde_json::json!(
            {"op": "add", "path": "/metadata/finalizers", "value": [EXECUTION_FINALIZER]})),
        Step::Add => ops.push(serde_json::json!(
            {"op": "add", "path": "/metadata/finalizers/-", "value": EXECUTION_FINALIZER})),
        Step::Remove(_) => {
            let Some(i) = finalizers.iter().position(|f| f == EXECUTION_FINALIZER) else {
                return Ok(Action::await_change());
            };
            ops.push(serde_json::json!(
                {"op": "test", "path": format!("/metadata/finalizers/{i}"), "value": EXECUTION_FINALIZER}));
            ops.push(
                serde_json::json!({"op": "remove", "path": format!("/metadata/finalizers/{i}")}),
            );
        }
    }
    let patch: json_patch::Patch = serde_json::from_value(Value::Array(ops))?;
    let api: Api<Pod> = Api::namespaced(ctx.client.clone(), namespace);
    match api
        .patch(name, &PatchParams::default(), &Patch::Json::<()>(patch))
        .await
    {
        Ok(_) => {
            let (what, how) = match step {
                Step::Remove(Gone::KubeletConfirmed) => {
                    ("released", "its kubelet reported it ended")
                }
                Step::Remove(Gone::Fenced) => ("released", "its node was fenced"),
                Step::Remove(Gone::NeverBound) => ("released", "it was never bound to a node"),
                _ => ("kept", "bound to a node"),
            };
            tracing::info!(
                namespace,
                pod = name,
                node = finalizer::node(&value),
                what,
                how,
                "execution finalizer"
            );
            Ok(Action::await_change())
        }
        // Changed since the watch saw it (a failed test is answered 422): decide again on
        // what is there now.
        Err(kube::Error::Api(e)) if e.code == 409 || e.code == 422 => {
            Ok(Action::requeue(ctx.retry))
        }
        // Gone.
        Err(kube::Error::Api(e)) if e.code == 404 => Ok(Action::await_change()),
        Err(e) => Err(e.into()),
    }
}

fn error_policy(_pod: Arc<Pod>, error: &Error, ctx: Arc<Context>) -> Action {
    tracing::warn!(%error, "execution finalizer: retrying");
    Action::requeue(ctx.retry)
}

fn find<K: kube::Resource + Clone>(objects: &[Arc<K>], uid: &str) -> Option<Arc<K>> {
    objects
        .iter()
        .find(|o| o.meta().uid.as_deref() == Some(uid))
        .cloned()
}

fn meta_value(meta: &kube::api::ObjectMeta) -> Value {
    serde_json::json!({"metadata": meta})
}

/// Records a fence of `node` at `at` in the fences ConfigMap (created if missing): the
/// attestation that every process on the node had ended by then. An earlier fence of the
/// node is replaced only by a later one. Answers the node's fence as it then stands.
pub async fn record_fence(
    client: &kube::Client,
    namespace: &str,
    name: &str,
    node: &str,
    at: Timestamp,
) -> Result<Timestamp, kube::Error> {
    let api: Api<ConfigMap> = Api::namespaced(client.clone(), namespace);
    for _ in 0..8 {
        let current = api.get_opt(name).await?;
        let text = holdfast_core::rfc3339::auto(at);
        let result = match current {
            Some(mut cm) => {
                let data = cm.data.get_or_insert_with(BTreeMap::new);
                if let Some(standing) = data
                    .get(node)
                    .and_then(|t| holdfast_core::rfc3339::parse(t).ok())
                    .filter(|t| *t >= at)
                {
                    return Ok(standing);
                }
                data.insert(node.to_owned(), text);
                api.replace(name, &PostParams::default(), &cm)
                    .await
                    .map(|_| ())
            }
            None => {
                let cm = ConfigMap {
                    metadata: kube::api::ObjectMeta {
                        name: Some(name.to_owned()),
                        namespace: Some(namespace.to_owned()),
                        ..Default::default()
                    },
                    data: Some([(node.to_owned(), text)].into()),
                    ..Default::default()
                };
                api.create(&PostParams::default(), &cm).await.map(|_| ())
            }
        };
        match result {
            Ok(()) => return Ok(at),
            Err(kube::Error::Api(e)) if e.code == 409 => continue,
            Err(e) => return Err(e),
        }
    }
    Err(kube::Error::Api(Box::new(kube::core::Status {
        code: 409,
        message: format!("the fences ConfigMap {namespace}/{name} kept changing"),
        reason: "Conflict".into(),
        ..Default::default()
    })))
}
