//! The routes of the hold API.

use std::sync::Arc;

use axum::{
    Json, Router,
    body::Body,
    extract::{Path, Query, State},
    http::{HeaderMap, StatusCode, header},
    response::{IntoResponse, Response},
    routing::{get, post},
};
use holdfast_core::hold::{CallKind, CallMeta, CallRequest, ErrorBody, ErrorKind, HoldError};
use jiff::Timestamp;
use serde::Deserialize;

use super::auth::{Access, Caller, KubeAuth, Refusal, bearer_token, check_names};
use super::contract::{self, FenceAnswer, paths};
use crate::hold::{AskOverride, CallerIdentity, HoldExecutor, MetricCall};
use crate::snapshot::Snapshotter;

/// The subresource whose `create` lets a caller release, or replace with another instance, a
/// hold another identity placed (`holdfast.dev` `trainjobs/override`). The chart grants it to
/// nobody by default (`rbac.overriders`).
pub const OVERRIDE: &str = "override";

/// The largest request body accepted: a call's body is a few hundred bytes (a reason is at
/// most 1 KiB).
pub const MAX_BODY_BYTES: usize = 16 * 1024;

/// What the routes share.
#[derive(Clone)]
pub struct ApiState {
    pub executor: HoldExecutor,
    pub auth: KubeAuth,
    /// The snapshot reconciler, for `GET /v1/drift` (it answers on the replica that leads).
    pub snapshots: Option<Snapshotter>,
    /// Where `POST /v1/nodes/{node}/fence` records fences; `None`: fences are not taken.
    pub fences: Option<FenceStore>,
    /// The namespaces admission does not judge: a Hold there is `Unsupported`.
    pub unprotected: super::Unprotected,
}

/// The fences ConfigMap the execution finalizer's keeper reads
/// (`crate::execution::record_fence`), and the client that writes it.
#[derive(Clone)]
pub struct FenceStore {
    pub client: kube::Client,
    pub namespace: String,
    pub name: String,
}

/// The hold API's router.
pub fn router(state: ApiState) -> Router {
    let call = |kind: CallKind| {
        post(
            move |State(s): State<ApiState>,
                  Path((ns, name)): Path<(String, String)>,
                  headers: HeaderMap,
                  body: Body| async move {
                hold_call(s, kind, ns, name, headers, body).await
            },
        )
    };
    Router::new()
        .route(paths::HOLD, call(CallKind::Hold))
        .route(paths::RELEASE, call(CallKind::Release))
        .route(paths::OPEN, call(CallKind::Open))
        .route(paths::STATUS, get(status))
        .route(paths::FENCE, post(fence))
        .route(paths::PREFLIGHT, get(preflight))
        .route(paths::DRIFT, get(drift))
        .route(paths::OPENAPI, get(openapi))
        .layer(axum::middleware::from_fn(super::scope::layer))
        .with_state(state)
}

async fn hold_call(
    s: ApiState,
    kind: CallKind,
    ns: String,
    name: String,
    headers: HeaderMap,
    body: Body,
) -> Response {
    let access = Access {
        resource: super::auth::RESOURCE,
        verb: "create",
        subresource: kind.as_str(),
        namespace: Some(ns.clone()),
        name: Some(name.clone()),
    };
    let metric = MetricCall::from(kind);
    let caller = match admit(&s, &headers, &access).await {
        Ok(caller) => caller,
        Err(refusal) => return refused(&s, metric, refusal),
    };
    if let Some(e) = s.unprotected.refusal(kind, &ns) {
        s.executor.metrics().record_error(metric, &e);
        return hold_error(&e);
    }
    let body = match read_body(&s, body).await {
        Ok(b) => b,
        Err((status, e)) => {
            s.executor.metrics().record_error(metric, &e);
            return error_response(status, &e.body());
        }
    };
    let meta = CallRequest::from_json(&body)
        .and_then(|req| CallMeta::validate(kind, req, Timestamp::now()));
    let meta = match meta {
        Ok(m) => m,
        Err(e) => {
            s.executor.metrics().record_error(metric, &e);
            return hold_error(&e);
        }
    };
    let caller = holder_identity(&s, caller, &ns, &name);
    match s.executor.call_as(kind, &ns, &name, meta, &caller).await {
        Ok(outcome) => (StatusCode::OK, Json(outcome.body())).into_response(),
        Err(e) => hold_error(&e),
    }
}

/// The caller as the executor knows it: its username, the holder a Hold records, and — asked
/// only when a call would otherwise be refused `NotHolder` — whether it may override another
/// holder's hold: `create` on `holdfast.dev` `trainjobs/override` of the TrainJob (a
/// SubjectAccessReview, remembered like the others).
fn holder_identity(s: &ApiState, caller: Caller, ns: &str, name: &str) -> CallerIdentity {
    let username = caller.username.clone();
    let auth = s.auth.clone();
    let access = Access {
        resource: super::auth::RESOURCE,
        verb: "create",
        subresource: OVERRIDE,
        namespace: Some(ns.to_owned()),
        name: Some(name.to_owned()),
    };
    let ask: AskOverride = Arc::new(move || {
        let (auth, caller, access) = (auth.clone(), caller.clone(), access.clone());
        Box::pin(async move {
            auth.authorize(&caller, &access)
                .await
                .map_err(|refusal| refusal.to_string())
        })
    });
    CallerIdentity::asking(username, ask)
}

async fn status(
    State(s): State<ApiState>,
    Path((ns, name)): Path<(String, String)>,
    headers: HeaderMap,
) -> Response {
    let access = Access {
        resource: super::auth::RESOURCE,
        verb: "get",
        subresource: "status",
        namespace: Some(ns.clone()),
        name: Some(name.clone()),
    };
    if let Err(refusal) = admit(&s, &headers, &access).await {
        return refused(&s, MetricCall::status, refusal);
    }
    match s.executor.status(&ns, &name).await {
        Ok(status) => (StatusCode::OK, Json(status.body())).into_response(),
        Err(e) => hold_error(&e),
    }
}

/// `POST /v1/nodes/{node}/fence`: the caller attests that every process on `node` has ended
/// (the machine is powered off or has rebooted). Recorded with the moment it was received;
/// the leader then releases the execution finalizer of the node's pods being deleted that
/// were created before it. Allowed to `create` `holdfast.dev` `nodes/fence` (of the node).
async fn fence(
    State(s): State<ApiState>,
    Path(node): Path<String>,
    headers: HeaderMap,
    body: Body,
) -> Response {
    let access = Access {
        verb: "create",
        resource: "nodes",
        subresource: "fence",
        namespace: None,
        name: Some(node.clone()),
    };
    if let Err(refusal) = admit(&s, &headers, &access).await {
        return refused(&s, MetricCall::fence, refusal);
    }
    // The body is `{}` (room for more later); anything else is refused.
    let body = match read_body(&s, body).await {
        Ok(b) => b,
        Err((status, e)) => return error_response(status, &e.body()),
    };
    let empty = body.iter().all(u8::is_ascii_whitespace)
        || serde_json::from_slice::<serde_json::Map<String, serde_json::Value>>(&body)
            .is_ok_and(|m| m.is_empty());
    if !empty {
        let e = HoldError::invalid("a fence's body is an empty JSON object, {}");
        s.executor.metrics().record_error(MetricCall::fence, &e);
        return hold_error(&e);
    }
    let Some(store) = &s.fences else {
        let e = HoldError::unsupported("this hold API records no fences");
        return hold_error(&e);
    };
    let at = Timestamp::now();
    match crate::execution::record_fence(&store.client, &store.namespace, &store.name, &node, at)
        .await
    {
        Ok(at) => {
            // The same text as the fences ConfigMap records (jiff's own display trims a
            // fraction's trailing zeros, which that record keeps in groups of three).
            let fenced_at = holdfast_core::rfc3339::auto(at);
            tracing::info!(node, fenced_at, "node fenced");
            let answer = FenceAnswer {
                result: holdfast_core::hold::Success::Ok,
                node,
                fenced_at,
            };
            (StatusCode::OK, Json(answer)).into_response()
        }
        Err(e) => {
            tracing::warn!(node, error = %e, "recording a fence failed");
            let e = HoldError::Unknown {
                message: format!("recording the fence of node {node}: {e}"),
            };
            hold_error(&e)
        }
    }
}

/// `?namespace=NS&name=NAME`: the TrainJob to dry-run a hold on.
#[derive(Debug, Deserialize)]
struct PreflightTarget {
    namespace: Option<String>,
    name: Option<String>,
}

async fn preflight(
    State(s): State<ApiState>,
    Query(target): Query<PreflightTarget>,
    headers: HeaderMap,
) -> Response {
    let access = Access {
        resource: super::auth::RESOURCE,
        verb: "get",
        subresource: "preflight",
        namespace: target.namespace.clone(),
        name: target.name.clone(),
    };
    if let Err(refusal) = admit(&s, &headers, &access).await {
        return refused(&s, MetricCall::preflight, refusal);
    }
    let target = match (&target.namespace, &target.name) {
        (Some(ns), Some(name)) => Some((ns.as_str(), name.as_str())),
        (None, None) => None,
        _ => {
            return hold_error(&HoldError::invalid(
                "preflight: give both namespace and name, or neither",
            ));
        }
    };
    let mut report = s.executor.preflight(target).await;
    if let Some((ns, _)) = target {
        s.unprotected.mark(&mut report, ns);
    }
    (StatusCode::OK, Json(report.body())).into_response()
}

/// `?namespace=NS`: drift of one namespace's TrainJobs (authorised there), else of all
/// (authorised cluster-wide).
#[derive(Debug, Deserialize)]
struct DriftScope {
    namespace: Option<String>,
}

/// `GET /v1/drift[?namespace=NS]`: the TrainJobs whose snapshot no longer equals their live
/// runtime. It names namespaces and jobs, so it is authorised like the calls: `get` on
/// `holdfast.dev` `trainjobs/drift`, in the namespace asked about or cluster-wide. A replica
/// that is not running the reconciler (a standby) answers 503 with `Retry-After`.
async fn drift(
    State(s): State<ApiState>,
    Query(scope): Query<DriftScope>,
    headers: HeaderMap,
) -> Response {
    let access = Access {
        resource: super::auth::RESOURCE,
        verb: "get",
        subresource: "drift",
        namespace: scope.namespace.clone(),
        name: None,
    };
    if let Err(refusal) = admit(&s, &headers, &access).await {
        return refused(&s, MetricCall::status, refusal);
    }
    let report = match &s.snapshots {
        Some(snapshots) => snapshots
            .drift(scope.namespace.as_deref())
            .await
            .map_err(|e| e.to_string()),
        None => Err("this process runs no snapshot reconciler".to_owned()),
    };
    match report {
        Ok(report) => (StatusCode::OK, Json(report)).into_response(),
        Err(message) => {
            let mut response = error_response(
                StatusCode::SERVICE_UNAVAILABLE,
                &ErrorBody {
                    error: ErrorKind::Unavailable.as_str().to_owned(),
                    cause: None,
                    message: format!(
                        "{message}: drift is computed by the replica holding the Lease, one computation at a time; ask again"
                    ),
                },
            );
            response
                .headers_mut()
                .insert(header::RETRY_AFTER, header::HeaderValue::from_static("1"));
            response
        }
    }
}

/// `GET /v1/openapi.json`: the contract this controller was built with. It says nothing the
/// repository does not, so any authenticated caller may read it (no SubjectAccessReview);
/// an unauthenticated one is refused like every other request, and its connection closed.
/// An authenticated caller is not admitted either: the connection stays provisional (so it
/// may be evicted to make room) and is closed once the document is sent, so callers with
/// tokens but no grant cannot keep the hold API's connections from the holder by asking for
/// it again and again.
async fn openapi(State(s): State<ApiState>, headers: HeaderMap) -> Response {
    if let Err(refusal) = authenticated(&s, &headers).await {
        return refused(&s, MetricCall::preflight, refusal);
    }
    super::scope::close_after_answer();
    closing(
        (
            StatusCode::OK,
            [(header::CONTENT_TYPE, "application/json")],
            contract::served(),
        )
            .into_response(),
    )
}

/// TokenReview only: the caller is neither admitted on the connection nor counted in its
/// user's budget.
async fn authenticated(s: &ApiState, headers: &HeaderMap) -> Result<Caller, Refusal> {
    let header = headers
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok());
    let token = bearer_token(header)?;
    let caller = s
        .auth
        .authenticate_from(token, super::scope::source())
        .await?;
    Ok(caller)
}

/// Names checked, then TokenReview, then SubjectAccessReview.
async fn admit(s: &ApiState, headers: &HeaderMap, access: &Access) -> Result<Caller, Refusal> {
    check_names(access)?;
    let caller = authenticated(s, headers).await?;
    s.auth.authorize(&caller, access).await?;
    super::scope::allowed(s.auth.budget(), &caller.username).map_err(Refusal::Shed)?;
    Ok(caller)
}

/// The request body, read within the body deadline ([`super::limits::ApiLimits`]) and at
/// most [`MAX_BODY_BYTES`]; a slow one is answered 408 and its connection closed.
async fn read_body(s: &ApiState, body: Body) -> Result<axum::body::Bytes, (StatusCode, HoldError)> {
    let deadline = s.auth.budget().limits().body_read_timeout;
    match tokio::time::timeout(deadline, axum::body::to_bytes(body, MAX_BODY_BYTES)).await {
        Ok(Ok(b)) => Ok(b),
        Ok(Err(_)) => Err((
            StatusCode::PAYLOAD_TOO_LARGE,
            HoldError::invalid(format!(
                "the request body is larger than {MAX_BODY_BYTES} bytes"
            )),
        )),
        Err(_) => {
            super::scope::refused();
            Err((
                // The handlers answer it with `closing`, like a refusal.
                StatusCode::REQUEST_TIMEOUT,
                HoldError::invalid(format!(
                    "the request body did not arrive within {deadline:?}"
                )),
            ))
        }
    }
}

fn refused(s: &ApiState, metric: MetricCall, refusal: Refusal) -> Response {
    s.executor
        .metrics()
        .record_refusal(metric, refusal.metric_label());
    tracing::info!(status = refusal.status(), reason = %refusal, "hold API call refused");
    let body = ErrorBody {
        error: refusal.kind().to_owned(),
        cause: None,
        message: refusal.to_string(),
    };
    let status = StatusCode::from_u16(refusal.status()).unwrap_or(StatusCode::FORBIDDEN);
    let mut response = closing(error_response(status, &body));
    // No keep-alive for a refused caller: its connection is closed after this answer.
    super::scope::refused();
    if let Some(secs) = refusal.retry_after() {
        response
            .headers_mut()
            .insert(header::RETRY_AFTER, header::HeaderValue::from(secs));
    }
    if matches!(refusal, Refusal::Unauthenticated(_)) {
        response.headers_mut().insert(
            header::WWW_AUTHENTICATE,
            header::HeaderValue::from_static("Bearer"),
        );
    }
    response
}

fn hold_error(e: &HoldError) -> Response {
    let status = StatusCode::from_u16(e.http_status()).unwrap_or(StatusCode::BAD_REQUEST);
    error_response(status, &e.body())
}

fn error_response(status: StatusCode, body: &ErrorBody) -> Response {
    let response = (status, Json(body)).into_response();
    if status == StatusCode::REQUEST_TIMEOUT {
        return closing(response);
    }
    response
}

/// An answer after which the server closes the connection says so (`Connection: close`), so
/// that an HTTP/1.1 client does not put the connection back in its pool and send its next
/// request on a socket being closed (HTTP/2 says it with GOAWAY; hyper drops the header there).
fn closing(mut response: Response) -> Response {
    response.headers_mut().insert(
        header::CONNECTION,
        header::HeaderValue::from_static("close"),
    );
    response
}
