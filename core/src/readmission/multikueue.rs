//! MultiKueue: where holdfast keeps its promises, and where it cannot and says so.
//!
//! Under MultiKueue a manager cluster queues a job and a worker cluster runs a copy of it
//! (Kueue v0.19: the manager's ClusterQueue lists an AdmissionCheck whose controller is
//! [`MULTIKUEUE_CONTROLLER`], and Kueue's webhook sets the job's `spec.managedBy` to the same
//! name). MultiKueue deletes the worker's copy of a stopped job while its pods may still be
//! terminating, so:
//!
//! - in the **manager**, the readmission gate counts the previous execution's pods in every
//!   worker holdfast has a kubeconfig for, and waits while one cannot be reached
//!   ([`super::Pods::Unreachable`]). Hold, Release and Open go ahead only where holdfast sees
//!   every cluster of the queue's MultiKueueConfig ([`coverage`]); elsewhere they answer
//!   `Unsupported` ([`UnderMultiKueue::refusal`]), Hold too, because a hold placed there
//!   could never be released (see the book's decisions).
//! - in a **worker**, the Workload MultiKueue creates has no TrainJob owner until after it is
//!   admitted, so the gate cannot tell which pods of an earlier execution remain: its check
//!   stays `Pending`, with a message that says why ([`remote_copy_wait`]), rather than
//!   silently forever.

use std::collections::BTreeSet;

use serde_json::Value;

use super::{CHECK_PENDING, queues::required_checks};
use crate::hold::CallKind;
use crate::names::{MULTIKUEUE_CONTROLLER, MULTIKUEUE_ORIGIN_LABEL, TRAINER_GROUP, TRAINJOB_KIND};

/// Why a TrainJob is under MultiKueue.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum UnderMultiKueue {
    /// Its `spec.managedBy` is [`MULTIKUEUE_CONTROLLER`]: the manager's Trainer leaves it to
    /// MultiKueue, which runs a copy in a worker.
    ManagedBy,
    /// Its ClusterQueue lists MultiKueue's AdmissionCheck `check`.
    Queue {
        cluster_queue: String,
        check: String,
    },
}

impl UnderMultiKueue {
    /// What puts the TrainJob under MultiKueue, in words.
    pub fn what(&self) -> String {
        match self {
            UnderMultiKueue::ManagedBy => {
                format!("its spec.managedBy is {MULTIKUEUE_CONTROLLER}")
            }
            UnderMultiKueue::Queue {
                cluster_queue,
                check,
            } => format!(
                "its ClusterQueue {cluster_queue} lists MultiKueue's AdmissionCheck {check} (spec.controllerName {MULTIKUEUE_CONTROLLER})"
            ),
        }
    }

    /// Why a call of `kind` refuses while holdfast does not see every worker the job may run
    /// in (`coverage`), naming what to configure.
    pub fn refusal(&self, kind: CallKind, coverage: &Coverage) -> String {
        self.unsupported(&format!("{kind} is"), coverage)
    }

    /// Why every hold call refuses (preflight's list of such queues says it so).
    pub fn refusals(&self, coverage: &Coverage) -> String {
        self.unsupported("hold, release and open are", coverage)
    }

    fn unsupported(&self, calls: &str, coverage: &Coverage) -> String {
        format!(
            "{calls} not supported for a TrainJob under MultiKueue yet: {}. MultiKueue deletes the worker's copy of a stopped job while its pods may still terminate, so Release and Open go ahead only where holdfast's readmission gate sees every worker the job may run in, and {}; Hold refuses too, since nothing could release it. To hold this job, give holdfast a kubeconfig for every cluster of the queue's MultiKueueConfig (the chart's kueue.multikueue.workers), or queue it in a ClusterQueue that lists holdfast's readmission AdmissionCheck and no AdmissionCheck of {MULTIKUEUE_CONTROLLER}, and create it without spec.managedBy {MULTIKUEUE_CONTROLLER}",
            self.what(),
            coverage.why_not(),
        )
    }
}

/// Whether holdfast sees every worker a job under MultiKueue may run in.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Coverage {
    /// Every cluster of the queue's MultiKueueConfig is one holdfast has a kubeconfig for:
    /// `clusters`, the ones the config lists (the only ones the job may be dispatched to).
    Covered {
        config: String,
        clusters: Vec<String>,
    },
    /// holdfast has no kubeconfig for any worker.
    NoWorkers,
    /// The queue's MultiKueueConfig `config` lists clusters holdfast has no kubeconfig for.
    Missing {
        config: String,
        clusters: Vec<String>,
    },
    /// Which workers the job may run in cannot be told, and why.
    Unknown(String),
}

impl Coverage {
    /// Whether hold calls may go ahead.
    pub fn covered(&self) -> bool {
        matches!(self, Coverage::Covered { .. })
    }

    /// The clusters the job may be dispatched to, where covered; none otherwise.
    pub fn clusters(&self) -> &[String] {
        match self {
            Coverage::Covered { clusters, .. } => clusters,
            _ => &[],
        }
    }

    /// Why holdfast cannot see the workers, in words.
    pub fn why_not(&self) -> String {
        match self {
            Coverage::Covered { config, .. } => {
                format!("holdfast sees every worker of MultiKueueConfig {config}")
            }
            Coverage::NoWorkers => {
                "it cannot see the worker's pods: holdfast has no kubeconfig for any MultiKueue worker".to_owned()
            }
            Coverage::Missing { config, clusters } => format!(
                "it cannot see the worker's pods in {}: MultiKueueConfig {config} lists {} and holdfast has no kubeconfig for {}",
                clusters.join(", "),
                if clusters.len() == 1 { "it" } else { "them" },
                if clusters.len() == 1 { "it" } else { "them" },
            ),
            Coverage::Unknown(why) => format!(
                "it cannot see the worker's pods: which workers may run the job is not known ({why})"
            ),
        }
    }
}

/// Whether holdfast, with kubeconfigs for the workers `configured`, sees every cluster the
/// MultiKueueConfig `config` (as read; named `name`) lists. A config that lists no cluster
/// dispatches nowhere, so it is covered.
pub fn coverage(name: &str, config: &Value, configured: &BTreeSet<String>) -> Coverage {
    if configured.is_empty() {
        return Coverage::NoWorkers;
    }
    let Some(listed) = config.pointer("/spec/clusters").and_then(Value::as_array) else {
        return Coverage::Unknown(format!("MultiKueueConfig {name} has no spec.clusters"));
    };
    let (mut seen, mut clusters) = (Vec::new(), Vec::new());
    for c in listed {
        match c.as_str() {
            Some(c) if configured.contains(c) => seen.push(c.to_owned()),
            Some(c) => clusters.push(c.to_owned()),
            None => {
                return Coverage::Unknown(format!(
                    "MultiKueueConfig {name} lists a cluster that is not a name: {c}"
                ));
            }
        }
    }
    if clusters.is_empty() {
        Coverage::Covered {
            config: name.to_owned(),
            clusters: seen,
        }
    } else {
        Coverage::Missing {
            config: name.to_owned(),
            clusters,
        }
    }
}

/// The MultiKueueConfig MultiKueue's AdmissionCheck `check` (as read) names as its
/// parameters, if it names one.
pub fn config_of_check(check: &Value) -> Option<&str> {
    let p = check.pointer("/spec/parameters")?;
    let is_config = p.get("kind").and_then(Value::as_str) == Some("MultiKueueConfig")
        && p.get("apiGroup").and_then(Value::as_str) == Some("kueue.x-k8s.io");
    is_config
        .then(|| p.get("name").and_then(Value::as_str))
        .flatten()
        .filter(|n| !n.is_empty())
}

/// Whether AdmissionCheck `check` (as read) is MultiKueue's.
pub fn is_multikueue_check(check: &Value) -> bool {
    check
        .pointer("/spec/controllerName")
        .and_then(Value::as_str)
        == Some(MULTIKUEUE_CONTROLLER)
}

/// Whether TrainJob `trainjob` (as read) is MultiKueue's to run (`spec.managedBy`).
pub fn managed_by_multikueue(trainjob: &Value) -> bool {
    trainjob.pointer("/spec/managedBy").and_then(Value::as_str) == Some(MULTIKUEUE_CONTROLLER)
}

/// The MultiKueue AdmissionCheck ClusterQueue `cluster_queue` (as read) lists, on every
/// flavor or some (`multikueue`: the names of the AdmissionChecks whose controller is
/// MultiKueue's), if any.
pub fn multikueue_check_of(cluster_queue: &Value, multikueue: &BTreeSet<String>) -> Option<String> {
    let (everywhere, some) = required_checks(cluster_queue);
    everywhere
        .into_iter()
        .chain(some)
        .find(|c| multikueue.contains(c))
}

/// Whether TrainJob `trainjob` is under MultiKueue: `queue` first (what its Workload's or
/// LocalQueue's ClusterQueue lists, already found: it names the check, and so the workers),
/// else its own `spec.managedBy`.
pub fn under_multikueue(
    trainjob: &Value,
    queue: Option<UnderMultiKueue>,
) -> Option<UnderMultiKueue> {
    queue.or_else(|| managed_by_multikueue(trainjob).then_some(UnderMultiKueue::ManagedBy))
}

/// The manager a Workload came from, when it is MultiKueue's copy in a worker: it carries
/// [`MULTIKUEUE_ORIGIN_LABEL`] and no TrainJob controls it (Kueue's job reconciler in the
/// worker adopts it only once the worker's copy of the job exists, after admission).
pub fn remote_copy_origin(workload: &Value) -> Option<&str> {
    let origin = workload
        .pointer("/metadata/labels")
        .and_then(|l| l.get(MULTIKUEUE_ORIGIN_LABEL))
        .and_then(Value::as_str)
        .filter(|o| !o.is_empty())?;
    let owned_by_trainjob = workload
        .pointer("/metadata/ownerReferences")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .any(|o| {
            o.get("controller") == Some(&Value::Bool(true))
                && o.get("kind").and_then(Value::as_str) == Some(TRAINJOB_KIND)
                && o.get("apiVersion")
                    .and_then(Value::as_str)
                    .and_then(|v| v.split('/').next())
                    == Some(TRAINER_GROUP)
        });
    (!owned_by_trainjob).then_some(origin)
}

/// The message the gate writes on its `Pending` check of `workload` when that is
/// MultiKueue's copy in a worker ([`remote_copy_origin`]), if there is one to write: every
/// one of its entries (named in `ours`) is `Pending` and says something else. The check
/// stays `Pending`: letting the copy through would promise what the gate cannot see.
pub fn remote_copy_wait(workload: &Value, ours: &BTreeSet<String>) -> Option<String> {
    let origin = remote_copy_origin(workload)?;
    let entries: Vec<&Value> = workload
        .pointer("/status/admissionChecks")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter(|c| {
            c.get("name")
                .and_then(Value::as_str)
                .is_some_and(|n| ours.contains(n))
        })
        .collect();
    let message = remote_copy_message(workload, origin);
    let all_pending = entries
        .iter()
        .all(|c| c.get("state").and_then(Value::as_str) == Some(CHECK_PENDING));
    let written = entries
        .iter()
        .all(|c| c.get("message").and_then(Value::as_str) == Some(message.as_str()));
    (!entries.is_empty() && all_pending && !written).then_some(message)
}

fn remote_copy_message(workload: &Value, origin: &str) -> String {
    let field = |p: &str| {
        workload
            .pointer(p)
            .and_then(Value::as_str)
            .filter(|s| !s.is_empty())
    };
    // Named by its LocalQueue, which it always has: the ClusterQueue is recorded only once
    // quota is reserved, and the message is written once.
    let namespace = field("/metadata/namespace").unwrap_or("?");
    let queue = field("/spec/queueName")
        .map(|q| format!("the ClusterQueue of LocalQueue {namespace}/{q}"))
        .unwrap_or_else(|| "its ClusterQueue".to_owned());
    format!(
        "Workload {namespace}/{} is MultiKueue's copy of a Workload of the manager cluster {origin} ({MULTIKUEUE_ORIGIN_LABEL}), with no TrainJob owner until it is admitted, so holdfast's readmission gate in this worker cannot tell which pods of an earlier execution remain. holdfast does not support MultiKueue worker clusters yet: the check stays Pending. To let MultiKueue run jobs in namespace {namespace} of this cluster, remove holdfast's readmission AdmissionCheck from {queue} and list {namespace} in the chart's webhook.excludeNamespaces (holdfast's webhook and readmission-gate policy refuse MultiKueue's copies of the job otherwise); holdfast then protects nothing there",
        field("/metadata/name").unwrap_or("?"),
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn names(n: &[&str]) -> BTreeSet<String> {
        n.iter().map(|s| (*s).to_owned()).collect()
    }

    #[test]
    fn a_check_is_multikueue_s_by_its_controller_name_and_a_trainjob_by_its_managed_by() {
        assert!(is_multikueue_check(
            &json!({"spec": {"controllerName": "kueue.x-k8s.io/multikueue"}})
        ));
        assert!(!is_multikueue_check(
            &json!({"spec": {"controllerName": "holdfast.dev/readmission"}})
        ));
        assert!(!is_multikueue_check(&json!({"spec": {}})));
        assert!(managed_by_multikueue(
            &json!({"spec": {"managedBy": "kueue.x-k8s.io/multikueue"}})
        ));
        assert!(!managed_by_multikueue(
            &json!({"spec": {"managedBy": "trainer.kubeflow.org/trainjob-controller"}})
        ));
        assert!(!managed_by_multikueue(&json!({"spec": {}})));
    }

    #[test]
    fn a_queue_is_under_multikueue_where_it_lists_its_check_on_any_flavor() {
        let mk = names(&["mk"]);
        let cq = |checks: Value| json!({"spec": {"admissionChecksStrategy": {"admissionChecks": checks}}});
        let both = cq(json!([{"name": "holdfast-readmission"}, {"name": "mk"}]));
        assert_eq!(multikueue_check_of(&both, &mk), Some("mk".to_owned()));
        let limited = cq(json!([{"name": "mk", "onFlavors": ["gpu"]}]));
        assert_eq!(multikueue_check_of(&limited, &mk), Some("mk".to_owned()));
        let v1beta1 = json!({"spec": {"admissionChecks": ["mk"]}});
        assert_eq!(multikueue_check_of(&v1beta1, &mk), Some("mk".to_owned()));
        let ours_only = cq(json!([{"name": "holdfast-readmission"}]));
        assert_eq!(multikueue_check_of(&ours_only, &mk), None);
        assert_eq!(multikueue_check_of(&both, &BTreeSet::new()), None);
    }

    #[test]
    fn every_hold_call_refuses_under_multikueue_naming_why_and_what_to_configure() {
        let queue = UnderMultiKueue::Queue {
            cluster_queue: "cq-main".to_owned(),
            check: "mk".to_owned(),
        };
        let plain = json!({"spec": {}});
        assert_eq!(under_multikueue(&plain, None), None);
        assert_eq!(
            under_multikueue(&plain, Some(queue.clone())),
            Some(queue.clone())
        );
        let managed = json!({"spec": {"managedBy": MULTIKUEUE_CONTROLLER}});
        assert_eq!(
            under_multikueue(&managed, Some(queue.clone())),
            Some(queue.clone()),
            "the queue names the check, and so the workers"
        );
        assert_eq!(
            under_multikueue(&managed, None),
            Some(UnderMultiKueue::ManagedBy)
        );
        for kind in [CallKind::Hold, CallKind::Release, CallKind::Open] {
            let why = queue.refusal(kind, &Coverage::NoWorkers);
            assert!(
                why.starts_with(&format!("{kind} is not supported")),
                "{why}"
            );
            for needle in [
                "ClusterQueue cq-main",
                "AdmissionCheck mk",
                "not supported for a TrainJob under MultiKueue yet",
                "cannot see the worker's pods",
                "spec.managedBy",
                "readmission AdmissionCheck",
            ] {
                assert!(why.contains(needle), "{needle}: {why}");
            }
        }
        assert!(
            UnderMultiKueue::ManagedBy
                .refusal(CallKind::Open, &Coverage::NoWorkers)
                .contains("its spec.managedBy is kueue.x-k8s.io/multikueue")
        );
        assert!(
            queue
                .refusals(&Coverage::NoWorkers)
                .starts_with("hold, release and open are not supported")
        );
    }

    #[test]
    fn hold_calls_under_multikueue_go_ahead_only_where_holdfast_sees_every_worker_of_the_queue() {
        let config = json!({"spec": {"clusters": ["worker-1", "worker-2"]}});
        assert_eq!(
            coverage("workers", &config, &BTreeSet::new()),
            Coverage::NoWorkers
        );
        let both = names(&["worker-1", "worker-2", "worker-3"]);
        let covered = coverage("workers", &config, &both);
        assert!(covered.covered(), "{covered:?}");
        assert_eq!(covered.clusters(), ["worker-1", "worker-2"], "not worker-3");
        let one = names(&["worker-1"]);
        let missing = coverage("workers", &config, &one);
        assert_eq!(
            missing,
            Coverage::Missing {
                config: "workers".to_owned(),
                clusters: vec!["worker-2".to_owned()]
            }
        );
        assert!(!missing.covered());
        let queue = UnderMultiKueue::Queue {
            cluster_queue: "cq".to_owned(),
            check: "mk".to_owned(),
        };
        let why = queue.refusal(CallKind::Release, &missing);
        for needle in [
            "release is not supported",
            "cannot see the worker's pods in worker-2",
            "MultiKueueConfig workers lists it",
            "multikueue.workers",
        ] {
            assert!(why.contains(needle), "{needle}: {why}");
        }
        let unnamed = json!({"spec": {"clusters": [7]}});
        assert!(matches!(
            coverage("odd", &unnamed, &one),
            Coverage::Unknown(_)
        ));
        assert!(matches!(
            coverage("bare", &json!({"spec": {}}), &one),
            Coverage::Unknown(_)
        ));
        assert!(
            coverage("none", &json!({"spec": {"clusters": []}}), &one).covered(),
            "a config of no cluster dispatches nowhere"
        );
    }

    #[test]
    fn the_snapshot_is_carried_only_into_the_clusters_of_the_queues_multikueue_config() {
        let config = json!({"spec": {"clusters": ["worker-2"]}});
        let configured = names(&["worker-1", "worker-2", "worker-3"]);
        assert_eq!(
            coverage("workers", &config, &configured).clusters(),
            ["worker-2"]
        );
        let missing = coverage("workers", &config, &names(&["worker-1"]));
        assert!(missing.clusters().is_empty(), "{missing:?}");
    }

    #[test]
    fn multikueue_s_check_names_its_config_in_its_parameters() {
        let check =
            |p: Value| json!({"spec": {"controllerName": MULTIKUEUE_CONTROLLER, "parameters": p}});
        assert_eq!(
            config_of_check(&check(
                json!({"apiGroup": "kueue.x-k8s.io", "kind": "MultiKueueConfig", "name": "workers"})
            )),
            Some("workers")
        );
        assert_eq!(
            config_of_check(&check(
                json!({"apiGroup": "example.com", "kind": "MultiKueueConfig", "name": "w"})
            )),
            None
        );
        assert_eq!(
            config_of_check(&check(
                json!({"apiGroup": "kueue.x-k8s.io", "kind": "MultiKueueConfig", "name": ""})
            )),
            None
        );
        assert_eq!(config_of_check(&json!({"spec": {}})), None);
    }

    fn remote(owners: Value, checks: Value) -> Value {
        json!({"metadata": {"name": "trainjob-job-1", "namespace": "team-a",
                "labels": {MULTIKUEUE_ORIGIN_LABEL: "manager-1", "kueue.x-k8s.io/queue-name": "main"},
                "ownerReferences": owners},
            "spec": {"queueName": "main"}, "status": {"admissionChecks": checks}})
    }

    #[test]
    fn a_remote_copy_without_a_trainjob_owner_is_kept_pending_with_a_message_once() {
        let ours = names(&["holdfast-readmission"]);
        let pending = json!([{"name": "holdfast-readmission", "state": "Pending", "message": ""}]);
        let w = remote(json!([]), pending);
        assert_eq!(remote_copy_origin(&w), Some("manager-1"));
        let message = remote_copy_wait(&w, &ours).expect("a message to write");
        for needle in [
            "team-a/trainjob-job-1",
            "manager cluster manager-1",
            "does not support MultiKueue worker clusters yet",
            "stays Pending",
            "from the ClusterQueue of LocalQueue team-a/main",
            "list team-a in the chart's webhook.excludeNamespaces",
        ] {
            assert!(message.contains(needle), "{needle}: {message}");
        }
        let written = remote(
            json!([]),
            json!([{"name": "holdfast-readmission", "state": "Pending", "message": message}]),
        );
        assert_eq!(remote_copy_wait(&written, &ours), None, "written once");
        let ready = remote(
            json!([]),
            json!([{"name": "holdfast-readmission", "state": "Ready", "message": "x"}]),
        );
        assert_eq!(remote_copy_wait(&ready, &ours), None, "never turned back");
        let adopted = remote(
            json!([{"apiVersion": "trainer.kubeflow.org/v1alpha1", "kind": "TrainJob",
                "name": "job", "uid": "u", "controller": true}]),
            json!([{"name": "holdfast-readmission", "state": "Pending"}]),
        );
        assert_eq!(remote_copy_origin(&adopted), None, "the gate's own case");
        assert_eq!(remote_copy_wait(&adopted, &ours), None);
        let other_check = remote(
            json!([]),
            json!([{"name": "provisioning", "state": "Pending"}]),
        );
        assert_eq!(remote_copy_wait(&other_check, &ours), None, "not our check");
        let local = json!({"metadata": {"name": "w", "namespace": "n"},
            "status": {"admissionChecks": [{"name": "holdfast-readmission", "state": "Pending"}]}});
        assert_eq!(remote_copy_wait(&local, &ours), None, "no origin label");
    }
}
