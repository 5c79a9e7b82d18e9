package holdfast_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"time"

	holdfast "github.com/holdfast-dev/holdfast/clients/go"
)

// A supervisor's side of a lost node: hold the job under a new instance, wait until the
// held execution's pods are gone (the node fenced, if it does not come back), release.
func Example() {
	c, err := holdfast.New(holdfast.Config{
		URL:   "https://holdfast-controller.holdfast-system.svc:8443",
		Token: holdfast.FileToken("/var/run/secrets/holdfast/token"), // projected, audience holdfast
		// The ConfigMap holdfast-hold-api-ca's ca.crt, got by name from holdfast's namespace
		// (a pod cannot mount it from there) and kept up to date in this file: read again
		// when the CA rotates.
		CA: holdfast.FileCA("/etc/holdfast/ca.crt"),
	})
	if err != nil {
		log.Fatal(err)
	}
	ctx := context.Background()
	// Preflight first: which calls the cluster supports, and the CallBound.
	pctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	job := holdfast.TrainJob{Namespace: "team-a", Name: "mnist"}
	pre, err := c.Preflight(pctx, &job) // about one of its jobs: a namespace-bound caller may
	// not read the cluster-wide preflight
	if err != nil {
		log.Fatal(err)
	}
	for call, support := range pre.Calls {
		if !support.Supported {
			log.Printf("%s is unsupported: %s", call, *support.Reason)
		}
	}

	hold := holdfast.CallMeta{Instance: 3, Reason: "node n1 lost"} // larger than any before
	if err := settle(ctx, c, job, hold, true); err != nil {
		log.Fatal(err)
	}
	// ... the node is fenced or comes back; the held execution's pods go ...
	if err := settle(ctx, c, job, hold, false); err != nil {
		log.Fatal(err)
	}
}

// settle makes a Hold or a Release until it has an answer it can act on: PodsRemain and
// Conflict are tried again, each try with a new deadline; an Unknown outcome is settled by
// reading Status once the call's deadline plus the CallBound has passed.
func settle(ctx context.Context, c *holdfast.Client, job holdfast.TrainJob, m holdfast.CallMeta, isHold bool) error {
	call := c.Release
	if isHold {
		call = c.Hold
	}
	for {
		try, cancel := context.WithTimeout(ctx, 30*time.Second) // a new deadline for each try
		deadline, _ := try.Deadline()
		out, err := call(try, job, m)
		cancel()
		switch {
		case err == nil:
			log.Printf("%s: %s", job, out.Outcome)
			return nil
		case errors.Is(err, holdfast.ErrUnknown):
			// It may or may not have landed: wait until it cannot land any more, then look.
			time.Sleep(time.Until(deadline.Add(c.CallBound())))
			read, cancel := context.WithTimeout(ctx, 30*time.Second)
			st, serr := c.Status(read, job)
			cancel()
			if serr != nil {
				return serr
			}
			i, held := st.HoldInstance()
			if inForce := held && i == m.Instance; inForce == isHold {
				return nil // it landed
			}
			// It did not land: the same call again (a retried Hold that had landed would
			// answer AlreadyInForce, so retrying is safe).
		case errors.Is(err, holdfast.ErrStaleHold):
			return fmt.Errorf("overtaken by a newer hold: %w", err) // final; also an ErrRejected
		case holdfast.Retryable(err): // PodsRemain, Conflict, and the like
			time.Sleep(2 * time.Second)
		default: // Rejected, Invalid, Unsupported (with its reason), Forbidden ...
			return err
		}
	}
}
