//! A serving certificate written where a `TlsServer` reads it: `tls.crt` and `tls.key` in a
//! temporary directory that lives as long as the returned guard.

use holdfast_certs::IssuedCertificate;
use holdfast_serve::CertFiles;

/// `cert` written to a new temporary directory; keep the directory while the server runs.
pub fn write(cert: &IssuedCertificate) -> std::io::Result<(CertFiles, tempfile::TempDir)> {
    let dir = tempfile::tempdir()?;
    let files = CertFiles {
        cert: dir.path().join("tls.crt"),
        key: dir.path().join("tls.key"),
    };
    std::fs::write(&files.cert, &cert.cert_pem)?;
    std::fs::write(&files.key, &cert.key_pem)?;
    Ok((files, dir))
}
