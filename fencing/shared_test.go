package fencing_test

import (
	"context"
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/leasehold/leasehold/internal/testbed/etcdtest"

	"github.com/leasehold/leasehold/fencing"
	"github.com/leasehold/leasehold/fencing/fencingtest"
	"github.com/leasehold/leasehold/fencing/inspect"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// waitShape is a queue in which the next call must wait: ahead takes the
// holds (and queues the waiters) in front of it, call is the call.
type waitShape struct {
	name  string
	kind  fencing.Kind
	queue string
	ahead func(t *testing.T, c *fencingtest.Cluster, s *fencing.Session) []*fencing.Hold
	call  func(t *testing.T, s *fencing.Session) func(context.Context) (*fencing.Hold, error)
}

// The waits of the semaphore's and the read-write lock's rules: the first
// waiter (watching the owners), a later waiter (watching its predecessor),
// a writer behind readers (watching them all), a reader behind a writer.
var waitShapes = []waitShape{
	{"first waiter", fencing.KindSemaphore, "wait-first",
		func(t *testing.T, _ *fencingtest.Cluster, s *fencing.Session) []*fencing.Hold {
			m := newSemaphore(t, s, "wait-first", 2)
			return []*fencing.Hold{acquire(t, m), acquire(t, m)}
		},
		func(t *testing.T, s *fencing.Session) func(context.Context) (*fencing.Hold, error) {
			return newSemaphore(t, s, "wait-first", 2).Acquire
		}},
	{"later waiter", fencing.KindSemaphore, "wait-later",
		func(t *testing.T, c *fencingtest.Cluster, s *fencing.Session) []*fencing.Hold {
			m := newSemaphore(t, s, "wait-later", 2)
			held := []*fencing.Hold{acquire(t, m), acquire(t, m)}
			first := goAcquire(fencingtest.Context(t, wait), m)
			fencingtest.WaitFor(t, wait, "the first waiter to queue", func() bool { return len(semKeys(t, c, "wait-later")) == 3 })
			t.Cleanup(func() { // admitted once the holds ahead go
				if r := <-first; r.err == nil {
					r.h.Unlock(context.Background())
				}
			})
			return held
		},
		func(t *testing.T, s *fencing.Session) func(context.Context) (*fencing.Hold, error) {
			return newSemaphore(t, s, "wait-later", 2).Acquire
		}},
	{"weighted first waiter", fencing.KindSemaphore, "wait-weighted-first",
		func(t *testing.T, _ *fencingtest.Cluster, s *fencing.Session) []*fencing.Hold {
			return []*fencing.Hold{acquireN(t, newSemaphore(t, s, "wait-weighted-first", 3), 2)}
		},
		func(t *testing.T, s *fencing.Session) func(context.Context) (*fencing.Hold, error) {
			m := newSemaphore(t, s, "wait-weighted-first", 3)
			return func(ctx context.Context) (*fencing.Hold, error) { return m.AcquireN(ctx, 2) }
		}},
	{"weighted later waiter", fencing.KindSemaphore, "wait-weighted-later",
		func(t *testing.T, c *fencingtest.Cluster, s *fencing.Session) []*fencing.Hold {
			m := newSemaphore(t, s, "wait-weighted-later", 3)
			held := []*fencing.Hold{acquireN(t, m, 3)}
			first := goAcquireN(fencingtest.Context(t, wait), m, 1)
			fencingtest.WaitFor(t, wait, "the first waiter to queue", func() bool { return len(semKeys(t, c, "wait-weighted-later")) == 2 })
			t.Cleanup(func() { // admitted once the hold ahead goes
				if r := <-first; r.err == nil {
					r.h.Unlock(context.Background())
				}
			})
			return held
		},
		func(t *testing.T, s *fencing.Session) func(context.Context) (*fencing.Hold, error) {
			m := newSemaphore(t, s, "wait-weighted-later", 3)
			return func(ctx context.Context) (*fencing.Hold, error) { return m.AcquireN(ctx, 2) }
		}},
	{"writer behind readers", fencing.KindRWLock, "wait-writer",
		func(t *testing.T, _ *fencingtest.Cluster, s *fencing.Session) []*fencing.Hold {
			m := newRWMutex(t, s, "wait-writer")
			var held []*fencing.Hold
			for range 2 {
				r, err := m.RLock(fencingtest.Context(t, wait))
				if err != nil {
					t.Fatal(err)
				}
				held = append(held, r)
			}
			return held
		},
		func(t *testing.T, s *fencing.Session) func(context.Context) (*fencing.Hold, error) {
			return newRWMutex(t, s, "wait-writer").Lock
		}},
	{"reader behind a writer", fencing.KindRWLock, "wait-reader",
		func(t *testing.T, _ *fencingtest.Cluster, s *fencing.Session) []*fencing.Hold {
			w, err := newRWMutex(t, s, "wait-reader").Lock(fencingtest.Context(t, wait))
			if err != nil {
				t.Fatal(err)
			}
			return []*fencing.Hold{w}
		},
		func(t *testing.T, s *fencing.Session) func(context.Context) (*fencing.Hold, error) {
			return newRWMutex(t, s, "wait-reader").RLock
		}},
}

func (w waitShape) keys(t *testing.T, c *fencingtest.Cluster) []string {
	t.Helper()
	p, err := inspect.KeyPrefix(fencing.DefaultRoot, w.kind, w.queue)
	if err != nil {
		t.Fatal(err)
	}
	return etcdtest.Keys(t, c, p)
}

// waiting is a call of a shape, queued behind the shape's holds.
type waiting struct {
	s    *fencing.Session // the call's
	key  string           // the call's queued key
	held []*fencing.Hold  // ahead of it
	done <-chan result
}

// start queues the shape's call, on a session of its own made with opts.
func (w waitShape) start(t *testing.T, c *fencingtest.Cluster, ctx context.Context, opts ...fencing.SessionOption) waiting {
	t.Helper()
	return w.startOn(t, c, c.Client(t), ctx, opts...)
}

// startOn is start with the call's session on cli.
func (w waitShape) startOn(t *testing.T, c *fencingtest.Cluster, cli *clientv3.Client, ctx context.Context, opts ...fencing.SessionOption) waiting {
	t.Helper()
	held := w.ahead(t, c, newSession(t, c.Client(t)))
	before := w.keys(t, c)
	s := newSession(t, cli, opts...)
	done := goLock(ctx, w.call(t, s))
	var key string
	fencingtest.WaitFor(t, wait, "the call to queue", func() bool {
		for _, k := range w.keys(t, c) {
			if !slices.Contains(before, k) {
				key = k
				return true
			}
		}
		return false
	})
	return waiting{s, key, held, done}
}

// result waits for the call to return; a hold it got is released.
func (wt waiting) result(t *testing.T) error {
	t.Helper()
	select {
	case r := <-wt.done:
		if r.err == nil {
			r.h.Unlock(context.Background())
		}
		return r.err
	case <-time.After(wait):
		t.Fatalf("the call had not returned within %v", wait)
		return nil
	}
}

// release unlocks the holds ahead of the call.
func (wt waiting) release(t *testing.T) {
	t.Helper()
	for _, h := range wt.held {
		if err := h.Unlock(fencingtest.Context(t, wait)); err != nil {
			t.Fatal(err)
		}
	}
}

// S5 and S8 for the new rules: a waiting call that is cancelled, whose
// lease is revoked, or whose key an operator deletes, fails with the
// matching error and its key goes; a closed client writes nothing.
func TestSharedWaitsFail(t *testing.T) {
	for _, w := range waitShapes {
		t.Run(w.name+"/cancelled", func(t *testing.T) {
			c := fencingtest.Single(t)
			ctx, cancel := context.WithCancel(t.Context())
			wt := w.start(t, c, ctx)
			cancel()
			if err := wt.result(t); !errors.Is(err, context.Canceled) {
				t.Fatalf("cancelled: %v; want context.Canceled", err)
			}
			fencingtest.WaitFor(t, wait, "the call's key removed", func() bool { return !etcdtest.Exists(t, c, wt.key) })
			wt.release(t)
		})
		t.Run(w.name+"/lease revoked", func(t *testing.T) {
			c := fencingtest.Single(t)
			wt := w.start(t, c, fencingtest.Context(t, wait), fencing.WithTTL(2*time.Second))
			c.Revoke(t, wt.s.Lease())
			if err := wt.result(t); !errors.Is(err, fencing.ErrSessionExpired) || !errors.Is(err, fencing.ErrLeaseExpired) {
				t.Fatalf("revoked: %v; want ErrSessionExpired wrapping ErrLeaseExpired", err)
			}
			wt.release(t)
		})
		t.Run(w.name+"/key deleted", func(t *testing.T) {
			c := fencingtest.Single(t)
			wt := w.start(t, c, fencingtest.Context(t, wait))
			c.Delete(t, wt.key)
			wt.release(t) // its turn comes: it finds its key gone
			if err := wt.result(t); !errors.Is(err, fencing.ErrKeyDeleted) {
				t.Fatalf("key deleted: %v; want ErrKeyDeleted", err)
			}
		})
		t.Run(w.name+"/closed client", func(t *testing.T) {
			c := fencingtest.Single(t)
			cli := fencingtest.NewClient(t, c.Endpoints())
			call := w.call(t, newSession(t, cli))
			cli.Close()
			if _, err := call(fencingtest.Context(t, wait)); err == nil {
				t.Fatal("a call on a closed client succeeded")
			}
			if keys := w.keys(t, c); len(keys) != 0 {
				t.Fatalf("keys left: %v", keys)
			}
		})
	}
}
