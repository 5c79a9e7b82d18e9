package holdfast

import (
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"net/http"
	"os"
)

// The hold API's CA is in the ConfigMap <fullname>-hold-api-ca (key ca.crt, PEM, the current
// CA first) in holdfast's namespace. The controller keeps it, and every authenticated user
// may get that one ConfigMap by name (the chart's rbac.holdApiCaReaders). A pod cannot mount
// a ConfigMap of another namespace: get it by name with the Kubernetes API (in a CAFunc, or
// a small init step that writes it to a file for FileCA or LoadCA), or have trust-manager
// copy it into the supervisor's namespace (trust-manager reads sources only from its own
// trust namespace, so that works only when that namespace is holdfast's).

// LoadCA reads the CA that signs the hold API's serving certificate from a PEM file: the
// key ca.crt of the ConfigMap <fullname>-hold-api-ca, copied to a file. The pool is fixed;
// FileCA follows a rotation.
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

// CASource gives the pool that verifies the hold API's certificate (Config.CA). The client
// asks it at New, and again whenever a handshake meets a certificate from an authority the
// pool lacks (at most once per call).
type CASource interface {
	Pool() (*x509.CertPool, error)
}

// FileCA is a CASource that reads a PEM file (LoadCA) each time it is asked: keep the file
// up to date with the ConfigMap <fullname>-hold-api-ca's ca.crt, and a rotated CA is
// trusted without a restart.
func FileCA(path string) CASource {
	return CAFunc(func() (*x509.CertPool, error) { return LoadCA(path) })
}

// CAFunc is a CASource calling a function: one that gets the ConfigMap
// <fullname>-hold-api-ca from the Kubernetes API and returns CAFromPEM of its ca.crt, say.
type CAFunc func() (*x509.CertPool, error)

// Pool calls f.
func (f CAFunc) Pool() (*x509.CertPool, error) { return f() }

// unknownAuthority is whether a request failed in its handshake on a certificate from an
// authority the pool does not hold.
func unknownAuthority(err error) bool {
	var ua x509.UnknownAuthorityError
	return errors.As(err, &ua)
}

// reloadCA asks the CA source again and uses its pool from now on.
func (c *Client) reloadCA() error {
	pool, err := c.ca.Pool()
	if err != nil {
		return err
	}
	old := c.http.Swap(httpClient(pool))
	if t, ok := old.Transport.(*http.Transport); ok {
		t.CloseIdleConnections()
	}
	return nil
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
