//! The controller's Prometheus metrics: one struct per part, all registered into the one
//! registry the admin port serves at `/metrics`. Registered beside these by the wiring:
//! `holdfast_serve::register_common_metrics` (build info, process, kube requests), the hold
//! calls' (`crate::hold::CallMetrics`), the readmission gate's, the held gauges
//! (`crate::held`) and certificate expiry (`holdfast_serve::CertificateExpiry`).

use prometheus_client::registry::Registry;

use crate::leader::LeaderMetrics;
use crate::snapshot::SnapshotMetrics;

/// Every metric the controller exports.
#[derive(Clone, Debug, Default)]
pub struct Metrics {
    /// The snapshot reconciler's (`holdfast_snapshot*`).
    pub snapshots: SnapshotMetrics,
    /// Leader election's (`holdfast_leader*`).
    pub leader: LeaderMetrics,
}

impl Metrics {
    /// Creates the metrics and registers them into `registry`.
    pub fn register(registry: &mut Registry) -> Self {
        let metrics = Metrics::default();
        metrics.snapshots.register(registry);
        metrics.leader.register(registry);
        metrics
    }
}
