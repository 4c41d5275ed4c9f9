package leasehold_test

import (
	"context"
	"fmt"
	"testing"

	"github.com/leasehold/leasehold/fencing"
	"github.com/leasehold/leasehold/fencing/fencingtest"
	"github.com/leasehold/leasehold/internal/testbed/etcdtest"
	clientv3 "go.etcd.io/etcd/client/v3"
)

func TestMain(m *testing.M) { fencingtest.Main(m) }

// This example takes a lock and makes a write into etcd that commits only
// while the lock is held: a write by a holder that lost the lock (paused,
// partitioned) fails instead of overwriting its successor's work.
func Example() {
	ctx := context.Background()
	cli := etcdtest.Shared().Admin // a client of an embedded etcd

	s, err := fencing.NewSession(ctx, cli)
	if err != nil {
		fmt.Println(err)
		return
	}
	defer s.Close(ctx)
	m, _ := fencing.NewMutex(s, "jobs/billing")
	h, err := m.Lock(ctx)
	if err != nil {
		fmt.Println(err)
		return
	}
	resp, err := cli.Txn(ctx).If(h.IsOwner()).Then(clientv3.OpPut("billing/last-run", "today")).Commit()
	fmt.Println(resp.Succeeded, err)

	h.Unlock(ctx)
	resp, err = cli.Txn(ctx).If(h.IsOwner()).Then(clientv3.OpPut("billing/last-run", "stale")).Commit()
	fmt.Println(resp.Succeeded, err)
	// Output:
	// true <nil>
	// false <nil>
}
