package etcdtest

import (
	"context"
	"fmt"
	"path"
	"slices"
	"strings"
	"sync"

	"github.com/leasehold/leasehold/fencing/fencingtest"
	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/stats"
)

// Counter counts the gRPC requests a client sends, by method. It sits below
// clientv3's retry interceptors, so a retried call counts once per attempt:
// what the server sees. Attach it with WithCounter. The zero value is ready.
type Counter struct {
	mu       sync.Mutex
	requests map[string]int // messages sent, by short method name ("Txn")
	streams  map[string]int // streams opened, by short method name ("Watch")
}

type methodKey struct{}

// Requests returns how many messages were sent for method, given by its
// short name ("Txn", "Range", "LeaseKeepAlive"); "" counts every method. A
// unary call is one request; each message on a stream is one more.
func (c *Counter) Requests(method string) int { return c.sum(c.requests, method) }

// Streams returns how many streams were opened for method ("" for all).
func (c *Counter) Streams(method string) int { return c.sum(c.streams, method) }

// Reset forgets every count.
func (c *Counter) Reset() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.requests, c.streams = nil, nil
}

// String lists the request counts by method, for failure messages.
func (c *Counter) String() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	var parts []string
	for m, n := range c.requests {
		parts = append(parts, fmt.Sprintf("%s=%d", m, n))
	}
	slices.Sort(parts)
	return "{" + strings.Join(parts, " ") + "}"
}

func (c *Counter) sum(m map[string]int, method string) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	if method != "" {
		return m[method]
	}
	n := 0
	for _, v := range m {
		n += v
	}
	return n
}

func (c *Counter) add(m *map[string]int, method string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if *m == nil {
		*m = make(map[string]int)
	}
	(*m)[method]++
}

// TagRPC implements stats.Handler.
func (c *Counter) TagRPC(ctx context.Context, info *stats.RPCTagInfo) context.Context {
	return context.WithValue(ctx, methodKey{}, path.Base(info.FullMethodName))
}

// HandleRPC implements stats.Handler.
func (c *Counter) HandleRPC(ctx context.Context, s stats.RPCStats) {
	if !s.IsClient() {
		return
	}
	method, _ := ctx.Value(methodKey{}).(string)
	switch s := s.(type) {
	case *stats.Begin:
		if s.IsClientStream || s.IsServerStream {
			c.add(&c.streams, method)
		}
	case *stats.OutPayload:
		c.add(&c.requests, method)
	}
}

// TagConn implements stats.Handler.
func (c *Counter) TagConn(ctx context.Context, _ *stats.ConnTagInfo) context.Context { return ctx }

// HandleConn implements stats.Handler.
func (c *Counter) HandleConn(context.Context, stats.ConnStats) {}

// WithCounter makes the client count its requests in ctr.
func WithCounter(ctr *Counter) fencingtest.ClientOption {
	return func(cfg *clientv3.Config) {
		cfg.DialOptions = append(cfg.DialOptions, grpc.WithStatsHandler(ctr))
	}
}

// Unary puts f in a client's unary calls, after clientv3's own retries: a
// test sees, holds or alters each request and its reply.
func Unary(f grpc.UnaryClientInterceptor) fencingtest.ClientOption {
	return func(cfg *clientv3.Config) {
		cfg.DialOptions = append(cfg.DialOptions, grpc.WithChainUnaryInterceptor(f))
	}
}
