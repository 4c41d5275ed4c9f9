package fencing_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/leasehold/leasehold/fencing"
	"github.com/leasehold/leasehold/fencing/fencingtest"
	"github.com/leasehold/leasehold/fencing/inspect"
	"github.com/leasehold/leasehold/internal/testbed/etcdtest"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// holdKinds take a hold of each kind on name: the mutex's (the standard
// the others meet), a semaphore's permit, two units of a weighted
// semaphore, a read hold, a write hold.
var holdKinds = []struct {
	name string
	hold func(t testing.TB, s *fencing.Session, name string) *fencing.Hold
}{
	{"mutex", func(t testing.TB, s *fencing.Session, name string) *fencing.Hold { return fencingtest.Lock(t, s, name) }},
	{"semaphore", func(t testing.TB, s *fencing.Session, name string) *fencing.Hold {
		return acquire(t, newSemaphore(t, s, name, 2))
	}},
	{"weighted", func(t testing.TB, s *fencing.Session, name string) *fencing.Hold {
		return acquireN(t, newSemaphore(t, s, name, 3), 2)
	}},
	{"read", func(t testing.TB, s *fencing.Session, name string) *fencing.Hold {
		return take(t, newRWMutex(t, s, name).RLock)
	}},
	{"write", func(t testing.TB, s *fencing.Session, name string) *fencing.Hold {
		return take(t, newRWMutex(t, s, name).Lock)
	}},
}

func take(t testing.TB, lock func(context.Context) (*fencing.Hold, error)) *fencing.Hold {
	t.Helper()
	h, err := lock(fencingtest.Context(t, wait))
	if err != nil {
		t.Fatal(err)
	}
	return h
}

// S3 for each kind: a blackholed holder's context ends strictly before
// another client sees its key deleted, in every trial.
func TestKindsStopBeforeServerDeletes(t *testing.T) {
	etcdtest.Long(t)
	for _, k := range holdKinds {
		t.Run(k.name, func(t *testing.T) {
			etcdtest.BlackholeTrialsOf(t, fencingtest.Single(t), 5, 3*time.Second, "blackhole-"+k.name, k.hold,
				func(_ *fencing.Session, h *fencing.Hold, link *fencingtest.Link, deletion <-chan time.Time) func() error {
					work := h.Context()
					return func() error {
						link.Blackhole()
						return etcdtest.StoppedBeforeDeletion(h, work, deletion)
					}
				})
		})
	}
}

// S4 for each kind: the hold's context ends when an operator deletes its
// key or revokes its lease, with the cause that says which, whether its
// watch was armed before the loss or is armed after it (the read that arms
// it finds the key gone), and the ownership compare fails.
func TestKindsNoticeLosses(t *testing.T) {
	for _, k := range holdKinds {
		for _, loss := range []struct {
			name  string
			cause error
			do    func(t *testing.T, c *fencingtest.Cluster, h *fencing.Hold)
		}{
			{"key deleted", fencing.ErrKeyDeleted, func(t *testing.T, c *fencingtest.Cluster, h *fencing.Hold) { c.Delete(t, h.Key()) }},
			{"lease revoked", fencing.ErrLeaseExpired, func(t *testing.T, c *fencingtest.Cluster, h *fencing.Hold) { c.Revoke(t, h.Session().Lease()) }},
		} {
			for _, armed := range []bool{true, false} {
				t.Run(fmt.Sprintf("%s/%s/armed=%v", k.name, loss.name, armed), func(t *testing.T) {
					c := fencingtest.Single(t)
					h := k.hold(t, newSession(t, c.Client(t)), "loss")
					var work context.Context
					if armed {
						work = h.Context()
					}
					loss.do(t, c, h)
					if !armed {
						fencingtest.WaitFor(t, wait, "the key to go", func() bool { return !etcdtest.Exists(t, c, h.Key()) })
						work = h.Context()
					}
					if cause := fencingtest.Ended(t, work, wait, "the hold's context"); !errors.Is(cause, loss.cause) {
						t.Errorf("cause %v; want %v", cause, loss.cause)
					}
					resp, err := c.Admin.Txn(fencingtest.Context(t, wait)).If(h.IsOwner()).Commit()
					if err != nil || resp.Succeeded {
						t.Errorf("the ownership compare after the loss: succeeded %v, %v; want it to fail", resp != nil && resp.Succeeded, err)
					}
				})
			}
		}
	}
}

// S8 and S9 for each wait: a call whose enqueue was applied but whose
// reply was lost keeps its place with that one key, and holds with it once
// the holds ahead go.
func TestSharedKeepsPlaceAcrossLostReply(t *testing.T) {
	for _, w := range waitShapes {
		t.Run(w.name, func(t *testing.T) {
			c := fencingtest.Single(t)
			r := &etcdtest.Replies{Decide: once(etcdtest.LoseReply, putsUnder(t, w.kind, w.queue))}
			wt := w.startOn(t, c, c.Client(t, r.Option()), fencingtest.Context(t, wait))
			if n := w.keysOf(t, c, wt.s); n != 1 {
				t.Errorf("the call has %d keys queued; want 1", n)
			}
			wt.release(t)
			select {
			case res := <-wt.done:
				if res.err != nil {
					t.Fatalf("the call across a lost reply: %v", res.err)
				}
				if res.h.Key() != wt.key {
					t.Errorf("holds with key %s; its lost enqueue wrote %s", res.h.Key(), wt.key)
				}
				if err := res.h.Unlock(fencingtest.Context(t, wait)); err != nil {
					t.Fatal(err)
				}
			case <-time.After(wait):
				t.Fatalf("the call had not returned within %v", wait)
			}
			fencingtest.WaitFor(t, wait, "no key of the call left", func() bool { return w.keysOf(t, c, wt.s) == 0 })
		})
	}
}

// S8 for each wait: an enqueue given up on and applied only after its call
// failed and removed its key writes it again; the session sweeps it, so
// nothing is held back by a key nobody waits on.
func TestSharedLateEnqueueLeavesNoKey(t *testing.T) {
	for _, w := range waitShapes {
		t.Run(w.name, func(t *testing.T) {
			c := fencingtest.Single(t)
			r := &etcdtest.Replies{Decide: once(etcdtest.Late, putsUnder(t, w.kind, w.queue))}
			ctx, cancel := context.WithCancel(t.Context())
			wt := w.startOn(t, c, c.Client(t, r.Option()), ctx, fencing.WithTTL(60*time.Second))
			cancel()
			if err := wt.result(t); !errors.Is(err, context.Canceled) {
				t.Fatalf("cancelled: %v", err)
			}
			fencingtest.WaitFor(t, wait, "the cancelled call's key to go", func() bool { return !etcdtest.Exists(t, c, wt.key) })
			r.Release() // the first enqueue arrives now, and writes the key again
			fencingtest.WaitFor(t, wait, "the late key to be swept", func() bool { return w.keysOf(t, c, wt.s) == 0 })
			wt.release(t)
			next := take(t, w.call(t, newSession(t, c.Client(t)))) // not held back by a ghost
			if err := next.Unlock(fencingtest.Context(t, wait)); err != nil {
				t.Fatal(err)
			}
			if n := w.keysOf(t, c, wt.s); n != 0 {
				t.Errorf("%d keys of the cancelled call left", n)
			}
		})
	}
}

// S9 for each wait: a waiter cut off while the holds ahead of it leave
// and history is compacted resumes from a fresh read and holds. Its client
// talks to one member only; stopping that member breaks the connection for
// real, and the watch resumes, on restart, from a revision compacted away.
func TestSharedWaitSurvivesCompactionAndReconnect(t *testing.T) {
	etcdtest.Long(t)
	for _, w := range waitShapes {
		t.Run(w.name, func(t *testing.T) {
			c := fencingtest.Three(t)
			var ctr etcdtest.Counter
			cli := fencingtest.NewClient(t, []string{c.Members[0].ClientURL.String()}, etcdtest.WithCounter(&ctr))
			wt := w.startOn(t, c, cli, fencingtest.Context(t, 2*wait), fencing.WithTTL(30*time.Second))
			fencingtest.WaitFor(t, wait, "the waiter to watch", func() bool { return ctr.Requests("Watch") >= 1 })
			etcdtest.CompactWhileDown(t, c, 0, func() { wt.release(t) })
			if err := wt.result(t); err != nil {
				t.Fatalf("the wait across compaction and reconnect: %v", err)
			}
		})
	}
}

// keysOf counts the keys of the shape's queue on s's lease.
func (w waitShape) keysOf(t *testing.T, c *fencingtest.Cluster, s *fencing.Session) int {
	t.Helper()
	p, err := inspect.KeyPrefix(fencing.DefaultRoot, w.kind, w.queue)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := c.Admin.Get(fencingtest.Context(t, wait), p, clientv3.WithPrefix())
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, kv := range resp.Kvs {
		if clientv3.LeaseID(kv.Lease) == s.Lease() {
			n++
		}
	}
	return n
}

// putsUnder matches a request that writes under the queue of kind and name.
func putsUnder(t *testing.T, kind fencing.Kind, name string) func(string, any) bool {
	p, err := inspect.KeyPrefix(fencing.DefaultRoot, kind, name)
	if err != nil {
		t.Fatal(err)
	}
	return func(_ string, req any) bool { return etcdtest.PutsUnder(req, p) }
}

// Each wait, and every call of the new kinds, returns by its ctx's
// deadline through a blackholed link (as the mutex's do, see
// TestCallsKeepTheirDeadline); healed, the session's cleanup leaves no key.
func TestSharedCallsKeepTheirDeadline(t *testing.T) {
	for _, w := range waitShapes {
		t.Run(w.name, func(t *testing.T) {
			t.Parallel()
			c := fencingtest.Single(t)
			cli, link := c.ProxiedClient(t)
			const ttl = 20 * time.Second
			lctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
			defer cancel()
			wt := w.startOn(t, c, cli, lctx, fencing.WithTTL(ttl))
			sem, rw := newSemaphore(t, wt.s, "deadline-free", 2), newRWMutex(t, wt.s, "deadline-free")
			ownPermit, ownRead := acquire(t, newSemaphore(t, wt.s, "deadline-own", 2)), take(t, newRWMutex(t, wt.s, "deadline-own").RLock)
			link.Blackhole()
			deadline, _ := lctx.Deadline()
			err := etcdtest.ReturnsBy(t, time.Until(deadline)+overrun, "the wait with a 3 s ctx", func() error { return (<-wt.done).err })
			if !errors.Is(err, context.DeadlineExceeded) {
				t.Errorf("the wait: %v, want DeadlineExceeded", err)
			}
			for what, call := range map[string]func(context.Context) (*fencing.Hold, error){
				"Semaphore.TryAcquire": sem.TryAcquire, "Semaphore.Acquire": sem.Acquire,
				"RWMutex.TryLock": rw.TryLock, "RWMutex.TryRLock": rw.TryRLock, "RWMutex.Lock": rw.Lock, "RWMutex.RLock": rw.RLock,
			} {
				withinDeadline(t, what, time.Second, func(ctx context.Context) error { _, err := call(ctx); return err })
			}
			withinDeadline(t, "Unlock of a permit", time.Second, ownPermit.Unlock)
			withinDeadline(t, "Unlock of a read hold", time.Second, ownRead.Unlock)
			link.Restore()
			wt.release(t)
			// An enqueue whose reply was lost may be applied after the first
			// delete: its key goes with the second, one TTL later.
			fencingtest.WaitFor(t, ttl+wait, "no key of the failed calls left", func() bool {
				return w.keysOf(t, c, wt.s) == 0 && len(etcdtest.Keys(t, c, "leasehold/deadline-free#")) == 0
			})
		})
	}
}

// S4 for a failed wait: a call whose lease is revoked while it waits fails
// with ErrSessionExpired wrapping ErrLeaseExpired, whether the session
// learns it first or the call's own read finds the lease gone on the
// server (with a long TTL, the session's next renewal is far off).
func TestRevokedWaitSaysLeaseExpired(t *testing.T) {
	for _, w := range waitShapes {
		t.Run(w.name, func(t *testing.T) {
			c := fencingtest.Single(t)
			wt := w.start(t, c, fencingtest.Context(t, wait), fencing.WithTTL(60*time.Second))
			c.Revoke(t, wt.s.Lease())
			wt.release(t) // its turn comes: it finds its key gone, with the lease
			if err := wt.result(t); !errors.Is(err, fencing.ErrSessionExpired) || !errors.Is(err, fencing.ErrLeaseExpired) {
				t.Fatalf("revoked: %v; want ErrSessionExpired wrapping ErrLeaseExpired", err)
			}
		})
	}
}
