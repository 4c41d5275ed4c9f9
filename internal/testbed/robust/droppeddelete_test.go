package robust_test

import (
	"context"
	"sync/atomic"
	"testing"

	"github.com/leasehold/leasehold/fencing"
	"github.com/leasehold/leasehold/fencing/fencingtest"
	"github.com/leasehold/leasehold/internal/keyspace"
	"github.com/leasehold/leasehold/internal/testbed/etcdtest"
)

// TestHandoffAcrossTwoDroppedDeletes drops two attempts of an Unlock's
// delete without an answer, as etcd does to a write a follower forwards to
// a leader that has just been removed (#29). Unlock succeeds on the third
// attempt and the waiter owns. How soon is BenchmarkDroppedDeletesHandoff's
// question (1.5 s when a resend had twice the first attempt's half second,
// 0.6 s now); the resend schedule itself is TestAttemptTimeout's.
func TestHandoffAcrossTwoDroppedDeletes(t *testing.T) {
	etcdtest.Long(t)
	c := fencingtest.Single(t)
	const name = "dropped-deletes"
	prefix := keyspace.Prefix(fencing.DefaultRoot, string(fencing.KindLock), name)
	var dropped atomic.Int32
	r := &etcdtest.Replies{Decide: func(_ string, req any) etcdtest.Fault {
		if etcdtest.DeletesUnder(req, prefix) && dropped.Add(1) <= 2 {
			return etcdtest.Hang
		}
		return etcdtest.Pass
	}}
	h := fencingtest.Lock(t, fencingtest.Session(t, c.Client(t, r.Option())), name)
	waiter := etcdtest.Mutex(t, fencingtest.Session(t, c.Client(t)), name)
	owned := make(chan struct{}, 1)
	fencingtest.Go(t, func(ctx context.Context) error {
		h, err := waiter.Lock(ctx)
		if err != nil {
			return err
		}
		owned <- struct{}{}
		return h.Unlock(ctx)
	})
	fencingtest.WaitFor(t, fencingtest.Wait, "the waiter to queue", func() bool {
		return len(c.Queue(t, fencing.KindLock, name).Entries) == 2
	})
	if err := h.Unlock(fencingtest.Context(t, fencingtest.Wait)); err != nil {
		t.Fatalf("Unlock across two dropped deletes: %v", err)
	}
	fencingtest.Receive(t, owned, "the waiter's Lock")
	if n := dropped.Load(); n < 3 {
		t.Fatalf("%d deletes sent, want the two dropped and one answered", n)
	}
}
