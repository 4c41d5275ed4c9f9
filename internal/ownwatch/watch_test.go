package ownwatch_test

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
	"github.com/leasehold/leasehold/internal/testbed/etcdtest"
	clientv3 "go.etcd.io/etcd/client/v3"
)

func TestMain(m *testing.M) { fencingtest.Main(m) }

const wait = 30 * time.Second

var errExpired = errors.New("test: lease expired")

// owned is one key owned on a real lease, and the session context a watch of
// it hangs off.
type owned struct {
	ownwatch.Owner
	endSession context.CancelCauseFunc
}

func own(t *testing.T, cli *clientv3.Client, reg *ownwatch.Registry, key string, mux bool) owned {
	t.Helper()
	ctx := fencingtest.Context(t, wait)
	g, err := cli.Grant(ctx, 60)
	if err != nil {
		t.Fatal(err)
	}
	p, err := cli.Put(ctx, key, "v", clientv3.WithLease(g.ID))
	if err != nil {
		t.Fatal(err)
	}
	life, end := context.WithCancelCause(context.Background())
	o := ownwatch.Owner{Client: cli, Key: key, Rev: p.Header.Revision, Life: life, LeaseID: g.ID, Expired: errExpired, Owners: reg}
	var wg sync.WaitGroup
	t.Cleanup(func() { end(context.Canceled); wg.Wait() })
	if mux {
		o.Mux = ownwatch.NewMux(cli, life, func(f func()) bool { wg.Go(f); return true })
	}
	return owned{Owner: o, endSession: end}
}

// modes runs test on a watch of its own (a clientv3 Watch and a goroutine),
// then on a Mux.
func modes(t *testing.T, test func(t *testing.T, mux bool)) {
	t.Run("clientv3", func(t *testing.T) { test(t, false) })
	t.Run("mux", func(t *testing.T) { test(t, true) })
}

// Once Watch returns (armed), a deletion is seen, and the cause says so.
func TestArmedWatchSeesDeletion(t *testing.T) { modes(t, testArmedWatchSeesDeletion) }

func testArmedWatchSeesDeletion(t *testing.T, mux bool) {
	c := fencingtest.Single(t)
	o := own(t, c.Client(t), new(ownwatch.Registry), "armed", mux)
	ctx, cancel := ownwatch.Watch(context.Background(), o.Owner)
	defer cancel()
	if ctx.Err() != nil {
		t.Fatalf("armed watch of a live key already ended: %v", context.Cause(ctx))
	}
	c.Delete(t, o.Key)
	if cause := fencingtest.Ended(t, ctx, wait, "deleted"); !errors.Is(cause, ownwatch.ErrKeyDeleted) || errors.Is(cause, errExpired) {
		t.Errorf("cause %v, want ErrKeyDeleted alone", cause)
	}
}

// A watch that starts where the key was last read alive (Seen) arms with no
// read of its own, and still sees the key go; one past Seen reads.
func TestSeenSparesTheArmingRead(t *testing.T) { modes(t, testSeenSparesTheArmingRead) }

func testSeenSparesTheArmingRead(t *testing.T, mux bool) {
	c := fencingtest.Single(t)
	var ctr etcdtest.Counter
	o := own(t, c.Client(t, etcdtest.WithCounter(&ctr)), new(ownwatch.Registry), "seen", mux)
	put := func(v string) int64 {
		resp, err := c.Admin.Put(fencingtest.Context(t, wait), "elsewhere", v)
		if err != nil {
			t.Fatal(err)
		}
		return resp.Header.Revision
	}
	o.Seen = put("v") // the key was alive then: nothing touched it
	ranges := ctr.Requests("Range")
	ctx, cancel := ownwatch.Watch(context.Background(), o.Owner)
	defer cancel()
	if n := ctr.Requests("Range") - ranges; n != 0 || ctx.Err() != nil {
		t.Fatalf("armed at Seen with %d reads, ended %v; want no read, alive", n, context.Cause(ctx))
	}
	put("w")
	o2 := o.Owner
	o2.Owners = new(ownwatch.Registry)
	ctx2, cancel2 := ownwatch.Watch(context.Background(), o2)
	defer cancel2()
	if n := ctr.Requests("Range") - ranges; n != 1 || ctx2.Err() != nil {
		t.Fatalf("armed past Seen with %d reads, ended %v; want one read, alive", n, context.Cause(ctx2))
	}
	c.Delete(t, o.Key)
	if cause := fencingtest.Ended(t, ctx, wait, "deleted"); !errors.Is(cause, ownwatch.ErrKeyDeleted) {
		t.Errorf("cause %v, want ErrKeyDeleted", cause)
	}
}

// A watch with Puts ends with ErrKeyWritten on a put of the key after Seen:
// one made before it armed (found by the arming read) or after; a put at
// Seen does not end it.
func TestPutsEndTheWatch(t *testing.T) { modes(t, testPutsEndTheWatch) }

func testPutsEndTheWatch(t *testing.T, mux bool) {
	c := fencingtest.Single(t)
	o := own(t, c.Client(t), new(ownwatch.Registry), "puts", mux)
	put := func(key string) int64 {
		var opts []clientv3.OpOption
		if key == o.Key {
			opts = append(opts, clientv3.WithIgnoreLease()) // the owner's touch
		}
		resp, err := c.Admin.Put(fencingtest.Context(t, wait), key, "touched", opts...)
		if err != nil {
			t.Fatal(err)
		}
		return resp.Header.Revision
	}
	o.Puts = true
	o.Seen = put(o.Key) // seen after this put
	put("elsewhere")
	ctx, cancel := ownwatch.Watch(context.Background(), o.Owner)
	defer cancel()
	if ctx.Err() != nil {
		t.Fatalf("ended by a put it had seen: %v", context.Cause(ctx))
	}
	put(o.Key)
	if cause := fencingtest.Ended(t, ctx, wait, "put after arming"); !errors.Is(cause, ownwatch.ErrKeyWritten) {
		t.Errorf("cause %v, want ErrKeyWritten", cause)
	}
	o2 := o.Owner // Seen is now before the last put: the arming read finds it
	o2.Owners = new(ownwatch.Registry)
	w := ownwatch.Start(context.Background(), o2)
	defer w.Stop(context.Canceled)
	if cause := fencingtest.Ended(t, w.Context(), wait, "put before arming"); !errors.Is(cause, ownwatch.ErrKeyWritten) {
		t.Errorf("cause %v, want ErrKeyWritten", cause)
	}
}

// Start returns before arming; a deletion made before the watch was armed is
// found by the read arming ends with, and Armed closes either way.
func TestStartFindsDeletionBeforeArming(t *testing.T) { modes(t, testStartFindsDeletionBeforeArming) }

func testStartFindsDeletionBeforeArming(t *testing.T, mux bool) {
	c := fencingtest.Single(t)
	o := own(t, c.Client(t), new(ownwatch.Registry), "before-arming", mux)
	c.Delete(t, o.Key)
	w := ownwatch.Start(context.Background(), o.Owner)
	defer w.Stop(context.Canceled)
	if cause := fencingtest.Ended(t, w.Context(), wait, "deleted before Start"); !errors.Is(cause, ownwatch.ErrKeyDeleted) {
		t.Errorf("cause %v, want ErrKeyDeleted", cause)
	}
	<-w.Armed()
}

// Each way of losing ownership ends the context with its own cause.
func TestCauseOfEachLoss(t *testing.T) { modes(t, testCauseOfEachLoss) }

func testCauseOfEachLoss(t *testing.T, mux bool) {
	c := fencingtest.Single(t)
	cli := c.Client(t)
	sessionLost := errors.New("test: session lost")
	parentCause := errors.New("test: parent done")
	proven := errors.New("test: proven by a guarded txn")
	cases := []struct {
		name string
		lose func(o owned, cancelParent context.CancelCauseFunc, reg *ownwatch.Registry)
		want []error
	}{
		{"key replaced", func(o owned, _ context.CancelCauseFunc, _ *ownwatch.Registry) {
			c.Delete(t, o.Key)
			if _, err := c.Admin.Put(fencingtest.Context(t, wait), o.Key, "someone else's"); err != nil {
				t.Fatal(err)
			}
		}, []error{ownwatch.ErrKeyDeleted}},
		{"lease revoked", func(o owned, _ context.CancelCauseFunc, _ *ownwatch.Registry) { c.Revoke(t, o.LeaseID) },
			[]error{ownwatch.ErrKeyDeleted, errExpired}},
		{"session ended", func(o owned, _ context.CancelCauseFunc, _ *ownwatch.Registry) { o.endSession(sessionLost) },
			[]error{sessionLost}},
		{"parent done", func(_ owned, cancel context.CancelCauseFunc, _ *ownwatch.Registry) { cancel(parentCause) },
			[]error{parentCause}},
		{"loss proven elsewhere", func(o owned, _ context.CancelCauseFunc, reg *ownwatch.Registry) { reg.Lost(o.Key, o.Rev, proven) },
			[]error{proven}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			reg := new(ownwatch.Registry)
			o := own(t, cli, reg, "cause/"+tc.name, mux)
			parent, cancelParent := context.WithCancelCause(context.Background())
			defer cancelParent(nil)
			ctx, cancel := ownwatch.Watch(parent, o.Owner)
			tc.lose(o, cancelParent, reg)
			cause := fencingtest.Ended(t, ctx, wait, tc.name)
			for _, want := range tc.want {
				if !errors.Is(cause, want) {
					t.Errorf("cause %v, want it to wrap %v", cause, want)
				}
			}
			cancel()
			if n := reg.Len(); n != 0 {
				t.Errorf("%d keys still registered after the watch ended", n)
			}
		})
	}
}

// A broken watch stream (the member restarted) is resumed, not turned into a
// loss; a deletion after that is still seen.
func TestBrokenStreamIsResumed(t *testing.T) { modes(t, testBrokenStreamIsResumed) }

func testBrokenStreamIsResumed(t *testing.T, mux bool) {
	c := fencingtest.Single(t)
	o := own(t, c.Client(t), new(ownwatch.Registry), "broken", mux)
	ctx, cancel := ownwatch.Watch(context.Background(), o.Owner)
	defer cancel()
	c.Stop(0)
	c.Restart(t, 0)
	if _, err := c.Admin.Get(fencingtest.Context(t, wait), o.Key); err != nil { // the member serves again
		t.Fatal(err)
	}
	if ctx.Err() != nil {
		t.Fatalf("a restart ended the watch: %v", context.Cause(ctx))
	}
	c.Delete(t, o.Key)
	if cause := fencingtest.Ended(t, ctx, wait, "deleted after the restart"); !errors.Is(cause, ownwatch.ErrKeyDeleted) {
		t.Errorf("cause %v, want ErrKeyDeleted", cause)
	}
}

// A watch resumed past a compaction (its member was down while the cluster
// compacted) re-arms from a fresh read instead of reporting a loss.
func TestCompactedWatchIsRearmed(t *testing.T) { modes(t, testCompactedWatchIsRearmed) }

func testCompactedWatchIsRearmed(t *testing.T, mux bool) {
	c := fencingtest.Three(t)
	cli := fencingtest.NewClient(t, []string{c.Members[0].ClientURL.String()})
	o := own(t, cli, new(ownwatch.Registry), "compacted", mux)
	ctx, cancel := ownwatch.Watch(context.Background(), o.Owner)
	defer cancel()
	etcdtest.CompactWhileDown(t, c, 0, func() {})
	if _, err := cli.Get(fencingtest.Context(t, wait), o.Key); err != nil { // member 0 serves again
		t.Fatal(err)
	}
	if ctx.Err() != nil {
		t.Fatalf("compaction ended the watch: %v", context.Cause(ctx))
	}
	c.Delete(t, o.Key)
	if cause := fencingtest.Ended(t, ctx, wait, "deleted after the compaction"); !errors.Is(cause, ownwatch.ErrKeyDeleted) {
		t.Errorf("cause %v, want ErrKeyDeleted", cause)
	}
}

// Registries are independent: a loss on one reaches no watch of another,
// even for the same key.
func TestRegistriesAreIndependent(t *testing.T) { modes(t, testRegistriesAreIndependent) }

func testRegistriesAreIndependent(t *testing.T, mux bool) {
	c := fencingtest.Single(t)
	regA, regB := new(ownwatch.Registry), new(ownwatch.Registry)
	o := own(t, c.Client(t), regB, "shared-name", mux)
	ctx, cancel := ownwatch.Watch(context.Background(), o.Owner)
	defer cancel()
	regA.Lost(o.Key, o.Rev, errors.New("someone else's loss"))
	if ctx.Err() != nil {
		t.Fatalf("a loss on another registry ended the watch: %v", context.Cause(ctx))
	}
	cancel()
	if !errors.Is(context.Cause(ctx), context.Canceled) {
		t.Errorf("cause after cancel %v, want context.Canceled", context.Cause(ctx))
	}
	if regB.Len() != 0 {
		t.Error("the watch is still registered after cancel returned")
	}
}

// A watch runs its goroutine through the session's Go, so closing the
// session waits for it; a session that has ended starts none, and the
// watch ends at once with the session's cause.
func TestWatchGoroutineBelongsToTheSession(t *testing.T) {
	c := fencingtest.Single(t)
	o := own(t, c.Client(t), new(ownwatch.Registry), "owned-goroutine", false)
	var started int
	o.Go = func(f func()) bool { started++; go f(); return true }
	w := ownwatch.Start(context.Background(), o.Owner)
	<-w.Armed()
	w.Stop(context.Canceled)
	if started != 1 {
		t.Errorf("the watch started %d goroutines through the session, want 1", started)
	}
	ended := errors.New("test: session over")
	o.endSession(ended)
	o.Go = func(func()) bool { return false }
	w = ownwatch.Start(context.Background(), o.Owner)
	<-w.Armed()
	w.Stop(context.Canceled)
	if cause := context.Cause(w.Context()); !errors.Is(cause, ended) {
		t.Errorf("cause %v, want the session's", cause)
	}
	if o.Owners.Len() != 0 {
		t.Error("a watch that never started is still registered")
	}
}

// A Mux serves many watches with a fixed number of goroutines, all run
// through the session's Go (the deferred Wait returns); a deletion ends only
// its own key's context; a stopped watch leaves the Mux, and the burst of
// creates leaves no room kept; and a session that has ended starts nothing.
func TestMuxServesManyWatches(t *testing.T) {
	c := fencingtest.Single(t)
	cli := c.Client(t)
	const n = 200
	var wg sync.WaitGroup
	life, end := context.WithCancelCause(context.Background())
	defer func() { end(context.Canceled); wg.Wait() }()
	mux := ownwatch.NewMux(cli, life, func(f func()) bool { wg.Go(f); return true })
	reg := new(ownwatch.Registry)
	var owners []ownwatch.Owner
	for i := range n { // all written first: most watches start past their key's revision, and read it
		o := own(t, cli, reg, fmt.Sprint("mux/", i), false)
		o.Life, o.Mux = life, mux
		owners = append(owners, o.Owner)
	}
	before := runtime.NumGoroutine()
	var ws []*ownwatch.Watcher
	for _, o := range owners {
		ws = append(ws, ownwatch.Start(context.Background(), o))
	}
	for _, w := range ws {
		<-w.Armed()
	}
	if g := runtime.NumGoroutine() - before; g > n/10 {
		t.Errorf("%d watches added %d goroutines, want a fixed few", n, g)
	}
	if mux.Watches() != n {
		t.Errorf("the Mux serves %d watches, want %d", mux.Watches(), n)
	}
	if mux.KeepsCreates() {
		t.Error("every create answered, and the Mux keeps their array")
	}
	c.Delete(t, "mux/7")
	if cause := fencingtest.Ended(t, ws[7].Context(), wait, "mux/7 deleted"); !errors.Is(cause, ownwatch.ErrKeyDeleted) {
		t.Errorf("cause %v, want ErrKeyDeleted", cause)
	}
	for i, w := range ws {
		if i != 7 && w.Context().Err() != nil {
			t.Fatalf("watch %d ended with another key's deletion: %v", i, context.Cause(w.Context()))
		}
		w.Stop(context.Canceled)
	}
	if mux.Watches() != 0 || reg.Len() != 0 {
		t.Errorf("after every Stop: %d watches in the Mux, %d keys registered", mux.Watches(), reg.Len())
	}
	ended := errors.New("test: session over")
	end(ended)
	o := own(t, cli, reg, "mux/after", false)
	o.Life, o.Mux = life, mux
	w := ownwatch.Start(context.Background(), o.Owner)
	<-w.Armed()
	if cause := context.Cause(w.Context()); !errors.Is(cause, ended) {
		t.Errorf("a watch started after the session ended: cause %v, want the session's", cause)
	}
	w.Stop(context.Canceled)
}

// A watch of a key whose last Watcher ended is kept a moment and serves the
// next Watcher of the key: no create, no cancel (a waiter behind the same
// key, cycle after cycle, as in a lock handed over in a loop). It sees what
// happens after it is reused, and one whose key changed while it was idle,
// past what the new Watcher has seen, arms with a read.
func TestMuxReusesAnIdleWatch(t *testing.T) {
	ownwatch.KeepIdle(t, time.Hour) // however slow the machine, no watch expires
	c := fencingtest.Single(t)
	var ctr etcdtest.Counter
	o := own(t, c.Client(t, etcdtest.WithCounter(&ctr)), new(ownwatch.Registry), "reuse", true)
	first := ownwatch.Start(context.Background(), o.Owner)
	<-first.Armed()
	first.Stop(context.Canceled)
	watches, ranges := ctr.Requests("Watch"), ctr.Requests("Range")
	again := ownwatch.Start(context.Background(), o.Owner)
	<-again.Armed()
	if n, r := ctr.Requests("Watch")-watches, ctr.Requests("Range")-ranges; n != 0 || r != 0 {
		t.Fatalf("the next watch of the key sent %d watch requests and %d reads; want none: the idle watch serves it", n, r)
	}
	c.Delete(t, o.Key)
	if cause := fencingtest.Ended(t, again.Context(), wait, "deleted"); !errors.Is(cause, ownwatch.ErrKeyDeleted) {
		t.Fatalf("cause %v, want ErrKeyDeleted", cause)
	}
	again.Stop(context.Canceled)

	// The key's next life, deleted while the watch is idle: a Watcher that
	// saw it alive before that arms with a read, and ends.
	p, err := c.Admin.Put(fencingtest.Context(t, wait), o.Key, "v", clientv3.WithLease(o.LeaseID))
	if err != nil {
		t.Fatal(err)
	}
	next := o.Owner
	next.Rev, next.Seen = p.Header.Revision, p.Header.Revision
	probe := ownwatch.Start(context.Background(), next)
	<-probe.Armed()
	probe.Stop(context.Canceled) // idle again, from the key's new life
	watches, ranges = ctr.Requests("Watch"), ctr.Requests("Range")
	c.Delete(t, o.Key)
	fencingtest.WaitFor(t, wait, "the idle watch to carry the delete", func() bool { return o.Mux.IdleStart(o.Key) > next.Seen })
	late := ownwatch.Start(context.Background(), next)
	if cause := fencingtest.Ended(t, late.Context(), wait, "deleted while idle"); !errors.Is(cause, ownwatch.ErrKeyDeleted) {
		t.Fatalf("cause %v, want ErrKeyDeleted", cause)
	}
	if n, r := ctr.Requests("Watch")-watches, ctr.Requests("Range")-ranges; n != 0 || r != 1 {
		t.Errorf("%d watch requests, %d reads; want none, and the read that arms the watch", n, r)
	}
	late.Stop(context.Canceled)
}
