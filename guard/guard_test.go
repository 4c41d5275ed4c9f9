package guard_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/leasehold/leasehold/fencing"
	"github.com/leasehold/leasehold/fencing/fencingtest"
	"github.com/leasehold/leasehold/guard"
	"github.com/leasehold/leasehold/internal/testbed/etcdtest"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// S2, S4: an operator deletes the key: the watched context ends with
// fencing.ErrKeyDeleted and the next guarded txn fails with ErrNotOwner.
func TestKeyDeletedCancelsAndFencesWrites(t *testing.T) {
	c := fencingtest.Single(t)
	h := lock(t, newSession(t, c.Client(t)), "deleted")
	ctx := watch(t, h)
	if _, err := guard.Put(fencingtest.Context(t, wait), h, "data", "1"); err != nil {
		t.Fatalf("guarded Put while owner: %v", err)
	}
	c.Delete(t, h.Key())
	if cause := fencingtest.Ended(t, ctx, wait, "the watched context"); !errors.Is(cause, fencing.ErrKeyDeleted) || errors.Is(cause, fencing.ErrLeaseExpired) {
		t.Fatalf("cause = %v; want fencing.ErrKeyDeleted alone", cause)
	}
	if _, err := guard.Put(fencingtest.Context(t, wait), h, "data", "2"); !errors.Is(err, guard.ErrNotOwner) {
		t.Fatalf("guarded Put after delete: %v; want ErrNotOwner", err)
	}
	if got := get(t, c, "data"); got != "1" {
		t.Fatalf("data = %q; want 1", got)
	}
}

// S4: the lease is revoked: the cause says so.
func TestLeaseRevokedCancelsWithItsCause(t *testing.T) {
	c := fencingtest.Single(t)
	s := newSession(t, c.Client(t))
	h := lock(t, s, "revoked")
	ctx := watch(t, h)
	c.Revoke(t, s.Lease())
	if cause := fencingtest.Ended(t, ctx, wait, "the watched context"); !errors.Is(cause, fencing.ErrLeaseExpired) {
		t.Fatalf("cause = %v; want ErrLeaseExpired", cause)
	}
	if _, err := guard.Txn(fencingtest.Context(t, wait), h).Then(clientv3.OpPut("data", "x")).Commit(); !errors.Is(err, guard.ErrNotOwner) {
		t.Fatalf("guarded txn after revoke: %v; want ErrNotOwner", err)
	}
}

func TestSessionCloseCancels(t *testing.T) {
	c := fencingtest.Single(t)
	s := newSession(t, c.Client(t))
	ctx := watch(t, lock(t, s, "closed"))
	s.Close(fencingtest.Context(t, wait))
	if cause := fencingtest.Ended(t, ctx, wait, "the watched context"); !errors.Is(cause, fencing.ErrSessionClosed) {
		t.Fatalf("cause = %v; want ErrSessionClosed", cause)
	}
}

func TestParentCauseWins(t *testing.T) {
	c := fencingtest.Single(t)
	h := lock(t, newSession(t, c.Client(t)), "parent")
	parent, stop := context.WithCancelCause(t.Context())
	ctx, cancel := guard.Watch(parent, h)
	defer cancel()
	mine := errors.New("shutting down")
	stop(mine)
	c.Delete(t, h.Key())
	if cause := fencingtest.Ended(t, ctx, wait, "the watched context"); cause != mine {
		t.Fatalf("cause = %v; want the parent's", cause)
	}
}

// A watch of an ownership already lost returns a context already done.
func TestWatchOfLostOwnerIsDone(t *testing.T) {
	c := fencingtest.Single(t)
	h := lock(t, newSession(t, c.Client(t)), "lost")
	c.Delete(t, h.Key())
	ctx := watch(t, h)
	if ctx.Err() == nil {
		t.Fatal("Watch of a deleted key returned a live context")
	}
	if cause := context.Cause(ctx); !errors.Is(cause, fencing.ErrKeyDeleted) {
		t.Fatalf("cause = %v; want fencing.ErrKeyDeleted", cause)
	}
}

// A guarded txn that finds ownership gone cancels the owner's watches at
// once, before the watch event could.
func TestFailedGuardedTxnCancelsWatches(t *testing.T) {
	c := fencingtest.Single(t)
	h := lock(t, newSession(t, c.Client(t)), "txn-proves-loss")
	ctx := watch(t, h)
	c.Delete(t, h.Key())
	if _, err := guard.Delete(fencingtest.Context(t, wait), h, "data"); !errors.Is(err, guard.ErrNotOwner) {
		t.Fatalf("guarded Delete: %v; want ErrNotOwner", err)
	}
	if ctx.Err() == nil {
		t.Fatal("watched context alive after a guarded txn proved the loss")
	}
}

// S2: the caller's own compares are told apart from ownership.
func TestUserCompareFalseTakesElse(t *testing.T) {
	c := fencingtest.Single(t)
	h := lock(t, newSession(t, c.Client(t)), "compare")
	ctx := fencingtest.Context(t, wait)
	resp, err := guard.Txn(ctx, h).
		If(clientv3.Compare(clientv3.Value("flag"), "=", "set")).
		Then(clientv3.OpPut("branch", "then")).
		Else(clientv3.OpPut("branch", "else"), clientv3.OpGet("flag")).
		Commit()
	if err != nil {
		t.Fatalf("Commit: %v", err)
	}
	if resp.Succeeded || len(resp.Responses) != 2 || resp.Responses[0].GetResponsePut() == nil {
		t.Fatalf("response = %+v; want the Else branch's two results", resp)
	}
	if got := get(t, c, "branch"); got != "else" {
		t.Fatalf("branch = %q; want else", got)
	}
	if _, err := c.Admin.Put(ctx, "flag", "set"); err != nil {
		t.Fatal(err)
	}
	resp, err = guard.Txn(ctx, h).If(clientv3.Compare(clientv3.Value("flag"), "=", "set")).
		Then(clientv3.OpPut("branch", "then")).Commit()
	if err != nil || !resp.Succeeded {
		t.Fatalf("Commit = %+v, %v; want Succeeded", resp, err)
	}
	if got := get(t, c, "branch"); got != "then" {
		t.Fatalf("branch = %q; want then", got)
	}
}

// If, Then and Else out of order: clientv3's txn panics; a guarded txn
// returns ErrInvalidArgument and sends nothing.
func TestTxnOutOfOrderIsRefused(t *testing.T) {
	c := fencingtest.Single(t)
	h := lock(t, newSession(t, c.Client(t)), "order")
	ctx := fencingtest.Context(t, wait)
	cmp := clientv3.Compare(clientv3.Value("flag"), "=", "set")
	put := clientv3.OpPut("order-key", "written")
	for name, txn := range map[string]*guard.Tx{
		"If after Then":   guard.Txn(ctx, h).Then(put).If(cmp),
		"Then twice":      guard.Txn(ctx, h).Then(put).Then(put),
		"If twice":        guard.Txn(ctx, h).If(cmp).If(cmp).Then(put),
		"Then after Else": guard.Txn(ctx, h).If(cmp).Else(put).Then(put),
	} {
		if _, err := txn.Commit(); !errors.Is(err, fencing.ErrInvalidArgument) {
			t.Errorf("%s: Commit = %v; want ErrInvalidArgument", name, err)
		}
	}
	if etcdtest.Exists(t, c, "order-key") {
		t.Fatal("a txn built out of order wrote its op")
	}
}

func TestHoldContextEndsOnUnlock(t *testing.T) {
	c := fencingtest.Single(t)
	h := lock(t, newSession(t, c.Client(t)), "hold-context")
	ctx := h.Context()
	if ctx != h.Context() {
		t.Fatal("Context() made a second watch")
	}
	if err := h.Unlock(fencingtest.Context(t, wait)); err != nil {
		t.Fatal(err)
	}
	if cause := fencingtest.Ended(t, ctx, wait, "the watched context"); !errors.Is(cause, fencing.ErrNotHeld) {
		t.Fatalf("cause = %v; want ErrNotHeld", cause)
	}
	if cause := context.Cause(h.Context()); !errors.Is(cause, fencing.ErrNotHeld) {
		t.Fatalf("Context() after Unlock: cause %v; want ErrNotHeld", cause)
	}
}

// S9: compaction and a reconnect while holding do not end a valid hold, and
// the re-armed watch still sees a later deletion.
func TestCompactionAndReconnectKeepValidHold(t *testing.T) {
	etcdtest.Long(t)
	c := fencingtest.Three(t)
	var ctr etcdtest.Counter
	cli := fencingtest.NewClient(t, []string{c.Members[0].ClientURL.String()}, etcdtest.WithCounter(&ctr))
	h := lock(t, newSession(t, cli, fencing.WithTTL(30*time.Second)), "compact")
	ctx := watch(t, h)
	watches := ctr.Requests("Watch")
	etcdtest.CompactWhileDown(t, c, 0, func() {})
	// Re-armed: its create sent again, on a new stream.
	fencingtest.WaitFor(t, wait, "the watch to be re-armed", func() bool {
		return ctr.Requests("Watch") > watches && ctr.Streams("Watch") > 1
	})
	if err := context.Cause(ctx); err != nil {
		t.Fatalf("valid hold's context ended: %v", err)
	}
	c.Delete(t, h.Key())
	if cause := fencingtest.Ended(t, ctx, wait, "the watched context"); !errors.Is(cause, fencing.ErrKeyDeleted) {
		t.Fatalf("cause = %v; want fencing.ErrKeyDeleted", cause)
	}
}

// Many watched holds share one session's keepalive and one watch stream.
func TestManyWatchedHoldsShareOneKeepaliveAndStream(t *testing.T) {
	const holds = 1000
	c := fencingtest.Single(t)
	var ctr etcdtest.Counter
	s := newSession(t, c.Client(t, etcdtest.WithCounter(&ctr)), fencing.WithTTL(3*time.Second))
	ctxs := make([]context.Context, holds)
	for i := range holds {
		m, _ := fencing.NewMutex(s, fmt.Sprintf("many/%d", i))
		h, err := m.TryLock(fencingtest.Context(t, wait))
		if err != nil {
			t.Fatal(err)
		}
		ctxs[i] = watch(t, h)
	}
	// Two renewals later, still one renewal per period, not one per hold.
	kas := ctr.Requests("LeaseKeepAlive")
	for range 2 {
		until := s.ValidUntil()
		fencingtest.WaitFor(t, wait, "a renewal", func() bool { return s.ValidUntil().After(until) })
	}
	if got := ctr.Requests("LeaseKeepAlive") - kas; got > 3 {
		t.Fatalf("%d keepalive requests over two renewals with %d holds; want about 2", got, holds)
	}
	if got := ctr.Streams("Watch"); got != 1 {
		t.Fatalf("%d watch streams for %d watched holds; want 1", got, holds)
	}
	for i, ctx := range ctxs {
		if ctx.Err() != nil {
			t.Fatalf("hold %d lost: %v", i, context.Cause(ctx))
		}
	}
}

// Do reports the loss along with the error of work that stopped for it.
func TestDoJoinsLossCause(t *testing.T) {
	c := fencingtest.Single(t)
	h := lock(t, newSession(t, c.Client(t)), "do")
	err := guard.Do(fencingtest.Context(t, wait), h, func(ctx context.Context) error {
		c.Delete(t, h.Key())
		<-ctx.Done()
		return ctx.Err()
	})
	if !errors.Is(err, context.Canceled) || !errors.Is(err, fencing.ErrKeyDeleted) {
		t.Fatalf("Do = %v; want context.Canceled joined with fencing.ErrKeyDeleted", err)
	}
}

// A guarded txn that finds the key gone reports the rejection and the
// hold's loss, each once, though nothing watched the hold.
func TestTxnReportsRejectionAndLoss(t *testing.T) {
	c := fencingtest.Single(t)
	var rec etcdtest.Recorder
	s := newSession(t, c.Client(t), fencing.WithObserver(rec.Observer()))
	h := lock(t, s, "reported")
	c.Delete(t, h.Key())
	ctx := fencingtest.Context(t, wait)
	for range 2 {
		if _, err := guard.Put(ctx, h, "reported-data", "x"); !errors.Is(err, guard.ErrNotOwner) {
			t.Fatalf("Put after the key was deleted: %v; want ErrNotOwner", err)
		}
	}
	h.Unlock(ctx)
	rec.Snapshot(func(r *etcdtest.Recorder) {
		if len(r.Rejected) != 2 || len(r.Lost) != 1 || len(r.Released) != 0 {
			t.Fatalf("rejected %d, lost %d, released %d; want 2, 1, 0", len(r.Rejected), len(r.Lost), len(r.Released))
		}
		if !errors.Is(r.Lost[0].Cause, fencing.ErrKeyDeleted) || r.Lost[0].Token != h.Token() {
			t.Fatalf("loss %+v; want %v with fencing.ErrKeyDeleted", r.Lost[0], h.Token())
		}
	})
}
