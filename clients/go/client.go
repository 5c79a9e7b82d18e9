package holdfast

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptrace"
	"net/url"
	"strconv"
	"strings"
	"sync/atomic"
	"time"
)

// CallMeta is what every hold-family call carries (the seed's CallMeta).
//
// The call's deadline is its context's deadline: set one with context.WithDeadline or
// context.WithTimeout. Deadline, if set, is used instead when it is earlier. A call with
// neither is refused with ErrInvalid before anything is sent; a call whose deadline has
// passed is refused with ErrDeadlinePassed (an ErrRejected), also before anything is sent.
// The server checks the deadline again before each request it makes to the apiserver, and
// nothing goes out after it.
type CallMeta struct {
	// Instance is the hold instance (Hold and Release). Use a new, larger one for each new
	// hold; retry a call with the same one. Open and Start ignore it.
	Instance uint64
	// Deadline, if not zero and earlier than the context's deadline, is the call's deadline.
	Deadline time.Time
	// Reason is recorded with a Hold (at most 1 KiB of printable text); optional.
	Reason string
}

// TrainJob names a TrainJob.
type TrainJob struct {
	Namespace string
	Name      string
}

func (t TrainJob) String() string { return t.Namespace + "/" + t.Name }

// Config is how to reach the hold API.
type Config struct {
	// URL of the controller's Service, e.g.
	// https://holdfast-controller.holdfast-system.svc:8443.
	URL string
	// Token gives the bearer token for each request; FileToken re-reads a projected
	// ServiceAccount token as the kubelet rotates it.
	Token TokenSource
	// RootCAs verifies the server's certificate: the release's CA (LoadCA), fixed for the
	// Client's life. Give CA instead to follow the CA as it rotates.
	RootCAs *x509.CertPool
	// CA gives the pool that verifies the server's certificate, and is asked again when a
	// handshake fails because the server's certificate is from an authority the pool does
	// not hold (the hold API's CA rotated): the connection is then tried once more with the
	// new pool (nothing was sent, so that is safe). FileCA re-reads a PEM file; CAFunc
	// wraps a function of yours (one that gets the ConfigMap <fullname>-hold-api-ca from
	// the Kubernetes API, say). Set RootCAs or CA, not both.
	CA CASource
	// HTTPClient, if set, is used as it is: RootCAs and CA are then ignored, and so are the
	// client's own transport rules, which apply only when HTTPClient is nil — a redirect is
	// not followed (the token and the call stay with the server named), idle connections
	// are closed after 50 s (before the server's 60 s, so a write is not sent on a
	// connection the server is closing), and the CA is re-read after a rotation. Its
	// Timeout should be zero, as each call's context carries its deadline.
	HTTPClient *http.Client
	// UserAgent is sent with every request; it defaults to "holdfast-go".
	UserAgent string
}

// Client calls the hold API. It is safe for concurrent use.
type Client struct {
	base  *url.URL
	token TokenSource
	// http is the client every call uses; replaced (with a new pool) when ca gives one.
	http  atomic.Pointer[http.Client]
	ca    CASource // nil: the pool is fixed
	agent string
	// bound is the CallBound of the last preflight, in nanoseconds (0: none yet).
	bound atomic.Int64
}

// New checks cfg and returns a Client.
func New(cfg Config) (*Client, error) {
	if cfg.URL == "" {
		return nil, fmt.Errorf("holdfast: Config.URL is empty: give the controller Service's https URL")
	}
	base, err := url.Parse(strings.TrimRight(cfg.URL, "/"))
	if err != nil {
		return nil, fmt.Errorf("holdfast: Config.URL %q: %w", cfg.URL, err)
	}
	if base.Scheme != "https" {
		return nil, fmt.Errorf("holdfast: Config.URL %q: the hold API is served over https only", cfg.URL)
	}
	if cfg.Token == nil {
		return nil, fmt.Errorf("holdfast: Config.Token is nil: give FileToken(path) of a projected ServiceAccount token")
	}
	agent := cfg.UserAgent
	if agent == "" {
		agent = "holdfast-go"
	}
	c := &Client{base: base, token: cfg.Token, agent: agent}
	switch {
	case cfg.HTTPClient != nil:
		c.http.Store(cfg.HTTPClient)
	case cfg.RootCAs != nil && cfg.CA != nil:
		return nil, fmt.Errorf("holdfast: Config.RootCAs and Config.CA are both set: give one (CA follows a rotation)")
	case cfg.RootCAs != nil:
		c.http.Store(httpClient(cfg.RootCAs))
	case cfg.CA != nil:
		pool, err := cfg.CA.Pool()
		if err != nil {
			return nil, fmt.Errorf("holdfast: Config.CA: %w", err)
		}
		c.http.Store(httpClient(pool))
		c.ca = cfg.CA
	default:
		return nil, fmt.Errorf("holdfast: Config.RootCAs and Config.CA are nil: give CA: FileCA(path) of the hold API's CA (the ConfigMap <fullname>-hold-api-ca's ca.crt)")
	}
	return c, nil
}

// IdleConnTimeout is how long an idle connection is kept: less than the hold API's 60 s,
// so that a write never goes out on a connection the server is closing as idle (it would
// come back as a spurious ErrUnknown).
const IdleConnTimeout = 50 * time.Second

// httpClient is the client's own: pool verifies the server, redirects are not followed.
func httpClient(pool *x509.CertPool) *http.Client {
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.TLSClientConfig = &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}
	tr.ForceAttemptHTTP2 = true
	tr.IdleConnTimeout = IdleConnTimeout
	return &http.Client{
		Transport: tr,
		// The hold API never redirects: a redirect is not followed (the token and the
		// call stay with the server the caller named).
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
	}
}

// Hold places hold m.Instance on the TrainJob: in plain mode on the TrainJob, in Kueue mode
// on its Workload (ErrNoWorkload if it has none). Held or AlreadyInForce on success.
func (c *Client) Hold(ctx context.Context, job TrainJob, m CallMeta) (Outcome, error) {
	return c.write(ctx, RouteHold, job, m, true)
}

// Release lifts hold m.Instance. ErrStaleHold if another instance (or none) is in force;
// in plain mode ErrPodsRemain while pods of the held execution remain, as a
// *PodsRemainError naming them (read from Status right after the answer).
func (c *Client) Release(ctx context.Context, job TrainJob, m CallMeta) (Outcome, error) {
	return c.write(ctx, RouteRelease, job, m, true)
}

// Open opens the TrainJob's start gate (Opened or AlreadyOpen). In Kueue mode the server
// waits, within the deadline, for the job's Workload; Start waits for it here first. In
// plain mode ErrPodsRemain (a *PodsRemainError) while pods of an earlier execution remain.
func (c *Client) Open(ctx context.Context, job TrainJob, m CallMeta) (Outcome, error) {
	return c.write(ctx, RouteOpen, job, m, false)
}

// Status reads the hold in force, the opened mark, A, the state and the remaining pods. It
// writes nothing; it needs no deadline (the context's, if any, bounds it).
func (c *Client) Status(ctx context.Context, job TrainJob) (*Status, error) {
	var a StatusAnswer
	if err := c.read(ctx, expand(RouteStatus, job), nil, &a); err != nil {
		return nil, fmt.Errorf("status of %s: %w", job, err)
	}
	if a.Result != SuccessOk || a.State.Kind == "" {
		return nil, fmt.Errorf("holdfast: status of %s: a 200 answer with result %q and no state is not the hold API's (something in between answered?)", job, a.Result)
	}
	return &a.Status, nil
}

// Preflight reads which calls the cluster supports, and why not, and the CallBound, which
// the client remembers (CallBound). With job set, the server dry-runs a hold on that
// TrainJob and reports to this caller only.
func (c *Client) Preflight(ctx context.Context, job *TrainJob) (*PreflightReport, error) {
	var q url.Values
	if job != nil {
		q = url.Values{"namespace": {job.Namespace}, "name": {job.Name}}
	}
	var a PreflightAnswer
	if err := c.read(ctx, expand(RoutePreflight, TrainJob{}), q, &a); err != nil {
		return nil, fmt.Errorf("preflight: %w", err)
	}
	if a.Result != SuccessOk {
		return nil, fmt.Errorf("holdfast: preflight: a 200 answer with result %q is not the hold API's (something in between answered?)", a.Result)
	}
	c.bound.Store(int64(seconds(a.CallBoundSeconds)))
	return &a.PreflightReport, nil
}

// CallBound is how long after a call's deadline a write already sent may still land, as the
// last Preflight reported it (0 before the first). Place a new hold instance only after every
// earlier call has answered, or its deadline plus the CallBound has passed; after an
// ErrUnknown, read Status once the deadline plus the CallBound has passed.
func (c *Client) CallBound() time.Duration { return time.Duration(c.bound.Load()) }

// CallBound of a preflight report.
func (p *PreflightReport) CallBound() time.Duration { return seconds(p.CallBoundSeconds) }

func seconds(s float64) time.Duration {
	if s <= 0 || s != s {
		return 0
	}
	if s > float64(1<<62)/float64(time.Second) {
		return time.Duration(1 << 62)
	}
	return time.Duration(s * float64(time.Second))
}

// Deadline is the deadline a call made with ctx and m would carry, and whether it has one.
func Deadline(ctx context.Context, m CallMeta) (time.Time, bool) {
	d, ok := ctx.Deadline()
	if !m.Deadline.IsZero() && (!ok || m.Deadline.Before(d)) {
		d, ok = m.Deadline, true
	}
	return d, ok
}

func (c *Client) write(ctx context.Context, route string, job TrainJob, m CallMeta, instance bool) (Outcome, error) {
	call := route[strings.LastIndex(route, "/")+1:]
	deadline, ok := Deadline(ctx, m)
	if !ok {
		return Outcome{}, &callError{class: ErrInvalid, msg: fmt.Sprintf("%s of %s: the call has no deadline: give its context one (context.WithTimeout); nothing was sent", call, job)}
	}
	if !time.Now().Before(deadline) {
		return Outcome{}, &callError{class: ErrDeadlinePassed, msg: fmt.Sprintf("%s of %s: its deadline %s has passed; nothing was sent", call, job, deadline.UTC().Format(time.RFC3339Nano))}
	}
	ctx, cancel := context.WithDeadline(ctx, deadline)
	defer cancel()
	d := deadline.UTC().Format(time.RFC3339Nano)
	req := CallRequest{Deadline: &d}
	if instance {
		i := m.Instance
		req.Instance = &i
	}
	if m.Reason != "" {
		r := m.Reason
		req.Reason = &r
	}
	body, err := json.Marshal(req)
	if err != nil {
		return Outcome{}, &callError{class: ErrInvalid, msg: call, err: err}
	}
	var a CallAnswer
	if err := c.do(ctx, http.MethodPost, expand(route, job), nil, body, &a, true); err != nil {
		var api *APIError
		if errors.As(err, &api) && errors.Is(api, ErrPodsRemain) {
			err = c.podsRemain(ctx, job, api)
		}
		return Outcome{}, fmt.Errorf("%s of %s: %w", call, job, err)
	}
	if a.Result != SuccessOk || !outcomeOf(route, a.Outcome.Outcome) {
		return Outcome{}, &callError{class: ErrUnknown, msg: fmt.Sprintf("%s of %s: a 200 answer with result %q and outcome %q is not the hold API's (something in between answered?); read Status after the CallBound", call, job, a.Result, a.Outcome.Outcome)}
	}
	return a.Outcome, nil
}

// podsRemain is a PodsRemain answer with the pods Status lists, read within ctx.
func (c *Client) podsRemain(ctx context.Context, job TrainJob, api *APIError) *PodsRemainError {
	st, err := c.Status(ctx, job)
	if err != nil {
		return &PodsRemainError{StatusErr: err, API: api}
	}
	return &PodsRemainError{Pods: st.RemainingPods, API: api}
}

// outcomeOf is whether a call on route can succeed with outcome o.
func outcomeOf(route string, o OutcomeOutcome) bool {
	switch route {
	case RouteHold:
		return o == OutcomeOutcomeHeld || o == OutcomeOutcomeAlreadyInForce
	case RouteRelease:
		return o == OutcomeOutcomeReleased
	case RouteOpen:
		return o == OutcomeOutcomeOpened || o == OutcomeOutcomeAlreadyOpen
	}
	return false
}

func (c *Client) read(ctx context.Context, path string, q url.Values, into any) error {
	return c.do(ctx, http.MethodGet, path, q, nil, into, false)
}

// do sends one request and decodes a 200 into into. A write whose request left this client
// and got no answer is ErrUnknown; one that never left is ErrNotSent.
func (c *Client) do(ctx context.Context, method, path string, q url.Values, body []byte, into any, write bool) error {
	token, err := c.token.Token()
	if err != nil {
		return &callError{class: ErrNotSent, msg: "reading the token", err: err}
	}
	u := *c.base
	u.Path = c.base.Path + path
	u.RawQuery = q.Encode()
	send := func() (*http.Response, bool, error) {
		var rd io.Reader
		if body != nil {
			rd = bytes.NewReader(body)
		}
		var wrote atomic.Bool
		trace := &httptrace.ClientTrace{
			WroteHeaders: func() { wrote.Store(true) },
		}
		req, err := http.NewRequestWithContext(httptrace.WithClientTrace(ctx, trace), method, u.String(), rd)
		if err != nil {
			return nil, false, &callError{class: ErrInvalid, msg: "building the request", err: err}
		}
		req.Header.Set("Authorization", "Bearer "+token)
		req.Header.Set("Accept", "application/json")
		req.Header.Set("User-Agent", c.agent)
		if body != nil {
			req.Header.Set("Content-Type", "application/json")
		}
		resp, err := c.http.Load().Do(req)
		return resp, wrote.Load(), err
	}
	resp, wrote, err := send()
	if err != nil && !wrote && c.ca != nil && unknownAuthority(err) {
		// The server's certificate is from a CA the pool lacks: the hold API's CA rotated.
		// Nothing was sent; read the CA again and connect once more.
		if rerr := c.reloadCA(); rerr != nil {
			return &callError{class: ErrNotSent, msg: "the server's certificate is from an unknown authority, and reading the CA again failed", err: errors.Join(err, rerr)}
		}
		resp, wrote, err = send()
	}
	if err != nil {
		var ce *callError
		if errors.As(err, &ce) {
			return err // the request could not be built
		}
		if !wrote {
			return &callError{class: ErrNotSent, msg: "the request was not sent", err: err}
		}
		if write {
			return &callError{class: ErrUnknown, msg: "the request was sent and no answer came back; read Status after the CallBound", err: err}
		}
		return fmt.Errorf("holdfast: no answer: %w", err)
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(io.LimitReader(resp.Body, 4<<20))
	if err != nil {
		if write {
			return &callError{class: ErrUnknown, msg: "the answer was cut off; read Status after the CallBound", err: err}
		}
		return fmt.Errorf("holdfast: reading the answer: %w", err)
	}
	if resp.StatusCode == http.StatusOK {
		if err := json.Unmarshal(raw, into); err != nil {
			if write {
				return &callError{class: ErrUnknown, msg: "the answer could not be read; read Status after the CallBound", err: err}
			}
			return fmt.Errorf("holdfast: the answer could not be read: %w", err)
		}
		return nil
	}
	var eb ErrorBody
	if json.Unmarshal(raw, &eb) != nil || eb.Error == "" {
		eb = ErrorBody{Message: strings.TrimSpace(string(raw))}
	}
	return answerError(resp.StatusCode, eb, retryAfter(resp.Header.Get("Retry-After")), write)
}

func retryAfter(v string) time.Duration {
	if n, err := strconv.Atoi(strings.TrimSpace(v)); err == nil && n >= 0 {
		return time.Duration(n) * time.Second
	}
	return 0
}

// expand fills a route's path template ("POST /v1/namespaces/{ns}/trainjobs/{name}/hold").
func expand(route string, job TrainJob) string {
	_, path, _ := strings.Cut(route, " ")
	path = strings.ReplaceAll(path, "{ns}", url.PathEscape(job.Namespace))
	path = strings.ReplaceAll(path, "{name}", url.PathEscape(job.Name))
	return path
}
