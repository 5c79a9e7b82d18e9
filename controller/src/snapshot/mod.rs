//! The snapshot reconciler (KEP-2599): on its first reconciliation every TrainJob gets a
//! snapshot of the runtime its `spec.runtimeRef` names, in the ConfigMap
//! `{trainjob}-runtime-snapshot`, never rewritten. The pure logic (rendering, the ConfigMap,
//! Trainer's reader, drift, and each reconciliation's decisions, `step`) is
//! `holdfast_core::snapshot`; this module is the I/O around it.
//!
//! # What it reads, and what it costs
//!
//! Snapshotting a TrainJob costs one request: the ConfigMap create. Everything else comes
//! from watches started once:
//!
//! - **TrainJobs** ([`crate::trainjob`]): a store of the TrainJobs, decoded only as far as
//!   the controller reads them (a few hundred bytes each in memory; one that does not decode
//!   is reported, not a stalled watch), driving kube-runtime's `Controller` (bounded
//!   concurrency, per-TrainJob exponential backoff on errors). The watch is the leader's one
//!   TrainJob watch, shared with the readmission gate ([`Snapshotter::run_on`]), or one of
//!   its own ([`Snapshotter::run`]).
//! - **Runtimes** ([`runtimes`]): one reflector per runtime kind in use, started the first
//!   time a TrainJob names the kind. The kind is resolved by API discovery ([`RuntimeKinds`]), so any
//!   kind the cluster serves works — a `SlurmRuntime` holdfast has never heard of included.
//! - **Snapshot ConfigMaps** ([`configmaps`]): a metadata-only watch of ConfigMaps, kept for
//!   names ending in `-runtime-snapshot`. Not a label selector: Trainer's snapshots and
//!   squatters carry no label, and must be known before writing. So the existence, owner and
//!   provenance of every snapshot is known without a request per TrainJob; only a snapshot
//!   someone else wrote (Trainer's) is read in full, once, to check it as Trainer's reader
//!   does. The cost is that the watch sees every ConfigMap's metadata change in scope; only
//!   matching ones are kept in memory.
//!
//! The live runtime is read from the apiserver only when the store cannot be trusted (the
//! runtime is missing from it, or the TrainJob was admitted against another version).
//!
//! # Promises
//!
//! - A snapshot is created with `POST` (never apply, never update): if the name is taken the
//!   apiserver refuses, and what is there is read and classified — Trainer's is accepted, a
//!   squatter's (not controlled by this TrainJob's uid) is refused with a Warning event and
//!   left untouched. holdfast's snapshots are `immutable: true`.
//! - A missing runtime or an unserved kind: Warning event, retried with backoff, nothing
//!   written; the TrainJob is also reconciled at once when the runtime appears.
//! - A runtime too large for a ConfigMap: Warning event, nothing written, no retry loop
//!   (reconciled again when the runtime changes).
//! - Admission race (kubeflow/trainer#3975): a snapshot of another resourceVersion than the
//!   one the webhook recorded at admission (`holdfast.dev/admitted-runtime-resource-version`)
//!   is flagged: Warning event and `holdfast_snapshot_admission_races_total`.
//! - Drift ([`drift`]): `holdfast_snapshot_drifted_trainjobs{kind,runtime}` and
//!   [`Snapshotter::drift`], served as `GET /v1/drift` by the hold API (authenticated and
//!   authorised like every call: it names namespaces and jobs).
//! - [`resolve_runtime`]: the runtime every later use must see, snapshot first.
//!
//! Only the leader writes: run it under [`crate::leader::run_as_leader`].

mod config;
mod configmaps;
mod drift;
mod error;
mod events;
mod health;
mod ledger;
mod metrics;
mod migration;
mod read;
mod reconcile;
mod report;
mod resolve;
mod runtimes;
mod take;

use futures::StreamExt;
use holdfast_serve::Readiness;
use kube::runtime::reflector;
use kube::runtime::{Controller, controller, watcher};
use std::sync::{Arc, Mutex, RwLock};
use tokio::task::JoinSet;
use tokio_util::sync::CancellationToken;

pub use crate::trainjob::TrainJob;
pub use config::Config;
pub use drift::{DriftReport, DriftedTrainJob};
pub use error::Error;

/// How long a `GET /v1/drift` waits for the computation before it (one at a time) to end.
pub const DRIFT_TURN: std::time::Duration = std::time::Duration::from_secs(5);
pub use health::Health;
pub use holdfast_cluster::runtime_kinds::{RuntimeKind, RuntimeKinds};
pub use metrics::{ReasonLabels, RuntimeLabels, SnapshotMetrics, WatchLabels, WriterLabels};
pub use read::read_snapshot;
pub use resolve::{ResolveError, ResolvedRuntime, RuntimeOrigin, resolve_runtime};

use crate::backoff::Backoffs;
use crate::events::Publisher;
use crate::trainjob::{self, Feed};
use drift::DriftCache;
use reconcile::Context;
use runtimes::RuntimeIndex;

/// The TrainJob watch's name in health and metrics.
const TRAINJOBS: &str = "trainjobs";

/// The snapshot reconciler: run it, and ask it about drift. Cheap to clone.
#[derive(Clone)]
pub struct Snapshotter {
    inner: Arc<Inner>,
}

struct Inner {
    client: kube::Client,
    config: Config,
    metrics: SnapshotMetrics,
    readiness: Readiness,
    /// Set while `run` runs (on the leader).
    running: RwLock<Option<Arc<Context>>>,
    drift_cache: Mutex<DriftCache>,
    /// One `GET /v1/drift` computation at a time ([`Snapshotter::drift`]).
    drift_turn: tokio::sync::Semaphore,
    /// Where its Events go (the process's one publisher).
    events: Publisher,
}

impl Snapshotter {
    /// A reconciler that writes as `client`'s identity, counts into `metrics`, sets
    /// `readiness` once its watches have synced and publishes its Events through `events`
    /// (the process's one publisher).
    pub fn new(
        client: kube::Client,
        config: Config,
        metrics: SnapshotMetrics,
        readiness: Readiness,
        events: Publisher,
    ) -> Self {
        Snapshotter {
            inner: Arc::new(Inner {
                client,
                config,
                metrics,
                readiness,
                running: RwLock::new(None),
                drift_cache: Mutex::default(),
                drift_turn: tokio::sync::Semaphore::new(1),
                events,
            }),
        }
    }

    /// The drifted TrainJobs of `namespace` (every namespace's when `None`), with the paths
    /// that differ. `Error::Busy` when another computation kept the turn past [`DRIFT_TURN`].
    pub async fn drift(&self, namespace: Option<&str>) -> Result<DriftReport, Error> {
        let ctx = self
            .inner
            .running
            .read()
            .ok()
            .and_then(|r| r.clone())
            .ok_or(Error::NotRunning)?;
        // Not listed yet (the reconciler is starting): answered as when it does not run,
        // rather than waited for.
        if !ctx.configmaps.listed() {
            return Err(Error::NotRunning);
        }
        // One computation at a time: each compares every job in its scope and may read
        // snapshots, and callers are as many as RBAC lets ask. A caller waits its turn at most
        // DRIFT_TURN, then is told to ask again.
        let _turn = match tokio::time::timeout(DRIFT_TURN, self.inner.drift_turn.acquire()).await {
            Ok(Ok(turn)) => turn,
            _ => return Err(Error::Busy),
        };
        let scope = match namespace {
            Some(ns) => drift::Scope::Namespace(ns),
            None => drift::Scope::All,
        };
        let (report, _counts) = drift::compute(&ctx, &self.inner.drift_cache, true, scope).await;
        Ok(report)
    }

    /// The holds among the TrainJobs in the reconciler's store (plain mode holds the TrainJob
    /// itself); `None` while it is not running (not the leader). No request is made.
    pub fn held(&self) -> Option<crate::held::HoldCount> {
        let ctx = self.inner.running.read().ok()?.clone()?;
        let jobs = ctx.trainjobs.state();
        let mut count = crate::held::HoldCount::default();
        for j in &jobs {
            match &j.0 {
                Ok(job) => count.add(|k| job.annotation(k)),
                Err(invalid) => {
                    let annotations = invalid.metadata.annotations.as_ref();
                    count.add(|k| annotations?.get(k).map(String::as_str));
                }
            }
        }
        Some(count)
    }

    /// Runs the reconciler until `shutdown` is cancelled, fed by `trainjobs`, a feed of the
    /// one TrainJob watch ([`crate::trainjob::Watch`], of the namespace of this reconciler's
    /// configuration). Does no leader election itself: run it under
    /// [`crate::leader::run_as_leader`].
    pub async fn run_on(&self, trainjobs: Feed, shutdown: CancellationToken) -> Result<(), Error> {
        // Also when this future is dropped (leadership lost, task aborted).
        let _stopped = Stopped(self);
        self.run_inner(&shutdown, trainjobs).await
    }

    fn stopped(&self) {
        if let Ok(mut r) = self.inner.running.write()
            && let Some(ctx) = r.take()
        {
            ctx.runtimes.stop();
        }
        Health::new(self.inner.readiness.clone(), self.inner.metrics.clone()).stopped();
    }

    async fn run_inner(&self, shutdown: &CancellationToken, feed: Feed) -> Result<(), Error> {
        let Inner {
            client,
            config,
            metrics,
            readiness,
            ..
        } = &*self.inner;
        let started = tokio::time::Instant::now();
        let namespace = config.namespace.as_deref();
        let health = Health::new(readiness.clone(), metrics.clone());
        let (retrigger, retriggered) = futures::channel::mpsc::unbounded();
        let mut tasks = JoinSet::new();

        // The snapshot ConfigMaps and the TrainJobs are listed at once. Nothing that reads
        // the ConfigMaps acts before their list is in (reconciling before they are known
        // would try to create snapshots that exist): a reconcile, the drift gauge and report,
        // and the migration's count wait for it (`Context::configmaps_listed`).
        let (configmaps, driver) =
            configmaps::watch(client.clone(), namespace, health.clone(), retrigger.clone());
        tasks.spawn(driver);

        let writer = reflector::store::Writer::new(());
        let trainjobs = writer.as_reader();
        health.require(TRAINJOBS);
        let observer = health.clone();
        // The store's own `wait_until_ready` wakes one waiter only, and the Controller is
        // that one: the start-up stock waits on this instead.
        let (listed_tx, listed) = tokio::sync::watch::channel(false);
        let stream = feed
            .reflect(writer)
            .inspect(move |event| {
                observer.observe(TRAINJOBS, event);
                if let Ok(watcher::Event::InitDone) = event {
                    listed_tx.send_replace(true);
                }
            })
            .filter_map(|update| futures::future::ready(trainjob::applied(update)));

        let runtimes = Arc::new(RuntimeIndex::new(
            client.clone(),
            config.namespace.clone(),
            config.runtime_resources.clone(),
            health.clone(),
            retrigger,
        ));
        let events = self.inner.events.clone();
        let ctx = Arc::new(Context {
            client: client.clone(),
            config: config.clone(),
            metrics: metrics.clone(),
            events,
            configmaps: configmaps.clone(),
            runtimes,
            ledger: ledger::Ledger::default(),
            backoff: Backoffs::new(config.retry_min, config.retry_max),
            trainjobs: trainjobs.clone(),
            renderings: Mutex::default(),
            shutdown: shutdown.clone(),
        });
        if let Ok(mut r) = self.inner.running.write() {
            *r = Some(ctx.clone());
        }

        after_the_lists(&ctx, listed, started, &mut tasks);

        tracing::info!(
            namespace = namespace.unwrap_or("(all)"),
            concurrency = config.concurrency,
            "snapshot reconciler starting"
        );
        Controller::for_stream(stream, trainjobs)
            .with_config(controller::Config::default().concurrency(config.concurrency))
            .reconcile_on(retriggered)
            .graceful_shutdown_on(shutdown.clone().cancelled_owned())
            .run(reconcile::reconcile, reconcile::error_policy, ctx.clone())
            .for_each(|outcome| {
                match outcome {
                    Ok(_) => {}
                    // Deleted: its failures, if any, are forgotten.
                    Err(controller::Error::ObjectNotFound(job)) => ctx.backoff.forget(&job),
                    // Logged by the error policy.
                    Err(controller::Error::ReconcilerFailed(..)) => {}
                    Err(e) => tracing::warn!(error = %e, "snapshot controller"),
                }
                futures::future::ready(())
            })
            .await;
        tasks.abort_all();
        tracing::info!("snapshot reconciler stopped");
        Ok(())
    }
}

/// What waits for the lists, each in `tasks`: once both are in (`listed`: the TrainJobs'; the
/// context's: the ConfigMaps'), the start-up stock logged and the migration followed to its
/// end; once the ConfigMaps' is, the drift gauge kept.
fn after_the_lists(
    ctx: &Arc<Context>,
    mut listed: tokio::sync::watch::Receiver<bool>,
    started: tokio::time::Instant,
    tasks: &mut JoinSet<()>,
) {
    let follow = migration::Follow {
        trainjobs: ctx.trainjobs.clone(),
        configmaps: ctx.configmaps.clone(),
        metrics: ctx.metrics.clone(),
        events: ctx.events.clone(),
        client: ctx.client.clone(),
        lease: ctx.config.migration_event_lease.clone(),
        started,
    };
    let listing = ctx.clone();
    tasks.spawn(async move {
        if listed.wait_for(|l| *l).await.is_ok() && listing.configmaps_listed().await {
            let pending = migration::log_stock(&follow.trainjobs.state(), &follow.configmaps);
            migration::follow(follow, pending).await;
        }
    });
    let (drifting, interval, stop) = (
        ctx.clone(),
        ctx.config.drift_interval,
        ctx.shutdown.child_token(),
    );
    tasks.spawn(async move {
        if drifting.configmaps_listed().await {
            drift::keep_gauge(drifting, interval, stop).await;
        }
    });
}

/// Marks the reconciler stopped when dropped.
struct Stopped<'a>(&'a Snapshotter);

impl Drop for Stopped<'_> {
    fn drop(&mut self) {
        self.0.stopped();
    }
}
