package robust_test

import (
	"context"
	"errors"
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
	"github.com/leasehold/leasehold/guard"
	"github.com/leasehold/leasehold/internal/testbed/etcdtest"
	clientv3 "go.etcd.io/etcd/client/v3"
)

const (
	// multiNames is how many names the MultiMutex workload locks, in sets.
	multiNames = 6
	// multiRoot starts every key of the workload's names.
	multiRoot = fencing.DefaultRoot + "robust-multi/"
	// multiMarks is where holders write, under their holds, what they
	// hold: "<key> <create revision>" per name, joined by ";", at
	// robust/multi/<worker>.
	multiMarks = "robust/multi/"
	// callBound bounds each Lock: one still waiting then is stuck (the
	// workload's faults free any name within a few TTLs).
	callBound = 20 * time.Second
)

// TestMultiMutexUnderFaults runs the suite's faults (and an operator
// deleting any key of the workload) for a minute against seven workers,
// five in this process and two in subprocesses (which the faults pause and
// kill), each on a link of its own, that lock random sets of two to four
// of six names, in random order, with MultiMutex, and one time in four a
// single name with a Mutex, and make guarded writes (guard.TxnAll) under
// each.
// Replaying every key's history, at the revision of each committed write
// every key of the writer must have been alive and the oldest of its
// name's queue, all at one create revision: no two holds of a name
// overlapped at any write. Every Lock must end within callBound: a
// deadlock between sets locked in opposite orders would not.
func TestMultiMutexUnderFaults(t *testing.T) {
	etcdtest.Long(t)
	c := fencingtest.Three(t)
	maxTime, _ := runLength()
	maxTime = max(maxTime, time.Minute)
	hist := watchHistory(t, c, "")
	h := newHarness(t, c, "multi", "")
	deleteKey := func() { h.deleteOne(multiRoot, "delete-key", clientv3.WithPrefix()) }
	h.helper, h.extra = "multi-worker", []func(){deleteKey, deleteKey} // a waiter's key, or a holder's
	ctx, cancel := context.WithCancel(t.Context())
	var (
		wg    sync.WaitGroup
		stats multiStats
	)
	for i := range 5 {
		name := fmt.Sprint("m", i)
		cli := h.proxied(name)
		rng := rand.New(rand.NewPCG(h.rng.Uint64(), 6))
		wg.Go(func() { multiWorker(ctx, name, cli, rng, func(e event) { h.events <- e }, &stats) })
	}
	for i := range 2 {
		h.subprocess(fmt.Sprint("p", i))
	}
	events := h.collect()
	start := time.Now()
	h.faultLoop(ctx, hist, func() bool { return time.Since(start) > maxTime })
	cancel()
	h.stopAll()
	stopped := make(chan struct{})
	go func() { wg.Wait(); close(stopped) }()
	select {
	case <-stopped:
	case <-time.After(callBound + time.Minute):
		t.Fatalf("a worker had not returned %v after the run ended: a call is stuck", callBound+time.Minute)
	}
	all := events()
	fencingtest.WaitFor(t, time.Minute, "every key of the workload gone", func() bool {
		return len(etcdtest.Keys(t, c, multiRoot)) == 0
	})
	r := checkMulti(hist.events(t, c))
	acked, stuck := 0, 0
	for _, e := range all {
		if e.kind == "stuck" {
			stuck++ // a subprocess's, or one of this process's
		}
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
	stats.mu.Lock()
	defer stats.mu.Unlock()
	t.Logf("multi: %v; this process's calls: %d multi and %d single acquired, failed %v, longest %v; %d guarded writes committed (%d acknowledged, %d under several names); faults %v",
		time.Since(start).Round(time.Second), stats.multi, stats.single, stats.failed, stats.longest.Round(time.Millisecond),
		len(r.committed), acked, r.several, h.faults)
	if stuck > 0 {
		t.Errorf("%d Locks still waiting after %v", stuck, callBound)
	}
	if stats.multi < 20 || stats.single < 5 || r.several < 20 {
		t.Errorf("%d multi and %d single holds, %d writes under several names: the workload did not exercise MultiMutex",
			stats.multi, stats.single, r.several)
	}
}

// multiStats counts the workers' calls.
type multiStats struct {
	mu      sync.Mutex
	multi   int            // MultiMutex.Lock calls that acquired
	single  int            // Mutex.Lock calls that acquired
	failed  map[string]int // failed calls, by what ended them
	longest time.Duration  // the longest call
}

// record counts one call, and reports whether it was stuck.
func (s *multiStats) record(names int, took time.Duration, err error, ended bool) (stuck bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.longest = max(s.longest, took)
	switch {
	case err == nil && names > 1:
		s.multi++
	case err == nil:
		s.single++
	case ended: // the run's end cancelled it
	default:
		if s.failed == nil {
			s.failed = map[string]int{}
		}
		why := "other"
		for _, e := range []error{fencing.ErrSessionExpired, fencing.ErrKeyDeleted, context.DeadlineExceeded} {
			if errors.Is(err, e) {
				why = e.Error()
				break
			}
		}
		s.failed[why]++
		stuck = errors.Is(err, context.DeadlineExceeded)
	}
	return stuck
}

// multiWorkerHelper runs multiWorker in a subprocess until stdin closes.
// Args: name, impl and store (unused), endpoints...
func multiWorkerHelper(args []string) int {
	return asHelper(args[3:], func(ctx context.Context, cli *clientv3.Client) {
		multiWorker(ctx, args[0], cli, rand.New(rand.NewPCG(uint64(os.Getpid()), 6)), func(e event) { fmt.Println(e) }, new(multiStats))
	})
}

// multiWorker holds one session at a time until ctx ends: it locks two to
// four of the names at once, or one time in four a single name with a
// Mutex, again and again, and makes one to three guarded writes under
// each, each after a pause, as from a process that may have lost its
// holds meanwhile.
func multiWorker(ctx context.Context, name string, cli *clientv3.Client, rng *rand.Rand, emit func(event), stats *multiStats) {
	for ctx.Err() == nil {
		s, err := fencing.NewSession(ctx, cli, fencing.WithTTL(ttl), fencing.WithIdentity(name))
		if err != nil {
			pause(ctx, 100*time.Millisecond)
			continue
		}
		for ctx.Err() == nil && s.Err() == nil {
			names := pickNames(rng)
			lctx, cancel := context.WithTimeout(ctx, callBound)
			start := time.Now()
			holds, unlock, err := lockNames(lctx, s, names)
			cancel()
			if stats.record(len(names), time.Since(start), err, ctx.Err() != nil) {
				emit(event{worker: name, kind: "stuck"})
			}
			if errors.Is(err, fencing.ErrSessionExpired) {
				break // the server may know before the session's next renewal
			}
			if err != nil {
				continue
			}
			emit(event{worker: name, kind: "acquire", token: holds[0].Token().Revision})
			owners := make([]guard.Owner, len(holds))
			marks := make([]string, len(holds))
			for i, h := range holds {
				owners[i], marks[i] = h, h.Key()+" "+strconv.FormatInt(h.Token().Revision, 10)
			}
			for range 1 + rng.IntN(3) {
				pause(ctx, time.Duration(rng.IntN(30))*time.Millisecond)
				// Sent even if ctx ended meanwhile: fencing must stop it.
				wctx, cancel := context.WithTimeout(context.Background(), ttl)
				txn, err := guard.TxnAll(wctx, owners...).Then(clientv3.OpPut(multiMarks+name, strings.Join(marks, ";"))).Commit()
				cancel()
				e := event{worker: name, kind: "write", token: holds[0].Token().Revision}
				e.outcome, e.rev = outcome(txn, err)
				emit(e)
			}
			uctx, cancel := context.WithTimeout(context.Background(), ttl)
			unlock(uctx)
			cancel()
			emit(event{worker: name, kind: "release", token: holds[0].Token().Revision})
		}
		s.Close(context.Background())
	}
}

// pickNames returns one name one time in four, else two to four distinct
// names, in random order.
func pickNames(rng *rand.Rand) []string {
	n := 2 + rng.IntN(3)
	if rng.IntN(4) == 0 {
		n = 1
	}
	names := make([]string, n)
	for i, j := range rng.Perm(multiNames)[:n] {
		names[i] = "robust-multi/" + strconv.Itoa(j)
	}
	return names
}

// lockNames locks names, one with a Mutex, several with a MultiMutex, and
// returns the holds and their release.
func lockNames(ctx context.Context, s *fencing.Session, names []string) ([]*fencing.Hold, func(context.Context) error, error) {
	if len(names) == 1 {
		m, err := fencing.NewMutex(s, names[0])
		if err != nil {
			return nil, nil, err
		}
		h, err := m.Lock(ctx)
		if err != nil {
			return nil, nil, err
		}
		return []*fencing.Hold{h}, h.Unlock, nil
	}
	m, err := fencing.NewMultiMutex(s, names...)
	if err != nil {
		return nil, nil, err
	}
	h, err := m.Lock(ctx)
	if err != nil {
		return nil, nil, err
	}
	return h.Holds(), h.Unlock, nil
}

// multiRun is what checkMulti found in a history.
type multiRun struct {
	violations []string
	committed  map[int64]bool // revisions of the guarded writes
	several    int            // writes under the holds of several names
}

// checkMulti replays raw, every event under every key, and checks each
// guarded write (a put under multiMarks) against the queues of its names as
// they stood at the write's revision: each of the writer's keys alive with
// its create revision, the oldest of its queue, all at one revision.
func checkMulti(raw []*clientv3.Event) multiRun {
	r := multiRun{committed: map[int64]bool{}}
	live := map[string]map[string]int64{} // queue prefix → key → create revision
	queue := func(key string) string {
		i := strings.Index(key, "#lock/")
		if i < 0 {
			return ""
		}
		return key[:i+len("#lock/")]
	}
	for _, ev := range raw {
		k := string(ev.Kv.Key)
		switch {
		case strings.HasPrefix(k, multiRoot):
			q := queue(k)
			if live[q] == nil {
				live[q] = map[string]int64{}
			}
			if ev.Type == clientv3.EventTypeDelete {
				delete(live[q], k)
			} else if ev.IsCreate() {
				live[q][k] = ev.Kv.CreateRevision
			}
		case strings.HasPrefix(k, multiMarks) && ev.Type == clientv3.EventTypePut:
			at := ev.Kv.ModRevision
			r.committed[at] = true
			marks := strings.Split(string(ev.Kv.Value), ";")
			if len(marks) > 1 {
				r.several++
			}
			var first int64
			for _, mark := range marks {
				key, revText, _ := strings.Cut(mark, " ")
				rev, _ := strconv.ParseInt(revText, 10, 64)
				if first == 0 {
					first = rev
				}
				if why := oldest(live[queue(key)], key, rev, first); why != "" {
					r.violations = append(r.violations, fmt.Sprintf("write at revision %d by %s (%s@%d): %s", at, k, key, rev, why))
				}
			}
		}
	}
	return r
}

// oldest says why the life rev of key was not the owner among a queue's
// live keys, or of another revision than the writer's first key (one), or
// "" if it owned.
func oldest(live map[string]int64, key string, rev, one int64) string {
	if rev != one {
		return fmt.Sprintf("a token revision %d beside %d in one write", rev, one)
	}
	if live[key] != rev {
		return "its key was gone"
	}
	for k, r := range live {
		if r < rev {
			return fmt.Sprintf("an older key %s@%d was alive: two holders", k, r)
		}
	}
	return ""
}
