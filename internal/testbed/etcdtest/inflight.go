package etcdtest

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"

	"github.com/leasehold/leasehold/fencing"
	"github.com/leasehold/leasehold/fencing/fencingtest"
	"github.com/leasehold/leasehold/internal/testbed/stacks"
	"google.golang.org/grpc"
)

// InFlight holds a client's unary requests (etcd's slow answers, as the
// client sees them) once Hold is called, until Release, and records how
// many were out at once. Attach it with Option; make it with NewInFlight.
type InFlight struct {
	holding atomic.Bool
	open    chan struct{} // closed by Release
	now     atomic.Int64
	most    atomic.Int64
}

// NewInFlight returns an InFlight that lets every request through until
// Hold.
func NewInFlight() *InFlight { return &InFlight{open: make(chan struct{})} }

// Option attaches f to a client.
func (f *InFlight) Option() fencingtest.ClientOption {
	return Unary(func(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
		n := f.now.Add(1)
		defer f.now.Add(-1)
		for m := f.most.Load(); n > m && !f.most.CompareAndSwap(m, n); m = f.most.Load() {
		}
		if f.holding.Load() {
			select {
			case <-f.open:
			case <-ctx.Done():
				return ctx.Err()
			}
		}
		return invoker(ctx, method, req, reply, cc, opts...)
	})
}

// Hold makes every request from now on wait for Release.
func (f *InFlight) Hold() { f.holding.Store(true) }

// Release lets the held requests go, and every later one; call it once.
func (f *InFlight) Release() { close(f.open) }

// Now returns how many requests are out (held ones included).
func (f *InFlight) Now() int64 { return f.now.Load() }

// Most returns the most requests that were out at once.
func (f *InFlight) Most() int64 { return f.most.Load() }

// Waiting returns how many requests of the process's sessions wait for a
// place in flight (fencing.WithMaxInFlight), read from the goroutines'
// stacks: the library counts none. Only a session at its limit has any, and
// the tests that ask keep one.
func Waiting() int { return stacks.Blocked(placesEnter) }

const placesEnter = "github.com/leasehold/leasehold/internal/admit.(*Places).Enter"

// LimitedSession returns a session on c that lets at most limit requests
// out at once, on a client of its own (with opts) that f watches.
func LimitedSession(t testing.TB, c *fencingtest.Cluster, limit int, opts ...fencingtest.ClientOption) (*fencing.Session, *InFlight) {
	f := NewInFlight()
	cli := c.Client(t, append([]fencingtest.ClientOption{f.Option()}, opts...)...)
	return fencingtest.Session(t, cli, fencing.WithMaxInFlight(limit)), f
}

// AwaitQueued waits until out of s's requests are out and waiting wait for
// a place.
func (f *InFlight) AwaitQueued(t testing.TB, s *fencing.Session, out, waiting int) {
	t.Helper()
	fencingtest.WaitFor(t, fencingtest.Wait, fmt.Sprintf("%d requests out and %d waiting for a place", out, waiting), func() bool {
		return f.Now() == int64(out) && Waiting() == waiting
	})
}

// Burst holds etcd's answers, runs call(0) … call(n-1) at once on s (a
// LimitedSession of limit), waits until limit of their requests are out
// and the rest wait for a place, then lets the answers go, and returns
// once every call has; it fails t if a call fails or more than limit
// requests were out at once.
func (f *InFlight) Burst(t testing.TB, s *fencing.Session, limit, n int, call func(i int) error) {
	t.Helper()
	f.Hold()
	errs := make(chan error, n)
	for i := range n {
		go func() { errs <- call(i) }()
	}
	f.AwaitQueued(t, s, limit, n-limit)
	f.Release()
	for range n {
		if err := <-errs; err != nil {
			t.Fatalf("a call of the burst: %v", err)
		}
	}
	if got := f.Most(); got > int64(limit) {
		t.Errorf("%d requests were out at once; want at most %d", got, limit)
	}
}
