//! A certificate authority that issues serving and client certificates.

use crate::CertError;
use rcgen::{
    BasicConstraints, CertificateParams, DistinguishedName, DnType, ExtendedKeyUsagePurpose, IsCa,
    Issuer, KeyPair, KeyUsagePurpose,
};
use std::time::Duration;
use time::OffsetDateTime;

/// A CA: its certificate (PEM) and the means to sign with its key.
pub struct CertificateAuthority {
    issuer: Issuer<'static, KeyPair>,
    cert_pem: String,
    key_pem: String,
}

/// A leaf certificate and its key, both PEM.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct IssuedCertificate {
    pub cert_pem: String,
    pub key_pem: String,
}

/// Backdate certificates a little so a clock a few seconds behind still accepts them.
pub const BACKDATE: Duration = Duration::from_secs(60);

fn validity(params: &mut CertificateParams, valid_for: Duration) -> Result<(), CertError> {
    let now = OffsetDateTime::now_utc();
    let forward =
        time::Duration::try_from(valid_for).map_err(|_| CertError::Validity(valid_for))?;
    let back = time::Duration::try_from(BACKDATE).map_err(|_| CertError::Validity(BACKDATE))?;
    params.not_before = now - back;
    params.not_after = now
        .checked_add(forward)
        .ok_or(CertError::Validity(valid_for))?;
    Ok(())
}

impl CertificateAuthority {
    /// A new self-signed CA valid for `valid_for`.
    pub fn generate(common_name: &str, valid_for: Duration) -> Result<Self, CertError> {
        let mut params = CertificateParams::new(Vec::<String>::new())?;
        let mut dn = DistinguishedName::new();
        dn.push(DnType::CommonName, common_name);
        params.distinguished_name = dn;
        params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        params.key_usages = vec![
            KeyUsagePurpose::KeyCertSign,
            KeyUsagePurpose::CrlSign,
            KeyUsagePurpose::DigitalSignature,
        ];
        validity(&mut params, valid_for)?;
        let key = KeyPair::generate()?;
        let cert = params.self_signed(&key)?;
        let key_pem = key.serialize_pem();
        Ok(Self {
            issuer: Issuer::new(params, key),
            cert_pem: cert.pem(),
            key_pem,
        })
    }

    /// A CA read back from its PEM certificate and key (e.g. from a Secret).
    pub fn from_pem(cert_pem: &str, key_pem: &str) -> Result<Self, CertError> {
        let key = KeyPair::from_pem(key_pem)?;
        let issuer = Issuer::from_ca_cert_pem(cert_pem, key)?;
        Ok(Self {
            issuer,
            cert_pem: cert_pem.to_owned(),
            key_pem: key_pem.to_owned(),
        })
    }

    /// The CA certificate (the caBundle clients trust).
    pub fn cert_pem(&self) -> &str {
        &self.cert_pem
    }

    /// The CA private key, PEM (PKCS#8).
    pub fn key_pem(&self) -> &str {
        &self.key_pem
    }

    /// A serving certificate for the given DNS names and IP addresses.
    pub fn issue_serving(
        &self,
        subject_alt_names: &[String],
        valid_for: Duration,
    ) -> Result<IssuedCertificate, CertError> {
        let mut params = CertificateParams::new(subject_alt_names.to_vec())?;
        let mut dn = DistinguishedName::new();
        dn.push(
            DnType::CommonName,
            subject_alt_names
                .first()
                .map(String::as_str)
                .unwrap_or("holdfast"),
        );
        params.distinguished_name = dn;
        params.key_usages = vec![
            KeyUsagePurpose::DigitalSignature,
            KeyUsagePurpose::KeyEncipherment,
        ];
        params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
        params.use_authority_key_identifier_extension = true;
        validity(&mut params, valid_for)?;
        let key = KeyPair::generate()?;
        let cert = params.signed_by(&key, &self.issuer)?;
        Ok(IssuedCertificate {
            cert_pem: cert.pem(),
            key_pem: key.serialize_pem(),
        })
    }

    /// A client certificate (extended key usage `clientAuth`) for `common_name`: what a
    /// client presents to a server that requires client certificates from this CA (the
    /// kube-apiserver to the webhook).
    pub fn issue_client(
        &self,
        common_name: &str,
        valid_for: Duration,
    ) -> Result<IssuedCertificate, CertError> {
        let mut params = CertificateParams::new(Vec::<String>::new())?;
        let mut dn = DistinguishedName::new();
        dn.push(DnType::CommonName, common_name);
        params.distinguished_name = dn;
        params.key_usages = vec![KeyUsagePurpose::DigitalSignature];
        params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ClientAuth];
        params.use_authority_key_identifier_extension = true;
        validity(&mut params, valid_for)?;
        let key = KeyPair::generate()?;
        let cert = params.signed_by(&key, &self.issuer)?;
        Ok(IssuedCertificate {
            cert_pem: cert.pem(),
            key_pem: key.serialize_pem(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ca_issues_a_serving_certificate_for_its_names() {
        let ca = CertificateAuthority::generate("test-ca", Duration::from_secs(3600))
            .expect("generate CA");
        let leaf = ca
            .issue_serving(
                &["127.0.0.1".into(), "webhook.svc".into()],
                Duration::from_secs(60),
            )
            .expect("issue");
        assert!(ca.cert_pem().starts_with("-----BEGIN CERTIFICATE-----"));
        assert!(leaf.cert_pem.starts_with("-----BEGIN CERTIFICATE-----"));
        assert!(leaf.key_pem.contains("PRIVATE KEY"));
        assert_ne!(leaf.cert_pem, ca.cert_pem());
    }

    #[test]
    fn ca_round_trips_through_pem() {
        let ca = CertificateAuthority::generate("test-ca", Duration::from_secs(3600))
            .expect("generate CA");
        let again = CertificateAuthority::from_pem(ca.cert_pem(), ca.key_pem()).expect("reload");
        assert_eq!(again.cert_pem(), ca.cert_pem());
        again
            .issue_serving(&["localhost".into()], Duration::from_secs(60))
            .expect("a reloaded CA still signs");
    }
}
