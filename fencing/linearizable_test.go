package fencing_test

import (
	"context"
	"sync"
	"testing"

	"github.com/leasehold/leasehold/fencing"
	"github.com/leasehold/leasehold/fencing/fencingtest"
	"github.com/leasehold/leasehold/guard"
	"github.com/leasehold/leasehold/internal/testbed/etcdtest"
	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	clientv3 "go.etcd.io/etcd/client/v3"
	etcdtxn "go.etcd.io/etcd/server/v3/etcdserver/txn"
)

// Every ownership check the library sends goes through the etcd leader. etcd
// answers a txn of nothing but serializable reads (or of compares alone)
// from the member that gets it, without asking the leader, so a member that
// lags (re-added empty, cut off) would vouch for a key already deleted. This
// records every txn with a compare that a lock handoff, a semaphore and a
// read-write lock wait, and guarded txns with no ops or serializable reads
// send, and fails on any that etcd would serve locally.
func TestNoCheckServedByOneMember(t *testing.T) {
	c := fencingtest.Single(t)
	var mu sync.Mutex
	var local []*pb.TxnRequest
	r := &etcdtest.Replies{Decide: func(_ string, req any) etcdtest.Fault {
		if txn, ok := req.(*pb.TxnRequest); ok && len(txn.Compare) > 0 && etcdtxn.IsTxnSerializable(txn) {
			mu.Lock()
			local = append(local, txn)
			mu.Unlock()
		}
		return etcdtest.Pass
	}}
	cli := c.Client(t, r.Option())
	ctx := fencingtest.Context(t, wait)
	a, b := fencingtest.Session(t, cli), fencingtest.Session(t, cli)

	// A lock handed from a to b: b's wait ends with the quick check.
	h := fencingtest.Lock(t, a, "handoff")
	got := make(chan *fencing.Hold, 1)
	fencingtest.Go(t, func(ctx context.Context) error {
		h, err := etcdtest.Mutex(t, b, "handoff").Lock(ctx)
		got <- h
		return err
	})
	fencingtest.WaitFor(t, wait, "b to queue", func() bool { return len(c.Queue(t, fencing.KindLock, "handoff").Entries) == 2 })
	if err := h.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	hb := fencingtest.Receive(t, got, "b's hold")

	// Guarded txns that read nothing, or read serializably.
	if _, err := guard.Txn(ctx, hb).Commit(); err != nil {
		t.Fatal(err)
	}
	resp, err := guard.Txn(ctx, hb).Then(clientv3.OpGet("data/x", clientv3.WithSerializable())).Commit()
	if err != nil {
		t.Fatal(err)
	}
	if len(resp.Responses) != 1 {
		t.Fatalf("a guarded txn of one get answered %d responses", len(resp.Responses))
	}
	if err := hb.Unlock(ctx); err != nil {
		t.Fatal(err)
	}

	// A semaphore and a read-write lock wait whose turn comes.
	for _, shape := range waitShapes {
		wt := shape.startOn(t, c, cli, ctx)
		wt.release(t)
		if err := wt.result(t); err != nil {
			t.Fatalf("%s: %v", shape.name, err)
		}
	}

	mu.Lock()
	defer mu.Unlock()
	for _, txn := range local {
		t.Errorf("a check etcd serves from one member, without its leader: %v", txn)
	}
}
