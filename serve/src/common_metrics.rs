//! The metrics both binaries export besides their own: build info, the process, and the kube
//! client's requests (certificate expiry is registered where each binary knows its
//! certificates).

use crate::build_info::register_build_info;
use crate::kube_requests::KubeRequestMetrics;
use crate::process_metrics::ProcessCollector;
use prometheus_client::registry::Registry;

/// Registers `holdfast_build_info` for `component`, the `process_*` metrics and
/// `holdfast_kube_requests_total`; build the binary's kube clients with the returned
/// [`KubeRequestMetrics::client`].
pub fn register_common_metrics(
    registry: &mut Registry,
    component: &'static str,
) -> KubeRequestMetrics {
    register_build_info(registry, component);
    ProcessCollector::register(registry);
    KubeRequestMetrics::register(registry)
}
