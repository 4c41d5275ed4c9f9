package fencing_test

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

// A session reuses the key of a finished Lock for its next Lock on the same
// name (so a hot name's etcd index does not grow with every Lock), never the
// key of a live one; each life of the key gets a new, greater token.
func TestSessionReusesFinishedKeys(t *testing.T) {
	c := fencingtest.Single(t)
	m := newMutex(t, newSession(t, c.Client(t)), "reuse")
	first := lock(t, m)
	second, err := newMutex(t, first.Session(), "reuse").TryLock(fencingtest.Context(t, wait))
	if err == nil {
		t.Fatalf("TryLock of a held lock on the same session succeeded with %v", second.Token())
	}
	if err := first.Unlock(fencingtest.Context(t, wait)); err != nil {
		t.Fatal(err)
	}
	prev := first
	for range 5 {
		h := lock(t, m)
		if h.Key() != prev.Key() {
			t.Errorf("Lock after Unlock used key %q, not the freed %q", h.Key(), prev.Key())
		}
		if h.Token().Compare(prev.Token()) <= 0 {
			t.Errorf("token %v not after %v", h.Token(), prev.Token())
		}
		if err := h.Unlock(fencingtest.Context(t, wait)); err != nil {
			t.Fatal(err)
		}
		prev = h
	}
	// Two live holds of one session (two Lock calls) never share a key.
	a := lock(t, m)
	res := make(chan error, 1)
	go func() {
		b, err := m.Lock(fencingtest.Context(t, wait))
		if err == nil && b.Key() == a.Key() {
			err = errors.New("second Lock on the session reused the live key " + b.Key())
		}
		if err == nil {
			err = b.Unlock(fencingtest.Context(t, wait))
		}
		res <- err
	}()
	fencingtest.WaitFor(t, wait, "the second Lock's key", func() bool { return len(etcdtest.LockKeys(t, c, "reuse")) == 2 })
	if err := a.Unlock(fencingtest.Context(t, wait)); err != nil {
		t.Fatal(err)
	}
	if err := <-res; err != nil {
		t.Fatal(err)
	}
}

// A stale hold whose key the session has reused cannot write, and its failed
// write ends nothing of the key's new owner.
func TestStaleHoldOfReusedKey(t *testing.T) {
	c := fencingtest.Single(t)
	m := newMutex(t, newSession(t, c.Client(t)), "reuse-stale")
	old := lock(t, m)
	if err := old.Unlock(fencingtest.Context(t, wait)); err != nil {
		t.Fatal(err)
	}
	cur := lock(t, m)
	if cur.Key() != old.Key() {
		t.Fatalf("key not reused: %q then %q", old.Key(), cur.Key())
	}
	wctx, stop := guard.Watch(fencingtest.Context(t, wait), cur)
	defer stop()
	hctx := cur.Context()
	if _, err := guard.Put(fencingtest.Context(t, wait), old, "reuse-stale/data", "stale"); !errors.Is(err, guard.ErrNotOwner) {
		t.Fatalf("stale hold's guarded put: %v, want ErrNotOwner", err)
	}
	if err := old.Unlock(fencingtest.Context(t, wait)); err == nil {
		t.Fatal("a second Unlock of the stale hold succeeded")
	}
	if !etcdtest.Exists(t, c, cur.Key()) {
		t.Fatal("the stale hold's Unlock deleted the new owner's key")
	}
	for name, ctx := range map[string]context.Context{"guard.Watch": wctx, "Context": hctx} {
		if ctx.Err() != nil {
			t.Errorf("the new owner's %s ended: %v", name, context.Cause(ctx))
		}
	}
	if _, err := guard.Put(fencingtest.Context(t, wait), cur, "reuse-stale/data", "current"); err != nil {
		t.Errorf("the new owner cannot write: %v", err)
	}
}

// A waiter whose predecessor's key comes back as a new life (its session
// unlocked and locked again) between the waiter's enqueue and the creation
// of its watch is not fooled by the key's name: the new life is queued
// behind it, and it acquires. Reading only whether the key exists would
// make it wait for its own successor, which waits for it.
func TestWaiterNotFooledByPredecessorsNewLife(t *testing.T) {
	etcdtest.Long(t)
	c := fencingtest.Single(t)
	cli, link := c.ProxiedClient(t)
	a := newMutex(t, newSession(t, c.Client(t)), "reuse-gap")
	b := newMutex(t, newSession(t, cli), "reuse-gap")
	held := lock(t, a)
	// The fault: B's requests take 300 ms each way, so B's watch is created
	// on the server well after its enqueue was applied.
	link.Delay(300 * time.Millisecond)
	won := make(chan error, 1)
	go func() {
		h, err := b.Lock(fencingtest.Context(t, wait))
		if err == nil {
			err = h.Unlock(fencingtest.Context(t, wait))
		}
		won <- err
	}()
	fencingtest.WaitFor(t, wait, "B's enqueue applied", func() bool { return len(etcdtest.LockKeys(t, c, "reuse-gap")) == 2 })
	if err := held.Unlock(fencingtest.Context(t, wait)); err != nil {
		t.Fatal(err)
	}
	again := make(chan error, 1)
	go func() {
		h, err := a.Lock(fencingtest.Context(t, wait)) // the same key, a new life, behind B
		if err == nil {
			if h.Key() != held.Key() {
				t.Errorf("key not reused: %q then %q", held.Key(), h.Key())
			}
			err = h.Unlock(fencingtest.Context(t, wait))
		}
		again <- err
	}()
	if err := <-won; err != nil {
		t.Fatalf("the waiter: %v", err)
	}
	if err := <-again; err != nil {
		t.Fatalf("the predecessor's next Lock: %v", err)
	}
}

// A key one of whose deletes failed is never reused: that delete may yet be
// applied, late, and must find nothing of a later hold to delete.
func TestKeyOfFailedUnlockIsNotReused(t *testing.T) {
	c := fencingtest.Single(t)
	m := newMutex(t, newSession(t, c.Client(t)), "reuse-unsure")
	h := lock(t, m)
	done, cancel := context.WithCancel(context.Background())
	cancel()
	if err := h.Unlock(done); err == nil {
		t.Fatal("Unlock with a done ctx succeeded")
	}
	// The session deletes the key in the background; a second Unlock may
	// come first, or find the hold released.
	if err := h.Unlock(fencingtest.Context(t, wait)); err != nil && !errors.Is(err, fencing.ErrNotHeld) {
		t.Fatal(err)
	}
	fencingtest.WaitFor(t, wait, "the key to go", func() bool { return !etcdtest.Exists(t, c, h.Key()) })
	next := lock(t, m)
	if next.Key() == h.Key() {
		t.Errorf("the key %q of a hold with a failed delete was reused", h.Key())
	}
	if err := next.Unlock(fencingtest.Context(t, wait)); err != nil {
		t.Fatal(err)
	}
}
