package election_test

import (
	"context"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/leasehold/leasehold/election"
	"github.com/leasehold/leasehold/fencing"
	"github.com/leasehold/leasehold/fencing/fencingtest"
)

// sessions records what OnSession reports.
type sessions struct {
	mu  sync.Mutex
	all []*fencing.Session
}

func (s *sessions) add(x *fencing.Session) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.all = append(s.all, x)
}

func (s *sessions) last() (*fencing.Session, int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.all) == 0 {
		return nil, 0
	}
	return s.all[len(s.all)-1], len(s.all)
}

// OnSession reports each session Run and RunGroup make, before they
// campaign on it: the term is on the session reported last, and after the
// lease is revoked the next term is on a new session, reported first.
func TestOnSessionReportsEachSession(t *testing.T) {
	c := fencingtest.Single(t)
	for _, kind := range []string{"Run", "RunGroup"} {
		t.Run(kind, func(t *testing.T) {
			var seen sessions
			terms := make(chan *election.Term, 4)
			work := func(ctx context.Context, term *election.Term) error {
				terms <- term
				<-ctx.Done()
				return nil
			}
			cli := c.Client(t)
			fencingtest.Go(t, func(ctx context.Context) error {
				if kind == "Run" {
					return election.Run(ctx, cli, "onsession-run", "a", work, election.OnSession(seen.add))
				}
				return election.RunGroup(ctx, cli, "onsession-group", []string{"onsession-name"}, work, election.OnSession(seen.add))
			})
			first := fencingtest.Receive(t, terms, "the first term")
			if s, n := seen.last(); n != 1 || s != first.Session() {
				t.Fatalf("%d sessions reported, the last %p; want 1, the term's %p", n, s, first.Session())
			}
			c.Revoke(t, first.Session().Lease())
			second := fencingtest.Receive(t, terms, "a term on a new session")
			if s, n := seen.last(); n != 2 || s != second.Session() || first.Session().Err() == nil {
				t.Fatalf("%d sessions reported, the last %p, the first ended with %v; want 2, the new term's %p, the first ended",
					n, s, first.Session().Err(), second.Session())
			}
		})
	}
}

// A nil OnSession is not called: Run leads as without it.
func TestOnSessionNil(t *testing.T) {
	c := fencingtest.Single(t)
	cli := c.Client(t)
	terms := make(chan *election.Term, 1)
	fencingtest.Go(t, func(ctx context.Context) error {
		return election.Run(ctx, cli, "onsession-nil", "a", func(ctx context.Context, term *election.Term) error {
			terms <- term
			<-ctx.Done()
			return nil
		}, election.OnSession(nil))
	})
	fencingtest.Receive(t, terms, "a term")
}

// A term lost while its work runs is resigned, in case the loss was seen
// wrongly and the key still leads; when that resign fails, Run hands over
// as for any failed resign, by ending the session, instead of campaigning
// again on it behind a key that may still lead. Found in review: the
// failure was ignored.
func TestRunDropThatFailsEndsTheSession(t *testing.T) {
	c := fencingtest.Single(t)
	var hang atomic.Bool
	r := &fencingtest.Replies{Decide: func(method string, _ any) fencingtest.Fault {
		if hang.Load() && strings.HasSuffix(method, "/DeleteRange") {
			return fencingtest.Hang
		}
		return fencingtest.Pass
	}}
	var seen sessions
	terms := make(chan *election.Term, 4)
	cli := c.Client(t, r.Option())
	fencingtest.Go(t, func(ctx context.Context) error {
		return election.Run(ctx, cli, "drop-fails", "a", func(ctx context.Context, term *election.Term) error {
			terms <- term
			<-ctx.Done()
			return nil
		}, election.OnSession(seen.add))
	})
	first := fencingtest.Receive(t, terms, "the first term")
	hang.Store(true)
	c.Delete(t, first.Key()) // lost: the drop's resign hangs, then fails
	fencingtest.WaitFor(t, wait, "the first session to end", func() bool { return first.Session().Err() != nil })
	hang.Store(false)
	second := fencingtest.Receive(t, terms, "a term on a new session")
	if s, n := seen.last(); n != 2 || s != second.Session() {
		t.Fatalf("%d sessions reported, the last %p; want 2, the new term's %p", n, s, second.Session())
	}
}
