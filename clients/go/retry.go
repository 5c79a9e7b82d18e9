package holdfast

import (
	"context"
	"errors"
	"time"
)

// Retry makes a write until it succeeds or ends in a class a later try cannot change: it
// tries again after ErrPodsRemain, ErrConflict, ErrTooManyRequests, ErrUnavailable and
// ErrNotSent (Retryable), each try with a deadline of its own, per from its start, and
// pauses between tries (the server's Retry-After, if longer). It stops when ctx ends, with
// the last try's error. ErrUnknown is returned at once: read Status after the CallBound.
//
//	out, err := holdfast.Retry(ctx, 30*time.Second, 2*time.Second, func(ctx context.Context) (holdfast.Outcome, error) {
//		return c.Release(ctx, job, holdfast.CallMeta{Instance: 3})
//	})
func Retry(ctx context.Context, per, pause time.Duration, call func(context.Context) (Outcome, error)) (Outcome, error) {
	for {
		try, cancel := context.WithTimeout(ctx, per)
		out, err := call(try)
		cancel()
		if err == nil || !Retryable(err) {
			return out, err
		}
		wait := pause
		var api *APIError
		if errors.As(err, &api) && api.RetryAfter > wait {
			wait = api.RetryAfter
		}
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return out, err
		case <-t.C:
		}
	}
}
