//! The start gate's snapshot check: Open never lets a managed TrainJob start without its
//! runtime snapshot, or the job would run from the live runtime, unprotected from its edits.

use super::SnapshotError;

/// What Open found at a TrainJob's snapshot name.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum SnapshotPresence {
    /// A ConfigMap controlled by this TrainJob: its snapshot.
    Present,
    /// No ConfigMap.
    Absent,
    /// A ConfigMap that is not controlled by this TrainJob (`SnapshotNameTaken`).
    NameTaken,
}

/// Whether the runtime of a TrainJob that has no snapshot can be snapshotted at all.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Snapshottable {
    /// It renders to a snapshot the apiserver accepts: the reconciler will write it.
    Yes,
    /// It cannot be snapshotted (too large, too deep, ...): nothing will be written until the
    /// runtime changes.
    No(SnapshotError),
    /// Not known (the runtime is missing, its kind is not served, or it could not be read):
    /// the reconciler retries it, and so does Open.
    Unknown,
}

/// What Open does about the snapshot.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum OpenGate {
    /// The snapshot is there (or the job is not held at a start gate): go ahead.
    Go,
    /// The snapshot has not been written yet: wait for it, within the call's deadline.
    Wait { why: String },
    /// It never will be, as things stand: refuse, saying what to fix.
    Refuse { why: &'static str, reason: String },
}

/// The start gate's decision about the snapshot of TrainJob `job` (`namespace/name`).
/// `snapshottable` is asked only when no snapshot exists.
pub fn open_gate(
    job: &str,
    managed: bool,
    presence: &SnapshotPresence,
    snapshottable: impl FnOnce() -> Snapshottable,
) -> OpenGate {
    if !managed {
        return OpenGate::Go;
    }
    let name = crate::names::snapshot_name(job.rsplit('/').next().unwrap_or(job));
    match presence {
        SnapshotPresence::Present => OpenGate::Go,
        SnapshotPresence::NameTaken => OpenGate::Refuse {
            why: "name_taken",
            reason: format!(
                "TrainJob {job} has no runtime snapshot: the ConfigMap {name} is not controlled by it (SnapshotNameTaken), so it cannot get one. Opening it would run it from the live runtime; delete or rename that ConfigMap, then Open again"
            ),
        },
        SnapshotPresence::Absent => match snapshottable() {
            Snapshottable::No(error) => OpenGate::Refuse {
                why: error.metric_label(),
                reason: format!(
                    "TrainJob {job} has no runtime snapshot and cannot get one: {error} ({}). Opening it would run it from the live runtime; make the runtime fit (or point the TrainJob at one that does), then Open again",
                    unsnapshottable_reason(&error)
                ),
            },
            Snapshottable::Yes | Snapshottable::Unknown => OpenGate::Wait {
                why: format!(
                    "TrainJob {job} has no runtime snapshot yet ({name} is not written); Open again once it is"
                ),
            },
        },
    }
}

/// The Warning Event the snapshot reconciler raises for a runtime it cannot snapshot.
pub fn unsnapshottable_reason(error: &SnapshotError) -> &'static str {
    match error {
        SnapshotError::TooLarge { .. } => "SnapshotTooLarge",
        SnapshotError::TooDeep { .. } => "SnapshotTooDeep",
        _ => "SnapshotFailed",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn too_large() -> SnapshotError {
        SnapshotError::TooLarge {
            bytes: 1_500_000,
            limit: 1_048_576,
        }
    }

    #[test]
    fn open_refuses_a_managed_job_whose_runtime_is_too_large_to_snapshot() {
        let gate = open_gate("team-a/big", true, &SnapshotPresence::Absent, || {
            Snapshottable::No(too_large())
        });
        let OpenGate::Refuse { why, reason } = gate else {
            panic!("{gate:?}")
        };
        assert_eq!(why, "too_large");
        assert!(
            reason.contains("SnapshotTooLarge")
                && reason.contains("1500000")
                && reason.contains("team-a/big")
                && reason.contains("live runtime"),
            "{reason}"
        );
    }

    #[test]
    fn open_waits_for_a_snapshot_not_written_yet() {
        for runtime in [Snapshottable::Yes, Snapshottable::Unknown] {
            let gate = open_gate("team-a/mnist", true, &SnapshotPresence::Absent, || runtime);
            assert!(
                matches!(&gate, OpenGate::Wait { why } if why.contains("mnist-runtime-snapshot")),
                "{gate:?}"
            );
        }
    }

    #[test]
    fn open_refuses_a_managed_job_whose_snapshot_name_is_taken() {
        let gate = open_gate("team-a/mnist", true, &SnapshotPresence::NameTaken, || {
            panic!("not asked")
        });
        assert!(
            matches!(&gate, OpenGate::Refuse { why: "name_taken", reason } if reason.contains("SnapshotNameTaken")),
            "{gate:?}"
        );
    }

    #[test]
    fn open_goes_ahead_with_a_snapshot_or_for_an_unmanaged_job() {
        let never = || -> Snapshottable { panic!("not asked") };
        assert_eq!(
            open_gate("a/b", true, &SnapshotPresence::Present, never),
            OpenGate::Go
        );
        assert_eq!(
            open_gate("a/b", false, &SnapshotPresence::Absent, never),
            OpenGate::Go
        );
    }
}
