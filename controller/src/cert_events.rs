//! The Events certificate management leaves on the Secrets it writes: a CA generated or
//! rotated, a serving certificate issued (and why). Published by the replica whose write
//! landed, so once per change.

use std::time::SystemTime;

use holdfast_certs::{AuthorityDecision, AuthorityProblem, ServingReason};

use crate::events::Notice;

const ACTION: &str = "RotateCertificate";

/// The Event of a CA written for `decision` (none for `Keep`).
pub fn authority(decision: &AuthorityDecision, not_after: SystemTime) -> Option<Notice> {
    let until = rfc3339(not_after);
    match decision {
        AuthorityDecision::Keep => None,
        AuthorityDecision::Generate(problem) => Some(Notice::normal(
            "CertificateAuthorityCreated",
            ACTION,
            format!(
                "A new webhook CA was generated ({}), valid until {until}; the caBundles and \
                 the serving certificates follow.",
                problem_text(problem)
            ),
        )),
        AuthorityDecision::Rotate => Some(Notice::normal(
            "CertificateAuthorityRotated",
            ACTION,
            format!(
                "The webhook CA neared its end and was rotated: the new one is valid until \
                 {until}; the old one stays in the trust bundle until it expires."
            ),
        )),
    }
}

/// The Event of a serving certificate issued for `reason`.
pub fn serving(reason: &ServingReason, dns_names: &[String], not_after: SystemTime) -> Notice {
    Notice::normal(
        "ServingCertificateIssued",
        ACTION,
        format!(
            "A serving certificate for {} was issued ({}), valid until {}.",
            dns_names.join(", "),
            serving_text(reason),
            rfc3339(not_after)
        ),
    )
}

fn problem_text(p: &AuthorityProblem) -> String {
    match p {
        AuthorityProblem::Missing => "there was none".to_owned(),
        AuthorityProblem::Unreadable(e) => format!("the stored one is unreadable: {e}"),
        AuthorityProblem::NotACa => "the stored certificate is not a CA".to_owned(),
        AuthorityProblem::KeyMismatch => "the stored key does not match it".to_owned(),
        AuthorityProblem::Expired => "the stored one has expired".to_owned(),
    }
}

fn serving_text(r: &ServingReason) -> &'static str {
    match r {
        ServingReason::Missing => "there was none",
        ServingReason::Unreadable => "the stored one is unreadable",
        ServingReason::KeyMismatch => "its key did not match",
        ServingReason::Expired => "the stored one had expired",
        ServingReason::Untrusted => "the stored one is signed by no CA of the trust bundle",
        ServingReason::IssuerRotated => "the CA was rotated",
        ServingReason::NamesChanged => "its names changed",
        ServingReason::Expiring => "the stored one nears its end",
    }
}

fn rfc3339(t: SystemTime) -> String {
    jiff::Timestamp::try_from(t)
        .map(holdfast_core::rfc3339::seconds)
        .unwrap_or_else(|_| "?".to_owned())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::{Duration, UNIX_EPOCH};

    #[test]
    fn ca_events_say_why_and_until_when() {
        let t = UNIX_EPOCH + Duration::from_secs(1_900_000_000);
        assert_eq!(authority(&AuthorityDecision::Keep, t), None);
        let created = authority(&AuthorityDecision::Generate(AuthorityProblem::Missing), t)
            .expect("an event");
        assert_eq!(created.reason, "CertificateAuthorityCreated");
        assert!(created.note.contains("there was none"), "{}", created.note);
        assert!(
            created.note.contains("2030-03-17T17:46:40Z"),
            "{}",
            created.note
        );
        let rotated = authority(&AuthorityDecision::Rotate, t).expect("an event");
        assert_eq!(rotated.reason, "CertificateAuthorityRotated");
        let issued = serving(&ServingReason::IssuerRotated, &["svc.ns.svc".to_owned()], t);
        assert_eq!(issued.reason, "ServingCertificateIssued");
        assert!(issued.note.contains("svc.ns.svc"), "{}", issued.note);
        assert!(
            issued.note.contains("the CA was rotated"),
            "{}",
            issued.note
        );
    }
}
