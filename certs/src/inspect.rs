//! Reading certificates back: validity, names, issuer, and whether a key belongs to one.

use crate::CertError;
use std::collections::BTreeSet;
use std::net::IpAddr;
use std::time::{Duration, SystemTime, UNIX_EPOCH};
use x509_parser::prelude::{FromDer, GeneralName, X509Certificate};

/// What rotation needs to know about one certificate.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CertificateInfo {
    der: Vec<u8>,
    pub not_before: SystemTime,
    pub not_after: SystemTime,
    pub is_ca: bool,
    /// DNS names and IP addresses (as text) of the subjectAltName extension.
    pub names: BTreeSet<String>,
}

fn time(t: i64) -> SystemTime {
    match u64::try_from(t) {
        Ok(secs) => UNIX_EPOCH + Duration::from_secs(secs),
        Err(_) => UNIX_EPOCH,
    }
}

fn ip_text(bytes: &[u8]) -> Option<String> {
    match bytes.len() {
        4 => <[u8; 4]>::try_from(bytes)
            .ok()
            .map(|b| IpAddr::from(b).to_string()),
        16 => <[u8; 16]>::try_from(bytes)
            .ok()
            .map(|b| IpAddr::from(b).to_string()),
        _ => None,
    }
}

fn parse_der(der: &[u8]) -> Result<X509Certificate<'_>, CertError> {
    match X509Certificate::from_der(der) {
        Ok((_, cert)) => Ok(cert),
        Err(e) => Err(CertError::Pem(format!("not an X.509 certificate: {e}"))),
    }
}

impl CertificateInfo {
    /// Parse one DER certificate.
    pub fn from_der(der: &[u8]) -> Result<Self, CertError> {
        let cert = parse_der(der)?;
        let validity = cert.validity();
        let mut names = BTreeSet::new();
        if let Ok(Some(san)) = cert.subject_alternative_name() {
            for n in &san.value.general_names {
                match n {
                    GeneralName::DNSName(d) => {
                        names.insert((*d).to_owned());
                    }
                    GeneralName::IPAddress(ip) => {
                        if let Some(t) = ip_text(ip) {
                            names.insert(t);
                        }
                    }
                    _ => {}
                }
            }
        }
        Ok(Self {
            der: der.to_vec(),
            not_before: time(validity.not_before.timestamp()),
            not_after: time(validity.not_after.timestamp()),
            is_ca: cert.is_ca(),
            names,
        })
    }

    /// Every certificate in a PEM text, in order. Other PEM blocks (keys) are skipped;
    /// no certificate at all is an error.
    pub fn parse_pem_all(pem_text: &str) -> Result<Vec<Self>, CertError> {
        let blocks = pem::parse_many(pem_text).map_err(|e| CertError::Pem(e.to_string()))?;
        let certs = blocks
            .iter()
            .filter(|b| b.tag() == "CERTIFICATE")
            .map(|b| Self::from_der(b.contents()))
            .collect::<Result<Vec<_>, _>>()?;
        if certs.is_empty() {
            return Err(CertError::NoCertificate);
        }
        Ok(certs)
    }

    /// The first certificate of a PEM text (the end entity of a chain).
    pub fn parse_pem(pem_text: &str) -> Result<Self, CertError> {
        Self::parse_pem_all(pem_text)?
            .into_iter()
            .next()
            .ok_or(CertError::NoCertificate)
    }

    /// The certificate as DER.
    pub fn der(&self) -> &[u8] {
        &self.der
    }

    /// The certificate as one PEM block (LF line endings).
    pub fn pem(&self) -> String {
        let block = pem::Pem::new("CERTIFICATE", self.der.clone());
        pem::encode_config(
            &block,
            pem::EncodeConfig::new().set_line_ending(pem::LineEnding::LF),
        )
    }

    /// Time left before it expires; zero once expired.
    pub fn remaining(&self, now: SystemTime) -> Duration {
        self.not_after.duration_since(now).unwrap_or(Duration::ZERO)
    }

    /// Whether `now` is inside its validity period.
    pub fn is_valid_at(&self, now: SystemTime) -> bool {
        self.not_before <= now && now < self.not_after
    }

    /// Whether `issuer`'s key signed this certificate (the signature verifies).
    pub fn is_signed_by(&self, issuer: &CertificateInfo) -> bool {
        let (Ok(cert), Ok(ca)) = (parse_der(&self.der), parse_der(&issuer.der)) else {
            return false;
        };
        cert.verify_signature(Some(ca.public_key())).is_ok()
    }

    /// Whether the private key (PEM) is this certificate's.
    pub fn matches_key(&self, key_pem: &str) -> bool {
        let (Ok(cert), Ok(key)) = (parse_der(&self.der), rcgen::KeyPair::from_pem(key_pem)) else {
            return false;
        };
        cert.public_key().subject_public_key.data.as_ref() == key.public_key_raw()
    }
}

/// Whether a certificate (PEM; the first one counts) must be replaced now: it has at most
/// `renew_before` left (or is already expired), or it cannot be read.
pub fn needs_rotation(cert_pem: &str, now: SystemTime, renew_before: Duration) -> bool {
    match CertificateInfo::parse_pem(cert_pem) {
        Ok(info) => !info.is_valid_at(now) || info.remaining(now) <= renew_before,
        Err(_) => true,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::CertificateAuthority;

    const HOUR: Duration = Duration::from_secs(3600);

    #[test]
    fn a_serving_certificate_reads_back_with_its_names_and_validity() {
        let ca = CertificateAuthority::generate("ca", HOUR).expect("ca");
        let leaf = ca
            .issue_serving(&["127.0.0.1".into(), "hook.ns.svc".into()], HOUR)
            .expect("leaf");
        let info = CertificateInfo::parse_pem(&leaf.cert_pem).expect("parse");
        let names: Vec<&str> = info.names.iter().map(String::as_str).collect();
        assert_eq!(names, ["127.0.0.1", "hook.ns.svc"]);
        assert!(!info.is_ca);
        let now = SystemTime::now();
        assert!(info.is_valid_at(now));
        let left = info.remaining(now);
        assert!(
            left > HOUR - Duration::from_secs(60) && left <= HOUR,
            "{left:?}"
        );
        let ca_info = CertificateInfo::parse_pem(ca.cert_pem()).expect("parse ca");
        assert!(ca_info.is_ca);
        assert!(info.is_signed_by(&ca_info));
        assert!(!ca_info.is_signed_by(&info));
        assert!(info.matches_key(&leaf.key_pem));
        assert!(!info.matches_key(ca.key_pem()));
    }

    #[test]
    fn a_leaf_is_not_taken_as_signed_by_another_ca() {
        let a = CertificateAuthority::generate("a", HOUR).expect("ca");
        let b = CertificateAuthority::generate("b", HOUR).expect("ca");
        let leaf = a.issue_serving(&["x".into()], HOUR).expect("leaf");
        let info = CertificateInfo::parse_pem(&leaf.cert_pem).expect("parse");
        let b_info = CertificateInfo::parse_pem(b.cert_pem()).expect("parse");
        assert!(!info.is_signed_by(&b_info));
    }

    #[test]
    fn needs_rotation_when_little_life_is_left_or_unreadable() {
        let ca = CertificateAuthority::generate("ca", HOUR).expect("ca");
        let leaf = ca.issue_serving(&["x".into()], HOUR).expect("leaf");
        let now = SystemTime::now();
        assert!(!needs_rotation(&leaf.cert_pem, now, HOUR / 3));
        assert!(needs_rotation(
            &leaf.cert_pem,
            now + HOUR * 2 / 3 + Duration::from_secs(1),
            HOUR / 3
        ));
        assert!(
            needs_rotation(&leaf.cert_pem, now + HOUR * 2, Duration::ZERO),
            "expired"
        );
        assert!(needs_rotation("garbage", now, Duration::ZERO));
        assert!(needs_rotation("", now, Duration::ZERO));
    }

    #[test]
    fn a_bundle_reads_back_in_order_and_re_encodes_identically() {
        let a = CertificateAuthority::generate("a", HOUR).expect("ca");
        let b = CertificateAuthority::generate("b", HOUR).expect("ca");
        let text = format!("{}{}", a.cert_pem(), b.cert_pem());
        let all = CertificateInfo::parse_pem_all(&text).expect("parse");
        assert_eq!(all.len(), 2);
        let again = CertificateInfo::parse_pem(&all[1].pem()).expect("reparse");
        assert_eq!(again, all[1]);
        assert!(matches!(
            CertificateInfo::parse_pem_all(a.key_pem()),
            Err(CertError::NoCertificate)
        ));
    }
}
