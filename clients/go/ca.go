package holdfast

import (
	"crypto/x509"
	"encoding/pem"
	"fmt"
	"os"
)

// LoadCA reads the CA that signs the hold API's serving certificate from a PEM file: the
// key ca.crt of the ConfigMap <fullname>-hold-api-ca the chart publishes in holdfast's
// namespace (readable by every authenticated user), or of the Secret
// <fullname>-controller-tls there, mounted as a volume or copied into the supervisor's.
func LoadCA(path string) (*x509.CertPool, error) {
	raw, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("holdfast: CA file: %w", err)
	}
	pool, err := CAFromPEM(raw)
	if err != nil {
		return nil, fmt.Errorf("holdfast: CA file %s: %w", path, err)
	}
	return pool, nil
}

// CAFromPEM is a pool of every certificate in a PEM bundle; an error if it holds none or a
// block is not a certificate that parses.
func CAFromPEM(raw []byte) (*x509.CertPool, error) {
	pool := x509.NewCertPool()
	n := 0
	for {
		var block *pem.Block
		block, raw = pem.Decode(raw)
		if block == nil {
			break
		}
		if block.Type != "CERTIFICATE" {
			return nil, fmt.Errorf("a PEM block of type %q: want only CERTIFICATE blocks", block.Type)
		}
		cert, err := x509.ParseCertificate(block.Bytes)
		if err != nil {
			return nil, fmt.Errorf("certificate %d: %w", n+1, err)
		}
		pool.AddCert(cert)
		n++
	}
	if n == 0 {
		return nil, fmt.Errorf("no PEM certificate in it")
	}
	return pool, nil
}
