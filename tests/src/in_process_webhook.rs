//! holdfast's webhook served in-process over TLS, with a serving certificate from the control
//! plane's CA and the harness's identities: for the suites that register it by URL and judge
//! real requests through the real apiserver.

use std::sync::Arc;
use std::time::Duration;

use holdfast_core::mode::Mode;
use holdfast_core::policy::Identities;
use holdfast_core::policy::identities::{GARBAGE_COLLECTOR, NAMESPACE_CONTROLLER};
use holdfast_webhook::metrics::Metrics;
use holdfast_webhook::runtime_lookup::KubeRuntimeLookup;
use holdfast_webhook::workload_holds::{KubeWorkloadHolds, WorkloadHolds};
use holdfast_webhook::{Admission, Limits, RunningWebhook, ServeOptions};

use crate::{ControlPlane, Identity};

/// The identities of the local control plane, as the chart configures them.
pub fn identities() -> Identities {
    Identities::new(
        [Identity::Controller.username()],
        [Identity::Trainer.username()],
        [GARBAGE_COLLECTOR, NAMESPACE_CONTROLLER],
        [Identity::Kueue.username()],
    )
}

/// A webhook serving on `127.0.0.1` (its port: [`port`](Self::port)).
pub struct InProcessWebhook {
    hook: RunningWebhook,
    _certs: tempfile::TempDir,
}

impl InProcessWebhook {
    /// Serves `mode`'s policy. In kueue mode with `queues`, it watches Kueue's queues (the
    /// queue check); without, every queue check of a managed TrainJob is refused.
    pub async fn start(cp: &ControlPlane, mode: Mode, queues: bool) -> anyhow::Result<Self> {
        Self::start_with_holds(cp, mode, queues, |holds| holds).await
    }

    /// [`start`](Self::start), its lookup of the holds on a TrainJob's Workloads passed
    /// through `wrap` (a test stages a write between that read and the apiserver's store).
    pub async fn start_with_holds(
        cp: &ControlPlane,
        mode: Mode,
        queues: bool,
        wrap: impl FnOnce(Arc<dyn WorkloadHolds>) -> Arc<dyn WorkloadHolds>,
    ) -> anyhow::Result<Self> {
        let cert = cp.issue_serving_cert(&["127.0.0.1"], Duration::from_secs(24 * 3600))?;
        let (files, certs) = crate::serving_files::write(&cert)?;
        let client = cp.client(Identity::Webhook).await?;
        let queues = (queues && mode == Mode::Kueue)
            .then(|| holdfast_cluster::Queues::start(client.clone(), None));
        let admission = Arc::new(
            Admission::new(
                mode,
                identities(),
                Arc::new(KubeRuntimeLookup::new(client.clone(), Default::default())),
                Metrics::unregistered(),
                Limits::DEFAULT,
            )
            .with_queues(queues)
            .with_workload_holds(wrap(Arc::new(KubeWorkloadHolds::new(client)))),
        );
        let hook = RunningWebhook::start(
            ServeOptions {
                addr: "127.0.0.1:0".parse()?,
                admin_addr: "127.0.0.1:0".parse()?,
                cert: files,
            },
            admission,
            prometheus_client::registry::Registry::default(),
        )
        .await?;
        Ok(Self {
            hook,
            _certs: certs,
        })
    }

    pub fn port(&self) -> u16 {
        self.hook.addr().port()
    }

    /// Where the registration points: `https://127.0.0.1:{port}`.
    pub fn url(&self) -> String {
        format!("https://127.0.0.1:{}", self.port())
    }

    pub async fn stop(self) -> anyhow::Result<()> {
        self.hook.stop().await?;
        Ok(())
    }
}
