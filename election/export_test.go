package election

import (
	"log/slog"
	"time"

	"github.com/leasehold/leasehold/fencing"
	"go.etcd.io/etcd/api/v3/mvccpb"
)

// WithDeclineFor sets how long a RunGroup replica declines a failing name,
// so that a test need not wait five minutes for a decline to end.
func WithDeclineFor(d time.Duration) RunOption { return func(c *runConfig) { c.declineFor = d } }

// JoinCandidates makes s a candidate of name with rank: its record is written
// and kept, with no key in the name's queue, until leave.
func JoinCandidates(s *fencing.Session, name string, rank ...int64) (leave func()) {
	c := join(s, name, rank, nil, slog.New(slog.DiscardHandler))
	c.firstDone()
	return c.leave
}

// FollowSuccessor makes s a candidate of name with rank and follows who
// queues right behind t, as a ranked leader does from its work's start
// (its record written by the candidacy, not by an enqueue). ready reports
// whether that is a preferred candidate; stop ends both.
func FollowSuccessor(s *fencing.Session, name string, t *Term, rank ...int64) (ready func() bool, stop func()) {
	return FollowSuccessorJudging(s, name, t, nil, rank...)
}

// FollowSuccessorJudging is FollowSuccessor with judging run in the
// follower each time it is about to judge the key right behind t (next,
// empty if none): after it took the channel of the view's next change.
// view reports what the follower's view holds at that moment: how many
// records, and whether next is a preferred candidate's.
func FollowSuccessorJudging(s *fencing.Session, name string, t *Term,
	judging func(next string, view func() (records int, preferred bool)), rank ...int64) (ready func() bool, stop func()) {
	c := join(s, name, rank, nil, slog.New(slog.DiscardHandler))
	c.firstDone()
	if judging != nil {
		c.judging = func(next *mvccpb.KeyValue) {
			judging(string(next.GetKey()), func() (int, bool) {
				c.mu.Lock()
				records := len(c.records)
				c.mu.Unlock()
				return records, next != nil && c.isPreferred(next.Lease)
			})
		}
	}
	succ := c.successor(t)
	ready = func() bool {
		succ.mu.Lock()
		defer succ.mu.Unlock()
		return succ.ready
	}
	return ready, func() { succ.stop(); c.leave() }
}
