//! The names of SPEC.md: labels, annotations and object names other programs depend on.

/// Prefix of every label and annotation of ours.
pub const PREFIX: &str = "holdfast.dev/";

/// Suffix of a TrainJob's runtime snapshot ConfigMap (KEP-2599).
pub const SNAPSHOT_SUFFIX: &str = "-runtime-snapshot";
/// The ConfigMap data key holding the runtime YAML.
pub const SNAPSHOT_DATA_KEY: &str = "runtime";
/// Label marking a snapshot ConfigMap.
pub const LABEL_RUNTIME_SNAPSHOT: &str = "holdfast.dev/runtime-snapshot";

/// Provenance of what was copied into a snapshot.
pub const ANN_RUNTIME_UID: &str = "holdfast.dev/runtime-uid";
pub const ANN_RUNTIME_RESOURCE_VERSION: &str = "holdfast.dev/runtime-resource-version";
pub const ANN_RUNTIME_GENERATION: &str = "holdfast.dev/runtime-generation";
pub const ANN_RUNTIME_SHA256: &str = "holdfast.dev/runtime-sha256";
/// On a copy of a manager's snapshot that holdfast writes into a MultiKueue worker: the uid of
/// the manager's TrainJob whose snapshot it is.
pub const ANN_ORIGIN_TRAINJOB_UID: &str = "holdfast.dev/origin-trainjob-uid";

/// The hold's instance number (decimal u64); its presence is the hold.
pub const ANN_HOLD_INSTANCE: &str = "holdfast.dev/hold-instance";
pub const ANN_HOLD_REASON: &str = "holdfast.dev/hold-reason";
pub const ANN_HOLD_PLACED_AT: &str = "holdfast.dev/hold-placed-at";
/// Who placed the hold in force: the authenticated username of the caller whose Hold wrote it
/// (TokenReview's `user.username`). Only that username may release it or replace it with
/// another instance, unless the caller may override (`create` on `holdfast.dev`
/// `trainjobs/override`). Absent on a hold placed before holdfast recorded holders: such a
/// hold is released or replaced by any caller allowed the call, as before.
pub const ANN_HOLD_HOLDER: &str = "holdfast.dev/hold-holder";
/// What stopped the held object before the hold was placed, if anything did: written with the
/// hold, read by Release, which leaves such an object stopped. Plain mode: `suspended` (an
/// opened TrainJob someone else suspended). Kueue mode: Kueue's own deactivation reason
/// (e.g. `DeactivatedDueToRequeuingLimitExceeded`), or `inactive` for a Workload someone
/// else deactivated. Absent when the object was running (or at its start gate).
pub const ANN_HOLD_FOUND: &str = "holdfast.dev/hold-found";
/// Prefix shared by every hold annotation.
pub const HOLD_ANNOTATION_PREFIX: &str = "holdfast.dev/hold-";
/// Kueue mode: on a terminating held Workload, the name of the Workload its hold is being
/// transferred to. Written by the readmission controller before it copies the hold, so that
/// a hold call decided on an older read of the terminating Workload fails its precondition.
pub const ANN_HOLD_TRANSFER_TO: &str = "holdfast.dev/hold-transfer-to";
/// Kueue mode: on a TrainJob, the mark of a hold placed on its Workload
/// (`instance=N deadline=RFC3339`), written before the Workload is deactivated and removed
/// after it is released. The webhook refuses to unsuspend a TrainJob whose stored version
/// carries it, so no unsuspend judged on a read from before the hold can be stored after it
/// (`hold::mark`). Not `hold-instance`: on a TrainJob in kueue mode that names a plain-mode
/// hold.
pub const ANN_HOLD_MARK: &str = "holdfast.dev/hold-mark";
/// Kueue mode: the finalizer a held Workload carries, added and removed in the same update
/// as the hold. A held Workload that is deleted (by Kueue replacing it, or by a user) stays,
/// terminating and still held, until its hold is transferred to the replacement or released.
pub const HOLD_FINALIZER: &str = "holdfast.dev/hold";
/// The start gate was opened.
pub const ANN_OPENED: &str = "holdfast.dev/opened";
/// A: the execution counter.
pub const ANN_ATTEMPT: &str = "holdfast.dev/attempt";
/// The runtime's resourceVersion when the TrainJob was admitted.
pub const ANN_ADMITTED_RUNTIME_RESOURCE_VERSION: &str =
    "holdfast.dev/admitted-runtime-resource-version";
/// Label: the TrainJob is under dispatch's control.
pub const LABEL_MANAGED: &str = "holdfast.dev/managed";

/// The Kueue AdmissionCheck controller name of the readmission gate.
pub const READMISSION_CONTROLLER: &str = "holdfast.dev/readmission";

/// Kubeflow Trainer's API group and version.
pub const TRAINER_GROUP: &str = "trainer.kubeflow.org";
pub const TRAINER_VERSION: &str = "v1alpha1";
pub const TRAINJOB_KIND: &str = "TrainJob";
pub const CLUSTER_TRAINING_RUNTIME_KIND: &str = "ClusterTrainingRuntime";
pub const TRAINING_RUNTIME_KIND: &str = "TrainingRuntime";

/// Kueue's API group.
pub const KUEUE_GROUP: &str = "kueue.x-k8s.io";
/// Kueue's queue label on a job: a TrainJob carrying it (non-empty) is managed by Kueue, with
/// Kueue's default `manageJobsWithoutQueueName: false`.
pub const QUEUE_NAME_LABEL: &str = "kueue.x-k8s.io/queue-name";
/// Kueue's label on a Workload naming its job by uid: an index (ownership is the controller
/// ownerReference), which on a TrainJob's Workload only Kueue may set.
pub const JOB_UID_LABEL: &str = "kueue.x-k8s.io/job-uid";
/// Kueue's label (or annotation) naming a prebuilt Workload a job is to adopt: Kueue makes
/// the job the controller of the Workload it names and lets go of any other.
pub const PREBUILT_WORKLOAD_LABEL: &str = "kueue.x-k8s.io/prebuilt-workload-name";
/// Kueue's MultiKueue AdmissionCheck controller (`spec.controllerName`), and the
/// `spec.managedBy` Kueue's webhook gives a job queued in a ClusterQueue that lists such a
/// check (Kueue v0.19 `MultiKueueControllerName`).
pub const MULTIKUEUE_CONTROLLER: &str = "kueue.x-k8s.io/multikueue";
/// Kueue's label on the copies MultiKueue creates in a worker cluster (the remote Workload
/// and the remote job), naming the manager they came from (`MultiKueueOriginLabel`).
pub const MULTIKUEUE_ORIGIN_LABEL: &str = "kueue.x-k8s.io/multikueue-origin";

/// The name of a TrainJob's snapshot ConfigMap.
pub fn snapshot_name(trainjob: &str) -> String {
    format!("{trainjob}{SNAPSHOT_SUFFIX}")
}

/// Whether an annotation key is one only the controller may write on a held object or TrainJob.
pub fn is_controller_annotation(key: &str) -> bool {
    key.starts_with(HOLD_ANNOTATION_PREFIX)
        || key == ANN_OPENED
        || key == ANN_ATTEMPT
        || key == ANN_ADMITTED_RUNTIME_RESOURCE_VERSION
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn snapshot_name_is_the_kep_name() {
        assert_eq!(snapshot_name("mnist"), "mnist-runtime-snapshot");
    }

    #[test]
    fn controller_annotations_are_recognised() {
        for k in [
            ANN_HOLD_INSTANCE,
            ANN_HOLD_REASON,
            ANN_HOLD_PLACED_AT,
            ANN_HOLD_HOLDER,
            ANN_OPENED,
            ANN_ATTEMPT,
        ] {
            assert!(is_controller_annotation(k), "{k}");
        }
        assert!(!is_controller_annotation("holdfast.dev/managed"));
        assert!(!is_controller_annotation("example.com/hold-instance"));
    }
}
