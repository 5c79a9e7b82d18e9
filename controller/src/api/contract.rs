//! The hold API's contract: its OpenAPI document, derived from the routes' paths
//! ([`paths`], which the router uses too) and from the request and answer types themselves,
//! so that it cannot drift from what is served. Committed as `api/openapi.json` (a test
//! regenerates it and fails on any difference) and served at [`paths::OPENAPI`].

use utoipa::openapi::security::{HttpAuthScheme, HttpBuilder, SecurityScheme};
use utoipa::openapi::{Content, Ref, ResponseBuilder};
use utoipa::{Modify, OpenApi};

use holdfast_core::hold::{CallAnswer, CallRequest, ErrorBody, StatusAnswer};

use crate::hold::preflight::PreflightAnswer;
use crate::snapshot::DriftReport;

/// The routes, as the router mounts them and the document names them.
pub mod paths {
    pub const HOLD: &str = "/v1/namespaces/{ns}/trainjobs/{name}/hold";
    pub const RELEASE: &str = "/v1/namespaces/{ns}/trainjobs/{name}/release";
    pub const OPEN: &str = "/v1/namespaces/{ns}/trainjobs/{name}/open";
    pub const STATUS: &str = "/v1/namespaces/{ns}/trainjobs/{name}/status";
    pub const FENCE: &str = "/v1/nodes/{node}/fence";
    pub const PREFLIGHT: &str = "/v1/preflight";
    pub const DRIFT: &str = "/v1/drift";
    pub const OPENAPI: &str = "/v1/openapi.json";

    /// Every route the router serves.
    pub const ALL: [&str; 8] = [
        HOLD, RELEASE, OPEN, STATUS, FENCE, PREFLIGHT, DRIFT, OPENAPI,
    ];
}

/// The name of the security scheme every route requires.
const BEARER: &str = "kubernetesToken";

/// The document's own version: its `v1` rules are the book's (supervisor/hold-api.md,
/// "The contract"). Raised when the document changes in a way those rules allow.
pub const CONTRACT_VERSION: &str = "1.1.0";

/// The OpenAPI document, as committed and served.
#[derive(OpenApi)]
#[openapi(
    info(
        title = "holdfast hold API",
        version = CONTRACT_VERSION,
        description = "Hold, release and open a TrainJob's executions; read its status, the cluster's preflight and the runtime drift; fence a lost node. Served over HTTPS by the controller's Service `<fullname>-controller` (port 8443); the CA that verifies its certificate is published in the ConfigMap `<fullname>-hold-api-ca` (key `ca.crt`) in holdfast's namespace, readable by every authenticated user. Within `v1`, fields may be added to answers and values to open enums (`state.kind`, `state.waitingFor`, `underlying.kind`, `cause`, `probe`, `nodeState`, `why`): ignore an unknown field, and treat an unknown value as not understood (read Status again, do not act on it). The values of `error` and `outcome` are closed within `v1`.",
        license(name = "Apache-2.0", identifier = "Apache-2.0"),
    ),
    paths(hold, release, open, status, fence, preflight, drift, openapi),
    components(schemas(ErrorBody)),
    modifiers(&Refusals),
    security(("kubernetesToken" = [])),
)]
pub struct Contract;

/// The document as committed (`api/openapi.json`): pretty JSON, keys in a fixed order, a
/// final newline.
pub fn document() -> String {
    let value = serde_json::to_value(Contract::openapi()).unwrap_or_default();
    let mut text = serde_json::to_string_pretty(&sorted(value)).unwrap_or_default();
    text.push('\n');
    text
}

/// The document as served: generated once per process.
pub fn served() -> &'static str {
    static DOCUMENT: std::sync::OnceLock<String> = std::sync::OnceLock::new();
    DOCUMENT.get_or_init(document)
}

/// `value` with every object's keys in byte order, whatever serde_json's map keeps.
fn sorted(value: serde_json::Value) -> serde_json::Value {
    use serde_json::Value;
    match value {
        Value::Object(map) => {
            let mut entries: Vec<(String, Value)> = map.into_iter().collect();
            entries.sort_by(|a, b| a.0.cmp(&b.0));
            Value::Object(entries.into_iter().map(|(k, v)| (k, sorted(v))).collect())
        }
        Value::Array(items) => Value::Array(items.into_iter().map(sorted).collect()),
        Value::String(text) => Value::String(unlinked(&text)),
        other => other,
    }
}

/// `text` without rustdoc's intra-doc link brackets: "[`Status`]" reads "`Status`" (a
/// Markdown link, "[`x`](url)", is kept).
fn unlinked(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(start) = rest.find("[`") {
        let after = &rest[start + 1..];
        match after.find("`]") {
            Some(end) if !after[end + 2..].starts_with('(') => {
                out.push_str(&rest[..start]);
                out.push_str(&after[..end + 1]);
                rest = &after[end + 2..];
            }
            _ => {
                out.push_str(&rest[..start + 2]);
                rest = &rest[start + 2..];
            }
        }
    }
    out.push_str(rest);
    out
}

/// Adds the bearer-token scheme, and to every operation the refusals any route may answer
/// before its call is made.
struct Refusals;

impl Modify for Refusals {
    fn modify(&self, openapi: &mut utoipa::openapi::OpenApi) {
        let components = openapi.components.get_or_insert_with(Default::default);
        components.add_security_scheme(
            BEARER,
            SecurityScheme::Http(
                HttpBuilder::new()
                    .scheme(HttpAuthScheme::Bearer)
                    .description(Some(
                        "A Kubernetes bearer token, reviewed by the apiserver (TokenReview). With the chart value `controller.tokenAudiences` set (e.g. `[holdfast]`), only a token issued for one of those audiences is accepted: send a projected ServiceAccount token with that audience.",
                    ))
                    .build(),
            ),
        );
        let refusals = [
            (
                "401",
                "Unauthenticated: no bearer token, or one the TokenReview refused (or not issued for `controller.tokenAudiences`). The connection is closed after the answer.",
            ),
            (
                "403",
                "Forbidden: the SubjectAccessReview refused the call (or, for a hold-family call, `Rejected`/`NotHolder`). A refusal closes the connection after the answer.",
            ),
            (
                "429",
                "TooManyRequests: a per-user or per-address bound was reached; retry after `Retry-After` seconds. The connection is closed after the answer.",
            ),
        ];
        for item in openapi.paths.paths.values_mut() {
            for op in [&mut item.get, &mut item.post].into_iter().flatten() {
                for (status, description) in refusals {
                    op.responses
                        .responses
                        .entry(status.to_owned())
                        .or_insert_with(|| error_response(description).into());
                }
            }
        }
    }
}

fn error_response(description: &str) -> utoipa::openapi::Response {
    ResponseBuilder::new()
        .description(description)
        .content(
            "application/json",
            Content::new(Some(Ref::from_schema_name("ErrorBody"))),
        )
        .build()
}

/// `POST .../hold`.
#[utoipa::path(
    post,
    path = paths::HOLD,
    operation_id = "hold",
    tag = "calls",
    description = "Place hold `instance` on the TrainJob (the seed's Hold): the held object (the TrainJob in plain mode, its Workload in Kueue mode) is stopped and carries the instance. Allowed to `create` `holdfast.dev` `trainjobs/hold`. A call's deadline is required; one more than 10 minutes ahead is taken as 10 minutes.",
    params(Target),
    request_body(content = CallRequest, description = "`instance` and `deadline` required; `reason` optional (at most 1 KiB, printable). Unknown fields are refused."),
    responses(
        (status = 200, description = "`Held` or `AlreadyInForce`.", body = CallAnswer),
        (status = 400, description = "Invalid: no deadline, no instance, a bad body or name.", body = ErrorBody),
        (status = 404, description = "Rejected/NotFound: no such TrainJob.", body = ErrorBody),
        (status = 408, description = "Invalid: the body did not arrive in time; the connection is closed.", body = ErrorBody),
        (status = 409, description = "Rejected: StaleHold, DeadlinePassed or NoWorkload. Final: make a new call.", body = ErrorBody),
        (status = 413, description = "Invalid: the body is larger than 16 KiB.", body = ErrorBody),
        (status = 501, description = "Unsupported: the cluster does not allow the call (see preflight).", body = ErrorBody),
        (status = 503, description = "Conflict (eight writes lost to other writers; retry with a new deadline) or Unavailable (review capacity; retry after `Retry-After`).", body = ErrorBody),
        (status = 504, description = "Unknown: a write was sent and its outcome is not known; read Status after the CallBound.", body = ErrorBody),
    ),
)]
#[allow(dead_code)]
fn hold() {}

/// `POST .../release`.
#[utoipa::path(
    post,
    path = paths::RELEASE,
    operation_id = "release",
    tag = "calls",
    description = "Lift hold `instance` if it is the one in force (the seed's Release). Allowed to `create` `holdfast.dev` `trainjobs/release`; only the hold's holder (or an overrider) may lift it.",
    params(Target),
    request_body(content = CallRequest, description = "`instance` and `deadline` required; `reason` optional."),
    responses(
        (status = 200, description = "`Released`.", body = CallAnswer),
        (status = 400, description = "Invalid.", body = ErrorBody),
        (status = 404, description = "Rejected/NotFound.", body = ErrorBody),
        (status = 408, description = "Invalid: the body did not arrive in time.", body = ErrorBody),
        (status = 409, description = "Rejected: StaleHold, DeadlinePassed or NoWorkload.", body = ErrorBody),
        (status = 413, description = "Invalid: the body is too large.", body = ErrorBody),
        (status = 423, description = "PodsRemain: plain mode, pods of the held execution remain; nothing written. Retry later with a new deadline (Status lists `remainingPods`).", body = ErrorBody),
        (status = 501, description = "Unsupported.", body = ErrorBody),
        (status = 503, description = "Conflict or Unavailable.", body = ErrorBody),
        (status = 504, description = "Unknown: read Status after the CallBound.", body = ErrorBody),
    ),
)]
#[allow(dead_code)]
fn release() {}

/// `POST .../open`.
#[utoipa::path(
    post,
    path = paths::OPEN,
    operation_id = "open",
    tag = "calls",
    description = "Open the TrainJob's start gate (the seed's Open). Allowed to `create` `holdfast.dev` `trainjobs/open`. In Kueue mode the TrainJob needs its Workload first (else `Rejected`/`NoWorkload`): Status's `workload` says whether it has one.",
    params(Target),
    request_body(content = CallRequest, description = "`deadline` required; no `instance`; `reason` optional."),
    responses(
        (status = 200, description = "`Opened` or `AlreadyOpen`.", body = CallAnswer),
        (status = 400, description = "Invalid.", body = ErrorBody),
        (status = 404, description = "Rejected/NotFound.", body = ErrorBody),
        (status = 408, description = "Invalid: the body did not arrive in time.", body = ErrorBody),
        (status = 409, description = "Rejected: DeadlinePassed or NoWorkload.", body = ErrorBody),
        (status = 413, description = "Invalid: the body is too large.", body = ErrorBody),
        (status = 423, description = "PodsRemain: plain mode, pods of an earlier execution remain.", body = ErrorBody),
        (status = 501, description = "Unsupported.", body = ErrorBody),
        (status = 503, description = "Conflict or Unavailable.", body = ErrorBody),
        (status = 504, description = "Unknown: read Status after the CallBound.", body = ErrorBody),
    ),
)]
#[allow(dead_code)]
fn open() {}

/// `GET .../status`.
#[utoipa::path(
    get,
    path = paths::STATUS,
    operation_id = "status",
    tag = "calls",
    description = "The hold in force, the opened mark, A, the state classified and the held execution's remaining pods. Allowed to `get` `holdfast.dev` `trainjobs/status`.",
    params(Target),
    responses(
        (status = 200, description = "The status.", body = StatusAnswer),
        (status = 400, description = "Invalid: a bad name, or an unreadable A.", body = ErrorBody),
        (status = 404, description = "Rejected/NotFound.", body = ErrorBody),
        (status = 503, description = "Unavailable: review capacity; retry after `Retry-After`.", body = ErrorBody),
        (status = 504, description = "Unknown: the apiserver did not answer in time.", body = ErrorBody),
    ),
)]
#[allow(dead_code)]
fn status() {}

/// `POST /v1/nodes/{node}/fence`.
#[utoipa::path(
    post,
    path = paths::FENCE,
    operation_id = "fence",
    tag = "nodes",
    description = "Attest that every process on the node has ended (powered off or rebooted). Allowed to `create` `holdfast.dev` `nodes/fence` (of the node). The body is `{}`.",
    params(("node" = String, Path, description = "The Node's name.")),
    request_body(content = Object, description = "An empty JSON object, `{}`."),
    responses(
        (status = 200, description = "The fence, and when it was recorded.", body = FenceAnswer),
        (status = 400, description = "Invalid: a body that is not `{}`, or a bad name.", body = ErrorBody),
        (status = 408, description = "Invalid: the body did not arrive in time.", body = ErrorBody),
        (status = 413, description = "Invalid: the body is too large.", body = ErrorBody),
        (status = 501, description = "Unsupported: this hold API records no fences.", body = ErrorBody),
        (status = 503, description = "Unavailable: review capacity.", body = ErrorBody),
        (status = 504, description = "Unknown: recording the fence failed.", body = ErrorBody),
    ),
)]
#[allow(dead_code)]
fn fence() {}

/// `GET /v1/preflight`.
#[utoipa::path(
    get,
    path = paths::PREFLIGHT,
    operation_id = "preflight",
    tag = "calls",
    description = "What the cluster supports, and the CallBound. Allowed to `get` `holdfast.dev` `trainjobs/preflight` (in the namespace given, else cluster-wide). With `namespace` and `name`, also a server-side dry-run hold round trip on that TrainJob.",
    params(
        ("namespace" = Option<String>, Query, description = "The TrainJob's namespace (with `name`)."),
        ("name" = Option<String>, Query, description = "The TrainJob's name (with `namespace`)."),
    ),
    responses(
        (status = 200, description = "The report.", body = PreflightAnswer),
        (status = 400, description = "Invalid: only one of namespace and name, or a bad name.", body = ErrorBody),
        (status = 503, description = "Unavailable: review capacity.", body = ErrorBody),
    ),
)]
#[allow(dead_code)]
fn preflight() {}

/// `GET /v1/drift`.
#[utoipa::path(
    get,
    path = paths::DRIFT,
    operation_id = "drift",
    tag = "snapshots",
    description = "The TrainJobs whose runtime snapshot no longer equals their live runtime. Allowed to `get` `holdfast.dev` `trainjobs/drift` (in the namespace given, else cluster-wide). Answered by the replica holding the Lease; another answers 503 with `Retry-After`.",
    params(("namespace" = Option<String>, Query, description = "Only this namespace's TrainJobs.")),
    responses(
        (status = 200, description = "The drifted TrainJobs.", body = DriftReport),
        (status = 400, description = "Invalid: a bad name.", body = ErrorBody),
        (status = 503, description = "Unavailable: not the leading replica, or review capacity; retry after `Retry-After`.", body = ErrorBody),
    ),
)]
#[allow(dead_code)]
fn drift() {}

/// `GET /v1/openapi.json`.
#[utoipa::path(
    get,
    path = paths::OPENAPI,
    operation_id = "openapi",
    tag = "contract",
    description = "This document, as the serving controller was built with it. Any authenticated caller may read it (TokenReview, no SubjectAccessReview).",
    responses(
        (status = 200, description = "The OpenAPI document.", content_type = "application/json", body = Object),
        (status = 503, description = "Unavailable: review capacity.", body = ErrorBody),
    ),
)]
#[allow(dead_code)]
fn openapi() {}

/// The path parameters naming a TrainJob.
#[derive(utoipa::IntoParams)]
#[into_params(parameter_in = Path)]
#[allow(dead_code)]
struct Target {
    /// The TrainJob's namespace (a DNS-1123 label).
    ns: String,
    /// The TrainJob's name (a DNS-1123 subdomain).
    name: String,
}

/// A recorded fence: `{"result":"Ok","node":"gpu-7","fencedAt":"2026-12-01T10:00:00Z"}`.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct FenceAnswer {
    pub result: holdfast_core::hold::Success,
    pub node: String,
    /// When the fence was recorded (RFC 3339): the node's pods being deleted that were
    /// created before it are let go.
    pub fenced_at: String,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_document_names_every_route_and_only_those() {
        let doc = Contract::openapi();
        let mut documented: Vec<&str> = doc.paths.paths.keys().map(String::as_str).collect();
        documented.sort_unstable();
        let mut served = paths::ALL.to_vec();
        served.sort_unstable();
        assert_eq!(documented, served);
    }

    /// `api/openapi.json` is what the types and routes generate. After a change to them,
    /// rewrite it with `HOLDFAST_BLESS=1 cargo test --workspace --lib committed_openapi`
    /// and commit it (the book's "The contract" says what `v1` allows to change).
    #[test]
    fn committed_openapi_document_is_generated() {
        let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../api/openapi.json");
        let generated = document();
        if std::env::var_os("HOLDFAST_BLESS").is_some_and(|v| v == "1") {
            std::fs::create_dir_all(path.parent().expect("a parent")).expect("mkdir api/");
            std::fs::write(&path, &generated).expect("write api/openapi.json");
            return;
        }
        let committed = std::fs::read_to_string(&path).unwrap_or_default();
        if committed != generated {
            let first = committed
                .lines()
                .zip(generated.lines())
                .position(|(a, b)| a != b)
                .unwrap_or(committed.lines().count().min(generated.lines().count()));
            panic!(
                "api/openapi.json differs from what the types and routes generate, first at line {}:\n  committed: {}\n  generated: {}\nRewrite it with `HOLDFAST_BLESS=1 cargo test --workspace --lib committed_openapi` and commit it; check the change against the v1 rules (book: supervisor/hold-api.md, \"The contract\").",
                first + 1,
                committed.lines().nth(first).unwrap_or("<end of file>"),
                generated.lines().nth(first).unwrap_or("<end of file>"),
            );
        }
    }

    #[test]
    fn rustdoc_links_read_as_code_and_markdown_links_stay() {
        assert_eq!(
            unlinked("the [`Status`] with [`x`](u) and [`HoldError::Rejected`]."),
            "the `Status` with [`x`](u) and `HoldError::Rejected`."
        );
        assert_eq!(unlinked("a [`b"), "a [`b");
    }

    #[test]
    fn the_document_is_deterministic() {
        assert_eq!(document(), document());
    }
}
