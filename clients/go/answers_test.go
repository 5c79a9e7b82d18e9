package holdfast

import (
	"context"
	"errors"
	"net/http"
	"sync/atomic"
	"testing"
	"time"
)

// A proxy in front of the hold API may answer 5xx after it forwarded the request: the write
// may have landed, so it is Unknown, and Retry does not send it again.
func TestAProxys5xxToAWriteIsUnknownAndNotSentAgain(t *testing.T) {
	for _, tc := range []struct {
		status int
		body   string
	}{
		{503, "upstream connect error or disconnect/reset before headers. reset reason: connection termination"},
		{500, "<html>internal error</html>"},
		{503, `{"error":"NoHealthyUpstream","message":"no healthy upstream"}`},
		{429, "slow down"},
	} {
		var tries atomic.Int64
		_, c := newFake(t, func(w http.ResponseWriter, r *http.Request) {
			tries.Add(1)
			w.Header().Set("Retry-After", "0")
			answer(tc.status, tc.body)(w, r)
		})
		_, err := Retry(within(t, time.Minute), 10*time.Second, time.Millisecond, func(ctx context.Context) (Outcome, error) {
			return c.Hold(ctx, job, CallMeta{Instance: 1})
		})
		if !errors.Is(err, ErrUnknown) || errors.Is(err, ErrUnavailable) || errors.Is(err, ErrTooManyRequests) || Retryable(err) || tries.Load() != 1 {
			t.Errorf("%d %q: want ErrUnknown after one try, got %v after %d", tc.status, tc.body, err, tries.Load())
		}
	}
}

// The hold API's own Unavailable is retried; to a read, a proxy's 503 is Unavailable still.
func TestTheHoldAPIsOwnUnavailableIsRetried(t *testing.T) {
	var tries atomic.Int64
	_, c := newFake(t, func(w http.ResponseWriter, r *http.Request) {
		if tries.Add(1) == 1 {
			answer(503, `{"error":"Unavailable","message":"reviews in flight"}`)(w, r)
			return
		}
		answer(200, `{"result":"Ok","outcome":"Held"}`)(w, r)
	})
	out, err := Retry(within(t, time.Minute), 10*time.Second, time.Millisecond, func(ctx context.Context) (Outcome, error) {
		return c.Hold(ctx, job, CallMeta{Instance: 1})
	})
	if err != nil || out.Outcome != OutcomeOutcomeHeld || tries.Load() != 2 {
		t.Fatalf("got %+v, %v after %d tries", out, err, tries.Load())
	}
	_, c = newFake(t, answer(503, "upstream reset before headers"))
	if _, err := c.Status(within(t, time.Minute), job); !errors.Is(err, ErrUnavailable) {
		t.Fatalf("a read's proxy 503: %v", err)
	}
}

// A 200 that is not the hold API's success (a middlebox's {}) is no outcome at all.
func TestAnOkAnswerWithoutTheCallsOutcomeIsUnknown(t *testing.T) {
	for _, body := range []string{`{}`, `{"result":"Ok"}`, `{"outcome":"Held"}`, `{"result":"Ok","outcome":"Released"}`, `{"result":"Ok","outcome":"Cooked"}`} {
		_, c := newFake(t, answer(200, body))
		out, err := c.Hold(within(t, time.Minute), job, CallMeta{Instance: 1})
		if !errors.Is(err, ErrUnknown) || Retryable(err) {
			t.Errorf("hold answered %s: want ErrUnknown, got %+v, %v", body, out, err)
		}
	}
	_, c := newFake(t, answer(200, `{}`))
	if st, err := c.Status(within(t, time.Minute), job); err == nil {
		t.Errorf("status answered {}: got %+v and no error", st)
	}
	if p, err := c.Preflight(within(t, time.Minute), nil); err == nil {
		t.Errorf("preflight answered {}: got %+v and no error", p)
	}
}

// A 408 from the hold API: the body did not arrive in time and nothing was done.
func TestTheHoldAPIs408IsRetriedWithANewDeadline(t *testing.T) {
	var tries atomic.Int64
	_, c := newFake(t, func(w http.ResponseWriter, r *http.Request) {
		if tries.Add(1) == 1 {
			answer(408, `{"error":"Invalid","message":"the body did not arrive within 5s"}`)(w, r)
			return
		}
		answer(200, `{"result":"Ok","outcome":"Released","resumed":true}`)(w, r)
	})
	out, err := Retry(within(t, time.Minute), 10*time.Second, time.Millisecond, func(ctx context.Context) (Outcome, error) {
		return c.Release(ctx, job, CallMeta{Instance: 1})
	})
	if err != nil || out.Outcome != OutcomeOutcomeReleased || tries.Load() != 2 {
		t.Fatalf("got %+v, %v after %d tries", out, err, tries.Load())
	}
	_, c = newFake(t, answer(400, `{"error":"Invalid","message":"no deadline"}`))
	if _, err := c.Release(within(t, time.Minute), job, CallMeta{Instance: 1}); !errors.Is(err, ErrInvalid) || Retryable(err) {
		t.Fatalf("a 400 Invalid: %v", err)
	}
}

// The server closes a connection idle for 60 s; the client must give it up first.
func TestIdleConnectionsAreClosedBeforeTheServersIdleTimeout(t *testing.T) {
	_, c := newFake(t, answer(200, `{}`))
	tr, ok := c.http.Load().Transport.(*http.Transport)
	if !ok || tr.IdleConnTimeout <= 0 || tr.IdleConnTimeout >= 60*time.Second {
		t.Fatalf("idle connections kept %v: want under the server's 60s", tr.IdleConnTimeout)
	}
}
