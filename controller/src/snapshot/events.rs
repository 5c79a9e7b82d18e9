//! The Kubernetes Events the reconciler publishes on TrainJobs. Only Warnings: a snapshot
//! taken as expected is logged, not announced (an Event per TrainJob would double the writes
//! the reconciler makes).

use holdfast_core::snapshot::{RuntimeRef, SnapshotError, SnapshotFault};
use k8s_openapi::api::core::v1::ObjectReference;
use kube::runtime::events::{Event, EventType, Recorder};

/// Events' `action`.
const ACTION: &str = "Snapshot";

/// Kubernetes bounds an Event's note to 1 kB.
const MAX_NOTE: usize = 1000;

/// Something about a TrainJob's snapshot an admin should see.
#[derive(Debug)]
pub enum Notice<'a> {
    /// A ConfigMap of the snapshot's name is not controlled by this TrainJob.
    Squatted {
        configmap: &'a str,
        fault: &'a SnapshotFault,
    },
    /// The ConfigMap is the TrainJob's but does not hold its runtime.
    Invalid {
        configmap: &'a str,
        fault: &'a SnapshotFault,
    },
    /// The snapshot's data no longer matches the digest holdfast recorded.
    Altered { configmap: &'a str },
    /// The referenced runtime does not exist.
    RuntimeNotFound { runtime: &'a RuntimeRef },
    /// The cluster serves no such runtime kind.
    KindNotServed { runtime: &'a RuntimeRef },
    /// The runtimeRef names a kind that is not a runtime holdfast reads.
    NotARuntime {
        runtime: &'a RuntimeRef,
        why: &'a str,
    },
    /// The TrainJob's runtimeRef, or the runtime, cannot be snapshotted (too large, ...).
    Unsnapshottable { error: &'a SnapshotError },
    /// The snapshot copied another runtime version than the TrainJob was admitted against.
    AdmissionRace {
        runtime: &'a RuntimeRef,
        admitted: &'a str,
        snapshotted: &'a str,
    },
}

impl Notice<'_> {
    /// The Event's reason (bounded, PascalCase).
    pub fn reason(&self) -> &'static str {
        match self {
            Notice::Squatted { .. } => "SnapshotNameTaken",
            Notice::Invalid { .. } => "SnapshotInvalid",
            Notice::Altered { .. } => "SnapshotAltered",
            Notice::RuntimeNotFound { .. } => "RuntimeNotFound",
            Notice::KindNotServed { .. } => "RuntimeKindNotServed",
            Notice::NotARuntime { .. } => "NotARuntimeKind",
            Notice::Unsnapshottable {
                error: SnapshotError::TooLarge { .. },
            } => "SnapshotTooLarge",
            Notice::Unsnapshottable { .. } => "SnapshotFailed",
            Notice::AdmissionRace { .. } => "RuntimeChangedSinceAdmission",
        }
    }

    /// The Event's note.
    pub fn note(&self) -> String {
        let text = match self {
            Notice::Squatted { configmap, fault } => format!(
                "ConfigMap {configmap} is not this TrainJob's runtime snapshot ({fault}); it is \
                 neither used nor overwritten. Delete or rename it to let the snapshot be taken."
            ),
            Notice::Invalid { configmap, fault } => format!(
                "ConfigMap {configmap} is owned by this TrainJob but is not a usable snapshot: \
                 {fault}. It is left as it is."
            ),
            Notice::Altered { configmap } => format!(
                "ConfigMap {configmap}'s runtime data no longer matches the SHA-256 recorded \
                 when it was written: it was changed past the admission webhook."
            ),
            Notice::RuntimeNotFound { runtime } => format!(
                "The runtime {runtime} does not exist; no snapshot is taken until it does \
                 (retrying with backoff)."
            ),
            Notice::KindNotServed { runtime } => format!(
                "The cluster serves no kind {} in API group {:?} (runtime {runtime}); \
                 retrying with backoff.",
                runtime.kind, runtime.api_group
            ),
            Notice::NotARuntime { runtime, why } => {
                format!("runtimeRef {runtime} is not snapshotted: {why}.")
            }
            Notice::Unsnapshottable { error } => format!(
                "The runtime cannot be snapshotted: {error}. Nothing was written; the \
                 TrainJob is reconciled again when the runtime changes."
            ),
            Notice::AdmissionRace {
                runtime,
                admitted,
                snapshotted,
            } => format!(
                "The snapshot holds {runtime} at resourceVersion {snapshotted}, but the \
                 TrainJob was admitted against resourceVersion {admitted}: the runtime changed \
                 in between (kubeflow/trainer#3975). Check the snapshot before the job runs."
            ),
        };
        truncate(text)
    }
}

/// Publishes `notice` on the TrainJob; a failure to publish is logged, never fatal.
pub async fn warn(recorder: &Recorder, trainjob: &ObjectReference, notice: Notice<'_>) {
    let reason = notice.reason();
    let note = notice.note();
    tracing::warn!(
        namespace = trainjob.namespace.as_deref().unwrap_or_default(),
        trainjob = trainjob.name.as_deref().unwrap_or_default(),
        reason,
        "{note}"
    );
    let event = Event {
        type_: EventType::Warning,
        reason: reason.to_owned(),
        note: Some(note),
        action: ACTION.to_owned(),
        secondary: None,
    };
    if let Err(e) = recorder.publish(&event, trainjob).await {
        tracing::warn!(reason, error = %e, "publishing an event failed");
    }
}

fn truncate(mut text: String) -> String {
    if text.len() > MAX_NOTE {
        let mut cut = MAX_NOTE - 3;
        while !text.is_char_boundary(cut) {
            cut -= 1;
        }
        text.truncate(cut);
        text.push_str("...");
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reasons_are_bounded_and_too_large_has_its_own() {
        let error = SnapshotError::TooLarge {
            bytes: 2_000_000,
            limit: 1_048_576,
        };
        let notice = Notice::Unsnapshottable { error: &error };
        assert_eq!(notice.reason(), "SnapshotTooLarge");
        assert!(notice.note().contains("2000000 bytes"), "{}", notice.note());
    }

    #[test]
    fn long_notes_are_cut_on_a_char_boundary() {
        let cut = truncate("é".repeat(800));
        assert!(cut.len() <= MAX_NOTE);
        assert!(cut.ends_with("..."));
    }
}
