package fencing_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/leasehold/leasehold/fencing"
	"github.com/leasehold/leasehold/fencing/fencingtest"
	"github.com/leasehold/leasehold/guard"
	"github.com/leasehold/leasehold/internal/keyspace"
	"github.com/leasehold/leasehold/internal/testbed/etcdtest"
)

func TestLockUnlockUncontendedSendsTwoRequests(t *testing.T) {
	c := fencingtest.Single(t)
	var ctr etcdtest.Counter
	s := newSession(t, c.Client(t, etcdtest.WithCounter(&ctr)))
	m := newMutex(t, s, "jobs/billing")
	ctx := fencingtest.Context(t, wait)
	ctr.Reset()
	h, err := m.Lock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := h.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	// The keepalive loop may renew meanwhile: count only the lock's methods.
	if got := ctr.Requests("Txn") + ctr.Requests("DeleteRange") + ctr.Requests("Range") + ctr.Requests("Watch"); got != 2 {
		t.Fatalf("Lock+Unlock sent %d requests; want 2 (%v)", got, &ctr)
	}
	if tok := h.Token(); tok.Name != "jobs/billing" || tok.Revision <= 0 {
		t.Fatalf("Token() = %#v", tok)
	}
}

func TestTryLockHeldSendsOneRequestAndLeavesNoKey(t *testing.T) {
	c := fencingtest.Single(t)
	var ctr etcdtest.Counter
	holder := lock(t, newMutex(t, newSession(t, c.Client(t)), "try"))
	m := newMutex(t, newSession(t, c.Client(t, etcdtest.WithCounter(&ctr)), fencing.WithIdentity("second")), "try")
	ctr.Reset()
	_, err := m.TryLock(fencingtest.Context(t, wait))
	if !errors.Is(err, fencing.ErrLocked) {
		t.Fatalf("TryLock on a held lock: %v; want ErrLocked", err)
	}
	if got := ctr.Requests("Txn"); got != 1 || ctr.Requests("") > 1+ctr.Requests("LeaseKeepAlive") {
		t.Fatalf("TryLock sent %v; want one Txn", &ctr)
	}
	if keys := etcdtest.LockKeys(t, c, "try"); !slices.Equal(keys, []string{holder.Key()}) {
		t.Fatalf("keys after failed TryLock = %q; want only the holder's", keys)
	}
	if err := holder.Unlock(fencingtest.Context(t, wait)); err != nil {
		t.Fatal(err)
	}
	h, err := m.TryLock(fencingtest.Context(t, wait))
	if err != nil {
		t.Fatalf("TryLock on a free lock: %v", err)
	}
	if h.Token().Compare(holder.Token()) <= 0 {
		t.Fatalf("token %v not greater than previous owner's %v", h.Token(), holder.Token())
	}
}

// S1, S7: tokens strictly increase across many handoffs among several
// sessions, and the critical section never has two occupants. Two of the
// workers share a session: they exclude each other like the rest.
func TestTokensIncreaseUnderContention(t *testing.T) {
	const workers, handoffs = 5, 200
	c := fencingtest.Single(t)
	sessions := make([]*fencing.Session, 4)
	for i := range sessions {
		sessions[i] = newSession(t, c.Client(t))
	}
	var (
		inside   atomic.Int32
		acquired atomic.Int32
		mu       sync.Mutex
		last     fencing.Token
		errs     = make(chan error, workers)
		ctx      = fencingtest.Context(t, 2*wait)
	)
	var wg sync.WaitGroup
	for w := range workers {
		m := newMutex(t, sessions[w%len(sessions)], "contended")
		wg.Go(func() {
			for acquired.Load() < handoffs {
				h, err := m.Lock(ctx)
				if err != nil {
					errs <- err
					return
				}
				if n := inside.Add(1); n != 1 {
					errs <- fmt.Errorf("%d holders inside the critical section", n)
				}
				mu.Lock()
				if h.Token().Compare(last) <= 0 {
					errs <- fmt.Errorf("token %v after %v: not increasing", h.Token(), last)
				}
				last = h.Token()
				mu.Unlock()
				acquired.Add(1)
				inside.Add(-1)
				if err := h.Unlock(ctx); err != nil {
					errs <- err
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	if keys := etcdtest.LockKeys(t, c, "contended"); len(keys) != 0 {
		t.Fatalf("keys left behind: %q", keys)
	}
}

// S6: names that are prefixes of each other, or differ only in separators,
// unicode or empty segments, are independent locks.
func TestNamesAreIsolated(t *testing.T) {
	c := fencingtest.Single(t)
	s := newSession(t, c.Client(t))
	names := []string{"a", "a/b", "a/", "/a", "a//b", "a/b/c", "a:1", "a b", "π", "π/π", "a@1", "a%00"}
	holds := map[string]*fencing.Hold{}
	for _, name := range names {
		h, err := newMutex(t, s, name).TryLock(fencingtest.Context(t, wait))
		if err != nil {
			t.Fatalf("TryLock(%q) with the other names held: %v", name, err)
		}
		holds[name] = h
	}
	for _, name := range names {
		if keys := etcdtest.LockKeys(t, c, name); !slices.Equal(keys, []string{holds[name].Key()}) {
			t.Errorf("queue of %q = %q; want only its own hold", name, keys)
		}
		if got := holds[name].Token().Name; got != name {
			t.Errorf("Token().Name = %q; want %q", got, name)
		}
	}
	// Releasing "a" hands over "a" only: "a/b" stays held.
	if err := holds["a"].Unlock(fencingtest.Context(t, wait)); err != nil {
		t.Fatal(err)
	}
	if _, err := newMutex(t, s, "a/b").TryLock(fencingtest.Context(t, wait)); !errors.Is(err, fencing.ErrLocked) {
		t.Fatalf("TryLock(a/b) after Unlock(a): %v; want ErrLocked", err)
	}
}

func TestInvalidNamesRejected(t *testing.T) {
	c := fencingtest.Single(t)
	s := newSession(t, c.Client(t))
	for _, name := range []string{"", "a\x00", "\x00", "a\x00b", "\xff", strings.Repeat("x", keyspace.MaxNameLen+1)} {
		if _, err := fencing.NewMutex(s, name); !errors.Is(err, fencing.ErrInvalidName) {
			t.Errorf("NewMutex(%q): %v; want ErrInvalidName", name, err)
		}
	}
	if _, err := fencing.NewMutex(s, strings.Repeat("x", keyspace.MaxNameLen)); err != nil {
		t.Errorf("NewMutex(%d bytes): %v", keyspace.MaxNameLen, err)
	}
	if keys := etcdtest.Keys(t, c, ""); len(keys) != 0 {
		t.Fatalf("keys written for invalid names: %q", keys)
	}
}

// S7: two Lock calls on one session exclude each other, and an old hold's
// Unlock never releases the newer one.
func TestTwoLocksOnOneSession(t *testing.T) {
	c := fencingtest.Single(t)
	s := newSession(t, c.Client(t))
	m := newMutex(t, s, "shared-session")
	first := lock(t, m)
	if _, err := m.TryLock(fencingtest.Context(t, wait)); !errors.Is(err, fencing.ErrLocked) {
		t.Fatalf("second TryLock on one session: %v; want ErrLocked", err)
	}
	got := make(chan *fencing.Hold, 1)
	go func() {
		h, err := m.Lock(fencingtest.Context(t, wait))
		if err != nil {
			t.Error(err)
		}
		got <- h
	}()
	fencingtest.WaitFor(t, wait, "the second Lock to queue", func() bool { return len(etcdtest.LockKeys(t, c, "shared-session")) == 2 })
	select {
	case <-got:
		t.Fatal("second Lock on one session returned while the first held")
	default:
	}
	if err := first.Unlock(fencingtest.Context(t, wait)); err != nil {
		t.Fatal(err)
	}
	second := <-got
	if second == nil {
		t.FailNow()
	}
	if err := first.Unlock(fencingtest.Context(t, wait)); !errors.Is(err, fencing.ErrNotHeld) {
		t.Fatalf("double Unlock: %v; want ErrNotHeld", err)
	}
	if !etcdtest.Exists(t, c, second.Key()) {
		t.Fatal("the old hold's second Unlock released the new hold")
	}
}

func TestUnlockAfterKeyDeletedIsNotHeld(t *testing.T) {
	c := fencingtest.Single(t)
	h := lock(t, newMutex(t, newSession(t, c.Client(t)), "deleted"))
	c.Delete(t, h.Key())
	if err := h.Unlock(fencingtest.Context(t, wait)); !errors.Is(err, fencing.ErrNotHeld) {
		t.Fatalf("Unlock after delete: %v; want ErrNotHeld", err)
	}
}

// waiter starts the Lock of name on s in the background once the lock is
// held, and returns when the waiter's key is queued.
func waiter(t *testing.T, c *fencingtest.Cluster, s *fencing.Session, name string, ctx context.Context) <-chan error {
	t.Helper()
	m := newMutex(t, s, name)
	before := len(etcdtest.LockKeys(t, c, name))
	errc := make(chan error, 1)
	go func() {
		h, err := m.Lock(ctx)
		if err == nil {
			err = h.Unlock(context.WithoutCancel(ctx))
		}
		errc <- err
	}()
	fencingtest.WaitFor(t, wait, "the waiter to queue", func() bool { return len(etcdtest.LockKeys(t, c, name)) > before })
	return errc
}

// S8: a cancelled Lock removes its key.
func TestCancelledLockLeavesNoKey(t *testing.T) {
	c := fencingtest.Single(t)
	holder := lock(t, newMutex(t, newSession(t, c.Client(t)), "cancel"))
	ctx, cancel := context.WithCancel(t.Context())
	errc := waiter(t, c, newSession(t, c.Client(t)), "cancel", ctx)
	cancel()
	if err := <-errc; !errors.Is(err, context.Canceled) {
		t.Fatalf("cancelled Lock: %v; want context.Canceled", err)
	}
	if keys := etcdtest.LockKeys(t, c, "cancel"); !slices.Equal(keys, []string{holder.Key()}) {
		t.Fatalf("keys after cancelled Lock = %q; want only the holder's", keys)
	}
}

// S5: a waiter whose lease is revoked fails instead of acquiring.
func TestLockFailsWhenLeaseRevokedWhileWaiting(t *testing.T) {
	c := fencingtest.Single(t)
	holder := lock(t, newMutex(t, newSession(t, c.Client(t)), "revoke"))
	s := newSession(t, c.Client(t), fencing.WithTTL(2*time.Second))
	errc := waiter(t, c, s, "revoke", fencingtest.Context(t, wait))
	c.Revoke(t, s.Lease())
	if err := <-errc; !errors.Is(err, fencing.ErrSessionExpired) || !errors.Is(err, fencing.ErrLeaseExpired) {
		t.Fatalf("Lock with revoked lease: %v; want ErrSessionExpired wrapping ErrLeaseExpired", err)
	}
	if keys := etcdtest.LockKeys(t, c, "revoke"); !slices.Equal(keys, []string{holder.Key()}) {
		t.Fatalf("keys = %q; want only the holder's", keys)
	}
}

// S5: a waiter whose key an operator deletes fails when its turn comes,
// instead of acquiring a lock nobody can see it holds.
func TestLockFailsWhenKeyDeletedWhileWaiting(t *testing.T) {
	c := fencingtest.Single(t)
	holder := lock(t, newMutex(t, newSession(t, c.Client(t)), "opdelete"))
	errc := waiter(t, c, newSession(t, c.Client(t)), "opdelete", fencingtest.Context(t, wait))
	for _, k := range etcdtest.LockKeys(t, c, "opdelete") {
		if k != holder.Key() {
			c.Delete(t, k)
		}
	}
	if err := holder.Unlock(fencingtest.Context(t, wait)); err != nil {
		t.Fatal(err)
	}
	if err := <-errc; !errors.Is(err, fencing.ErrKeyDeleted) {
		t.Fatalf("Lock with deleted key: %v; want ErrKeyDeleted", err)
	}
}

// S9: a waiter cut off while its predecessor leaves and history is compacted
// resumes from a fresh read and acquires. Its client talks to one member
// only; stopping that member breaks the connection for real, and the watch
// resumes, on restart, from a revision compacted away meanwhile. Its TTL
// outlasts the member's downtime and gRPC's reconnect backoff.
func TestWaitSurvivesCompactionAndReconnect(t *testing.T) {
	etcdtest.Long(t)
	c := fencingtest.Three(t)
	holder := lock(t, newMutex(t, newSession(t, c.Client(t)), "compact"))
	var ctr etcdtest.Counter
	cli := fencingtest.NewClient(t, []string{c.Members[0].ClientURL.String()}, etcdtest.WithCounter(&ctr))
	errc := waiter(t, c, newSession(t, cli, fencing.WithTTL(30*time.Second)), "compact", fencingtest.Context(t, wait))
	// Stop the member only once the waiter watches: a stop that loses the
	// enqueue's reply fails the Lock instead, as it should.
	fencingtest.WaitFor(t, wait, "the waiter to watch", func() bool { return ctr.Requests("Watch") >= 1 })
	etcdtest.CompactWhileDown(t, c, 0, func() {
		if err := holder.Unlock(fencingtest.Context(t, wait)); err != nil {
			t.Fatal(err)
		}
	})
	if err := <-errc; err != nil {
		t.Fatalf("Lock across compaction and reconnect: %v", err)
	}
}

// S1 across a raft leader change: a new owner's token is greater.
func TestTokensIncreaseAcrossLeaderChange(t *testing.T) {
	etcdtest.Long(t)
	c := fencingtest.Three(t)
	m := newMutex(t, newSession(t, c.Client(t)), "leader-change")
	h := lock(t, m)
	if err := h.Unlock(fencingtest.Context(t, wait)); err != nil {
		t.Fatal(err)
	}
	c.StopLeader(t)
	c.WaitLeader(t)
	h2 := lock(t, newMutex(t, newSession(t, c.Client(t)), "leader-change"))
	if h2.Token().Compare(h.Token()) <= 0 {
		t.Fatalf("token after leader change %v not greater than %v", h2.Token(), h.Token())
	}
}

// S9: a waiter whose member loses its raft leader keeps its place: its
// reads fail for a while (no leader), and it retries instead of failing.
func TestWaitSurvivesLostQuorum(t *testing.T) {
	etcdtest.Long(t)
	c := fencingtest.Three(t)
	holder := lock(t, newMutex(t, newSession(t, c.Client(t), fencing.WithTTL(30*time.Second)), "quorum"))
	var ctr etcdtest.Counter
	cli := fencingtest.NewClient(t, []string{c.Members[0].ClientURL.String()}, etcdtest.WithCounter(&ctr))
	errc := waiter(t, c, newSession(t, cli, fencing.WithTTL(30*time.Second)), "quorum", fencingtest.Context(t, 2*wait))
	watches := ctr.Requests("Watch")
	c.Stop(1)
	c.Stop(2)
	// The waiter's watch is cancelled for lack of a leader, and re-armed.
	fencingtest.WaitFor(t, wait, "the waiter to retry", func() bool { return ctr.Requests("Watch") > watches+1 })
	c.Restart(t, 1)
	c.Restart(t, 2)
	c.WaitLeader(t)
	if err := holder.Unlock(fencingtest.Context(t, wait)); err != nil {
		t.Fatal(err)
	}
	if err := <-errc; err != nil {
		t.Fatalf("Lock across a lost quorum: %v", err)
	}
}

// A done context or a closed client fails Lock and TryLock with an error,
// and leaves no key.
func TestLockWithDoneContextOrClosedClient(t *testing.T) {
	c := fencingtest.Single(t)
	m := newMutex(t, newSession(t, c.Client(t)), "refused")
	cancelled, cancel := context.WithCancel(t.Context())
	cancel()
	if _, err := m.Lock(cancelled); !errors.Is(err, context.Canceled) {
		t.Errorf("Lock with a cancelled ctx: %v; want context.Canceled", err)
	}
	if _, err := m.TryLock(cancelled); !errors.Is(err, context.Canceled) {
		t.Errorf("TryLock with a cancelled ctx: %v; want context.Canceled", err)
	}
	cli := fencingtest.NewClient(t, c.Endpoints())
	closed := newMutex(t, newSession(t, cli), "refused")
	cli.Close()
	if _, err := closed.Lock(fencingtest.Context(t, wait)); err == nil {
		t.Error("Lock on a closed client succeeded")
	}
	if _, err := closed.TryLock(fencingtest.Context(t, wait)); err == nil {
		t.Error("TryLock on a closed client succeeded")
	}
	if keys := etcdtest.LockKeys(t, c, "refused"); len(keys) != 0 {
		t.Fatalf("keys left behind: %q", keys)
	}
}

// A client closed while its Lock waits on the session's watch stream: the
// Lock fails with the session's end (not the caller's deadline), the holder
// keeps the lock, and the waiter's key goes with its lease.
func TestLockWaitingWhenClientCloses(t *testing.T) {
	c := fencingtest.Single(t)
	h := lock(t, newMutex(t, newSession(t, c.Client(t)), "closing"))
	cli := fencingtest.NewClient(t, c.Endpoints())
	waiter := newMutex(t, newSession(t, cli, fencing.WithTTL(2*time.Second)), "closing")
	done := make(chan error, 1)
	go func() {
		_, err := waiter.Lock(fencingtest.Context(t, wait))
		done <- err
	}()
	fencingtest.WaitFor(t, wait, "the waiter's key", func() bool { return len(etcdtest.LockKeys(t, c, "closing")) == 2 })
	cli.Close()
	if err := <-done; !errors.Is(err, fencing.ErrSessionExpired) {
		t.Errorf("Lock whose client closed: %v; want ErrSessionExpired", err)
	}
	if h.Context().Err() != nil {
		t.Errorf("the holder lost its lock: %v", context.Cause(h.Context()))
	}
	fencingtest.WaitFor(t, wait, "the waiter's key to go with its lease", func() bool { return len(etcdtest.LockKeys(t, c, "closing")) == 1 })
}

// An Unlock called with the hold's own context, or a context made from it
// (guard.Do's), releases the lock: releasing ends those contexts first, so
// that the work stops before the key goes, and the delete must not die
// with them. Found in review: the delete was refused before it was sent,
// every time, and the lock stayed held until the session ended.
func TestUnlockWithTheHoldsOwnContext(t *testing.T) {
	c := fencingtest.Single(t)
	m := newMutex(t, newSession(t, c.Client(t)), "own-context")
	h := lock(t, m)
	if err := h.Unlock(h.Context()); err != nil {
		t.Fatalf("Unlock(h.Context()): %v", err)
	}
	h = lock(t, m)
	err := guard.Do(fencingtest.Context(t, wait), h, func(ctx context.Context) error { return h.Unlock(ctx) })
	if err != nil {
		t.Fatalf("Unlock inside guard.Do: %v", err)
	}
	if keys := etcdtest.LockKeys(t, c, "own-context"); len(keys) != 0 {
		t.Fatalf("keys left: %q", keys)
	}
}
