//! What goes wrong reading a TrainJob's runtime reference or its snapshot.

use std::fmt;

/// Which part of a snapshot's runtime identity disagrees with the TrainJob.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum RefField {
    /// The group of the YAML's `apiVersion` against `spec.runtimeRef.apiGroup`.
    ApiGroup,
    /// The YAML's `kind` against `spec.runtimeRef.kind`.
    Kind,
    /// The YAML's `metadata.name` against `spec.runtimeRef.name`.
    Name,
    /// The YAML's `metadata.namespace` against the TrainJob's namespace (holdfast's check:
    /// a runtime reference carries no namespace, so a namespaced runtime is the TrainJob's).
    Namespace,
}

impl fmt::Display for RefField {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            RefField::ApiGroup => "apiVersion group",
            RefField::Kind => "kind",
            RefField::Name => "metadata.name",
            RefField::Namespace => "metadata.namespace",
        })
    }
}

/// Why a snapshot could not be rendered or its ConfigMap built. Nothing has been written.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum SnapshotError {
    /// A field the snapshot needs is absent.
    #[error("the {object} has no {field}")]
    MissingField {
        object: &'static str,
        field: &'static str,
    },
    /// A field has the wrong JSON type.
    #[error("the {object}'s {field} is not {expected}")]
    InvalidField {
        object: &'static str,
        field: &'static str,
        expected: &'static str,
    },
    /// The rendered runtime is not the one the TrainJob references: a snapshot of it would be
    /// refused by every reader, so it is never written.
    #[error(
        "the runtime is not the one spec.runtimeRef names: its {field} is {found:?}, expected {expected:?}"
    )]
    WrongRuntime {
        field: RefField,
        expected: String,
        found: String,
    },
    /// The YAML serializer failed.
    #[error("rendering the runtime as YAML failed: {0}")]
    Yaml(String),
    /// The apiserver would refuse the ConfigMap: its data may hold at most `limit` bytes.
    #[error("the runtime snapshot is {bytes} bytes; a ConfigMap's data holds at most {limit}")]
    TooLarge { bytes: usize, limit: usize },
    /// The runtime nests deeper than a snapshot may be read back
    /// ([`super::bounds::MAX_DEPTH`]): a snapshot of it would be refused by holdfast's reader.
    #[error(
        "the runtime nests more than {limit} levels deep; a snapshot holds at most {limit} levels"
    )]
    TooDeep { limit: usize },
}

impl SnapshotError {
    /// A bounded label for metrics.
    pub fn metric_label(&self) -> &'static str {
        match self {
            SnapshotError::MissingField { .. } => "missing_field",
            SnapshotError::InvalidField { .. } => "invalid_field",
            SnapshotError::WrongRuntime { .. } => "wrong_runtime",
            SnapshotError::Yaml(_) => "yaml",
            SnapshotError::TooLarge { .. } => "too_large",
            SnapshotError::TooDeep { .. } => "too_deep",
        }
    }
}

/// Why an existing snapshot ConfigMap is not trusted as the TrainJob's runtime. It is never
/// overwritten either: the caller reports it (Warning event, metric) and leaves it be.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum SnapshotFault {
    /// The ConfigMap's controller ownerReference is not this TrainJob (or there is none).
    #[error(
        "the ConfigMap is not controlled by this TrainJob (controller uid: {}); it is not trusted",
        owner.as_deref().unwrap_or("none")
    )]
    Squatted { owner: Option<String> },
    /// No `runtime` data key, or YAML that does not decode to an object.
    #[error("the snapshot is malformed: {reason}")]
    Malformed { reason: String },
    /// The YAML holds another runtime than `spec.runtimeRef` names.
    #[error("the snapshot holds another runtime: its {field} is {found:?}, expected {expected:?}")]
    Mismatch {
        field: RefField,
        expected: String,
        found: String,
    },
    /// The TrainJob itself lacks what the check needs (uid, runtimeRef).
    #[error("the TrainJob cannot be checked against: {0}")]
    TrainJob(#[source] SnapshotError),
}

impl SnapshotFault {
    /// A bounded label for metrics.
    pub fn metric_label(&self) -> &'static str {
        match self {
            SnapshotFault::Squatted { .. } => "squatted",
            SnapshotFault::Malformed { .. } => "malformed",
            SnapshotFault::Mismatch { .. } => "mismatch",
            SnapshotFault::TrainJob(_) => "trainjob_invalid",
        }
    }
}
