//! Runtime kinds, found by API discovery: a `runtimeRef`'s group and kind → the resource to
//! read (plural, preferred version) and whether it is namespaced. Nothing is hard-coded, so a
//! kind holdfast has never heard of (a SlurmRuntime) works as soon as the cluster serves it.
//!
//! Answers are cached. A kind not found is looked up again on the next miss, but not more
//! often than once per [`MISS_RETRY`] per kind, so TrainJobs naming a kind nobody serves do
//! not turn into a discovery storm.

use kube::core::ApiResource;
use kube::discovery::{self, Scope};
use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::time::Instant;

use super::Error;

/// A negative answer is trusted for this long.
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

#[derive(Clone, Debug)]
enum Cached {
    Served(RuntimeKind),
    NotServed { since: Instant },
}

/// The discovery cache.
#[derive(Clone)]
pub struct RuntimeKinds {
    client: kube::Client,
    cache: Arc<Mutex<HashMap<(String, String), Cached>>>,
    /// One discovery at a time: reconciliations missing the same kind at once ask once.
    discovering: Arc<tokio::sync::Mutex<()>>,
}

impl RuntimeKinds {
    pub fn new(client: kube::Client) -> Self {
        RuntimeKinds {
            client,
            cache: Arc::default(),
            discovering: Arc::default(),
        }
    }

    /// The kind `kind` of API group `group`, from the cache or discovery.
    pub async fn resolve(&self, group: &str, kind: &str) -> Result<RuntimeKind, Error> {
        let key = (group.to_owned(), kind.to_owned());
        if let Some(answer) = self.fresh(&key) {
            return answer;
        }
        let _one_at_a_time = self.discovering.lock().await;
        // Someone may have asked while we waited.
        if let Some(answer) = self.fresh(&key) {
            return answer;
        }
        let found = match discovery::group(&self.client, group).await {
            Ok(api_group) => api_group.recommended_kind(kind),
            Err(kube::Error::Discovery(_)) => None,
            Err(kube::Error::Api(s)) if s.code == 404 => None,
            Err(source) => {
                return Err(Error::Discovery {
                    group: group.to_owned(),
                    source,
                });
            }
        };
        let entry = match found {
            Some((resource, caps)) => Cached::Served(RuntimeKind {
                resource,
                namespaced: caps.scope == Scope::Namespaced,
            }),
            None => Cached::NotServed {
                since: Instant::now(),
            },
        };
        if let Ok(mut cache) = self.cache.lock() {
            cache.insert(key, entry.clone());
        }
        match entry {
            Cached::Served(k) => {
                tracing::debug!(group, kind, plural = %k.resource.plural, version = %k.resource.version, "discovered runtime kind");
                Ok(k)
            }
            Cached::NotServed { .. } => Err(not_served(group, kind)),
        }
    }

    /// Forgets a kind (its watch found it gone), so the next lookup asks discovery again.
    pub fn forget(&self, group: &str, kind: &str) {
        if let Ok(mut cache) = self.cache.lock() {
            cache.remove(&(group.to_owned(), kind.to_owned()));
        }
    }

    /// The cached answer, unless it is a miss older than [`MISS_RETRY`].
    fn fresh(&self, key: &(String, String)) -> Option<Result<RuntimeKind, Error>> {
        match self.cache.lock().ok()?.get(key)? {
            Cached::Served(k) => Some(Ok(k.clone())),
            Cached::NotServed { since } if since.elapsed() < MISS_RETRY => {
                Some(Err(not_served(&key.0, &key.1)))
            }
            Cached::NotServed { .. } => None,
        }
    }
}

fn not_served(group: &str, kind: &str) -> Error {
    Error::KindNotServed {
        group: group.to_owned(),
        kind: kind.to_owned(),
    }
}
