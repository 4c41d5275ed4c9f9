package bench_test

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/leasehold/leasehold/fencing"
	"github.com/leasehold/leasehold/fencing/fencingtest"
	"github.com/leasehold/leasehold/fencing/inspect"
	"github.com/leasehold/leasehold/internal/testbed/etcdtest"
	"github.com/leasehold/leasehold/internal/testbed/stacks"
	"go.etcd.io/etcd/api/v3/etcdserverpb"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/client/v3/concurrency"
	recipe "go.etcd.io/etcd/client/v3/experimental/recipes"
	"google.golang.org/grpc"
	"google.golang.org/grpc/stats"
)

// BenchmarkSemaphoreVsMutex compares a Semaphore of limit 1 with a Mutex,
// which it must match: the same queue, one more key directory. uncontended
// is Acquire+Unlock against Lock+Unlock on a free name; handoff is the time
// from a holder's Unlock to a queued waiter's Acquire (Lock) returning, the
// waiter on another session whose watch is armed. Every iteration runs one
// cycle of each, in alternating order, so drift in the machine's load falls
// on both alike. It reports each side's p50 and p99 and ratio-p50, the
// semaphore's p50 over the mutex's (the target: at most 1.05).
func BenchmarkSemaphoreVsMutex(b *testing.B) {
	pairs(b, "semaphore-vs-mutex", [2]string{"sem", "mutex"}, func(s *fencing.Session, name string) [2]func(context.Context) (*fencing.Hold, error) {
		sem, err := fencing.NewSemaphore(s, name, 1)
		if err != nil {
			b.Fatal(err)
		}
		m, err := fencing.NewMutex(s, name)
		if err != nil {
			b.Fatal(err)
		}
		return [2]func(context.Context) (*fencing.Hold, error){sem.Acquire, m.Lock}
	})
}

// pairs runs BenchmarkSemaphoreVsMutex's two modes for the two sides that
// sides makes on a session (each on its own name, or on name alike when the
// kinds differ), labelled labels, and reports each side's p50 and p99 and
// ratio-p50, the first's p50 over the second's.
func pairs(b *testing.B, prefix string, labels [2]string, sides func(s *fencing.Session, name string) [2]func(context.Context) (*fencing.Hold, error)) {
	c := cluster(b)
	ctx := fencingtest.Context(b, 10*time.Minute)
	for _, mode := range []string{"uncontended", "handoff"} {
		b.Run(mode, func(b *testing.B) {
			var waiterWatches watchStats
			holder, waiter := benchSession(b, c), benchSession(b, c, withWatchStats(&waiterWatches))
			name := prefix + "-" + mode + "-" + strconv.FormatInt(time.Now().UnixNano(), 36)
			// acquire[side][0] takes on the holder's session, [1] on the waiter's.
			var acquire [2][2]func(context.Context) (*fencing.Hold, error)
			for i, s := range []*fencing.Session{holder, waiter} {
				made := sides(s, name)
				acquire[0][i], acquire[1][i] = made[0], made[1]
			}
			cycle := func(side int) time.Duration {
				start := time.Now()
				h, err := acquire[side][0](ctx)
				if err != nil {
					b.Fatal(err)
				}
				if mode == "uncontended" {
					if err := h.Unlock(ctx); err != nil {
						b.Fatal(err)
					}
					return time.Since(start)
				}
				armed := waiterWatches.created.Load()
				got := make(chan acquired, 1)
				go func() {
					w, err := acquire[side][1](ctx)
					got <- acquired{w, time.Now(), err}
				}()
				// A waiter may reuse the watch of its last wait, idle on the
				// session's stream (no created notice): then it is parked.
				fencingtest.WaitFor(b, time.Minute, "the waiter's watch", func() bool {
					return waiterWatches.created.Load() > armed || stacks.Blocked(waitGone) == 1
				})
				start = time.Now()
				if err := h.Unlock(ctx); err != nil {
					b.Fatal(err)
				}
				w := <-got
				if w.err != nil {
					b.Fatal(w.err)
				}
				if err := w.hold.Unlock(ctx); err != nil {
					b.Fatal(err)
				}
				return w.at.Sub(start)
			}
			d := alternateTimes(b, 20, cycle) // 20 cycles warm both queues and sessions
			for side, label := range labels {
				b.ReportMetric(percentileMs(d[side], 0.5), label+"-p50-ms")
				b.ReportMetric(percentileMs(d[side], 0.99), label+"-p99-ms")
			}
			b.ReportMetric(percentileMs(d[0], 0.5)/percentileMs(d[1], 0.5), "ratio-p50")
		})
	}
}

// waitGone is where a waiter on the session's watch stream is parked.
const waitGone = "github.com/leasehold/leasehold/internal/revqueue.Queue.waitGone"

// BenchmarkSemaphoreRequestsPerRelease proves that a release costs the same
// number of requests whatever the number of waiters: each waiter watches
// one key, so a release wakes the one waiter it admits. Per iteration it
// fills every permit (the mutex's one, or a Semaphore's two) from one
// session, queues the waiters one by one from another (each Acquire its own
// key; the next is queued once the previous one's watch is armed, so no
// waiter has a gap to read), then releases the holders: each admitted
// waiter releases at once, admitting the next, until the last `limit` hold.
// Every release in the window admits one waiter.
//
// requests/release counts every Txn, Range, DeleteRange, Put and Watch
// message of both sessions' clients (one Counter) from the first release
// until the last waiter holds and every waiter's watch cancel was sent (for
// the semaphore, also until the keepers' marks landed), over
// the releases. Each admitted waiter cancels its watch with one message,
// except the chain's last: its watch is the client's last, and closing it
// closes the stream instead; so a flat cost of k requests shows as
// k - 1/waiters. wakeups/release counts the watch responses carrying events
// that the clients received (each wakes one watch), events/release their
// events, ms/release the window's time over the releases.
func BenchmarkSemaphoreRequestsPerRelease(b *testing.B) {
	c := cluster(b)
	ctx := fencingtest.Context(b, 30*time.Minute)
	for _, waiters := range []int{1, 10, 100, 1000} {
		for _, impl := range []string{"mutex", "semaphore-2", "weighted-2x2"} {
			b.Run(fmt.Sprintf("waiters=%d/%s", waiters, impl), func(b *testing.B) {
				ch := &releaseChain{c: c, limit: 1, waiters: waiters}
				holders, queue := benchSession(b, c, ch.options()...), benchSession(b, c, ch.options()...)
				name := fmt.Sprintf("per-release-%d-%s-%s", waiters, impl, strconv.FormatInt(time.Now().UnixNano(), 36))
				kind, lockOn := fencing.KindLock, func(s *fencing.Session) acquireFunc {
					m, err := fencing.NewMutex(s, name)
					if err != nil {
						b.Fatal(err)
					}
					return releaser(m.Lock)
				}
				if impl != "mutex" {
					// Two holds fill it: of one unit of 2, or of two units of 4.
					units := map[string]int{"semaphore-2": 1, "weighted-2x2": 2}[impl]
					kind, ch.limit, ch.touches, lockOn = fencing.KindSemaphore, 2, true, func(s *fencing.Session) acquireFunc {
						m, err := fencing.NewSemaphore(s, name, 2*units)
						if err != nil {
							b.Fatal(err)
						}
						return releaser(func(ctx context.Context) (*fencing.Hold, error) { return m.AcquireN(ctx, units) })
					}
				}
				var err error
				if ch.prefix, err = inspect.KeyPrefix(fencing.DefaultRoot, kind, name); err != nil {
					b.Fatal(err)
				}
				ch.hold, ch.wait = lockOn(holders), lockOn(queue)
				b.ResetTimer()
				for range b.N {
					ch.run(b, ctx)
				}
				b.StopTimer()
				ch.report(b, "")
			})
		}
	}
}

// acquireFunc takes a lock or a permit and returns its release.
type acquireFunc func(context.Context) (release func(context.Context) error, err error)

// releaser is acquire returning its hold's Unlock.
func releaser(acquire func(context.Context) (*fencing.Hold, error)) acquireFunc {
	return func(ctx context.Context) (func(context.Context) error, error) {
		h, err := acquire(ctx)
		if err != nil {
			return nil, err
		}
		return h.Unlock, nil
	}
}

// releaseChain is the release chain of BenchmarkSemaphoreRequestsPerRelease
// on one lock or semaphore, whose keys are under prefix: hold fills its
// limit permits, wait queues the waiters, both on clients made with
// options, and run adds up what each chain cost.
type releaseChain struct {
	c              *fencingtest.Cluster
	prefix         string
	limit, waiters int
	hold, wait     acquireFunc
	touches        bool // an admitted waiter puts its key again: a Semaphore's mark
	ctr            etcdtest.Counter
	watches        watchStats

	requests, wakeups, events int
	window                    time.Duration
	spent                     map[string]int // requests by method
}

func (ch *releaseChain) options() []fencingtest.ClientOption {
	return []fencingtest.ClientOption{etcdtest.WithCounter(&ch.ctr), withWatchStats(&ch.watches)}
}

// run is one iteration: it fills the permits, queues the waiters one by one
// (each once the previous one's watch is armed), and times and counts the
// chain of releases with the benchmark's timer on; then it releases the
// rest, off the timer.
func (ch *releaseChain) run(b *testing.B, ctx context.Context) {
	b.StopTimer()
	if ch.spent == nil {
		ch.spent = map[string]int{}
	}
	first := min(ch.limit, ch.waiters)     // holders released to start the chain
	releasers := int64(ch.waiters - first) // waiters that release at once; the rest keep
	held := make([]func(context.Context) error, ch.limit)
	for i := range held {
		var err error
		if held[i], err = ch.hold(ctx); err != nil {
			b.Fatal(err)
		}
	}
	var (
		admitted atomic.Int64
		wg       sync.WaitGroup
		results  = make(chan func(context.Context) error, ch.waiters) // nil once released
	)
	for range ch.waiters {
		armed, parked := ch.watches.created.Load(), stacks.Blocked(waitGone)
		wg.Go(func() {
			release, err := ch.wait(ctx)
			if err != nil {
				b.Error(err)
			} else if admitted.Add(1) <= releasers {
				if err := release(ctx); err != nil {
					b.Error(err)
				}
				release = nil
			}
			results <- release
		})
		// A waiter may reuse an idle watch of its session's stream (no
		// created notice): then it is parked on it.
		fencingtest.WaitFor(b, time.Minute, "the waiter's watch", func() bool {
			return ch.watches.created.Load() > armed || stacks.Blocked(waitGone) > parked
		})
	}
	fencingtest.WaitFor(b, time.Minute, "every key queued", func() bool { return queued(b, ch.c, ch.prefix) == int64(ch.limit+ch.waiters) })
	before := map[string]int{}
	for _, m := range slices.Concat(kvMethods, []string{"LeaseTimeToLive", "LeaseGrant", "LeaseRevoke"}) {
		before[m] = ch.ctr.Requests(m)
	}
	r0, wk0, ev0 := kvRequests(&ch.ctr), ch.watches.wakeups.Load(), ch.watches.events.Load()
	b.StartTimer()
	start := time.Now()
	for _, release := range held[:first] {
		if err := release(ctx); err != nil {
			b.Fatal(err)
		}
	}
	var keep []func(context.Context) error
	for range ch.waiters {
		if release := <-results; release != nil {
			keep = append(keep, release)
		}
	}
	ch.window += time.Since(start)
	b.StopTimer()
	// An admitted waiter cancels its watch in the background (but the last
	// watch of the client closes the stream instead, with no message), and
	// a semaphore's marked its key: count those requests too.
	cancels := func() int { return ch.ctr.Requests("Watch") - before["Watch"] }
	if !fencingtest.Within(5*time.Second, func() bool { return cancels() >= ch.waiters-1 }) {
		b.Logf("only %d of %d watch cancels sent", cancels(), ch.waiters-1)
	}
	if ch.touches {
		fencingtest.WaitFor(b, time.Minute, "the keepers' marks", func() bool { return touched(b, ch.c, ch.prefix) >= len(keep) })
	}
	ch.requests += kvRequests(&ch.ctr) - r0
	ch.wakeups += int(ch.watches.wakeups.Load() - wk0)
	ch.events += int(ch.watches.events.Load() - ev0)
	for m, n := range before {
		ch.spent[m] += ch.ctr.Requests(m) - n
	}
	for _, release := range append(held[first:], keep...) {
		if err := release(ctx); err != nil {
			b.Fatal(err)
		}
	}
	wg.Wait()
	fencingtest.WaitFor(b, time.Minute, "an empty queue", func() bool { return queued(b, ch.c, ch.prefix) == 0 })
	b.StartTimer()
}

// report reports the chains' costs per release, each metric's name after
// label.
func (ch *releaseChain) report(b *testing.B, label string) {
	releases := float64(ch.waiters * b.N)
	b.ReportMetric(float64(ch.requests)/releases, label+"requests/release")
	b.ReportMetric(float64(ch.wakeups)/releases, label+"wakeups/release")
	b.ReportMetric(float64(ch.events)/releases, label+"events/release")
	b.ReportMetric(float64(ch.window.Microseconds())/1000/releases, label+"ms/release")
	b.Logf("%srequests by method over %v releases: %v", label, releases, ch.spent)
}

// BenchmarkSemaphoreVsConcurrency compares leasehold's Semaphore of two
// permits with obviousSemaphore, the same semaphore built the obvious way on
// etcd's concurrency package. uncontended times Acquire+release on free
// permits (p50 of each); waiters=W runs BenchmarkSemaphoreRequestsPerRelease's
// chain on each (the permits filled from one session, W waiters queued on
// another, each admitted waiter releasing at once) and reports each side's
// requests, wakeups and events per release, and ms/release, counted over
// both sessions' clients. Every iteration runs both, in alternating order.
// A p50 needs many samples: run uncontended alone with -benchtime 1000x.
func BenchmarkSemaphoreVsConcurrency(b *testing.B) {
	const limit = 2
	c := cluster(b)
	ctx := fencingtest.Context(b, 30*time.Minute)
	labels := []string{"ours-", "obvious-"}
	b.Run("uncontended", func(b *testing.B) {
		sides := semaphoreChains(b, c, "uncontended", limit, 0)
		d := alternateTimes(b, 20, func(side int) time.Duration {
			start := time.Now()
			release, err := sides[side].hold(ctx)
			if err != nil {
				b.Fatal(err)
			}
			if err := release(ctx); err != nil {
				b.Fatal(err)
			}
			return time.Since(start)
		})
		for side, label := range labels {
			b.ReportMetric(percentileMs(d[side], 0.5), label+"p50-ms")
		}
	})
	for _, waiters := range []int{1, 10, 100} {
		b.Run("waiters="+strconv.Itoa(waiters), func(b *testing.B) {
			sides := semaphoreChains(b, c, "waiters-"+strconv.Itoa(waiters), limit, waiters)
			alternate(b, 0, func(side int, _ bool) { sides[side].run(b, ctx) })
			for side, label := range labels {
				sides[side].report(b, label)
			}
		})
	}
}

// semaphoreChains returns the release chains of a Semaphore and of an
// obviousSemaphore, of limit permits, each with a session for the holders
// and one for the waiters.
func semaphoreChains(b *testing.B, c *fencingtest.Cluster, name string, limit, waiters int) [2]*releaseChain {
	name = "vs-concurrency-" + name + "-" + strconv.FormatInt(time.Now().UnixNano(), 36)
	ours := &releaseChain{c: c, limit: limit, waiters: waiters, touches: limit > 1}
	obvious := &releaseChain{c: c, limit: limit, waiters: waiters, prefix: "obvious/" + name + "/"}
	var err error
	if ours.prefix, err = inspect.KeyPrefix(fencing.DefaultRoot, fencing.KindSemaphore, name); err != nil {
		b.Fatal(err)
	}
	semaphore := func() acquireFunc {
		m, err := fencing.NewSemaphore(benchSession(b, c, ours.options()...), name, limit)
		if err != nil {
			b.Fatal(err)
		}
		return releaser(m.Acquire)
	}
	obviously := func() acquireFunc {
		cs, err := concurrency.NewSession(c.Client(b, obvious.options()...), concurrency.WithTTL(10))
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { cs.Close() })
		return (&obviousSemaphore{s: cs, prefix: obvious.prefix, limit: int64(limit)}).acquire
	}
	ours.hold, ours.wait = semaphore(), semaphore()
	obvious.hold, obvious.wait = obviously(), obviously()
	return [2]*releaseChain{ours, obvious}
}

// obviousSemaphore is a counting semaphore of limit permits built the
// obvious way on etcd's concurrency package: each acquire puts a key of its
// own under prefix, on the session's lease, and holds once that key is
// among the limit oldest by create revision. Until then it watches the
// prefix for deletes, from just after its read, and reads again on each.
// So every release wakes every waiter, and each of them reads: a herd.
// Release deletes the key.
type obviousSemaphore struct {
	s      *concurrency.Session
	prefix string
	limit  int64
	keys   atomic.Int64 // numbers the keys of the session's acquires
}

func (m *obviousSemaphore) acquire(ctx context.Context) (func(context.Context) error, error) {
	cli, lease := m.s.Client(), m.s.Lease()
	key := fmt.Sprintf("%s%x-%d", m.prefix, lease, m.keys.Add(1))
	release := func(ctx context.Context) error {
		_, err := cli.Delete(ctx, key)
		return err
	}
	if _, err := cli.Put(ctx, key, "", clientv3.WithLease(lease)); err != nil {
		return nil, err
	}
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var deletes clientv3.WatchChan
	for {
		resp, err := cli.Get(ctx, m.prefix, clientv3.WithPrefix(), clientv3.WithKeysOnly(),
			clientv3.WithSort(clientv3.SortByCreateRevision, clientv3.SortAscend), clientv3.WithLimit(m.limit))
		if err != nil {
			return nil, errors.Join(err, release(context.WithoutCancel(ctx)))
		}
		for _, kv := range resp.Kvs {
			if string(kv.Key) == key {
				return release, nil
			}
		}
		if deletes == nil {
			deletes = cli.Watch(wctx, m.prefix, clientv3.WithPrefix(), clientv3.WithFilterPut(), clientv3.WithRev(resp.Header.Revision+1))
		}
		if wr, ok := <-deletes; !ok || wr.Err() != nil {
			return nil, errors.Join(cmp.Or(wr.Err(), ctx.Err(), errors.New("watch closed")), release(context.WithoutCancel(ctx)))
		}
	}
}

// BenchmarkRWMutexHandoff measures a writer handoff on a read-write lock
// with readers queued: writer 1 holds, writer 2 queues behind it, then the
// readers queue behind writer 2 (one by one, each once the previous one's
// watch is armed). The handoff is the time from writer 1's Unlock to writer
// 2's Lock returning; requests/handoff counts every Txn, Range,
// DeleteRange, Put and Watch message of all three sessions' clients in that
// window (writer 2's watch is the only one of its client: closing it closes
// the stream, and sends no cancel), reader-wakeups the watch responses with events that the readers'
// client received in it. The readers wait on writer 2, so writer 1's
// release should wake none of them, whatever their number. Then writer 2
// unlocks and the readers enter together: readers-in-ms is the time until
// the last one holds, req/reader the requests of that phase per reader.
//
// leasehold's fencing.RWMutex runs side by side with etcd's recipe
// (client/v3/experimental/recipes), one cycle of each per iteration in
// alternating order. Note that the recipe's watches start at the waiter's
// own (past) revision, which etcd serves from its unsynced loop, every
// 100 ms, until the watch catches up: its handoff depends on how long ago
// writer 2 queued, and so on the time taken to queue the readers.
func BenchmarkRWMutexHandoff(b *testing.B) {
	c := cluster(b)
	ctx := fencingtest.Context(b, 30*time.Minute)
	for _, readers := range []int{1, 10, 100} {
		b.Run("readers="+strconv.Itoa(readers), func(b *testing.B) {
			name := fmt.Sprintf("rw-handoff-%d-%s", readers, strconv.FormatInt(time.Now().UnixNano(), 36))
			sides := [2]*rwSide{oursRW(b, c, ctx, name), recipeRW(b, c, name)}
			var res [2]rwResults
			alternate(b, 3, func(side int, timed bool) {
				if timed {
					sides[side].cycle(b, ctx, readers, &res[side])
				} else {
					sides[side].cycle(b, ctx, readers, &rwResults{})
				}
			})
			for side, label := range []string{"ours", "recipe"} {
				r := &res[side]
				b.ReportMetric(percentileMs(r.handoff, 0.5), label+"-p50-ms")
				b.ReportMetric(percentileMs(r.handoff, 0.99), label+"-p99-ms")
				b.ReportMetric(float64(r.requests)/float64(b.N), label+"-req/handoff")
				b.ReportMetric(float64(r.readerWakeups)/float64(b.N), label+"-reader-wakeups")
				b.ReportMetric(percentileMs(r.readersIn, 0.5), label+"-readers-in-ms")
				b.ReportMetric(float64(r.readerRequests)/float64(b.N*readers), label+"-req/reader")
			}
			b.ReportMetric(percentileMs(res[0].handoff, 0.5)/percentileMs(res[1].handoff, 0.5), "ratio-p50")
		})
	}
}

// rwSide is one implementation's read-write lock in BenchmarkRWMutexHandoff
// and BenchmarkRWMutexReadersToWriter: two writers and the readers, each on
// its own session and client, all counting into ctr, the writers also into
// writerCtr.
type rwSide struct {
	c             *fencingtest.Cluster
	ctr           etcdtest.Counter
	writerCtr     etcdtest.Counter // both writers' clients
	writerWatches watchStats       // both writers' clients
	readerWatches watchStats       // the readers' client
	prefix        string           // where the lock's keys live
	lock          [2]func() (unlock func() error, err error)
	rlock         func() (unlock func() error, err error)
}

func (s *rwSide) options(w *watchStats) []fencingtest.ClientOption {
	opts := []fencingtest.ClientOption{etcdtest.WithCounter(&s.ctr), withWatchStats(w)}
	if w == &s.writerWatches {
		opts = append(opts, etcdtest.WithCounter(&s.writerCtr))
	}
	return opts
}

func oursRW(b *testing.B, c *fencingtest.Cluster, ctx context.Context, name string) *rwSide {
	s := &rwSide{c: c}
	var err error
	if s.prefix, err = inspect.KeyPrefix(fencing.DefaultRoot, fencing.KindRWLock, name); err != nil {
		b.Fatal(err)
	}
	rw := func(w *watchStats) *fencing.RWMutex {
		m, err := fencing.NewRWMutex(benchSession(b, c, s.options(w)...), name)
		if err != nil {
			b.Fatal(err)
		}
		return m
	}
	held := func(lock func(context.Context) (*fencing.Hold, error)) func() (func() error, error) {
		return func() (func() error, error) {
			h, err := lock(ctx)
			if err != nil {
				return nil, err
			}
			return func() error { return h.Unlock(ctx) }, nil
		}
	}
	s.lock[0], s.lock[1] = held(rw(&s.writerWatches).Lock), held(rw(&s.writerWatches).Lock)
	s.rlock = held(rw(&s.readerWatches).RLock)
	return s
}

// recipeRW uses a new recipe.RWMutex per call: it keeps the key of one
// acquisition. Its calls take no context.
func recipeRW(b *testing.B, c *fencingtest.Cluster, name string) *rwSide {
	s := &rwSide{c: c, prefix: "recipe/" + name + "/"}
	session := func(w *watchStats) *concurrency.Session {
		cs, err := concurrency.NewSession(c.Client(b, s.options(w)...), concurrency.WithTTL(10))
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { cs.Close() })
		return cs
	}
	held := func(cs *concurrency.Session, write bool) func() (func() error, error) {
		return func() (func() error, error) {
			m := recipe.NewRWMutex(cs, "recipe/"+name)
			if write {
				return m.Unlock, m.Lock()
			}
			return m.RUnlock, m.RLock()
		}
	}
	s.lock[0], s.lock[1] = held(session(&s.writerWatches), true), held(session(&s.writerWatches), true)
	s.rlock = held(session(&s.readerWatches), false)
	return s
}

// rwResults adds up what the cycles of one side measured. requests are all
// clients' in BenchmarkRWMutexHandoff, the writer's in
// BenchmarkRWMutexReadersToWriter.
type rwResults struct {
	handoff, readersIn           []time.Duration
	requests, readerRequests     int
	readerWakeups, writerWakeups int64
}

// cycle runs one writer handoff with readers queued behind writer 2, then
// lets the readers in and releases them, adding what it measured to res.
func (s *rwSide) cycle(b *testing.B, ctx context.Context, readers int, res *rwResults) {
	unlock1, err := s.lock[0]()
	if err != nil {
		b.Fatal(err)
	}
	writer2 := make(chan rwAcquired, 1)
	armed := s.writerWatches.created.Load()
	go func() {
		u, err := s.lock[1]()
		writer2 <- rwAcquired{u, time.Now(), err}
	}()
	fencingtest.WaitFor(b, time.Minute, "writer 2's watch", func() bool { return s.writerWatches.created.Load() > armed })
	inside := make(chan rwAcquired, readers)
	for range readers {
		armed := s.readerWatches.created.Load()
		go func() {
			u, err := s.rlock()
			inside <- rwAcquired{u, time.Now(), err}
		}()
		fencingtest.WaitFor(b, time.Minute, "a reader's watch", func() bool { return s.readerWatches.created.Load() > armed })
	}
	fencingtest.WaitFor(b, time.Minute, "every key queued", func() bool { return queued(b, s.c, s.prefix) == int64(readers+2) })

	r0, wk0 := kvRequests(&s.ctr), s.readerWatches.wakeups.Load()
	start := time.Now()
	if err := unlock1(); err != nil {
		b.Fatal(err)
	}
	w2 := <-writer2
	if w2.err != nil {
		b.Fatal(w2.err)
	}
	res.handoff = append(res.handoff, w2.at.Sub(start))
	res.requests += kvRequests(&s.ctr) - r0
	res.readerWakeups += s.readerWatches.wakeups.Load() - wk0

	r1 := kvRequests(&s.ctr)
	start = time.Now()
	if err := w2.unlock(); err != nil {
		b.Fatal(err)
	}
	var last time.Time
	unlocks := make([]func() error, 0, readers)
	for range readers {
		r := <-inside
		if r.err != nil {
			b.Fatal(r.err)
		}
		unlocks = append(unlocks, r.unlock)
		if r.at.After(last) {
			last = r.at
		}
	}
	res.readersIn = append(res.readersIn, last.Sub(start))
	res.readerRequests += kvRequests(&s.ctr) - r1
	for _, u := range unlocks {
		if err := u(); err != nil {
			b.Fatal(err)
		}
	}
}

type rwAcquired struct {
	unlock func() error
	at     time.Time
	err    error
}

// acquired is what a waiting Acquire or Lock returned, and when.
type acquired struct {
	hold *fencing.Hold
	at   time.Time
	err  error
}

// benchSession returns a leasehold session, TTL 10 s, on a client of its
// own made with opts; both end with b.
func benchSession(b *testing.B, c *fencingtest.Cluster, opts ...fencingtest.ClientOption) *fencing.Session {
	s, err := fencing.NewSession(context.Background(), c.Client(b, opts...), fencing.WithTTL(10*time.Second))
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { s.Close(context.Background()) })
	return s
}

// kvMethods are the requests that acquiring and releasing send; lease
// renewals run on their own clock and are left out.
var kvMethods = []string{"Txn", "Range", "DeleteRange", "Put", "Watch"}

func kvRequests(ctr *etcdtest.Counter) int {
	n := 0
	for _, m := range kvMethods {
		n += ctr.Requests(m)
	}
	return n
}

// touched counts the keys under prefix written again since their creation.
func touched(b *testing.B, c *fencingtest.Cluster, prefix string) int {
	resp, err := c.Admin.Get(context.Background(), prefix, clientv3.WithPrefix(), clientv3.WithKeysOnly())
	if err != nil {
		b.Fatal(err)
	}
	n := 0
	for _, kv := range resp.Kvs {
		if kv.ModRevision > kv.CreateRevision {
			n++
		}
	}
	return n
}

// watchStats counts, below clientv3, what the watches of the clients it is
// attached to (withWatchStats) receive: created notices (a watch armed on
// the server), and responses that carry events, each of which wakes one
// watch, with their events. For idle, it also counts the watch creates
// sent and the KV calls (Range, Txn, ...) in flight, and notes when the
// clients last sent or received any message (last, in Unix nanoseconds).
type watchStats struct{ created, wakeups, events, creates, calls, last atomic.Int64 }

// idle reports whether the clients have no KV call in flight and no watch
// waiting to be armed, and have sent and received nothing for d.
func (w *watchStats) idle(d time.Duration) bool {
	return w.calls.Load() == 0 && w.creates.Load() == w.created.Load() && time.Now().UnixNano()-w.last.Load() >= d.Nanoseconds()
}

func withWatchStats(w *watchStats) fencingtest.ClientOption {
	return func(cfg *clientv3.Config) { cfg.DialOptions = append(cfg.DialOptions, grpc.WithStatsHandler(w)) }
}

// kvCall marks the context of a call of etcd's KV service, which is unary.
type kvCall struct{}

// HandleRPC implements stats.Handler.
func (w *watchStats) HandleRPC(ctx context.Context, s stats.RPCStats) {
	if !s.IsClient() {
		return
	}
	switch s := s.(type) {
	case *stats.Begin:
		if ctx.Value(kvCall{}) != nil {
			w.calls.Add(1)
		}
	case *stats.End:
		if ctx.Value(kvCall{}) != nil {
			w.calls.Add(-1)
		}
	case *stats.OutPayload:
		w.last.Store(time.Now().UnixNano())
		if req, ok := s.Payload.(*etcdserverpb.WatchRequest); ok && req.GetCreateRequest() != nil {
			w.creates.Add(1)
		}
	case *stats.InPayload:
		w.last.Store(time.Now().UnixNano())
		resp, ok := s.Payload.(*etcdserverpb.WatchResponse)
		if !ok {
			return
		}
		if resp.Created {
			w.created.Add(1)
		}
		if len(resp.Events) > 0 {
			w.wakeups.Add(1)
			w.events.Add(int64(len(resp.Events)))
		}
	}
}

// TagRPC implements stats.Handler.
func (w *watchStats) TagRPC(ctx context.Context, info *stats.RPCTagInfo) context.Context {
	if strings.HasPrefix(info.FullMethodName, "/etcdserverpb.KV/") {
		return context.WithValue(ctx, kvCall{}, true)
	}
	return ctx
}

// TagConn implements stats.Handler.
func (w *watchStats) TagConn(ctx context.Context, _ *stats.ConnTagInfo) context.Context { return ctx }

// HandleConn implements stats.Handler.
func (w *watchStats) HandleConn(context.Context, stats.ConnStats) {}
