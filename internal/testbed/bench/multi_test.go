package bench_test

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/leasehold/leasehold/fencing"
	"github.com/leasehold/leasehold/internal/testbed/etcdtest"
	"go.etcd.io/etcd/client/v3/concurrency"
)

// BenchmarkMultiLock measures an uncontended lock and unlock of k names
// (k = 1, 2, 4, 8) three ways, interleaved: every iteration runs one cycle
// of each, in an order that rotates, so drift in the machine's load falls
// on all alike. multi is one fencing.MultiMutex over the k names; mutexes
// is k fencing.Mutex Locks in sorted order (the usual way to avoid
// deadlock), then their Unlocks in reverse; concurrency is the same with
// etcd's concurrency.Mutex. Each side has a session and a client of its
// own, whose requests are counted (renewals left out). It reports each
// side's p50 of the whole cycle and of its acquire, and its requests per
// cycle.
//
//	go test ./internal/testbed/bench -run '^$' -bench MultiLock -benchtime 300x
func BenchmarkMultiLock(b *testing.B) {
	c := cluster(b)
	ctx := context.Background()
	sides := []string{"multi", "mutexes", "concurrency"}
	for _, k := range []int{1, 2, 4, 8} {
		b.Run("names="+strconv.Itoa(k), func(b *testing.B) {
			base := "multi-bench-" + strconv.Itoa(k) + "-" + strconv.FormatInt(time.Now().UnixNano(), 36)
			names := make([]string, k)
			for i := range names {
				names[i] = fmt.Sprintf("%s/%02d", base, i) // sorted
			}
			var ctrs [3]etcdtest.Counter
			multiSession := benchSession(b, c, etcdtest.WithCounter(&ctrs[0]))
			mutexSession := benchSession(b, c, etcdtest.WithCounter(&ctrs[1]))
			theirs, err := concurrency.NewSession(c.Client(b, etcdtest.WithCounter(&ctrs[2])), concurrency.WithTTL(10))
			if err != nil {
				b.Fatal(err)
			}
			b.Cleanup(func() { theirs.Close() })
			multi, err := fencing.NewMultiMutex(multiSession, names...)
			if err != nil {
				b.Fatal(err)
			}
			mutexes := make([]*fencing.Mutex, k)
			for i, name := range names {
				if mutexes[i], err = fencing.NewMutex(mutexSession, name); err != nil {
					b.Fatal(err)
				}
			}
			// lock[side] acquires the k names and returns their release.
			lock := [3]func() (func() error, error){
				func() (func() error, error) {
					h, err := multi.Lock(ctx)
					if err != nil {
						return nil, err
					}
					return func() error { return h.Unlock(ctx) }, nil
				},
				func() (func() error, error) {
					holds := make([]*fencing.Hold, 0, k)
					for _, m := range mutexes {
						h, err := m.Lock(ctx)
						if err != nil {
							return nil, err
						}
						holds = append(holds, h)
					}
					return func() error {
						for _, h := range slices.Backward(holds) {
							if err := h.Unlock(ctx); err != nil {
								return err
							}
						}
						return nil
					}, nil
				},
				func() (func() error, error) {
					held := make([]*concurrency.Mutex, 0, k)
					for _, name := range names {
						m := concurrency.NewMutex(theirs, "concurrency/"+name)
						if err := m.Lock(ctx); err != nil {
							return nil, err
						}
						held = append(held, m)
					}
					return func() error {
						for _, m := range slices.Backward(held) {
							if err := m.Unlock(ctx); err != nil {
								return err
							}
						}
						return nil
					}, nil
				},
			}
			var (
				total, acq [3][]time.Duration
				requests   [3]int
			)
			cycle := func(side int, timed bool) {
				before := kvRequests(&ctrs[side])
				start := time.Now()
				unlock, err := lock[side]()
				if err != nil {
					b.Fatal(err)
				}
				mid := time.Now()
				if err := unlock(); err != nil {
					b.Fatal(err)
				}
				if timed {
					total[side] = append(total[side], time.Since(start))
					acq[side] = append(acq[side], mid.Sub(start))
					requests[side] += kvRequests(&ctrs[side]) - before
				}
			}
			for range 20 { // warm every client, session and queue
				for side := range sides {
					cycle(side, false)
				}
			}
			b.ResetTimer()
			for n := range b.N {
				for i := range sides {
					cycle((n+i)%len(sides), true)
				}
			}
			b.StopTimer()
			for side, label := range sides {
				b.ReportMetric(percentileMs(total[side], 0.5), label+"-p50-ms")
				b.ReportMetric(percentileMs(acq[side], 0.5), label+"-acq-p50-ms")
				b.ReportMetric(float64(requests[side])/float64(b.N), label+"-req/cycle")
			}
		})
	}
}
