package bench_test

import (
	"fmt"
	"strconv"
	"testing"
	"time"

	"github.com/leasehold/leasehold/fencing/fencingtest"
)

// BenchmarkRWMutexReadersToWriter measures the handoff from many readers to
// one writer when the readers leave newest first: the order in which a
// writer that waits on the newest key ahead of it (etcd's recipe) is woken
// once per reader. Per iteration the readers take their read holds one
// after another on one session, one writer queues behind them on its own
// session and client, and once its watch is armed (and its client idle,
// watchStats.idle) the readers release newest first, one by one. Each
// release but the last waits until the writer is done with it, so that
// each meets a settled writer, as readers leaving at their own pace would:
// until the writer's client was woken (a watch response with events) and
// has then been idle for settleTime, or, should the release not wake it,
// idle for unwoken.
//
// writer-req/handoff counts the Txn, Range, DeleteRange, Put and Watch
// messages of the writer's client from the first release until its Lock
// returned, writer-wakeups the watch responses with events it received in
// that window. The handoff (p50-ms, p99-ms) is the time from the last
// reader's RUnlock being called to the writer's Lock returning.
//
// leasehold's fencing.RWMutex runs side by side with etcd's recipe, one
// cycle of each per iteration in alternating order. The recipe's writer
// watches from its own (past) revision, so each of its watches starts in
// etcd's unsynced loop (see BenchmarkRWMutexHandoff): each wakeup, the last
// one too, may come up to 100 ms after its release.
func BenchmarkRWMutexReadersToWriter(b *testing.B) {
	c := cluster(b)
	ctx := fencingtest.Context(b, time.Hour)
	for _, readers := range []int{1, 10, 100, 1000} {
		b.Run("readers="+strconv.Itoa(readers), func(b *testing.B) {
			name := fmt.Sprintf("readers-to-writer-%d-%s", readers, strconv.FormatInt(time.Now().UnixNano(), 36))
			sides := [2]*rwSide{oursRW(b, c, ctx, name), recipeRW(b, c, name)}
			var res [2]rwResults
			alternate(b, 1, func(side int, timed bool) {
				if timed {
					sides[side].readersToWriter(b, readers, &res[side])
				} else { // warm both, with one reader
					sides[side].readersToWriter(b, 1, &rwResults{})
				}
			})
			for side, label := range []string{"ours", "recipe"} {
				r := &res[side]
				b.ReportMetric(float64(r.requests)/float64(b.N), label+"-writer-req/handoff")
				b.ReportMetric(float64(r.writerWakeups)/float64(b.N), label+"-writer-wakeups")
				b.ReportMetric(percentileMs(r.handoff, 0.5), label+"-p50-ms")
				b.ReportMetric(percentileMs(r.handoff, 0.99), label+"-p99-ms")
			}
		})
	}
}

const (
	// settleTime is how long a client that was woken stays idle once it
	// has done with the wakeup: longer than the gaps between its calls.
	settleTime = 3 * time.Millisecond
	// unwoken is how long a writer stays idle after a release that did not
	// wake it: longer than etcd's unsynced-watch loop (100 ms).
	unwoken = 250 * time.Millisecond
)

// readersToWriter runs one cycle of BenchmarkRWMutexReadersToWriter with
// writer 1 and readers read holds, adding what it measured to res.
func (s *rwSide) readersToWriter(b *testing.B, readers int, res *rwResults) {
	w := &s.writerWatches
	runlocks := make([]func() error, readers)
	for i := range runlocks {
		var err error
		if runlocks[i], err = s.rlock(); err != nil {
			b.Fatal(err)
		}
	}
	writer := make(chan rwAcquired, 1)
	armed := w.created.Load()
	go func() {
		u, err := s.lock[0]()
		writer <- rwAcquired{u, time.Now(), err}
	}()
	fencingtest.WaitFor(b, time.Minute, "the writer's watch", func() bool { return w.created.Load() > armed && w.idle(settleTime) })
	fencingtest.WaitFor(b, time.Minute, "every key queued", func() bool { return queued(b, s.c, s.prefix) == int64(readers+1) })

	r0, wk0 := kvRequests(&s.writerCtr), w.wakeups.Load()
	var start time.Time
	for i := readers - 1; i >= 0; i-- {
		woken := w.wakeups.Load()
		start = time.Now()
		if err := runlocks[i](); err != nil {
			b.Fatal(err)
		}
		if i == 0 {
			break
		}
		fencingtest.WaitFor(b, time.Minute, "the writer to settle", func() bool {
			return w.idle(settleTime) && (w.wakeups.Load() > woken || w.idle(unwoken))
		})
		if len(writer) > 0 {
			b.Fatalf("the writer holds while %d readers do", i)
		}
	}
	got := <-writer
	if got.err != nil {
		b.Fatal(got.err)
	}
	res.handoff = append(res.handoff, got.at.Sub(start))
	res.requests += kvRequests(&s.writerCtr) - r0
	res.writerWakeups += w.wakeups.Load() - wk0
	if err := got.unlock(); err != nil {
		b.Fatal(err)
	}
}
