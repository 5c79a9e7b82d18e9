//! holdfast-webhook: the mutating and validating admission server.
//!
//! `main` parses the flags and [`run`] wires; the modules decide:
//!
//! - [`review`]: the `/mutate` and `/validate` endpoints: limits, decoding, the policy of
//!   `holdfast_core::policy`, the answer.
//! - [`runtime_lookup`]: reading the runtime a TrainJob names at its admission.
//! - The Validating- and MutatingWebhookConfiguration live in one place, the chart
//!   (`charts/holdfast/templates/webhookconfigurations.yaml`); the tests register what it
//!   renders.
//! - [`server`]: TLS and admin ports, connection bounds, client certificates, readiness,
//!   graceful drain.
//! - [`workload_holds`]: whether a TrainJob's Workload carries a hold (Kueue's unsuspend).
//! - [`metrics`], [`error`], [`args`].
#![forbid(unsafe_code)]

pub mod args;
pub mod error;
pub mod metrics;
pub mod review;
pub mod runtime_lookup;
pub mod server;
pub mod workload_holds;

pub use args::Args;
pub use error::WebhookError;
pub use holdfast_serve::CertFiles;
pub use review::{Admission, Limits};
pub use server::{ConnectionOptions, RunningWebhook, ServeOptions};

use metrics::Metrics;
use prometheus_client::registry::Registry;
use runtime_lookup::KubeRuntimeLookup;
use std::sync::Arc;

/// Serve until SIGTERM or SIGINT, then drain.
pub fn run(args: Args) -> anyhow::Result<()> {
    args.log.init();
    holdfast_serve::install_crypto_provider();
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;
    rt.block_on(serve(args))
}

async fn serve(args: Args) -> anyhow::Result<()> {
    tracing::info!(mode = %args.mode, "holdfast-webhook starting");
    let options = args.serve_options()?;
    let connections = args.connection_options();
    let mut registry = Registry::default();
    let kube_requests = holdfast_serve::register_common_metrics(&mut registry, "webhook");
    let client = kube_requests.client(args.client.config().await?)?;
    let metrics = Metrics::register(&mut registry);
    let queues = (args.mode == holdfast_core::mode::Mode::Kueue)
        .then(|| holdfast_cluster::Queues::start(client.clone(), None));
    let admission = Arc::new(
        Admission::new(
            args.mode,
            args.identities()?,
            Arc::new(KubeRuntimeLookup::new(
                client.clone(),
                args.runtime_resources()?,
            )),
            metrics,
            args.limits(),
        )
        .with_queues(queues)
        .with_workload_holds(Arc::new(workload_holds::KubeWorkloadHolds::new(client))),
    );
    let hook = RunningWebhook::start_with(options, connections, admission, registry).await?;
    holdfast_serve::shutdown::signal().await;
    hook.stop_after(args.shutdown_delay).await
}
