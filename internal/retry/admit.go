package retry

import (
	"context"
	"errors"
	"fmt"
)

// ErrNotSent is an attempt given up while it waited for one of its
// session's places in flight (see SetLimit): it sent nothing, so its
// request cannot have been applied.
var ErrNotSent = errors.New("not sent: the session's requests in flight at their limit")

// SetLimit lets at most n attempts that share l (a session's) be out at
// once; the others wait their turn, first come first served. Call it once,
// before any attempt. Without it, or on a nil *Latency, there is no limit.
//
// The limit keeps a burst of calls on one session (a hundred thousand Locks
// started at once) from queueing its lease's renewal behind the burst, on
// the client's connection and in etcd: unbounded, the renewal waited longer
// than the session could vouch for its lease, and the session ended.
func (l *Latency) SetLimit(n int) { l.places = make(chan struct{}, n) }

// enter waits for a place in flight, or until ctx or life ends: then it
// returns an error wrapping ErrNotSent and ctx's error if ctx has ended,
// else life's cause.
func (l *Latency) enter(ctx, life context.Context) error {
	if l == nil || l.places == nil {
		return nil
	}
	select {
	case l.places <- struct{}{}:
		return nil
	default:
	}
	l.waiting.Add(1)
	defer l.waiting.Add(-1)
	select {
	case l.places <- struct{}{}:
		return nil
	case <-ctx.Done():
	case <-life.Done():
	}
	if err := ctx.Err(); err != nil { // ctx's error first, whichever woke us
		return fmt.Errorf("%w: %w", ErrNotSent, err)
	}
	return fmt.Errorf("%w: %w", ErrNotSent, context.Cause(life))
}

// Waiting returns how many attempts wait for a place.
func (l *Latency) Waiting() int {
	if l == nil {
		return 0
	}
	return int(l.waiting.Load())
}

// leave frees the place enter took.
func (l *Latency) leave() {
	if l != nil && l.places != nil {
		<-l.places
	}
}

// Once sends a request once, outside Attempt (a guarded txn, a cleanup's
// delete, a read), in one of l's places in flight: send runs once a place
// is free, or Once returns an error wrapping ErrNotSent when ctx or life
// (the session's) ends first.
func Once[R any](l *Latency, ctx, life context.Context, send func() (R, error)) (R, error) {
	if err := l.enter(ctx, life); err != nil {
		var none R
		return none, err
	}
	defer l.leave()
	return send()
}
