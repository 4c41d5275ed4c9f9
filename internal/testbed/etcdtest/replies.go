package etcdtest

import (
	"context"
	"sync"

	"github.com/leasehold/leasehold/fencing/fencingtest"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/grpc"
)

// Fault is what Replies does to one request the client sends.
type Fault int

const (
	// Pass sends the request and returns its reply.
	Pass Fault = iota
	// LoseReply sends the request, lets etcd apply it, and reports
	// "etcdserver: request timed out" instead of its reply, as a leader
	// failing mid-request does: the client cannot tell whether it applied.
	LoseReply
	// Refuse does not send the request and reports "etcdserver: no leader",
	// a definite failure: nothing was applied.
	Refuse
	// Late reports "etcdserver: request timed out" at once and sends the
	// request only when Replies.Release is called: a request applied long
	// after its caller gave up on it.
	Late
	// Hang does not send the request and never answers: the call returns
	// when its ctx ends, as one dropped by a leader handing over does.
	Hang
)

// Replies injects faults into a client's requests, real requests to a real
// etcd: only what the client is told changes. Decide picks the fault of
// each unary request (method and its *etcdserverpb request); nil passes all.
// Put it in a client with c.Client(t, r.Option()) or ProxiedClient.
//
// What the code under test should see: a lock or campaign whose enqueue's
// reply is lost keeps its place (the library finds the key it wrote) and
// leaves no key behind when it fails; a guarded write whose reply is lost
// returns guard.ErrOutcomeUnknown, and one refused returns an error after
// which nothing was applied; your own code must re-read before it retries.
type Replies struct {
	Decide func(method string, req any) Fault

	mu      sync.Mutex
	late    []func()
	pending sync.WaitGroup
}

// Option returns the ClientOption that puts r in the client's calls. It runs
// inside clientv3's own retry interceptor: clientv3 may retry a refused or
// unanswered read itself; it does not retry writes (txns, puts, deletes).
func (r *Replies) Option() fencingtest.ClientOption {
	return func(cfg *clientv3.Config) {
		cfg.DialOptions = append(cfg.DialOptions, grpc.WithChainUnaryInterceptor(r.intercept))
	}
}

// Release sends the requests held by Late, and waits until etcd answered
// them.
func (r *Replies) Release() {
	r.mu.Lock()
	late := r.late
	r.late = nil
	r.mu.Unlock()
	for _, send := range late {
		send()
	}
	r.pending.Wait()
}

func (r *Replies) intercept(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn,
	invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
	f := Pass
	if r.Decide != nil {
		f = r.Decide(method, req)
	}
	switch f {
	case LoseReply:
		if err := invoker(ctx, method, req, reply, cc, opts...); err != nil {
			return err
		}
		return rpctypes.ErrGRPCTimeout
	case Refuse:
		return rpctypes.ErrGRPCNoLeader
	case Hang:
		<-ctx.Done()
		return ctx.Err()
	case Late:
		r.pending.Add(1)
		r.mu.Lock()
		r.late = append(r.late, func() {
			defer r.pending.Done()
			_ = invoker(context.Background(), method, req, reply, cc, opts...)
		})
		r.mu.Unlock()
		return rpctypes.ErrGRPCTimeout
	}
	return invoker(ctx, method, req, reply, cc, opts...)
}
