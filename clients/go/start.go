package holdfast

import (
	"context"
	"fmt"
	"time"
)

// Start starts a TrainJob the supervisor created: it waits, within the call's deadline, for
// the job's Workload (Kueue mode: Kueue creates it shortly after the TrainJob), reading
// Status, so that every started job has one and a later Hold cannot meet ErrNoWorkload;
// then it calls Open. In plain mode it is Open. Waiting past the deadline is
// ErrDeadlinePassed (an ErrRejected), and nothing was written.
func (c *Client) Start(ctx context.Context, job TrainJob, m CallMeta) (Outcome, error) {
	deadline, ok := Deadline(ctx, m)
	if !ok {
		return Outcome{}, &callError{class: ErrInvalid, msg: fmt.Sprintf("start of %s: the call has no deadline: give its context one (context.WithTimeout); nothing was sent", job)}
	}
	ctx, cancel := context.WithDeadline(ctx, deadline)
	defer cancel()
	pause := 100 * time.Millisecond
	for {
		st, err := c.Status(ctx, job)
		if err != nil {
			if ctx.Err() != nil {
				return Outcome{}, &callError{class: ErrDeadlinePassed, msg: fmt.Sprintf("start of %s: the deadline passed while waiting for its Workload; nothing was written", job), err: err}
			}
			return Outcome{}, fmt.Errorf("start of %s: %w", job, err)
		}
		if !WaitingForWorkload(st) {
			break
		}
		t := time.NewTimer(pause)
		select {
		case <-ctx.Done():
			t.Stop()
			return Outcome{}, &callError{class: ErrDeadlinePassed, msg: fmt.Sprintf("start of %s: no Workload appeared before the deadline (is the TrainJob queued: its kueue.x-k8s.io/queue-name label?); nothing was written", job)}
		case <-t.C:
		}
		pause = min(2*pause, 2*time.Second)
	}
	return c.Open(ctx, job, m)
}
