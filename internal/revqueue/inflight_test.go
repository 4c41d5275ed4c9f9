package revqueue_test

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"testing"

	"github.com/leasehold/leasehold/fencing"
	"github.com/leasehold/leasehold/fencing/fencingtest"
	"github.com/leasehold/leasehold/guard"
	"github.com/leasehold/leasehold/internal/keyspace"
	"github.com/leasehold/leasehold/internal/sessionlink"
	"github.com/leasehold/leasehold/internal/testbed/etcdtest"
	"google.golang.org/grpc"
)

// A burst of Lock calls on one session sends at most WithMaxInFlight
// requests at once; the rest wait for a place, and every call then owns
// (#29: a hundred thousand Locks started together queued the lease's
// renewal behind them, and the session ended). etcd's answers are held
// until every call is either out or waiting for a place.
func TestSessionBoundsRequestsInFlight(t *testing.T) {
	const limit = 4
	s, f := etcdtest.LimitedSession(t, fencingtest.Single(t), limit)
	ctx := fencingtest.Context(t, fencingtest.Wait)
	f.Burst(t, s, limit, 40, func(i int) error {
		h, err := etcdtest.Mutex(t, s, fmt.Sprint("burst/", i)).Lock(ctx)
		if err != nil {
			return err
		}
		return h.Unlock(ctx)
	})
	if err := s.Err(); err != nil {
		t.Errorf("session ended: %v", err)
	}
}

// A Lock waiting for a place when its session ends (its lease revoked from
// another client) stops waiting, sent nothing, and returns
// ErrSessionExpired; its slot is neither retired nor swept.
func TestLockWaitingForAPlaceWhenSessionEnds(t *testing.T) {
	c := fencingtest.Single(t)
	s, f := etcdtest.LimitedSession(t, c, 1)
	written := takePlace(fencingtest.Context(t, fencingtest.Wait), t, s, f)
	locked := make(chan error, 1)
	go func() { _, err := etcdtest.Mutex(t, s, "waits").Lock(t.Context()); locked <- err }() // no deadline of its own
	f.AwaitQueued(t, s, 1, 1)
	c.Revoke(t, s.Lease())
	if err := fencingtest.Receive(t, locked, "the Lock waiting for a place as its lease was revoked"); !errors.Is(err, fencing.ErrSessionExpired) {
		t.Fatalf("Lock waiting for a place as its lease was revoked: %v; want ErrSessionExpired", err)
	}
	f.Release()
	<-written // sent before the revoke was seen: its outcome is not this test's
	if _, _, swept := sessionlink.Of(s).Keys.Size(); swept != 0 {
		t.Errorf("%d queues swept; want none: the Lock sent nothing", swept)
	}
}

// A Lock and an Unlock waiting for a place when their etcd client is
// closed stop waiting and send nothing: the Lock returns ErrSessionExpired
// (the client's close ends the session), the Unlock ErrNotHeld (the key goes
// with the lease), though neither ctx ends.
func TestWaitingForAPlaceWhenClientCloses(t *testing.T) {
	c := fencingtest.Single(t)
	s, f := etcdtest.LimitedSession(t, c, 1)
	held := fencingtest.Lock(t, s, "held")
	// clientv3 resends a request failed by its closed connection until the
	// caller's ctx ends: the write's ends before it is let go.
	wctx, stopWrite := context.WithCancel(t.Context())
	written := takePlace(wctx, t, s, f)
	locked, unlocked := make(chan error, 1), make(chan error, 1)
	go func() { _, err := etcdtest.Mutex(t, s, "waits").Lock(t.Context()); locked <- err }()
	go func() { unlocked <- held.Unlock(t.Context()) }()
	f.AwaitQueued(t, s, 1, 2)
	s.Client().Close()
	for _, w := range []struct {
		call string
		errs chan error
		want error
	}{{"Lock", locked, fencing.ErrSessionExpired}, {"Unlock", unlocked, fencing.ErrNotHeld}} {
		if err := fencingtest.Receive(t, w.errs, w.call+" waiting for a place as its client closed"); !errors.Is(err, w.want) {
			t.Errorf("%s waiting for a place as its client closed: %v; want %v", w.call, err, w.want)
		}
	}
	// The Lock's key went back to the pool (sent nothing, retired nothing);
	// the writer's stays in use, and so does the unlocked one's, whose delete
	// was never sent (its lease takes the key).
	if _, inUse, swept := sessionlink.Of(s).Keys.Size(); inUse != 2 || swept != 0 {
		t.Errorf("key pool: %d slots in use, %d queues swept; want 2, none: the waiting calls sent nothing", inUse, swept)
	}
	stopWrite()
	f.Release()
	<-written // out before the close: its outcome is not this test's
}

// takePlace takes the one place of s (a LimitedSession of 1, watched by f)
// with a guarded write under ctx, which f holds in the client until
// Release, and returns the write's outcome once it comes.
func takePlace(ctx context.Context, t *testing.T, s *fencing.Session, f *etcdtest.InFlight) <-chan error {
	t.Helper()
	h := fencingtest.Lock(t, s, "writer")
	f.Hold()
	written := make(chan error, 1)
	go func() { _, err := guard.Put(ctx, h, "data", "v"); written <- err }()
	f.AwaitQueued(t, s, 1, 0)
	return written
}

// A Lock whose ctx ends while it waits for a place sent nothing: it
// returns ctx's error, and its key goes back to the session's pool, not
// retired and swept as after a request whose outcome is unknown. The one
// place is taken by a guarded write held in the client, which no attempt
// bound gives up.
func TestLockGivesUpWaitingForAPlace(t *testing.T) {
	s, f := etcdtest.LimitedSession(t, fencingtest.Single(t), 1)
	ctx := fencingtest.Context(t, fencingtest.Wait)
	written := takePlace(ctx, t, s, f)
	short, cancel := context.WithCancel(ctx)
	locked := make(chan error, 1)
	go func() { _, err := etcdtest.Mutex(t, s, "waits").Lock(short); locked <- err }()
	f.AwaitQueued(t, s, 1, 1)
	cancel()
	if err := <-locked; !errors.Is(err, context.Canceled) {
		t.Fatalf("Lock cancelled while waiting for a place: %v; want context.Canceled", err)
	}
	f.Release()
	if err := <-written; err != nil {
		t.Fatalf("guarded Put: %v", err)
	}
	if _, inUse, swept := sessionlink.Of(s).Keys.Size(); inUse != 1 || swept != 0 {
		t.Errorf("key pool: %d slots in use, %d queues swept; want 1 (the writer's), none: the cancelled Lock sent nothing", inUse, swept)
	}
	if got := f.Most(); got > 1 {
		t.Errorf("%d requests were out at once; want 1", got)
	}
}

// A cancelled Lock whose key is written deletes it in the background when
// the session's places are all taken past the cleanup's budget: its delete
// was never sent, so the slot stays in use until that background delete
// returns, then goes back to the pool, neither retired nor swept. Both
// places are taken by guarded writes held in the client; the Lock is
// cancelled as its enqueue's answer comes back, and the second write waits
// for the enqueue's place.
func TestCleanupWaitsForAPlaceWithoutRetiring(t *testing.T) {
	c := fencingtest.Single(t)
	fencingtest.Lock(t, fencingtest.Session(t, c.Client(t)), "contended") // the Lock waits behind it
	queue := keyspace.Prefix(fencing.DefaultRoot, string(fencing.KindLock), "contended")
	lockCtx, cancelLock := context.WithCancel(fencingtest.Context(t, fencingtest.Wait))
	defer cancelLock()
	release := make(chan struct{})
	var (
		armed  atomic.Bool
		s      *fencing.Session
		h      *fencing.Hold
		writes = make(chan error, 2)
	)
	write := func(key string) {
		_, err := guard.Put(fencingtest.Context(t, fencingtest.Wait), h, key, "v")
		writes <- err
	}
	hold := etcdtest.Unary(func(ctx context.Context, m string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
		if etcdtest.PutsUnder(req, "held/") {
			select {
			case <-release:
			case <-ctx.Done():
				return ctx.Err()
			}
		}
		err := invoker(ctx, m, req, reply, cc, opts...)
		if etcdtest.PutsUnder(req, queue) && armed.CompareAndSwap(true, false) {
			go write("held/2") // takes the enqueue's place once it returns
			fencingtest.Within(fencingtest.Wait, func() bool { return etcdtest.Waiting() == 1 })
			cancelLock()
		}
		return err
	})
	s, f := etcdtest.LimitedSession(t, c, 2, hold)
	h = fencingtest.Lock(t, s, "writer")
	go write("held/1")
	fencingtest.WaitFor(t, fencingtest.Wait, "the first write to hold a place", func() bool { return f.Now() == 1 })
	armed.Store(true)
	if _, err := etcdtest.Mutex(t, s, "contended").Lock(lockCtx); !errors.Is(err, context.Canceled) {
		t.Fatalf("Lock: %v; want context.Canceled", err)
	}
	fencingtest.WaitFor(t, fencingtest.Wait, "the cleanup's delete to wait for a place", func() bool { return etcdtest.Waiting() >= 1 })
	if _, inUse, swept := sessionlink.Of(s).Keys.Size(); inUse != 2 || swept != 0 {
		t.Fatalf("key pool: %d slots in use, %d queues swept; want 2 (the writer's and the cancelled Lock's), none", inUse, swept)
	}
	close(release)
	for range 2 {
		if err := <-writes; err != nil {
			t.Fatalf("guarded Put: %v", err)
		}
	}
	fencingtest.WaitFor(t, fencingtest.Wait, "the cancelled Lock's key to be deleted", func() bool {
		_, inUse, _ := sessionlink.Of(s).Keys.Size()
		return inUse == 1 && len(etcdtest.Keys(t, c, queue)) == 1
	})
	if _, _, swept := sessionlink.Of(s).Keys.Size(); swept != 0 {
		t.Errorf("%d queues swept; want none: the slot goes back to the pool", swept)
	}
}
