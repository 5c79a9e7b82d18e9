//! The webhook's Prometheus metrics, served on the admin port's `/metrics`.
//!
//! Every label value is one of a fixed set of `&'static str` (endpoint, kind, operation,
//! verdict, error reason, lookup result): never an object, namespace or user name.
//!
//! | metric | labels | what |
//! | --- | --- | --- |
//! | `holdfast_webhook_admissions_total` | `endpoint`, `kind`, `operation`, `verdict` | answered AdmissionReviews; verdict `allowed`, `denied`, `patched` or `invalid` (a malformed review answered with allowed: false) |
//! | `holdfast_webhook_admission_duration_seconds` | `endpoint` | time from request to answer, every request (errors and shed ones too) |
//! | `holdfast_webhook_request_errors_total` | `endpoint`, `reason` | requests answered with an HTTP error instead of a review ([`WebhookError::metric_label`]) |
//! | `holdfast_webhook_runtime_lookups_total` | `result` | runtime reads at TrainJob admission: `found`, `missing`, `unknown_kind`, `invalid_ref`, `error`, `timeout` |
//! | `holdfast_webhook_in_flight` | | decisions being made now (each holds one of `--max-concurrent` permits) |
//! | `holdfast_webhook_connections_open` | | connections to the admission port open now |
//! | `holdfast_webhook_connections_refused_total` | `reason`: `total`, `per_source` | connections closed at accept: a cap was reached |
//! | `holdfast_webhook_tls_handshake_failures_total` | `reason`: `timeout`, `error` | failed handshakes (`error`: also a missing or untrusted client certificate) |
//! | `holdfast_webhook_connections_closed_total` | `reason`: `idle`, `slow_request`, `shutdown` | connections the server closed |
//!
//! Besides these, as the controller: `holdfast_build_info{component="webhook"}`, the standard
//! `process_*` metrics, `holdfast_kube_requests_total{verb,code}` (its kube client) and
//! `holdfast_certificate_expiration_timestamp_seconds{kind="serving",source="webhook"}`
//! (`holdfast_serve`).
//!
//! The connection metrics are `holdfast_serve::ConnectionMetrics`, registered by
//! [`crate::RunningWebhook::start_with`]. A request refused for its body — too large (`413`),
//! too slow (`408`, `body_timeout`) — or shed (`503`, `overloaded`) counts in
//! `request_errors_total` by that reason.

use crate::error::WebhookError;
use holdfast_core::policy::{Operation, Resource, Verdict};
use holdfast_serve::Declared;
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;
use std::time::Duration;

/// Which admission endpoint.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Endpoint {
    Mutate,
    Validate,
}

impl Endpoint {
    pub fn as_str(self) -> &'static str {
        match self {
            Endpoint::Mutate => "mutate",
            Endpoint::Validate => "validate",
        }
    }
}

/// How an answered review came out.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Outcome {
    Allowed,
    Denied,
    Patched,
    /// A malformed review answered (it named its uid) with allowed: false.
    Invalid,
}

impl Outcome {
    pub fn of(verdict: &Verdict, patched: bool) -> Self {
        match verdict {
            Verdict::Deny { .. } => Outcome::Denied,
            Verdict::Allow if patched => Outcome::Patched,
            Verdict::Allow => Outcome::Allowed,
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            Outcome::Allowed => "allowed",
            Outcome::Denied => "denied",
            Outcome::Patched => "patched",
            Outcome::Invalid => "invalid",
        }
    }
}

/// The `kind` label of a resource.
pub fn kind_label(resource: Option<&Resource>) -> &'static str {
    match resource {
        Some(Resource::ConfigMap) => "ConfigMap",
        Some(Resource::TrainJob) => "TrainJob",
        Some(Resource::Workload) => "Workload",
        Some(Resource::JobSet) => "JobSet",
        Some(Resource::Other { .. }) => "other",
        None => "unknown",
    }
}

/// The `operation` label.
pub fn operation_label(op: Option<Operation>) -> &'static str {
    match op {
        Some(Operation::Create) => "CREATE",
        Some(Operation::Update) => "UPDATE",
        Some(Operation::Delete) => "DELETE",
        Some(Operation::Connect) => "CONNECT",
        None => "unknown",
    }
}

/// What a runtime lookup found.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum LookupResult {
    Found,
    Missing,
    UnknownKind,
    InvalidRef,
    Error,
    Timeout,
}

impl LookupResult {
    pub fn as_str(self) -> &'static str {
        match self {
            LookupResult::Found => "found",
            LookupResult::Missing => "missing",
            LookupResult::UnknownKind => "unknown_kind",
            LookupResult::InvalidRef => "invalid_ref",
            LookupResult::Error => "error",
            LookupResult::Timeout => "timeout",
        }
    }
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct AdmissionLabels {
    endpoint: &'static str,
    kind: &'static str,
    operation: &'static str,
    verdict: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct EndpointLabels {
    endpoint: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ErrorLabels {
    endpoint: &'static str,
    reason: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct LookupLabels {
    result: &'static str,
}

type HistogramFamily = Family<EndpointLabels, Histogram, fn() -> Histogram>;

fn latency_histogram() -> Histogram {
    // 100µs .. ~3.3s, doubling.
    Histogram::new(exponential_buckets(0.000_1, 2.0, 16))
}

/// Handles to every metric; cheap to clone.
#[derive(Clone, Debug)]
pub struct Metrics {
    admissions: Family<AdmissionLabels, Counter>,
    duration: HistogramFamily,
    errors: Family<ErrorLabels, Counter>,
    lookups: Family<LookupLabels, Counter>,
    in_flight: Gauge,
}

impl Metrics {
    /// Create the metrics and register them in `registry`.
    pub fn register(registry: &mut Registry) -> Self {
        let m = Metrics {
            admissions: Family::default(),
            duration: Family::new_with_constructor(latency_histogram as fn() -> Histogram),
            errors: Family::default(),
            lookups: Family::default(),
            in_flight: Gauge::default(),
        };
        let r = registry.sub_registry_with_prefix("holdfast_webhook");
        r.register(
            "admissions",
            "AdmissionReviews answered, by endpoint, kind, operation and verdict",
            Declared(m.admissions.clone()),
        );
        r.register(
            "admission_duration_seconds",
            "Time to answer an admission request, by endpoint",
            Declared(m.duration.clone()),
        );
        r.register(
            "request_errors",
            "Admission requests answered with an HTTP error instead of a review, by reason",
            Declared(m.errors.clone()),
        );
        r.register(
            "runtime_lookups",
            "Runtime reads at TrainJob admission, by result",
            Declared(m.lookups.clone()),
        );
        r.register(
            "in_flight",
            "Admission decisions being made now",
            m.in_flight.clone(),
        );
        m
    }

    /// Metrics registered nowhere (tests, benchmarks).
    pub fn unregistered() -> Self {
        Self::register(&mut Registry::default())
    }

    pub fn admission(
        &self,
        endpoint: Endpoint,
        resource: Option<&Resource>,
        op: Option<Operation>,
        outcome: Outcome,
    ) {
        self.admissions
            .get_or_create(&AdmissionLabels {
                endpoint: endpoint.as_str(),
                kind: kind_label(resource),
                operation: operation_label(op),
                verdict: outcome.as_str(),
            })
            .inc();
    }

    pub fn error(&self, endpoint: Endpoint, e: &WebhookError) {
        self.errors
            .get_or_create(&ErrorLabels {
                endpoint: endpoint.as_str(),
                reason: e.metric_label(),
            })
            .inc();
    }

    pub fn observe(&self, endpoint: Endpoint, took: Duration) {
        self.duration
            .get_or_create(&EndpointLabels {
                endpoint: endpoint.as_str(),
            })
            .observe(took.as_secs_f64());
    }

    pub fn lookup(&self, result: LookupResult) {
        self.lookups
            .get_or_create(&LookupLabels {
                result: result.as_str(),
            })
            .inc();
    }

    /// Counts one admission in flight until the guard is dropped.
    pub fn in_flight(&self) -> InFlight {
        self.in_flight.inc();
        InFlight(self.in_flight.clone())
    }
}

/// Decrements the in-flight gauge when dropped.
pub struct InFlight(Gauge);

impl Drop for InFlight {
    fn drop(&mut self) {
        self.0.dec();
    }
}
