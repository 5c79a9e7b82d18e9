//! The admission endpoints: `POST /mutate` and `POST /validate`, AdmissionReview v1 in and out.
//!
//! Each request goes through, in order:
//!
//! 1. **Timeout.** The whole answer, body read included, must take less than
//!    [`Limits::request_timeout`] (below the configurations' `timeoutSeconds`), else `504`.
//! 2. **Content type** `application/json` (parameters such as `charset` allowed), else `415`.
//! 3. **Body limit** [`Limits::max_body_bytes`], checked against `Content-Length` before
//!    reading and while reading, else `413`.
//! 4. **Body deadline.** The whole body must have arrived within [`Limits::body_read_timeout`]
//!    of the handler starting, else `408`, and the connection is closed after the answer
//!    (`holdfast_serve::ConnectionHandle::close`). The apiserver writes a review in one go, so
//!    only a client trickling its body meets this. Nothing shared is held while a body is
//!    read: a slow client costs its own connection's slot and nothing else (issue #12: with
//!    the permit taken before the body, 300 trickling connections held all 64 and the
//!    apiserver's own calls were shed until `failurePolicy: Fail` refused them). tower-http's
//!    `RequestBodyTimeout` is not used: its timeout is between frames, which a client sending
//!    two bytes a second never misses.
//! 5. **Load shedding.** Only now, body in hand, is one of [`Limits::max_concurrent`] decision
//!    permits taken (tower's `ConcurrencyLimit` under `LoadShed`); with none free the request
//!    is refused at once with `503` and `Retry-After: 1` (a `v1 Status` body saying so). The
//!    apiserver's client retries such an answer after the second it asks for, for as long as
//!    the configuration's `timeoutSeconds` lasts; a call still shed then fails, and the
//!    webhook's `failurePolicy` applies (`Fail`: the write is refused, with "context deadline
//!    exceeded"). Measured by `tests/tests/it/faults/webhook_server.rs`. A permit is held for the
//!    decision alone: decoding and the policy, no I/O (microseconds).
//! 6. **Decoding** with [`decode_review`]. A body that is not an AdmissionReview v1 gets a
//!    clear error: an AdmissionReview with `allowed: false` and status 400 naming the problem
//!    when its `request.uid` could be read (so the apiserver shows the message), else an HTTP
//!    `400` with a `v1 Status` body.
//! 7. **The decision**, by `holdfast_core::policy`: at `/mutate` the [`Mutation`] of
//!    [`mutate`] (never a denial), at `/validate` the verdict of [`validate`] (never a
//!    patch). A dry run gets exactly the answer the real request would get; the only I/O is
//!    the lookups below, which have no side effect.
//! 8. **Lookups, outside the permits.** The two reviews that need the cluster's state (the
//!    runtime read at a TrainJob CREATE, the Workloads of a TrainJob being unsuspended) give
//!    their permit back first, then wait for one of [`Limits::max_lookups`] lookup slots
//!    (first come, first served) and read, all within [`Limits::runtime_lookup_timeout`].
//!    Anyone who can reach the port can send a review, and without client certificates the
//!    webhook cannot tell a forged one from the apiserver's: a lookup held a decision permit
//!    while it read, so a flood of forged "Kueue unsuspends" reviews, each listing a
//!    namespace's Workloads, held all 64 and the apiserver's own reviews were shed. Now a
//!    flood of lookups delays only other lookups: an unsuspend that cannot be checked in time
//!    is refused (Kueue retries), a runtime not read in time is not recorded (the controller
//!    flags what it cannot prove), and every other review is decided at once. Measured by
//!    `tests/tests/it/faults/forged_reviews.rs`.
//! 9. **The answer**: kube's `AdmissionResponse`, made from the decision as it is and written
//!    as the apiserver writes one ([`answer`]).
//!
//! Connections themselves (how many, from where, how long idle, client certificates) are
//! bounded by the TLS server, `holdfast_serve::tls`.
//!
//! At a TrainJob's CREATE, `/mutate` reads the runtime its `spec.runtimeRef` names
//! ([`runtime_to_record`]; [`RuntimeLookup`], bounded by [`Limits::runtime_lookup_timeout`])
//! and records its resourceVersion as `holdfast.dev/admitted-runtime-resource-version`. A runtime that is
//! missing, unreadable or slow to read gets no annotation, and the TrainJob is admitted: the
//! snapshot is still taken later and the controller flags what it cannot prove.
//!
//! When `/mutate` restores controller annotations a non-controller update dropped, closes
//! the start gate, or overrides or keeps `podReplacementPolicy: Failed` on a TrainJob's JobSet
//! (`holdfast_core::policy::pod_replacement`: no lookup, no I/O), the answer carries the
//! [`Mutation`]'s `warnings` (kubectl prints them).

pub mod answer;

use crate::error::WebhookError;
use crate::metrics::{Endpoint, LookupResult, Metrics, Outcome};
use crate::runtime_lookup::{LookupError, RuntimeLookup};
use crate::workload_holds::WorkloadHolds;
use axum::Router;
use axum::body::Body;
use axum::extract::{Request, State};
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use bytes::Bytes;
use futures::future::BoxFuture;
use holdfast_core::mode::Mode;
use holdfast_core::policy::request::decode_review;
use holdfast_core::policy::{
    AdmissionInput, Identities, Mutation, QueueProblem, UnsuspendCheck, Verdict, mutate,
    queue_check, queue_verdict, requests_check, requests_verdict, runtime_to_record,
    unsuspend_check, unsuspend_verdict, validate,
};
use holdfast_core::readmission::queues::QueueGate;
use holdfast_core::snapshot::RuntimeRef;
use holdfast_serve::ConnectionHandle;
use http::{HeaderMap, HeaderValue, Method, StatusCode, header};
use http_body_util::{BodyExt, LengthLimitError, Limited};
use kube::core::admission::AdmissionResponse;
use std::convert::Infallible;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::{Duration, Instant};
use tokio::sync::Semaphore;
use tower::limit::ConcurrencyLimit;
use tower::load_shed::LoadShed;
use tower::load_shed::error::Overloaded;
use tower::{BoxError, Service, ServiceBuilder, ServiceExt};

/// The bounds every admission request is held to.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Limits {
    /// Largest request body. An UPDATE review carries the object twice (object and oldObject);
    /// each is at most what the apiserver accepts as a request body (3 MiB of JSON), so
    /// 6 MiB admits the largest ConfigMap update the apiserver can send.
    pub max_body_bytes: usize,
    /// Decisions made at once; one more is shed with 503.
    pub max_concurrent: usize,
    /// Longest time to answer one admission, body read included.
    pub request_timeout: Duration,
    /// Longest time for the whole request body to arrive (at most `request_timeout`).
    ///
    /// 2 s: the apiserver sends a review in one write as soon as the call starts, so a body
    /// that is slow to arrive is one a client chose to trickle. Even the largest body allowed
    /// (6 MiB) crosses a 100 Mbit/s link in half a second; 2 s leaves the call 3 s of the
    /// chart's `timeoutSeconds: 5` for the decision and for the apiserver's retries.
    pub body_read_timeout: Duration,
    /// Longest time to read the runtime at a TrainJob's admission, or the Workloads of a
    /// TrainJob being unsuspended, waiting for a lookup slot included.
    pub runtime_lookup_timeout: Duration,
    /// Lookups (runtime reads, Workload reads) made at once, outside the decision permits;
    /// more wait their turn within `runtime_lookup_timeout`.
    ///
    /// 16: a lookup is one small GET or label-selected LIST, milliseconds each, so 16 at a
    /// time answer hundreds a second, more than a cluster creates TrainJobs or Kueue admits
    /// them; and a flood of forged reviews sends the apiserver at most 16 reads at once.
    pub max_lookups: usize,
}

impl Limits {
    pub const DEFAULT: Limits = Limits {
        max_body_bytes: 6 * 1024 * 1024,
        max_concurrent: 64,
        request_timeout: Duration::from_secs(4),
        body_read_timeout: Duration::from_secs(2),
        runtime_lookup_timeout: Duration::from_secs(2),
        max_lookups: 16,
    };
}

impl Default for Limits {
    fn default() -> Self {
        Self::DEFAULT
    }
}

/// What a decision needs; shared by every request.
struct Policy {
    mode: Mode,
    identities: Identities,
    runtimes: Arc<dyn RuntimeLookup>,
    /// Kueue mode: Kueue's queues, to refuse a managed TrainJob queued where the readmission
    /// gate is not (see `holdfast_core::policy::queue_check`).
    queues: Option<holdfast_cluster::Queues>,
    /// The holds on a TrainJob's Workloads, read when it is being unsuspended (see
    /// `holdfast_core::policy::unsuspend_check`; plain mode: a hold left from kueue mode).
    /// Without it every such unsuspend is refused.
    workload_holds: Option<Arc<dyn WorkloadHolds>>,
    metrics: Metrics,
    limits: Limits,
    /// The lookup slots ([`Limits::max_lookups`]), shared by every request.
    lookups: Arc<Semaphore>,
}

/// A request whose body arrived in time, to be decided.
struct Decision {
    endpoint: Endpoint,
    body: Bytes,
}

/// What a decision under a permit came to: the answer, or a lookup to make once the permit
/// is given back.
enum Step {
    Answered(Response),
    Lookup(Pending),
}

/// A review whose answer waits for a lookup.
enum Pending {
    /// `/mutate` of a TrainJob CREATE: the runtime its `spec.runtimeRef` names.
    Runtime {
        uid: String,
        input: Box<AdmissionInput>,
        runtime: RuntimeRef,
    },
    /// `/validate` of a TrainJob being unsuspended: its Workloads' holds.
    Unsuspend {
        uid: String,
        input: Box<AdmissionInput>,
        check: UnsuspendCheck,
    },
}

/// The decision as a tower service.
#[derive(Clone)]
struct Decide(Arc<Policy>);

impl Service<Decision> for Decide {
    type Response = Result<Step, WebhookError>;
    type Error = Infallible;
    type Future = BoxFuture<'static, Result<Self::Response, Infallible>>;

    fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, d: Decision) -> Self::Future {
        let policy = self.0.clone();
        Box::pin(async move { Ok(policy.decide(d).await) })
    }
}

/// The decision behind [`Limits::max_concurrent`] permits, shedding when none is free.
type Decider = LoadShed<ConcurrencyLimit<Decide>>;

/// The admission endpoints' state, shared by every request.
pub struct Admission {
    policy: Arc<Policy>,
    decider: Decider,
}

impl std::fmt::Debug for Admission {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Admission")
            .field("mode", &self.policy.mode)
            .field("identities", &self.policy.identities)
            .field("limits", &self.policy.limits)
            .finish_non_exhaustive()
    }
}

impl Admission {
    pub fn new(
        mode: Mode,
        identities: Identities,
        runtimes: Arc<dyn RuntimeLookup>,
        metrics: Metrics,
        limits: Limits,
    ) -> Self {
        let policy = Arc::new(Policy {
            mode,
            identities,
            runtimes,
            metrics,
            lookups: Arc::new(Semaphore::new(limits.max_lookups.max(1))),
            limits,
            queues: None,
            workload_holds: None,
        });
        Self::with_policy(policy)
    }

    fn with_policy(policy: Arc<Policy>) -> Self {
        let decider = ServiceBuilder::new()
            .load_shed()
            .concurrency_limit(policy.limits.max_concurrent.max(1))
            .service(Decide(policy.clone()));
        Self { policy, decider }
    }

    /// Kueue mode: the watched queues a managed TrainJob's queue is checked against. Without
    /// them (`None`) in kueue mode, every such request is refused: the gate cannot be seen.
    pub fn with_queues(self, queues: Option<holdfast_cluster::Queues>) -> Self {
        let p = &self.policy;
        Self::with_policy(Arc::new(Policy {
            mode: p.mode,
            identities: p.identities.clone(),
            runtimes: p.runtimes.clone(),
            queues,
            workload_holds: p.workload_holds.clone(),
            metrics: p.metrics.clone(),
            limits: p.limits,
            lookups: p.lookups.clone(),
        }))
    }

    /// Where the holds on a TrainJob's Workloads are read when it is being unsuspended.
    /// Without it every unsuspend `unsuspend_check` names is refused.
    pub fn with_workload_holds(self, holds: Arc<dyn WorkloadHolds>) -> Self {
        let p = &self.policy;
        Self::with_policy(Arc::new(Policy {
            mode: p.mode,
            identities: p.identities.clone(),
            runtimes: p.runtimes.clone(),
            queues: p.queues.clone(),
            workload_holds: Some(holds),
            metrics: p.metrics.clone(),
            limits: p.limits,
            lookups: p.lookups.clone(),
        }))
    }

    pub fn metrics(&self) -> &Metrics {
        &self.policy.metrics
    }

    pub fn limits(&self) -> Limits {
        self.policy.limits
    }

    /// The router serving `/mutate` and `/validate`; anything else is a JSON 404 or 405.
    pub fn router(self: Arc<Self>) -> Router {
        Router::new()
            .route("/mutate", post(mutate_endpoint))
            .route("/validate", post(validate_endpoint))
            .fallback(|| async { WebhookError::NotFound })
            .method_not_allowed_fallback(|method: Method| async move {
                WebhookError::MethodNotAllowed(method.to_string())
            })
            .with_state(self)
    }

    /// Answer one admission request at `endpoint`.
    pub async fn admit(&self, endpoint: Endpoint, req: Request) -> Response {
        let started = Instant::now();
        let limits = self.policy.limits;
        let metrics = &self.policy.metrics;
        let answer =
            match tokio::time::timeout(limits.request_timeout, self.answer(endpoint, req)).await {
                Ok(answer) => answer,
                Err(_) => Err(WebhookError::Timeout(limits.request_timeout)),
            };
        let response = match answer {
            Ok(r) => r,
            Err(e) => {
                metrics.error(endpoint, &e);
                match &e {
                    WebhookError::Overloaded { .. } | WebhookError::BodyTimeout(_) => {
                        tracing::debug!(endpoint = endpoint.as_str(), error = %e, "admission refused")
                    }
                    _ => {
                        tracing::warn!(endpoint = endpoint.as_str(), error = %e, "admission request failed")
                    }
                }
                e.into_response()
            }
        };
        metrics.observe(endpoint, started.elapsed());
        response
    }

    async fn answer(&self, endpoint: Endpoint, req: Request) -> Result<Response, WebhookError> {
        check_content_type(req.headers())?;
        let limits = self.policy.limits;
        let connection = req.extensions().get::<ConnectionHandle>().cloned();
        // The body first, under its own deadline, holding nothing shared.
        let deadline = limits.body_read_timeout.min(limits.request_timeout);
        let body = match tokio::time::timeout(deadline, read_body(req, limits.max_body_bytes)).await
        {
            Ok(body) => body?,
            Err(_) => {
                // A client this slow gets no further request on this connection.
                if let Some(c) = connection {
                    c.close();
                }
                return Err(WebhookError::BodyTimeout(deadline));
            }
        };
        // Then a permit, for the decision alone.
        let mut decider = self.decider.clone();
        let shed = |e: BoxError| {
            if e.is::<Overloaded>() {
                WebhookError::Overloaded {
                    limit: limits.max_concurrent,
                }
            } else {
                WebhookError::Internal(e.to_string())
            }
        };
        let ready = decider.ready().await.map_err(shed)?;
        let step = ready
            .call(Decision { endpoint, body })
            .await
            .map_err(shed)??;
        // The permit is back (the decision's future has ended): a lookup holds none.
        match step {
            Step::Answered(response) => Ok(response),
            Step::Lookup(pending) => self.policy.look_up(pending).await,
        }
    }
}

impl Policy {
    async fn decide(&self, d: Decision) -> Result<Step, WebhookError> {
        let _in_flight = self.metrics.in_flight();
        let endpoint = d.endpoint;
        let (uid, input) = match decode_review(&d.body) {
            Ok(decoded) => decoded,
            Err(e) => {
                let Some(answer) = answer::malformed(&e) else {
                    return Err(WebhookError::Malformed(e));
                };
                tracing::warn!(endpoint = endpoint.as_str(), uid = ?e.uid, error = %e, "malformed AdmissionReview refused");
                self.metrics
                    .admission(endpoint, None, None, Outcome::Invalid);
                return json_ok(&answer).map(Step::Answered);
            }
        };
        match endpoint {
            Endpoint::Mutate => match runtime_to_record(&input) {
                Some(Ok(runtime)) => Ok(Step::Lookup(Pending::Runtime {
                    uid,
                    input: Box::new(input),
                    runtime,
                })),
                Some(Err(e)) => {
                    tracing::debug!(object = %input.object_ref(), error = %e, "no runtime to look up");
                    self.metrics.lookup(LookupResult::InvalidRef);
                    json_ok(&self.mutate_review(&uid, &input, None)).map(Step::Answered)
                }
                None => json_ok(&self.mutate_review(&uid, &input, None)).map(Step::Answered),
            },
            Endpoint::Validate => {
                let verdict = self.validate_without_lookups(&input);
                match verdict {
                    Verdict::Allow => match unsuspend_check(&input, &self.identities, self.mode) {
                        Some(check) => Ok(Step::Lookup(Pending::Unsuspend {
                            uid,
                            input: Box::new(input),
                            check,
                        })),
                        None => json_ok(&self.judged(&uid, &input, verdict)).map(Step::Answered),
                    },
                    _ => json_ok(&self.judged(&uid, &input, verdict)).map(Step::Answered),
                }
            }
        }
    }

    /// A review [`decide`](Self::decide) left waiting for a lookup, answered: outside the
    /// decision permits, in one of [`Limits::max_lookups`] slots, all within
    /// [`Limits::runtime_lookup_timeout`].
    async fn look_up(&self, pending: Pending) -> Result<Response, WebhookError> {
        let within = self.limits.runtime_lookup_timeout;
        match pending {
            Pending::Runtime {
                uid,
                input,
                runtime,
            } => {
                let looked = self
                    .in_a_slot(
                        self.runtimes
                            .resource_version(input.namespace.as_deref(), &runtime),
                    )
                    .await;
                let admitted = self.admitted_runtime_version(&input, &runtime, looked);
                json_ok(&self.mutate_review(&uid, &input, admitted.as_deref()))
            }
            Pending::Unsuspend { uid, input, check } => {
                let found = match &self.workload_holds {
                    _ if check.uid.is_empty() => Err(
                        "the stored TrainJob has no metadata.uid to find its Workloads by"
                            .to_owned(),
                    ),
                    None => Err("the webhook has no way to read Workloads".to_owned()),
                    Some(holds) => self
                        .in_a_slot(holds.hold_of(&check.namespace, &check.uid))
                        .await
                        .unwrap_or_else(|| Err(format!("no answer within {within:?}"))),
                };
                let verdict = unsuspend_verdict(&input, found);
                json_ok(&self.judged(&uid, &input, verdict))
            }
        }
    }

    /// One lookup, the one way every lookup is made: in one of [`Limits::max_lookups`] slots
    /// (first come, first served), the wait for the slot and the read together within
    /// [`Limits::runtime_lookup_timeout`]. `None`: no answer in time.
    async fn in_a_slot<T>(&self, lookup: impl std::future::Future<Output = T>) -> Option<T> {
        tokio::time::timeout(self.limits.runtime_lookup_timeout, async {
            let _slot = self.lookups.acquire().await;
            lookup.await
        })
        .await
        .ok()
    }

    /// The verdict of every rule that needs no lookup: the policy, and the queue and requests
    /// checks against the watched queues.
    fn validate_without_lookups(&self, input: &AdmissionInput) -> Verdict {
        let mut verdict = validate(input, &self.identities, self.mode);
        if verdict.is_allowed()
            && let Some(check) = queue_check(input, &self.identities, self.mode)
        {
            let gate = self
                .queues
                .as_ref()
                .map(|q| q.gate_for_queue(&check.namespace, &check.local_queue));
            let problem = match &gate {
                None => Some(QueueProblem::Unresolved(NO_QUEUES)),
                Some(gate) => queue_problem(gate),
            };
            verdict = queue_verdict(input, &check, problem);
        }
        if verdict.is_allowed()
            && let Some(check) = requests_check(input, self.mode)
        {
            let (gate, covered) = match &self.queues {
                Some(q) => q.gate_and_coverage_for_queue(&check.namespace, &check.local_queue),
                None => (
                    QueueGate::Unresolved {
                        why: NO_QUEUES.to_owned(),
                    },
                    Default::default(),
                ),
            };
            verdict = requests_verdict(input, &check, queue_problem(&gate), &covered);
        }
        verdict
    }

    /// The answer to `/validate`, logged and counted.
    fn judged(&self, uid: &str, input: &AdmissionInput, verdict: Verdict) -> AdmissionResponse {
        if let Verdict::Deny { field, message, .. } = &verdict {
            tracing::info!(
                uid,
                kind = input.resource.kind(),
                operation = %input.operation,
                object = %input.object_ref(),
                user = %input.user.username,
                dry_run = input.dry_run,
                field,
                message,
                "admission denied"
            );
        }
        self.metrics.admission(
            Endpoint::Validate,
            Some(&input.resource),
            Some(input.operation),
            Outcome::of(&verdict, false),
        );
        answer::judged(uid, &verdict)
    }

    fn mutate_review(
        &self,
        uid: &str,
        input: &AdmissionInput,
        admitted: Option<&str>,
    ) -> AdmissionResponse {
        let mutation: Mutation = mutate(input, &self.identities, self.mode, admitted);
        if !mutation.warnings.is_empty() {
            tracing::info!(
                uid,
                kind = input.resource.kind(),
                operation = %input.operation,
                object = %input.object_ref(),
                user = %input.user.username,
                warnings = ?mutation.warnings,
                "admission patched"
            );
        }
        self.metrics.admission(
            Endpoint::Mutate,
            Some(&input.resource),
            Some(input.operation),
            Outcome::of(&Verdict::Allow, !mutation.is_empty()),
        );
        answer::mutated(uid, mutation)
    }

    /// The resourceVersion of the runtime the TrainJob being created names, if it was read in
    /// time (`looked`: the lookup's answer, or its timeout).
    fn admitted_runtime_version(
        &self,
        input: &AdmissionInput,
        runtime: &RuntimeRef,
        looked: Option<Result<Option<String>, LookupError>>,
    ) -> Option<String> {
        match looked {
            Some(Ok(Some(rv))) => {
                self.metrics.lookup(LookupResult::Found);
                Some(rv)
            }
            Some(Ok(None)) => {
                tracing::info!(object = %input.object_ref(), %runtime, "runtime not found at admission; no admitted version recorded");
                self.metrics.lookup(LookupResult::Missing);
                None
            }
            Some(Err(e)) => {
                tracing::warn!(object = %input.object_ref(), %runtime, error = %e, "runtime not read at admission; no admitted version recorded");
                self.metrics.lookup(e.result());
                None
            }
            None => {
                tracing::warn!(object = %input.object_ref(), %runtime, timeout = ?self.limits.runtime_lookup_timeout, "runtime read timed out at admission; no admitted version recorded");
                self.metrics.lookup(LookupResult::Timeout);
                None
            }
        }
    }
}

async fn mutate_endpoint(State(a): State<Arc<Admission>>, req: Request) -> Response {
    a.admit(Endpoint::Mutate, req).await
}

async fn validate_endpoint(State(a): State<Arc<Admission>>, req: Request) -> Response {
    a.admit(Endpoint::Validate, req).await
}

const NO_QUEUES: &str = "the webhook does not watch Kueue's queues";

/// Why a queue does not prove holdfast's gate (`None`: it does), for the verdicts.
fn queue_problem(gate: &QueueGate) -> Option<QueueProblem<'_>> {
    match gate {
        QueueGate::Gated { .. } => None,
        QueueGate::Ungated { why, .. } => Some(QueueProblem::Ungated(why)),
        QueueGate::Unresolved { why } => Some(QueueProblem::Unresolved(why)),
    }
}

fn json_ok(answer: &AdmissionResponse) -> Result<Response, WebhookError> {
    let bytes = answer::to_json(answer).map_err(|e| WebhookError::Encode(e.to_string()))?;
    Ok((
        StatusCode::OK,
        [(
            header::CONTENT_TYPE,
            HeaderValue::from_static("application/json"),
        )],
        bytes,
    )
        .into_response())
}

/// Longest excerpt of a bad header quoted in an error.
const QUOTE_MAX: usize = 64;

fn check_content_type(headers: &HeaderMap) -> Result<(), WebhookError> {
    let Some(value) = headers.get(header::CONTENT_TYPE) else {
        return Err(WebhookError::UnsupportedMediaType("none".to_owned()));
    };
    let text = String::from_utf8_lossy(value.as_bytes());
    let essence = text.split(';').next().unwrap_or_default().trim();
    if essence.eq_ignore_ascii_case("application/json") {
        Ok(())
    } else {
        Err(WebhookError::UnsupportedMediaType(
            text.chars().take(QUOTE_MAX).collect(),
        ))
    }
}

async fn read_body(req: Request, limit: usize) -> Result<Bytes, WebhookError> {
    let declared = req
        .headers()
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|s| s.trim().parse::<u64>().ok());
    if declared.is_some_and(|n| n > limit as u64) {
        return Err(WebhookError::BodyTooLarge { limit });
    }
    let body: Body = req.into_body();
    match Limited::new(body, limit).collect().await {
        Ok(collected) => Ok(collected.to_bytes()),
        Err(e) if e.downcast_ref::<LengthLimitError>().is_some() => {
            Err(WebhookError::BodyTooLarge { limit })
        }
        Err(e) => Err(WebhookError::Body(e.to_string())),
    }
}

#[cfg(test)]
mod tests;
