package revqueue_test

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/leasehold/leasehold/fencing/fencingtest"
	"github.com/leasehold/leasehold/internal/revqueue"
	"github.com/leasehold/leasehold/internal/testbed/etcdtest"
	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/grpc"
)

// A sweeper of a range shared with many other keys reads them in pages when
// it arms, and still finds a ghost of its session past the first page: a
// range over a job queue's names may hold any number of keys.
func TestSweeperReadsSharedRangeInPages(t *testing.T) {
	c := fencingtest.Single(t)
	ctx := fencingtest.Context(t, time.Minute)
	var largest atomic.Int64 // keys in the largest Range reply
	cli := c.Client(t, etcdtest.Unary(func(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn,
		invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
		err := invoker(ctx, method, req, reply, cc, opts...)
		if r, ok := reply.(*pb.RangeResponse); ok && err == nil {
			for n := int64(len(r.Kvs)); ; {
				if old := largest.Load(); n <= old || largest.CompareAndSwap(old, n) {
					break
				}
			}
		}
		return err
	}))
	g, err := c.Admin.Grant(ctx, 60)
	if err != nil {
		t.Fatal(err)
	}
	const keys = 2*revqueue.SweepPage + 500
	stem := fmt.Sprintf("%x-", int64(g.ID))
	ops := make([]clientv3.Op, 0, 100)
	for i := range keys { // other sessions' keys, in queues q0000 … q2499
		ops = append(ops, clientv3.OpPut(fmt.Sprintf("sw/q%04d/other-1", i), ""))
		if len(ops) == cap(ops) || i == keys-1 {
			if _, err := c.Admin.Txn(ctx).Then(ops...).Commit(); err != nil {
				t.Fatal(err)
			}
			ops = ops[:0]
		}
	}
	// Ghosts of the session in the last page and the first; a key with its
	// stem in use, and one on another lease, are not.
	ghosts := []string{"sw/q2400/" + stem + "3", "sw/q0001/" + stem + "1"}
	kept := []string{"sw/q2450/" + stem + "1", "sw/q2460/" + stem + "2"}
	for _, k := range append(slices.Clone(ghosts), kept[0]) {
		if _, err := c.Admin.Put(ctx, k, "", clientv3.WithLease(g.ID)); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := c.Admin.Put(ctx, kept[1], ""); err != nil {
		t.Fatal(err)
	}
	s := &revqueue.Session{Client: cli, Lease: g.ID, KeyStem: stem, TTL: 30 * time.Second, Keys: &revqueue.KeyPool{}}
	s.Keys.Get("sw/q2450/") // slot 1 in use there
	var wg sync.WaitGroup
	life, end := context.WithCancel(ctx)
	s.Life, s.Go = life, func(f func()) bool { wg.Go(f); return true }
	armed := make(chan struct{})
	stop := revqueue.Sweep(s, "sw/", func() { close(armed) })
	defer func() { stop(); end(); wg.Wait() }()
	select {
	case <-armed:
	case <-ctx.Done():
		t.Fatal("the sweeper did not arm")
	}
	fencingtest.WaitFor(t, fencingtest.Wait, "the ghosts to go", func() bool {
		return !etcdtest.Exists(t, c, ghosts[0]) && !etcdtest.Exists(t, c, ghosts[1])
	})
	for _, k := range kept {
		if !etcdtest.Exists(t, c, k) {
			t.Errorf("%s was deleted", k)
		}
	}
	if n := largest.Load(); n > revqueue.SweepPage {
		t.Errorf("a read returned %d keys; want pages of at most %d", n, revqueue.SweepPage)
	}
}
