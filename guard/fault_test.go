package guard_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/leasehold/leasehold/fencing"
	"github.com/leasehold/leasehold/fencing/fencingtest"
	"github.com/leasehold/leasehold/guard"
	"github.com/leasehold/leasehold/internal/testbed/etcdtest"
)

// S3: a blackholed holder's watched context is cancelled strictly before
// another client sees its key deleted, in every trial. The trials run side
// by side, each with its own client, link and session.
func TestBlackholedHolderStopsBeforeServerDeletes(t *testing.T) {
	etcdtest.BlackholeTrials(t, fencingtest.Single(t), 20, 3*time.Second, "blackhole",
		func(_ *fencing.Session, h *fencing.Hold, link *fencingtest.Link, deletion <-chan time.Time) func() error {
			work := watch(t, h)
			return func() error {
				link.Blackhole()
				return etcdtest.StoppedBeforeDeletion(h, work, deletion)
			}
		})
}

// S2 under a real pause: a holder SIGSTOPped past its TTL loses the lock to
// another process; once resumed, its guarded write fails with ErrNotOwner and
// the new holder's write stands.
func TestPausedHolderWriteIsFenced(t *testing.T) {
	c := fencingtest.Single(t)
	p := fencingtest.StartHelper(t, "holder", c.Endpoints()[0], "paused", "2s")
	old, err := fencing.ParseToken(p.Expect(t, wait, "locked"))
	if err != nil {
		t.Fatal(err)
	}
	p.Send(t, "write owner old")
	if got := p.Expect(t, wait, "wrote"); got != "ok" {
		t.Fatalf("holder's write before the pause: %s", got)
	}
	p.Stop(t)
	h := lock(t, newSession(t, c.Client(t)), "paused") // acquired once the paused lease expires
	if h.Token().Compare(old) <= 0 {
		t.Fatalf("new token %v not greater than paused holder's %v", h.Token(), old)
	}
	if _, err := guard.Put(fencingtest.Context(t, wait), h, "owner", "new"); err != nil {
		t.Fatal(err)
	}
	p.Cont(t)
	p.Send(t, "write owner stale")
	if got := p.Expect(t, wait, "wrote"); got != "notowner" {
		t.Fatalf("paused holder's write after resuming: %s; want notowner", got)
	}
	if got := get(t, c, "owner"); got != "new" {
		t.Fatalf("owner = %q; want the new holder's write to stand", got)
	}
}

// S3 while the watch is being re-armed: the holder's member loses its raft
// leader (the watch is cancelled, "no leader") and the holder's requests
// vanish, so the new watch is never created. The context must still end,
// with the lease's cause, when the session stops vouching.
func TestRearmingWatchEndsWithSession(t *testing.T) {
	etcdtest.Long(t)
	c := fencingtest.Three(t)
	link := etcdtest.NewLinkTo(t, c, 0)
	cli := fencingtest.NewClient(t, link.Endpoints())
	s := newSession(t, cli, fencing.WithTTL(3*time.Second))
	work := watch(t, lock(t, s, "rearm"))
	etcdtest.BlackholeRequests(link)
	c.Stop(1)
	c.Stop(2)
	t.Cleanup(func() { link.Restore(); c.Restart(t, 1); c.Restart(t, 2) })
	<-s.Done()
	fencingtest.WaitFor(t, wait, "the watched context to end with the session", func() bool { return work.Err() != nil })
	if cause := context.Cause(work); !errors.Is(cause, fencing.ErrLeaseUnconfirmed) {
		t.Fatalf("cause = %v; want ErrLeaseUnconfirmed", cause)
	}
}

// A hold's Context asked for during a partition returns once the session
// stops vouching, already done; Unlock does not wait for it.
func TestHoldContextDuringPartition(t *testing.T) {
	c := fencingtest.Single(t)
	cli, link := c.ProxiedClient(t)
	s := newSession(t, cli, fencing.WithTTL(2*time.Second))
	t.Cleanup(link.Restore)
	h := lock(t, s, "partitioned")
	link.Blackhole()
	got := make(chan context.Context, 1)
	go func() { got <- h.Context() }()
	ctx, cancel := context.WithTimeout(t.Context(), 100*time.Millisecond)
	defer cancel()
	h.Unlock(ctx) // fails through the blackhole, but returns
	select {
	case work := <-got:
		if work.Err() == nil {
			t.Fatal("Context() during a partition returned a live context")
		}
	case <-time.After(wait):
		t.Fatal("Context() still blocked long after ValidUntil")
	}
}
