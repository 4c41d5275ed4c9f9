package guard_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/leasehold/leasehold/fencing"
	"github.com/leasehold/leasehold/guard"
	"github.com/leasehold/leasehold/internal/etcdtest"
)

// S3: a blackholed holder's watched context is cancelled strictly before
// another client sees its key deleted, in every trial. The trials run side
// by side, each with its own client, link and session.
func TestBlackholedHolderStopsBeforeServerDeletes(t *testing.T) {
	const trials = 20
	c := etcdtest.Single(t)
	errs := make(chan error, trials)
	for i := range trials {
		cli, link := c.ProxiedClient(t)
		s := newSession(t, cli, fencing.WithTTL(3*time.Second))
		t.Cleanup(link.Restore) // before the session's Close, which revokes
		h := lock(t, s, fmt.Sprintf("blackhole/%d", i))
		work := watch(t, h)
		deletion := c.Deletion(t, h.Key())
		go func() {
			link.Blackhole()
			errs <- stoppedBefore(h, work, deletion)
		}()
	}
	for range trials {
		if err := <-errs; err != nil {
			t.Error(err)
		}
	}
}

// stoppedBefore checks that work ended, for an unconfirmed lease, before the
// deletion of h's key was seen.
func stoppedBefore(h *fencing.Hold, work context.Context, deletion <-chan time.Time) error {
	cancelledAt := etcdtest.When(work.Done())
	deletedAt, ok := <-deletion
	if !ok {
		return fmt.Errorf("%v: watch ended without a delete", h.Token())
	}
	select {
	case at := <-cancelledAt:
		if !at.Before(deletedAt) {
			return fmt.Errorf("%v: cancelled at %v, not before the delete at %v", h.Token(), at, deletedAt)
		}
	default:
		return fmt.Errorf("%v: key deleted by the server while the work context was live", h.Token())
	}
	if cause := context.Cause(work); !errors.Is(cause, fencing.ErrLeaseUnconfirmed) {
		return fmt.Errorf("%v: cause %v; want ErrLeaseUnconfirmed", h.Token(), cause)
	}
	return nil
}

// S2 under a real pause: a holder SIGSTOPped past its TTL loses the lock to
// another process; once resumed, its guarded write fails with ErrNotOwner and
// the new holder's write stands.
func TestPausedHolderWriteIsFenced(t *testing.T) {
	c := etcdtest.Single(t)
	p := etcdtest.StartHelper(t, "holder", c.Endpoints()[0], "paused", "2s")
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
	if _, err := guard.Put(etcdtest.Context(t, wait), h, "owner", "new"); err != nil {
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
