package bench_test

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/leasehold/leasehold/fencing/fencingtest"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// BenchmarkUncontended measures Lock+Unlock, and TryLock+Unlock, with
// nobody else on the lock; leasehold+observed adds an Observer and a debug
// logger, to show what the operability hooks cost.
//
// Each run locks a name of its own. etcd keeps every deleted key of a name
// in its index until the next compaction, and the range each acquire makes
// over the name walks them: on a shared name, every run (and, with -count,
// every repetition) would start where the previous one left the history,
// which once passed for a cost of running later. BenchmarkLockNameHistory
// measures that cost on its own.
func BenchmarkUncontended(b *testing.B) {
	c := cluster(b)
	runs := 0
	for _, op := range []string{"Lock", "TryLock"} {
		for _, impl := range append(impls, observed) {
			b.Run(op+"/"+impl, func(b *testing.B) {
				runs++
				ls, ctrs := lockers(b, c, impl, fmt.Sprintf("uncontended-%s-%d", op, runs), 1)
				lock := ls[0].lock
				if op == "TryLock" {
					lock = ls[0].tryLock
				}
				ctx := context.Background()
				var lat latencies
				before := ctrs.requests()
				b.ResetTimer()
				for range b.N {
					start := time.Now()
					unlock, err := lock(ctx)
					if err != nil {
						b.Fatal(err)
					}
					if err := unlock(ctx); err != nil {
						b.Fatal(err)
					}
					lat.add(time.Since(start))
				}
				b.StopTimer()
				lat.report(b)
				b.ReportMetric(float64(ctrs.requests()-before)/float64(b.N), "req/op")
			})
		}
	}
}

// BenchmarkHandoff measures the time from a holder's Unlock to the next
// waiter's Lock returning, with W waiters always queued, each on its own
// session: every participant locks, unlocks and queues again. req/op is the
// requests of one cycle: release, next acquire, re-queue.
func BenchmarkHandoff(b *testing.B) {
	c := cluster(b)
	for _, waiters := range []int{1, 10, 100, 1000} {
		for _, impl := range impls {
			b.Run(fmt.Sprintf("waiters=%d/%s", waiters, impl), func(b *testing.B) {
				ls, ctrs := lockers(b, c, impl, fmt.Sprintf("handoff-%d", waiters), waiters+1)
				handoffs(b, ls, ctrs)
			})
		}
	}
}

func handoffs(b *testing.B, ls []locker, ctrs *counters) {
	var (
		lat      latencies
		count    atomic.Int64
		released atomic.Int64 // UnixNano of the last release; 0 before the first
		warm     = int64(len(ls))
		total    = warm + int64(b.N)
		base     atomic.Int64 // request count when measuring starts
		wg       sync.WaitGroup
		ctx      = context.Background()
	)
	b.ResetTimer()
	for _, l := range ls {
		wg.Go(func() {
			for count.Load() < total {
				unlock, err := l.lock(ctx)
				if err != nil {
					b.Error(err)
					return
				}
				now := time.Now()
				n := count.Add(1)
				if n == warm {
					base.Store(int64(ctrs.requests()))
				}
				if rel := released.Load(); n > warm && rel != 0 {
					lat.add(now.Sub(time.Unix(0, rel)))
				}
				released.Store(time.Now().UnixNano())
				if err := unlock(ctx); err != nil {
					b.Error(err)
					return
				}
			}
		})
	}
	wg.Wait()
	b.StopTimer()
	lat.report(b)
	b.ReportMetric(float64(int64(ctrs.requests())-base.Load())/float64(count.Load()-warm), "req/op")
}

// BenchmarkHandoffJustQueued releases the lock right after the waiter
// queued: the moment a watch that starts at an old revision is slowest.
func BenchmarkHandoffJustQueued(b *testing.B) {
	c := cluster(b)
	for _, impl := range impls {
		b.Run(impl, func(b *testing.B) {
			ls, _ := lockers(b, c, impl, "just-queued", 2)
			ctx := context.Background()
			var lat latencies
			b.ResetTimer()
			for range b.N {
				unlock, err := ls[0].lock(ctx)
				if err != nil {
					b.Fatal(err)
				}
				got := make(chan func(context.Context) error, 1)
				go func() {
					u, err := ls[1].lock(ctx)
					if err != nil {
						b.Error(err)
					}
					got <- u
				}()
				for queued(b, c, ls[1].prefix()) < 2 {
				}
				start := time.Now()
				if err := unlock(ctx); err != nil {
					b.Fatal(err)
				}
				u := <-got
				lat.add(time.Since(start))
				if err := u(ctx); err != nil {
					b.Fatal(err)
				}
			}
			b.StopTimer()
			lat.report(b)
		})
	}
}

func queued(b *testing.B, c *fencingtest.Cluster, prefix string) int64 {
	resp, err := c.Admin.Get(context.Background(), prefix, clientv3.WithPrefix(), clientv3.WithCountOnly())
	if err != nil {
		b.Fatal(err)
	}
	return resp.Count
}
