package etcdtest_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/leasehold/leasehold/fencing/fencingtest"
	"github.com/leasehold/leasehold/internal/testbed/etcdtest"
	clientv3 "go.etcd.io/etcd/client/v3"
)

func TestMain(m *testing.M) { fencingtest.Main(m) }

func TestCounterCountsRequests(t *testing.T) {
	c := fencingtest.Single(t)
	var ctr etcdtest.Counter
	cli := c.Client(t, etcdtest.WithCounter(&ctr))
	ctx := fencingtest.Context(t, 10*time.Second)
	ctr.Reset()
	if _, err := cli.Put(ctx, "k", "v"); err != nil {
		t.Fatal(err)
	}
	if _, err := cli.Txn(ctx).Then(clientv3.OpGet("k")).Commit(); err != nil {
		t.Fatal(err)
	}
	if got := ctr.Requests("Put"); got != 1 {
		t.Errorf("Put requests = %d; want 1 (%v)", got, &ctr)
	}
	if got := ctr.Requests(""); got != 2 {
		t.Errorf("all requests = %d; want 2 (%v)", got, &ctr)
	}
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	cli.Watch(wctx, "k")
	fencingtest.WaitFor(t, 5*time.Second, "a watch stream", func() bool { return ctr.Streams("Watch") == 1 })
	if !strings.Contains(ctr.String(), "Put=1") {
		t.Errorf("String() = %s; want Put=1 in it", &ctr)
	}
}
