package fencing_test

import (
	"context"
	"errors"
	"fmt"
	"github.com/leasehold/leasehold/internal/testbed/kit"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/leasehold/leasehold/fencing"
	"github.com/leasehold/leasehold/fencing/fencingtest"
	"github.com/leasehold/leasehold/internal/testbed/etcdtest"
)

// noLeases fails t if any lease exists: a failed NewSession must leave none.
func noLeases(t *testing.T, c *fencingtest.Cluster) {
	t.Helper()
	resp, err := c.Admin.Leases(fencingtest.Context(t, wait))
	if err != nil {
		t.Fatal(err)
	}
	if len(resp.Leases) != 0 {
		t.Fatalf("%d leases left behind", len(resp.Leases))
	}
}

func TestNewSessionRejectsBadInput(t *testing.T) {
	c := fencingtest.Single(t)
	closed := fencingtest.NewClient(t, c.Endpoints())
	closed.Close()
	cancelled, cancel := context.WithCancel(context.Background())
	cancel()
	ctx := fencingtest.Context(t, wait)
	for _, tc := range []struct {
		name string
		run  func() error
		want error
	}{
		{"nil client", func() error { _, err := fencing.NewSession(ctx, nil); return err }, fencing.ErrInvalidArgument},
		{"closed client", func() error { _, err := fencing.NewSession(ctx, closed); return err }, fencing.ErrInvalidArgument},
		{"cancelled ctx", func() error { _, err := fencing.NewSession(cancelled, c.Admin); return err }, context.Canceled},
		{"TTL below floor", func() error {
			_, err := fencing.NewSession(ctx, c.Admin, fencing.WithTTL(1900*time.Millisecond))
			return err
		}, fencing.ErrInvalidArgument},
		{"zero margin", func() error {
			_, err := fencing.NewSession(ctx, c.Admin, fencing.WithSafetyMargin(0))
			return err
		}, fencing.ErrInvalidArgument},
		{"margin half TTL", func() error {
			_, err := fencing.NewSession(ctx, c.Admin, fencing.WithTTL(4*time.Second), fencing.WithSafetyMargin(2*time.Second))
			return err
		}, fencing.ErrInvalidArgument},
		{"no request in flight", func() error {
			_, err := fencing.NewSession(ctx, c.Admin, fencing.WithMaxInFlight(0))
			return err
		}, fencing.ErrInvalidArgument},
		{"negative requests in flight", func() error {
			_, err := fencing.NewSession(ctx, c.Admin, fencing.WithMaxInFlight(-1))
			return err
		}, fencing.ErrInvalidArgument},
		{"nil option", func() error { _, err := fencing.NewSession(ctx, c.Admin, nil); return err }, fencing.ErrInvalidArgument},
		{"nil session", func() error { _, err := fencing.NewMutex(nil, "a"); return err }, fencing.ErrInvalidArgument},
	} {
		if err := tc.run(); !errors.Is(err, tc.want) {
			t.Errorf("%s: err = %v; want %v", tc.name, err, tc.want)
		}
	}
	noLeases(t, c)
}

func TestSessionUsesGrantedTTL(t *testing.T) {
	c := fencingtest.Single(t)
	before := time.Now()
	s := newSession(t, c.Admin, fencing.WithTTL(2500*time.Millisecond), fencing.WithSafetyMargin(time.Second))
	if s.TTL() != 3*time.Second {
		t.Fatalf("TTL() = %v; want 3s (2.5s rounded up)", s.TTL())
	}
	// Sent before the grant, so ValidUntil is at most before+TTL-margin.
	if limit := before.Add(2 * time.Second); s.ValidUntil().After(time.Now().Add(2*time.Second)) || !s.ValidUntil().After(before) {
		t.Fatalf("ValidUntil() = %v; want within (%v, %v]", s.ValidUntil(), before, limit)
	}
	ttl, err := c.Admin.TimeToLive(fencingtest.Context(t, wait), s.Lease())
	if err != nil || ttl.GrantedTTL != 3 {
		t.Fatalf("server lease: %+v, %v; want granted TTL 3", ttl, err)
	}
}

func TestSessionRenews(t *testing.T) {
	c := fencingtest.Single(t)
	s := newSession(t, c.Admin, fencing.WithTTL(2*time.Second))
	first := s.ValidUntil()
	fencingtest.WaitFor(t, wait, "a renewal to extend ValidUntil", func() bool { return s.ValidUntil().After(first) })
	// Renewed past the first deadline: the session outlived its first TTL.
	fencingtest.WaitFor(t, wait, "the first deadline to pass", func() bool { return time.Now().After(first.Add(time.Second)) })
	if err := s.Err(); err != nil {
		t.Fatalf("session ended while renewing: %v", err)
	}
}

// A session renews on one stream, kept open between renewals. When that
// stream breaks while idle (here its member restarts), the next renewal
// goes on a new stream at once: no renewal sent after the member is back
// fails. The TTL outlasts a slow restart on a loaded machine and gRPC's
// reconnect backoff after it (1 s, growing with each failed dial): with 6 s
// a session has 3.4 s left at worst, and one ran out once in CI.
func TestRenewalAfterRestartOpensNewStream(t *testing.T) {
	c := fencingtest.Single(t)
	var mu sync.Mutex
	var back time.Time // when the member was back; zero before
	var renewed, failed int
	s := newSession(t, c.Client(t), fencing.WithTTL(15*time.Second), fencing.WithObserver(fencing.Observer{
		OnRenew: func(e fencing.RenewEvent) {
			mu.Lock()
			defer mu.Unlock()
			if back.IsZero() || time.Now().Add(-e.RoundTrip).Before(back) {
				return // sent before the member was back
			}
			if e.Err != nil {
				failed++
			} else {
				renewed++
			}
		},
	}))
	first := s.ValidUntil()
	fencingtest.WaitFor(t, wait, "a first renewal, which opens the stream", func() bool { return s.ValidUntil().After(first) })
	c.Stop(0)
	c.Restart(t, 0)
	c.WaitLeader(t)
	mu.Lock()
	back = time.Now()
	mu.Unlock()
	fencingtest.WaitFor(t, wait, "two renewals sent after the restart", func() bool {
		if err := s.Err(); err != nil {
			t.Fatalf("session ended before two renewals after the restart: %v", err)
		}
		mu.Lock()
		defer mu.Unlock()
		return renewed+failed >= 2
	})
	mu.Lock()
	defer mu.Unlock()
	if failed > 0 {
		t.Fatalf("%d of the renewals sent after the restart failed", failed)
	}
	if err := s.Err(); err != nil {
		t.Fatalf("session ended: %v", err)
	}
}

func TestSessionEndsWhenLeaseRevoked(t *testing.T) {
	c := fencingtest.Single(t)
	s := newSession(t, c.Client(t), fencing.WithTTL(2*time.Second))
	c.Revoke(t, s.Lease())
	select {
	case <-s.Done():
	case <-time.After(wait):
		t.Fatal("Done not closed after the lease was revoked")
	}
	if err := s.Err(); !errors.Is(err, fencing.ErrLeaseExpired) {
		t.Fatalf("Err() = %v; want ErrLeaseExpired", err)
	}
	if !s.ValidUntil().Before(time.Now()) {
		t.Fatalf("ValidUntil() = %v after the session ended; want in the past", s.ValidUntil())
	}
}

func TestSessionCloseReleasesHolds(t *testing.T) {
	c := fencingtest.Single(t)
	s := newSession(t, c.Client(t))
	h := lock(t, newMutex(t, s, "close"))
	if err := s.Close(fencingtest.Context(t, wait)); err != nil {
		t.Fatalf("Close: %v", err)
	}
	if err := s.Err(); !errors.Is(err, fencing.ErrSessionClosed) {
		t.Fatalf("Err() = %v; want ErrSessionClosed", err)
	}
	if etcdtest.Exists(t, c, h.Key()) {
		t.Fatal("hold's key outlived Close")
	}
	if err := s.Close(fencingtest.Context(t, wait)); err != nil {
		t.Fatalf("second Close: %v", err)
	}
	if _, err := newMutex(t, s, "close").Lock(fencingtest.Context(t, wait)); !errors.Is(err, fencing.ErrSessionExpired) {
		t.Fatalf("Lock on closed session: %v; want ErrSessionExpired", err)
	}
	if err := h.Unlock(fencingtest.Context(t, wait)); !errors.Is(err, fencing.ErrNotHeld) {
		t.Fatalf("Unlock after Close: %v; want ErrNotHeld", err)
	}
}

func TestSessionEndsWhenClientCloses(t *testing.T) {
	c := fencingtest.Single(t)
	cli := fencingtest.NewClient(t, c.Endpoints())
	s := newSession(t, cli)
	cli.Close()
	select {
	case <-s.Done():
	case <-time.After(wait):
		t.Fatal("Done not closed after the client closed")
	}
	if err := s.Err(); !errors.Is(err, fencing.ErrSessionClosed) {
		t.Fatalf("Err() = %v; want ErrSessionClosed", err)
	}
}

// S3: a partitioned holder's session ends, and its ValidUntil lies, before
// the server expires the lease and another client sees the key deleted. The
// trials run side by side, each with its own client and link.
func TestBlackholedSessionEndsBeforeServerDeletes(t *testing.T) {
	etcdtest.BlackholeTrials(t, fencingtest.Single(t), 20, 2*time.Second, "blackhole",
		func(s *fencing.Session, _ *fencing.Hold, link *fencingtest.Link, deletion <-chan time.Time) func() error {
			return func() error { return partitionTrial(s, link, deletion) }
		})
}

// partitionTrial blackholes the session's link and checks that the session
// stopped vouching before the server deleted its key.
func partitionTrial(s *fencing.Session, link *fencingtest.Link, deletion <-chan time.Time) error {
	link.Blackhole()
	atCut := s.ValidUntil()
	deletedAt, err := etcdtest.StoppedBefore(s.Done(), deletion)
	if err != nil {
		return fmt.Errorf("lease %x (ValidUntil at cut %v): %w", s.Lease(), atCut, err)
	}
	if !atCut.Before(deletedAt) {
		return fmt.Errorf("lease %x: ValidUntil at cut %v, not before the delete at %v", s.Lease(), atCut, deletedAt)
	}
	if err := s.Err(); !errors.Is(err, fencing.ErrLeaseUnconfirmed) {
		return fmt.Errorf("lease %x: Err() = %v; want ErrLeaseUnconfirmed", s.Lease(), err)
	}
	return nil
}

// Holds whose contexts are watched on the session's one watch stream all
// end when the client under them closes: each context with the session's
// cause, and no goroutine left (TestMain's leak check). Unlock then fails
// at once (clientv3 retries a closed client's failure by itself until the
// caller's ctx ends: it took 6 s), and the keys go with the lease.
func TestWatchedHoldsEndWhenClientCloses(t *testing.T) {
	c := fencingtest.Single(t)
	var ctr etcdtest.Counter
	cli := fencingtest.NewClient(t, c.Endpoints(), etcdtest.WithCounter(&ctr))
	s := newSession(t, cli, fencing.WithTTL(2*time.Second))
	var holds []*fencing.Hold
	for i := range 3 {
		h := lock(t, newMutex(t, s, fmt.Sprint("closing-", i)))
		h.Context()
		holds = append(holds, h)
	}
	fencingtest.WaitFor(t, wait, "the holds' watches", func() bool { return ctr.Requests("Watch") >= len(holds) })
	cli.Close()
	for _, h := range holds {
		if cause := fencingtest.Ended(t, h.Context(), wait, "a watched hold"); !errors.Is(cause, fencing.ErrSessionClosed) {
			t.Errorf("hold %s ended with %v; want ErrSessionClosed", h.Key(), cause)
		}
		if err := h.Unlock(fencingtest.Context(t, wait)); !errors.Is(err, fencing.ErrNotHeld) || !errors.Is(err, fencing.ErrSessionClosed) {
			t.Errorf("Unlock of %s on a closed client: %v; want ErrNotHeld and ErrSessionClosed", h.Key(), err)
		}
	}
	for _, h := range holds {
		fencingtest.WaitFor(t, wait, "the keys to go with the lease", func() bool { return !etcdtest.Exists(t, c, h.Key()) })
	}
}

// A session that cannot reach etcd says which endpoints and why, not only
// that its ctx ended.
func TestNewSessionNamesUnreachableEndpoint(t *testing.T) {
	addr, err := kit.FreeAddr() // nothing listens there
	if err != nil {
		t.Fatal(err)
	}
	cli := fencingtest.NewClient(t, []string{"http://" + addr})
	ctx, cancel := context.WithTimeout(t.Context(), time.Second)
	defer cancel()
	_, err = fencing.NewSession(ctx, cli)
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("NewSession = %v; want an error wrapping context.DeadlineExceeded", err)
	}
	for _, want := range []string{addr, "connection refused"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("NewSession's error %q does not say %q", err, want)
		}
	}
}

// Close sends no revoke for a lease the server said is gone: clientv3 would
// log etcd's refusal of it as a warning.
func TestCloseRevokesNoLeaseKnownGone(t *testing.T) {
	c := fencingtest.Single(t)
	var ctr etcdtest.Counter
	s := newSession(t, c.Client(t, etcdtest.WithCounter(&ctr)), fencing.WithTTL(2*time.Second))
	c.Revoke(t, s.Lease())
	fencingtest.WaitFor(t, wait, "the session to end", func() bool { return s.Err() != nil })
	if err := s.Err(); !errors.Is(err, fencing.ErrLeaseExpired) {
		t.Fatalf("Err() = %v; want ErrLeaseExpired", err)
	}
	for range 2 {
		if err := s.Close(fencingtest.Context(t, wait)); err != nil {
			t.Fatalf("Close: %v", err)
		}
	}
	if n := ctr.Requests("LeaseRevoke"); n != 0 {
		t.Fatalf("Close sent %d revokes for a lease found gone; want 0", n)
	}

	// Ended unconfirmed (renewals stalled), the session revokes its lease
	// at once; Close sends no second revoke.
	ctr.Reset()
	cli, link := c.ProxiedClient(t, etcdtest.WithCounter(&ctr))
	s = newSession(t, cli, fencing.WithTTL(2*time.Second))
	link.StallRenewals()
	fencingtest.WaitFor(t, wait, "the session to end unconfirmed", func() bool { return s.Err() != nil })
	if err := s.Err(); !errors.Is(err, fencing.ErrLeaseUnconfirmed) {
		t.Fatalf("Err() = %v; want ErrLeaseUnconfirmed", err)
	}
	fencingtest.WaitFor(t, wait, "the session's own revoke", func() bool { return ctr.Requests("LeaseRevoke") == 1 })
	if err := s.Close(fencingtest.Context(t, wait)); err != nil {
		t.Fatalf("Close: %v", err)
	}
	link.Restore()
	if n := ctr.Requests("LeaseRevoke"); n != 1 {
		t.Fatalf("revokes after an unconfirmed end and Close: %d; want 1", n)
	}

	ctr.Reset()
	s = newSession(t, c.Client(t, etcdtest.WithCounter(&ctr)))
	for range 2 {
		if err := s.Close(fencingtest.Context(t, wait)); err != nil {
			t.Fatalf("Close: %v", err)
		}
	}
	if n := ctr.Requests("LeaseRevoke"); n != 1 {
		t.Fatalf("two Closes sent %d revokes; want 1", n)
	}
}
