package revqueue_test

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/leasehold/leasehold/fencing"
	"github.com/leasehold/leasehold/fencing/fencingtest"
	"github.com/leasehold/leasehold/fencing/inspect"
	"github.com/leasehold/leasehold/internal/revqueue"
	"github.com/leasehold/leasehold/internal/sessionlink"
	"github.com/leasehold/leasehold/internal/testbed/etcdtest"
	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// A session whose enqueues lose their replies again and again (a far or
// flaky client) keeps one sweeper per name (up to MaxSweeps names), not one
// per lost reply: its goroutines and the pool's state stay flat over 1600
// lost replies on 16 names.
func TestLostRepliesKeepOneSweeper(t *testing.T) {
	etcdtest.Long(t)
	c := fencingtest.Single(t)
	prefix := fencing.DefaultRoot + "far/" // every kind of every name under it
	var n atomic.Int64
	r := &etcdtest.Replies{Decide: func(_ string, req any) etcdtest.Fault {
		if etcdtest.PutsUnder(req, prefix) && n.Add(1)%2 == 1 {
			return etcdtest.LoseReply // the first attempt of every enqueue
		}
		return etcdtest.Pass
	}}
	s := fencingtest.Session(t, c.Client(t, r.Option()))
	cycles := func(k int) {
		var wg sync.WaitGroup
		for w := range 16 {
			wg.Go(func() {
				for range k / 16 {
					if !lockUnlock(t, etcdtest.Mutex(t, s, fmt.Sprint("far/", w)).Lock) {
						return
					}
				}
			})
		}
		wg.Wait()
	}
	cycles(160) // warm up: the sweeper and the client's streams exist
	before := runtime.NumGoroutine()
	cycles(1600)
	if t.Failed() {
		return
	}
	if lost := n.Load() / 2; lost < 1760 {
		t.Fatalf("only %d replies lost", lost)
	}
	if g := runtime.NumGoroutine(); g > before+20 {
		t.Errorf("goroutines grew from %d to %d over 1600 lost replies", before, g)
	}
	if free, inUse, swept := sessionlink.Of(s).Keys.Size(); free > 16 || inUse != 0 || swept != 16 {
		t.Errorf("key pool: %d queues with free slots, %d in use, %d swept; want at most 16, 0, 16", free, inUse, swept)
	}
	if keys := etcdtest.Keys(t, c, prefix); len(keys) != 0 {
		t.Errorf("keys left: %q", keys)
	}
}

// A session that loses the first reply on every new name (a job queue that
// locks each job, from a flaky client) keeps at most MaxSweeps sweepers and
// MaxSweptQueues marks, however many names: past MaxSweeps, queues share
// the watch of the prefix they have in common. A late enqueue on a name
// that only such a shared range covers is still swept.
func TestLostRepliesOnNewNamesStayBounded(t *testing.T) {
	etcdtest.Long(t)
	c := fencingtest.Single(t)
	const names = 2000
	f := &firstLost{prefix: fencing.DefaultRoot + "jobs/"}
	s := fencingtest.Session(t, c.Client(t, f.Option()), fencing.WithTTL(60*time.Second))
	eachName(16, func(i int) bool { return lockUnlock(t, etcdtest.Mutex(t, s, fmt.Sprint("jobs/", i)).Lock) })
	before := runtime.NumGoroutine()
	eachName(names, func(i int) bool { return lockUnlock(t, etcdtest.Mutex(t, s, fmt.Sprint("jobs/", 16+i)).Lock) })
	if t.Failed() {
		return
	}
	if n := f.lost.Load(); n < names {
		t.Fatalf("only %d replies lost", n)
	}
	ranges := sessionlink.Of(s).Sweeps.Ranges()
	if len(ranges) > revqueue.MaxSweeps {
		t.Errorf("%d ranges swept after %d names lost replies: %q", len(ranges), names+16, ranges)
	}
	if g := runtime.NumGoroutine(); g > before+20 {
		t.Errorf("goroutines grew from %d to %d over %d names that lost replies", before, g, names)
	}
	if free, inUse, swept := sessionlink.Of(s).Keys.Size(); free > revqueue.MaxFreeQueues || inUse != 0 || swept > revqueue.MaxSweptQueues {
		t.Errorf("key pool: %d queues with free slots, %d in use, %d swept; want at most %d, 0, at most %d",
			free, inUse, swept, revqueue.MaxFreeQueues, revqueue.MaxSweptQueues)
	}
	// A name no range was made for: a shared range covers it.
	shared := ""
	for _, p := range ranges {
		if !strings.HasSuffix(p, sessionlink.Of(s).KeyStem) {
			shared = p
		}
	}
	if shared == "" {
		t.Fatalf("no shared range among %q", ranges)
	}
	f.lateIsSwept(t, c, s, c.Client(t), strings.TrimPrefix(shared, fencing.DefaultRoot)+"late")
	if got := sessionlink.Of(s).Sweeps.Ranges(); len(got) > revqueue.MaxSweeps {
		t.Errorf("%d ranges swept: %q", len(got), got)
	}
	if keys := etcdtest.Keys(t, c, f.prefix); len(keys) != 0 {
		t.Errorf("keys left: %q", keys)
	}
}

// With etcd auth on and a grant per team, queues past MaxSweeps merge
// within a team, never across: a range the session may not read would be
// refused, and the ghosts under it never swept. Found in review: the new
// queue merged with the range it shared most with, and every range that
// prefix covered went with it (teamA's 16 and teamB's one as
// "leasehold/team").
func TestSweepsStayInsideGrants(t *testing.T) {
	c := fencingtest.Single(t)
	etcdtest.EnableAuth(t, c)
	grants := []string{fencing.DefaultRoot + "teamA/", fencing.DefaultRoot + "teamB/"}
	etcdtest.AddUser(t, c, "teams", grants...)
	f := &firstLost{prefix: fencing.DefaultRoot + "team"}
	s := fencingtest.Session(t, c.Client(t, etcdtest.WithAuth("teams", "teams"), f.Option()), fencing.WithTTL(60*time.Second))
	for i := range revqueue.MaxSweeps {
		lockUnlock(t, etcdtest.Mutex(t, s, fmt.Sprint("teamA/", i)).Lock)
	}
	lockUnlock(t, etcdtest.Mutex(t, s, "teamB/0").Lock)
	f.lateIsSwept(t, c, s, c.Client(t, etcdtest.WithAuth("teams", "teams")), "teamB/late")
	f.lateIsSwept(t, c, s, c.Client(t, etcdtest.WithAuth("teams", "teams")), "teamA/late")
	for _, r := range sessionlink.Of(s).Sweeps.Ranges() {
		if !strings.HasPrefix(r, grants[0]) && !strings.HasPrefix(r, grants[1]) {
			t.Errorf("range %q is outside the grants %q", r, grants)
		}
	}
}

// firstLost loses the reply of the first enqueue of each key under prefix
// (etcd applies it), and holds back the first enqueue under late, once
// set, until Release.
type firstLost struct {
	etcdtest.Replies
	prefix string
	seen   sync.Map // keys whose first enqueue was sent
	lost   atomic.Int64
	late   atomic.Pointer[string]
	held   atomic.Bool
}

func (f *firstLost) Option() fencingtest.ClientOption {
	f.Decide = func(_ string, req any) etcdtest.Fault {
		if p := f.late.Load(); p != nil && etcdtest.PutsUnder(req, *p) {
			if f.held.CompareAndSwap(false, true) {
				return etcdtest.Late
			}
			return etcdtest.Pass
		}
		if key := putKey(req); strings.HasPrefix(key, f.prefix) {
			if _, again := f.seen.LoadOrStore(key, true); !again {
				f.lost.Add(1)
				return etcdtest.LoseReply
			}
		}
		return etcdtest.Pass
	}
	return f.Replies.Option()
}

// lateIsSwept queues a Lock of s on name behind a holder on other, whose
// first enqueue arrives only after the Lock was cancelled and its key
// removed: s's sweepers must delete the key it writes.
func (f *firstLost) lateIsSwept(t *testing.T, c *fencingtest.Cluster, s *fencing.Session, other *clientv3.Client, name string) {
	t.Helper()
	lp, err := inspect.KeyPrefix(fencing.DefaultRoot, fencing.KindLock, name)
	if err != nil {
		t.Fatal(err)
	}
	owner := fencingtest.Lock(t, fencingtest.Session(t, other), name)
	f.held.Store(false)
	f.late.Store(&lp)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		_, err := etcdtest.Mutex(t, s, name).Lock(ctx)
		done <- err
	}()
	fencingtest.WaitFor(t, fencingtest.Wait, "the retried enqueue to queue", func() bool { return len(etcdtest.Keys(t, c, lp)) == 2 })
	cancel()
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Fatalf("cancelled Lock: %v", err)
	}
	fencingtest.WaitFor(t, fencingtest.Wait, "the cancelled Lock's key to go", func() bool { return len(etcdtest.Keys(t, c, lp)) == 1 })
	f.Release() // the first enqueue arrives now, and writes the key again
	fencingtest.WaitFor(t, fencingtest.Wait, "the late key to be swept", func() bool { return len(etcdtest.Keys(t, c, lp)) == 1 })
	if err := owner.Unlock(fencingtest.Context(t, fencingtest.Wait)); err != nil {
		t.Fatal(err)
	}
	lockUnlock(t, etcdtest.Mutex(t, fencingtest.Session(t, other), name).Lock) // not blocked by a ghost
}

// putKey returns the key of the first put of a txn request, or "".
func putKey(req any) string {
	txn, ok := req.(*pb.TxnRequest)
	if !ok {
		return ""
	}
	for _, op := range txn.Success {
		if p := op.GetRequestPut(); p != nil {
			return string(p.Key)
		}
	}
	return ""
}

// A session that locks many names, each once, keeps finished slots for at
// most MaxFreeQueues of them.
func TestManyNamesKeepPoolBounded(t *testing.T) {
	c := fencingtest.Single(t)
	s := fencingtest.Session(t, c.Client(t))
	names := revqueue.MaxFreeQueues + 200
	eachName(names, func(i int) bool { return lockUnlock(t, etcdtest.Mutex(t, s, fmt.Sprint("many/", i)).TryLock) })
	if free, inUse, swept := sessionlink.Of(s).Keys.Size(); free > revqueue.MaxFreeQueues || inUse != 0 || swept != 0 {
		t.Errorf("key pool after %d names: %d queues with free slots, %d in use, %d swept; want at most %d, 0, 0",
			names, free, inUse, swept, revqueue.MaxFreeQueues)
	}
}

// A session that locks more names than the pool keeps finished slots for
// still locks each name with the key it used before: etcd keeps every
// deleted key in its index until a compaction, and each acquire's range
// walks them all, so a new key per Lock would make a name's acquires
// slower the more often it was locked.
func TestManyNamesReuseKeys(t *testing.T) {
	c := fencingtest.Single(t)
	s := fencingtest.Session(t, c.Client(t))
	names := revqueue.MaxFreeQueues + 200
	keys := make([]string, names)
	for pass := range 2 {
		eachName(names, func(i int) bool {
			h, err := etcdtest.Mutex(t, s, fmt.Sprint("many/", i)).Lock(fencingtest.Context(t, fencingtest.Wait))
			if err != nil {
				t.Error(err)
				return false
			}
			if pass == 0 {
				keys[i] = h.Key()
			} else if h.Key() != keys[i] {
				t.Errorf("name %d locked with key %q, then %q", i, keys[i], h.Key())
			}
			if err := h.Unlock(fencingtest.Context(t, fencingtest.Wait)); err != nil {
				t.Error(err)
				return false
			}
			return true
		})
	}
}

// eachName runs f for names 0 to names-1 from 8 goroutines, each taking
// every eighth name until f returns false, and returns once all have.
func eachName(names int, f func(i int) bool) {
	var wg sync.WaitGroup
	for w := range 8 {
		wg.Go(func() {
			for i := w; i < names; i += 8 {
				if !f(i) {
					return
				}
			}
		})
	}
	wg.Wait()
}

// lockUnlock takes a hold with lock and releases it, and reports whether
// both worked (the test is marked failed otherwise).
func lockUnlock(t *testing.T, lock func(context.Context) (*fencing.Hold, error)) bool {
	h, err := lock(fencingtest.Context(t, fencingtest.Wait))
	if err != nil {
		t.Error(err)
		return false
	}
	if err := h.Unlock(fencingtest.Context(t, fencingtest.Wait)); err != nil {
		t.Error(err)
		return false
	}
	return true
}
