package election

import (
	"log/slog"
	"time"

	"github.com/leasehold/leasehold/fencing"
)

// WithDeclineFor sets how long a RunGroup replica declines a failing name,
// so that a test need not wait five minutes for a decline to end.
func WithDeclineFor(d time.Duration) RunOption { return func(c *runConfig) { c.declineFor = d } }

// FollowSuccessor makes s a candidate of name with rank and follows who
// queues right behind t, as a ranked leader does from its work's start
// (its record written by the candidacy, not by an enqueue). ready reports
// whether that is a preferred candidate; stop ends both.
func FollowSuccessor(s *fencing.Session, name string, t *Term, rank ...int64) (ready func() bool, stop func()) {
	c := join(s, name, rank, nil, slog.New(slog.DiscardHandler))
	c.firstDone()
	succ := c.successor(t)
	ready = func() bool {
		succ.mu.Lock()
		defer succ.mu.Unlock()
		return succ.ready
	}
	return ready, func() { succ.stop(); c.leave() }
}
