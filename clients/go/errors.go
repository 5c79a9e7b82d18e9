package holdfast

import (
	"errors"
	"fmt"
	"net/http"
	"strings"
	"time"
)

// class is a sentinel error; parent, when set, is the class it is classified as
// (errors.Is(ErrStaleHold, ErrRejected) is true).
type class struct {
	name   string
	parent error
}

func (c *class) Error() string { return "holdfast: " + c.name }
func (c *class) Unwrap() error { return c.parent }

// The classes of the holds seed. Test for them with errors.Is: every error a call returns
// that the hold API answered is an *APIError, which is each class its answer belongs to.
var (
	// ErrInvalid: the call is malformed (no deadline, no instance, a bad reason, a name no
	// object can have). Nothing was sent, or the server refused it; fix the call. The one
	// exception is the hold API's 408 (its body did not arrive within 5 s; nothing was
	// done): Retryable, with a new deadline.
	ErrInvalid error = &class{name: "invalid"}
	// ErrRejected: the call was refused and is final; nothing was written. Make a new call.
	ErrRejected error = &class{name: "rejected"}
	// ErrStaleHold: a newer call has overtaken this one (a newer instance is in force, or a
	// Release named an instance not in force). It is an ErrRejected.
	ErrStaleHold error = &class{name: "stale hold", parent: ErrRejected}
	// ErrDeadlinePassed: the call's deadline passed before a request could be sent (by the
	// client or by the server). It is an ErrRejected.
	ErrDeadlinePassed error = &class{name: "deadline passed", parent: ErrRejected}
	// ErrNoWorkload: Kueue mode, the TrainJob has no Workload to hold. It is an ErrRejected;
	// Start waits for the Workload.
	ErrNoWorkload error = &class{name: "no workload", parent: ErrRejected}
	// ErrNotFound: the TrainJob does not exist. It is an ErrRejected.
	ErrNotFound error = &class{name: "not found", parent: ErrRejected}
	// ErrNotHolder: another identity placed the hold in force and this caller may not
	// override it; the message names the holder. It is an ErrRejected.
	ErrNotHolder error = &class{name: "not holder", parent: ErrRejected}
	// ErrUnsupported: the cluster does not offer the call (a failed preflight probe, an
	// ungated ClusterQueue, an excluded namespace, no runtime snapshot). The error is an
	// *UnsupportedError carrying the reason; fix the cluster, then call again.
	ErrUnsupported error = &class{name: "unsupported"}
	// ErrPodsRemain: pods of the held execution remain; nothing was written. Retry later
	// with a new deadline, or fence a lost node. A Release or an Open returns it as a
	// *PodsRemainError, which names the pods.
	ErrPodsRemain error = &class{name: "pods remain"}
	// ErrConflict: eight preconditioned writes in a row lost to other writers; nothing was
	// written. Retry with a new deadline.
	ErrConflict error = &class{name: "conflict"}
	// ErrUnknown: the call may or may not have taken effect: read Status after CallBound.
	// The server sent a write and could not learn whether it landed (504 Unknown), or the
	// request left this client and no answer came back (the connection broke, the deadline
	// passed while waiting), or the answer to a write is not the hold API's (a proxy's 502,
	// 503 or 504, a body that does not parse, a success without a known outcome). A write already sent may still land until the deadline plus
	// the CallBound; after that, Status tells the truth.
	ErrUnknown error = &class{name: "outcome unknown"}
	// ErrNotSent: the request never left this client (no connection could be made, the TLS
	// handshake failed, the token could not be read): nothing happened. Retry with the same
	// CallMeta.
	ErrNotSent error = &class{name: "not sent"}
	// ErrUnauthenticated: the token was refused (401); nothing was read or written.
	ErrUnauthenticated error = &class{name: "unauthenticated"}
	// ErrForbidden: the caller may not make this call (403 Forbidden, RBAC); nothing was
	// read or written.
	ErrForbidden error = &class{name: "forbidden"}
	// ErrTooManyRequests: the caller's budget is spent (429); retry after RetryAfter.
	ErrTooManyRequests error = &class{name: "too many requests"}
	// ErrUnavailable: the server could not take the call now (the hold API's 503
	// Unavailable); retry after RetryAfter.
	ErrUnavailable error = &class{name: "unavailable"}
)

// APIError is an answer of the hold API other than success: its HTTP status and body.
// errors.Is(err, ErrX) tells its class.
type APIError struct {
	// StatusCode is the HTTP status.
	StatusCode int
	// Body is the answer: Error names the class, Cause (Rejected only) why, Message is for
	// people (never parse it).
	Body ErrorBody
	// RetryAfter is the server's Retry-After, when it sent one.
	RetryAfter time.Duration
	// write: the answer is to a Hold, Release or Open.
	write bool
}

func (e *APIError) Error() string {
	kind := string(e.Body.Error)
	if kind == "" {
		kind = http.StatusText(e.StatusCode)
	}
	if e.Body.Cause != nil {
		kind += " (" + string(*e.Body.Cause) + ")"
	}
	return fmt.Sprintf("holdfast: %s %d: %s", kind, e.StatusCode, e.Body.Message)
}

// Unwrap is the class the answer names.
func (e *APIError) Unwrap() error {
	if e.write && !ownError(e.Body) {
		// Not the hold API's answer (a proxy's, a load balancer's): it may have come after
		// the request was forwarded, so the write may have landed.
		return ErrUnknown
	}
	return classOf(e.StatusCode, e.Body)
}

// ownError is whether a body names one of the hold API's own error kinds.
func ownError(b ErrorBody) bool {
	switch b.Error {
	case ErrorKindInvalid, ErrorKindRejected, ErrorKindUnsupported, ErrorKindPodsRemain,
		ErrorKindConflict, ErrorKindUnknown, ErrorKindUnauthenticated, ErrorKindForbidden,
		ErrorKindTooManyRequests, ErrorKindUnavailable:
		return true
	}
	return false
}

// UnsupportedError is ErrUnsupported with the reason the server gave.
type UnsupportedError struct {
	// Reason says what the cluster lacks and what to do.
	Reason string
	// API is the answer, if the server gave it.
	API *APIError
}

func (e *UnsupportedError) Error() string { return "holdfast: unsupported: " + e.Reason }

// Is makes an *UnsupportedError an ErrUnsupported.
func (e *UnsupportedError) Is(target error) bool { return target == ErrUnsupported }

// Unwrap is the API answer.
func (e *UnsupportedError) Unwrap() error {
	if e.API == nil {
		return nil
	}
	return e.API
}

// PodsRemainError is ErrPodsRemain from a Release or an Open, with the pods that remain:
// Status's RemainingPods, read right after the answer within the call's deadline. Its
// Error names each pod, with its node, what that node says and why the pod counts.
//
//	var pr *holdfast.PodsRemainError
//	if errors.As(err, &pr) {
//		for _, p := range pr.Pods { log.Printf("waiting for pod %s", p.Name) }
//	}
type PodsRemainError struct {
	// Pods are the pods Status listed. Empty if that read failed (StatusErr says why) or
	// found none left (they went meanwhile: the next try may succeed).
	Pods []RemainingPod
	// StatusErr is why the Status read failed, if it did. It is not in the error chain:
	// the error is the call's answer, ErrPodsRemain.
	StatusErr error
	// API is the answer.
	API *APIError
}

func (e *PodsRemainError) Error() string {
	var pods string
	switch {
	case len(e.Pods) > 0:
		each := make([]string, len(e.Pods))
		for i, p := range e.Pods {
			each[i] = p.String()
		}
		pods = "pods still there: " + strings.Join(each, ", ")
	case e.StatusErr != nil:
		pods = fmt.Sprintf("reading Status for the pods failed: %v", e.StatusErr)
	default:
		pods = "Status lists none now (they went meanwhile)"
	}
	return fmt.Sprintf("%v; %s", e.API, pods)
}

// Unwrap is the API answer (an ErrPodsRemain).
func (e *PodsRemainError) Unwrap() error { return e.API }

// classOf maps an answer to its class: by its error and cause, and where a body is not the
// hold API's (a proxy's page) by its status, which only a read gets (a write's is ErrUnknown).
func classOf(status int, body ErrorBody) error {
	switch body.Error {
	case ErrorKindInvalid:
		return ErrInvalid
	case ErrorKindRejected:
		if body.Cause != nil {
			switch *body.Cause {
			case RejectCauseStaleHold:
				return ErrStaleHold
			case RejectCauseDeadlinePassed:
				return ErrDeadlinePassed
			case RejectCauseNoWorkload:
				return ErrNoWorkload
			case RejectCauseNotFound:
				return ErrNotFound
			case RejectCauseNotHolder:
				return ErrNotHolder
			}
		}
		return ErrRejected
	case ErrorKindUnsupported:
		return ErrUnsupported
	case ErrorKindPodsRemain:
		return ErrPodsRemain
	case ErrorKindConflict:
		return ErrConflict
	case ErrorKindUnknown:
		return ErrUnknown
	case ErrorKindUnauthenticated:
		return ErrUnauthenticated
	case ErrorKindForbidden:
		return ErrForbidden
	case ErrorKindTooManyRequests:
		return ErrTooManyRequests
	case ErrorKindUnavailable:
		return ErrUnavailable
	}
	switch status {
	case http.StatusUnauthorized:
		return ErrUnauthenticated
	case http.StatusForbidden:
		return ErrForbidden
	case http.StatusTooManyRequests:
		return ErrTooManyRequests
	case http.StatusServiceUnavailable:
		return ErrUnavailable
	case http.StatusGatewayTimeout, http.StatusBadGateway:
		// An answer that is not the hold API's, from something in between: whether the
		// call reached the server cannot be known from here.
		return ErrUnknown
	}
	if status >= 400 && status < 500 {
		return ErrInvalid
	}
	return ErrUnknown
}

// answerError builds the error for a non-200 answer to a read or (write) a write.
func answerError(status int, body ErrorBody, retryAfter time.Duration, write bool) error {
	api := &APIError{StatusCode: status, Body: body, RetryAfter: retryAfter, write: write}
	if errors.Is(api, ErrUnsupported) {
		return &UnsupportedError{Reason: body.Message, API: api}
	}
	return api
}

// Retryable reports whether the same call may succeed if made again later, with a new
// deadline: ErrPodsRemain, ErrConflict, ErrTooManyRequests, ErrUnavailable, ErrNotSent, and
// the hold API's 408 Invalid (the body did not arrive within its 5 s; nothing was done).
// ErrUnknown is not: read Status after the CallBound instead. An answer to a write that is
// not the hold API's own (a proxy's 503, say) is ErrUnknown, never retryable: the proxy may
// have forwarded the request before it failed.
func Retryable(err error) bool {
	if errors.Is(err, ErrUnknown) {
		return false
	}
	for _, c := range []error{ErrPodsRemain, ErrConflict, ErrTooManyRequests, ErrUnavailable, ErrNotSent} {
		if errors.Is(err, c) {
			return true
		}
	}
	var api *APIError
	return errors.As(err, &api) && api.StatusCode == http.StatusRequestTimeout && api.Body.Error == ErrorKindInvalid
}

// callError wraps a class with what happened, for errors made on this side.
type callError struct {
	class error
	msg   string
	err   error
}

func (e *callError) Error() string {
	if e.err != nil {
		return fmt.Sprintf("%v: %s: %v", e.class, e.msg, e.err)
	}
	return fmt.Sprintf("%v: %s", e.class, e.msg)
}

func (e *callError) Unwrap() []error {
	if e.err != nil {
		return []error{e.class, e.err}
	}
	return []error{e.class}
}
