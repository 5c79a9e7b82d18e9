//! Runtime kinds, found by API discovery: a `runtimeRef`'s group and kind → the resource to
//! read (plural, preferred version) and whether it is namespaced. Only kinds that are
//! runtimes ([`RuntimeResources`]: Trainer's two, and those the operator listed) are looked
//! up at all: a `runtimeRef` naming `ConfigMap` or `Pod` never makes the controller watch
//! every such object in the cluster.
//!
//! Answers are cached per API group — one discovery document per runtime group, so the cache
//! is bounded by the operator's list, not by what users write. A kind the group does not
//! serve is looked up again on the next miss, but not more often than once per
//! [`MISS_RETRY`] per group, so TrainJobs naming a kind nobody serves do not turn into a
//! discovery storm.

use holdfast_core::snapshot::RuntimeResources;
use kube::core::ApiResource;
use kube::discovery::{self, Scope};
use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::time::Instant;

use super::Error;

/// A group's discovery is trusted for this long when it lacks a kind asked for.
pub const MISS_RETRY: Duration = Duration::from_secs(2);

/// A runtime kind the cluster serves.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RuntimeKind {
    /// Group, preferred version, kind and plural.
    pub resource: ApiResource,
    /// Whether objects of the kind live in a namespace (a namespaced runtime is the
    /// TrainJob's namespace's).
    pub namespaced: bool,
}

/// One group's runtime kinds, as discovery last listed them.
#[derive(Clone, Debug)]
struct GroupKinds {
    kinds: HashMap<String, RuntimeKind>,
    fetched: Instant,
}

/// The discovery cache.
#[derive(Clone)]
pub struct RuntimeKinds {
    client: kube::Client,
    allowed: Arc<RuntimeResources>,
    cache: Arc<Mutex<HashMap<String, GroupKinds>>>,
    /// One discovery at a time: reconciliations missing the same kind at once ask once.
    discovering: Arc<tokio::sync::Mutex<()>>,
}

impl RuntimeKinds {
    pub fn new(client: kube::Client, allowed: RuntimeResources) -> Self {
        RuntimeKinds {
            client,
            allowed: Arc::new(allowed),
            cache: Arc::default(),
            discovering: Arc::default(),
        }
    }

    /// The kind `kind` of API group `group`, from the cache or discovery; an error if it is
    /// not a runtime or not served.
    pub async fn resolve(&self, group: &str, kind: &str) -> Result<RuntimeKind, Error> {
        if !self.allowed.has_group(group) {
            return Err(self.not_a_runtime(group, kind));
        }
        if let Some(answer) = self.cached(group, kind, false) {
            return answer;
        }
        let _one_at_a_time = self.discovering.lock().await;
        // Someone may have asked while we waited.
        if let Some(answer) = self.cached(group, kind, false) {
            return answer;
        }
        let listed = match discovery::group(&self.client, group).await {
            Ok(api_group) => api_group
                .recommended_resources()
                .into_iter()
                .filter(|(r, _)| self.allowed.allows(group, &r.plural))
                .map(|(resource, caps)| {
                    (
                        resource.kind.clone(),
                        RuntimeKind {
                            resource,
                            namespaced: caps.scope == Scope::Namespaced,
                        },
                    )
                })
                .collect(),
            Err(kube::Error::Discovery(_)) => HashMap::new(),
            Err(kube::Error::Api(s)) if s.code == 404 => HashMap::new(),
            Err(source) => {
                return Err(Error::Discovery {
                    group: group.to_owned(),
                    source,
                });
            }
        };
        if let Ok(mut cache) = self.cache.lock() {
            cache.insert(
                group.to_owned(),
                GroupKinds {
                    kinds: listed,
                    fetched: Instant::now(),
                },
            );
        }
        self.cached(group, kind, true)
            .unwrap_or_else(|| Err(not_served(group, kind)))
    }

    /// Forgets a group (a watch found a kind of it gone), so the next lookup asks discovery
    /// again.
    pub fn forget(&self, group: &str, _kind: &str) {
        if let Ok(mut cache) = self.cache.lock() {
            cache.remove(group);
        }
    }

    /// The cached answer; a miss is trusted only for [`MISS_RETRY`] (always, `fresh`, right
    /// after a discovery).
    fn cached(&self, group: &str, kind: &str, fresh: bool) -> Option<Result<RuntimeKind, Error>> {
        let cache = self.cache.lock().ok()?;
        let entry = cache.get(group)?;
        match entry.kinds.get(kind) {
            Some(k) => Some(Ok(k.clone())),
            None if fresh || entry.fetched.elapsed() < MISS_RETRY => {
                Some(Err(not_served(group, kind)))
            }
            None => None,
        }
    }

    fn not_a_runtime(&self, group: &str, kind: &str) -> Error {
        Error::NotARuntime {
            group: group.to_owned(),
            kind: kind.to_owned(),
            message: self.allowed.refusal(group, kind),
        }
    }
}

fn not_served(group: &str, kind: &str) -> Error {
    Error::KindNotServed {
        group: group.to_owned(),
        kind: kind.to_owned(),
    }
}
