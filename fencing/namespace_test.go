package fencing_test

import (
	"context"
	"errors"
	"testing"

	"github.com/leasehold/leasehold/fencing"
	"github.com/leasehold/leasehold/fencing/fencingtest"
	"go.etcd.io/etcd/client/v3/namespace"
)

// A client wrapped by clientv3/namespace still gets watched holds: the
// session's watches go through the wrapped Watcher (the session's one
// stream would watch the unwrapped keys), and a deletion of the key, under
// the namespace, ends the hold's context.
func TestNamespacedClientWatchesItsKeys(t *testing.T) {
	c := fencingtest.Single(t)
	cli := c.Client(t)
	cli.KV = namespace.NewKV(cli.KV, "tenant/")
	cli.Watcher = namespace.NewWatcher(cli.Watcher, "tenant/")
	cli.Lease = namespace.NewLease(cli.Lease, "tenant/")
	h := fencingtest.Lock(t, fencingtest.Session(t, cli), "ns")
	ctx := h.Context()
	if ctx.Err() != nil {
		t.Fatalf("a new hold's context ended: %v", context.Cause(ctx))
	}
	if n := c.Delete(t, "tenant/"+h.Key()); n != 1 {
		t.Fatalf("deleted %d keys at tenant/%s, want 1", n, h.Key())
	}
	if cause := fencingtest.Ended(t, ctx, wait, "the hold's key deleted"); !errors.Is(cause, fencing.ErrKeyDeleted) {
		t.Errorf("cause %v, want ErrKeyDeleted", cause)
	}
}
