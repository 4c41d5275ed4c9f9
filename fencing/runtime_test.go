package fencing_test

import (
	"context"
	"errors"
	"log/slog"
	"sync/atomic"
	"testing"
	"time"

	"github.com/leasehold/leasehold/fencing"
	"github.com/leasehold/leasehold/fencing/fencingtest"
	"github.com/leasehold/leasehold/guard"
	"github.com/leasehold/leasehold/internal/testbed/etcdtest"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// sharedKeyOwner is a guard.Owner of a key the test chooses, as an
// application with its own ownership keys implements it.
type sharedKeyOwner struct {
	s   *fencing.Session
	key string
	rev int64
}

func (o sharedKeyOwner) Token() fencing.Token      { return fencing.Token{Name: "shared", Revision: o.rev} }
func (o sharedKeyOwner) Key() string               { return o.key }
func (o sharedKeyOwner) Session() *fencing.Session { return o.s }

func ownKey(t *testing.T, s *fencing.Session, key string) sharedKeyOwner {
	t.Helper()
	resp, err := s.Client().Put(fencingtest.Context(t, wait), key, "x", clientv3.WithLease(s.Lease()))
	if err != nil {
		t.Fatal(err)
	}
	return sharedKeyOwner{s: s, key: key, rev: resp.Header.Revision}
}

// Two clients of two clusters in one process, owning keys of the same name:
// a loss proven on one never cancels the other's watch.
func TestSessionsDoNotShareOwnership(t *testing.T) {
	a, b := fencingtest.Single(t), fencingtest.Single(t)
	sa, sb := newSession(t, a.Client(t)), newSession(t, b.Client(t))
	const key = "app/leader"
	oa, ob := ownKey(t, sa, key), ownKey(t, sb, key)
	wb, stop := guard.Watch(fencingtest.Context(t, wait), ob)
	defer stop()

	a.Delete(t, key)
	if _, err := guard.Put(fencingtest.Context(t, wait), oa, "app/state", "v"); !errors.Is(err, guard.ErrNotOwner) {
		t.Fatalf("guarded put on cluster A after the delete: %v, want ErrNotOwner", err)
	}
	// Commit ends the watches of the loss it proved before it returns: one
	// of cluster B would be done by now.
	if wb.Err() != nil {
		t.Fatalf("cluster B's watch ended with %v after a loss on cluster A", context.Cause(wb))
	}
	if _, err := guard.Put(fencingtest.Context(t, wait), ob, "app/state", "v"); err != nil {
		t.Fatalf("cluster B's owner can no longer write: %v", err)
	}
}

// Context is a getter: it returns at once even when etcd cannot be reached,
// and the context it returns still ends with the session.
func TestContextNeverBlocks(t *testing.T) {
	c := fencingtest.Single(t)
	cli, link := c.ProxiedClient(t)
	s := newSession(t, cli, fencing.WithTTL(60*time.Second))
	h := lock(t, newMutex(t, s, "getter"))
	link.Blackhole()
	defer link.Restore()
	got := make(chan context.Context, 1)
	go func() { got <- h.Context() }()
	var ctx context.Context
	select {
	case ctx = <-got:
	case <-time.After(wait / 2): // the session vouches for a minute: blocking would run past this
		t.Fatal("Hold.Context blocked while etcd was unreachable")
	}
	if h.Context() != ctx {
		t.Error("a second call returned another context")
	}
	c.Revoke(t, s.Lease()) // the session learns of it only when the link heals
	link.Restore()
	select {
	case <-ctx.Done():
	case <-time.After(wait):
		t.Fatal("the hold's context outlived its revoked lease")
	}
	if cause := context.Cause(ctx); !errors.Is(cause, fencing.ErrLeaseExpired) && !errors.Is(cause, fencing.ErrKeyDeleted) {
		t.Errorf("cause %v, want the lease's loss", cause)
	}
}

// A hold whose key is gone before Context is first called gets a context
// that ends with that loss, once its background watch looks.
func TestContextOfAlreadyLostHold(t *testing.T) {
	c := fencingtest.Single(t)
	h := lock(t, newMutex(t, newSession(t, c.Client(t)), "getter-lost"))
	c.Delete(t, h.Key())
	ctx := h.Context()
	select {
	case <-ctx.Done():
	case <-time.After(wait):
		t.Fatal("the context of a deleted hold never ended")
	}
	if cause := context.Cause(ctx); !errors.Is(cause, fencing.ErrKeyDeleted) {
		t.Errorf("cause %v, want ErrKeyDeleted", cause)
	}
}

// Unlock ends the hold's contexts before anything else, even when its ctx
// is already done; the session then deletes the key, and a second Unlock
// finds the hold released.
func TestUnlockWithADoneContextEndsContextsAtOnce(t *testing.T) {
	c := fencingtest.Single(t)
	s := newSession(t, c.Client(t))
	h := lock(t, newMutex(t, s, "unlock-fails"))
	hctx := h.Context()
	wctx, stop := guard.Watch(fencingtest.Context(t, wait), h)
	defer stop()
	done, cancel := context.WithCancel(context.Background())
	cancel()
	if err := h.Unlock(done); !errors.Is(err, context.Canceled) {
		t.Fatalf("Unlock with a done ctx: %v, want ctx's error", err)
	}
	for name, ctx := range map[string]context.Context{"Context": hctx, "guard.Watch": wctx, "a later Context": h.Context()} {
		if ctx.Err() == nil || !errors.Is(context.Cause(ctx), fencing.ErrNotHeld) {
			t.Errorf("%s after the failed Unlock: cause %v, want ErrNotHeld", name, context.Cause(ctx))
		}
	}
	fencingtest.WaitFor(t, wait, "the session to delete the key", func() bool { return !etcdtest.Exists(t, c, h.Key()) })
	if err := h.Unlock(fencingtest.Context(t, wait)); !errors.Is(err, fencing.ErrNotHeld) {
		t.Fatalf("Unlock again: %v; want ErrNotHeld (already released)", err)
	}
	if s.Err() != nil {
		t.Fatalf("the session ended: %v", s.Err())
	}
}

// A waiter whose key an operator deletes keeps waiting, and fails with
// ErrKeyDeleted when its turn comes, as Lock's doc says.
func TestLockFailsWhenDeletedWaiterTurnComes(t *testing.T) {
	c := fencingtest.Single(t)
	holder := lock(t, newMutex(t, newSession(t, c.Client(t)), "deleted-waiter"))
	m := newMutex(t, newSession(t, c.Client(t)), "deleted-waiter")
	res := make(chan error, 1)
	go func() {
		_, err := m.Lock(fencingtest.Context(t, wait))
		res <- err
	}()
	var waiter string
	fencingtest.WaitFor(t, wait, "the waiter's key", func() bool {
		keys := etcdtest.LockKeys(t, c, "deleted-waiter")
		if len(keys) == 2 {
			waiter = keys[1]
		}
		return waiter != ""
	})
	c.Delete(t, waiter)
	select {
	case err := <-res:
		t.Fatalf("Lock returned %v before its turn", err)
	default:
	}
	if err := holder.Unlock(fencingtest.Context(t, wait)); err != nil {
		t.Fatal(err)
	}
	if err := <-res; !errors.Is(err, fencing.ErrKeyDeleted) {
		t.Fatalf("Lock: %v, want ErrKeyDeleted", err)
	}
}

// reentrant is an observer and a log handler that call back into the
// session and the ownership they report, which deadlocks if any of them runs
// under a lock of the library's.
type reentrant struct {
	s     atomic.Pointer[fencing.Session]
	h     atomic.Pointer[fencing.Hold]
	calls atomic.Int64
}

func (r *reentrant) poke() {
	r.calls.Add(1)
	if s := r.s.Load(); s != nil {
		_ = s.Err()
		_ = s.ValidUntil()
	}
	if h := r.h.Load(); h != nil {
		_ = h.Context()
		_ = h.Unlock(context.Background()) // already released or lost: returns at once
	}
}

func (r *reentrant) observer() fencing.Observer {
	return fencing.Observer{
		OnAcquire: func(fencing.AcquireEvent) { r.poke() },
		OnRelease: func(fencing.ReleaseEvent) { r.poke() },
		OnLoss:    func(fencing.LossEvent) { r.poke() },
		OnRenew:   func(fencing.RenewEvent) { r.poke() },
		OnReject:  func(fencing.RejectEvent) { r.poke() },
	}
}

func (r *reentrant) Enabled(context.Context, slog.Level) bool  { return true }
func (r *reentrant) Handle(context.Context, slog.Record) error { r.poke(); return nil }
func (r *reentrant) WithAttrs([]slog.Attr) slog.Handler        { return r }
func (r *reentrant) WithGroup(string) slog.Handler             { return r }

func TestCallbacksRunOutsideLocks(t *testing.T) {
	c := fencingtest.Single(t)
	r := &reentrant{}
	finished := make(chan struct{})
	go func() {
		defer close(finished)
		s, err := fencing.NewSession(context.Background(), c.Client(t), fencing.WithTTL(2*time.Second),
			fencing.WithObserver(r.observer()), fencing.WithLogger(slog.New(r)))
		if err != nil {
			t.Error(err)
			return
		}
		r.s.Store(s)
		m, _ := fencing.NewMutex(s, "reentrant")
		ctx := context.Background()
		h, err := m.Lock(ctx) // OnAcquire, debug log
		if err != nil {
			t.Error(err)
			return
		}
		r.h.Store(h)
		fencingtest.WaitFor(t, wait, "a renewal", func() bool { return r.calls.Load() > 2 })
		_ = h.Unlock(ctx) // OnRelease under Unlock
		h, _ = m.Lock(ctx)
		r.h.Store(h)
		c.Delete(t, h.Key())
		_, _ = guard.Put(ctx, h, "reentrant/data", "v") // OnReject, OnLoss via the failed txn
		_ = h.Unlock(ctx)                               // key gone: a loss, reported by Unlock
		h, _ = m.Lock(ctx)
		r.h.Store(h)
		c.Revoke(t, s.Lease()) // session lost: logged, OnLoss
		<-s.Done()
		_ = s.Close(ctx)
	}()
	select {
	case <-finished:
	case <-time.After(wait):
		t.Fatal("a callback that calls back into the library deadlocked")
	}
}
