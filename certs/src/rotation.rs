//! When to make a new CA or a new serving certificate: pure decisions from what a Secret
//! holds and the time, so they are tested by tables and the controller only does the I/O.
//!
//! The rules, in the order the controller applies them:
//!
//! 1. **The CA.** None, unreadable, not a CA, its key not matching, or expired: generate a
//!    new one ([`AuthorityDecision::Generate`]). At most `ca_renew_before` left (by default a
//!    third of its life): [`AuthorityDecision::Rotate`], a new CA whose predecessor stays in
//!    the trust bundle until it expires. Otherwise keep it. A change of policy alone never
//!    rotates anything: a CA made with another validity is kept until its own renewal point.
//! 2. **The trust bundle** (`caBundle` of the webhook configurations, `ca.crt` of every
//!    serving Secret): the current CA first, then every earlier CA that is still valid, so a
//!    serving certificate signed by the old CA keeps verifying while pods reload.
//! 3. **Each serving certificate.** None, unreadable, its key not matching, expired, or
//!    signed by no CA of the bundle: issue one now from the current CA. Otherwise, while the
//!    current CA is younger than `ca_settle` (it was just put into the bundle; the apiserver
//!    and clients may not have it yet), wait. Then: signed by an earlier CA, names changed, or
//!    at most `serving_renew_before` left: issue; else keep.
//!
//! [`RotationPolicy::check`] makes sure the windows fit together: a certificate waiting for
//! a new CA to settle is still valid when the wait ends, and no serving certificate can
//! outlive the CA that signed it.

use crate::authority::BACKDATE;
use crate::{CertError, CertificateAuthority, CertificateInfo, IssuedCertificate};
use std::collections::BTreeSet;
use std::net::IpAddr;
use std::time::{Duration, SystemTime};

const DAY: Duration = Duration::from_secs(24 * 3600);

/// How many CAs a trust bundle holds at most (current first). Earlier ones are also dropped
/// as soon as they expire; this bounds the bundle under a pathological policy.
pub const MAX_BUNDLE: usize = 4;

/// Lifetimes and renewal windows.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RotationPolicy {
    /// Validity of a new CA.
    pub ca_validity: Duration,
    /// A CA with at most this much left is rotated.
    pub ca_renew_before: Duration,
    /// Validity of a new serving certificate.
    pub serving_validity: Duration,
    /// A serving certificate with at most this much left is re-issued.
    pub serving_renew_before: Duration,
    /// How long a new CA is in the trust bundle before serving certificates move to it.
    pub ca_settle: Duration,
}

impl Default for RotationPolicy {
    /// A CA for three years, serving certificates for 90 days, each renewed at 2/3 of its life.
    fn default() -> Self {
        Self::from_validities(3 * 365 * DAY, 90 * DAY)
    }
}

impl RotationPolicy {
    /// Renew each at two thirds of its life; let a new CA settle for half the serving renewal
    /// window, at most an hour.
    pub fn from_validities(ca_validity: Duration, serving_validity: Duration) -> Self {
        let serving_renew_before = serving_validity / 3;
        Self {
            ca_validity,
            ca_renew_before: ca_validity / 3,
            serving_validity,
            serving_renew_before,
            ca_settle: (serving_renew_before / 2).min(Duration::from_secs(3600)),
        }
    }

    /// Whether the windows fit together (see the module documentation).
    pub fn check(&self) -> Result<(), CertError> {
        let bad = |m: String| Err(CertError::Policy(m));
        if self.serving_validity.is_zero() || self.ca_validity.is_zero() {
            return bad("validities must be positive".into());
        }
        if self.serving_renew_before >= self.serving_validity {
            return bad(format!(
                "the serving renewal window ({:?}) must be shorter than the serving validity ({:?})",
                self.serving_renew_before, self.serving_validity
            ));
        }
        if self.ca_renew_before >= self.ca_validity {
            return bad(format!(
                "the CA renewal window ({:?}) must be shorter than the CA validity ({:?})",
                self.ca_renew_before, self.ca_validity
            ));
        }
        if self.ca_settle >= self.serving_renew_before {
            return bad(format!(
                "a new CA's settling time ({:?}) must be shorter than the serving renewal window ({:?}), \
                 or a serving certificate could expire while it waits",
                self.ca_settle, self.serving_renew_before
            ));
        }
        if self.ca_renew_before < self.serving_validity + self.ca_settle {
            return bad(format!(
                "the CA renewal window ({:?}) must cover a serving certificate's validity plus the settling time ({:?}), \
                 or a serving certificate could outlive its CA",
                self.ca_renew_before,
                self.serving_validity + self.ca_settle
            ));
        }
        Ok(())
    }
}

/// The CA as a Secret holds it.
#[derive(Clone, Copy, Debug)]
pub struct StoredAuthority<'a> {
    pub cert_pem: &'a str,
    pub key_pem: &'a str,
    /// The trust bundle written last time (current and earlier CAs).
    pub bundle_pem: Option<&'a str>,
}

/// Why a new CA is generated from scratch.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum AuthorityProblem {
    Missing,
    Unreadable(String),
    NotACa,
    KeyMismatch,
    Expired,
}

/// What to do with the CA.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum AuthorityDecision {
    Keep,
    /// No usable CA: make one.
    Generate(AuthorityProblem),
    /// The CA nears its end: make a new one; the old one stays in the bundle until it expires.
    Rotate,
}

/// Decide about the stored CA at `now`.
pub fn decide_authority(
    stored: Option<&StoredAuthority<'_>>,
    now: SystemTime,
    policy: &RotationPolicy,
) -> AuthorityDecision {
    let Some(stored) = stored else {
        return AuthorityDecision::Generate(AuthorityProblem::Missing);
    };
    let info = match CertificateInfo::parse_pem(stored.cert_pem) {
        Ok(i) => i,
        Err(e) => return AuthorityDecision::Generate(AuthorityProblem::Unreadable(e.to_string())),
    };
    if !info.is_ca {
        return AuthorityDecision::Generate(AuthorityProblem::NotACa);
    }
    if !info.matches_key(stored.key_pem) {
        return AuthorityDecision::Generate(AuthorityProblem::KeyMismatch);
    }
    if !info.is_valid_at(now) {
        return AuthorityDecision::Generate(AuthorityProblem::Expired);
    }
    if info.remaining(now) <= policy.ca_renew_before {
        return AuthorityDecision::Rotate;
    }
    AuthorityDecision::Keep
}

/// The trust bundle: `current` first, then the still-valid `earlier` CAs in their order,
/// without duplicates, at most [`MAX_BUNDLE`].
pub fn trust_bundle(
    current: &CertificateInfo,
    earlier: &[CertificateInfo],
    now: SystemTime,
) -> Vec<CertificateInfo> {
    let mut out = vec![current.clone()];
    for ca in earlier {
        if out.len() >= MAX_BUNDLE {
            break;
        }
        if ca.is_ca && ca.is_valid_at(now) && !out.iter().any(|c| c.der() == ca.der()) {
            out.push(ca.clone());
        }
    }
    out
}

/// A serving certificate as a Secret holds it.
#[derive(Clone, Copy, Debug)]
pub struct StoredServing<'a> {
    pub cert_pem: &'a str,
    pub key_pem: &'a str,
}

/// Why a serving certificate is issued.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ServingReason {
    Missing,
    Unreadable,
    KeyMismatch,
    Expired,
    /// Signed by no CA of the trust bundle.
    Untrusted,
    /// Signed by an earlier CA; the current one has settled.
    IssuerRotated,
    /// Its names are not the ones wanted.
    NamesChanged,
    /// At most `serving_renew_before` left.
    Expiring,
}

/// What to do with a serving certificate.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ServingDecision {
    Keep,
    Issue(ServingReason),
    /// It is still good, but would be replaced; wait until the current CA has been in the
    /// trust bundle long enough (`until`).
    WaitForTrust {
        reason: ServingReason,
        until: SystemTime,
    },
}

/// A name as it appears in a certificate: IP addresses in canonical text, DNS names lower case.
fn canonical_name(n: &str) -> String {
    match n.parse::<IpAddr>() {
        Ok(ip) => ip.to_string(),
        Err(_) => n.to_ascii_lowercase(),
    }
}

/// When a CA was made (its `notBefore` is backdated by [`BACKDATE`]).
fn made_at(ca: &CertificateInfo) -> SystemTime {
    ca.not_before + BACKDATE
}

/// Decide about a stored serving certificate for `names`, given the current CA and the
/// trust bundle (current first).
pub fn decide_serving(
    stored: Option<&StoredServing<'_>>,
    names: &[String],
    current: &CertificateInfo,
    bundle: &[CertificateInfo],
    now: SystemTime,
    policy: &RotationPolicy,
) -> ServingDecision {
    let Some(stored) = stored else {
        return ServingDecision::Issue(ServingReason::Missing);
    };
    let Ok(info) = CertificateInfo::parse_pem(stored.cert_pem) else {
        return ServingDecision::Issue(ServingReason::Unreadable);
    };
    if !info.matches_key(stored.key_pem) {
        return ServingDecision::Issue(ServingReason::KeyMismatch);
    }
    if !info.is_valid_at(now) {
        return ServingDecision::Issue(ServingReason::Expired);
    }
    if !bundle
        .iter()
        .any(|ca| ca.is_valid_at(now) && info.is_signed_by(ca))
    {
        return ServingDecision::Issue(ServingReason::Untrusted);
    }
    let wanted: BTreeSet<String> = names.iter().map(|n| canonical_name(n)).collect();
    let have: BTreeSet<String> = info.names.iter().map(|n| canonical_name(n)).collect();
    let reason = if !info.is_signed_by(current) {
        ServingReason::IssuerRotated
    } else if wanted != have {
        ServingReason::NamesChanged
    } else if info.remaining(now) <= policy.serving_renew_before {
        ServingReason::Expiring
    } else {
        return ServingDecision::Keep;
    };
    let settled = made_at(current) + policy.ca_settle;
    if now < settled {
        ServingDecision::WaitForTrust {
            reason,
            until: settled,
        }
    } else {
        ServingDecision::Issue(reason)
    }
}

/// When the decisions about this CA and these serving certificates can next change on their
/// own, after `now`: a renewal point, the end of a settling time, or an earlier CA expiring.
/// The current CA's expiry when nothing comes sooner.
pub fn next_change(
    now: SystemTime,
    current: &CertificateInfo,
    bundle: &[CertificateInfo],
    serving: &[CertificateInfo],
    policy: &RotationPolicy,
) -> SystemTime {
    let renewal = |c: &CertificateInfo, before: Duration| {
        let life = c.not_after.duration_since(c.not_before).unwrap_or_default();
        c.not_after - before.min(life)
    };
    let mut at = vec![
        renewal(current, policy.ca_renew_before),
        made_at(current) + policy.ca_settle,
    ];
    at.extend(bundle.iter().skip(1).map(|ca| ca.not_after));
    at.extend(
        serving
            .iter()
            .map(|s| renewal(s, policy.serving_renew_before)),
    );
    at.into_iter()
        .filter(|t| *t > now)
        .min()
        .unwrap_or(current.not_after)
}

/// The CA to use from now on and the trust bundle to publish.
pub struct Authority {
    pub ca: CertificateAuthority,
    pub info: CertificateInfo,
    /// Current first.
    pub bundle: Vec<CertificateInfo>,
}

impl Authority {
    /// Apply a decision to what was stored: read the CA back, or generate a new one, and
    /// compute the bundle (earlier CAs that still verify are kept in every case).
    pub fn next(
        stored: Option<&StoredAuthority<'_>>,
        now: SystemTime,
        policy: &RotationPolicy,
        common_name: &str,
    ) -> Result<(AuthorityDecision, Authority), CertError> {
        let decision = decide_authority(stored, now, policy);
        let mut earlier: Vec<CertificateInfo> = Vec::new();
        if let Some(s) = stored {
            earlier.extend(CertificateInfo::parse_pem_all(s.cert_pem).unwrap_or_default());
            if let Some(b) = s.bundle_pem {
                earlier.extend(CertificateInfo::parse_pem_all(b).unwrap_or_default());
            }
        }
        let ca = match (&decision, stored) {
            (AuthorityDecision::Keep, Some(s)) => {
                CertificateAuthority::from_pem(s.cert_pem, s.key_pem)?
            }
            _ => CertificateAuthority::generate(common_name, policy.ca_validity)?,
        };
        let info = CertificateInfo::parse_pem(ca.cert_pem())?;
        let bundle = trust_bundle(&info, &earlier, now);
        Ok((decision, Authority { ca, info, bundle }))
    }

    /// The trust bundle as PEM, current CA first.
    pub fn bundle_pem(&self) -> String {
        self.bundle.iter().map(CertificateInfo::pem).collect()
    }

    /// A serving certificate for `names` from the current CA.
    pub fn issue(
        &self,
        names: &[String],
        policy: &RotationPolicy,
    ) -> Result<IssuedCertificate, CertError> {
        self.ca.issue_serving(names, policy.serving_validity)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const SEC: Duration = Duration::from_secs(1);
    const HOUR: Duration = Duration::from_secs(3600);

    /// Short windows: CA 12 h (renewed with 4 h left), serving 3 h (renewed with 1 h left),
    /// a new CA settles for 10 minutes.
    fn policy() -> RotationPolicy {
        let p = RotationPolicy::from_validities(12 * HOUR, 3 * HOUR);
        assert_eq!(p.ca_settle, 30 * 60 * SEC);
        RotationPolicy {
            ca_settle: 10 * 60 * SEC,
            ..p
        }
    }

    fn names() -> Vec<String> {
        vec!["hook.ns.svc".into(), "127.0.0.1".into()]
    }

    struct World {
        ca: CertificateAuthority,
        ca_info: CertificateInfo,
        leaf: IssuedCertificate,
    }

    fn world() -> World {
        let ca = CertificateAuthority::generate("ca", 12 * HOUR).expect("ca");
        let ca_info = CertificateInfo::parse_pem(ca.cert_pem()).expect("ca info");
        let leaf = ca.issue_serving(&names(), 3 * HOUR).expect("leaf");
        World { ca, ca_info, leaf }
    }

    fn stored_ca(w: &World) -> StoredAuthority<'_> {
        StoredAuthority {
            cert_pem: w.ca.cert_pem(),
            key_pem: w.ca.key_pem(),
            bundle_pem: None,
        }
    }

    #[test]
    fn default_policy_fits_together() {
        RotationPolicy::default().check().expect("default policy");
        policy().check().expect("test policy");
    }

    #[test]
    fn policies_whose_windows_do_not_fit_are_refused() {
        let p = policy();
        let cases = [
            RotationPolicy {
                serving_renew_before: p.serving_validity,
                ..p
            },
            RotationPolicy {
                ca_renew_before: p.ca_validity,
                ..p
            },
            RotationPolicy {
                ca_settle: p.serving_renew_before,
                ..p
            },
            // A serving certificate could outlive its CA.
            RotationPolicy {
                ca_renew_before: p.serving_validity,
                ..p
            },
            RotationPolicy {
                serving_validity: Duration::ZERO,
                ..p
            },
        ];
        for (i, c) in cases.iter().enumerate() {
            assert!(
                matches!(c.check(), Err(CertError::Policy(_))),
                "case {i}: {c:?}"
            );
        }
    }

    #[test]
    fn ca_decisions_by_table() {
        let w = world();
        let other = CertificateAuthority::generate("other", 12 * HOUR).expect("other");
        let now = SystemTime::now();
        let p = policy();
        let cases: Vec<(
            &str,
            Option<StoredAuthority<'_>>,
            SystemTime,
            AuthorityDecision,
        )> = vec![
            (
                "nothing stored",
                None,
                now,
                AuthorityDecision::Generate(AuthorityProblem::Missing),
            ),
            ("fresh", Some(stored_ca(&w)), now, AuthorityDecision::Keep),
            (
                "just before the renewal point",
                Some(stored_ca(&w)),
                now + 8 * HOUR - 60 * SEC,
                AuthorityDecision::Keep,
            ),
            (
                "past the renewal point",
                Some(stored_ca(&w)),
                now + 8 * HOUR + 60 * SEC,
                AuthorityDecision::Rotate,
            ),
            (
                "expired",
                Some(stored_ca(&w)),
                now + 13 * HOUR,
                AuthorityDecision::Generate(AuthorityProblem::Expired),
            ),
            (
                "another CA's key",
                Some(StoredAuthority {
                    key_pem: other.key_pem(),
                    ..stored_ca(&w)
                }),
                now,
                AuthorityDecision::Generate(AuthorityProblem::KeyMismatch),
            ),
            (
                "a serving certificate where the CA should be",
                Some(StoredAuthority {
                    cert_pem: &w.leaf.cert_pem,
                    key_pem: &w.leaf.key_pem,
                    bundle_pem: None,
                }),
                now,
                AuthorityDecision::Generate(AuthorityProblem::NotACa),
            ),
        ];
        for (what, stored, at, want) in cases {
            assert_eq!(decide_authority(stored.as_ref(), at, &p), want, "{what}");
        }
        let garbage = StoredAuthority {
            cert_pem: "garbage",
            key_pem: "",
            bundle_pem: None,
        };
        assert!(matches!(
            decide_authority(Some(&garbage), now, &p),
            AuthorityDecision::Generate(AuthorityProblem::Unreadable(_))
        ));
    }

    #[test]
    fn serving_decisions_by_table() {
        let w = world();
        let now = SystemTime::now();
        let p = policy();
        let bundle = vec![w.ca_info.clone()];
        let other = CertificateAuthority::generate("other", 12 * HOUR).expect("other");
        let foreign = other.issue_serving(&names(), 3 * HOUR).expect("foreign");
        let renamed =
            w.ca.issue_serving(&["old.ns.svc".into()], 3 * HOUR)
                .expect("renamed");
        let good = StoredServing {
            cert_pem: &w.leaf.cert_pem,
            key_pem: &w.leaf.key_pem,
        };
        // The CA was made "now"; it settles 10 minutes later.
        let settled = now + 11 * 60 * SEC;
        let cases: Vec<(&str, Option<StoredServing<'_>>, SystemTime, ServingDecision)> = vec![
            (
                "missing",
                None,
                now,
                ServingDecision::Issue(ServingReason::Missing),
            ),
            ("fresh", Some(good), settled, ServingDecision::Keep),
            (
                "fresh, CA unsettled",
                Some(good),
                now,
                ServingDecision::Keep,
            ),
            (
                "before the renewal point",
                Some(good),
                now + 2 * HOUR - 60 * SEC,
                ServingDecision::Keep,
            ),
            (
                "past the renewal point",
                Some(good),
                now + 2 * HOUR + 60 * SEC,
                ServingDecision::Issue(ServingReason::Expiring),
            ),
            (
                "expired",
                Some(good),
                now + 4 * HOUR,
                ServingDecision::Issue(ServingReason::Expired),
            ),
            (
                "key of another certificate",
                Some(StoredServing {
                    key_pem: &foreign.key_pem,
                    ..good
                }),
                now,
                ServingDecision::Issue(ServingReason::KeyMismatch),
            ),
            (
                "signed by a CA outside the bundle",
                Some(StoredServing {
                    cert_pem: &foreign.cert_pem,
                    key_pem: &foreign.key_pem,
                }),
                now,
                ServingDecision::Issue(ServingReason::Untrusted),
            ),
            (
                "names changed",
                Some(StoredServing {
                    cert_pem: &renamed.cert_pem,
                    key_pem: &renamed.key_pem,
                }),
                settled,
                ServingDecision::Issue(ServingReason::NamesChanged),
            ),
            (
                "garbage",
                Some(StoredServing {
                    cert_pem: "x",
                    key_pem: "y",
                }),
                now,
                ServingDecision::Issue(ServingReason::Unreadable),
            ),
        ];
        for (what, stored, at, want) in cases {
            assert_eq!(
                decide_serving(stored.as_ref(), &names(), &w.ca_info, &bundle, at, &p),
                want,
                "{what}"
            );
        }
    }

    #[test]
    fn names_compare_as_sets_in_canonical_form() {
        let w = world();
        let p = policy();
        let good = StoredServing {
            cert_pem: &w.leaf.cert_pem,
            key_pem: &w.leaf.key_pem,
        };
        let reordered = vec!["127.0.0.1".to_string(), "HOOK.ns.svc".to_string()];
        let d = decide_serving(
            Some(&good),
            &reordered,
            &w.ca_info,
            std::slice::from_ref(&w.ca_info),
            SystemTime::now() + HOUR,
            &p,
        );
        assert_eq!(d, ServingDecision::Keep);
    }

    #[test]
    fn ca_rotation_keeps_the_old_ca_trusted_and_moves_serving_certificates_after_settling() {
        let w = world();
        let p = policy();
        let start = SystemTime::now();
        // Past the CA's renewal point: a new CA, the old one still in the bundle.
        let at = start + 8 * HOUR + 60 * SEC;
        let (decision, next) = Authority::next(Some(&stored_ca(&w)), at, &p, "ca").expect("next");
        assert_eq!(decision, AuthorityDecision::Rotate);
        assert_ne!(next.info, w.ca_info);
        assert_eq!(next.bundle.len(), 2);
        assert_eq!(next.bundle[0], next.info);
        assert_eq!(next.bundle[1], w.ca_info);
        let pem = next.bundle_pem();
        assert_eq!(
            CertificateInfo::parse_pem_all(&pem).expect("bundle").len(),
            2
        );

        // A serving certificate of the old CA, renewed just before: it verifies against the
        // bundle; it waits for the new CA to settle (made "now", in real time), then moves.
        let leaf = w.ca.issue_serving(&names(), 3 * HOUR).expect("leaf");
        let stored = StoredServing {
            cert_pem: &leaf.cert_pem,
            key_pem: &leaf.key_pem,
        };
        let now = SystemTime::now();
        match decide_serving(Some(&stored), &names(), &next.info, &next.bundle, now, &p) {
            ServingDecision::WaitForTrust {
                reason: ServingReason::IssuerRotated,
                until,
            } => {
                assert!(until > now && until <= now + p.ca_settle, "{until:?}");
            }
            d => panic!("expected a wait, got {d:?}"),
        }
        let later = now + p.ca_settle + SEC;
        assert_eq!(
            decide_serving(Some(&stored), &names(), &next.info, &next.bundle, later, &p),
            ServingDecision::Issue(ServingReason::IssuerRotated)
        );
        let fresh = next.issue(&names(), &p).expect("issue");
        let fresh = StoredServing {
            cert_pem: &fresh.cert_pem,
            key_pem: &fresh.key_pem,
        };
        assert_eq!(
            decide_serving(Some(&fresh), &names(), &next.info, &next.bundle, later, &p),
            ServingDecision::Keep
        );
    }

    #[test]
    fn the_bundle_carries_earlier_cas_until_they_expire() {
        let w = world();
        let p = policy();
        let newer = CertificateAuthority::generate("newer", 12 * HOUR).expect("newer");
        let bundle = format!("{}{}", newer.cert_pem(), w.ca.cert_pem());
        let stored = StoredAuthority {
            cert_pem: newer.cert_pem(),
            key_pem: newer.key_pem(),
            bundle_pem: Some(&bundle),
        };
        let now = SystemTime::now();
        let (d, a) = Authority::next(Some(&stored), now, &p, "ca").expect("keep");
        assert_eq!(d, AuthorityDecision::Keep);
        assert_eq!(a.bundle.len(), 2, "the earlier CA is still valid");
        assert_eq!(
            a.info.pem(),
            CertificateInfo::parse_pem(newer.cert_pem())
                .expect("p")
                .pem()
        );
        // Both made at about the same time: at 7 h both are valid and not yet renewable.
        let (_, a) = Authority::next(Some(&stored), now + 7 * HOUR, &p, "ca").expect("keep");
        assert_eq!(a.bundle.len(), 2);
        // An expired earlier CA is dropped (the current one is rotated by then too).
        let expired_bundle =
            trust_bundle(&a.info, std::slice::from_ref(&w.ca_info), now + 13 * HOUR);
        assert_eq!(expired_bundle.len(), 1);
    }

    #[test]
    fn generating_after_a_lost_key_keeps_the_old_certificate_trusted() {
        let w = world();
        let other = CertificateAuthority::generate("other", HOUR).expect("other");
        let stored = StoredAuthority {
            key_pem: other.key_pem(),
            ..stored_ca(&w)
        };
        let (d, a) =
            Authority::next(Some(&stored), SystemTime::now(), &policy(), "ca").expect("next");
        assert_eq!(
            d,
            AuthorityDecision::Generate(AuthorityProblem::KeyMismatch)
        );
        assert_eq!(
            a.bundle.len(),
            2,
            "leaves of the old CA still verify while they are replaced"
        );
    }

    #[test]
    fn the_bundle_is_bounded() {
        let now = SystemTime::now();
        let cas: Vec<CertificateInfo> = (0..6)
            .map(|i| {
                let ca = CertificateAuthority::generate(&format!("ca{i}"), HOUR).expect("ca");
                CertificateInfo::parse_pem(ca.cert_pem()).expect("info")
            })
            .collect();
        let b = trust_bundle(&cas[0], &cas, now);
        assert_eq!(b.len(), MAX_BUNDLE);
        assert_eq!(b[0], cas[0]);
    }

    #[test]
    fn next_change_is_the_earliest_renewal_point() {
        let w = world();
        let p = policy();
        let leaf = CertificateInfo::parse_pem(&w.leaf.cert_pem).expect("leaf");
        let now = SystemTime::now();
        let bundle = [w.ca_info.clone()];
        let at = next_change(now, &w.ca_info, &bundle, std::slice::from_ref(&leaf), &p);
        // The CA settles first (10 minutes after it was made).
        assert_eq!(at, w.ca_info.not_before + BACKDATE + p.ca_settle);
        // Once it has settled, the serving certificate's renewal point is next.
        let later = next_change(
            now + HOUR,
            &w.ca_info,
            &bundle,
            std::slice::from_ref(&leaf),
            &p,
        );
        assert_eq!(later, leaf.not_after - p.serving_renew_before);
        // Past every renewal point but the CA's expiry.
        let last = next_change(now + 11 * HOUR, &w.ca_info, &bundle, &[leaf], &p);
        assert_eq!(last, w.ca_info.not_after);
    }
}
