//! The Kubernetes Events the reconciler publishes on TrainJobs: Warnings for what an admin
//! must look at, and two Normals — snapshot taken, snapshot adopted from Kubeflow Trainer.
//! All go through the bounded [`Publisher`]: under the start-up migration of many TrainJobs
//! the Normals beyond its queue are dropped (counted), so they never double the reconciler's
//! writes.

use holdfast_core::snapshot::{RuntimeRef, SnapshotError, SnapshotFault};
use k8s_openapi::api::core::v1::ObjectReference;

use crate::events::{Notice as Event, Publisher};

/// Events' `action`.
const ACTION: &str = "Snapshot";

/// Something about a TrainJob's snapshot an admin should see.
#[derive(Debug)]
pub enum SnapshotWarning<'a> {
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
    /// The runtimes of the kind cannot be read: their watch does not list (an object of the
    /// kind that does not decode, such as one nested past 128 levels).
    RuntimeUnreadable {
        runtime: &'a RuntimeRef,
        why: &'a str,
    },
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

impl SnapshotWarning<'_> {
    /// The Event's reason (bounded, PascalCase).
    pub fn reason(&self) -> &'static str {
        match self {
            SnapshotWarning::Squatted { .. } => "SnapshotNameTaken",
            SnapshotWarning::Invalid { .. } => "SnapshotInvalid",
            SnapshotWarning::Altered { .. } => "SnapshotAltered",
            SnapshotWarning::RuntimeNotFound { .. } => "RuntimeNotFound",
            SnapshotWarning::KindNotServed { .. } => "RuntimeKindNotServed",
            SnapshotWarning::RuntimeUnreadable { .. } => "RuntimeUnreadable",
            SnapshotWarning::NotARuntime { .. } => "NotARuntimeKind",
            SnapshotWarning::Unsnapshottable {
                error: SnapshotError::TooLarge { .. },
            } => "SnapshotTooLarge",
            SnapshotWarning::Unsnapshottable {
                error: SnapshotError::TooDeep { .. },
            } => "SnapshotTooDeep",
            SnapshotWarning::Unsnapshottable { .. } => "SnapshotFailed",
            SnapshotWarning::AdmissionRace { .. } => "RuntimeChangedSinceAdmission",
        }
    }

    /// The Event's note.
    pub fn note(&self) -> String {
        match self {
            SnapshotWarning::Squatted { configmap, fault } => format!(
                "ConfigMap {configmap} is not this TrainJob's runtime snapshot ({fault}); it is \
                 neither used nor overwritten. Delete or rename it to let the snapshot be taken."
            ),
            SnapshotWarning::Invalid { configmap, fault } => format!(
                "ConfigMap {configmap} is owned by this TrainJob but is not a usable snapshot: \
                 {fault}. It is left as it is."
            ),
            SnapshotWarning::Altered { configmap } => format!(
                "ConfigMap {configmap}'s runtime data no longer matches the SHA-256 recorded \
                 when it was written: it was changed past the admission webhook."
            ),
            SnapshotWarning::RuntimeNotFound { runtime } => format!(
                "The runtime {runtime} does not exist; no snapshot is taken until it does \
                 (retrying with backoff)."
            ),
            SnapshotWarning::KindNotServed { runtime } => format!(
                "The cluster serves no kind {} in API group {:?} (runtime {runtime}); \
                 retrying with backoff.",
                runtime.kind, runtime.api_group
            ),
            SnapshotWarning::NotARuntime { runtime, why } => {
                format!("runtimeRef {runtime} is not snapshotted: {why}.")
            }
            SnapshotWarning::RuntimeUnreadable { runtime, why } => format!(
                "The runtime {runtime} cannot be read, so no snapshot is taken: {why}. An \
                 object of its kind that does not decode (one nested deeper than 128 levels) \
                 stops the whole kind's watch; fix or delete it. Retrying with backoff."
            ),
            SnapshotWarning::Unsnapshottable { error } => format!(
                "The runtime cannot be snapshotted: {error}. Nothing was written; the \
                 TrainJob is reconciled again when the runtime changes."
            ),
            SnapshotWarning::AdmissionRace {
                runtime,
                admitted,
                snapshotted,
            } => format!(
                "The snapshot holds {runtime} at resourceVersion {snapshotted}, but the \
                 TrainJob was admitted against resourceVersion {admitted}: the runtime changed \
                 in between (kubeflow/trainer#3975). Check the snapshot before the job runs."
            ),
        }
    }
}

/// Logs `notice` and queues it as a Warning Event on the TrainJob (never waits).
pub fn warn(events: &Publisher, trainjob: &ObjectReference, notice: SnapshotWarning<'_>) {
    let reason = notice.reason();
    let note = notice.note();
    tracing::warn!(
        namespace = trainjob.namespace.as_deref().unwrap_or_default(),
        trainjob = trainjob.name.as_deref().unwrap_or_default(),
        reason,
        "{note}"
    );
    events.publish(trainjob, Event::warning(reason, ACTION, note));
}

/// The Normal Event of a snapshot holdfast wrote.
pub fn taken(runtime: &RuntimeRef, resource_version: &str, configmap: &str) -> Event {
    Event::normal(
        "SnapshotTaken",
        ACTION,
        format!(
            "Runtime {runtime} at resourceVersion {resource_version} copied into ConfigMap \
             {configmap}; the TrainJob keeps this configuration whatever the runtime becomes."
        ),
    )
}

/// The Normal Event of a snapshot Kubeflow Trainer wrote, checked and accepted.
pub fn adopted(runtime: &RuntimeRef, configmap: &str) -> Event {
    Event::normal(
        "SnapshotAdopted",
        ACTION,
        format!(
            "ConfigMap {configmap}, written by Kubeflow Trainer, holds runtime {runtime} as \
             Trainer's reader expects: adopted as this TrainJob's snapshot, unchanged."
        ),
    )
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
        let notice = SnapshotWarning::Unsnapshottable { error: &error };
        assert_eq!(notice.reason(), "SnapshotTooLarge");
        assert!(notice.note().contains("2000000 bytes"), "{}", notice.note());
    }

    #[test]
    fn taken_and_adopted_are_normal_and_name_the_configmap() {
        let runtime = RuntimeRef {
            api_group: "trainer.kubeflow.org".into(),
            kind: "ClusterTrainingRuntime".into(),
            name: "torch".into(),
        };
        let t = taken(&runtime, "42", "job-runtime-snapshot");
        assert_eq!(
            (t.severity, t.reason),
            (crate::events::Severity::Normal, "SnapshotTaken")
        );
        assert!(t.note.contains("resourceVersion 42"), "{}", t.note);
        assert!(t.note.contains("job-runtime-snapshot"), "{}", t.note);
        let a = adopted(&runtime, "job-runtime-snapshot");
        assert_eq!(a.reason, "SnapshotAdopted");
        assert!(a.note.contains("Kubeflow Trainer"), "{}", a.note);
    }
}
