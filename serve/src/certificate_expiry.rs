//! `holdfast_certificate_expiration_timestamp_seconds{kind, source}`: when each certificate
//! holdfast holds stops being valid (its notAfter, as a Unix timestamp), so an alert can fire
//! well before it does.
//!
//! Labels are bounded by the configuration: `kind` is `serving` or `ca`; `source` says where
//! the certificate is held — `webhook` or `hold_api` for the certificate a listener serves
//! (read from the listener at scrape time, so a reloaded file shows at once), or
//! `secret/<name>` for a Secret the controller manages (self-managed mode: the CA Secret, and
//! each serving Secret; set after each certificate reconcile).

use crate::reload::ReloadingResolver;
use holdfast_certs::CertificateInfo;
use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeLabelSet, EncodeMetric};
use prometheus_client::metrics::MetricType;
use prometheus_client::metrics::gauge::ConstGauge;
use prometheus_client::registry::Registry;
use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{SystemTime, UNIX_EPOCH};

/// The metric's name.
pub const METRIC: &str = "holdfast_certificate_expiration_timestamp_seconds";

#[derive(Clone, Debug, Hash, PartialEq, Eq, PartialOrd, Ord, EncodeLabelSet)]
struct CertLabels {
    kind: &'static str,
    source: String,
}

#[derive(Clone)]
enum Source {
    /// A notAfter known since it was last set.
    Known(SystemTime),
    /// The certificate a listener serves now.
    Served(Arc<ReloadingResolver>),
}

impl std::fmt::Debug for Source {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Source::Known(t) => f.debug_tuple("Known").field(t).finish(),
            Source::Served(_) => f.write_str("Served"),
        }
    }
}

/// The certificates whose expiry is exported. Cheap to clone; clones share them.
#[derive(Clone, Debug, Default)]
pub struct CertificateExpiry {
    certificates: Arc<Mutex<BTreeMap<CertLabels, Source>>>,
}

impl CertificateExpiry {
    /// New, registered in `registry`.
    pub fn register(registry: &mut Registry) -> Self {
        let c = CertificateExpiry::default();
        registry.register_collector(Box::new(c.clone()));
        c
    }

    /// Export the certificate `resolver` serves, as `kind="serving"`, `source`.
    pub fn served(&self, source: &str, resolver: Arc<ReloadingResolver>) {
        self.put("serving", source, Source::Served(resolver));
    }

    /// Export a certificate's notAfter (`kind` is `serving` or `ca`).
    pub fn set(&self, kind: &'static str, source: &str, not_after: SystemTime) {
        self.put(kind, source, Source::Known(not_after));
    }

    /// The exported value of one certificate, as a scrape would see it (for tests).
    pub fn get(&self, kind: &'static str, source: &str) -> Option<f64> {
        self.read()
            .into_iter()
            .find(|(l, _)| l.kind == kind && l.source == source)
            .map(|(_, v)| v)
    }

    fn put(&self, kind: &'static str, source: &str, s: Source) {
        self.certificates
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .insert(
                CertLabels {
                    kind,
                    source: source.to_owned(),
                },
                s,
            );
    }

    fn read(&self) -> Vec<(CertLabels, f64)> {
        let certificates = self
            .certificates
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone();
        certificates
            .into_iter()
            .filter_map(|(labels, source)| {
                let not_after = match source {
                    Source::Known(t) => t,
                    Source::Served(resolver) => {
                        let served = resolver.current();
                        let leaf = served.cert.first()?;
                        CertificateInfo::from_der(leaf.as_ref()).ok()?.not_after
                    }
                };
                Some((labels, unix_seconds(not_after)))
            })
            .collect()
    }
}

fn unix_seconds(t: SystemTime) -> f64 {
    match t.duration_since(UNIX_EPOCH) {
        Ok(d) => d.as_secs_f64(),
        Err(before) => -before.duration().as_secs_f64(),
    }
}

impl Collector for CertificateExpiry {
    fn encode(&self, mut encoder: DescriptorEncoder) -> Result<(), std::fmt::Error> {
        // Declared even with no certificate (yet): the name is always exposed.
        let values = self.read();
        let mut family = encoder.encode_descriptor(
            METRIC,
            "When a certificate holdfast holds expires (notAfter), in seconds since the Unix epoch",
            None,
            MetricType::Gauge,
        )?;
        for (labels, value) in &values {
            ConstGauge::new(*value).encode(family.encode_family(labels)?)?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::reload::CertFiles;
    use holdfast_certs::CertificateAuthority;
    use std::time::Duration;

    #[test]
    fn served_and_set_certificates_are_exported_with_their_not_after() {
        let ca = CertificateAuthority::generate("test-ca", Duration::from_secs(7200)).expect("ca");
        let issued = ca
            .issue_serving(&["svc.ns.svc".to_owned()], Duration::from_secs(3600))
            .expect("issue");
        let dir = tempfile::tempdir().expect("tempdir");
        let files = CertFiles {
            cert: dir.path().join("tls.crt"),
            key: dir.path().join("tls.key"),
        };
        std::fs::write(&files.cert, &issued.cert_pem).expect("write");
        std::fs::write(&files.key, &issued.key_pem).expect("write");
        let resolver = Arc::new(ReloadingResolver::load(files).expect("load"));

        let mut registry = Registry::default();
        let expiry = CertificateExpiry::register(&mut registry);
        let mut text = String::new();
        prometheus_client::encoding::text::encode(&mut text, &registry).expect("encode");
        assert!(
            !text.contains(&format!("{METRIC}{{")),
            "nothing held, no series: {text}"
        );

        expiry.served("webhook", resolver);
        let ca_info = CertificateInfo::parse_pem(ca.cert_pem()).expect("ca info");
        expiry.set("ca", "secret/holdfast-ca", ca_info.not_after);
        let leaf = CertificateInfo::parse_pem(&issued.cert_pem).expect("leaf");
        assert_eq!(
            expiry.get("serving", "webhook"),
            Some(unix_seconds(leaf.not_after))
        );
        assert_eq!(
            expiry.get("ca", "secret/holdfast-ca"),
            Some(unix_seconds(ca_info.not_after))
        );
        let mut text = String::new();
        prometheus_client::encoding::text::encode(&mut text, &registry).expect("encode");
        let line = format!(
            "{METRIC}{{kind=\"serving\",source=\"webhook\"}} {}",
            unix_seconds(leaf.not_after)
        );
        assert!(text.contains(&line), "{line}\n{text}");
    }
}
