package holdfast

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"io"
	"log"
	"math/big"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"
)

// selfSigned is a CA certificate for 127.0.0.1 that serves itself, and its PEM.
func selfSigned(t *testing.T, name string) (tls.Certificate, []byte) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(time.Now().UnixNano()),
		Subject:               pkix.Name{CommonName: name},
		NotBefore:             time.Now().Add(-time.Hour),
		NotAfter:              time.Now().Add(time.Hour),
		IsCA:                  true,
		BasicConstraintsValid: true,
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
		ExtKeyUsage:           []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		IPAddresses:           []net.IP{net.ParseIP("127.0.0.1")},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	return tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key}, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})
}

// caServer is a TLS server whose certificate is from one CA and then, after rotate, from
// another; caFile holds the first CA's PEM, next is the second's.
type caServer struct {
	srv         *httptest.Server
	calls       atomic.Int64
	caFile      string
	first, next []byte
	serve       atomic.Pointer[tls.Certificate]
	nextCert    tls.Certificate
}

func newCAServer(t *testing.T) *caServer {
	t.Helper()
	s := &caServer{caFile: filepath.Join(t.TempDir(), "ca.crt")}
	var firstCert tls.Certificate
	firstCert, s.first = selfSigned(t, "hold-api-ca-1")
	s.nextCert, s.next = selfSigned(t, "hold-api-ca-2")
	s.serve.Store(&firstCert)
	s.srv = httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		s.calls.Add(1)
		answer(200, `{"result":"Ok","outcome":"Held"}`)(w, r)
	}))
	// Asked on every handshake (GetCertificate is not, with no SNI for an IP address).
	s.srv.TLS = &tls.Config{GetConfigForClient: func(*tls.ClientHelloInfo) (*tls.Config, error) {
		return &tls.Config{Certificates: []tls.Certificate{*s.serve.Load()}}, nil
	}}
	s.srv.Config.ErrorLog = log.New(io.Discard, "", 0) // the refused handshakes are expected
	s.srv.StartTLS()
	t.Cleanup(s.srv.Close)
	if err := os.WriteFile(s.caFile, s.first, 0o600); err != nil {
		t.Fatal(err)
	}
	return s
}

// rotate serves from the second CA from now on, on new connections only; c's idle ones are
// closed (on c's side: one the server closed might be reused before c sees it go).
func (s *caServer) rotate(c *Client) {
	s.serve.Store(&s.nextCert)
	c.http.Load().CloseIdleConnections()
}

// client reads the CA file through a CASource that counts its reads.
func (s *caServer) client(t *testing.T, reads *atomic.Int64) *Client {
	t.Helper()
	c, err := New(Config{URL: s.srv.URL, Token: StaticToken("t"), CA: CAFunc(func() (*x509.CertPool, error) {
		reads.Add(1)
		return FileCA(s.caFile).Pool()
	})})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func TestARotatedCAIsReadAgainAndTheCallMadeOnce(t *testing.T) {
	s := newCAServer(t)
	var reads atomic.Int64
	c := s.client(t, &reads)
	if _, err := c.Hold(within(t, time.Minute), job, CallMeta{Instance: 1}); err != nil {
		t.Fatal(err)
	}
	// The CA rotates as the controller does it: the file holds both CAs, the new first.
	if err := os.WriteFile(s.caFile, append(append([]byte{}, s.next...), s.first...), 0o600); err != nil {
		t.Fatal(err)
	}
	s.rotate(c)
	out, err := c.Hold(within(t, time.Minute), job, CallMeta{Instance: 1})
	if err != nil || out.Outcome != OutcomeOutcomeHeld {
		t.Fatalf("after the rotation: %+v, %v", out, err)
	}
	if s.calls.Load() != 2 || reads.Load() != 2 {
		t.Fatalf("%d calls served and the CA read %d times: want 2 and 2", s.calls.Load(), reads.Load())
	}
}

func TestAnUnknownCAIsReadAgainOncePerCallThenNotSent(t *testing.T) {
	s := newCAServer(t)
	var reads atomic.Int64
	c := s.client(t, &reads)
	s.rotate(c) // the file still holds the first CA only
	_, err := c.Hold(within(t, time.Minute), job, CallMeta{Instance: 1})
	if !errors.Is(err, ErrNotSent) || !Retryable(err) {
		t.Fatalf("want ErrNotSent, got %v", err)
	}
	if s.calls.Load() != 0 || reads.Load() != 2 {
		t.Fatalf("%d calls served and the CA read %d times: want 0 and 2 (New, one retry)", s.calls.Load(), reads.Load())
	}
}

func TestRootCAsAndCAAreNotBothGiven(t *testing.T) {
	if _, err := New(Config{URL: "https://x:8443", Token: StaticToken("t"), RootCAs: mustPool(t), CA: FileCA("/nonexistent")}); err == nil {
		t.Fatal("accepted")
	}
	if _, err := New(Config{URL: "https://x:8443", Token: StaticToken("t"), CA: FileCA(filepath.Join(t.TempDir(), "absent"))}); err == nil {
		t.Fatal("a CA file that cannot be read was accepted")
	}
}
