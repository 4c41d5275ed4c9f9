package election

import (
	"context"
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
func JoinCandidates(s *fencing.Session, name string, levels ...int64) (leave func()) {
	c := join(s, name, levels, nil, slog.New(slog.DiscardHandler))
	c.firstDone()
	return c.leave
}

// FollowSuccessor makes s a candidate of name with rank and follows who
// queues right behind t, as a ranked leader does from its work's start
// (its record written by the candidacy, not by an enqueue). ready reports
// whether that is a preferred candidate; stop ends both.
func FollowSuccessor(s *fencing.Session, name string, t *Term, rank ...int64) (ready func() bool, stop func()) {
	c, succ := followSuccessor(s, name, t, rank)
	return func() bool { return succ.holds(c.preferredNext) }, func() { succ.stop(); c.leave() }
}

// AwaitSuccessorJudging is FollowSuccessor's wait, as a leader that gives
// way waits: await waits until the key right behind t is a preferred
// candidate's and reports whether it is, or gives up when ctx ends.
// judging runs each time await has found that key (next, empty if none)
// not to be one, and is about to wait for the next change; view reports
// what the view holds at that moment: how many records, and whether next is
// a preferred candidate's.
func AwaitSuccessorJudging(s *fencing.Session, name string, t *Term,
	judging func(next string, view func() (records int, preferred bool)), rank ...int64) (await func(context.Context) bool, stop func()) {
	c, succ := followSuccessor(s, name, t, rank)
	c.judging = func(next *mvccpb.KeyValue) {
		judging(string(next.GetKey()), func() (int, bool) {
			c.mu.Lock()
			records := len(c.records)
			c.mu.Unlock()
			return records, c.preferredNext(next)
		})
	}
	return func(ctx context.Context) bool { return succ.await(ctx, c.preferredNext) }, func() { succ.stop(); c.leave() }
}

func followSuccessor(s *fencing.Session, name string, t *Term, rank []int64) (*candidacy, *successor) {
	c := join(s, name, rank, nil, slog.New(slog.DiscardHandler))
	c.firstDone()
	return c, c.successor(t)
}

// holds reports whether ok holds of the key right behind the term now.
func (s *successor) holds(ok func(next *mvccpb.KeyValue) bool) bool {
	s.mu.Lock()
	known, gone, next := s.known, s.gone, s.next
	s.mu.Unlock()
	return known && !gone && ok(next)
}
