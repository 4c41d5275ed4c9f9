package bench_test

import (
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/leasehold/leasehold/fencing"
	"github.com/leasehold/leasehold/fencing/fencingtest"
)

// BenchmarkWeightedVsOneUnit compares a hold of three units of a semaphore
// of limit 3 with a hold of one unit of a semaphore of limit 1, which it
// must match: one key per hold whatever its units. uncontended is
// AcquireN+Unlock on a free name; handoff is the time from a holder's
// Unlock to a queued waiter's AcquireN returning, the waiter on another
// session whose watch is armed. Every iteration runs one cycle of each, in
// alternating order. It reports each side's p50 and p99 and ratio-p50, the
// weighted p50 over the one unit's.
func BenchmarkWeightedVsOneUnit(b *testing.B) {
	c := cluster(b)
	ctx := fencingtest.Context(b, 10*time.Minute)
	for _, mode := range []string{"uncontended", "handoff"} {
		b.Run(mode, func(b *testing.B) {
			var waiterWatches watchStats
			holder, waiter := benchSession(b, c), benchSession(b, c, withWatchStats(&waiterWatches))
			name := "weighted-vs-one-" + mode + "-" + strconv.FormatInt(time.Now().UnixNano(), 36)
			// acquire[side][0] takes on the holder's session, [1] on the waiter's.
			var acquire [2][2]func(context.Context) (*fencing.Hold, error)
			for i, s := range []*fencing.Session{holder, waiter} {
				for side, units := range []int{3, 1} {
					sem, err := fencing.NewSemaphore(s, name+"-"+strconv.Itoa(units), units)
					if err != nil {
						b.Fatal(err)
					}
					acquire[side][i] = func(ctx context.Context) (*fencing.Hold, error) { return sem.AcquireN(ctx, units) }
				}
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
				fencingtest.WaitFor(b, time.Minute, "the waiter's watch", func() bool { return waiterWatches.created.Load() > armed })
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
			d := alternateTimes(b, 20, cycle)
			for side, label := range []string{"weighted", "one-unit"} {
				b.ReportMetric(percentileMs(d[side], 0.5), label+"-p50-ms")
				b.ReportMetric(percentileMs(d[side], 0.99), label+"-p99-ms")
			}
			b.ReportMetric(percentileMs(d[0], 0.5)/percentileMs(d[1], 0.5), "ratio-p50")
		})
	}
}
