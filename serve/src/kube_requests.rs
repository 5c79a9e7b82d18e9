//! Every request a binary's kube client sends, counted by verb and answer:
//! `holdfast_kube_requests_total{verb, code}`, a tower layer on the `kube::Client`.
//!
//! Both labels are bounded. `verb` is the apiserver's own verb for the request, read from its
//! method, path and `watch` parameter: `get`, `list`, `watch`, `create`, `update`, `patch`,
//! `delete`, `deletecollection`, else `other`. `code` is the HTTP status code the apiserver
//! answered (three digits: the set is bounded by HTTP), or `error` when no answer came (connection refused, TLS, timeout).
//! A watch counts once, when its answer starts. kube's retry policy (when the client has it)
//! sits inside the layer: a retried request counts once, with its last answer.

use crate::declared::Declared;
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::registry::Registry;
use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct RequestLabels {
    verb: &'static str,
    code: String,
}

/// The request counter. Cheap to clone; clones share the series.
#[derive(Clone, Debug, Default)]
pub struct KubeRequestMetrics {
    requests: Family<RequestLabels, Counter>,
}

impl KubeRequestMetrics {
    /// New metrics, registered in `registry` as `holdfast_kube_requests`.
    pub fn register(registry: &mut Registry) -> Self {
        let m = KubeRequestMetrics::default();
        registry.register(
            "holdfast_kube_requests",
            "Requests of the kube client, by verb and HTTP status code (error: no answer)",
            Declared(m.requests.clone()),
        );
        m
    }

    /// A client of `config` whose every request is counted here.
    pub fn client(&self, config: kube::Config) -> Result<kube::Client, kube::Error> {
        Ok(kube::client::ClientBuilder::try_from(config)?
            .with_layer(&CountRequestsLayer(self.clone()))
            .build())
    }

    /// The count of `verb` answered `code` (for tests).
    pub fn count(&self, verb: &'static str, code: &str) -> u64 {
        self.requests
            .get_or_create(&RequestLabels {
                verb,
                code: code.to_owned(),
            })
            .get()
    }

    fn record(&self, verb: &'static str, code: String) {
        self.requests
            .get_or_create(&RequestLabels { verb, code })
            .inc();
    }
}

/// The layer counting every request into a [`KubeRequestMetrics`].
#[derive(Clone, Debug)]
pub struct CountRequestsLayer(pub KubeRequestMetrics);

impl<S> tower::Layer<S> for CountRequestsLayer {
    type Service = CountRequests<S>;
    fn layer(&self, inner: S) -> Self::Service {
        CountRequests {
            inner,
            metrics: self.0.clone(),
        }
    }
}

/// A service counting every request it passes to `inner`.
#[derive(Clone, Debug)]
pub struct CountRequests<S> {
    inner: S,
    metrics: KubeRequestMetrics,
}

impl<S, ReqBody, ResBody> tower::Service<http::Request<ReqBody>> for CountRequests<S>
where
    S: tower::Service<http::Request<ReqBody>, Response = http::Response<ResBody>>,
    S::Future: Send + 'static,
    S::Error: 'static,
    ResBody: 'static,
{
    type Response = S::Response;
    type Error = S::Error;
    type Future = Pin<Box<dyn Future<Output = Result<Self::Response, Self::Error>> + Send>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, request: http::Request<ReqBody>) -> Self::Future {
        let verb = verb_of(request.method(), request.uri());
        let metrics = self.metrics.clone();
        let answer = self.inner.call(request);
        Box::pin(async move {
            let result = answer.await;
            let code = match &result {
                Ok(response) => code_label(response.status()),
                Err(_) => "error".to_owned(),
            };
            metrics.record(verb, code);
            result
        })
    }
}

/// The apiserver's verb for a request.
pub fn verb_of(method: &http::Method, uri: &http::Uri) -> &'static str {
    let collection = names_a_collection(uri.path());
    match *method {
        http::Method::GET if is_watch(uri.query()) => "watch",
        http::Method::GET if collection => "list",
        http::Method::GET => "get",
        http::Method::POST => "create",
        http::Method::PUT => "update",
        http::Method::PATCH => "patch",
        http::Method::DELETE if collection => "deletecollection",
        http::Method::DELETE => "delete",
        _ => "other",
    }
}

fn is_watch(query: Option<&str>) -> bool {
    query
        .unwrap_or_default()
        .split('&')
        .any(|kv| kv == "watch=true" || kv == "watch=1")
}

/// Whether a path names a collection (`/api/v1/pods`, `/apis/g/v/namespaces/ns/things`)
/// rather than one object or a discovery document.
fn names_a_collection(path: &str) -> bool {
    let segments: Vec<&str> = path.split('/').filter(|s| !s.is_empty()).collect();
    let rest = match segments.as_slice() {
        ["api", _version, rest @ ..] => rest,
        ["apis", _group, _version, rest @ ..] => rest,
        _ => return false,
    };
    let rest = match rest {
        // A namespaced resource: namespaces/{ns}/{resource}[/{name}...].
        ["namespaces", _ns, resource @ ..] if !resource.is_empty() => resource,
        other => other,
    };
    rest.len() == 1
}

/// The status code as a label: its three digits.
fn code_label(status: http::StatusCode) -> String {
    status.as_str().to_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn verb(method: &str, uri: &str) -> &'static str {
        let method: http::Method = method.parse().expect("method");
        let uri: http::Uri = uri.parse().expect("uri");
        verb_of(&method, &uri)
    }

    #[test]
    fn verbs_are_the_apiservers() {
        assert_eq!(verb("GET", "/api/v1/namespaces/ns/configmaps"), "list");
        assert_eq!(verb("GET", "/api/v1/namespaces/ns/configmaps/x"), "get");
        assert_eq!(verb("GET", "/api/v1/namespaces"), "list");
        assert_eq!(verb("GET", "/api/v1/namespaces/ns"), "get");
        assert_eq!(verb("GET", "/api/v1/pods?labelSelector=a"), "list");
        assert_eq!(
            verb(
                "GET",
                "/apis/trainer.kubeflow.org/v1alpha1/trainjobs?watch=true&resourceVersion=1"
            ),
            "watch"
        );
        assert_eq!(verb("GET", "/apis/coordination.k8s.io/v1"), "get");
        assert_eq!(verb("GET", "/apis"), "get");
        assert_eq!(
            verb("POST", "/apis/authentication.k8s.io/v1/tokenreviews"),
            "create"
        );
        assert_eq!(verb("PUT", "/api/v1/namespaces/ns/secrets/ca"), "update");
        assert_eq!(
            verb(
                "PATCH",
                "/apis/kueue.x-k8s.io/v1beta2/namespaces/ns/workloads/w/status"
            ),
            "patch"
        );
        assert_eq!(
            verb("DELETE", "/api/v1/namespaces/ns/configmaps/x"),
            "delete"
        );
        assert_eq!(
            verb("DELETE", "/api/v1/namespaces/ns/configmaps"),
            "deletecollection"
        );
        assert_eq!(verb("OPTIONS", "/api"), "other");
    }

    #[test]
    fn codes_are_three_digits() {
        assert_eq!(code_label(http::StatusCode::OK), "200");
        assert_eq!(code_label(http::StatusCode::CONFLICT), "409");
        assert_eq!(code_label(http::StatusCode::SWITCHING_PROTOCOLS), "101");
    }

    #[tokio::test]
    async fn the_layer_counts_answers_and_failures() {
        use tower::{Layer, Service, ServiceExt};
        let metrics = KubeRequestMetrics::default();
        let answer = tower::service_fn(|req: http::Request<()>| async move {
            if req.uri().path().ends_with("/missing") {
                return Err::<http::Response<()>, std::io::Error>(std::io::Error::other("down"));
            }
            let mut r = http::Response::new(());
            *r.status_mut() = http::StatusCode::NOT_FOUND;
            Ok(r)
        });
        let mut svc = CountRequestsLayer(metrics.clone()).layer(answer);
        let req = |p: &str| http::Request::get(p).body(()).expect("request");
        let _ = svc
            .ready()
            .await
            .expect("ready")
            .call(req("/api/v1/namespaces/ns/pods/p"))
            .await;
        let _ = svc
            .ready()
            .await
            .expect("ready")
            .call(req("/api/v1/namespaces/ns/pods/missing"))
            .await;
        assert_eq!(metrics.count("get", "404"), 1);
        assert_eq!(metrics.count("get", "error"), 1);
        assert_eq!(metrics.count("list", "404"), 0);
    }
}
