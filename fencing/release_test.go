package fencing_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/leasehold/leasehold/fencing"
	"github.com/leasehold/leasehold/fencing/fencingtest"
)

// An Unlock whose ctx ends while etcd cannot answer (its one member
// restarting) hands the delete to the session: the permit is free again once
// etcd is back, not only when the session's lease ends.
func TestUnlockPastItsContextDeletesInTheBackground(t *testing.T) {
	c := fencingtest.Single(t)
	a := newSession(t, c.Client(t), fencing.WithTTL(time.Minute))
	b := newSession(t, c.Client(t))
	h := acquire(t, newSemaphore(t, a, "pool", 1))

	c.Stop(0)
	ctx, cancel := context.WithTimeout(t.Context(), 100*time.Millisecond)
	err := h.Unlock(ctx)
	cancel()
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Unlock with etcd down = %v; want an error wrapping context.DeadlineExceeded", err)
	}
	if cause := context.Cause(h.Context()); !errors.Is(cause, fencing.ErrNotHeld) {
		t.Fatalf("hold's context after the failed Unlock: cause %v; want ErrNotHeld", cause)
	}
	c.Restart(t, 0)

	// Well within a's TTL of a minute: only the session's delete frees it.
	hb, err := newSemaphore(t, b, "pool", 1).Acquire(fencingtest.Context(t, 30*time.Second))
	if err != nil {
		t.Fatalf("Acquire after the restart: %v (a's permit was never deleted)", err)
	}
	if hb.Token().Revision <= h.Token().Revision {
		t.Fatalf("new token %v not after the old %v", hb.Token(), h.Token())
	}
	if err := hb.Unlock(fencingtest.Context(t, wait)); err != nil {
		t.Fatal(err)
	}
	if a.Err() != nil {
		t.Fatalf("a's session ended (%v): the test proves nothing", a.Err())
	}
}

// Context returns one context for the hold's whole life, also when it is
// first asked for after Unlock.
func TestHoldContextIsOneContext(t *testing.T) {
	c := fencingtest.Single(t)
	s := newSession(t, c.Client(t))
	m := newMutex(t, s, "one-context")

	h := lock(t, m)
	if err := h.Unlock(fencingtest.Context(t, wait)); err != nil {
		t.Fatal(err)
	}
	first, second := h.Context(), h.Context()
	if first != second {
		t.Fatal("two calls of Context after Unlock returned two contexts")
	}
	if !errors.Is(context.Cause(first), fencing.ErrNotHeld) {
		t.Fatalf("cause %v; want ErrNotHeld", context.Cause(first))
	}

	h = lock(t, m)
	before := h.Context()
	if err := h.Unlock(fencingtest.Context(t, wait)); err != nil {
		t.Fatal(err)
	}
	if h.Context() != before {
		t.Fatal("Context after Unlock is not the context returned before it")
	}
}
