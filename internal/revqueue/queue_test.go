package revqueue_test

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"sync"
	"testing"
	"time"

	"github.com/leasehold/leasehold/fencing/fencingtest"
	"github.com/leasehold/leasehold/internal/ownwatch"
	"github.com/leasehold/leasehold/internal/revqueue"
	"github.com/leasehold/leasehold/internal/testbed/etcdtest"
	clientv3 "go.etcd.io/etcd/client/v3"
)

func TestMain(m *testing.M) { fencingtest.Main(m) }

// leased starts a single-member cluster and grants a lease from its admin
// client, for keys a test queues by hand.
func leased(t *testing.T) (*fencingtest.Cluster, context.Context, clientv3.LeaseID) {
	t.Helper()
	c := fencingtest.Single(t)
	ctx := fencingtest.Context(t, 30*time.Second)
	g, err := c.Admin.Grant(ctx, 30)
	if err != nil {
		t.Fatal(err)
	}
	return c, ctx, g.ID
}

// Only the direct successor of a departing key wakes, and a waiter whose
// predecessor was not the owner re-reads the queue instead of acquiring.
func TestWaitFollowsPredecessors(t *testing.T) {
	c, ctx, lease := leased(t)
	var ctr etcdtest.Counter
	q := revqueue.Queue{Client: c.Client(t, etcdtest.WithCounter(&ctr)), Prefix: "q/"}
	var entries []*revqueue.Entry
	for _, k := range []string{"q/a", "q/b", "q/c"} {
		e, err := q.Enqueue(ctx, k, "v", lease)
		if err != nil {
			t.Fatal(err)
		}
		entries = append(entries, e)
	}
	if !entries[0].Owner() || entries[1].Owner() || entries[2].Owner() {
		t.Fatalf("owners after enqueue: %v %v %v; want only the first", entries[0].Owner(), entries[1].Owner(), entries[2].Owner())
	}
	if _, owner, err := q.TryEnqueue(ctx, "q/d", "v", lease); err != nil || owner == nil || string(owner.Key) != "q/a" {
		t.Fatalf("TryEnqueue on a busy queue: owner %v, err %v; want q/a", owner, err)
	}
	done := make(chan error, 1)
	go func() { done <- q.Wait(ctx, entries[2], context.Background()) }()
	fencingtest.WaitFor(t, 10*time.Second, "the watch on b", func() bool { return ctr.Requests("Watch") >= 1 })
	// The middle waiter gives up: the last one must re-read and watch the
	// first key, not acquire while it still owns.
	c.Delete(t, "q/b")
	// Requests so far: 4 enqueues and the re-read; watches on b, then a.
	fencingtest.WaitFor(t, 10*time.Second, "the watch on a", func() bool {
		return ctr.Requests("Txn") >= 5 && ctr.Requests("Watch") >= 2
	})
	select {
	case err := <-done:
		t.Fatalf("Wait returned %v while the first key still owned", err)
	default:
	}
	c.Delete(t, "q/a")
	if err := <-done; err != nil || !entries[2].Owner() {
		t.Fatalf("Wait = %v, owner %v; want ownership", err, entries[2].Owner())
	}
}

func TestWaitReportsDeletedOwnKey(t *testing.T) {
	c, ctx, lease := leased(t)
	q := revqueue.Queue{Client: c.Admin, Prefix: "q/"}
	if _, err := q.Enqueue(ctx, "q/a", "v", lease); err != nil {
		t.Fatal(err)
	}
	e, err := q.Enqueue(ctx, "q/b", "v", lease)
	if err != nil {
		t.Fatal(err)
	}
	c.Delete(t, "q/b")
	c.Delete(t, "q/a")
	if err := q.Wait(ctx, e, context.Background()); !errors.Is(err, ownwatch.ErrKeyDeleted) {
		t.Fatalf("Wait with own key deleted = %v; want ErrKeyDeleted", err)
	}
	cctx, cancel := context.WithCancel(ctx)
	cancel()
	if err := q.Wait(cctx, &revqueue.Entry{}, context.Background()); err != nil {
		t.Fatalf("Wait of an owner = %v; want nil at once", err)
	}
}

// An entry keeps nothing of the txn that made it when its queue has no Also
// reads: not even an empty slice of the results, which would keep the whole
// reply alive as long as the entry (a Term, a waiter): about 0.7 KiB per led
// RunGroup name.
func TestEntryKeepsNoReply(t *testing.T) {
	c, ctx, lease := leased(t)
	q := revqueue.Queue{Client: c.Admin, Prefix: "q/"}
	for _, key := range []string{"q/a", "q/b"} { // the owner, then a waiter
		e, err := q.Enqueue(ctx, key, "v", lease)
		if err != nil {
			t.Fatal(err)
		}
		if e.Also != nil {
			t.Errorf("%s: Also = %v (cap %d); want nil", key, e.Also, cap(e.Also))
		}
	}
}

// The Queue's Also reads come back from the txn that finds an entry owns,
// whichever found it: the enqueue into an empty queue, the wait's read after
// the owner went, the enqueue repeated after a lost reply. Each shows the
// value as of that win, with no request of its own.
func TestAlsoReadWithTheWin(t *testing.T) {
	c, ctx, lease := leased(t)
	put := func(v string) int64 {
		resp, err := c.Admin.Put(ctx, "x", v)
		if err != nil {
			t.Fatal(err)
		}
		return resp.Header.Revision
	}
	q := revqueue.Queue{Client: c.Admin, Prefix: "q/", Extra: &revqueue.Extra{Also: []clientv3.Op{clientv3.OpGet("x")}}}
	seen := func(what string, e *revqueue.Entry, want string, rev int64) {
		t.Helper()
		// A copy: a slice of the txn's results would keep its whole reply
		// (seen by cap on the enqueue's and rejoin's paths; the short
		// read's two results fill their array exactly).
		if len(e.Also) != 1 || cap(e.Also) != 1 || e.Also[0].GetResponseRange() == nil || e.AlsoRev < rev || e.Seen() < e.AlsoRev {
			t.Fatalf("%s: Also %v at %d, key seen at %d; want one read at %d or later, the key seen there", what, e.Also, e.AlsoRev, e.Seen(), rev)
		}
		kvs := e.Also[0].GetResponseRange().Kvs
		if len(kvs) != 1 || string(kvs[0].Value) != want {
			t.Fatalf("%s: read x = %v; want %q", what, kvs, want)
		}
	}
	rev := put("1")
	a, err := q.Enqueue(ctx, "q/a", "v", lease)
	if err != nil || !a.Owner() {
		t.Fatalf("Enqueue a = %v, owner %v", err, a != nil && a.Owner())
	}
	seen("enqueue into an empty queue", a, "1", rev)
	if _, err := q.Enqueue(ctx, "q/b", "v", lease); err != nil {
		t.Fatal(err)
	}
	e, err := q.Enqueue(ctx, "q/c", "v", lease)
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- q.Wait(ctx, e, context.Background()) }()
	c.Delete(t, "q/b") // c's full read: a still owns
	rev = put("2")
	c.Delete(t, "q/a") // c's short read after the owner went
	if err := <-done; err != nil || !e.Owner() {
		t.Fatalf("Wait = %v, owner %v; want ownership", err, e.Owner())
	}
	seen("wait", e, "2", rev)
	rev = put("3")
	again, err := q.Enqueue(ctx, "q/c", "v", lease)
	if err != nil || !again.Owner() {
		t.Fatalf("repeated Enqueue of c = %v, owner %v", err, again != nil && again.Owner())
	}
	seen("repeated enqueue", again, "3", rev)
}

// Waiters on the session's watch stream: each costs its caller's goroutine
// and nothing more, all share one stream, a waiter whose predecessor gives
// up watches the next one and owns only once the owner goes, and a waiter
// whose predecessor went before its watch was made finds it by the read
// that arms the watch.
func TestWaitersShareTheSessionStream(t *testing.T) {
	c := fencingtest.Single(t)
	ctx := fencingtest.Context(t, 30*time.Second)
	var ctr etcdtest.Counter
	cli := c.Client(t, etcdtest.WithCounter(&ctr))
	g, err := cli.Grant(ctx, 30)
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	life, end := context.WithCancel(context.Background())
	defer func() { end(); wg.Wait() }()
	mux := ownwatch.NewMux(cli, life, func(f func()) bool { wg.Go(f); return true })
	q := revqueue.Queue{Client: cli, Prefix: "q/", Watches: mux}
	const n = 100
	var entries []*revqueue.Entry
	for i := range n + 1 {
		e, err := q.Enqueue(ctx, fmt.Sprintf("q/%03d", i), "v", g.ID)
		if err != nil {
			t.Fatal(err)
		}
		entries = append(entries, e)
	}
	before, creates := runtime.NumGoroutine(), ctr.Requests("Watch")
	done := make([]chan error, n+1)
	for i, e := range entries[1:] {
		done[i+1] = make(chan error, 1)
		go func() { done[i+1] <- q.Wait(ctx, e, life) }()
	}
	fencingtest.WaitFor(t, 10*time.Second, "every waiter's watch", func() bool { return ctr.Requests("Watch")-creates >= n })
	// The watches made past their key's revision are armed by reads, each
	// in a goroutine until it returns.
	fencingtest.WaitFor(t, 10*time.Second, "no goroutine per waiter besides its caller's", func() bool {
		return runtime.NumGoroutine()-before-n <= n/10
	})
	if s := ctr.Streams("Watch"); s != 1 {
		t.Errorf("%d waiters opened %d watch streams, want 1", n, s)
	}
	// The second waiter's key goes: the third re-reads and waits on the
	// owner; the second learns of it once its own wait ends.
	c.Delete(t, "q/001")
	fencingtest.WaitFor(t, 10*time.Second, "the third waiter's re-read", func() bool { return ctr.Requests("Txn") >= n+2 })
	// Its Wait is still running: the entry is its until it returns, and
	// Wait returns nil only once it owns.
	select {
	case err := <-done[2]:
		t.Fatalf("the third waiter's Wait returned (%v) while the owner's key lives", err)
	default:
	}
	c.Delete(t, "q/000")
	if err := <-done[1]; !errors.Is(err, ownwatch.ErrKeyDeleted) {
		t.Fatalf("the waiter whose key was deleted: %v, want ErrKeyDeleted", err)
	}
	// Each owner goes in turn: every waiter owns, in order.
	for i := 2; i <= n; i++ {
		if err := <-done[i]; err != nil || !entries[i].Owner() {
			t.Fatalf("waiter %d: %v, owner %v", i, err, entries[i].Owner())
		}
		c.Delete(t, fmt.Sprintf("q/%03d", i))
	}
}
