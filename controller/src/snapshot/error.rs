//! Why a snapshot reconciliation did not finish, or the reconciler could not run.

use holdfast_cluster::runtime_kinds::KindError;
use holdfast_core::snapshot::{RuntimeRef, SnapshotError, SnapshotFault};

/// What went wrong. Every variant has a bounded [`Error::metric_label`].
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// A request to the apiserver failed.
    #[error("kubernetes API request failed: {0}")]
    Kube(#[from] kube::Error),
    /// The runtime the TrainJob references does not exist (yet).
    #[error("the runtime {0} does not exist")]
    RuntimeNotFound(RuntimeRef),
    /// The cluster serves no such runtime kind (discovery found none).
    #[error("the cluster serves no kind {kind:?} in API group {group:?}")]
    KindNotServed { group: String, kind: String },
    /// The runtimeRef names a kind that is not a runtime (not Trainer's, not listed by the
    /// operator): it is never read nor watched.
    #[error("{message}")]
    NotARuntime {
        group: String,
        kind: String,
        message: String,
    },
    /// Discovery itself failed.
    #[error("API discovery of group {group:?} failed: {source}")]
    Discovery {
        group: String,
        #[source]
        source: kube::Error,
    },
    /// A watch has not listed its objects in time.
    #[error("the watch of {what} has not synced within {seconds}s")]
    NotSynced { what: String, seconds: u64 },
    /// The snapshot could not be rendered or built; nothing was written.
    #[error(transparent)]
    Snapshot(#[from] SnapshotError),
    /// An existing snapshot ConfigMap is not trusted; it was left as it is.
    #[error(transparent)]
    Fault(#[from] SnapshotFault),
    /// An object could not be converted (a bug, not an input problem).
    #[error("converting an object failed: {0}")]
    Convert(#[from] serde_json::Error),
    /// The reconciler is not running (a standby replica, or before start-up).
    #[error("the snapshot reconciler is not running on this replica")]
    NotRunning,
    /// Another drift computation is running (one at a time).
    #[error("another drift computation is running")]
    Busy,
}

impl From<KindError> for Error {
    fn from(e: KindError) -> Self {
        match e {
            KindError::NotARuntime {
                group,
                kind,
                message,
            } => Error::NotARuntime {
                group,
                kind,
                message,
            },
            KindError::NotServed { group, kind } => Error::KindNotServed { group, kind },
            KindError::Discovery { group, source } => Error::Discovery { group, source },
        }
    }
}

impl Error {
    /// A bounded label for metrics: never an object name.
    /// The apiserver refused the request for lack of permission (RBAC's 403).
    pub fn is_forbidden(&self) -> bool {
        matches!(self, Error::Kube(kube::Error::Api(s)) if s.code == 403)
    }

    pub fn metric_label(&self) -> &'static str {
        match self {
            Error::Kube(kube::Error::Api(s)) if s.code == 409 => "conflict",
            Error::Kube(kube::Error::Api(s)) if s.code == 403 => "forbidden",
            Error::Kube(_) => "api",
            Error::RuntimeNotFound(_) => "runtime_not_found",
            Error::KindNotServed { .. } => "kind_not_served",
            Error::NotARuntime { .. } => "not_a_runtime",
            Error::Discovery { .. } => "discovery",
            Error::NotSynced { .. } => "not_synced",
            Error::Snapshot(e) => e.metric_label(),
            Error::Fault(f) => f.metric_label(),
            Error::Convert(_) => "convert",
            Error::NotRunning => "not_running",
            Error::Busy => "busy",
        }
    }
}
