//go:build unix

package holdfast

// The client against holdfast's real controller and a real apiserver: run by the project's
// tier-2 test (tests/tests/it/go_client.rs), which starts them, creates the TrainJobs named
// here and sets the HOLDFAST_IT_* variables. Without them these tests skip.

import (
	"bytes"
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptrace"
	"os"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

type world struct {
	client *Client
	ns     string
	mode   Mode
	kube   *http.Client
	// kubeURL and kubeToken: the apiserver, as its admin, to read and label TrainJobs.
	kubeURL, kubeToken string
	pidFile            string
}

func env(t *testing.T, name string) string {
	t.Helper()
	v := os.Getenv(name)
	if v == "" {
		t.Skipf("%s is not set: the tier-2 test go_client:: runs this against the real controller", name)
	}
	return v
}

func newWorld(t *testing.T, tokenVar string) *world {
	t.Helper()
	url := env(t, "HOLDFAST_IT_URL")
	pool, err := LoadCA(env(t, "HOLDFAST_IT_CA_FILE"))
	if err != nil {
		t.Fatal(err)
	}
	c, err := New(Config{URL: url, Token: FileToken(env(t, tokenVar)), CA: FileCA(env(t, "HOLDFAST_IT_CA_FILE")), UserAgent: "holdfast-go-it"})
	if err != nil {
		t.Fatal(err)
	}
	kubeToken, err := os.ReadFile(env(t, "HOLDFAST_IT_KUBE_TOKEN_FILE"))
	if err != nil {
		t.Fatal(err)
	}
	return &world{
		client:    c,
		ns:        env(t, "HOLDFAST_IT_NAMESPACE"),
		mode:      Mode(env(t, "HOLDFAST_IT_MODE")),
		kube:      &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}}},
		kubeURL:   env(t, "HOLDFAST_IT_KUBE_URL"),
		kubeToken: strings.TrimSpace(string(kubeToken)),
		pidFile:   env(t, "HOLDFAST_IT_CONTROLLER_PID_FILE"),
	}
}

func (w *world) job(name string) TrainJob { return TrainJob{Namespace: w.ns, Name: name} }

func deadlineIn(t *testing.T, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

// TestNoDeadlineIsRefusedBeforeAnythingIsSent makes every write without a deadline with a
// token the controller has never seen: the harness then finds no TokenReview of it in the
// apiserver's audit log (a call that reached the hold API would have had its token reviewed).
func TestNoDeadlineIsRefusedBeforeAnythingIsSent(t *testing.T) {
	w := newWorld(t, "HOLDFAST_IT_FRESH_TOKEN_FILE")
	job := w.job("stale")
	calls := map[string]func() (Outcome, error){
		"Hold":    func() (Outcome, error) { return w.client.Hold(context.Background(), job, CallMeta{Instance: 1}) },
		"Release": func() (Outcome, error) { return w.client.Release(context.Background(), job, CallMeta{Instance: 1}) },
		"Open":    func() (Outcome, error) { return w.client.Open(context.Background(), job, CallMeta{}) },
		"Start":   func() (Outcome, error) { return w.client.Start(context.Background(), job, CallMeta{}) },
	}
	for name, call := range calls {
		if _, err := call(); !errors.Is(err, ErrInvalid) {
			t.Errorf("%s without a deadline: want ErrInvalid, got %v", name, err)
		}
	}
	if _, err := w.client.Hold(context.Background(), job, CallMeta{Instance: 1, Deadline: time.Now().Add(-time.Second)}); !errors.Is(err, ErrDeadlinePassed) || !errors.Is(err, ErrRejected) {
		t.Errorf("a passed deadline: want ErrDeadlinePassed and ErrRejected, got %v", err)
	}
}

func TestAgainstTheRealController(t *testing.T) {
	w := newWorld(t, "HOLDFAST_IT_TOKEN_FILE")
	// A supervisor bound in its namespace (rbac.holdCallerBindings) may not read the
	// cluster-wide preflight; it asks about one of its TrainJobs.
	_, err := w.client.Preflight(deadlineIn(t, 30*time.Second), nil)
	if !errors.Is(err, ErrForbidden) {
		t.Fatalf("the cluster-wide preflight by a namespace-bound caller: want ErrForbidden, got %v", err)
	}
	stale := w.job("stale")
	p, err := w.client.Preflight(deadlineIn(t, 30*time.Second), &stale)
	if err != nil {
		t.Fatal(err)
	}
	if p.Mode != w.mode || p.CallBound() <= 0 || w.client.CallBound() != p.CallBound() {
		t.Fatalf("preflight: mode %s, CallBound %v (client %v)", p.Mode, p.CallBound(), w.client.CallBound())
	}
	t.Run("a stale release is ErrStaleHold and ErrRejected", func(t *testing.T) {
		job := w.job("stale")
		out, err := w.client.Hold(deadlineIn(t, 30*time.Second), job, CallMeta{Instance: 2, Reason: "go client"})
		if err != nil || out.Outcome != OutcomeOutcomeHeld {
			t.Fatalf("Hold(2): %+v, %v", out, err)
		}
		out, err = w.client.Hold(deadlineIn(t, 30*time.Second), job, CallMeta{Instance: 2})
		if err != nil || out.Outcome != OutcomeOutcomeAlreadyInForce {
			t.Fatalf("Hold(2) again: %+v, %v", out, err)
		}
		_, err = w.client.Release(deadlineIn(t, 30*time.Second), job, CallMeta{Instance: 1})
		if !errors.Is(err, ErrStaleHold) || !errors.Is(err, ErrRejected) || Retryable(err) {
			t.Fatalf("Release(1) under hold 2: want ErrStaleHold and ErrRejected, got %v", err)
		}
		_, err = w.client.Hold(deadlineIn(t, 30*time.Second), job, CallMeta{Instance: 1})
		if !errors.Is(err, ErrStaleHold) {
			t.Fatalf("Hold(1) under hold 2: want ErrStaleHold, got %v", err)
		}
		st, err := w.client.Status(deadlineIn(t, 30*time.Second), job)
		if err != nil {
			t.Fatal(err)
		}
		if i, ok := st.HoldInstance(); !ok || i != 2 || st.State.Kind != ObjectStateKindHeldByUs {
			t.Fatalf("Status after the stale calls: %+v", st)
		}
		out, err = w.client.Release(deadlineIn(t, 30*time.Second), job, CallMeta{Instance: 2})
		if err != nil || out.Outcome != OutcomeOutcomeReleased {
			t.Fatalf("Release(2): %+v, %v", out, err)
		}
	})
	t.Run("a release by another caller than the holder is ErrNotHolder", func(t *testing.T) {
		other := newWorld(t, "HOLDFAST_IT_OTHER_TOKEN_FILE")
		job := w.job("stale")
		if _, err := w.client.Hold(deadlineIn(t, 30*time.Second), job, CallMeta{Instance: 10}); err != nil {
			t.Fatal(err)
		}
		_, err := other.client.Release(deadlineIn(t, 30*time.Second), job, CallMeta{Instance: 10})
		var api *APIError
		if !errors.Is(err, ErrNotHolder) || !errors.Is(err, ErrRejected) || !errors.As(err, &api) || !strings.Contains(api.Body.Message, ":dispatch") {
			t.Fatalf("want ErrNotHolder naming the holder, got %v", err)
		}
		if out, err := w.client.Release(deadlineIn(t, 30*time.Second), job, CallMeta{Instance: 10}); err != nil || out.Outcome != OutcomeOutcomeReleased {
			t.Fatalf("the holder's Release(10): %+v, %v", out, err)
		}
	})
	t.Run("a call on no TrainJob is ErrNotFound", func(t *testing.T) {
		_, err := w.client.Hold(deadlineIn(t, 30*time.Second), w.job("absent"), CallMeta{Instance: 1})
		if !errors.Is(err, ErrNotFound) || !errors.Is(err, ErrRejected) {
			t.Fatalf("want ErrNotFound, got %v", err)
		}
	})
	if w.mode == ModeKueue {
		t.Run("kueue mode: a Hold of a job without a Workload is ErrNoWorkload", func(t *testing.T) {
			job := w.job("noworkload")
			st, err := w.client.Status(deadlineIn(t, 30*time.Second), job)
			if err != nil || !WaitingForWorkload(st) {
				t.Fatalf("Status of a job without a Workload: %+v, %v", st, err)
			}
			_, err = w.client.Hold(deadlineIn(t, 30*time.Second), job, CallMeta{Instance: 1})
			if !errors.Is(err, ErrNoWorkload) || !errors.Is(err, ErrRejected) {
				t.Fatalf("want ErrNoWorkload, got %v", err)
			}
		})
	}
	t.Run("Start waits for the Workload, then opens", func(t *testing.T) {
		w.startWaitsForTheWorkload(t)
	})
	t.Run("the controller killed during a call: ErrUnknown, then Status after the CallBound", func(t *testing.T) {
		w.killedDuringACall(t)
	})
}

// startWaitsForTheWorkload: Start on a job with no Workload yet reads Status, and only once
// Start has read it is the job queued (Kueue then creates its Workload); Start then opens it.
// In plain mode there is nothing to wait for.
func (w *world) startWaitsForTheWorkload(t *testing.T) {
	job := w.job("late")
	first := make(chan struct{})
	var once sync.Once
	trace := &httptrace.ClientTrace{GotFirstResponseByte: func() { once.Do(func() { close(first) }) }}
	ctx := httptrace.WithClientTrace(deadlineIn(t, 90*time.Second), trace)
	type result struct {
		out Outcome
		err error
	}
	done := make(chan result, 1)
	go func() {
		out, err := w.client.Start(ctx, job, CallMeta{})
		done <- result{out, err}
	}()
	select {
	case <-first:
	case r := <-done:
		t.Fatalf("Start returned before any answer: %+v", r)
	}
	if w.mode == ModeKueue {
		select {
		case r := <-done:
			t.Fatalf("Start returned before the job had a Workload: %+v, %v", r.out, r.err)
		default:
		}
		w.kubePatch(t, job, `{"metadata":{"labels":{"kueue.x-k8s.io/queue-name":"main"}}}`)
	}
	r := <-done
	if r.err != nil || r.out.Outcome != OutcomeOutcomeOpened {
		t.Fatalf("Start: %+v, %v", r.out, r.err)
	}
	st, err := w.client.Status(deadlineIn(t, 30*time.Second), job)
	if err != nil || !st.Opened || WaitingForWorkload(st) {
		t.Fatalf("Status after Start: %+v, %v", st, err)
	}
}

// killedDuringACall: the controller is stopped (SIGSTOP) with a connection open, a Hold is
// written to it, and the controller is killed (SIGKILL) before it could read it. The call is
// ErrUnknown. The harness starts the controller again; once the Hold's deadline plus the
// CallBound has passed, Status tells what happened (nothing: no hold), and a retry of the
// same instance, as the contract says, is Held.
func (w *world) killedDuringACall(t *testing.T) {
	job := w.job("killed")
	if _, err := w.client.Status(deadlineIn(t, 30*time.Second), job); err != nil {
		t.Fatal(err) // and the connection the Hold will be written to is open
	}
	pid := w.controllerPid(t)
	if err := syscall.Kill(pid, syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	wrote := make(chan struct{})
	trace := &httptrace.ClientTrace{WroteRequest: func(httptrace.WroteRequestInfo) { close(wrote) }}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	deadline, _ := ctx.Deadline()
	done := make(chan error, 1)
	go func() {
		_, err := w.client.Hold(httptrace.WithClientTrace(ctx, trace), job, CallMeta{Instance: 5})
		done <- err
	}()
	select {
	case <-wrote:
	case err := <-done:
		_ = syscall.Kill(pid, syscall.SIGCONT)
		t.Fatalf("the Hold ended before its request was written: %v", err)
	}
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	err := <-done
	if !errors.Is(err, ErrUnknown) || Retryable(err) {
		t.Fatalf("want ErrUnknown, got %v", err)
	}
	// Wait for the restarted controller, then for the deadline plus the CallBound.
	var st *Status
	for {
		st, err = w.client.Status(deadlineIn(t, 10*time.Second), job)
		if err == nil {
			break
		}
		if time.Now().After(deadline.Add(time.Minute)) {
			t.Fatalf("the controller did not answer again: %v", err)
		}
		time.Sleep(200 * time.Millisecond)
	}
	time.Sleep(time.Until(deadline.Add(w.client.CallBound())))
	st, err = w.client.Status(deadlineIn(t, 30*time.Second), job)
	if err != nil {
		t.Fatal(err)
	}
	if _, held := st.HoldInstance(); held {
		t.Fatalf("Status after the CallBound shows a hold the killed controller never read: %+v", st.Hold)
	}
	if w.mode == ModePlain {
		if v, ok := w.kubeAnnotation(t, job, "holdfast.dev/hold-instance"); ok {
			t.Fatalf("the TrainJob carries hold %s, Status said none", v)
		}
	}
	out, err := w.client.Hold(deadlineIn(t, 30*time.Second), job, CallMeta{Instance: 5})
	if err != nil || out.Outcome != OutcomeOutcomeHeld {
		t.Fatalf("the retry of hold 5: %+v, %v (Status said no hold)", out, err)
	}
}

func (w *world) controllerPid(t *testing.T) int {
	t.Helper()
	raw, err := os.ReadFile(w.pidFile)
	if err != nil {
		t.Fatal(err)
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(raw)))
	if err != nil || pid <= 1 {
		t.Fatalf("pid file %s: %q", w.pidFile, raw)
	}
	return pid
}

func (w *world) trainJobURL(job TrainJob) string {
	return fmt.Sprintf("%s/apis/trainer.kubeflow.org/v1alpha1/namespaces/%s/trainjobs/%s", w.kubeURL, job.Namespace, job.Name)
}

func (w *world) kubePatch(t *testing.T, job TrainJob, patch string) {
	t.Helper()
	req, err := http.NewRequest(http.MethodPatch, w.trainJobURL(job), bytes.NewReader([]byte(patch)))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/merge-patch+json")
	req.Header.Set("Authorization", "Bearer "+w.kubeToken)
	resp, err := w.kube.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		var b bytes.Buffer
		_, _ = b.ReadFrom(resp.Body)
		t.Fatalf("patch %s: %d %s", job, resp.StatusCode, b.String())
	}
}

func (w *world) kubeAnnotation(t *testing.T, job TrainJob, key string) (string, bool) {
	t.Helper()
	req, err := http.NewRequest(http.MethodGet, w.trainJobURL(job), nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+w.kubeToken)
	resp, err := w.kube.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var obj struct {
		Metadata struct {
			Annotations map[string]string `json:"annotations"`
		} `json:"metadata"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&obj); err != nil {
		t.Fatal(err)
	}
	v, ok := obj.Metadata.Annotations[key]
	return v, ok
}
