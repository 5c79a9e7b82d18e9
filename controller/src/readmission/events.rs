//! The Events the readmission gate leaves on a TrainJob: waiting at the check (naming the
//! pods it waits for), passed, and a queue without the check. Published when the gate's
//! write of the check lands — so once per change of what it says, not once per reconcile.

use holdfast_core::readmission::{
    WaitReason,
    multikueue::{Coverage, UnderMultiKueue},
};

use crate::events::Notice;

const ACTION: &str = "Readmission";

/// The check on `workload` stays Pending for `reason`; `pods`: those that remain.
pub fn waiting(workload: &str, reason: WaitReason, pods: &[String]) -> Notice {
    let pods = match (reason, pods.is_empty()) {
        (
            WaitReason::PodsRemain
            | WaitReason::WorkerUnreachable
            | WaitReason::WorkerNotConfigured
            | WaitReason::SnapshotNotCarried,
            false,
        ) => {
            format!(": {}", crate::pods::listed(pods))
        }
        _ => String::new(),
    };
    Notice::normal(
        "ReadmissionWaiting",
        ACTION,
        format!(
            "Workload {workload} is held at holdfast's readmission check, {}{pods}.",
            reason.text()
        ),
    )
}

/// The check on `workload` turned Ready for execution `attempt`.
pub fn passed(workload: &str, attempt: u64) -> Notice {
    Notice::normal(
        "ReadmissionPassed",
        ACTION,
        format!(
            "Workload {workload} passed holdfast's readmission check: no pod of the previous \
             execution remains; execution {attempt} may start."
        ),
    )
}

/// The TrainJob's Workload is in a queue whose ClusterQueue does not require the check.
pub fn queue_without_check(why: &str) -> Notice {
    Notice::warning(
        "QueueWithoutReadmissionCheck",
        ACTION,
        format!(
            "{why}. Until it does, Release and Open of this TrainJob answer Unsupported (Hold \
             goes ahead: stopping is always safe)."
        ),
    )
}

/// The check on a Workload MultiKueue copied into this (worker) cluster stays Pending:
/// `message` says why.
pub fn multikueue_copy(message: &str) -> Notice {
    Notice::warning("MultiKueueCopyPending", ACTION, format!("{message}."))
}

/// The snapshot in the worker MultiKueue dispatched the TrainJob to cannot be handed to the
/// worker's copy: `why`.
pub fn snapshot_not_adopted(why: &str) -> Notice {
    Notice::warning("MultiKueueSnapshotNotAdopted", ACTION, format!("{why}."))
}

/// The TrainJob is under MultiKueue where holdfast does not see every worker.
pub fn under_multikueue(under: &UnderMultiKueue, coverage: &Coverage) -> Notice {
    Notice::warning(
        "MultiKueueUnsupported",
        ACTION,
        format!(
            "{}. Its runtime snapshot stays in this cluster: the worker cluster that runs it \
             uses its own runtime.",
            under.refusals(coverage)
        ),
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::events::Severity;

    #[test]
    fn waiting_for_pods_names_them() {
        let pods = vec!["job-node-0-0-a".to_owned(), "job-node-0-1-b".to_owned()];
        let n = waiting("trainjob-job-1", WaitReason::PodsRemain, &pods);
        assert_eq!(
            (n.severity, n.reason),
            (Severity::Normal, "ReadmissionWaiting")
        );
        assert!(
            n.note.ends_with(": job-node-0-0-a, job-node-0-1-b."),
            "{}",
            n.note
        );
        assert!(n.note.contains("trainjob-job-1"), "{}", n.note);
        let gate = waiting("w", WaitReason::StartGate, &pods);
        assert!(
            !gate.note.contains("job-node"),
            "only a pod wait names pods: {}",
            gate.note
        );
    }

    #[test]
    fn passed_names_the_execution() {
        let n = passed("w", 2);
        assert_eq!(n.reason, "ReadmissionPassed");
        assert!(n.note.contains("execution 2 may start"), "{}", n.note);
        assert_eq!(
            queue_without_check("ClusterQueue q lacks it").severity,
            Severity::Warning
        );
    }
}
