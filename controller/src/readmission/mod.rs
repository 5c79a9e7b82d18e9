//! Kueue mode: the readmission gate, and holds that survive the replacement of their
//! Workload. The decisions are `holdfast_core::readmission`'s (read its module docs for the
//! design: the gate's conditions, how A rises exactly once per admission, how a hold moves
//! to a replacement Workload); this module is their I/O.
//!
//! # What it runs
//!
//! - **AdmissionChecks** ([`checks`]): a controller over `kueue.x-k8s.io` AdmissionChecks.
//!   On those whose `spec.controllerName` is `holdfast.dev/readmission` it keeps the
//!   `Active` condition true (status subresource); their names are the entries of
//!   `status.admissionChecks` the gate serves. A change of that set reconciles every
//!   TrainJob.
//! - **The TrainJob reconcile** ([`reconcile`]): kube-runtime's `Controller` over TrainJobs
//!   (the leader's one TrainJob watch, shared with the snapshot reconciler through
//!   [`ReadmissionGate::run_on`], or one of its own with [`ReadmissionGate::run`]), triggered also by their Workloads (through the TrainJob owner reference) and by the
//!   pods of their executions (metadata-only watch, through the JobSet name label), with
//!   bounded concurrency and per-TrainJob exponential backoff. Each reconcile first moves
//!   holds off Workloads being deleted, then serves the gate on each live Workload. For a
//!   Workload under MultiKueue it also counts the pods in each worker of
//!   [`ReadmissionGate::with_workers`] (`crate::multikueue`).
//! - **The orphan sweep** ([`sweep`]): held Workloads being deleted whose TrainJob is gone
//!   lose the hold finalizer.
//! - **MultiKueue's copies** ([`remote`]): in a worker cluster, the Workloads MultiKueue
//!   copies in have no TrainJob owner before admission; their check stays `Pending` with a
//!   message saying why (holdfast does not support MultiKueue workers yet).
//!
//! Only the leader may run this: every write assumes it is the only gate. Run it under
//! [`crate::leader`]; [`run`] does no leader election itself.

mod checks;
mod config;
mod error;
mod events;
mod metrics;
mod once;
mod reconcile;
mod remote;
mod sweep;

use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::StreamExt;
use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, DynamicObject};
use kube::core::PartialObjectMeta;
use kube::runtime::reflector;
use kube::runtime::{Controller, WatchStreamExt, controller, watcher};
use tokio::task::JoinSet;
use tokio_util::sync::CancellationToken;

pub use config::Config;
pub use error::Error;
pub use metrics::ReadmissionMetrics;

use crate::backoff::Backoffs;
use crate::events::Publisher;
use crate::pods::JOBSET_NAME_LABEL;
use crate::trainjob::{self, Feed, Watched};
use holdfast_cluster::resources;
use holdfast_core::names::MULTIKUEUE_ORIGIN_LABEL;
use kube::ResourceExt;

/// The readmission gate. Cheap to clone.
#[derive(Clone)]
pub struct ReadmissionGate {
    client: kube::Client,
    config: Config,
    metrics: ReadmissionMetrics,
    /// The Workload store while the gate runs (for [`ReadmissionGate::held`]).
    workloads: Arc<std::sync::RwLock<Option<reflector::Store<DynamicObject>>>>,
    /// The TrainJob store while the gate runs (for [`ReadmissionGate::trainjobs`]).
    trainjobs: Arc<std::sync::RwLock<Option<reflector::Store<Watched>>>>,
    /// Where its Events go (the process's one publisher).
    events: Publisher,
    /// The MultiKueue workers whose pods it counts too.
    workers: crate::multikueue::Workers,
}

impl ReadmissionGate {
    /// A gate that writes as `client`'s identity, counts into `metrics` and publishes its
    /// Events through `events` (the process's one publisher).
    pub fn new(
        client: kube::Client,
        config: Config,
        metrics: ReadmissionMetrics,
        events: Publisher,
    ) -> Self {
        ReadmissionGate {
            client,
            config,
            metrics,
            workloads: Arc::default(),
            trainjobs: Arc::default(),
            events,
            workers: crate::multikueue::Workers::default(),
        }
    }

    /// The gate counting, for a TrainJob under MultiKueue, the previous execution's pods in
    /// each of `workers` too, and waiting while one cannot be read.
    pub fn with_workers(mut self, workers: crate::multikueue::Workers) -> Self {
        self.workers = workers;
        self
    }

    /// The TrainJobs in the gate's store; `None` while the gate is not running (not the
    /// leader). No request is made.
    pub fn trainjobs(&self) -> Option<reflector::Store<Watched>> {
        self.trainjobs.read().ok()?.clone()
    }

    /// The holds among the Workloads in the gate's store, but those being deleted (their
    /// hold moves to the replacement); `None` while the gate is not running (not the
    /// leader). No request is made.
    pub fn held(&self) -> Option<crate::held::HoldCount> {
        let store = self.workloads.read().ok()?.clone()?;
        let workloads = store.state();
        Some(crate::held::HoldCount::of(
            workloads
                .iter()
                .filter(|w| w.metadata.deletion_timestamp.is_none())
                .map(|w| w.metadata.annotations.as_ref()),
        ))
    }

    pub fn metrics(&self) -> &ReadmissionMetrics {
        &self.metrics
    }

    /// Runs until `shutdown` is cancelled, fed by `feed`, a feed of the one TrainJob watch
    /// ([`crate::trainjob::Watch`], of the namespace of this gate's configuration).
    pub async fn run_on(&self, feed: Feed, shutdown: CancellationToken) -> anyhow::Result<()> {
        let client = &self.client;
        let config = &self.config;
        let namespace = config.namespace.as_deref();
        let namespaced = |ar: &kube::core::ApiResource| -> Api<DynamicObject> {
            match namespace {
                Some(ns) => Api::namespaced_with(client.clone(), ns, ar),
                None => Api::all_with(client.clone(), ar),
            }
        };
        let mut tasks = JoinSet::new();
        let (check_names, checks_changed_rx) = self.keep_checks(&mut tasks, &shutdown);

        // Workloads, cached and triggering their TrainJob; held ones being deleted poke the
        // orphan sweep, MultiKueue's copies the remote sweep.
        let workload_ar = resources::workload();
        let workload_writer = reflector::store::Writer::new(workload_ar.clone());
        let workloads = workload_writer.as_reader();
        if let Ok(mut w) = self.workloads.write() {
            *w = Some(workloads.clone());
        }
        let _forget = ForgetStore(&self.workloads);
        let (poke, poked) = futures::channel::mpsc::unbounded();
        let (poke_remote, remote_poked) = futures::channel::mpsc::unbounded();
        let workload_stream = watcher(
            namespaced(&workload_ar),
            watcher::Config::default().any_semantic(),
        )
        .modify(|w: &mut DynamicObject| w.metadata.managed_fields = None)
        .default_backoff()
        .reflect(workload_writer)
        .touched_objects()
        .inspect(move |w| {
            if let Ok(w) = w
                && w.metadata.deletion_timestamp.is_some()
            {
                let _ = poke.unbounded_send(());
            }
            if let Ok(w) = w
                && w.labels().contains_key(MULTIKUEUE_ORIGIN_LABEL)
            {
                let _ = poke_remote.unbounded_send(());
            }
        });
        let pod_stream = execution_pods(client, namespace);

        // TrainJobs.
        let trainjob_writer = reflector::store::Writer::new(());
        let trainjobs = trainjob_writer.as_reader();
        if let Ok(mut t) = self.trainjobs.write() {
            *t = Some(trainjobs.clone());
        }
        let _forget_trainjobs = ForgetStore(&self.trainjobs);
        let trainjob_stream = feed
            .reflect(trainjob_writer)
            .inspect(|update| {
                if let Err(e) = update {
                    tracing::warn!(error = %e, "readmission TrainJob watch failed; retrying with backoff");
                }
            })
            .filter_map(|update| futures::future::ready(trainjob::applied(update)));

        let queues = holdfast_cluster::queues::Queues::start(client.clone(), namespace);
        let queues_changed = queues.changes();
        let events = self.events.clone();
        let ctx = Arc::new(reconcile::Context {
            client: client.clone(),
            config: config.clone(),
            metrics: self.metrics.clone(),
            workloads: workloads.clone(),
            checks: check_names,
            backoff: Backoffs::new(config.retry_min, config.retry_max),
            queues,
            events,
            ungated: std::sync::Mutex::default(),
            multikueue: std::sync::Mutex::default(),
            not_adopted: std::sync::Mutex::default(),
            workers: self.workers.clone(),
        });
        tasks.spawn(sweep::run(
            ctx.clone(),
            trainjobs.clone(),
            poked,
            config.sweep_interval,
            shutdown.child_token(),
        ));

        tasks.spawn(remote::run(
            ctx.clone(),
            remote_poked,
            config.sweep_interval,
            shutdown.child_token(),
        ));

        tracing::info!(
            namespace = namespace.unwrap_or("(all)"),
            concurrency = config.concurrency,
            "readmission gate starting"
        );
        Controller::for_stream(trainjob_stream, trainjobs)
            .watches_stream_with(
                workload_stream,
                |w: DynamicObject| reconcile::trainjob_of(&w),
                workload_ar,
            )
            .watches_stream(pod_stream, |p| reconcile::trainjob_of_pod(&p))
            .reconcile_all_on(futures::stream::select(
                checks_changed_rx,
                changes_of(queues_changed),
            ))
            .with_config(controller::Config::default().concurrency(config.concurrency))
            .graceful_shutdown_on(shutdown.clone().cancelled_owned())
            .run(reconcile::reconcile, reconcile::error_policy, ctx.clone())
            .for_each(|outcome| {
                match outcome {
                    // Deleted: its failures, if any, are forgotten.
                    Err(controller::Error::ObjectNotFound(trainjob)) => {
                        ctx.backoff.forget(&trainjob)
                    }
                    Ok(_) | Err(controller::Error::ReconcilerFailed(..)) => {}
                    Err(e) => tracing::warn!(error = %e, "readmission controller"),
                }
                futures::future::ready(())
            })
            .await;
        tasks.abort_all();
        tracing::info!("readmission gate stopped");
        Ok(())
    }

    /// The AdmissionChecks' controller, run in `tasks`: keeps holdfast's Active and knows the
    /// checks' names. Returns those names and a stream poked whenever one changes.
    fn keep_checks(
        &self,
        tasks: &mut JoinSet<()>,
        shutdown: &CancellationToken,
    ) -> (
        checks::CheckNames,
        futures::channel::mpsc::UnboundedReceiver<()>,
    ) {
        let (changed, changes) = futures::channel::mpsc::unbounded();
        let ar = resources::admission_check();
        let controller = Controller::new_with(
            Api::<DynamicObject>::all_with(self.client.clone(), &ar),
            watcher::Config::default().any_semantic(),
            ar,
        )
        .with_config(controller::Config::default().concurrency(2));
        let names = checks::CheckNames(controller.store());
        let ctx = Arc::new(checks::CheckContext {
            client: self.client.clone(),
            field_manager: self.config.field_manager.clone(),
            metrics: self.metrics.clone(),
            names: names.clone(),
            announced: Mutex::default(),
            changed,
            retry: self.config.retry_min.max(Duration::from_secs(1)),
        });
        tasks.spawn(
            controller
                .graceful_shutdown_on(shutdown.clone().cancelled_owned())
                .run(checks::reconcile, checks::error_policy, ctx)
                .for_each(|_| futures::future::ready(())),
        );
        (names, changes)
    }
}

/// Forgets a store when the gate stops (or its future is dropped).
struct ForgetStore<'a, K: kube::Resource + 'static>(
    &'a std::sync::RwLock<Option<reflector::Store<K>>>,
)
where
    K::DynamicType: Eq + std::hash::Hash + Clone;

impl<K: kube::Resource + 'static> Drop for ForgetStore<'_, K>
where
    K::DynamicType: Eq + std::hash::Hash + Clone,
{
    fn drop(&mut self) {
        if let Ok(mut w) = self.0.write() {
            *w = None;
        }
    }
}

/// A stream that yields once per change of `rx` after now.
fn changes_of(
    rx: tokio::sync::watch::Receiver<u64>,
) -> impl futures::Stream<Item = ()> + Send + 'static {
    futures::stream::unfold(rx, |mut rx| async move {
        rx.changed().await.ok().map(|()| ((), rx))
    })
}

/// The pods of executions (those carrying JobSet's label), metadata only: their changes and
/// deletions trigger their TrainJob.
fn execution_pods(
    client: &kube::Client,
    namespace: Option<&str>,
) -> impl futures::Stream<Item = Result<PartialObjectMeta<Pod>, watcher::Error>> + Send + 'static {
    let api: Api<PartialObjectMeta<Pod>> = match namespace {
        Some(ns) => Api::namespaced(client.clone(), ns),
        None => Api::all(client.clone()),
    };
    watcher(
        api,
        watcher::Config::default()
            .labels(JOBSET_NAME_LABEL)
            .any_semantic(),
    )
    .default_backoff()
    .touched_objects()
}
