package robust_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/leasehold/leasehold/fencing"
	"github.com/leasehold/leasehold/fencing/fencingtest"
	"github.com/leasehold/leasehold/fencing/inspect"
	"github.com/leasehold/leasehold/guard"
	"github.com/leasehold/leasehold/internal/keyspace"
	"github.com/leasehold/leasehold/internal/testbed/etcdtest"
	clientv3 "go.etcd.io/etcd/client/v3"
)

const (
	sharedName    = "robust-shared"
	sharedPermits = 2
	// sharedMarks is where holders write, under their hold, what they
	// hold: "<key> <create revision>" at robust/shared/<worker>.
	sharedMarks = "robust/shared/"
)

// TestSemaphoreUnderFaults and TestRWMutexUnderFaults run the suite's
// faults against holders of a weighted semaphore (holds of one or two
// units, a limit of two that an operator sets to 2 or 3 now and then,
// sometimes revoking), and of a read-write lock (a third of the holds for
// writing): two workers in this process, two in subprocesses, each making
// guarded writes under each hold. Replaying every key's history, at the
// revision of each committed write the writer's key must have held by its
// kind's rule: its units and those of every older key within the limit of
// that revision, unless granted before the limit was lowered (semaphore);
// the oldest key (write hold); behind no writer's key (read hold). So no
// revision saw more units in use than the limit (but for the grants a
// lowering keeps), nor a writer's write beside any other valid hold.
func TestSemaphoreUnderFaults(t *testing.T) { sharedUnderFaults(t, fencing.KindSemaphore) }

func TestRWMutexUnderFaults(t *testing.T) { sharedUnderFaults(t, fencing.KindRWLock) }

func sharedUnderFaults(t *testing.T, kind fencing.Kind) {
	etcdtest.Long(t)
	c := fencingtest.Three(t)
	maxTime, _ := runLength()
	hist := watchHistory(t, c, "")
	h := newHarness(t, c, string(kind), "")
	h.helper, h.extra = "shared-worker", []func(){func() { h.deleteOne(queuePrefix(kind), "delete-holder", clientv3.WithPrefix()) }}
	if kind == fencing.KindSemaphore {
		h.extra = append(h.extra, h.setLimit)
	}
	ctx, cancel := context.WithCancel(t.Context())
	var wg sync.WaitGroup
	for i := range 2 {
		name := fmt.Sprint("s", i)
		cli := h.proxied(name)
		rng := rand.New(rand.NewPCG(h.rng.Uint64(), 4))
		wg.Go(func() { sharedWorker(ctx, name, kind, cli, rng, func(e event) { h.events <- e }) })
	}
	for i := range 2 {
		h.subprocess(fmt.Sprint("q", i))
	}
	events := h.collect()
	start := time.Now()
	h.faultLoop(ctx, hist, func() bool { return time.Since(start) > maxTime })
	cancel()
	h.stopAll()
	wg.Wait()
	all := events()
	fencingtest.WaitFor(t, time.Minute, "every key of the workload gone (killed workers' leases expire)", func() bool {
		return len(etcdtest.Keys(t, c, queuePrefix(kind))) == 0
	})
	r := checkShared(kind, hist.events(t, c))
	acked := 0
	for _, e := range all {
		if e.kind == "write" && e.outcome == "ok" {
			acked++
			if !r.committed[e.rev] {
				t.Errorf("%s's acknowledged write at revision %d is not in the history", e.worker, e.rev)
			}
		}
	}
	for _, v := range r.violations {
		t.Error(v)
	}
	t.Logf("%s: %v, %d holds, %d guarded writes committed (%d acknowledged), most holders writing at once %d, faults %v",
		kind, time.Since(start).Round(time.Second), r.holds, len(r.committed), acked, r.most, h.faults)
	if acked < 20 || r.most < 2 {
		t.Errorf("%d acknowledged writes, at most %d concurrent holders: the workload did not exercise the %s", acked, r.most, kind)
	}
}

// setLimit gives the semaphore a limit of 2 or 3 of its own, revoking the
// holds over it one time in three, as an operator would while it runs.
func (h *harness) setLimit() {
	ctx, cancel := context.WithTimeout(h.t.Context(), 5*time.Second)
	defer cancel()
	h.mu.Lock()
	limit, revoke := 2+h.rng.IntN(2), h.rng.IntN(3) == 0
	h.mu.Unlock()
	s, err := fencing.NewSession(ctx, h.c.Admin)
	if err != nil {
		return
	}
	defer s.Close(ctx)
	m, err := fencing.NewSemaphore(s, sharedName, sharedPermits)
	if err != nil {
		return
	}
	var opts []fencing.LimitOption
	if revoke {
		opts = append(opts, fencing.RevokeOverLimit())
	}
	if m.SetLimit(ctx, limit, opts...) == nil {
		h.count(fmt.Sprint("set-limit-", limit, map[bool]string{true: "-revoking"}[revoke]))
	}
}

// queuePrefix is the range of the workload's keys of kind.
func queuePrefix(kind fencing.Kind) string {
	p, _ := inspect.KeyPrefix(fencing.DefaultRoot, kind, sharedName)
	return p
}

// sharedRun is what checkShared found in a history.
type sharedRun struct {
	violations []string
	committed  map[int64]bool // revisions of the guarded writes
	holds      int            // keys created
	most       int            // most distinct holders whose writes fell between two queue changes
}

// checkShared replays raw, every event under every key, and checks each
// guarded write (a put under sharedMarks) against the queue as it stood
// at the write's revision.
func checkShared(kind fencing.Kind, raw []*clientv3.Event) sharedRun {
	prefix := queuePrefix(kind)
	r := sharedRun{committed: map[int64]bool{}}
	live := map[string]int64{} // queue key → create revision
	writers := map[string]bool{}
	limit := keyspace.Limit{Limit: sharedPermits} // the semaphore's, as its record says
	// granted are the semaphore's keys granted by the rule, judged here
	// from the history alone: at a write of the key (its enqueue, its
	// mark) where its units and every older key's fit the limit, or by a
	// change of limit under which they fitted the old one.
	granted := map[string]bool{}
	fits := func(key string) bool { return unitsUpTo(prefix, live, live[key]) <= limit.Limit }
	for _, ev := range raw {
		k := string(ev.Kv.Key)
		switch {
		case k == keyspace.LimitKey(prefix) && ev.Type == clientv3.EventTypePut:
			for key := range live {
				granted[key] = granted[key] || fits(key)
			}
			l, err := keyspace.UnmarshalLimit(ev.Kv.Value)
			if err != nil {
				r.violations = append(r.violations, fmt.Sprintf("limit record at revision %d: %v", ev.Kv.ModRevision, err))
			}
			limit = l
			for key, rev := range live {
				if rev <= limit.Held && !granted[key] {
					r.violations = append(r.violations, fmt.Sprintf("limit record at revision %d: held %d covers %s@%d, never granted", ev.Kv.ModRevision, limit.Held, key, rev))
				}
			}
		case strings.HasPrefix(k, prefix):
			writers = map[string]bool{} // the queue changed
			if ev.Type == clientv3.EventTypeDelete {
				delete(live, k)
				delete(granted, k)
				continue
			}
			if ev.IsCreate() {
				live[k] = ev.Kv.CreateRevision
				r.holds++
			}
			granted[k] = granted[k] || fits(k)
		case strings.HasPrefix(k, sharedMarks) && ev.Type == clientv3.EventTypePut:
			r.committed[ev.Kv.ModRevision] = true
			key, revText, _ := strings.Cut(string(ev.Kv.Value), " ")
			rev, _ := strconv.ParseInt(revText, 10, 64)
			why := heldBy(kind, prefix, live, limit, key, rev)
			if kind == fencing.KindSemaphore && why == "" && !granted[key] {
				why = "its key was never granted"
			}
			if why != "" {
				r.violations = append(r.violations, fmt.Sprintf("write at revision %d by %s (%s@%d): %s", ev.Kv.ModRevision, k, key, rev, why))
			}
			writers[k] = true
			r.most = max(r.most, len(writers))
		}
	}
	return r
}

// unitsUpTo is the units of the semaphore's live keys created at or before
// rev.
func unitsUpTo(prefix string, live map[string]int64, rev int64) int {
	units := 0
	for k, r := range live {
		if r <= rev {
			_, n, _ := keyspace.ParseUnitsDir(strings.TrimPrefix(k, prefix))
			units += n
		}
	}
	return units
}

// heldBy says why the key key of life rev did not hold among live by
// kind's rule, under a semaphore's limit, or "" if it held.
func heldBy(kind fencing.Kind, prefix string, live map[string]int64, limit keyspace.Limit, key string, rev int64) string {
	if live[key] != rev {
		return "its key was gone"
	}
	older, olderWriters, units := 0, 0, 0
	for k, r := range live {
		if r < rev {
			older++
		}
		if r <= rev {
			_, n, _ := keyspace.ParseUnitsDir(strings.TrimPrefix(k, prefix))
			units += n
		}
		if r < rev && strings.HasPrefix(k, prefix+"w/") {
			olderWriters++
		}
	}
	switch {
	case kind == fencing.KindSemaphore && units > limit.Limit && rev > limit.Held:
		return fmt.Sprintf("%d units at or ahead of it: more than the limit of %d", units, limit.Limit)
	case kind == fencing.KindRWLock && strings.HasPrefix(key, prefix+"w/") && older > 0:
		return fmt.Sprintf("a writer, with %d older keys alive", older)
	case kind == fencing.KindRWLock && olderWriters > 0:
		return fmt.Sprintf("a reader, with %d older writers alive", olderWriters)
	}
	return ""
}

// sharedWorker holds one session at a time until ctx ends: it takes a
// permit (or a read or write hold) again and again, and makes one to four
// guarded writes under each, each after a pause, as from a process that
// may have lost its hold meanwhile.
func sharedWorker(ctx context.Context, name string, kind fencing.Kind, cli *clientv3.Client, rng *rand.Rand, emit func(event)) {
	for ctx.Err() == nil {
		s, err := fencing.NewSession(ctx, cli, fencing.WithTTL(ttl), fencing.WithIdentity(name))
		if err != nil {
			pause(ctx, 100*time.Millisecond)
			continue
		}
		for ctx.Err() == nil && s.Err() == nil {
			lctx, cancel := context.WithTimeout(ctx, 5*ttl)
			h, err := take(lctx, s, kind, rng)
			cancel()
			if err != nil {
				continue
			}
			emit(event{worker: name, kind: "acquire", token: h.Token().Revision})
			for range 1 + rng.IntN(4) {
				pause(ctx, time.Duration(rng.IntN(30))*time.Millisecond)
				// Sent even if ctx ended meanwhile: fencing must stop it.
				wctx, cancel := context.WithTimeout(context.Background(), ttl)
				mark := h.Key() + " " + strconv.FormatInt(h.Token().Revision, 10)
				txn, err := guard.Txn(wctx, h).Then(clientv3.OpPut(sharedMarks+name, mark)).Commit()
				cancel()
				e := event{worker: name, kind: "write", token: h.Token().Revision}
				e.outcome, e.rev = outcome(txn, err)
				emit(e)
			}
			uctx, cancel := context.WithTimeout(context.Background(), ttl)
			h.Unlock(uctx)
			cancel()
			emit(event{worker: name, kind: "release", token: h.Token().Revision})
		}
		s.Close(context.Background())
	}
}

// take takes a hold of the workload's kind: a permit, or a write hold one
// time in three and else a read hold.
func take(ctx context.Context, s *fencing.Session, kind fencing.Kind, rng *rand.Rand) (*fencing.Hold, error) {
	if kind == fencing.KindSemaphore {
		m, err := fencing.NewSemaphore(s, sharedName, sharedPermits)
		if err != nil {
			return nil, err
		}
		return m.AcquireN(ctx, 1+rng.IntN(2))
	}
	m, err := fencing.NewRWMutex(s, sharedName)
	if err != nil {
		return nil, err
	}
	if rng.IntN(3) == 0 {
		return m.Lock(ctx)
	}
	return m.RLock(ctx)
}

// sharedWorkerHelper runs sharedWorker in a subprocess until stdin
// closes. Args: name, kind, store (unused), endpoints...
func sharedWorkerHelper(args []string) int {
	return asHelper(args[3:], func(ctx context.Context, cli *clientv3.Client) {
		sharedWorker(ctx, args[0], fencing.Kind(args[1]), cli, rand.New(rand.NewPCG(uint64(os.Getpid()), 5)), func(e event) { fmt.Println(e) })
	})
}
