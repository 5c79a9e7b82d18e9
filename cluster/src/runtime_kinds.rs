//! Runtime kinds, found by API discovery: a `runtimeRef`'s group and kind → the resource to
//! read (plural, preferred version) and whether it is namespaced. The controller resolves
//! them to snapshot and watch a runtime; the webhook to read a runtime's resourceVersion at a
//! TrainJob's admission. One cache, [`RuntimeKinds`], serves both.
//!
//! Only kinds that are runtimes ([`RuntimeResources`]: Trainer's two, and those the operator
//! listed) are looked up at all: a `runtimeRef` naming `ConfigMap`, `Pod` or an invented kind
//! costs no request, and never makes the controller watch every such object in the cluster.
//! A group outside that list never reaches a request path.
//!
//! Answers are cached per API group — one discovery document per runtime group, so the cache
//! is bounded by the operator's list, not by what users write. A kind the group does not
//! serve is trusted missing for the cache's miss TTL (each binary sets its own, see
//! [`RuntimeKinds::new`]) and looked up again on the next miss after it, so jobs naming a
//! kind nobody serves do not turn into a discovery storm. Transient discovery errors are
//! never cached. One discovery runs at a time per cache: callers missing the same group at
//! once ask once.

use holdfast_core::snapshot::RuntimeResources;
use kube::core::ApiResource;
use kube::discovery::{self, Scope};
use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;
use tokio::time::Instant;

/// A runtime kind the cluster serves.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RuntimeKind {
    /// Group, preferred version, kind and plural.
    pub resource: ApiResource,
    /// Whether objects of the kind live in a namespace (a namespaced runtime is the
    /// TrainJob's namespace's).
    pub namespaced: bool,
}

/// Why a kind could not be resolved.
#[derive(Debug, thiserror::Error)]
pub enum KindError {
    /// The kind is not a runtime (not Trainer's, not listed by the operator): it is never
    /// looked up. `message` says so, and how to list it.
    #[error("{message}")]
    NotARuntime {
        group: String,
        kind: String,
        message: String,
    },
    /// The cluster serves no such kind in the group (discovery found none).
    #[error("the cluster serves no kind {kind:?} in API group {group:?}")]
    NotServed { group: String, kind: String },
    /// Discovery itself failed (not cached: the next lookup asks again).
    #[error("API discovery of group {group:?} failed: {source}")]
    Discovery {
        group: String,
        #[source]
        source: kube::Error,
    },
}

/// The discovery cache of runtime kinds; clones share it.
#[derive(Clone)]
pub struct RuntimeKinds {
    client: kube::Client,
    allowed: Arc<RuntimeResources>,
    groups: Arc<Mutex<Groups>>,
    /// One discovery at a time: lookups missing the same kind at once ask once.
    discovering: Arc<tokio::sync::Mutex<()>>,
}

impl std::fmt::Debug for RuntimeKinds {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RuntimeKinds").finish_non_exhaustive()
    }
}

impl RuntimeKinds {
    /// Looks up the kinds `allowed` names, and no other. A kind a group's discovery lacks is
    /// trusted missing for `miss_ttl` after that discovery: the caller weighs how soon a newly
    /// installed kind must be seen against how often a job naming an unserved kind may cost a
    /// discovery request.
    pub fn new(client: kube::Client, allowed: RuntimeResources, miss_ttl: Duration) -> Self {
        RuntimeKinds {
            client,
            allowed: Arc::new(allowed),
            groups: Arc::new(Mutex::new(Groups::new(miss_ttl))),
            discovering: Arc::default(),
        }
    }

    /// The kind `kind` of API group `group`, from the cache or discovery; an error if it is
    /// not a runtime or not served.
    pub async fn resolve(&self, group: &str, kind: &str) -> Result<RuntimeKind, KindError> {
        if !self.allowed.has_group(group) {
            return Err(KindError::NotARuntime {
                group: group.to_owned(),
                kind: kind.to_owned(),
                message: self.allowed.refusal(group, kind),
            });
        }
        if let Some(answer) = self.groups().lookup(group, kind, Instant::now()) {
            return answer;
        }
        let _one_at_a_time = self.discovering.lock().await;
        // Someone may have asked while we waited.
        if let Some(answer) = self.groups().lookup(group, kind, Instant::now()) {
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
            // The group is not served (or went away while it was being read).
            Err(kube::Error::Discovery(_)) => HashMap::new(),
            Err(kube::Error::Api(s)) if s.code == 404 => HashMap::new(),
            Err(source) => {
                return Err(KindError::Discovery {
                    group: group.to_owned(),
                    source,
                });
            }
        };
        let mut groups = self.groups();
        groups.insert(group, listed, Instant::now());
        groups.found(group, kind)
    }

    /// Forgets a group (a kind of it is gone: its CRD removed, or its version no longer
    /// served), so the next lookup asks discovery again.
    pub fn forget(&self, group: &str) {
        self.groups().remove(group);
    }

    fn groups(&self) -> MutexGuard<'_, Groups> {
        self.groups.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// One group's runtime kinds, as discovery last listed them.
#[derive(Clone, Debug)]
struct GroupKinds {
    kinds: HashMap<String, RuntimeKind>,
    fetched: Instant,
}

/// The cache's content: what each group's last discovery listed, and how long a miss is
/// trusted.
#[derive(Debug)]
struct Groups {
    listed: HashMap<String, GroupKinds>,
    miss_ttl: Duration,
}

impl Groups {
    fn new(miss_ttl: Duration) -> Self {
        Groups {
            listed: HashMap::new(),
            miss_ttl,
        }
    }

    /// The cached answer at `now`, if the cache can give one: a listed kind, or a miss while
    /// the group's discovery is younger than the miss TTL.
    fn lookup(
        &self,
        group: &str,
        kind: &str,
        now: Instant,
    ) -> Option<Result<RuntimeKind, KindError>> {
        let entry = self.listed.get(group)?;
        match entry.kinds.get(kind) {
            Some(k) => Some(Ok(k.clone())),
            None if now.saturating_duration_since(entry.fetched) < self.miss_ttl => {
                Some(Err(not_served(group, kind)))
            }
            None => None,
        }
    }

    /// The answer right after a discovery: a miss is trusted whatever the TTL.
    fn found(&self, group: &str, kind: &str) -> Result<RuntimeKind, KindError> {
        self.listed
            .get(group)
            .and_then(|entry| entry.kinds.get(kind))
            .cloned()
            .ok_or_else(|| not_served(group, kind))
    }

    fn insert(&mut self, group: &str, kinds: HashMap<String, RuntimeKind>, fetched: Instant) {
        self.listed
            .insert(group.to_owned(), GroupKinds { kinds, fetched });
    }

    fn remove(&mut self, group: &str) {
        self.listed.remove(group);
    }
}

fn not_served(group: &str, kind: &str) -> KindError {
    KindError::NotServed {
        group: group.to_owned(),
        kind: kind.to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const GROUP: &str = "trainer.kubeflow.org";

    fn listing() -> HashMap<String, RuntimeKind> {
        let resource = ApiResource {
            group: GROUP.into(),
            version: "v1alpha1".into(),
            api_version: format!("{GROUP}/v1alpha1"),
            kind: "ClusterTrainingRuntime".into(),
            plural: "clustertrainingruntimes".into(),
        };
        HashMap::from([(
            resource.kind.clone(),
            RuntimeKind {
                resource,
                namespaced: false,
            },
        )])
    }

    #[test]
    fn a_listed_kind_is_answered_however_old_the_listing() {
        let mut groups = Groups::new(Duration::from_secs(2));
        let fetched = Instant::now();
        groups.insert(GROUP, listing(), fetched);
        let later = fetched + Duration::from_secs(3600);
        let found = groups.lookup(GROUP, "ClusterTrainingRuntime", later);
        assert!(matches!(found, Some(Ok(k)) if k.resource.plural == "clustertrainingruntimes"));
        assert!(groups.found(GROUP, "ClusterTrainingRuntime").is_ok());
    }

    #[test]
    fn a_miss_is_trusted_for_the_ttl_then_asked_again() {
        let ttl = Duration::from_secs(30);
        let mut groups = Groups::new(ttl);
        let fetched = Instant::now();
        groups.insert(GROUP, listing(), fetched);
        let within = groups.lookup(GROUP, "TrainingRuntime", fetched + ttl / 2);
        assert!(matches!(within, Some(Err(KindError::NotServed { .. }))));
        assert!(
            groups
                .lookup(GROUP, "TrainingRuntime", fetched + ttl)
                .is_none()
        );
    }

    #[test]
    fn right_after_a_discovery_a_miss_is_an_answer_even_with_no_ttl() {
        let mut groups = Groups::new(Duration::ZERO);
        let fetched = Instant::now();
        groups.insert(GROUP, listing(), fetched);
        assert!(groups.lookup(GROUP, "TrainingRuntime", fetched).is_none());
        assert!(matches!(
            groups.found(GROUP, "TrainingRuntime"),
            Err(KindError::NotServed { .. })
        ));
    }

    #[test]
    fn an_unknown_or_forgotten_group_asks_discovery() {
        let mut groups = Groups::new(Duration::from_secs(30));
        let fetched = Instant::now();
        assert!(
            groups
                .lookup(GROUP, "ClusterTrainingRuntime", fetched)
                .is_none()
        );
        groups.insert(GROUP, listing(), fetched);
        groups.remove(GROUP);
        assert!(
            groups
                .lookup(GROUP, "ClusterTrainingRuntime", fetched)
                .is_none()
        );
        assert!(groups.found(GROUP, "ClusterTrainingRuntime").is_err());
    }
}
