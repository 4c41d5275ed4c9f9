package bench_test

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/leasehold/leasehold/internal/testbed/etcdtest"

	"github.com/leasehold/leasehold/fencing"
	"github.com/leasehold/leasehold/fencing/fencingtest"
	"github.com/leasehold/leasehold/internal/keyspace"
)

// BenchmarkDroppedDeletesHandoff measures the time from an Unlock's start to
// the waiter owning when the first two attempts of the Unlock's delete get
// no answer, as etcd does to writes a follower forwards to a leader just
// removed (#29): the first attempt's limit, then the resends'.
//
//	go test ./internal/bench -run '^$' -bench DroppedDeletes -benchtime 20x
func BenchmarkDroppedDeletesHandoff(b *testing.B) {
	c := cluster(b)
	var gaps latencies
	for i := range b.N {
		name := fmt.Sprint("dropped-deletes/", i)
		prefix := keyspace.Prefix(fencing.DefaultRoot, string(fencing.KindLock), name)
		var dropped atomic.Int32
		r := &etcdtest.Replies{Decide: func(_ string, req any) etcdtest.Fault {
			if etcdtest.DeletesUnder(req, prefix) && dropped.Add(1) <= 2 {
				return etcdtest.Hang
			}
			return etcdtest.Pass
		}}
		h := fencingtest.Lock(b, fencingtest.Session(b, c.Client(b, r.Option())), name)
		waiter := etcdtest.Mutex(b, fencingtest.Session(b, c.Client(b)), name)
		owned := make(chan time.Time, 1)
		go func() {
			h, err := waiter.Lock(context.Background())
			if err != nil {
				b.Error(err)
				close(owned)
				return
			}
			owned <- time.Now()
			h.Unlock(context.Background())
		}()
		fencingtest.WaitFor(b, fencingtest.Wait, "the waiter to queue", func() bool {
			return len(c.Queue(b, fencing.KindLock, name).Entries) == 2
		})
		start := time.Now()
		if err := h.Unlock(context.Background()); err != nil {
			b.Fatal(err)
		}
		if at, ok := <-owned; ok {
			gaps.add(at.Sub(start))
		}
	}
	gaps.report(b)
}
