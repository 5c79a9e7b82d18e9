//! Reading the runtime a TrainJob names, at its admission, for
//! `holdfast.dev/admitted-runtime-resource-version`.
//!
//! The runtime kind is not hard-coded (SPEC: any `runtimeRef` kind the cluster serves), but
//! only kinds that are runtimes are looked up ([`RuntimeResources`]: Trainer's two and those
//! the operator listed): a `runtimeRef` naming `ConfigMap` or an invented kind costs no
//! request. `spec.runtimeRef`'s apiGroup and kind are resolved to a resource (plural,
//! preferred version, scope) by the shared runtime-kind cache ([`RuntimeKinds`]: API
//! discovery of the group, cached per group, one discovery at a time). A group's answer that
//! lacks a kind is trusted for [`UNKNOWN_KIND_TTL`], so a job naming a kind that does not
//! exist costs one discovery every half minute, not one per admission. Transient errors are
//! never cached. Every name is checked to be a DNS name ([`valid_ref`]) before anything is
//! looked up, so no other name reaches a request path.
//!
//! Only the runtime's metadata is read (`PartialObjectMetadata`), and only its
//! `resourceVersion` is used. What the webhook may read is bounded by its RBAC: a `runtimeRef`
//! naming a kind the webhook may not `get` is a lookup error, and the TrainJob is admitted
//! without the annotation.

use crate::metrics::LookupResult;
use futures::future::BoxFuture;
use holdfast_cluster::runtime_kinds::{KindError, RuntimeKinds};
use holdfast_core::snapshot::{RuntimeRef, RuntimeResources};
use kube::api::{Api, DynamicObject};
use std::time::Duration;

/// How long a kind the cluster does not serve is remembered as unknown. Long, unlike the
/// controller's: the lookup sits on the admission path of every TrainJob create and update,
/// under a short timeout, so a job naming an unserved kind must not put a discovery request
/// into each admission; and a stale answer costs little — the TrainJob is admitted without
/// the annotation, and the controller snapshots the runtime whatever the webhook saw.
pub const UNKNOWN_KIND_TTL: Duration = Duration::from_secs(30);

/// Why a runtime's resourceVersion could not be read. A runtime that does not exist is not an
/// error: it is `Ok(None)`.
#[derive(Debug, thiserror::Error)]
pub enum LookupError {
    #[error("the cluster serves no kind {kind} in API group {group:?}")]
    UnknownKind { group: String, kind: String },
    #[error("{0}")]
    NotARuntime(String),
    #[error("runtimeRef {0} is not a valid reference (group, kind and name must be DNS names)")]
    InvalidRef(String),
    #[error("{0} is namespaced, but the TrainJob has no namespace")]
    NoNamespace(String),
    #[error("reading {runtime}: {source}")]
    Api {
        runtime: String,
        #[source]
        source: kube::Error,
    },
}

impl LookupError {
    /// What the lookup found, for the `result` label.
    pub fn result(&self) -> LookupResult {
        match self {
            LookupError::UnknownKind { .. } | LookupError::NotARuntime(_) => {
                LookupResult::UnknownKind
            }
            LookupError::InvalidRef(_) | LookupError::NoNamespace(_) => LookupResult::InvalidRef,
            LookupError::Api { .. } => LookupResult::Error,
        }
    }

    /// A bounded label for metrics.
    pub fn metric_label(&self) -> &'static str {
        self.result().as_str()
    }
}

/// Reads the resourceVersion of the runtime a TrainJob names. The future does nothing until
/// it is polled: the webhook makes it, then waits for a lookup slot (`Policy::in_a_slot`).
pub trait RuntimeLookup: Send + Sync + 'static {
    /// The runtime's resourceVersion; `Ok(None)` when the cluster serves the kind but has no
    /// such object. `namespace` is the TrainJob's, used when the kind is namespaced.
    fn resource_version<'a>(
        &'a self,
        namespace: Option<&'a str>,
        runtime: &'a RuntimeRef,
    ) -> BoxFuture<'a, Result<Option<String>, LookupError>>;
}

/// A lookup that never finds anything (tests; a webhook run without API access).
#[derive(Clone, Copy, Debug, Default)]
pub struct NoRuntimes;

impl RuntimeLookup for NoRuntimes {
    fn resource_version<'a>(
        &'a self,
        _namespace: Option<&'a str>,
        _runtime: &'a RuntimeRef,
    ) -> BoxFuture<'a, Result<Option<String>, LookupError>> {
        Box::pin(async { Ok(None) })
    }
}

/// Reads runtimes from the apiserver, resolving kinds through the shared cache.
pub struct KubeRuntimeLookup {
    client: kube::Client,
    kinds: RuntimeKinds,
}

impl std::fmt::Debug for KubeRuntimeLookup {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("KubeRuntimeLookup").finish_non_exhaustive()
    }
}

/// An RFC 1123 subdomain (object names, API groups): lower-case alphanumerics, `-` and `.`,
/// at most 253 characters. Checked before a name goes into a request path.
fn dns_subdomain(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= 253
        && s.bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-' || b == b'.')
        && s.starts_with(|c: char| c.is_ascii_alphanumeric())
        && s.ends_with(|c: char| c.is_ascii_alphanumeric())
}

/// A Kind: an ASCII letter, then ASCII alphanumerics.
fn kind_name(s: &str) -> bool {
    s.len() <= 63
        && s.starts_with(|c: char| c.is_ascii_alphabetic())
        && s.bytes().all(|b| b.is_ascii_alphanumeric())
}

/// Whether `runtime` may be looked up at all.
pub fn valid_ref(runtime: &RuntimeRef) -> bool {
    (runtime.api_group.is_empty() || dns_subdomain(&runtime.api_group))
        && kind_name(&runtime.kind)
        && dns_subdomain(&runtime.name)
}

impl KubeRuntimeLookup {
    /// Looks up the runtimes `allowed` names, and no other kind.
    pub fn new(client: kube::Client, allowed: RuntimeResources) -> Self {
        Self {
            kinds: RuntimeKinds::new(client.clone(), allowed, UNKNOWN_KIND_TTL),
            client,
        }
    }

    async fn read(
        &self,
        namespace: Option<&str>,
        runtime: &RuntimeRef,
    ) -> Result<Option<String>, LookupError> {
        if !valid_ref(runtime) {
            return Err(LookupError::InvalidRef(runtime.to_string()));
        }
        let kind = self
            .kinds
            .resolve(&runtime.api_group, &runtime.kind)
            .await
            .map_err(|e| match e {
                KindError::NotARuntime { message, .. } => LookupError::NotARuntime(message),
                KindError::NotServed { group, kind } => LookupError::UnknownKind { group, kind },
                KindError::Discovery { source, .. } => LookupError::Api {
                    runtime: runtime.to_string(),
                    source,
                },
            })?;
        let api: Api<DynamicObject> = if kind.namespaced {
            let ns = namespace
                .filter(|ns| dns_subdomain(ns))
                .ok_or_else(|| LookupError::NoNamespace(runtime.to_string()))?;
            Api::namespaced_with(self.client.clone(), ns, &kind.resource)
        } else {
            Api::all_with(self.client.clone(), &kind.resource)
        };
        match api.get_metadata(&runtime.name).await {
            Ok(meta) => Ok(meta.metadata.resource_version),
            Err(kube::Error::Api(status)) if status.is_not_found() => {
                // A missing object's 404 names it; a 404 without its name means the resource
                // itself went away (a CRD removed, or its version no longer served): discover
                // afresh next time.
                let names_it = status
                    .details
                    .as_ref()
                    .is_some_and(|d| d.name == runtime.name);
                if !names_it {
                    self.kinds.forget(&runtime.api_group);
                }
                Ok(None)
            }
            Err(source) => Err(LookupError::Api {
                runtime: runtime.to_string(),
                source,
            }),
        }
    }
}

impl RuntimeLookup for KubeRuntimeLookup {
    fn resource_version<'a>(
        &'a self,
        namespace: Option<&'a str>,
        runtime: &'a RuntimeRef,
    ) -> BoxFuture<'a, Result<Option<String>, LookupError>> {
        Box::pin(self.read(namespace, runtime))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn r(group: &str, kind: &str, name: &str) -> RuntimeRef {
        RuntimeRef {
            api_group: group.into(),
            kind: kind.into(),
            name: name.into(),
        }
    }

    #[test]
    fn only_dns_names_reach_a_request_path() {
        assert!(valid_ref(&r(
            "trainer.kubeflow.org",
            "ClusterTrainingRuntime",
            "torch-distributed"
        )));
        assert!(valid_ref(&r("", "ConfigMap", "x")));
        for bad in [
            r(
                "trainer.kubeflow.org",
                "ClusterTrainingRuntime",
                "../secrets/x",
            ),
            r("trainer.kubeflow.org", "ClusterTrainingRuntime", "a/b"),
            r("trainer.kubeflow.org", "ClusterTrainingRuntime", ""),
            r("trainer.kubeflow.org", "ClusterTrainingRuntime", "Upper"),
            r("trainer.kubeflow.org", "Cluster/Runtime", "x"),
            r("trainer.kubeflow.org", "", "x"),
            r("Trainer.org", "ClusterTrainingRuntime", "x"),
            r("trainer.kubeflow.org?x=1", "ClusterTrainingRuntime", "x"),
        ] {
            assert!(!valid_ref(&bad), "{bad}");
        }
    }
}
