//! Certificates for holdfast's TLS endpoints: a CA and the serving certificates it issues.
#![forbid(unsafe_code)]

pub mod authority;
mod error;
pub mod inspect;
pub mod rotation;

pub use authority::{CertificateAuthority, IssuedCertificate};
pub use error::CertError;
pub use inspect::{CertificateInfo, needs_rotation};
pub use rotation::{
    Authority, AuthorityDecision, AuthorityProblem, RotationPolicy, ServingDecision, ServingReason,
    StoredAuthority, StoredServing,
};
