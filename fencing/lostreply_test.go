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
	"github.com/leasehold/leasehold/internal/keyspace"
	"github.com/leasehold/leasehold/internal/testbed/etcdtest"
	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// once returns a Decide that gives fault f to the first request match
// accepts, and passes every other.
func once(f etcdtest.Fault, match func(method string, req any) bool) func(string, any) etcdtest.Fault {
	var done atomic.Bool
	return func(method string, req any) etcdtest.Fault {
		if match(method, req) && done.CompareAndSwap(false, true) {
			return f
		}
		return etcdtest.Pass
	}
}

func enqueueOf(name string) func(string, any) bool {
	prefix := keyspace.Prefix(fencing.DefaultRoot, "lock", name)
	return func(_ string, req any) bool { return etcdtest.PutsUnder(req, prefix) }
}

// A Lock whose enqueue was applied but whose reply was lost keeps its place
// in the queue: it finds its own key and waits with it, ahead of a waiter
// that queued after the lost reply, and owns with that key's revision.
func TestLockKeepsPlaceAcrossLostReply(t *testing.T) {
	c := fencingtest.Single(t)
	owner := fencingtest.Lock(t, newSession(t, c.Client(t)), "lost-reply")
	r := &etcdtest.Replies{Decide: once(etcdtest.LoseReply, enqueueOf("lost-reply"))}
	s := newSession(t, c.Client(t, r.Option()))
	got := make(chan *fencing.Hold, 1)
	go func() {
		h, err := newMutex(t, s, "lost-reply").Lock(fencingtest.Context(t, wait))
		if err != nil {
			t.Errorf("Lock across a lost reply: %v", err)
		}
		got <- h
	}()
	fencingtest.WaitFor(t, wait, "the lost enqueue to be applied", func() bool { return len(etcdtest.LockKeys(t, c, "lost-reply")) == 2 })
	keys := etcdtest.LockKeys(t, c, "lost-reply")
	if len(keys) != 2 {
		t.Fatalf("keys %q; want the owner's and the lost enqueue's", keys)
	}
	first := keys[0]
	if first == owner.Key() {
		first = keys[1]
	}
	later := newSession(t, c.Client(t))
	laterDone := make(chan error, 1)
	go func() {
		h, err := newMutex(t, later, "lost-reply").Lock(fencingtest.Context(t, wait))
		if err == nil {
			err = h.Unlock(fencingtest.Context(t, wait))
		}
		laterDone <- err
	}()
	fencingtest.WaitFor(t, wait, "the later waiter to queue", func() bool { return len(etcdtest.LockKeys(t, c, "lost-reply")) == 3 })
	if err := owner.Unlock(fencingtest.Context(t, wait)); err != nil {
		t.Fatal(err)
	}
	h := <-got
	if h == nil {
		t.FailNow()
	}
	if h.Key() != first {
		t.Errorf("Lock owns with key %s; its lost enqueue wrote %s", h.Key(), first)
	}
	if err := h.Unlock(fencingtest.Context(t, wait)); err != nil {
		t.Fatal(err)
	}
	if err := <-laterDone; err != nil {
		t.Fatalf("later waiter: %v", err)
	}
	fencingtest.WaitFor(t, wait, "no key left", func() bool { return len(etcdtest.LockKeys(t, c, "lost-reply")) == 0 })
}

// A TryLock whose write was applied but whose reply was lost finds its own
// key at the head and owns with it; a refused request is sent again.
func TestTryLockAcrossLostAndRefusedReplies(t *testing.T) {
	c := fencingtest.Single(t)
	for _, f := range []etcdtest.Fault{etcdtest.LoseReply, etcdtest.Refuse, etcdtest.Hang} {
		r := &etcdtest.Replies{Decide: once(f, enqueueOf("try-lost"))}
		s := newSession(t, c.Client(t, r.Option()))
		h, err := newMutex(t, s, "try-lost").TryLock(fencingtest.Context(t, wait))
		if err != nil {
			t.Fatalf("TryLock across fault %d: %v", f, err)
		}
		if keys := etcdtest.LockKeys(t, c, "try-lost"); len(keys) != 1 || keys[0] != h.Key() {
			t.Fatalf("keys %q; want only the hold's %s", keys, h.Key())
		}
		if err := h.Unlock(fencingtest.Context(t, wait)); err != nil {
			t.Fatal(err)
		}
	}
}

// Unlock sends its delete again after a lost reply, a refusal, or an
// attempt that gets no answer (without waiting out its ctx), and reports
// success: the hold is released, its key gone.
func TestUnlockRetriesPassingFailures(t *testing.T) {
	c := fencingtest.Single(t)
	prefix := keyspace.Prefix(fencing.DefaultRoot, "lock", "unlock-retry")
	for _, f := range []etcdtest.Fault{etcdtest.LoseReply, etcdtest.Refuse, etcdtest.Hang} {
		r := &etcdtest.Replies{Decide: once(f, func(_ string, req any) bool { return etcdtest.DeletesUnder(req, prefix) })}
		h := fencingtest.Lock(t, newSession(t, c.Client(t, r.Option())), "unlock-retry")
		if err := h.Unlock(fencingtest.Context(t, wait)); err != nil {
			t.Fatalf("Unlock across fault %d: %v", f, err)
		}
		if keys := etcdtest.LockKeys(t, c, "unlock-retry"); len(keys) != 0 {
			t.Fatalf("keys left: %q", keys)
		}
	}
}

// S8 without a timer: an enqueue sent, given up on, and applied only after
// its Lock failed and removed its key writes the key again; the session
// deletes it as soon as it appears, so the queue is not blocked by a key
// nobody waits on.
func TestLateEnqueueLeavesNoKey(t *testing.T) {
	c := fencingtest.Single(t)
	owner := fencingtest.Lock(t, newSession(t, c.Client(t)), "late")
	r := &etcdtest.Replies{Decide: once(etcdtest.Late, enqueueOf("late"))}
	s := newSession(t, c.Client(t, r.Option()), fencing.WithTTL(60*time.Second))
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		_, err := newMutex(t, s, "late").Lock(ctx)
		done <- err
	}()
	fencingtest.WaitFor(t, wait, "the retried enqueue to queue", func() bool { return len(etcdtest.LockKeys(t, c, "late")) == 2 })
	cancel()
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Fatalf("cancelled Lock: %v", err)
	}
	fencingtest.WaitFor(t, wait, "the cancelled Lock's key to go", func() bool { return len(etcdtest.LockKeys(t, c, "late")) == 1 })
	r.Release() // the first enqueue arrives now, and writes the key again
	fencingtest.WaitFor(t, wait, "the late key to be swept", func() bool { return len(etcdtest.LockKeys(t, c, "late")) == 1 })
	if err := owner.Unlock(fencingtest.Context(t, wait)); err != nil {
		t.Fatal(err)
	}
	next := fencingtest.Lock(t, newSession(t, c.Client(t)), "late") // not blocked by a ghost
	if err := next.Unlock(fencingtest.Context(t, wait)); err != nil {
		t.Fatal(err)
	}
	if keys := etcdtest.LockKeys(t, c, "late"); len(keys) != 0 {
		t.Fatalf("keys left: %q", keys)
	}
}

// A client much further from etcd than the session has seen so far (800 ms
// round trips, past the half-second floor of an attempt) is slowed, not cut
// off: after an attempt that got no answer in its time, the resends' times
// double from a 100 ms start (2.8 s in all here, against 2.3 s when the
// resends started at 1 s), and each answer teaches the session the link's
// speed.
func TestSlowLinkIsNotCutShort(t *testing.T) {
	etcdtest.Long(t)
	c := fencingtest.Single(t)
	cli, link := c.ProxiedClient(t)
	s := newSession(t, cli)
	link.Delay(400 * time.Millisecond)
	for i := range 2 {
		m := newMutex(t, s, "slow-link")
		h, err := m.Lock(fencingtest.Context(t, wait))
		if err != nil {
			t.Fatalf("Lock %d over a slow link: %v", i, err)
		}
		if err := h.Unlock(fencingtest.Context(t, wait)); err != nil {
			t.Fatalf("Unlock %d over a slow link: %v", i, err)
		}
	}
	link.Restore()
	fencingtest.WaitFor(t, wait, "no key left", func() bool { return len(etcdtest.LockKeys(t, c, "slow-link")) == 0 })
}

// "raft: stopped", from a member shutting down, may come after the proposal
// was appended, and the next leader commits it: a Lock whose enqueue got it,
// and whose ctx ended before any later attempt was answered ("raft proposal
// dropped" is a real refusal), still removes the key its attempt wrote.
// Found by review: it used to count as a refusal, and left the name blocked.
func TestStoppedEnqueueLeavesNoKey(t *testing.T) {
	c := fencingtest.Single(t)
	owner := fencingtest.Lock(t, newSession(t, c.Client(t)), "stopped")
	prefix := keyspace.Prefix(fencing.DefaultRoot, "lock", "stopped")
	var n atomic.Int32
	fault := etcdtest.Unary(
		func(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, inv grpc.UnaryInvoker, opts ...grpc.CallOption) error {
			if !etcdtest.PutsUnder(req, prefix) {
				return inv(ctx, method, req, reply, cc, opts...)
			}
			if n.Add(1) == 1 {
				if err := inv(ctx, method, req, reply, cc, opts...); err != nil {
					return err
				}
				return status.Error(codes.Unknown, "raft: stopped")
			}
			return status.Error(codes.Unknown, "raft proposal dropped")
		})
	s := newSession(t, c.Client(t, fault))
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	if _, err := newMutex(t, s, "stopped").Lock(ctx); err == nil {
		t.Fatal("Lock succeeded")
	}
	if err := owner.Unlock(fencingtest.Context(t, wait)); err != nil {
		t.Fatal(err)
	}
	fencingtest.WaitFor(t, wait, "the failed Lock's key to go", func() bool { return len(etcdtest.LockKeys(t, c, "stopped")) == 0 })
}

// A queue's sweeper deletes a key it saw with a slot no call held only if
// it is still that life of the key: meanwhile the slot may have gone back to
// the pool and to a new Lock, whose key is the same. Before, the sweeper's
// delete took the new holder's key (seen once under CI's load as an Unlock's
// "not held: key already gone").
//
// A's enqueue reply is lost, so its Unlock retires its slot and starts the
// queue's sweeper; the sweeper's first read, which finds B's key, is
// answered only once B has unlocked (its slot back in the pool); its delete
// of that key is sent only once C holds the lock with the same slot.
func TestSweeperSparesReusedSlot(t *testing.T) {
	c := fencingtest.Single(t)
	const name = "sweep-reuse"
	var (
		mine       atomic.Pointer[string] // the sweeper's read: the session's keys in the queue
		readHeld   = make(chan struct{}, 1)
		readGo     = make(chan struct{})
		target     atomic.Pointer[string] // the key whose delete is held
		deleteHeld = make(chan struct{}, 1)
		deleteGo   = make(chan struct{})
		deleteDone = make(chan error, 1)
	)
	hold := etcdtest.Unary(
		func(ctx context.Context, m string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
			key := target.Load()
			held := key != nil && deletes(req, *key) && target.CompareAndSwap(key, nil)
			if held {
				deleteHeld <- struct{}{}
				await(ctx, deleteGo)
			}
			err := invoker(ctx, m, req, reply, cc, opts...)
			if held {
				deleteDone <- err
			}
			if r, ok := req.(*pb.RangeRequest); ok {
				if p := mine.Load(); p != nil && string(r.Key) == *p && mine.CompareAndSwap(p, nil) {
					readHeld <- struct{}{}
					await(ctx, readGo)
				}
			}
			return err
		})
	r := &etcdtest.Replies{Decide: once(etcdtest.LoseReply, enqueueOf(name))}
	s := newSession(t, c.Client(t, r.Option(), hold))
	prefix := keyspace.Prefix(fencing.DefaultRoot, "lock", name)
	stem := prefix + keyspace.Stem(int64(s.Lease()))
	mine.Store(&stem)
	ctx := fencingtest.Context(t, wait)

	a := fencingtest.Lock(t, s, name) // its first enqueue's reply lost: retried
	bc := make(chan *fencing.Hold, 1)
	go func() {
		b, err := newMutex(t, s, name).Lock(ctx)
		if err != nil {
			t.Errorf("B's Lock: %v", err)
		}
		bc <- b
	}()
	fencingtest.WaitFor(t, wait, "B queued", func() bool { return len(etcdtest.LockKeys(t, c, name)) == 2 })
	if err := a.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	fencingtest.Receive(t, readHeld, "the sweeper's first read")
	b := <-bc
	if b == nil {
		t.FailNow()
	}
	bKey := b.Key()
	if err := b.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	target.Store(&bKey)
	close(readGo)
	fencingtest.Receive(t, deleteHeld, "the sweeper's delete of B's key")
	h := fencingtest.Lock(t, s, name)
	if h.Key() != bKey {
		t.Fatalf("C locked with %s, not B's slot %s", h.Key(), bKey)
	}
	close(deleteGo)
	if err := fencingtest.Receive(t, deleteDone, "the sweeper's delete"); err != nil {
		t.Fatalf("the sweeper's delete did not reach etcd: %v", err) // nothing tested
	}
	if keys := etcdtest.LockKeys(t, c, name); len(keys) != 1 || keys[0] != bKey {
		t.Fatalf("keys after the sweeper's delete: %q, want C's %s", keys, bKey)
	}
	if err := h.Unlock(ctx); err != nil {
		t.Fatalf("C's Unlock: %v", err)
	}
}

// await waits until ch is closed or ctx ends (the session's close, if the
// test failed first).
func await(ctx context.Context, ch <-chan struct{}) {
	select {
	case <-ch:
	case <-ctx.Done():
	}
}

// deletes reports whether req deletes key, alone or in a txn.
func deletes(req any, key string) bool {
	switch r := req.(type) {
	case *pb.DeleteRangeRequest:
		return string(r.Key) == key
	case *pb.TxnRequest:
		for _, op := range r.Success {
			if d := op.GetRequestDeleteRange(); d != nil && string(d.Key) == key {
				return true
			}
		}
	}
	return false
}

// A Lock cancelled while it waits deletes its key; when that delete fails,
// on a queue whose sweeper already runs, the key still goes. The sweeper saw
// it written while its slot was in use, and looks at it no more: before,
// the key stood on the live lease, ahead of every later waiter, until the
// session ended.
func TestFailedCleanupBehindSweeperLeavesNoKey(t *testing.T) {
	c := fencingtest.Single(t)
	const name = "cleanup-swept"
	prefix := keyspace.Prefix(fencing.DefaultRoot, "lock", name)
	var lost, refuse, armed atomic.Bool
	r := &etcdtest.Replies{Decide: func(_ string, req any) etcdtest.Fault {
		if etcdtest.PutsUnder(req, prefix) && lost.CompareAndSwap(false, true) {
			return etcdtest.LoseReply // A's first enqueue: its slot is retired, the queue swept
		}
		if d, ok := req.(*pb.DeleteRangeRequest); ok && strings.HasPrefix(string(d.Key), prefix) && refuse.CompareAndSwap(true, false) {
			return etcdtest.Refuse // the cancelled Lock's cleanup
		}
		return etcdtest.Pass
	}}
	var stem atomic.Pointer[string]
	sweeperRead := etcdtest.Unary(
		func(ctx context.Context, m string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
			err := invoker(ctx, m, req, reply, cc, opts...)
			if r, ok := req.(*pb.RangeRequest); ok && err == nil && stem.Load() != nil && string(r.Key) == *stem.Load() {
				armed.Store(true) // the sweeper's watch is made before this read
			}
			return err
		})
	s := newSession(t, c.Client(t, r.Option(), sweeperRead))
	mine := prefix + keyspace.Stem(int64(s.Lease()))
	stem.Store(&mine)
	ctx := fencingtest.Context(t, wait)
	a := fencingtest.Lock(t, s, name)
	if err := a.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	fencingtest.WaitFor(t, wait, "the queue's sweeper armed", armed.Load)
	holder := fencingtest.Lock(t, newSession(t, c.Client(t)), name)
	refuse.Store(true)
	lctx, cancel := context.WithCancel(ctx)
	failed := make(chan error, 1)
	go func() {
		_, err := newMutex(t, s, name).Lock(lctx)
		failed <- err
	}()
	fencingtest.WaitFor(t, wait, "the waiter's key", func() bool { return len(etcdtest.LockKeys(t, c, name)) == 2 })
	cancel()
	if err := fencingtest.Receive(t, failed, "the cancelled Lock"); !errors.Is(err, context.Canceled) {
		t.Fatalf("cancelled Lock: %v, want context.Canceled", err)
	}
	if refuse.Load() {
		t.Fatal("the cleanup's delete was not refused")
	}
	fencingtest.WaitFor(t, wait, "the cancelled Lock's key to go", func() bool {
		keys := etcdtest.LockKeys(t, c, name)
		return len(keys) == 1 && keys[0] == holder.Key()
	})
}
