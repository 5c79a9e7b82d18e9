//! Why a readmission reconcile did not finish.

use holdfast_core::hold::ApplyError;

/// What went wrong. Every variant has a bounded [`Error::metric_label`].
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// A request to the apiserver failed.
    #[error("kubernetes API request failed: {0}")]
    Kube(#[from] kube::Error),
    /// A decided write could not be rendered on the object read (a malformed object).
    #[error("the object read cannot take the write: {0}")]
    Apply(#[from] ApplyError),
    /// An object could not be converted (a bug, not an input problem).
    #[error("converting an object failed: {0}")]
    Convert(#[from] serde_json::Error),
    /// Writes kept conflicting with other writers; the TrainJob is retried later.
    #[error("gave up after {0} conflicting writes; retrying later")]
    Contended(u32),
}

impl Error {
    /// A bounded label for metrics: never an object name.
    pub fn metric_label(&self) -> &'static str {
        match self {
            Error::Kube(kube::Error::Api(s)) if s.code == 409 => "conflict",
            Error::Kube(kube::Error::Api(s)) if s.code == 403 => "forbidden",
            Error::Kube(kube::Error::Api(s)) if s.code == 422 => "invalid",
            Error::Kube(_) => "api",
            Error::Apply(_) => "malformed_object",
            Error::Convert(_) => "convert",
            Error::Contended(_) => "contended",
        }
    }

    /// Whether this is the apiserver refusing a write whose precondition failed (409) or
    /// whose object is gone (404): read again and decide again.
    pub fn is_stale(&self) -> bool {
        matches!(self, Error::Kube(kube::Error::Api(s)) if s.code == 409 || s.code == 404)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn api(code: u16) -> Error {
        Error::Kube(kube::Error::Api(Box::new(kube::core::Status {
            code,
            ..Default::default()
        })))
    }

    #[test]
    fn labels_are_bounded_and_staleness_is_409_or_404() {
        assert_eq!(api(409).metric_label(), "conflict");
        assert_eq!(api(500).metric_label(), "api");
        assert!(api(409).is_stale());
        assert!(api(404).is_stale());
        assert!(!api(500).is_stale());
        assert_eq!(Error::Contended(8).metric_label(), "contended");
    }
}
