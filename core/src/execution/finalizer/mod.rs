//! "Gone" means the processes, not the pod object: the execution finalizer.
//!
//! A pod object can vanish while its containers still run: force-deleted
//! (`--grace-period=0 --force`), deleted by pod GC after its Node object is deleted or by the
//! `node.kubernetes.io/out-of-service` taint, while its node is unreachable and its kubelet
//! cannot kill anything. So the controller puts `holdfast.dev/execution` on every pod of a
//! TrainJob's execution once it is bound to a node (a pod never bound ran nothing), and takes
//! it off a pod being deleted only when its processes are provably gone:
//!
//! - **the kubelet confirmed it**: every container of the pod's spec has a status, and every
//!   status the pod reports is `terminated` (no init or ephemeral container running or
//!   waiting either): the kubelet writes a terminated status only after the container exited;
//! - **its node was fenced** after the pod was created: someone allowed to attested (the hold
//!   API's `fence`) that every process on that node had ended at that moment.
//!
//! Until then the pod stays (Terminating), so it counts as remaining wherever an execution's
//! pods are counted: Release answers `PodsRemain` and the readmission gate waits.

use std::collections::BTreeMap;

use jiff::Timestamp;

use crate::rfc3339;
use serde_json::Value;

/// The finalizer holdfast keeps on an execution's pods until their processes are gone.
pub const EXECUTION_FINALIZER: &str = "holdfast.dev/execution";

/// The fenced nodes: each node's latest fence.
pub type Fences = BTreeMap<String, Timestamp>;

/// What to do with a pod's finalizer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Step {
    /// Put it on: a bound, running pod of an execution.
    Add,
    /// Take it off: the pod is being deleted and its processes are gone.
    Remove(Gone),
    /// Leave the pod as it is.
    Keep,
}

/// How a pod's processes are known to be gone.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Gone {
    /// It was never bound to a node: it ran nothing.
    NeverBound,
    /// The kubelet reported every container terminated.
    KubeletConfirmed,
    /// Its node was fenced after the pod was created.
    Fenced,
}

impl Gone {
    pub fn as_str(self) -> &'static str {
        match self {
            Gone::NeverBound => "never_bound",
            Gone::KubeletConfirmed => "kubelet_confirmed",
            Gone::Fenced => "fenced",
        }
    }
}

/// The step for `pod` (JSON), which is an execution's pod if `of_an_execution`.
pub fn step(pod: &Value, of_an_execution: bool, fences: &Fences) -> Step {
    let deleting = pod
        .pointer("/metadata/deletionTimestamp")
        .is_some_and(|t| !t.is_null());
    if !carries(pod) {
        let bound = node(pod).is_some();
        let finished = matches!(
            pod.pointer("/status/phase").and_then(Value::as_str),
            Some("Succeeded" | "Failed")
        );
        return if of_an_execution && bound && !deleting && !finished {
            Step::Add
        } else {
            Step::Keep
        };
    }
    if !deleting {
        return Step::Keep;
    }
    // Never bound to a node: it ran nothing (the finalizer came from elsewhere).
    if node(pod).is_none() {
        return Step::Remove(Gone::NeverBound);
    }
    if kubelet_confirmed(pod) {
        return Step::Remove(Gone::KubeletConfirmed);
    }
    if fenced(pod, fences) {
        return Step::Remove(Gone::Fenced);
    }
    Step::Keep
}

/// Whether `pod` carries the execution finalizer.
pub fn carries(pod: &Value) -> bool {
    pod.pointer("/metadata/finalizers")
        .and_then(Value::as_array)
        .is_some_and(|f| f.iter().any(|f| f.as_str() == Some(EXECUTION_FINALIZER)))
}

/// The node `pod` is bound to.
pub fn node(pod: &Value) -> Option<&str> {
    pod.pointer("/spec/nodeName")
        .and_then(Value::as_str)
        .filter(|n| !n.is_empty())
}

/// The field manager the kubelet writes pod statuses as.
pub const KUBELET_MANAGER: &str = "kubelet";

/// Whether the kubelet has confirmed that none of `pod`'s containers runs, or ever will:
///
/// - **it made the pod terminal**: the kubelet itself (the field manager owning
///   `status.phase`, through the status subresource) wrote `Succeeded` or `Failed`, which it
///   does only once every container has stopped and it will start none again (a pod being
///   deleted is made terminal before the kubelet's final delete); and no container is
///   reported running. Pod GC also writes `Failed`, but as another manager, so that is no
///   confirmation; or
/// - **`restartPolicy: Never`, and every container has ended**: every container of the spec
///   has a status, each `terminated`, and no init or ephemeral container runs. With another
///   restart policy a terminated container may be started again, so this alone is not
///   enough.
pub fn kubelet_confirmed(pod: &Value) -> bool {
    let statuses = |key: &str| {
        pod.pointer(&format!("/status/{key}"))
            .and_then(Value::as_array)
            .map(Vec::as_slice)
            .unwrap_or_default()
    };
    let all: Vec<&Value> = [
        "containerStatuses",
        "initContainerStatuses",
        "ephemeralContainerStatuses",
    ]
    .into_iter()
    .flat_map(|k| statuses(k).iter())
    .collect();
    let running = |s: &Value| s.pointer("/state/running").is_some_and(Value::is_object);
    if all.iter().any(|s| running(s)) {
        return false;
    }
    if terminal_by_kubelet(pod) {
        return true;
    }
    let terminated = |s: &Value| s.pointer("/state/terminated").is_some_and(Value::is_object);
    let containers = pod
        .pointer("/spec/containers")
        .and_then(Value::as_array)
        .map_or(0, Vec::len);
    let regular = statuses("containerStatuses");
    pod.pointer("/spec/restartPolicy").and_then(Value::as_str) == Some("Never")
        && containers > 0
        && regular.len() >= containers
        && regular.iter().all(terminated)
        && statuses("initContainerStatuses")
            .iter()
            .all(terminated_or_never_started)
        && statuses("ephemeralContainerStatuses")
            .iter()
            .all(terminated_or_never_started)
}

/// Whether `pod`'s phase is terminal and the kubelet wrote it (the manager that owns
/// `status.phase` in `managedFields`, writing through the status subresource).
fn terminal_by_kubelet(pod: &Value) -> bool {
    let terminal = matches!(
        pod.pointer("/status/phase").and_then(Value::as_str),
        Some("Succeeded" | "Failed")
    );
    terminal
        && pod
            .pointer("/metadata/managedFields")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .filter(|m| m.pointer("/fieldsV1/f:status/f:phase").is_some())
            .all(|m| {
                m.get("manager").and_then(Value::as_str) == Some(KUBELET_MANAGER)
                    && m.get("subresource").and_then(Value::as_str) == Some("status")
            })
        && pod
            .pointer("/metadata/managedFields")
            .and_then(Value::as_array)
            .is_some_and(|m| {
                m.iter()
                    .any(|m| m.pointer("/fieldsV1/f:status/f:phase").is_some())
            })
}

/// An init or ephemeral container that ended, or that never started (waiting with no
/// earlier run): one that ran earlier or runs now has `terminated` or `running` somewhere.
fn terminated_or_never_started(s: &Value) -> bool {
    let terminated = s.pointer("/state/terminated").is_some_and(Value::is_object);
    let waiting = s.pointer("/state/waiting").is_some_and(Value::is_object);
    let ran_before = s
        .pointer("/lastState/running")
        .is_some_and(Value::is_object)
        || s.pointer("/lastState/terminated")
            .is_some_and(Value::is_object);
    terminated || (waiting && !ran_before)
}

/// Whether a fence of `pod`'s node covers it: the fence came after the pod was created and
/// after every start of its containers the pod reports (a container started again after the
/// fence, on a node that came back, is a process the fence says nothing of).
pub fn fenced(pod: &Value, fences: &Fences) -> bool {
    let (Some(node), Some(created)) = (
        node(pod),
        pod.pointer("/metadata/creationTimestamp")
            .and_then(Value::as_str)
            .and_then(|t| rfc3339::parse(t).ok()),
    ) else {
        return false;
    };
    let Some(fence) = fences.get(node) else {
        return false;
    };
    *fence >= created && latest_start(pod).is_none_or(|started| *fence >= started)
}

/// The latest container start `pod` reports (any container, this run or the last).
fn latest_start(pod: &Value) -> Option<Timestamp> {
    [
        "containerStatuses",
        "initContainerStatuses",
        "ephemeralContainerStatuses",
    ]
    .into_iter()
    .filter_map(|k| {
        pod.pointer(&format!("/status/{k}"))
            .and_then(Value::as_array)
    })
    .flatten()
    .flat_map(|s| {
        [
            "/state/running/startedAt",
            "/state/terminated/startedAt",
            "/lastState/running/startedAt",
            "/lastState/terminated/startedAt",
        ]
        .into_iter()
        .filter_map(|p| s.pointer(p).and_then(Value::as_str))
    })
    .filter_map(|t| rfc3339::parse(t).ok())
    .max()
}

/// How far ahead of `now` a fence may be dated (clock skew between replicas): a fence
/// dated later attests the future, which nobody can, and is no fence.
pub const FENCE_SKEW: jiff::SignedDuration = jiff::SignedDuration::from_secs(60);

/// The fences as the fences ConfigMap's `data` holds them: node name → RFC 3339 time. An
/// entry that does not parse, or is dated after `now` (beyond [`FENCE_SKEW`]), is no fence
/// (and is named in the second list).
pub fn read_fences(
    data: Option<&BTreeMap<String, String>>,
    now: Timestamp,
) -> (Fences, Vec<String>) {
    let mut fences = Fences::new();
    let mut unreadable = Vec::new();
    let latest = now.saturating_add(FENCE_SKEW).unwrap_or(now);
    for (node, at) in data.into_iter().flatten() {
        match rfc3339::parse(at) {
            Ok(at) if at <= latest => {
                fences.insert(node.clone(), at);
            }
            _ => unreadable.push(node.clone()),
        }
    }
    (fences, unreadable)
}

#[cfg(test)]
mod tests;
