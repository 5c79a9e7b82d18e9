package holdfast

import (
	"context"
	"crypto/x509"
	"encoding/json"
	"encoding/pem"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

// fake is a TLS server answering every request with answer, counting what it received.
type fake struct {
	srv      *httptest.Server
	requests atomic.Int64
	last     atomic.Value // the last POST's body, as a string
	answer   func(w http.ResponseWriter, r *http.Request)
}

func newFake(t *testing.T, answer func(w http.ResponseWriter, r *http.Request)) (*fake, *Client) {
	t.Helper()
	f := &fake{answer: answer}
	f.srv = httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		f.requests.Add(1)
		b, _ := io.ReadAll(r.Body)
		if r.Method == http.MethodPost {
			f.last.Store(string(b))
		}
		f.answer(w, r)
	}))
	t.Cleanup(f.srv.Close)
	ca := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: f.srv.Certificate().Raw})
	pool, err := CAFromPEM(ca)
	if err != nil {
		t.Fatal(err)
	}
	c, err := New(Config{URL: f.srv.URL, Token: StaticToken("t"), RootCAs: pool})
	if err != nil {
		t.Fatal(err)
	}
	return f, c
}

func answer(status int, body string) func(http.ResponseWriter, *http.Request) {
	return func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(status)
		_, _ = io.WriteString(w, body)
	}
}

var job = TrainJob{Namespace: "team-a", Name: "mnist"}

func within(t *testing.T, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

func TestACallWithoutADeadlineIsInvalidAndNothingIsSent(t *testing.T) {
	f, c := newFake(t, answer(200, `{"result":"Ok","outcome":"Held"}`))
	for name, call := range map[string]func() (Outcome, error){
		"hold":    func() (Outcome, error) { return c.Hold(context.Background(), job, CallMeta{Instance: 1}) },
		"release": func() (Outcome, error) { return c.Release(context.Background(), job, CallMeta{Instance: 1}) },
		"open":    func() (Outcome, error) { return c.Open(context.Background(), job, CallMeta{}) },
		"start":   func() (Outcome, error) { return c.Start(context.Background(), job, CallMeta{}) },
	} {
		_, err := call()
		if !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), "no deadline") {
			t.Errorf("%s: want ErrInvalid naming the missing deadline, got %v", name, err)
		}
	}
	if n := f.requests.Load(); n != 0 {
		t.Fatalf("%d requests were sent", n)
	}
}

func TestAPassedDeadlineIsRejectedAndNothingIsSent(t *testing.T) {
	f, c := newFake(t, answer(200, `{"result":"Ok","outcome":"Held"}`))
	_, err := c.Hold(context.Background(), job, CallMeta{Instance: 1, Deadline: time.Now().Add(-time.Second)})
	if !errors.Is(err, ErrDeadlinePassed) || !errors.Is(err, ErrRejected) {
		t.Fatalf("want ErrDeadlinePassed and ErrRejected, got %v", err)
	}
	if n := f.requests.Load(); n != 0 {
		t.Fatalf("%d requests were sent", n)
	}
}

func TestTheDeadlineSentIsTheEarlierOfTheContextsAndTheMetas(t *testing.T) {
	f, c := newFake(t, func(w http.ResponseWriter, r *http.Request) {
		if strings.HasSuffix(r.URL.Path, "/open") {
			answer(200, `{"result":"Ok","outcome":"Opened","started":true}`)(w, r)
			return
		}
		answer(200, `{"result":"Ok","outcome":"Held"}`)(w, r)
	})
	meta := time.Now().Add(20 * time.Second).Truncate(time.Millisecond)
	out, err := c.Hold(within(t, time.Minute), job, CallMeta{Instance: 7, Deadline: meta, Reason: "node lost"})
	if err != nil || out.Outcome != OutcomeOutcomeHeld {
		t.Fatalf("got %+v, %v", out, err)
	}
	var sent map[string]any
	if err := json.Unmarshal([]byte(f.last.Load().(string)), &sent); err != nil {
		t.Fatal(err)
	}
	at, err := time.Parse(time.RFC3339Nano, sent["deadline"].(string))
	if err != nil || !at.Equal(meta) {
		t.Fatalf("deadline %v (%v), want %v", sent["deadline"], err, meta)
	}
	if sent["instance"] != 7.0 || sent["reason"] != "node lost" {
		t.Fatalf("body %v", sent)
	}
	if _, err := c.Open(within(t, time.Minute), job, CallMeta{}); err != nil {
		t.Fatal(err)
	}
	if strings.Contains(f.last.Load().(string), "instance") {
		t.Fatalf("an Open sent an instance: %s", f.last.Load())
	}
}

func TestEachAnswerIsItsSeedClass(t *testing.T) {
	cases := []struct {
		status int
		body   string
		is     []error
		not    []error
	}{
		{409, `{"error":"Rejected","cause":"StaleHold","message":"hold 1 is in force"}`, []error{ErrStaleHold, ErrRejected}, []error{ErrConflict, ErrDeadlinePassed}},
		{409, `{"error":"Rejected","cause":"DeadlinePassed","message":"late"}`, []error{ErrDeadlinePassed, ErrRejected}, []error{ErrStaleHold}},
		{409, `{"error":"Rejected","cause":"NoWorkload","message":"no Workload"}`, []error{ErrNoWorkload, ErrRejected}, nil},
		{404, `{"error":"Rejected","cause":"NotFound","message":"no TrainJob"}`, []error{ErrNotFound, ErrRejected}, nil},
		{403, `{"error":"Rejected","cause":"NotHolder","message":"dispatch holds it"}`, []error{ErrNotHolder, ErrRejected}, []error{ErrForbidden}},
		{403, `{"error":"Forbidden","message":"RBAC"}`, []error{ErrForbidden}, []error{ErrRejected}},
		{401, `{"error":"Unauthenticated","message":"token"}`, []error{ErrUnauthenticated}, nil},
		{400, `{"error":"Invalid","message":"no deadline"}`, []error{ErrInvalid}, []error{ErrRejected}},
		{423, `{"error":"PodsRemain","message":"pods remain"}`, []error{ErrPodsRemain}, []error{ErrRejected}},
		{503, `{"error":"Conflict","message":"8 tries"}`, []error{ErrConflict}, []error{ErrUnavailable}},
		{504, `{"error":"Unknown","message":"lost"}`, []error{ErrUnknown}, nil},
		{501, `{"error":"Unsupported","message":"ClusterQueue main lacks the check"}`, []error{ErrUnsupported}, []error{ErrRejected}},
		{502, `<html>bad gateway</html>`, []error{ErrUnknown}, nil},
	}
	for _, tc := range cases {
		_, c := newFake(t, answer(tc.status, tc.body))
		_, err := c.Release(within(t, time.Minute), job, CallMeta{Instance: 1})
		for _, want := range tc.is {
			if !errors.Is(err, want) {
				t.Errorf("%d %s: %v is not %v", tc.status, tc.body, err, want)
			}
		}
		for _, not := range tc.not {
			if errors.Is(err, not) {
				t.Errorf("%d %s: %v is also %v", tc.status, tc.body, err, not)
			}
		}
		var api *APIError
		if !errors.As(err, &api) || api.StatusCode != tc.status {
			t.Errorf("%d: no APIError with the status in %v", tc.status, err)
		}
	}
}

func TestUnsupportedCarriesItsReason(t *testing.T) {
	_, c := newFake(t, answer(501, `{"error":"Unsupported","message":"preflight's hold round trip failed"}`))
	_, err := c.Hold(within(t, time.Minute), job, CallMeta{Instance: 1})
	var u *UnsupportedError
	if !errors.As(err, &u) || u.Reason != "preflight's hold round trip failed" || !errors.Is(err, ErrUnsupported) {
		t.Fatalf("got %v", err)
	}
}

func TestAWriteSentWhoseAnswerIsLostIsUnknown(t *testing.T) {
	_, c := newFake(t, func(w http.ResponseWriter, _ *http.Request) {
		conn, _, err := w.(http.Hijacker).Hijack()
		if err == nil {
			_ = conn.Close()
		}
	})
	_, err := c.Hold(within(t, time.Minute), job, CallMeta{Instance: 1})
	if !errors.Is(err, ErrUnknown) || errors.Is(err, ErrNotSent) || Retryable(err) {
		t.Fatalf("want ErrUnknown, not retryable, got %v", err)
	}
}

func TestAWriteWhoseDeadlinePassesWhileItWaitsIsUnknown(t *testing.T) {
	release := make(chan struct{})
	t.Cleanup(func() { close(release) })
	_, c := newFake(t, func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-release:
		case <-r.Context().Done():
		}
	})
	_, err := c.Hold(within(t, 300*time.Millisecond), job, CallMeta{Instance: 1})
	if !errors.Is(err, ErrUnknown) || !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("want ErrUnknown (deadline exceeded), got %v", err)
	}
}

func TestARequestThatCouldNotConnectWasNotSent(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	_ = l.Close()
	c, err := New(Config{URL: "https://" + addr, Token: StaticToken("t"), RootCAs: mustPool(t)})
	if err != nil {
		t.Fatal(err)
	}
	_, err = c.Hold(within(t, 10*time.Second), job, CallMeta{Instance: 1})
	if !errors.Is(err, ErrNotSent) || errors.Is(err, ErrUnknown) || !Retryable(err) {
		t.Fatalf("want ErrNotSent, got %v", err)
	}
}

func mustPool(t *testing.T) *x509.CertPool {
	t.Helper()
	srv := httptest.NewTLSServer(http.NotFoundHandler())
	defer srv.Close()
	pool, err := CAFromPEM(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: srv.Certificate().Raw}))
	if err != nil {
		t.Fatal(err)
	}
	return pool
}

func TestCallBoundIsTheLastPreflightsFloatSeconds(t *testing.T) {
	_, c := newFake(t, answer(200, `{"result":"Ok","mode":"plain","callBoundSeconds":61.5,"calls":{"hold":{"supported":true}}}`))
	if c.CallBound() != 0 {
		t.Fatal("a CallBound before any preflight")
	}
	p, err := c.Preflight(within(t, time.Minute), nil)
	if err != nil {
		t.Fatal(err)
	}
	if p.CallBound() != 61500*time.Millisecond || c.CallBound() != 61500*time.Millisecond {
		t.Fatalf("CallBound %v, %v", p.CallBound(), c.CallBound())
	}
}

func TestTheTokenFileIsReadAgainWhenItRotates(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "token")
	if err := os.WriteFile(path, []byte("first\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	src := FileToken(path)
	if tok, err := src.Token(); err != nil || tok != "first" {
		t.Fatalf("got %q, %v", tok, err)
	}
	// The kubelet writes a new file and swaps a symlink; here, a new file renamed over it.
	next := filepath.Join(dir, "token.new")
	if err := os.WriteFile(next, []byte("second-token"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(next, path); err != nil {
		t.Fatal(err)
	}
	if tok, err := src.Token(); err != nil || tok != "second-token" {
		t.Fatalf("after the rotation got %q, %v", tok, err)
	}
	if err := os.WriteFile(path, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := src.Token(); err == nil {
		t.Fatal("an empty token file gave a token")
	}
}

func TestTheTokenIsSentAsABearerToken(t *testing.T) {
	var got atomic.Value
	_, c := newFake(t, func(w http.ResponseWriter, r *http.Request) {
		got.Store(r.Header.Get("Authorization"))
		answer(200, `{"result":"Ok","mode":"plain","opened":true,"attempt":1,"state":{"kind":"Running"}}`)(w, r)
	})
	st, err := c.Status(context.Background(), job)
	if err != nil || st.State.Kind != ObjectStateKindRunning {
		t.Fatalf("got %+v, %v", st, err)
	}
	if got.Load() != "Bearer t" {
		t.Fatalf("Authorization %v", got.Load())
	}
}

func TestACAFileMustHoldCertificates(t *testing.T) {
	dir := t.TempDir()
	for name, content := range map[string]string{
		"empty":   "",
		"key":     "-----BEGIN PRIVATE KEY-----\nAAAA\n-----END PRIVATE KEY-----\n",
		"garbage": "not pem",
	} {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
		if _, err := LoadCA(p); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
	if _, err := LoadCA(filepath.Join(dir, "absent")); err == nil {
		t.Error("a missing file was accepted")
	}
}

func TestConfigIsChecked(t *testing.T) {
	pool := mustPool(t)
	for name, cfg := range map[string]Config{
		"no url":   {Token: StaticToken("t"), RootCAs: pool},
		"http":     {URL: "http://x:8443", Token: StaticToken("t"), RootCAs: pool},
		"no token": {URL: "https://x:8443", RootCAs: pool},
		"no CA":    {URL: "https://x:8443", Token: StaticToken("t")},
	} {
		if _, err := New(cfg); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
}

func TestStartWaitsUntilStatusNamesTheWorkloadThenOpens(t *testing.T) {
	var statuses, opens atomic.Int64
	_, c := newFake(t, func(w http.ResponseWriter, r *http.Request) {
		if strings.HasSuffix(r.URL.Path, "/open") {
			opens.Add(1)
			answer(200, `{"result":"Ok","outcome":"Opened","started":false}`)(w, r)
			return
		}
		workload := ""
		if statuses.Add(1) >= 3 {
			workload = `,"workload":"trainjob-mnist-1a2b3"`
		}
		answer(200, `{"result":"Ok","mode":"kueue","heldObject":"Workload","opened":false,"attempt":0,"state":{"kind":"AtStartGate"}`+workload+`}`)(w, r)
	})
	out, err := c.Start(within(t, time.Minute), job, CallMeta{})
	if err != nil || out.Outcome != OutcomeOutcomeOpened {
		t.Fatalf("got %+v, %v", out, err)
	}
	if statuses.Load() != 3 || opens.Load() != 1 {
		t.Fatalf("%d Status reads and %d Opens: want 3 and 1", statuses.Load(), opens.Load())
	}
}

func TestStartWhoseDeadlinePassesBeforeTheWorkloadOpensNothing(t *testing.T) {
	var opens atomic.Int64
	_, c := newFake(t, func(w http.ResponseWriter, r *http.Request) {
		if strings.HasSuffix(r.URL.Path, "/open") {
			opens.Add(1)
		}
		answer(200, `{"result":"Ok","mode":"kueue","heldObject":"Workload","opened":false,"attempt":0,"state":{"kind":"AtStartGate"}}`)(w, r)
	})
	_, err := c.Start(within(t, 500*time.Millisecond), job, CallMeta{})
	if !errors.Is(err, ErrDeadlinePassed) || !errors.Is(err, ErrRejected) {
		t.Fatalf("want ErrDeadlinePassed, got %v", err)
	}
	if opens.Load() != 0 {
		t.Fatal("an Open was sent")
	}
}

// heldStatus is a Status answer listing one remaining pod, terminating on node n1.
const heldStatus = `{"result":"Ok","mode":"plain","attempt":1,"opened":true,"heldObject":"TrainJob",` +
	`"state":{"kind":"HeldByUs","instance":3},"remainingPods":[{"name":"mnist-node-0-0-x7k2p","node":"n1","nodeState":"ready","why":"terminating"}]}`

func TestAPodsRemainAnswerNamesThePodsStatusLists(t *testing.T) {
	var reads atomic.Int64
	_, c := newFake(t, func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodGet {
			reads.Add(1)
			answer(200, heldStatus)(w, r)
			return
		}
		answer(423, `{"error":"PodsRemain","message":"pods of the held execution remain; nothing was written"}`)(w, r)
	})
	_, err := c.Release(within(t, time.Minute), job, CallMeta{Instance: 3})
	var pr *PodsRemainError
	if !errors.Is(err, ErrPodsRemain) || !errors.As(err, &pr) || !Retryable(err) {
		t.Fatalf("want a retryable *PodsRemainError, got %v", err)
	}
	if len(pr.Pods) != 1 || pr.Pods[0].Name != "mnist-node-0-0-x7k2p" || reads.Load() != 1 {
		t.Fatalf("want the pod Status lists (one read), got %+v after %d reads", pr.Pods, reads.Load())
	}
	if want := "pods still there: mnist-node-0-0-x7k2p (node n1, ready, terminating)"; !strings.Contains(err.Error(), want) {
		t.Fatalf("the error does not say %q: %v", want, err)
	}
	var api *APIError
	if !errors.As(err, &api) || api.StatusCode != 423 {
		t.Fatalf("no 423 APIError in %v", err)
	}
}

func TestAPodsRemainAnswerWhoseStatusReadFailsIsStillPodsRemain(t *testing.T) {
	_, c := newFake(t, func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodGet {
			answer(403, `{"error":"Forbidden","message":"RBAC"}`)(w, r)
			return
		}
		answer(423, `{"error":"PodsRemain","message":"pods remain"}`)(w, r)
	})
	_, err := c.Open(within(t, time.Minute), job, CallMeta{})
	var pr *PodsRemainError
	if !errors.As(err, &pr) || !errors.Is(err, ErrPodsRemain) || errors.Is(err, ErrForbidden) || !Retryable(err) {
		t.Fatalf("want a retryable ErrPodsRemain only, got %v", err)
	}
	if !errors.Is(pr.StatusErr, ErrForbidden) || !strings.Contains(err.Error(), "reading Status for the pods failed") {
		t.Fatalf("the failed read is not reported: %v", err)
	}
}

func TestRetryTriesPodsRemainAgainEachTryWithANewDeadline(t *testing.T) {
	var tries atomic.Int64
	var deadlines []string
	f, c := newFake(t, func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodGet {
			answer(200, heldStatus)(w, r)
			return
		}
		if tries.Add(1) < 3 {
			answer(423, `{"error":"PodsRemain","message":"pods of the held execution remain"}`)(w, r)
			return
		}
		answer(200, `{"result":"Ok","outcome":"Released","resumed":true}`)(w, r)
	})
	out, err := Retry(within(t, time.Minute), 10*time.Second, 10*time.Millisecond, func(ctx context.Context) (Outcome, error) {
		out, err := c.Release(ctx, job, CallMeta{Instance: 3})
		var sent map[string]any
		_ = json.Unmarshal([]byte(f.last.Load().(string)), &sent)
		deadlines = append(deadlines, sent["deadline"].(string))
		return out, err
	})
	if err != nil || out.Outcome != OutcomeOutcomeReleased || tries.Load() != 3 {
		t.Fatalf("got %+v, %v after %d tries", out, err, tries.Load())
	}
	if deadlines[0] == deadlines[1] || deadlines[1] == deadlines[2] {
		t.Fatalf("a deadline was reused: %v", deadlines)
	}
}

func TestRetryReturnsUnknownAndRejectedAtOnce(t *testing.T) {
	for _, body := range []string{
		`{"error":"Unknown","message":"lost"}`,
		`{"error":"Rejected","cause":"StaleHold","message":"hold 4 is in force"}`,
	} {
		var tries atomic.Int64
		_, c := newFake(t, func(w http.ResponseWriter, r *http.Request) {
			tries.Add(1)
			answer(504, body)(w, r)
		})
		_, err := Retry(within(t, time.Minute), 10*time.Second, 10*time.Millisecond, func(ctx context.Context) (Outcome, error) {
			return c.Release(ctx, job, CallMeta{Instance: 3})
		})
		if err == nil || Retryable(err) || tries.Load() != 1 {
			t.Fatalf("%s: %v after %d tries", body, err, tries.Load())
		}
	}
}

func TestARedirectIsNotFollowed(t *testing.T) {
	var elsewhere atomic.Int64
	other := httptest.NewTLSServer(http.HandlerFunc(func(http.ResponseWriter, *http.Request) { elsewhere.Add(1) }))
	t.Cleanup(other.Close)
	_, c := newFake(t, func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, other.URL+r.URL.Path, http.StatusTemporaryRedirect)
	})
	_, err := c.Hold(within(t, time.Minute), job, CallMeta{Instance: 1})
	if err == nil || elsewhere.Load() != 0 {
		t.Fatalf("the redirect was followed (%d requests elsewhere), err %v", elsewhere.Load(), err)
	}
}
