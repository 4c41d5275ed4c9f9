package bench_test

import (
	"context"
	"fmt"
	"runtime"
	"testing"
	"time"

	"github.com/leasehold/leasehold/fencing"
	"github.com/leasehold/leasehold/fencing/fencingtest"
	"github.com/leasehold/leasehold/guard"
	"github.com/leasehold/leasehold/internal/testbed/etcdtest"
)

// BenchmarkCrashFailover SIGKILLs a holder process and measures the time
// until a waiter in this process owns the lock: bounded by the TTL plus
// etcd's 500 ms expiry scan, for both implementations.
func BenchmarkCrashFailover(b *testing.B) {
	c := cluster(b)
	ctx := context.Background()
	for _, ttl := range []int{2, 5} {
		for _, impl := range impls {
			b.Run(fmt.Sprintf("ttl=%ds/%s", ttl, impl), func(b *testing.B) {
				var lat latencies
				for i := range b.N {
					name := fmt.Sprintf("crash-%d-%d", ttl, i)
					p := fencingtest.StartHelper(b, "hold", c.Endpoints()[0], impl, name, fmt.Sprint(ttl))
					p.Expect(b, time.Minute, "locked")
					ls, _ := lockers(b, c, impl, name, 1)
					got := make(chan error, 1)
					go func() {
						_, err := ls[0].lock(ctx)
						got <- err
					}()
					for queued(b, c, ls[0].prefix()) < 2 {
					}
					start := time.Now()
					p.Kill(b)
					if err := <-got; err != nil {
						b.Fatal(err)
					}
					lat.add(time.Since(start))
				}
				lat.report(b)
			})
		}
	}
}

// BenchmarkGracefulFailover measures the handover when the holder's
// session is closed (which revokes its lease): the next waiter owns the
// lock at once, without waiting for the TTL.
func BenchmarkGracefulFailover(b *testing.B) {
	c := cluster(b)
	ctx := context.Background()
	for _, impl := range impls {
		b.Run("SessionClose/"+impl, func(b *testing.B) {
			var lat latencies
			for i := range b.N {
				ls, _ := lockers(b, c, impl, fmt.Sprint("graceful-", i), 2)
				if _, err := ls[0].lock(ctx); err != nil {
					b.Fatal(err)
				}
				got := make(chan error, 1)
				go func() {
					_, err := ls[1].lock(ctx)
					got <- err
				}()
				for queued(b, c, ls[1].prefix()) < 2 {
				}
				start := time.Now()
				ls[0].close()
				if err := <-got; err != nil {
					b.Fatal(err)
				}
				lat.add(time.Since(start))
			}
			lat.report(b)
		})
	}
}

// BenchmarkScale holds 10 000 locks on one session, each with a watched
// context, and reports the memory per hold, the keepalive requests per
// renewal period and the gRPC streams used.
func BenchmarkScale(b *testing.B) {
	const holds = 10000
	c := cluster(b)
	ctx := context.Background()
	var ctr etcdtest.Counter
	s, err := fencing.NewSession(ctx, c.Client(b, etcdtest.WithCounter(&ctr)), fencing.WithTTL(3*time.Second))
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close(ctx)
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	stops := make([]context.CancelFunc, 0, holds)
	for i := range holds {
		m, _ := fencing.NewMutex(s, fmt.Sprint("scale/", i))
		h, err := m.TryLock(ctx)
		if err != nil {
			b.Fatal(err)
		}
		_, stop := guard.Watch(ctx, h)
		stops = append(stops, stop)
	}
	runtime.GC()
	runtime.ReadMemStats(&after)
	kas := ctr.Requests("LeaseKeepAlive")
	for range 3 {
		until := s.ValidUntil()
		for !s.ValidUntil().After(until) {
			time.Sleep(10 * time.Millisecond)
		}
	}
	b.ReportMetric(float64(after.HeapInuse-before.HeapInuse)/holds/1024, "KiB/hold")
	b.ReportMetric(float64(ctr.Requests("LeaseKeepAlive")-kas)/3, "keepalives/renewal")
	b.ReportMetric(float64(ctr.Streams("Watch")), "watch-streams")
	for _, stop := range stops {
		stop()
	}
}
