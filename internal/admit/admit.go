// Package admit holds a session's places for requests in flight
// (fencing.WithMaxInFlight): a burst of calls on one session waits its turn
// in the client rather than queueing the lease's renewal behind it.
package admit

import (
	"context"
	"errors"
	"fmt"
)

// ErrNotSent is a request given up while it waited for one of its session's
// places in flight: it sent nothing, so it cannot have been applied.
var ErrNotSent = errors.New("not sent: the session's requests in flight at their limit")

// Places lets at most n requests that share it (a session's) be out at once;
// the others wait their turn, first come first served. A nil *Places admits
// every request at once.
//
// The limit keeps a burst of calls on one session (a hundred thousand Locks
// started at once) from queueing its lease's renewal behind the burst, on
// the client's connection and in etcd: unbounded, the renewal waited longer
// than the session could vouch for its lease, and the session ended.
type Places struct{ taken chan struct{} }

// New returns places for n requests, n > 0.
func New(n int) *Places { return &Places{taken: make(chan struct{}, n)} }

// Enter waits for a place, or until ctx or life ends: then it returns an
// error wrapping ErrNotSent and ctx's error if ctx has ended, else life's
// cause. Call Leave once the request has returned.
func (p *Places) Enter(ctx, life context.Context) error {
	if p == nil {
		return nil
	}
	select {
	case p.taken <- struct{}{}:
		return nil
	default:
	}
	select {
	case p.taken <- struct{}{}:
		return nil
	case <-ctx.Done():
	case <-life.Done():
	}
	if err := ctx.Err(); err != nil { // ctx's error first, whichever woke us
		return fmt.Errorf("%w: %w", ErrNotSent, err)
	}
	return fmt.Errorf("%w: %w", ErrNotSent, context.Cause(life))
}

// Leave frees the place Enter took.
func (p *Places) Leave() {
	if p != nil {
		<-p.taken
	}
}
