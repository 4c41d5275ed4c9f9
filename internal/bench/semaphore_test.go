package bench_test

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/leasehold/leasehold/fencing"
	"github.com/leasehold/leasehold/fencing/inspect"
	"github.com/leasehold/leasehold/internal/etcdtest"
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
	c := cluster(b)
	ctx := etcdtest.Context(b, 10*time.Minute)
	for _, mode := range []string{"uncontended", "handoff"} {
		b.Run(mode, func(b *testing.B) {
			var waiterWatches watchStats
			holder, waiter := benchSession(b, c), benchSession(b, c, withWatchStats(&waiterWatches))
			name := "semaphore-vs-mutex-" + mode + "-" + strconv.FormatInt(time.Now().UnixNano(), 36)
			// acquire[side][0] takes on the holder's session, [1] on the waiter's.
			var acquire [2][2]func(context.Context) (*fencing.Hold, error)
			for i, s := range []*fencing.Session{holder, waiter} {
				sem, err := fencing.NewSemaphore(s, name, 1)
				if err != nil {
					b.Fatal(err)
				}
				m, err := fencing.NewMutex(s, name)
				if err != nil {
					b.Fatal(err)
				}
				acquire[0][i], acquire[1][i] = sem.Acquire, m.Lock
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
				etcdtest.WaitFor(b, time.Minute, "the waiter's watch", func() bool { return waiterWatches.created.Load() > armed })
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
			var d [2][]time.Duration
			for range 20 { // warm both queues and sessions
				cycle(0)
				cycle(1)
			}
			b.ResetTimer()
			for n := range b.N {
				for _, side := range []int{n % 2, 1 - n%2} {
					d[side] = append(d[side], cycle(side))
				}
			}
			b.StopTimer()
			for side, label := range []string{"sem", "mutex"} {
				b.ReportMetric(percentileMs(d[side], 0.5), label+"-p50-ms")
				b.ReportMetric(percentileMs(d[side], 0.99), label+"-p99-ms")
			}
			b.ReportMetric(percentileMs(d[0], 0.5)/percentileMs(d[1], 0.5), "ratio-p50")
		})
	}
}

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
// the semaphore, also until the keepers' background touches landed), over
// the releases. Each admitted waiter cancels its watch with one message,
// except the chain's last: its watch is the client's last, and closing it
// closes the stream instead; so a flat cost of k requests shows as
// k - 1/waiters. wakeups/release counts the watch responses carrying events
// that the clients received (each wakes one watch), events/release their
// events, ms/release the window's time over the releases.
func BenchmarkSemaphoreRequestsPerRelease(b *testing.B) {
	c := cluster(b)
	ctx := etcdtest.Context(b, 30*time.Minute)
	for _, waiters := range []int{1, 10, 100, 1000} {
		for _, impl := range []string{"mutex", "semaphore-2"} {
			b.Run(fmt.Sprintf("waiters=%d/%s", waiters, impl), func(b *testing.B) {
				var (
					ctr     etcdtest.Counter
					watches watchStats
				)
				counted := []etcdtest.ClientOption{etcdtest.WithCounter(&ctr), withWatchStats(&watches)}
				holders, queue := benchSession(b, c, counted...), benchSession(b, c, counted...)
				name := fmt.Sprintf("per-release-%d-%s-%s", waiters, impl, strconv.FormatInt(time.Now().UnixNano(), 36))
				kind, limit, lockOn := fencing.KindLock, 1, func(s *fencing.Session) func(context.Context) (*fencing.Hold, error) {
					m, err := fencing.NewMutex(s, name)
					if err != nil {
						b.Fatal(err)
					}
					return m.Lock
				}
				if impl == "semaphore-2" {
					kind, limit, lockOn = fencing.KindSemaphore, 2, func(s *fencing.Session) func(context.Context) (*fencing.Hold, error) {
						m, err := fencing.NewSemaphore(s, name, 2)
						if err != nil {
							b.Fatal(err)
						}
						return m.Acquire
					}
				}
				prefix, err := inspect.KeyPrefix(fencing.DefaultRoot, kind, name)
				if err != nil {
					b.Fatal(err)
				}
				hold, wait := lockOn(holders), lockOn(queue)
				first := min(limit, waiters)        // holders released to start the chain
				releasers := int64(waiters - first) // waiters that release at once; the rest keep
				var (
					requests, wakeups, events int
					window                    time.Duration
					before                    = map[string]int{}
					spent                     = map[string]int{}
				)
				b.ResetTimer()
				for range b.N {
					b.StopTimer()
					held := make([]*fencing.Hold, limit)
					for i := range held {
						if held[i], err = hold(ctx); err != nil {
							b.Fatal(err)
						}
					}
					var (
						admitted atomic.Int64
						wg       sync.WaitGroup
						results  = make(chan *fencing.Hold, waiters) // nil once released
					)
					for range waiters {
						armed := watches.created.Load()
						wg.Go(func() {
							h, err := wait(ctx)
							if err != nil {
								b.Error(err)
							} else if admitted.Add(1) <= releasers {
								if err := h.Unlock(ctx); err != nil {
									b.Error(err)
								}
								h = nil
							}
							results <- h
						})
						etcdtest.WaitFor(b, time.Minute, "the waiter's watch", func() bool { return watches.created.Load() > armed })
					}
					etcdtest.WaitFor(b, time.Minute, "every key queued", func() bool { return queued(b, c, prefix) == int64(limit+waiters) })
					for _, m := range slices.Concat(kvMethods, []string{"LeaseTimeToLive", "LeaseGrant", "LeaseRevoke"}) {
						before[m] = ctr.Requests(m)
					}
					r0, wk0, ev0 := kvRequests(&ctr), watches.wakeups.Load(), watches.events.Load()
					b.StartTimer()
					start := time.Now()
					for _, h := range held[:first] {
						if err := h.Unlock(ctx); err != nil {
							b.Fatal(err)
						}
					}
					var keep []*fencing.Hold
					for range waiters {
						if h := <-results; h != nil {
							keep = append(keep, h)
						}
					}
					window += time.Since(start)
					b.StopTimer()
					// An admitted waiter cancels its watch in the background (but
					// the last watch of the client closes the stream instead, with
					// no message), and a semaphore's touches its key: count those
					// requests too.
					cancels := func() int { return ctr.Requests("Watch") - before["Watch"] }
					if !within(5*time.Second, func() bool { return cancels() >= waiters-1 }) {
						b.Logf("only %d of %d watch cancels sent", cancels(), waiters-1)
					}
					if limit > 1 {
						etcdtest.WaitFor(b, time.Minute, "the keepers' touches", func() bool { return touched(b, c, prefix) >= len(keep) })
					}
					requests += kvRequests(&ctr) - r0
					wakeups += int(watches.wakeups.Load() - wk0)
					events += int(watches.events.Load() - ev0)
					for m, n := range before {
						spent[m] += ctr.Requests(m) - n
					}
					for _, h := range append(held[first:], keep...) {
						if err := h.Unlock(ctx); err != nil {
							b.Fatal(err)
						}
					}
					wg.Wait()
					etcdtest.WaitFor(b, time.Minute, "an empty queue", func() bool { return queued(b, c, prefix) == 0 })
					b.StartTimer()
				}
				b.StopTimer()
				releases := float64(waiters * b.N)
				b.ReportMetric(float64(requests)/releases, "requests/release")
				b.ReportMetric(float64(wakeups)/releases, "wakeups/release")
				b.ReportMetric(float64(events)/releases, "events/release")
				b.ReportMetric(float64(window.Microseconds())/1000/releases, "ms/release")
				b.Logf("requests by method over %v releases: %v", releases, spent)
			})
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
	ctx := etcdtest.Context(b, 30*time.Minute)
	for _, readers := range []int{1, 10, 100} {
		b.Run("readers="+strconv.Itoa(readers), func(b *testing.B) {
			name := fmt.Sprintf("rw-handoff-%d-%s", readers, strconv.FormatInt(time.Now().UnixNano(), 36))
			sides := [2]*rwSide{oursRW(b, c, ctx, name), recipeRW(b, c, name)}
			var res [2]rwResults
			for range 3 { // warm both
				sides[0].cycle(b, ctx, readers, &rwResults{})
				sides[1].cycle(b, ctx, readers, &rwResults{})
			}
			b.ResetTimer()
			for n := range b.N {
				for _, side := range []int{n % 2, 1 - n%2} {
					sides[side].cycle(b, ctx, readers, &res[side])
				}
			}
			b.StopTimer()
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

// rwSide is one implementation's read-write lock in BenchmarkRWMutexHandoff:
// two writers and the readers, each on its own session and client, all
// counting into ctr.
type rwSide struct {
	c             *etcdtest.Cluster
	ctr           etcdtest.Counter
	writerWatches watchStats // both writers' clients
	readerWatches watchStats // the readers' client
	prefix        string     // where the lock's keys live
	lock          [2]func() (unlock func() error, err error)
	rlock         func() (unlock func() error, err error)
}

func (s *rwSide) options(w *watchStats) []etcdtest.ClientOption {
	return []etcdtest.ClientOption{etcdtest.WithCounter(&s.ctr), withWatchStats(w)}
}

func oursRW(b *testing.B, c *etcdtest.Cluster, ctx context.Context, name string) *rwSide {
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
func recipeRW(b *testing.B, c *etcdtest.Cluster, name string) *rwSide {
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

type rwResults struct {
	handoff, readersIn       []time.Duration
	requests, readerRequests int
	readerWakeups            int64
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
	etcdtest.WaitFor(b, time.Minute, "writer 2's watch", func() bool { return s.writerWatches.created.Load() > armed })
	inside := make(chan rwAcquired, readers)
	for range readers {
		armed := s.readerWatches.created.Load()
		go func() {
			u, err := s.rlock()
			inside <- rwAcquired{u, time.Now(), err}
		}()
		etcdtest.WaitFor(b, time.Minute, "a reader's watch", func() bool { return s.readerWatches.created.Load() > armed })
	}
	etcdtest.WaitFor(b, time.Minute, "every key queued", func() bool { return queued(b, s.c, s.prefix) == int64(readers+2) })

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
func benchSession(b *testing.B, c *etcdtest.Cluster, opts ...etcdtest.ClientOption) *fencing.Session {
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

// within polls cond until it holds, for at most d, and reports whether it
// held: etcdtest.WaitFor for a condition whose failure is worth a note, not
// a failed benchmark.
func within(d time.Duration, cond func() bool) bool {
	for end := time.Now().Add(d); !cond(); time.Sleep(5 * time.Millisecond) {
		if time.Now().After(end) {
			return false
		}
	}
	return true
}

// touched counts the keys under prefix written again since their creation.
func touched(b *testing.B, c *etcdtest.Cluster, prefix string) int {
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
// watch, with their events.
type watchStats struct{ created, wakeups, events atomic.Int64 }

func withWatchStats(w *watchStats) etcdtest.ClientOption {
	return func(cfg *clientv3.Config) { cfg.DialOptions = append(cfg.DialOptions, grpc.WithStatsHandler(w)) }
}

// HandleRPC implements stats.Handler.
func (w *watchStats) HandleRPC(_ context.Context, s stats.RPCStats) {
	in, ok := s.(*stats.InPayload)
	if !ok || !in.Client {
		return
	}
	resp, ok := in.Payload.(*etcdserverpb.WatchResponse)
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

// TagRPC implements stats.Handler.
func (w *watchStats) TagRPC(ctx context.Context, _ *stats.RPCTagInfo) context.Context { return ctx }

// TagConn implements stats.Handler.
func (w *watchStats) TagConn(ctx context.Context, _ *stats.ConnTagInfo) context.Context { return ctx }

// HandleConn implements stats.Handler.
func (w *watchStats) HandleConn(context.Context, stats.ConnStats) {}
