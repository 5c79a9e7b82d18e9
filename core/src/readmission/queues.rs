//! Kueue mode: which ClusterQueue a Workload goes through, and whether that queue requires
//! holdfast's readmission AdmissionCheck.
//!
//! The readmission gate is part of the hold's promise ("never two executions"): Kueue runs a
//! Workload's admission checks only where its ClusterQueue lists them, so a held job whose
//! Workload is in a queue without holdfast's check would be re-admitted by Kueue at once
//! after Release, beside the old execution's pods. Release and Open therefore refuse
//! (`Unsupported`, naming the ClusterQueue and what to configure) unless [`queue_gate`] says
//! the queue is gated. Hold goes ahead on any queue: it only stops the job, and stopping is
//! always safe ([`QueueGate::refusal_for`]).
//!
//! A check gates a Workload on every flavor only when it is listed without `onFlavors` (Kueue
//! v1beta2 `spec.admissionChecksStrategy.admissionChecks[]`; v1beta1's `spec.admissionChecks`
//! lists apply to every flavor). A check limited to some flavors is treated as missing: a
//! Workload admitted on another flavor would skip it.

use std::collections::BTreeSet;

use serde_json::Value;

use crate::hold::CallKind;

/// Whether a Workload's queue requires holdfast's readmission check.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum QueueGate {
    /// The ClusterQueue requires one of holdfast's checks on every flavor.
    Gated { cluster_queue: String },
    /// It does not: a call that relies on the gate must refuse. `why` says what is missing
    /// and what to do.
    Ungated { cluster_queue: String, why: String },
    /// The queue could not be resolved (no queue name, LocalQueue or ClusterQueue not
    /// found): nothing proves the gate, so the call refuses too.
    Unresolved { why: String },
}

impl QueueGate {
    pub fn is_gated(&self) -> bool {
        matches!(self, QueueGate::Gated { .. })
    }

    /// Why a call that relies on the gate refuses on this queue, if it must.
    pub fn refusal(&self) -> Option<String> {
        match self {
            QueueGate::Gated { .. } => None,
            QueueGate::Ungated { why, .. } | QueueGate::Unresolved { why } => Some(why.clone()),
        }
    }

    /// Why a call of `kind` refuses on this queue, if it must. Only a call that may let the
    /// job run relies on the gate: Release and Open refuse on a queue that is not gated.
    /// Hold only stops the job, and stopping is always safe, so it never refuses for the
    /// queue; lifting that hold then waits until the ClusterQueue requires the check.
    pub fn refusal_for(&self, kind: CallKind) -> Option<String> {
        match kind {
            CallKind::Hold => None,
            CallKind::Release | CallKind::Open => self.refusal(),
        }
    }
}

/// The ClusterQueue a Workload goes through: `status.admission.clusterQueue` once it has
/// quota, else its LocalQueue's (`spec.queueName` in the Workload's namespace)
/// `spec.clusterQueue`, looked up with `local_queue(namespace, name)`.
pub fn cluster_queue_of(
    workload: &Value,
    local_queue: impl Fn(&str, &str) -> Option<Value>,
) -> Result<String, String> {
    if let Some(cq) = workload
        .pointer("/status/admission/clusterQueue")
        .and_then(Value::as_str)
        .filter(|s| !s.is_empty())
    {
        return Ok(cq.to_owned());
    }
    let namespace = workload
        .pointer("/metadata/namespace")
        .and_then(Value::as_str)
        .unwrap_or_default();
    let Some(queue) = workload
        .pointer("/spec/queueName")
        .and_then(Value::as_str)
        .filter(|s| !s.is_empty())
    else {
        return Err(format!(
            "Workload {namespace}/{} names no queue (spec.queueName)",
            name(workload)
        ));
    };
    let Some(lq) = local_queue(namespace, queue) else {
        return Err(format!(
            "LocalQueue {namespace}/{queue} (of Workload {}) does not exist",
            name(workload)
        ));
    };
    lq.pointer("/spec/clusterQueue")
        .and_then(Value::as_str)
        .filter(|s| !s.is_empty())
        .map(str::to_owned)
        .ok_or_else(|| format!("LocalQueue {namespace}/{queue} names no spec.clusterQueue"))
}

/// The admission checks a ClusterQueue requires on every flavor, and those it requires on
/// some flavors only (`onFlavors`).
pub fn required_checks(cluster_queue: &Value) -> (BTreeSet<String>, BTreeSet<String>) {
    let mut everywhere = BTreeSet::new();
    let mut some = BTreeSet::new();
    let strategy = cluster_queue
        .pointer("/spec/admissionChecksStrategy/admissionChecks")
        .and_then(Value::as_array);
    for rule in strategy.into_iter().flatten() {
        let Some(name) = rule.get("name").and_then(Value::as_str) else {
            continue;
        };
        let limited = rule
            .get("onFlavors")
            .and_then(Value::as_array)
            .is_some_and(|f| !f.is_empty());
        if limited {
            some.insert(name.to_owned());
        } else {
            everywhere.insert(name.to_owned());
        }
    }
    // v1beta1's plain list, should a ClusterQueue be read in that version.
    let plain = cluster_queue
        .pointer("/spec/admissionChecks")
        .and_then(Value::as_array);
    for name in plain.into_iter().flatten().filter_map(Value::as_str) {
        everywhere.insert(name.to_owned());
    }
    some.retain(|n| !everywhere.contains(n));
    (everywhere, some)
}

/// Whether ClusterQueue `name` (as read, `None` if it does not exist) requires one of
/// holdfast's checks (`ours`: the names of the AdmissionChecks whose controller is holdfast's
/// gate) on every flavor.
pub fn queue_gate(name: &str, cluster_queue: Option<&Value>, ours: &BTreeSet<String>) -> QueueGate {
    let Some(cq) = cluster_queue else {
        return QueueGate::Unresolved {
            why: format!("ClusterQueue {name} does not exist"),
        };
    };
    let (everywhere, some) = required_checks(cq);
    if everywhere.iter().any(|c| ours.contains(c)) {
        return QueueGate::Gated {
            cluster_queue: name.to_owned(),
        };
    }
    let ours_list = if ours.is_empty() {
        "none exists: create one with spec.controllerName holdfast.dev/readmission".to_owned()
    } else {
        ours.iter().cloned().collect::<Vec<_>>().join(", ")
    };
    let limited: Vec<&String> = some.iter().filter(|c| ours.contains(*c)).collect();
    let why = if limited.is_empty() {
        format!(
            "ClusterQueue {name} does not require holdfast's readmission AdmissionCheck ({ours_list}), so Kueue would re-admit a released job without waiting for its old pods: add it to the ClusterQueue's spec.admissionChecksStrategy.admissionChecks"
        )
    } else {
        format!(
            "ClusterQueue {name} requires holdfast's readmission AdmissionCheck only on some flavors (onFlavors), so a job admitted on another flavor would skip it: list it without onFlavors"
        )
    };
    QueueGate::Ungated {
        cluster_queue: name.to_owned(),
        why,
    }
}

/// Kueue counts a pod set's pods as the resource `pods` when its ClusterQueue covers it.
pub const PODS_RESOURCE: &str = "pods";

/// Every resource name the pods of `pod_sets` (a Workload's `spec.podSets`) request or
/// limit (containers, init containers, pod-level resources, overhead), zero quantities
/// included, and `pods`.
pub fn pod_sets_requests(pod_sets: &[Value]) -> BTreeSet<String> {
    let mut names = BTreeSet::from([PODS_RESOURCE.to_owned()]);
    for spec in pod_sets
        .iter()
        .filter_map(|ps| ps.pointer("/template/spec"))
    {
        let containers = ["containers", "initContainers"]
            .iter()
            .filter_map(|k| spec.get(*k).and_then(Value::as_array))
            .flatten();
        // Pod-level resources (KEP-2837, `spec.resources`) count like a container's.
        let lists = containers
            .chain(std::iter::once(spec))
            .flat_map(|c| {
                [
                    c.pointer("/resources/requests"),
                    c.pointer("/resources/limits"),
                ]
            })
            .flatten()
            .chain(spec.get("overhead"));
        for list in lists.filter_map(Value::as_object) {
            names.extend(list.keys().cloned());
        }
    }
    names
}

/// Whether Kueue would admit `workload` with no flavor in a ClusterQueue covering
/// `covered`: it has pod sets and none of their requests is covered. Kueue then runs none
/// of the queue's AdmissionChecks, so a release would re-admit it past the readmission gate
/// (the webhook refuses such Workloads when Kueue creates them; one made before holdfast, or
/// before the queue changed, is still there).
pub fn requests_nothing_covered(workload: &Value, covered: &BTreeSet<String>) -> bool {
    workload
        .pointer("/spec/podSets")
        .and_then(Value::as_array)
        .is_some_and(|sets| !sets.is_empty() && pod_sets_requests(sets).is_disjoint(covered))
}

/// Whether Kueue admitted `workload` with no flavor at all: every pod set assignment of its
/// `status.admission` has empty `flavors`. Kueue then ran none of its ClusterQueue's
/// AdmissionChecks (it runs those of the flavors it assigned), so the readmission gate did
/// not keep it; the webhook refuses such Workloads when Kueue creates them (seam 12), and a
/// Workload admitted so anyway (before holdfast, or where Kueue drops a request holdfast
/// counts) is treated as ungated.
pub fn admitted_without_flavor(workload: &Value) -> bool {
    let Some(assignments) = workload
        .pointer("/status/admission/podSetAssignments")
        .and_then(Value::as_array)
    else {
        return false;
    };
    assignments.iter().all(|a| {
        a.get("flavors")
            .and_then(Value::as_object)
            .is_none_or(serde_json::Map::is_empty)
    })
}

/// The resources a ClusterQueue covers (`spec.resourceGroups[].coveredResources`): Kueue
/// assigns a pod set a flavor only for these.
pub fn covered_resources(cluster_queue: &Value) -> BTreeSet<String> {
    cluster_queue
        .pointer("/spec/resourceGroups")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter_map(|g| g.get("coveredResources").and_then(Value::as_array))
        .flatten()
        .filter_map(Value::as_str)
        .map(str::to_owned)
        .collect()
}

fn name(v: &Value) -> &str {
    v.pointer("/metadata/name")
        .and_then(Value::as_str)
        .unwrap_or("?")
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn ours() -> BTreeSet<String> {
        ["holdfast-readmission".to_owned()].into()
    }

    #[test]
    fn stopping_is_always_safe_so_hold_goes_ahead_on_an_ungated_queue_and_release_and_open_do_not()
    {
        let ungated = queue_gate("main", Some(&cq(json!([]))), &ours());
        let unresolved = queue_gate("gone", None, &ours());
        for gate in [&ungated, &unresolved] {
            assert_eq!(gate.refusal_for(CallKind::Hold), None, "{gate:?}");
            for kind in [CallKind::Release, CallKind::Open] {
                let why = gate.refusal_for(kind).expect("refused");
                assert!(why.contains("ClusterQueue"), "{why}");
            }
        }
        let why = ungated.refusal_for(CallKind::Release).expect("refused");
        assert!(
            why.contains("ClusterQueue main") && why.contains("spec.admissionChecksStrategy"),
            "names the queue and what to configure: {why}"
        );
        let gated = queue_gate(
            "main",
            Some(&cq(json!([{"name": "holdfast-readmission"}]))),
            &ours(),
        );
        for kind in [CallKind::Hold, CallKind::Release, CallKind::Open] {
            assert_eq!(gated.refusal_for(kind), None);
        }
    }

    fn cq(checks: Value) -> Value {
        json!({"metadata": {"name": "main"}, "spec": {"admissionChecksStrategy": {"admissionChecks": checks}}})
    }

    #[test]
    fn a_queue_is_gated_only_where_it_requires_our_check_on_every_flavor() {
        let cases = [
            (json!([{"name": "holdfast-readmission"}]), true),
            (
                json!([{"name": "provisioning"}, {"name": "holdfast-readmission", "onFlavors": []}]),
                true,
            ),
            (json!([{"name": "provisioning"}]), false),
            (
                json!([{"name": "holdfast-readmission", "onFlavors": ["gpu"]}]),
                false,
            ),
            (json!([]), false),
        ];
        for (checks, gated) in cases {
            let gate = queue_gate("main", Some(&cq(checks.clone())), &ours());
            assert_eq!(gate.is_gated(), gated, "{checks}: {gate:?}");
            if !gated {
                let why = gate.refusal().expect("a reason");
                assert!(why.contains("ClusterQueue main"), "{why}");
            }
        }
        let v1beta1 = json!({"spec": {"admissionChecks": ["holdfast-readmission"]}});
        assert!(queue_gate("main", Some(&v1beta1), &ours()).is_gated());
        assert!(matches!(
            queue_gate("gone", None, &ours()),
            QueueGate::Unresolved { .. }
        ));
        let none = queue_gate("main", Some(&cq(json!([]))), &BTreeSet::new());
        assert!(
            none.refusal()
                .is_some_and(|w| w.contains("create one with spec.controllerName")),
            "{none:?}"
        );
    }

    #[test]
    fn a_workload_is_admitted_without_flavor_only_when_no_pod_set_got_one() {
        let admitted = |assignments: Value| json!({"status": {"admission": {"clusterQueue": "cq", "podSetAssignments": assignments}}});
        assert!(admitted_without_flavor(&admitted(
            json!([{"name": "node", "count": 1}])
        )));
        assert!(admitted_without_flavor(&admitted(json!([
            {"name": "a", "flavors": {}}, {"name": "b"}
        ]))));
        assert!(!admitted_without_flavor(&admitted(json!([
            {"name": "a", "flavors": {}}, {"name": "b", "flavors": {"cpu": "default"}}
        ]))));
        assert!(!admitted_without_flavor(&json!({"status": {}})));
        assert!(!admitted_without_flavor(
            &json!({"spec": {"queueName": "q"}})
        ));
    }

    #[test]
    fn a_workload_whose_pods_request_nothing_covered_would_be_admitted_without_flavor() {
        let covered = BTreeSet::from(["cpu".to_owned(), "memory".to_owned()]);
        let workload = |containers: Value| {
            json!({"spec": {"podSets": [{"name": "node", "count": 1,
                "template": {"spec": {"containers": containers}}}]}})
        };
        let bare = workload(json!([{"name": "t"}]));
        assert!(requests_nothing_covered(&bare, &covered));
        let gpu_only =
            workload(json!([{"name": "t", "resources": {"limits": {"nvidia.com/gpu": 1}}}]));
        assert!(requests_nothing_covered(&gpu_only, &covered));
        let zero_cpu = workload(json!([{"name": "t", "resources": {"requests": {"cpu": "0"}}}]));
        assert!(
            !requests_nothing_covered(&zero_cpu, &covered),
            "a zero request still gets a flavor"
        );
        let init = json!({"spec": {"podSets": [{"name": "a", "template": {"spec": {
            "containers": [{"name": "t"}],
            "initContainers": [{"name": "i", "resources": {"requests": {"memory": "1Mi"}}}]}}}]}});
        assert!(!requests_nothing_covered(&init, &covered));
        let pods = BTreeSet::from([PODS_RESOURCE.to_owned()]);
        assert!(
            !requests_nothing_covered(&bare, &pods),
            "a queue covering pods gives every pod set a flavor"
        );
        assert!(
            !requests_nothing_covered(&json!({"spec": {}}), &covered),
            "no pod sets: nothing to judge"
        );
    }

    #[test]
    fn a_queue_covers_the_resources_of_all_its_resource_groups() {
        let cq = json!({"spec": {"resourceGroups": [
            {"coveredResources": ["cpu", "memory"], "flavors": []},
            {"coveredResources": ["nvidia.com/gpu"]},
            {"flavors": []}
        ]}});
        let names: Vec<String> = covered_resources(&cq).into_iter().collect();
        assert_eq!(names, ["cpu", "memory", "nvidia.com/gpu"]);
        assert!(covered_resources(&json!({"spec": {}})).is_empty());
    }

    #[test]
    fn the_cluster_queue_is_the_admission_s_or_the_local_queue_s() {
        let lq = |ns: &str, name: &str| {
            (ns == "team-a" && name == "main").then(|| json!({"spec": {"clusterQueue": "cq-main"}}))
        };
        let queued = json!({"metadata": {"name": "w", "namespace": "team-a"}, "spec": {"queueName": "main"}});
        assert_eq!(cluster_queue_of(&queued, lq), Ok("cq-main".to_owned()));
        let admitted = json!({"metadata": {"name": "w", "namespace": "team-a"},
            "spec": {"queueName": "main"}, "status": {"admission": {"clusterQueue": "cq-other"}}});
        assert_eq!(cluster_queue_of(&admitted, lq), Ok("cq-other".to_owned()));
        let elsewhere = json!({"metadata": {"name": "w", "namespace": "team-a"}, "spec": {"queueName": "nope"}});
        assert!(
            cluster_queue_of(&elsewhere, lq).is_err_and(|e| e.contains("LocalQueue team-a/nope"))
        );
        let unqueued = json!({"metadata": {"name": "w", "namespace": "team-a"}, "spec": {}});
        assert!(cluster_queue_of(&unqueued, lq).is_err());
    }
}
