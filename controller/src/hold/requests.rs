//! One call's requests to the apiserver, each bound by the call's deadline.
//!
//! A call's requests act as though its deadline were `margin` earlier (the transit margin):
//! before every request the time left to that point is checked, and if there is none,
//! nothing is sent and the call is `Rejected { cause: DeadlinePassed }`. The time left is
//! then the request's timeout twice over: the client abandons the request when it runs out
//! (`tokio::time::timeout`; a request not yet written is then never written), and the
//! apiserver is told it as `?timeout=`, so that it stops working on the request at the same
//! moment. Nothing is sent after the deadline. The margin makes room for what happens between
//! the check and the apiserver reading the request (a connection to open, a busy runtime or
//! apiserver), so that requests usually reach the apiserver before the deadline too; it is not
//! a bound (under CPU load one GET was read 22 ms late), and what covers a request already on
//! the wire is the CallBound. Each request names its call in its User-Agent, deadline
//! included, so the apiserver's audit log ties every request to the call that sent it and
//! shows when it arrived.

use std::{
    sync::atomic::{AtomicU64, Ordering},
    time::Duration,
};

use holdfast_core::{
    hold::{CallMeta, HoldError, WriteAnswer},
    rfc3339,
};
use http::{HeaderValue, Uri, header::USER_AGENT};
use jiff::Timestamp;
use kube::core::{
    ApiResource, DynamicObject, Resource,
    params::{GetParams, ListParams, PostParams},
    request::Request as KubeRequest,
};
use serde_json::Value;

/// The field manager of holdfast's writes.
pub const FIELD_MANAGER: &str = "holdfast-controller";

/// How a request that never reached the apiserver is described (a probe's detail starts
/// with it, which is how preflight tells an outage from a refusal).
pub const UNREACHABLE: &str = "the apiserver could not be reached";

/// Why a request failed.
#[derive(Debug, thiserror::Error)]
pub enum RequestError {
    /// The deadline left too little time to send it: nothing was sent.
    #[error(transparent)]
    Deadline(HoldError),
    /// Sent, but the deadline passed before the answer: it may still land, within CallBound.
    #[error(
        "no answer before the call's deadline; the request may still land within the CallBound"
    )]
    TimedOut,
    /// The apiserver answered with an error status.
    #[error("the apiserver answered {code} {reason}: {message}")]
    Api {
        code: u16,
        reason: String,
        message: String,
    },
    /// The apiserver could not be reached, or the connection broke.
    #[error("{UNREACHABLE}: {0}")]
    Transport(String),
    /// The request could not be built (a bug, or a name that cannot go in a path).
    #[error("building the request: {0}")]
    Build(String),
    /// The answer was not what the apiserver sends.
    #[error("reading the apiserver's answer: {0}")]
    Decode(String),
}

impl RequestError {
    /// The HTTP status the apiserver answered with, if it answered.
    pub fn code(&self) -> Option<u16> {
        match self {
            RequestError::Api { code, .. } => Some(*code),
            _ => None,
        }
    }

    /// A 409: the write's precondition failed (or the object changed under it).
    pub fn is_conflict(&self) -> bool {
        self.code() == Some(409)
    }

    /// How a write failing with this error was answered, for `holdfast_core::hold::after_write`.
    pub fn write_answer(&self) -> WriteAnswer {
        match self {
            e if e.is_conflict() => WriteAnswer::Conflict,
            e if e.code() == Some(404) => WriteAnswer::Gone,
            e if e.is_transient() => WriteAnswer::Lost,
            RequestError::TimedOut => WriteAnswer::PastDeadline,
            _ => WriteAnswer::Refused,
        }
    }

    /// The request may succeed if made again: the apiserver was unreachable, overloaded or
    /// timed out on its side. For a write, its outcome is unknown.
    pub fn is_transient(&self) -> bool {
        match self {
            RequestError::Transport(_) => true,
            RequestError::Api { code, .. } => matches!(code, 429 | 500 | 502 | 503 | 504),
            _ => false,
        }
    }

    /// The error a call ends in when this request failed and reading again is not the
    /// answer. `what` says what the request was for.
    pub fn into_hold_error(self, what: &str) -> HoldError {
        match self {
            RequestError::Deadline(e) => e,
            RequestError::TimedOut => HoldError::deadline_passed(format!("{what}: {self}")),
            RequestError::Api { code: 404, .. } => {
                HoldError::not_found(format!("{what}: not found ({self})"))
            }
            RequestError::Api {
                code: 401 | 403, ..
            } => {
                HoldError::unsupported(format!("{what}: the controller is not allowed to ({self})"))
            }
            RequestError::Api {
                code: 400 | 422, ..
            }
            | RequestError::Build(_)
            | RequestError::Decode(_) => HoldError::invalid(format!("{what}: {self}")),
            // Transient failures are retried until the deadline; one that reaches here (the
            // retry budget ran out) is reported as what ended the call.
            RequestError::Api { .. } | RequestError::Transport(_) => {
                HoldError::deadline_passed(format!("{what}: gave up: {self}"))
            }
        }
    }
}

impl From<kube::Error> for RequestError {
    fn from(e: kube::Error) -> Self {
        match e {
            kube::Error::Api(s) => RequestError::Api {
                code: s.code,
                reason: s.reason.clone(),
                message: s.message.clone(),
            },
            kube::Error::SerdeError(e) => RequestError::Decode(e.to_string()),
            kube::Error::FromUtf8(e) => RequestError::Decode(e.to_string()),
            kube::Error::BuildRequest(e) => RequestError::Build(e.to_string()),
            kube::Error::HttpError(e) => RequestError::Build(e.to_string()),
            other => RequestError::Transport(other.to_string()),
        }
    }
}

static NEXT_CALL_ID: AtomicU64 = AtomicU64::new(1);

/// The requests of one call: all bound by its deadline, all named by its User-Agent.
pub struct CallRequests<'a> {
    client: &'a kube::Client,
    meta: CallMeta,
    margin: Duration,
    user_agent: HeaderValue,
    id: u64,
    sent: u32,
}

impl<'a> CallRequests<'a> {
    /// The requests of a call `label` (e.g. `hold`) bound by `meta.deadline`. `agent` is the
    /// product part of the User-Agent (`holdfast-controller/0.1.0`); `margin` is the transit
    /// margin: requests act as though the deadline were that much earlier.
    pub fn new(
        client: &'a kube::Client,
        meta: &CallMeta,
        margin: Duration,
        agent: &str,
        label: &str,
    ) -> Self {
        let id = NEXT_CALL_ID.fetch_add(1, Ordering::Relaxed);
        let ua = user_agent(agent, label, id, meta.deadline);
        let user_agent = HeaderValue::from_str(&ua)
            .unwrap_or_else(|_| HeaderValue::from_static("holdfast-controller"));
        CallRequests {
            client,
            meta: meta.clone(),
            margin,
            user_agent,
            id,
            sent: 0,
        }
    }

    /// This call's number in this process, as its User-Agent shows it.
    pub fn id(&self) -> u64 {
        self.id
    }

    /// The call's deadline.
    pub fn deadline(&self) -> Timestamp {
        self.meta.deadline
    }

    /// How many requests this call has sent.
    pub fn sent(&self) -> u32 {
        self.sent
    }

    /// The deadline check made before every request: the time left before the deadline less
    /// the transit margin, or `DeadlinePassed`.
    pub fn time_left(&self) -> Result<Duration, HoldError> {
        let left = self.meta.time_left(Timestamp::now())?;
        match left.checked_sub(self.margin).filter(|d| !d.is_zero()) {
            Some(usable) => Ok(usable),
            None => Err(HoldError::deadline_passed(format!(
                "only {left:?} left before the call's deadline {}, within the {:?} a request \
                 needs to reach the apiserver",
                rfc3339::auto(self.meta.deadline),
                self.margin
            ))),
        }
    }

    /// Waits `pause`, or less if the deadline comes first; then the deadline check.
    pub async fn pause(&self, pause: Duration) -> Result<(), HoldError> {
        let left = self.time_left()?;
        tokio::time::sleep(pause.min(left)).await;
        self.time_left().map(|_| ())
    }

    async fn send(&mut self, mut req: http::Request<Vec<u8>>) -> Result<Value, RequestError> {
        let left = self.time_left().map_err(RequestError::Deadline)?;
        *req.uri_mut() = with_timeout(req.uri(), left)?;
        req.headers_mut()
            .insert(USER_AGENT, self.user_agent.clone());
        self.sent += 1;
        match tokio::time::timeout(left, self.client.request::<Value>(req)).await {
            Err(_) => Err(RequestError::TimedOut),
            Ok(answer) => answer.map_err(RequestError::from),
        }
    }

    /// GET one object; `namespace` `""` for a cluster-scoped one.
    pub async fn get(
        &mut self,
        ar: &ApiResource,
        namespace: &str,
        name: &str,
    ) -> Result<Value, RequestError> {
        let namespace = Some(namespace).filter(|n| !n.is_empty());
        let req = KubeRequest::new(DynamicObject::url_path(ar, namespace))
            .get(name, &GetParams::default())
            .map_err(|e| RequestError::Build(e.to_string()))?;
        self.send(req).await
    }

    /// LIST objects; `namespace` `None` lists across namespaces.
    pub async fn list(
        &mut self,
        ar: &ApiResource,
        namespace: Option<&str>,
        params: &ListParams,
    ) -> Result<Value, RequestError> {
        let req = KubeRequest::new(DynamicObject::url_path(ar, namespace))
            .list(params)
            .map_err(|e| RequestError::Build(e.to_string()))?;
        self.send(req).await
    }

    /// PUT `object` as read and changed: its `metadata.resourceVersion` is the precondition.
    /// `dry_run`: the apiserver runs admission and validation and persists nothing.
    pub async fn replace(
        &mut self,
        ar: &ApiResource,
        namespace: &str,
        name: &str,
        object: &Value,
        dry_run: bool,
    ) -> Result<Value, RequestError> {
        let params = PostParams {
            dry_run,
            field_manager: Some(FIELD_MANAGER.to_owned()),
        };
        let body = serde_json::to_vec(object).map_err(|e| RequestError::Build(e.to_string()))?;
        let req = KubeRequest::new(DynamicObject::url_path(ar, Some(namespace)))
            .replace(name, &params, body)
            .map_err(|e| RequestError::Build(e.to_string()))?;
        self.send(req).await
    }

    /// GET a path, e.g. an API group's discovery document.
    pub async fn get_path(&mut self, path: &str) -> Result<Value, RequestError> {
        let req = http::Request::get(path)
            .body(Vec::new())
            .map_err(|e| RequestError::Build(e.to_string()))?;
        self.send(req).await
    }

    /// POST `object` to a collection path (e.g. an access review).
    pub async fn create(&mut self, path: &str, object: &Value) -> Result<Value, RequestError> {
        self.create_with(path, object, false).await
    }

    /// [`create`](Self::create); `dry_run`: admission and validation judge it, nothing is
    /// stored.
    pub async fn create_with(
        &mut self,
        path: &str,
        object: &Value,
        dry_run: bool,
    ) -> Result<Value, RequestError> {
        let body = serde_json::to_vec(object).map_err(|e| RequestError::Build(e.to_string()))?;
        let params = PostParams {
            dry_run,
            ..PostParams::default()
        };
        let req = KubeRequest::new(path)
            .create(&params, body)
            .map_err(|e| RequestError::Build(e.to_string()))?;
        self.send(req).await
    }
}

/// A read: a GET of one object or a LIST.
#[derive(Clone, Debug)]
pub enum ReadRequest<'a> {
    Get {
        ar: ApiResource,
        namespace: &'a str,
        name: &'a str,
    },
    List {
        ar: ApiResource,
        /// `None`: across namespaces.
        namespace: Option<&'a str>,
        params: ListParams,
    },
}

impl CallRequests<'_> {
    /// Makes `request`.
    pub async fn read(&mut self, request: &ReadRequest<'_>) -> Result<Value, RequestError> {
        match request {
            ReadRequest::Get {
                ar,
                namespace,
                name,
            } => self.get(ar, namespace, name).await,
            ReadRequest::List {
                ar,
                namespace,
                params,
            } => self.list(ar, *namespace, params).await,
        }
    }
}

/// `{agent} ({label}; call={id}; deadline={RFC 3339 with fraction})`.
pub fn user_agent(agent: &str, label: &str, id: u64, deadline: Timestamp) -> String {
    format!(
        "{agent} ({label}; call={id}; deadline={})",
        rfc3339::nanos(deadline)
    )
}

/// The call's deadline, read back from a User-Agent written by [`user_agent`] (as the audit
/// log shows it).
pub fn deadline_in_user_agent(ua: &str) -> Option<Timestamp> {
    let start = ua.find("deadline=")? + "deadline=".len();
    let rest = &ua[start..];
    let end = rest.find([')', ';']).unwrap_or(rest.len());
    rfc3339::parse(&rest[..end]).ok()
}

/// `uri` with `timeout=<left, in ms, at least 1>` added to its query: the apiserver's own
/// deadline for the request (capped by its `--request-timeout`).
fn with_timeout(uri: &Uri, left: Duration) -> Result<Uri, RequestError> {
    let ms = left.as_millis().max(1);
    let pq = uri.path_and_query().map(|pq| pq.as_str()).unwrap_or("/");
    let sep = if pq.contains('?') { '&' } else { '?' };
    let mut parts = uri.clone().into_parts();
    parts.path_and_query = Some(
        format!("{pq}{sep}timeout={ms}ms")
            .parse()
            .map_err(|e: http::uri::InvalidUri| RequestError::Build(e.to_string()))?,
    );
    Uri::from_parts(parts).map_err(|e| RequestError::Build(e.to_string()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_apiserver_is_told_the_time_left() {
        let uri: Uri = "/apis/x/v1/namespaces/a/things/b".parse().expect("uri");
        assert_eq!(
            with_timeout(&uri, Duration::from_micros(1_500_900))
                .expect("uri")
                .to_string(),
            "/apis/x/v1/namespaces/a/things/b?timeout=1500ms"
        );
        let uri: Uri = "/api/v1/pods?labelSelector=a%3Db".parse().expect("uri");
        assert_eq!(
            with_timeout(&uri, Duration::from_micros(10))
                .expect("uri")
                .to_string(),
            "/api/v1/pods?labelSelector=a%3Db&timeout=1ms"
        );
    }

    #[test]
    fn the_user_agent_carries_the_deadline() {
        let d = rfc3339::parse("2026-11-29T12:00:00.123456789Z").expect("time");
        let ua = user_agent("holdfast-controller/0.1.0", "hold", 7, d);
        assert_eq!(
            ua,
            "holdfast-controller/0.1.0 (hold; call=7; deadline=2026-11-29T12:00:00.123456789Z)"
        );
        assert!(HeaderValue::from_str(&ua).is_ok());
        assert_eq!(deadline_in_user_agent(&ua), Some(d));
        assert_eq!(deadline_in_user_agent("kubectl/v1.36"), None);
    }

    #[test]
    fn errors_map_into_the_closed_set() {
        let api = |code: u16| RequestError::Api {
            code,
            reason: "r".into(),
            message: "m".into(),
        };
        assert!(api(409).is_conflict());
        for code in [429, 500, 503, 504] {
            assert!(api(code).is_transient(), "{code}");
        }
        assert!(RequestError::Transport("reset".into()).is_transient());
        assert!(!api(409).is_transient());
        assert_eq!(
            api(404).into_hold_error("read").cause(),
            Some(holdfast_core::hold::RejectCause::NotFound),
            "never Invalid for what the caller did not get wrong"
        );
        assert_eq!(api(403).into_hold_error("write").kind(), "Unsupported");
        assert_eq!(api(422).into_hold_error("write").kind(), "Invalid");
        assert_eq!(
            RequestError::TimedOut.into_hold_error("write").cause(),
            Some(holdfast_core::hold::RejectCause::DeadlinePassed)
        );
    }

    #[tokio::test]
    async fn nothing_is_sent_within_the_transit_margin() {
        // A client to nowhere: the call must end before it would be used.
        let client = kube::Client::try_from(kube::Config::new(
            "https://127.0.0.1:9".parse().expect("uri"),
        ))
        .expect("client");
        let meta = CallMeta {
            instance: Some(1),
            deadline: Timestamp::now() + jiff::SignedDuration::from_millis(5),
            reason: None,
        };
        let mut reqs = CallRequests::new(
            &client,
            &meta,
            Duration::from_millis(20),
            "holdfast-test",
            "hold",
        );
        let err = reqs
            .get(&holdfast_cluster::resources::trainjob(), "ns", "tj")
            .await
            .expect_err("too late");
        assert!(
            matches!(&err, RequestError::Deadline(e) if e.cause() == Some(holdfast_core::hold::RejectCause::DeadlinePassed)),
            "{err:?}"
        );
        assert_eq!(reqs.sent(), 0);
    }
}
