package bench_test

import (
	"context"
	"strconv"
	"testing"

	"github.com/leasehold/leasehold/fencing"
)

// BenchmarkWeightedVsOneUnit compares a hold of three units of a semaphore
// of limit 3 with a hold of one unit of a semaphore of limit 1, which it
// must match: one key per hold whatever its units. Its modes, timing and
// metrics are BenchmarkSemaphoreVsMutex's.
func BenchmarkWeightedVsOneUnit(b *testing.B) {
	pairs(b, "weighted-vs-one", [2]string{"weighted", "one-unit"}, func(s *fencing.Session, name string) [2]func(context.Context) (*fencing.Hold, error) {
		var acquire [2]func(context.Context) (*fencing.Hold, error)
		for side, units := range []int{3, 1} {
			sem, err := fencing.NewSemaphore(s, name+"-"+strconv.Itoa(units), units)
			if err != nil {
				b.Fatal(err)
			}
			acquire[side] = func(ctx context.Context) (*fencing.Hold, error) { return sem.AcquireN(ctx, units) }
		}
		return acquire
	})
}
