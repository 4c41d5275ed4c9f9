package bench_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/leasehold/leasehold/fencing"
	"github.com/leasehold/leasehold/fencing/fencingtest"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/client/v3/concurrency"
)

// BenchmarkLeaderReplaced measures, per replacement of the raft leader's
// member (removed, wiped, added back empty) while 5 workers lock and unlock
// one name, the longest stretch from an Unlock's start to the next owner
// (#29's maintenance finding), for leasehold and concurrency on the same
// three-member cluster.
//
//	go test ./internal/bench -run '^$' -bench LeaderReplaced -benchtime 5x
func BenchmarkLeaderReplaced(b *testing.B) {
	c := fencingtest.Three(b)
	for _, impl := range []string{"leasehold", "concurrency"} {
		b.Run(impl, func(b *testing.B) {
			h := &replaced{}
			ctx, stop := context.WithCancel(context.Background())
			var wg sync.WaitGroup
			for i := range 5 {
				cli := c.Client(b)
				wg.Go(func() {
					for ctx.Err() == nil {
						if impl == "leasehold" {
							h.leasehold(ctx, cli, fmt.Sprint("w", i))
						} else {
							h.concurrency(ctx, cli)
						}
					}
				})
			}
			var gaps latencies
			h.progress(b)
			for range b.N {
				h.longest()
				c.ReplaceMember(b, c.WaitLeader(b))
				h.progress(b)
				gaps.add(h.longest())
			}
			stop()
			wg.Wait()
			gaps.report(b)
		})
	}
}

// replaced tracks the workers' replaced of one lock.
type replaced struct {
	mu       sync.Mutex
	acquired int
	released time.Time     // an Unlock began; zero once the next owner took over
	gap      time.Duration // the longest since the last call of longest
}

const replacedLock = "bench/replaced"

func (h *replaced) leasehold(ctx context.Context, cli *clientv3.Client, id string) {
	s, err := fencing.NewSession(ctx, cli, fencing.WithTTL(10*time.Second), fencing.WithIdentity(id))
	if err != nil {
		return
	}
	defer s.Close(context.Background())
	mu, _ := fencing.NewMutex(s, replacedLock)
	for ctx.Err() == nil && s.Err() == nil {
		hold, err := mu.Lock(ctx)
		if err != nil {
			continue
		}
		h.owned()
		if hold.Unlock(context.Background()) != nil {
			return // the key may remain: closing the session releases it
		}
	}
}

func (h *replaced) concurrency(ctx context.Context, cli *clientv3.Client) {
	s, err := concurrency.NewSession(cli, concurrency.WithTTL(10), concurrency.WithContext(ctx))
	if err != nil {
		return
	}
	defer s.Close()
	mu := concurrency.NewMutex(s, "concurrency/"+replacedLock+"/")
	for ctx.Err() == nil {
		if mu.Lock(ctx) != nil {
			continue
		}
		h.owned()
		if mu.Unlock(context.Background()) != nil {
			return
		}
	}
}

// owned records a new owner, which begins its Unlock at once.
func (h *replaced) owned() {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.acquired++
	if !h.released.IsZero() {
		h.gap = max(h.gap, time.Since(h.released))
	}
	h.released = time.Now()
}

// longest returns the longest handoff since its last call.
func (h *replaced) longest() time.Duration {
	h.mu.Lock()
	defer h.mu.Unlock()
	d := h.gap
	h.gap = 0
	return d
}

// progress waits until the workers have handed the lock over a few more times.
func (h *replaced) progress(b *testing.B) {
	b.Helper()
	h.mu.Lock()
	want := h.acquired + 10
	h.mu.Unlock()
	fencingtest.WaitFor(b, time.Minute, "progress", func() bool {
		h.mu.Lock()
		defer h.mu.Unlock()
		return h.acquired >= want
	})
}
