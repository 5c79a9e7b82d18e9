//! The process: wires the parts together and runs them until SIGTERM.
//!
//! - the admin port (`/livez`, `/readyz`, `/metrics`) on every replica;
//! - the hold API (HTTPS) on every replica: its writes are preconditioned, so any replica
//!   may serve them; preflight probes at start-up and again every `--preflight-interval`;
//! - certificate management (self-managed mode) on every replica (its writes are
//!   preconditioned too);
//! - the snapshot reconciler and, in kueue mode, the readmission gate only on the replica
//!   holding the Lease, fed by one TrainJob watch ([`trainjob::Watch`]). Losing the Lease
//!   ends the process with an error: it must not write without it.
//!
//! Ready means: holdfast's webhook configurations are armed (`crate::arming`: its webhook
//! answered through the apiserver), the API serves and, on the leader, the reconciler's watches
//! have synced.
//!
//! Only here (and in [`crate::args`]) are the flags known: each part is given its own
//! configuration, made by [`Args::configs`].

use crate::api::{self, ApiState, KubeAuth};
use crate::args::{Args, Configs};
use crate::events::{EventMetrics, Publisher, PublisherConfig};
use crate::execution::ExecutionTracker;
use crate::held::HeldMetrics;
use crate::hold::{self, CallMetrics, HoldExecutor, without_retry};
use crate::leader::{self, LeaderMetrics};
use crate::metrics::Metrics;
use crate::readmission::{ReadmissionGate, ReadmissionMetrics};
use crate::snapshot::Snapshotter;
use crate::trainjob;
use crate::webhook_certs;
use anyhow::Context;
use holdfast_core::mode::Mode;
use holdfast_serve::{CertificateExpiry, ConnectionMetrics, Readiness, admin_router};
use prometheus_client::registry::Registry;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;
use tokio_util::sync::CancellationToken;

/// How long to wait for a Secret volume to be filled with the API's certificate.
const CERT_FILES_TIMEOUT: Duration = Duration::from_secs(120);

/// Run every part until `shutdown` is cancelled or one of them fails: the instruments
/// first, then the parts every replica runs (certificates, the hold executor and its
/// preflight, the admin port), then, once armed, the hold API, and the leader's parts under
/// the Lease.
pub async fn serve(args: Args, shutdown: CancellationToken) -> anyhow::Result<()> {
    let Configs {
        executor: executor_config,
        preflight_interval,
        snapshot: snapshot_config,
        readmission: readmission_config,
        execution: execution_config,
        lease,
        certs: cert_config,
        arming,
    } = args.configs()?;
    let config = args.client.config().await?;
    let instruments = Instruments::register();
    let client = instruments.kube_requests.client(config.clone())?;
    // One Event publisher for every part: one queue, one pace, one series cache.
    let events = Publisher::start(
        client.clone(),
        PublisherConfig {
            reporter: snapshot_config.reporter.clone(),
            instance: snapshot_config.instance.clone(),
            ..PublisherConfig::default()
        },
        instruments.events,
    );
    let ready = Readiness::default();
    let reconciler_ready = Readiness::default();
    let leading = Arc::new(AtomicBool::new(false));
    let api_up = Arc::new(AtomicBool::new(false));
    let mut tasks = tokio::task::JoinSet::new();

    keep_certificates(
        &args,
        cert_config,
        &client,
        &instruments.certificates,
        &events,
        &mut tasks,
        &shutdown,
    )?;

    let workers = multikueue_workers(&args).await?;
    let executor = HoldExecutor::new(
        instruments.kube_requests.client(without_retry(config))?,
        args.mode,
        executor_config,
    )
    .with_metrics(instruments.calls)
    .with_events(events.clone())
    .with_workers(workers.clone())
    // The snapshot reconciler runs beside the hold API: Open waits for a job's snapshot.
    .with_snapshot_gate();
    probe_now_and_every(&executor, preflight_interval, &mut tasks, &shutdown).await;

    let trainjob_namespace = snapshot_config.namespace.clone();
    let snapshots = Snapshotter::new(
        client.clone(),
        snapshot_config,
        instruments.metrics.snapshots.clone(),
        reconciler_ready.clone(),
        events.clone(),
    );
    // A hold is on the TrainJob in plain mode only; in kueue mode the gate counts Workloads.
    if args.mode == Mode::Plain {
        let snapshots = snapshots.clone();
        instruments.held.add("TrainJob", move || snapshots.held());
    }

    start_admin_port(
        &args,
        instruments.registry,
        ready.clone(),
        instruments.admin_connections,
        &mut tasks,
        &shutdown,
    )
    .await?;

    // Nothing is served or written before holdfast's webhook configurations are armed: an
    // install whose webhook never answers stays disarmed and refuses nothing, and this
    // replica is not Ready (the admin port above answers /livez meanwhile).
    if let Some(arming) = arming {
        if !crate::arming::until_armed(&client, &arming, &shutdown).await {
            while tasks.join_next().await.is_some() {}
            return Ok(());
        }
        tasks.spawn(crate::arming::keep_armed(
            client.clone(),
            arming,
            shutdown.clone(),
        ));
    }

    // Its bounds: the connections' (the TLS server's) and the calls' (the budget's).
    let (connection_limits, call_limits) = args.hold_api.limits();
    let router = api::router(ApiState {
        executor: executor.clone(),
        auth: KubeAuth::new(client.clone())
            .with_audiences(args.hold_api.audiences())
            .with_budget(api::Budget::new(call_limits, instruments.api_limits)),
        snapshots: Some(snapshots.clone()),
        fences: Some(api::FenceStore {
            client: client.clone(),
            namespace: execution_config.fences_namespace.clone(),
            name: execution_config.fences_name.clone(),
        }),
        unprotected: api::Unprotected::new(args.unprotected_namespaces.iter().cloned()),
    });
    serve_hold_api(
        &args,
        router,
        (connection_limits, call_limits),
        instruments.api_connections,
        &instruments.certificates,
        &mut tasks,
        &shutdown,
    )
    .await?;
    api_up.store(true, Ordering::SeqCst);
    tasks.spawn(keep_ready(
        ready,
        reconciler_ready,
        leading.clone(),
        instruments.metrics.leader.clone(),
        api_up,
        shutdown.clone(),
    ));

    // The writers: only under the Lease.
    let gate = (args.mode == Mode::Kueue).then(|| {
        // Both parts watch the TrainJobs of --watch-namespace: one watch serves them.
        debug_assert_eq!(readmission_config.namespace, trainjob_namespace);
        let gate =
            ReadmissionGate::new(client.clone(), readmission_config, instruments.gate, events)
                .with_workers(workers);
        beside_the_gate(
            &gate,
            &client,
            &executor,
            &instruments.held,
            &mut tasks,
            &shutdown,
        );
        gate
    });
    let tracker = ExecutionTracker::new(client.clone(), execution_config);
    let watch_client = client.clone();
    let outcome = leader::run_as_leader(
        client.clone(),
        lease,
        instruments.metrics.leader.clone(),
        shutdown.clone(),
        move |token| async move {
            leading.store(true, Ordering::SeqCst);
            let trainjobs = trainjob::Watch::new(watch_client, trainjob_namespace.as_deref());
            let result = leader_work(trainjobs, snapshots, gate, tracker, token).await;
            leading.store(false, Ordering::SeqCst);
            result
        },
    )
    .await;
    shutdown.cancel();
    while tasks.join_next().await.is_some() {}
    match outcome {
        Ok(None) => Ok(()),
        Ok(Some(result)) => result,
        Err(lost) => {
            Err(anyhow::Error::new(lost).context("stopping: lost the leader-election Lease"))
        }
    }
}

/// The executor's preflight at start-up, logged, and again every `every` in `tasks`.
async fn probe_now_and_every(
    executor: &HoldExecutor,
    every: Duration,
    tasks: &mut Tasks,
    shutdown: &CancellationToken,
) {
    let report = executor.preflight(None).await;
    tracing::info!(preflight = %report.body(), "preflight");
    tasks.spawn(reprobe(executor.clone(), every, shutdown.clone()));
}

/// Kueue mode, beside the readmission gate: its held Workloads counted, and the hold marks
/// left by a call that ended between its two writes (`hold::mark`) swept from the leader's
/// TrainJob cache. The sweep writes: call this only once armed.
fn beside_the_gate(
    gate: &ReadmissionGate,
    client: &kube::Client,
    executor: &HoldExecutor,
    held: &HeldMetrics,
    tasks: &mut Tasks,
    shutdown: &CancellationToken,
) {
    let counted = gate.clone();
    held.add("Workload", move || counted.held());
    let cached = gate.clone();
    tasks.spawn(hold::sweep_marks_every(
        client.clone(),
        move || cached.trainjobs(),
        executor.call_bound(),
        hold::MARK_SWEEP_INTERVAL,
        shutdown.clone(),
    ));
}

/// Every metric the controller exports, registered in one registry before anything runs.
struct Instruments {
    registry: Registry,
    kube_requests: holdfast_serve::KubeRequestMetrics,
    metrics: Metrics,
    certificates: CertificateExpiry,
    held: HeldMetrics,
    calls: CallMetrics,
    gate: ReadmissionMetrics,
    /// The connections of the admin port and of the hold API, each under its own prefix.
    admin_connections: ConnectionMetrics,
    api_connections: ConnectionMetrics,
    api_limits: api::LimitMetrics,
    events: EventMetrics,
}

impl Instruments {
    fn register() -> Self {
        let mut registry = Registry::default();
        let kube_requests = holdfast_serve::register_common_metrics(&mut registry, "controller");
        let metrics = Metrics::register(&mut registry);
        let certificates = CertificateExpiry::register(&mut registry);
        let held = HeldMetrics::register(&mut registry);
        let calls = CallMetrics::register(&mut registry);
        let gate = ReadmissionMetrics::default();
        gate.register(&mut registry);
        let admin_connections = ConnectionMetrics::register(
            registry.sub_registry_with_prefix("holdfast_controller_admin"),
        );
        let api_connections = ConnectionMetrics::register(
            registry.sub_registry_with_prefix("holdfast_controller_hold_api"),
        );
        let api_limits = api::LimitMetrics::register(&mut registry);
        let events = EventMetrics::register(&mut registry);
        Instruments {
            registry,
            kube_requests,
            metrics,
            certificates,
            held,
            calls,
            gate,
            admin_connections,
            api_connections,
            api_limits,
            events,
        }
    }
}

/// The certificates' keepers, on every replica: self-managed, the webhook's and the hold API's
/// certificates (whose reconcile also publishes the hold API's CA for its clients); otherwise,
/// when `--hold-api-ca-configmap` names where to publish it, the hold API's CA copied from the
/// webhook configuration `--hold-api-ca-source` names.
fn keep_certificates(
    args: &Args,
    self_managed: Option<webhook_certs::CertConfig>,
    client: &kube::Client,
    certificates: &CertificateExpiry,
    events: &Publisher,
    tasks: &mut Tasks,
    shutdown: &CancellationToken,
) -> anyhow::Result<()> {
    if let (None, Some(to)) = (&self_managed, args.certs.hold_api_ca()) {
        let source = args.certs.hold_api_ca_source.clone();
        anyhow::ensure!(
            !source.is_empty(),
            "--hold-api-ca-configmap needs --hold-api-ca-source (the MutatingWebhookConfiguration whose caBundle to publish) when certificates are external"
        );
        tasks.spawn(crate::hold_api_ca::keep_copied(
            client.clone(),
            source,
            to,
            args.certs
                .cert_check_interval
                .max(std::time::Duration::from_secs(1)),
            shutdown.clone(),
        ));
    }
    if let Some(cert_config) = self_managed {
        tasks.spawn(webhook_certs::run(
            client.clone(),
            cert_config,
            certificates.clone(),
            Some(events.clone()),
            shutdown.clone(),
        ));
    }
    Ok(())
}

/// The admin port (`/livez`, `/readyz`, `/metrics`), bound now and served until `shutdown`.
async fn start_admin_port(
    args: &Args,
    registry: Registry,
    ready: Readiness,
    connections: ConnectionMetrics,
    tasks: &mut Tasks,
    shutdown: &CancellationToken,
) -> anyhow::Result<()> {
    let addr = args.admin.admin_addr;
    let admin = admin_router(Arc::new(registry), ready);
    let listener = tokio::net::TcpListener::bind(addr)
        .await
        .with_context(|| format!("binding the admin port {addr}"))?;
    let limits = args.admin.limits();
    tracing::info!(
        %addr,
        max_connections = limits.max_connections,
        max_connections_per_ip = limits.max_connections_per_source,
        "admin port listening"
    );
    let shutdown = shutdown.clone();
    tasks.spawn(async move {
        if let Err(e) =
            holdfast_serve::admin::serve_admin(listener, admin, limits, connections, shutdown).await
        {
            tracing::error!(error = %e, "admin port failed");
        }
    });
    Ok(())
}

/// The hold API on its TLS port, once its certificate's files appear; without
/// `--tls-cert`/`--tls-key`, not served (and said so).
async fn serve_hold_api(
    args: &Args,
    router: axum::Router,
    (connection_limits, limits): (holdfast_serve::ConnectionLimits, api::ApiLimits),
    connections: ConnectionMetrics,
    certificates: &CertificateExpiry,
    tasks: &mut Tasks,
    shutdown: &CancellationToken,
) -> anyhow::Result<()> {
    let Some(files) = args.tls.files() else {
        tracing::warn!("no --tls-cert/--tls-key: the hold API is not served");
        return Ok(());
    };
    if !webhook_certs::wait_for_files(
        &[files.cert.as_path(), files.key.as_path()],
        CERT_FILES_TIMEOUT,
    )
    .await
    {
        anyhow::bail!(
            "the hold API's certificate ({}, {}) did not appear within {CERT_FILES_TIMEOUT:?}",
            files.cert.display(),
            files.key.display()
        );
    }
    tracing::info!(
        max_connections = connection_limits.max_connections,
        max_connections_per_ip = connection_limits.max_connections_per_source,
        ?limits,
        token_audiences = ?args.hold_api.audiences(),
        "hold API bounds"
    );
    let server = holdfast_serve::TlsServer::bind_with(
        args.api_addr,
        files,
        holdfast_serve::TlsOptions {
            limits: connection_limits,
            metrics: connections,
            ..Default::default()
        },
    )
    .await?;
    certificates.served("hold_api", server.resolver());
    tracing::info!(addr = %server.local_addr()?, "hold API listening");
    let shutdown = shutdown.clone();
    tasks.spawn(async move {
        if let Err(e) = server.serve(router, shutdown).await {
            tracing::error!(error = %e, "hold API failed");
        }
    });
    Ok(())
}

/// The tasks every replica runs beside the leader's parts.
type Tasks = tokio::task::JoinSet<()>;

/// What the leader runs: the snapshot reconciler and, in kueue mode, the readmission gate,
/// both fed by `trainjobs`, the one TrainJob watch (the watch lives as long as they run);
/// and the execution finalizer's keeper.
async fn leader_work(
    mut trainjobs: trainjob::Watch,
    snapshots: Snapshotter,
    gate: Option<ReadmissionGate>,
    tracker: ExecutionTracker,
    token: CancellationToken,
) -> anyhow::Result<()> {
    let snapshot_feed = trainjobs.subscribe();
    let gate_feed = gate.as_ref().map(|_| trainjobs.subscribe());
    let parts = async {
        match (gate, gate_feed) {
            (Some(gate), Some(gate_feed)) => {
                let (s, g) = tokio::join!(
                    snapshots.run_on(snapshot_feed, token.clone()),
                    gate.run_on(gate_feed, token.clone())
                );
                s?;
                g
            }
            _ => Ok(snapshots.run_on(snapshot_feed, token.clone()).await?),
        }
    };
    let parts_done = CancellationToken::new();
    let (result, (), tracked) = tokio::join!(
        async {
            let result = parts.await;
            parts_done.cancel();
            result
        },
        trainjobs.run(parts_done.clone()),
        tracker.run(parts_done.clone())
    );
    result.and(tracked)
}

/// Probes the capability again every `every`, so that a cluster that changes (CRDs or the
/// AdmissionCheck installed after the controller, RBAC edited) is seen without a restart.
async fn reprobe(executor: HoldExecutor, every: Duration, shutdown: CancellationToken) {
    let mut tick = tokio::time::interval(every);
    tick.tick().await;
    let mut last = String::new();
    loop {
        tokio::select! {
            _ = shutdown.cancelled() => return,
            _ = tick.tick() => {}
        }
        // Idle (no call within the age a call accepts): no probe, and no request; the next
        // call probes first.
        if !executor
            .capability()
            .reprobe_due(executor.config().preflight_max_age)
        {
            continue;
        }
        let report = executor.preflight(None).await;
        let calls = serde_json::to_string(&report.calls).unwrap_or_default();
        if calls != last {
            tracing::info!(preflight = %report.body(), "preflight changed");
            last = calls;
        }
    }
}

async fn keep_ready(
    ready: Readiness,
    reconciler: Readiness,
    leading: Arc<AtomicBool>,
    leader: LeaderMetrics,
    api_up: Arc<AtomicBool>,
    shutdown: CancellationToken,
) {
    let mut tick = tokio::time::interval(Duration::from_millis(250));
    loop {
        tokio::select! {
            _ = shutdown.cancelled() => {
                ready.set(false);
                return;
            }
            _ = tick.tick() => {}
        }
        // A replica that cannot lead as configured (RBAC, credentials, a missing Lease
        // namespace) is not ready: it says so where operators look first.
        ready.set(
            api_up.load(Ordering::SeqCst)
                && !leader.cannot_lead()
                && (!leading.load(Ordering::SeqCst) || reconciler.get()),
        );
    }
}

/// The MultiKueue workers of `--multikueue-worker`, each a client from its kubeconfig.
async fn multikueue_workers(args: &Args) -> anyhow::Result<crate::multikueue::Workers> {
    let workers = crate::multikueue::Workers::from_kubeconfigs(&args.multikueue_workers).await?;
    if !workers.is_empty() {
        tracing::info!(workers = ?workers.names(), "MultiKueue workers: the readmission gate counts pods there too");
    }
    Ok(workers)
}
