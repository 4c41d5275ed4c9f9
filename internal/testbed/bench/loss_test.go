package bench_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/leasehold/leasehold/internal/testbed/etcdtest"

	"github.com/leasehold/leasehold/fencing"
	"github.com/leasehold/leasehold/guard"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/client/v3/concurrency"
)

// BenchmarkLossDetection measures how long after an operator revokes the
// lease, or deletes the key, the holder's work learns of it: leasehold's
// watched context against concurrency.Session.Done (which watches no key:
// a deleted key is never noticed).
func BenchmarkLossDetection(b *testing.B) {
	c := cluster(b)
	ctx := context.Background()
	for _, fault := range []string{"revoke", "delete"} {
		b.Run(fault+"/leasehold", func(b *testing.B) {
			cli := c.Client(b)
			var lat latencies
			for range b.N {
				s, err := fencing.NewSession(ctx, cli)
				if err != nil {
					b.Fatal(err)
				}
				m, _ := fencing.NewMutex(s, "loss")
				h, err := m.Lock(ctx)
				if err != nil {
					b.Fatal(err)
				}
				work, stop := guard.Watch(ctx, h)
				start := time.Now()
				if fault == "revoke" {
					c.Admin.Revoke(ctx, s.Lease())
				} else {
					c.Admin.Delete(ctx, h.Key())
				}
				<-work.Done()
				lat.add(time.Since(start))
				stop()
				s.Close(ctx)
			}
			lat.report(b)
		})
	}
	b.Run("revoke/concurrency", func(b *testing.B) {
		cli := c.Client(b)
		var lat latencies
		for range b.N {
			s, err := concurrency.NewSession(cli)
			if err != nil {
				b.Fatal(err)
			}
			if err := concurrency.NewMutex(s, "concurrency/loss").Lock(ctx); err != nil {
				b.Fatal(err)
			}
			start := time.Now()
			c.Admin.Revoke(ctx, s.Lease())
			<-s.Done()
			lat.add(time.Since(start))
			s.Close()
		}
		lat.report(b)
	})
}

// BenchmarkPartitionMargin blackholes holders' links (TTL 3 s, all trials at
// once, each with its own client) and reports, per implementation, how long
// before the server deleted the key the holder stopped: leasehold's watched
// context, concurrency's Session.Done. A negative margin means the holder
// still believed it held the lock after the server had given it away.
func BenchmarkPartitionMargin(b *testing.B) {
	c := cluster(b)
	for _, impl := range impls {
		b.Run(impl, func(b *testing.B) {
			margins := make([]time.Duration, b.N)
			var wg sync.WaitGroup
			for i := range b.N {
				cli, link := c.ProxiedClient(b)
				done, key := partitionHolder(b, impl, cli, fmt.Sprintf("margin-%s-%d", impl, i))
				deleted := etcdtest.Deletion(b, c, key)
				wg.Go(func() {
					link.Blackhole()
					stoppedAt := etcdtest.When(done)
					deletedAt := <-deleted
					select {
					case at := <-stoppedAt:
						margins[i] = deletedAt.Sub(at)
					case <-time.After(10 * time.Second):
						margins[i] = -10 * time.Second
					}
				})
				b.Cleanup(link.Restore)
			}
			wg.Wait()
			late := 0
			var lat latencies
			for _, m := range margins {
				if m <= 0 {
					late++
				}
				lat.add(m)
			}
			lat.report(b) // here p50/p99/max are margins, not latencies
			b.ReportMetric(float64(late), "late-trials")
			b.ReportMetric(float64(lat.d[0].Microseconds())/1000, "min-margin-ms")
		})
	}
}

// partitionHolder takes a lock with TTL 3 s and returns the channel that
// closes when the holder learns it may have lost it, and the key.
func partitionHolder(b *testing.B, impl string, cli *clientv3.Client, name string) (<-chan struct{}, string) {
	ctx := context.Background()
	switch impl {
	case "leasehold":
		s, err := fencing.NewSession(ctx, cli, fencing.WithTTL(3*time.Second))
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { s.Close(ctx) })
		m, _ := fencing.NewMutex(s, name)
		h, err := m.Lock(ctx)
		if err != nil {
			b.Fatal(err)
		}
		work, stop := guard.Watch(ctx, h)
		b.Cleanup(stop)
		return work.Done(), h.Key()
	default:
		s, err := concurrency.NewSession(cli, concurrency.WithTTL(3))
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { s.Close() })
		m := concurrency.NewMutex(s, "concurrency/"+name)
		if err := m.Lock(ctx); err != nil {
			b.Fatal(err)
		}
		return s.Done(), m.Key()
	}
}
