package robust_test

import (
	"context"
	"errors"
	"path"
	"sync/atomic"
	"testing"
	"time"

	"github.com/leasehold/leasehold/election"
	"github.com/leasehold/leasehold/fencing"
	"github.com/leasehold/leasehold/fencing/fencingtest"
	"github.com/leasehold/leasehold/guard"
	"github.com/leasehold/leasehold/internal/testbed/etcdtest"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	"google.golang.org/grpc"
)

// With etcd auth on, a user allowed only the library's prefix (and its own
// data's) can use every API; a user allowed nothing gets a permission error
// and leaves no key behind.
func TestAuthLimitedToPrefixes(t *testing.T) {
	c := fencingtest.Single(t)
	etcdtest.EnableAuth(t, c)
	etcdtest.AddUser(t, c, "svc", "leasehold/", "app/")
	etcdtest.AddUser(t, c, "nobody")
	ctx := fencingtest.Context(t, time.Minute)

	svc := c.Client(t, etcdtest.WithAuth("svc", "svc"))
	s := fencingtest.Session(t, svc)
	h := fencingtest.Lock(t, s, "jobs/billing")
	if _, err := etcdtest.Mutex(t, s, "jobs/billing").TryLock(ctx); !errors.Is(err, fencing.ErrLocked) {
		t.Fatalf("TryLock: %v; want ErrLocked", err)
	}
	if _, err := guard.Put(ctx, h, "app/state", "1"); err != nil {
		t.Fatalf("guarded Put: %v", err)
	}
	// Armed: the session's watch stream carries svc's token (a watch
	// created without it is refused, and never arms).
	wctx, stop := guard.Watch(ctx, h)
	defer stop()
	if wctx.Err() != nil {
		t.Fatalf("watched hold ended: %v", context.Cause(wctx))
	}
	if err := h.Unlock(ctx); err != nil {
		t.Fatalf("Unlock: %v", err)
	}
	if cause := fencingtest.Ended(t, wctx, time.Minute, "the watch after Unlock"); !errors.Is(cause, fencing.ErrNotHeld) {
		t.Fatalf("cause %v, want ErrNotHeld", cause)
	}
	e, _ := election.New(s, "api")
	obs := e.Observe(ctx)
	if o := <-obs; o.Err != nil || o.Leader != nil {
		t.Fatalf("first observation: %+v", o)
	}
	term, err := e.Campaign(ctx, "svc-1")
	if err != nil {
		t.Fatalf("Campaign: %v", err)
	}
	if err := term.Proclaim(ctx, "svc-1b"); err != nil {
		t.Fatalf("Proclaim: %v", err)
	}
	if err := term.Resign(ctx); err != nil {
		t.Fatalf("Resign: %v", err)
	}
	ran := false
	if err := election.Run(ctx, svc, "runner", "svc-1", func(context.Context, *election.Term) error { ran = true; return nil }); err != nil || !ran {
		t.Fatalf("Run: %v (work ran: %v)", err, ran)
	}

	nobody := c.Client(t, etcdtest.WithAuth("nobody", "nobody"))
	ns, err := fencing.NewSession(ctx, nobody)
	if err == nil {
		t.Cleanup(func() { ns.Close(context.Background()) })
		_, err = etcdtest.Mutex(t, ns, "jobs/billing").Lock(ctx)
		if !errors.Is(err, rpctypes.ErrPermissionDenied) {
			t.Fatalf("Lock without permission: %v; want ErrPermissionDenied", err)
		}
		_, err = etcdtest.Mutex(t, ns, "jobs/billing").TryLock(ctx)
		if !errors.Is(err, rpctypes.ErrPermissionDenied) {
			t.Fatalf("TryLock without permission: %v; want ErrPermissionDenied", err)
		}
		ne, _ := election.New(ns, "api")
		if _, err := ne.Campaign(ctx, "x"); !errors.Is(err, rpctypes.ErrPermissionDenied) {
			t.Fatalf("Campaign without permission: %v; want ErrPermissionDenied", err)
		}
	} else if !errors.Is(err, rpctypes.ErrPermissionDenied) {
		t.Fatalf("NewSession without permission: %v", err)
	}
	if keys := etcdtest.Keys(t, c, "leasehold/"); len(keys) != 0 {
		t.Fatalf("keys left behind: %q", keys)
	}
}

// A watched hold still sees its key deleted after its member restarts with
// auth on. etcd keeps simple auth tokens in a member's memory, so the
// restart voids every client's token. The session's watch stream is made
// again, and each watch created on it must carry a valid token.
func TestWatchedHoldAcrossRestartWithAuth(t *testing.T) {
	etcdtest.Long(t)
	c := fencingtest.Single(t)
	etcdtest.EnableAuth(t, c)
	etcdtest.AddUser(t, c, "svc", "leasehold/")
	ctx := fencingtest.Context(t, time.Minute)
	svc := c.Client(t, etcdtest.WithAuth("svc", "svc"))
	// A long TTL: no renewal, which would renew the client's token on the
	// way, comes within the test.
	s := fencingtest.Session(t, svc, fencing.WithTTL(10*time.Minute))
	h := fencingtest.Lock(t, s, "jobs/billing")
	wctx, stop := guard.Watch(ctx, h)
	defer stop()
	c.Stop(0)
	c.Restart(t, 0)
	c.WaitLeader(t)
	c.Delete(t, h.Key())
	if cause := fencingtest.Ended(t, wctx, 30*time.Second, "the hold's context after its key went"); !errors.Is(cause, fencing.ErrKeyDeleted) {
		t.Fatalf("cause %v, want ErrKeyDeleted", cause)
	}
}

// With auth on, a session's renewals cost etcd no Authenticate each.
// clientv3 fetches a new token for every stream it opens, and etcd answers
// an Authenticate with a bcrypt check of the password and a raft write;
// `concurrency`'s session renews on one stream, and pays that once.
func TestRenewalsDoNotAuthenticate(t *testing.T) {
	etcdtest.Long(t)
	c := fencingtest.Single(t)
	etcdtest.EnableAuth(t, c)
	etcdtest.AddUser(t, c, "svc", "leasehold/")
	var auths, renewals atomic.Int32
	svc := c.Client(t, etcdtest.WithAuth("svc", "svc"), countCalls("Authenticate", &auths))
	fencingtest.Session(t, svc, fencing.WithTTL(3*time.Second), fencing.WithObserver(fencing.Observer{
		OnRenew: func(e fencing.RenewEvent) {
			if e.Err == nil {
				renewals.Add(1)
			}
		},
	}))
	before := auths.Load()
	fencingtest.WaitFor(t, fencingtest.Wait, "5 renewals", func() bool { return renewals.Load() >= 5 })
	if n := auths.Load() - before; n > 1 {
		t.Fatalf("%d Authenticate calls in %d renewals, want at most 1 (the stream's)", n, renewals.Load())
	}
}

// countCalls counts a client's unary calls of method (its last path element).
func countCalls(method string, n *atomic.Int32) fencingtest.ClientOption {
	return etcdtest.Unary(
		func(ctx context.Context, m string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
			if path.Base(m) == method {
				n.Add(1)
			}
			return invoker(ctx, m, req, reply, cc, opts...)
		})
}

// With auth on, a session renews although every Authenticate takes longer
// than a renewal's time (TTL/3): opening the keepalive stream waits for a
// token, a bcrypt check on etcd, which a loaded etcd (or a high
// --bcrypt-cost, or the race detector) makes slow. Cut short at a renewal's
// time, each retry asked for another token and none ended in time: the
// session ended with ErrLeaseUnconfirmed before its first renewal.
// (Authenticate is sent late by the test, as through a slow link.)
func TestRenewalsSurviveSlowAuthenticate(t *testing.T) {
	etcdtest.Long(t)
	c := fencingtest.Single(t)
	etcdtest.EnableAuth(t, c)
	etcdtest.AddUser(t, c, "svc", "leasehold/")
	// TTL 6 s: a renewal every 2 s; the first, 2 s after the grant, has
	// until ValidUntil (5.4 s after it) to open its stream.
	const ttl, authDelay = 6 * time.Second, 2200 * time.Millisecond
	var renewals atomic.Int32
	// The client's first token comes as it connects, before the delay
	// applies: only the stream's tokens are slow.
	var slow atomic.Bool
	svc := c.Client(t, etcdtest.WithAuth("svc", "svc"), delayCalls("Authenticate", &slow, authDelay))
	slow.Store(true)
	s := fencingtest.Session(t, svc, fencing.WithTTL(ttl), fencing.WithObserver(fencing.Observer{
		OnRenew: func(e fencing.RenewEvent) {
			if e.Err == nil {
				renewals.Add(1)
			}
		},
	}))
	fencingtest.WaitFor(t, fencingtest.Wait, "3 renewals", func() bool { return renewals.Load() >= 3 || s.Err() != nil })
	if err := s.Err(); err != nil {
		t.Fatalf("the session ended after %d renewals: %v", renewals.Load(), err)
	}
}

// delayCalls sends a client's unary calls of method (its last path element)
// d late while on is true: the request reaches etcd as from a slow link.
func delayCalls(method string, on *atomic.Bool, d time.Duration) fencingtest.ClientOption {
	return etcdtest.Unary(
		func(ctx context.Context, m string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
			if path.Base(m) == method && on.Load() {
				select {
				case <-time.After(d):
				case <-ctx.Done():
					return ctx.Err()
				}
			}
			return invoker(ctx, m, req, reply, cc, opts...)
		})
}

// A client's auth token expires: a JWT at its time however much it is
// used, a simple token (etcd's default) once unused for its TTL, 5 minutes
// by default. Every stream opened with it keeps carrying it, and a session
// at rest sends no request that would fetch a new one. Across expiries:
// sessions renew, a waiter acquires, a watch made before keeps watching, a
// watch made after arms on a stream opened before (it never did: etcd
// answers a create it refuses with watch ID -1, and the session's stream
// dropped that answer), a semaphore's waiter acquires, an observer made
// after and one made before see the next leader, and guarded writes pass.
func TestAuthTokenExpiryMidWait(t *testing.T) {
	etcdtest.Long(t)
	const ttl = time.Second
	t.Run("jwt", func(t *testing.T) { tokenExpiryMidWait(t, etcdtest.SingleJWT(t, ttl), ttl) })
	t.Run("simple", func(t *testing.T) { tokenExpiryMidWait(t, etcdtest.SingleTokenTTL(t, ttl), ttl) })
}

func tokenExpiryMidWait(t *testing.T, c *fencingtest.Cluster, ttl time.Duration) {
	etcdtest.EnableAuth(t, c)
	etcdtest.AddUser(t, c, "svc", "leasehold/")
	ctx := fencingtest.Context(t, time.Minute)
	var ctr etcdtest.Counter
	s1 := fencingtest.Session(t, c.Client(t, etcdtest.WithAuth("svc", "svc"), etcdtest.WithCounter(&ctr)), fencing.WithTTL(3*time.Second))
	s2 := fencingtest.Session(t, c.Client(t, etcdtest.WithAuth("svc", "svc")), fencing.WithTTL(3*time.Second))
	h0 := fencingtest.Lock(t, s1, "jobs/zero")
	w0, stop0 := guard.Watch(ctx, h0) // s1's watch stream is open from here
	defer stop0()
	h1 := fencingtest.Lock(t, s1, "jobs/billing")
	waiter := make(chan error, 1)
	m2 := etcdtest.Mutex(t, s2, "jobs/billing")
	go func() {
		h, err := m2.Lock(ctx)
		if err == nil {
			_, err = guard.Put(ctx, h, "leasehold/data", "from s2")
		}
		waiter <- err
	}()
	fencingtest.WaitFor(t, fencingtest.Wait, "s2 to queue", func() bool { return len(c.Queue(t, fencing.KindLock, "jobs/billing").Entries) == 2 })
	e2 := etcdtest.Election(t, s2, "api")
	obs := e2.Observe(ctx)
	if o := <-obs; o.Err != nil || o.Leader != nil {
		t.Fatalf("first observation: %+v", o)
	}
	auth := ctr.Requests("Authenticate")
	time.Sleep(3 * ttl) // the fault: every token so far expires
	if s1.Err() != nil || s2.Err() != nil {
		t.Fatalf("sessions ended across token expiry: %v, %v", s1.Err(), s2.Err())
	}
	// A watch made now, on s1's stream opened with an expired token.
	wctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	w1, stop1 := guard.Watch(wctx, h1)
	defer stop1()
	if w1.Err() != nil {
		t.Fatalf("watch made after expiry: %v", context.Cause(w1))
	}
	if err := h1.Unlock(ctx); err != nil {
		t.Fatalf("Unlock after expiry: %v", err)
	}
	select {
	case err := <-waiter:
		if err != nil {
			t.Fatalf("waiter across expiry: %v", err)
		}
	case <-ctx.Done():
		t.Fatal("the waiter did not acquire")
	}
	// A Lock that waits now: its watch goes on s2's stream, opened with
	// the expired token.
	handOver(t, c, fencingtest.Lock(t, s1, "jobs/late"), s2, "the waiter queued after expiry")
	c.Delete(t, h0.Key())
	if cause := fencingtest.Ended(t, w0, fencingtest.Wait, "the watch made before expiry, after its key went"); !errors.Is(cause, fencing.ErrKeyDeleted) {
		t.Fatalf("cause %v, want ErrKeyDeleted", cause)
	}
	// A semaphore's first waiter watches with clientv3, on s2's stream that
	// the observer's watch keeps open with the expired token.
	sem1, err := fencing.NewSemaphore(s1, "jobs/sem", 1)
	if err != nil {
		t.Fatal(err)
	}
	sem2, err := fencing.NewSemaphore(s2, "jobs/sem", 1)
	if err != nil {
		t.Fatal(err)
	}
	p1, err := sem1.Acquire(ctx)
	if err != nil {
		t.Fatalf("Acquire after expiry: %v", err)
	}
	acquired := make(chan error, 1)
	go func() {
		p2, err := sem2.Acquire(ctx)
		if err == nil {
			err = p2.Unlock(ctx)
		}
		acquired <- err
	}()
	fencingtest.WaitFor(t, fencingtest.Wait, "s2 to queue on the semaphore", func() bool {
		return len(c.Queue(t, fencing.KindSemaphore, "jobs/sem").Entries) == 2
	})
	if err := p1.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-acquired:
		if err != nil {
			t.Fatalf("semaphore waiter after expiry: %v", err)
		}
	case <-ctx.Done():
		t.Fatal("the semaphore waiter did not acquire")
	}
	// An observer made now: its clientv3 watch would go on the stream the
	// first observer keeps open with the expired token, and be refused for
	// as long as that one lives (found in an audit: it reported the error
	// every two seconds and never a state).
	o2 := etcdtest.Election(t, s2, "api")
	select {
	case o := <-o2.Observe(ctx):
		if o.Err != nil {
			t.Fatalf("observer made after expiry: %v", o.Err)
		}
	case <-time.After(fencingtest.Wait):
		t.Fatal("the observer made after expiry reported nothing")
	}
	e1 := etcdtest.Election(t, s1, "api")
	if _, err := e1.Campaign(ctx, "s1"); err != nil {
		t.Fatalf("Campaign after expiry: %v", err)
	}
	for led := false; !led; {
		select {
		case o := <-obs:
			led = o.Err == nil && o.Leader != nil && string(o.Leader.Value) == "s1"
		case <-time.After(fencingtest.Wait):
			t.Fatal("the observer did not see s1 lead")
		}
	}
	if ctr.Requests("Authenticate") == auth {
		t.Error("no new token was fetched: the fault did not happen")
	}
}

// A session whose watch stream was opened while auth was off (it carries
// no token) keeps serving waits once auth is turned on: etcd refuses each
// create on it ("user name is empty"), and the stream is opened again, with
// a token. Found in an audit: the stream was kept, and a Lock that waited
// never acquired.
func TestWatchStreamFromBeforeAuth(t *testing.T) {
	c := fencingtest.Single(t)
	etcdtest.AddUser(t, c, "svc", "leasehold/")
	ctx := fencingtest.Context(t, time.Minute)
	s1 := fencingtest.Session(t, c.Client(t, etcdtest.WithAuth("svc", "svc")))
	h0 := fencingtest.Lock(t, s1, "jobs/zero")
	w0, stop0 := guard.Watch(ctx, h0) // s1's watch stream is open, with no token
	defer stop0()
	etcdtest.EnableAuth(t, c)
	s2 := fencingtest.Session(t, c.Client(t, etcdtest.WithAuth("svc", "svc")))
	handOver(t, c, fencingtest.Lock(t, s2, "jobs/billing"), s1, "the waiter")
	if w0.Err() != nil {
		t.Fatalf("the watch from before auth ended: %v", context.Cause(w0))
	}
}

// handOver queues a Lock of waiter behind h, unlocks h, and fails unless the
// waiter acquires (and unlocks) in time.
func handOver(t *testing.T, c *fencingtest.Cluster, h *fencing.Hold, waiter *fencing.Session, what string) {
	t.Helper()
	ctx := fencingtest.Context(t, time.Minute)
	name := h.Token().Name
	m := etcdtest.Mutex(t, waiter, name)
	done := make(chan error, 1)
	go func() {
		next, err := m.Lock(ctx)
		if err == nil {
			err = next.Unlock(ctx)
		}
		done <- err
	}()
	fencingtest.WaitFor(t, fencingtest.Wait, what+" to queue", func() bool { return len(c.Queue(t, fencing.KindLock, name).Entries) == 2 })
	if err := h.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("%s: %v", what, err)
		}
	case <-time.After(fencingtest.Wait):
		t.Fatalf("%s did not acquire", what)
	}
}

// An observer whose watches etcd keeps refusing for the token (here a
// client with no credentials once auth is on, whose every new stream has
// none) reports it: a refusal for the token is passed over once, since the
// next watch goes on a new stream with a new token, not for ever (found in
// review: it went silent).
func TestObserveReportsTokenThatWillNotDo(t *testing.T) {
	c := fencingtest.Single(t)
	s := fencingtest.Session(t, c.Client(t), fencing.WithTTL(time.Minute))
	e, err := election.New(s, "api")
	if err != nil {
		t.Fatal(err)
	}
	etcdtest.EnableAuth(t, c)
	ctx := fencingtest.Context(t, time.Minute)
	select {
	case o := <-e.Observe(ctx):
		if !errors.Is(o.Err, rpctypes.ErrUserEmpty) {
			t.Fatalf("first observation: %+v; want an Err of an empty user", o)
		}
	case <-time.After(fencingtest.Wait):
		t.Fatal("the observer said nothing")
	}
}
