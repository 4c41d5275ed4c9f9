package fencing_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"runtime"
	"slices"
	"testing"

	"github.com/leasehold/leasehold/fencing"
	"github.com/leasehold/leasehold/fencing/fencingtest"
	"github.com/leasehold/leasehold/fencing/inspect"
	"github.com/leasehold/leasehold/internal/testbed/etcdtest"
	clientv3 "go.etcd.io/etcd/client/v3"
)

func newSemaphore(t testing.TB, s *fencing.Session, name string, limit int) *fencing.Semaphore {
	t.Helper()
	m, err := fencing.NewSemaphore(s, name, limit)
	if err != nil {
		t.Fatalf("NewSemaphore(%q, %d): %v", name, limit, err)
	}
	return m
}

func acquire(t testing.TB, m *fencing.Semaphore) *fencing.Hold {
	t.Helper()
	h, err := m.Acquire(fencingtest.Context(t, wait))
	if err != nil {
		t.Fatalf("Acquire: %v", err)
	}
	return h
}

// semKeys lists the keys queued under a semaphore.
func semKeys(t testing.TB, c *fencingtest.Cluster, name string) []string {
	t.Helper()
	p, err := inspect.KeyPrefix(fencing.DefaultRoot, fencing.KindSemaphore, name)
	if err != nil {
		t.Fatal(err)
	}
	return etcdtest.Keys(t, c, p)
}

// result is what a call running in the background returned.
type result struct {
	h   *fencing.Hold
	err error
}

func goAcquire(ctx context.Context, m *fencing.Semaphore) <-chan result {
	ch := make(chan result, 1)
	go func() {
		h, err := m.Acquire(ctx)
		ch <- result{h, err}
	}()
	return ch
}

func received(t testing.TB, ch <-chan result, what string) *fencing.Hold {
	t.Helper()
	r := fencingtest.Receive(t, ch, what)
	if r.err != nil {
		t.Fatalf("%s: %v", what, r.err)
	}
	return r.h
}

func pending(t testing.TB, ch <-chan result, what string) {
	t.Helper()
	select {
	case r := <-ch:
		t.Fatalf("%s returned (%v, %v); it should still wait", what, r.h, r.err)
	default:
	}
}

// N holds at once, from one session (its permits exclude each other as two
// processes' do); the next waiters are served first come, first served, one
// per release, each with a greater token.
func TestSemaphoreAdmitsLimitInOrder(t *testing.T) {
	c := fencingtest.Single(t)
	s := newSession(t, c.Client(t))
	m := newSemaphore(t, s, "jobs/migrations", 3)
	held := []*fencing.Hold{acquire(t, m), acquire(t, m), acquire(t, m)}
	ctx := fencingtest.Context(t, wait)
	fourth := goAcquire(ctx, m)
	fencingtest.WaitFor(t, wait, "the fourth to queue", func() bool { return len(semKeys(t, c, "jobs/migrations")) == 4 })
	fifth := goAcquire(ctx, m)
	fencingtest.WaitFor(t, wait, "the fifth to queue", func() bool { return len(semKeys(t, c, "jobs/migrations")) == 5 })
	pending(t, fourth, "the fourth Acquire")
	pending(t, fifth, "the fifth Acquire")

	if err := held[1].Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	h4 := received(t, fourth, "the fourth Acquire")
	pending(t, fifth, "the fifth Acquire")
	if err := held[0].Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	h5 := received(t, fifth, "the fifth Acquire")
	for i, h := range []*fencing.Hold{held[0], held[1], held[2], h4} {
		if h5.Token().Compare(h.Token()) <= 0 {
			t.Errorf("token %v of the fifth not above %v of hold %d", h5.Token(), h.Token(), i)
		}
	}
	for _, h := range []*fencing.Hold{held[2], h4, h5} {
		if err := h.Unlock(ctx); err != nil {
			t.Fatal(err)
		}
	}
	if keys := semKeys(t, c, "jobs/migrations"); len(keys) != 0 {
		t.Fatalf("keys left: %v", keys)
	}
}

// A holder among the first N keys stays among them while later keys queue
// behind it: its key proves its permit, so guarded writes commit and its
// context lasts until it lets go.
func TestSemaphoreKeyProvesPermit(t *testing.T) {
	c := fencingtest.Single(t)
	cli := c.Client(t)
	m := newSemaphore(t, newSession(t, cli), "permits", 2)
	h1, h2 := acquire(t, m), acquire(t, m)
	ctx := fencingtest.Context(t, wait)
	var waiters []<-chan result
	for i := range 3 {
		waiters = append(waiters, goAcquire(ctx, newSemaphore(t, newSession(t, cli), "permits", 2)))
		fencingtest.WaitFor(t, wait, "a waiter to queue", func() bool { return len(semKeys(t, c, "permits")) == 3+i })
	}
	for _, h := range []*fencing.Hold{h1, h2} {
		resp, err := cli.Txn(ctx).If(h.IsOwner()).Then(clientv3.OpPut("permits-data", h.Token().String())).Commit()
		if err != nil || !resp.Succeeded {
			t.Fatalf("guarded write of %v with waiters queued: %v, applied %v", h.Token(), err, err == nil && resp.Succeeded)
		}
		if err := h.Context().Err(); err != nil {
			t.Fatalf("context of %v ended: %v", h.Token(), context.Cause(h.Context()))
		}
	}
	if err := h1.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	if resp, err := cli.Txn(ctx).If(h1.IsOwner()).Then(clientv3.OpPut("permits-data", "late")).Commit(); err != nil || resp.Succeeded {
		t.Fatalf("guarded write after Unlock: %v, applied %v", err, err == nil && resp.Succeeded)
	}
	h3 := received(t, waiters[0], "the first waiter")
	for i, w := range waiters[1:] {
		pending(t, w, fmt.Sprintf("waiter %d", i+2))
	}
	for _, h := range []*fencing.Hold{h2, h3} {
		if err := h.Unlock(ctx); err != nil {
			t.Fatal(err)
		}
	}
	for i, w := range waiters[1:] {
		if err := received(t, w, fmt.Sprintf("waiter %d", i+2)).Unlock(ctx); err != nil {
			t.Fatal(err)
		}
	}
}

// Two limits for one name: whoever queues behind a key of the other limit
// is refused with ErrLimitMismatch and leaves no key.
func TestSemaphoreLimitMismatch(t *testing.T) {
	c := fencingtest.Single(t)
	h := acquire(t, newSemaphore(t, newSession(t, c.Client(t)), "limit", 2))
	other := newSemaphore(t, newSession(t, c.Client(t)), "limit", 3)
	ctx := fencingtest.Context(t, wait)
	if _, err := other.Acquire(ctx); !errors.Is(err, fencing.ErrLimitMismatch) {
		t.Errorf("Acquire with another limit: %v; want ErrLimitMismatch", err)
	}
	if _, err := other.TryAcquire(ctx); !errors.Is(err, fencing.ErrLimitMismatch) {
		t.Errorf("TryAcquire with another limit: %v; want ErrLimitMismatch", err)
	}
	fencingtest.WaitFor(t, wait, "only the holder's key", func() bool { return len(semKeys(t, c, "limit")) == 1 })
	if err := h.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	// Once the other limit's keys are gone, the new limit is the name's.
	h2, err := other.Acquire(ctx)
	if err != nil {
		t.Fatalf("Acquire once the old keys are gone: %v", err)
	}
	if err := h2.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
}

// TryAcquire takes a free permit, refuses with ErrLocked (writing nothing)
// when all are held, and takes one again once one is released.
func TestSemaphoreTryAcquire(t *testing.T) {
	c := fencingtest.Single(t)
	var ctr etcdtest.Counter
	m := newSemaphore(t, newSession(t, c.Client(t, etcdtest.WithCounter(&ctr))), "try-sem", 2)
	ctx := fencingtest.Context(t, wait)
	h1, err := m.TryAcquire(ctx)
	if err != nil {
		t.Fatalf("TryAcquire on an empty semaphore: %v", err)
	}
	h2, err := m.TryAcquire(ctx)
	if err != nil {
		t.Fatalf("TryAcquire with a permit free: %v", err)
	}
	ctr.Reset()
	if _, err := m.TryAcquire(ctx); !errors.Is(err, fencing.ErrLocked) {
		t.Fatalf("TryAcquire with no permit free: %v; want ErrLocked", err)
	}
	if got := ctr.Requests("Txn"); got != 1 {
		t.Errorf("a refused TryAcquire sent %d txns; want 1 (%v)", got, &ctr)
	}
	if keys := semKeys(t, c, "try-sem"); len(keys) != 2 {
		t.Fatalf("keys after a refused TryAcquire: %v", keys)
	}
	if err := h1.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	h3, err := m.TryAcquire(ctx)
	if err != nil {
		t.Fatalf("TryAcquire after a release: %v", err)
	}
	for _, h := range []*fencing.Hold{h2, h3} {
		if err := h.Unlock(ctx); err != nil {
			t.Fatal(err)
		}
	}
}

// Bad input gets a sentinel, writes nothing and never panics.
func TestSemaphoreBadInput(t *testing.T) {
	c := fencingtest.Single(t)
	s := newSession(t, c.Client(t))
	var nilCtx context.Context
	ctx := fencingtest.Context(t, wait)
	m := newSemaphore(t, s, "bad", 1)
	h := acquire(t, m)
	if err := h.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	for name, call := range map[string]func() error{
		"limit 0":       func() error { _, err := fencing.NewSemaphore(s, "x", 0); return err },
		"limit -1":      func() error { _, err := fencing.NewSemaphore(s, "x", -1); return err },
		"nil session":   func() error { _, err := fencing.NewSemaphore(nil, "x", 1); return err },
		"nil ctx":       func() error { _, err := m.Acquire(nilCtx); return err },
		"nil ctx try":   func() error { _, err := m.TryAcquire(nilCtx); return err },
		"zero value":    func() error { _, err := new(fencing.Semaphore).Acquire(ctx); return err },
		"nil Semaphore": func() error { var z *fencing.Semaphore; _, err := z.TryAcquire(ctx); return err },
	} {
		if err := call(); !errors.Is(err, fencing.ErrInvalidArgument) {
			t.Errorf("%s: %v; want ErrInvalidArgument", name, err)
		}
	}
	if _, err := fencing.NewSemaphore(s, "a#b", 1); !errors.Is(err, fencing.ErrInvalidName) {
		t.Errorf("invalid name: %v; want ErrInvalidName", err)
	}
	if err := h.Unlock(ctx); !errors.Is(err, fencing.ErrNotHeld) {
		t.Errorf("second Unlock: %v; want ErrNotHeld", err)
	}
	if keys := etcdtest.Keys(t, c, ""); len(keys) != 0 {
		t.Fatalf("keys left: %v", keys)
	}
}

// S1 for permits, under faults: holders partitioned past their TTL, keys
// deleted and leases revoked by an operator, waiters cancelled. Every
// guarded write a holder made committed at a revision where its key was
// among the Limit oldest, so never more than Limit holds wrote at once,
// and no key is left.
func TestSemaphoreNeverOverLimitUnderFaults(t *testing.T) {
	etcdtest.Long(t)
	const (
		limit   = 2
		workers = 6
		name    = "faulty-sem"
	)
	c := fencingtest.Single(t)
	var log writeLog
	took := underFaults(t, c, workers, &log, func(s *fencing.Session) (picker, error) {
		m, err := fencing.NewSemaphore(s, name, limit)
		return func(*rand.Rand) (string, func(context.Context) (*fencing.Hold, error)) { return "permit", m.Acquire }, err
	})
	if took["permit"] < workers/2 {
		t.Errorf("only %d workers held a permit", took["permit"])
	}
	p, _ := inspect.KeyPrefix(fencing.DefaultRoot, fencing.KindSemaphore, name)
	log.checkHistory(t, c, p, func(alive []queued, me queued) error {
		if older := slices.Index(alive, me); older >= limit {
			return fmt.Errorf("%s@%d wrote while %d keys were older", me.key, me.rev, older)
		}
		return nil
	})
	fencingtest.WaitFor(t, wait, "no key left", func() bool { return len(semKeys(t, c, name)) == 0 })
}

// Waiters on a semaphore share the session's watch stream, as a mutex's
// do: a waiter behind another waits for its key's end or its touch (a put)
// with no goroutine of its own. Only the first waiter, which watches all the
// owners, has a clientv3 watch. Before, each later waiter had clientv3's
// watch, and with it a goroutine of clientv3's besides its caller's (116
// more goroutines for 100 waiters).
func TestSemaphoreWaitersShareTheSessionStream(t *testing.T) {
	c := fencingtest.Single(t)
	s := newSession(t, c.Client(t))
	m := newSemaphore(t, s, "shared-stream", 2)
	holds := []*fencing.Hold{acquire(t, m), acquire(t, m)}
	ctx := fencingtest.Context(t, 10*wait) // the waiters' calls: they queue one by one
	const n = 200
	before := runtime.NumGoroutine()
	waiters := make([]<-chan result, n)
	for i := range n {
		waiters[i] = goAcquire(ctx, m)
		fencingtest.WaitFor(t, wait, "the waiter to queue", func() bool { return len(semKeys(t, c, "shared-stream")) == 3+i })
	}
	extra := 0
	fencingtest.WaitFor(t, wait, "no goroutine per waiter besides its caller's", func() bool {
		// The rest is the embedded etcd's serving of the two streams.
		extra = runtime.NumGoroutine() - before - n
		return extra <= n/5
	})
	t.Logf("%d goroutines besides the %d waiters' own", extra, n)
	for i := range n {
		if err := holds[0].Unlock(ctx); err != nil {
			t.Fatal(err)
		}
		holds = append(holds[1:], received(t, waiters[i], fmt.Sprint("waiter ", i)))
	}
	for _, h := range holds {
		if err := h.Unlock(ctx); err != nil {
			t.Fatal(err)
		}
	}
}
