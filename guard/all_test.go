package guard_test

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/leasehold/leasehold/fencing"
	"github.com/leasehold/leasehold/fencing/fencingtest"
	"github.com/leasehold/leasehold/guard"
	"github.com/leasehold/leasehold/internal/testbed/etcdtest"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// A txn guarded by several owners, on two sessions of one client, commits
// in one request while each owns its key; with compares of the caller's,
// Succeeded tells whether those held, as with Txn.
func TestTxnAllCommitsWhileEveryOwnerOwns(t *testing.T) {
	c := fencingtest.Single(t)
	var ctr etcdtest.Counter
	cli := c.Client(t, etcdtest.WithCounter(&ctr))
	a, b := lock(t, newSession(t, cli), "all/a"), lock(t, newSession(t, cli), "all/b")
	ctx := fencingtest.Context(t, wait)
	ctr.Reset()
	if _, err := guard.TxnAll(ctx, a, b).Then(clientv3.OpPut("all/data", "1")).Commit(); err != nil {
		t.Fatalf("TxnAll while both own: %v", err)
	}
	if n := ctr.Requests("Txn"); n != 1 {
		t.Fatalf("TxnAll sent %d txns; want 1 (%v)", n, &ctr)
	}
	resp, err := guard.TxnAll(ctx, a, b).If(clientv3.Compare(clientv3.Value("all/data"), "=", "2")).
		Then(clientv3.OpPut("all/data", "3")).Else(clientv3.OpPut("all/data", "else")).Commit()
	if err != nil || resp.Succeeded {
		t.Fatalf("TxnAll with a false compare of the caller's: %v, %v; want Succeeded false", resp, err)
	}
	if got := get(t, c, "all/data"); got != "else" {
		t.Fatalf("data = %q; want else", got)
	}
	resp, err = guard.TxnAll(ctx, a, b).Then(clientv3.OpGet("all/data")).Commit()
	if err != nil || len(resp.Responses) != 1 || string(resp.Responses[0].GetResponseRange().Kvs[0].Value) != "else" {
		t.Fatalf("TxnAll of one read: %v, %v; want the caller's read alone", resp, err)
	}
}

// S2, S4: one of three owners' keys is deleted by a second client: TxnAll
// applies nothing, its ErrNotOwner names that owner alone, whose watched
// context ends with fencing.ErrKeyDeleted and whose session reports the
// refusal; the other owners' contexts go on.
func TestTxnAllRefusedNamesTheLostOwner(t *testing.T) {
	c := fencingtest.Single(t)
	var rec etcdtest.Recorder
	s := newSession(t, c.Client(t), fencing.WithObserver(rec.Observer()))
	holds := []*fencing.Hold{lock(t, s, "lost/a"), lock(t, s, "lost/b"), lock(t, s, "lost/c")}
	watched := make([]context.Context, len(holds))
	owners := make([]guard.Owner, len(holds))
	for i, h := range holds {
		watched[i], owners[i] = watch(t, h), h
	}
	c.Delete(t, holds[1].Key())
	_, err := guard.TxnAll(fencingtest.Context(t, wait), owners...).Then(clientv3.OpPut("lost/data", "x")).Commit()
	if !errors.Is(err, guard.ErrNotOwner) || !strings.Contains(err.Error(), ": ["+holds[1].Token().String()+"] lost") {
		t.Fatalf("TxnAll after one key's delete: %v; want ErrNotOwner naming %v alone", err, holds[1].Token())
	}
	etcdtest.NamesPackageOnce(t, "guard", err)
	if got := get(t, c, "lost/data"); got != "" {
		t.Fatalf("the refused txn wrote %q", got)
	}
	if cause := fencingtest.Ended(t, watched[1], wait, "the lost owner's context"); !errors.Is(cause, fencing.ErrKeyDeleted) {
		t.Fatalf("cause %v; want ErrKeyDeleted", cause)
	}
	for _, i := range []int{0, 2} {
		if watched[i].Err() != nil {
			t.Errorf("owner %v's context ended: %v", holds[i].Token(), context.Cause(watched[i]))
		}
	}
	rec.Snapshot(func(r *etcdtest.Recorder) {
		if len(r.Rejected) != 1 || r.Rejected[0].Token != holds[1].Token() {
			t.Errorf("rejections reported: %+v; want one, of %v", r.Rejected, holds[1].Token())
		}
	})
	if _, err := guard.TxnAll(fencingtest.Context(t, wait), owners[0], owners[2]).Then(clientv3.OpPut("lost/data", "y")).Commit(); err != nil {
		t.Fatalf("TxnAll of the owners that still own: %v", err)
	}
}

// A lease revoked under two of three owners: ErrNotOwner names both.
func TestTxnAllNamesEveryLostOwner(t *testing.T) {
	c := fencingtest.Single(t)
	cli := c.Client(t)
	s1, s2 := newSession(t, cli), newSession(t, cli)
	a, b, d := lock(t, s1, "revoked/a"), lock(t, s2, "revoked/b"), lock(t, s2, "revoked/d")
	c.Revoke(t, s2.Lease())
	_, err := guard.TxnAll(fencingtest.Context(t, wait), a, b, d).Then(clientv3.OpPut("revoked/data", "x")).Commit()
	want := ": [" + b.Token().String() + " " + d.Token().String() + "] lost"
	if !errors.Is(err, guard.ErrNotOwner) || !strings.Contains(err.Error(), want) {
		t.Fatalf("TxnAll after a revoke: %v; want ErrNotOwner ending %q", err, want)
	}
}

// TxnAll with no owner, a nil one, owners on two clients, or a nil ctx
// returns fencing.ErrInvalidArgument and sends nothing.
func TestTxnAllRejectsBadOwners(t *testing.T) {
	c := fencingtest.Single(t)
	a := lock(t, newSession(t, c.Client(t)), "bad/a")
	b := lock(t, newSession(t, c.Client(t)), "bad/b")
	var nilCtx context.Context
	ctx := fencingtest.Context(t, wait)
	for what, tx := range map[string]*guard.Tx{
		"no owner":              guard.TxnAll(ctx),
		"nil owner":             guard.TxnAll(ctx, a, nil),
		"foreign owner":         guard.TxnAll(ctx, a, foreignOwner{}),
		"owners on two clients": guard.TxnAll(ctx, a, b),
		"nil ctx":               guard.TxnAll(nilCtx, a),
		"out of order":          guard.TxnAll(ctx, a).Then().If(),
	} {
		_, err := tx.Then(clientv3.OpPut("bad/data", "x")).Commit()
		if !errors.Is(err, fencing.ErrInvalidArgument) {
			t.Errorf("%s: %v; want ErrInvalidArgument", what, err)
		}
		etcdtest.NamesPackageOnce(t, "guard", err)
	}
	if got := get(t, c, "bad/data"); got != "" {
		t.Fatalf("a refused txn wrote %q", got)
	}
}
