package fencing_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/leasehold/leasehold/fencing"
	"github.com/leasehold/leasehold/fencing/fencingtest"
	"github.com/leasehold/leasehold/internal/testbed/etcdtest"
)

// overrun is how far past its deadline a call may return here: the
// documented bound is 25 ms; the slack is for a loaded CI machine, and far
// below the TTL/3 (6.7 s and 20 s with these sessions) that removing a key
// synchronously used to add.
const overrun = time.Second

// withinDeadline runs call with a ctx of d and fails the test unless it
// returns, with an error, within d+overrun.
func withinDeadline(t *testing.T, what string, d time.Duration, call func(ctx context.Context) error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	err := etcdtest.ReturnsBy(t, d+overrun, fmt.Sprintf("%s with a %v ctx", what, d), func() error { return call(ctx) })
	if err == nil {
		t.Errorf("%s through a blackholed link succeeded", what)
	}
}

func TestCallsKeepTheirDeadline(t *testing.T) {
	etcdtest.Long(t)
	c := fencingtest.Single(t)
	cli, link := c.ProxiedClient(t)
	// TTL/3 (what removing a key synchronously used to add) is far above
	// overrun, and the session outlives the partition.
	const ttl = 20 * time.Second
	s := newSession(t, cli, fencing.WithTTL(ttl))
	holder := lock(t, newMutex(t, newSession(t, c.Client(t)), "deadline"))
	m := newMutex(t, s, "deadline")
	free := newMutex(t, s, "deadline-free")
	own := lock(t, newMutex(t, s, "deadline-own"))

	// Lock waits behind holder; the partition comes while it waits, so its
	// cleanup cannot reach etcd either.
	waiting := make(chan error, 1)
	lctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	go func() {
		_, err := m.Lock(lctx)
		waiting <- err
	}()
	fencingtest.WaitFor(t, wait, "the waiter's key", func() bool { return len(etcdtest.LockKeys(t, c, "deadline")) == 2 })
	link.Blackhole()
	deadline, _ := lctx.Deadline()
	err := etcdtest.ReturnsBy(t, time.Until(deadline)+overrun, "Lock with a 3 s ctx", func() error { return <-waiting })
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("Lock: %v, want DeadlineExceeded", err)
	}
	withinDeadline(t, "TryLock", time.Second, func(ctx context.Context) error { _, err := free.TryLock(ctx); return err })
	withinDeadline(t, "Lock", time.Second, func(ctx context.Context) error { _, err := free.Lock(ctx); return err })
	withinDeadline(t, "Unlock", time.Second, own.Unlock)

	// Healed, the session's background cleanup removes what the failed
	// calls queued, even what a held request writes late.
	link.Restore()
	if err := holder.Unlock(fencingtest.Context(t, wait)); err != nil {
		t.Fatal(err)
	}
	// An enqueue whose reply was lost may be applied after the first delete:
	// its key goes with the second, one TTL later.
	fencingtest.WaitFor(t, ttl+wait, "no key left by the failed calls", func() bool {
		return len(etcdtest.LockKeys(t, c, "deadline")) == 0 && len(etcdtest.LockKeys(t, c, "deadline-free")) == 0
	})
}

// A session closed while its cleanup still waits for etcd returns within
// Close's bound, and leaves no goroutine (TestMain checks).
func TestCloseEndsBackgroundCleanup(t *testing.T) {
	c := fencingtest.Single(t)
	cli, link := c.ProxiedClient(t)
	s, err := fencing.NewSession(fencingtest.Context(t, wait), cli, fencing.WithTTL(60*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	link.Blackhole()
	withinDeadline(t, "TryLock", time.Second, func(ctx context.Context) error {
		_, err := newMutex(t, s, "close-cleanup").TryLock(ctx)
		return err
	})
	withinDeadline(t, "Close", time.Second, s.Close)
	link.Restore()
}
