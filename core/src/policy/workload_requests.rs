//! Kueue mode: a TrainJob's Workload whose pods request nothing its ClusterQueue covers.
//!
//! Kueue runs a ClusterQueue's AdmissionChecks by the flavors it assigns at admission (v0.19
//! `AdmissionChecksForWorkload`: the checks whose flavors meet the admission's), and it
//! assigns a pod set a flavor only for a resource the ClusterQueue covers (`pods` counts
//! when the queue covers it). A Workload none of whose pods requests such a resource is
//! admitted with no flavor, so with no check at all: past holdfast's readmission gate — the
//! start gate and the wait for the previous execution's pods. The webhook refuses such a
//! Workload when Kueue creates it (or changes its pod sets or queue) in a ClusterQueue that
//! requires the gate, with a message saying how to give the pods a request. Refusing the creation,
//! not the admission, keeps Kueue's retries on its reconciler's backoff: a refused admission
//! is requeued at once and retried in a tight loop.
//!
//! Kueue creates a Workload with its pods' templates as written, and adjusts a copy each
//! time it queues it: a limit stands in for a missing request, and the namespace's
//! LimitRanges default a container's missing requests. A limit is in the Workload, which
//! Kueue keeps its pod sets immutable in, so it counts here. A LimitRange default does not:
//! whoever may edit the namespace's LimitRanges could delete it after the Workload was
//! admitted once, and Kueue would admit it the next time (after a hold's release) with no
//! flavor, past the gate. So what a Workload requests, here, is every resource its
//! containers, init containers, pod-level resources and overhead request or limit. Also left
//! out: a RuntimeClass's overhead, and Kueue's `resources.excludeResourcePrefixes` and
//! `quotaCheckStrategy: IgnoreUndeclared`, which can drop a request counted here.

use super::fields;
use super::object::{Doc, Object, POD_SETS};
use super::rules::Rule;
use super::{AdmissionInput, Operation, QueueProblem, Resource, Verdict};
use crate::mode::Mode;
use serde_json::Value;
use std::collections::BTreeSet;

pub use crate::readmission::queues::PODS_RESOURCE;

/// A TrainJob's Workload whose requests the webhook checks against its ClusterQueue.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RequestsCheck {
    pub namespace: String,
    /// Its LocalQueue (`spec.queueName`).
    pub local_queue: String,
    /// Every resource name a pod of the Workload requests or limits (containers, init
    /// containers, pod-level resources, overhead), zero quantities included, and `pods`.
    pub requested: BTreeSet<String>,
}

/// Kueue mode: whether `input` creates a queued TrainJob's Workload (one with a TrainJob
/// controller ownerReference and a `spec.queueName`), or changes such a Workload's pod sets
/// or queue, or makes a Workload a TrainJob's (Kueue adopting a prebuilt one), and what its
/// pods request. A Workload without a queue is not checked: no
/// ClusterQueue admits it until one is set, and setting one is checked.
pub fn requests_check(input: &AdmissionInput, mode: Mode) -> Option<RequestsCheck> {
    if mode != Mode::Kueue || input.resource != Resource::Workload || input.subresource.is_some() {
        return None;
    }
    let n = Doc::of(input.object.as_ref()).object()?;
    let queue = fields::workload_queue(n)
        .and_then(Value::as_str)
        .filter(|q| !q.is_empty())?;
    // Kueue's schema requires pod sets; without them there is nothing to check (and the
    // configuration's match conditions do not send it).
    if !fields::trainjob_owners(n)
        .iter()
        .any(|(_, controller)| *controller)
        || !n.get(POD_SETS).is_some_and(Value::is_array)
    {
        return None;
    }
    match input.operation {
        Operation::Create => {}
        Operation::Update => {
            let o = Doc::of(input.old_object.as_ref()).object()?;
            // Adopted: Kueue makes a prebuilt Workload the TrainJob's by adding the owner.
            let adopted = !fields::trainjob_owners(o)
                .iter()
                .any(|(_, controller)| *controller);
            if !adopted
                && o.get(POD_SETS) == n.get(POD_SETS)
                && fields::workload_queue(o) == fields::workload_queue(n)
            {
                return None;
            }
        }
        Operation::Delete | Operation::Connect => return None,
    }
    Some(RequestsCheck {
        namespace: input.namespace.clone().unwrap_or_default(),
        local_queue: queue.to_owned(),
        requested: requested_resources(n),
    })
}

/// The resource names a Workload's pods request or limit, and `pods`.
fn requested_resources(workload: Object<'_>) -> BTreeSet<String> {
    let pod_sets = workload.get(POD_SETS).and_then(Value::as_array);
    crate::readmission::queues::pod_sets_requests(pod_sets.map(Vec::as_slice).unwrap_or_default())
}

/// The verdict on a Workload [`requests_check`] named. `problem` is why its ClusterQueue
/// does not require holdfast's gate (`None`: it does), `covered` the resources that
/// ClusterQueue covers. Refused when the queue requires the gate and no requested resource
/// is covered (Kueue would admit it past the gate), and when the queue cannot be resolved
/// (nothing proves the Workload would get a flavor; Kueue retries the creation).
pub fn requests_verdict(
    input: &AdmissionInput,
    check: &RequestsCheck,
    problem: Option<QueueProblem<'_>>,
    covered: &BTreeSet<String>,
) -> Verdict {
    let why = match problem {
        Some(QueueProblem::Ungated(_)) => return Verdict::Allow,
        Some(QueueProblem::Unresolved(why)) => format!(
            "the webhook cannot tell whether its ClusterQueue would assign it a flavor ({why}); retry"
        ),
        None if check.requested.iter().any(|r| covered.contains(r)) => return Verdict::Allow,
        None => format!(
            "its pods request none of the resources its ClusterQueue covers ({}; they request: {}), so Kueue would admit it with no flavor and skip the ClusterQueue's AdmissionChecks, holdfast's readmission gate among them; give the runtime's containers resource requests (a LimitRange default is not enough: Kueue reads it again at every admission, and it can be deleted)",
            list(covered),
            list(&check.requested),
        ),
    };
    Verdict::deny(
        Rule::WorkloadRequests,
        "spec.podSets",
        format!(
            "spec.podSets of Workload {}: {why} (user {})",
            input.object_ref(),
            input.user.username
        ),
    )
}

fn list(names: &BTreeSet<String>) -> String {
    if names.is_empty() {
        return "none".to_owned();
    }
    names.iter().cloned().collect::<Vec<_>>().join(", ")
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;
    use crate::policy::testkit::*;
    use serde_json::json;

    fn owned(pod_sets: Value) -> Value {
        with(&wl(&[], None), |w| {
            w["metadata"]["ownerReferences"] = json!([{
                "apiVersion": "trainer.kubeflow.org/v1alpha1", "kind": "TrainJob",
                "name": "mnist", "uid": "u1", "controller": true
            }]);
            w["spec"]["podSets"] = pod_sets;
        })
    }

    fn pod_set(containers: Value) -> Value {
        json!([{"name": "node", "count": 2, "template": {"spec": {"containers": containers}}}])
    }

    fn bare() -> Value {
        owned(pod_set(json!([{"name": "node", "image": "x"}])))
    }

    fn create(w: &Value) -> AdmissionInput {
        input(Resource::Workload, Operation::Create, KUEUE, None, Some(w))
    }

    fn covered(names: &[&str]) -> BTreeSet<String> {
        names.iter().map(|n| (*n).to_owned()).collect()
    }

    #[test]
    fn a_trainjobs_workload_is_checked_only_in_kueue_mode_at_create_or_when_its_pod_sets_change() {
        let w = bare();
        assert!(requests_check(&create(&w), Mode::Kueue).is_some());
        assert!(requests_check(&create(&w), Mode::Plain).is_none());
        // Not a TrainJob's (no controller owner, or a TrainJob owner that is not the controller).
        assert!(requests_check(&create(&wl(&[], None)), Mode::Kueue).is_none());
        let no_pod_sets = with(&w, |w| {
            w["spec"]
                .as_object_mut()
                .unwrap()
                .retain(|k, _| k != "podSets")
        });
        assert!(requests_check(&create(&no_pod_sets), Mode::Kueue).is_none());
        let not_controller = with(&w, |w| {
            w["metadata"]["ownerReferences"][0]["controller"] = json!(false)
        });
        assert!(requests_check(&create(&not_controller), Mode::Kueue).is_none());
        // An UPDATE leaving the pod sets alone (Kueue's own label or condition writes).
        let relabelled = with(&w, |w| w["metadata"]["labels"] = json!({"a": "b"}));
        let update = input(
            Resource::Workload,
            Operation::Update,
            KUEUE,
            Some(&w),
            Some(&relabelled),
        );
        assert!(requests_check(&update, Mode::Kueue).is_none());
        let requesting = owned(pod_set(
            json!([{"name": "node", "resources": {"requests": {"cpu": "1"}}}]),
        ));
        let changed = input(
            Resource::Workload,
            Operation::Update,
            KUEUE,
            Some(&requesting),
            Some(&w),
        );
        assert!(requests_check(&changed, Mode::Kueue).is_some());
        let moved = with(&w, |w| w["spec"]["queueName"] = json!("other"));
        let moved = input(
            Resource::Workload,
            Operation::Update,
            KUEUE,
            Some(&w),
            Some(&moved),
        );
        let check = requests_check(&moved, Mode::Kueue).unwrap();
        assert_eq!(
            (check.namespace.as_str(), check.local_queue.as_str()),
            ("team-a", "other")
        );
        // Not queued: no ClusterQueue admits it.
        // Adopted: a prebuilt Workload made the TrainJob's.
        let prebuilt = with(&w, |w| w["metadata"]["ownerReferences"] = json!([]));
        let adopted = input(
            Resource::Workload,
            Operation::Update,
            KUEUE,
            Some(&prebuilt),
            Some(&w),
        );
        assert!(requests_check(&adopted, Mode::Kueue).is_some());
        let unqueued = with(&w, |w| w["spec"]["queueName"] = json!(""));
        assert!(requests_check(&create(&unqueued), Mode::Kueue).is_none());
        let mut status = create(&w);
        status.subresource = Some("status".to_owned());
        assert!(requests_check(&status, Mode::Kueue).is_none());
    }

    #[test]
    fn what_a_workload_requests_is_every_request_limit_and_overhead_name_and_pods() {
        let w = owned(json!([
            {"name": "a", "template": {"spec": {
                "initContainers": [{"name": "i", "resources": {"requests": {"memory": "1Gi"}}}],
                "containers": [{"name": "c", "resources": {"limits": {"example.com/gpu": "1"}}}],
            }}},
            {"name": "b", "template": {"spec": {
                "overhead": {"cpu": "10m"},
                "resources": {"requests": {"hugepages-2Mi": "2Mi"}},
                "containers": [{"name": "c", "resources": {"requests": {"ephemeral-storage": "1"}}}],
            }}}
        ]));
        let check = requests_check(&create(&w), Mode::Kueue).unwrap();
        // Kueue counts a limit as the request it stands in for.
        assert_eq!(
            check.requested,
            covered(&[
                "cpu",
                "ephemeral-storage",
                "example.com/gpu",
                "hugepages-2Mi",
                "memory",
                "pods"
            ])
        );
        assert_eq!(
            requests_check(&create(&bare()), Mode::Kueue)
                .unwrap()
                .requested,
            covered(&["pods"])
        );
    }

    #[test]
    fn a_workload_that_would_get_no_flavor_in_a_gated_queue_is_refused_with_how_to_fix_it() {
        let i = create(&bare());
        let check = requests_check(&i, Mode::Kueue).unwrap();
        let Verdict::Deny { field, message, .. } =
            requests_verdict(&i, &check, None, &covered(&["cpu", "memory"]))
        else {
            panic!("allowed a Workload that Kueue would admit with no flavor");
        };
        assert_eq!(field, "spec.podSets");
        for part in [
            "cpu, memory",
            "request: pods",
            "resource requests",
            KUEUE,
            "readmission gate",
        ] {
            assert!(message.contains(part), "{part:?} missing from {message}");
        }
    }

    #[test]
    fn a_covered_request_an_ungated_queue_or_a_queue_counting_pods_lets_it_through() {
        let i = create(&bare());
        let check = requests_check(&i, Mode::Kueue).unwrap();
        // The ClusterQueue counts pods: every pod set gets a flavor.
        assert!(requests_verdict(&i, &check, None, &covered(&["cpu", "pods"])).is_allowed());
        // Not holdfast's queue: nothing to skip.
        let ungated = Some(QueueProblem::Ungated("no check"));
        assert!(requests_verdict(&i, &check, ungated, &covered(&["cpu"])).is_allowed());
        // A covered request.
        let cpu = owned(pod_set(
            json!([{"name": "node", "resources": {"requests": {"cpu": "0"}}}]),
        ));
        let i = create(&cpu);
        let check = requests_check(&i, Mode::Kueue).unwrap();
        assert!(requests_verdict(&i, &check, None, &covered(&["cpu"])).is_allowed());
    }

    #[test]
    fn a_limit_counts_as_a_request() {
        let limited = owned(pod_set(
            json!([{"name": "node", "resources": {"limits": {"memory": "1Gi"}}}]),
        ));
        let i = create(&limited);
        let check = requests_check(&i, Mode::Kueue).unwrap();
        assert!(requests_verdict(&i, &check, None, &covered(&["cpu", "memory"])).is_allowed());
    }

    #[test]
    fn an_unresolved_queue_is_refused_with_its_reason() {
        let i = create(&bare());
        let check = requests_check(&i, Mode::Kueue).unwrap();
        let unresolved = Some(QueueProblem::Unresolved(
            "LocalQueue team-a/q does not exist",
        ));
        let Verdict::Deny { message, .. } = requests_verdict(&i, &check, unresolved, &covered(&[]))
        else {
            panic!("allowed");
        };
        assert!(
            message.contains("LocalQueue team-a/q does not exist"),
            "{message}"
        );
    }
}
