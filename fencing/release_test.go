package fencing_test

import (
	"context"
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/leasehold/leasehold/fencing"
	"github.com/leasehold/leasehold/fencing/fencingtest"
	"github.com/leasehold/leasehold/internal/testbed/etcdtest"
	"google.golang.org/grpc"
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

// Close returns by its ctx's deadline even while an Unlock holds the hold
// over a request etcd cannot answer, and the session is finishing an earlier
// Unlock's delete: that background delete never waits for the Unlock.
func TestCloseDoesNotWaitForAnUnlockInFlight(t *testing.T) {
	c := fencingtest.Single(t)
	var deletes atomic.Int64
	count := etcdtest.Unary(func(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn,
		invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
		if strings.HasSuffix(method, "/DeleteRange") {
			deletes.Add(1)
		}
		return invoker(ctx, method, req, reply, cc, opts...)
	})
	s := newSession(t, c.Client(t, count), fencing.WithTTL(time.Minute))
	h := lock(t, newMutex(t, s, "close-past-unlock"))

	c.Stop(0)
	ctx, cancel := context.WithTimeout(t.Context(), 100*time.Millisecond)
	if err := h.Unlock(ctx); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Unlock with etcd down = %v; want context.DeadlineExceeded", err)
	}
	cancel()
	sent := deletes.Load()
	second := make(chan error, 1)
	go func() { second <- h.Unlock(context.Background()) }()
	fencingtest.WaitFor(t, wait, "the second Unlock's delete to be out", func() bool { return deletes.Load() > sent })

	etcdtest.ReturnsBy(t, wait, "Close with a 2 s ctx", func() error {
		cctx, cancel := context.WithTimeout(t.Context(), 2*time.Second)
		defer cancel()
		s.Close(cctx) // the revoke cannot be sent: its error is expected
		return nil
	})
	c.Restart(t, 0)
	if err := fencingtest.Receive(t, second, "the second Unlock"); err != nil && !errors.Is(err, fencing.ErrNotHeld) {
		t.Fatalf("the second Unlock: %v", err)
	}
}
