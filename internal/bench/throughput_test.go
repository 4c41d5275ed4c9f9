package bench_test

import (
	"context"
	"fmt"
	"os"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/leasehold/leasehold/fencing"
	"github.com/leasehold/leasehold/fencing/fencingtest"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/client/v3/concurrency"
)

// BenchmarkThroughput counts aggregate Lock+Unlock cycles per second over
// 1, 100 and 10 000 names from 1, 16 and 64 sessions (each session one
// worker, cycling over its share of the names; with fewer names than
// sessions they contend), for leasehold and concurrency, and etcd's own
// limit from the same clients: Put+Delete pairs of one key per worker, the
// two writes a cycle needs at least. Each cell runs for
// LEASEHOLD_THROUGHPUT_WINDOW (default 2s) after a short warm-up.
//
//	go test ./internal/bench -run '^$' -bench Throughput -benchtime 1x
func BenchmarkThroughput(b *testing.B) {
	window := throughputWindow(b)
	c := cluster(b)
	for _, names := range []int{1, 100, 10000} {
		for _, sessions := range []int{1, 16, 64} {
			for _, impl := range []string{"ceiling", "leasehold", "concurrency"} {
				b.Run(fmt.Sprintf("names=%d/sessions=%d/%s", names, sessions, impl), func(b *testing.B) {
					for range b.N {
						b.ReportMetric(rate(b, c, names, sessions, window, func(cli *clientv3.Client, run string, i int) cycler {
							return newCycler(b, impl, cli, run, i)
						}), "cycles/s")
					}
				})
			}
		}
	}
}

// cycler runs one cycle on name: a Lock and its Unlock, or a Put and a Delete.
type cycler func(ctx context.Context, name string) error

// throughputWindow is LEASEHOLD_THROUGHPUT_WINDOW, or 2 s.
func throughputWindow(b *testing.B) time.Duration {
	env := os.Getenv("LEASEHOLD_THROUGHPUT_WINDOW")
	if env == "" {
		return 2 * time.Second
	}
	d, err := time.ParseDuration(env)
	if err != nil {
		b.Fatal(err)
	}
	return d
}

// rate runs sessions workers made by worker (spread over up to 8 clients)
// for window, after a warm-up, and returns their aggregate cycles per
// second; worker i cycles over names i, i+sessions, … of names.
func rate(b *testing.B, c *fencingtest.Cluster, names, sessions int, window time.Duration,
	worker func(cli *clientv3.Client, run string, i int) cycler) float64 {
	clis := make([]*clientv3.Client, min(sessions, 8))
	for i := range clis {
		clis[i] = c.Client(b)
	}
	run := fmt.Sprintf("tp-%d/", time.Now().UnixNano()) // no history of earlier cells
	workers := make([]cycler, sessions)
	for i := range workers {
		workers[i] = worker(clis[i%len(clis)], run, i)
	}
	var cycles atomic.Int64
	var counting atomic.Bool
	ctx, stop := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	for i, cycle := range workers {
		wg.Go(func() {
			for k := 0; ctx.Err() == nil; k++ {
				// Worker i takes names i, i+sessions, …: its own when there
				// are enough, shared with others when there are fewer.
				name := fmt.Sprint(run, (i+k*sessions)%names)
				if err := cycle(ctx, name); err != nil {
					if ctx.Err() == nil {
						b.Error(err)
					}
					return
				}
				if counting.Load() {
					cycles.Add(1)
				}
			}
		})
	}
	time.Sleep(window / 5) // warm-up: streams, first keys
	counting.Store(true)
	start := time.Now()
	time.Sleep(window)
	done := cycles.Load()
	elapsed := time.Since(start)
	stop()
	wg.Wait()
	return float64(done) / elapsed.Seconds()
}

func newCycler(b *testing.B, impl string, cli *clientv3.Client, run string, i int) cycler {
	switch impl {
	case "ceiling":
		key := fmt.Sprint(run, "ceiling/", i)
		return func(ctx context.Context, _ string) error {
			if _, err := cli.Put(ctx, key, "v"); err != nil {
				return err
			}
			_, err := cli.Delete(ctx, key)
			return err
		}
	case "leasehold":
		s := fencingtest.Session(b, cli)
		return func(ctx context.Context, name string) error {
			m, err := fencing.NewMutex(s, name)
			if err != nil {
				return err
			}
			h, err := m.Lock(ctx)
			if err != nil {
				return err
			}
			return h.Unlock(context.WithoutCancel(ctx))
		}
	default:
		s, err := concurrency.NewSession(cli)
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { s.Close() })
		return func(ctx context.Context, name string) error {
			m := concurrency.NewMutex(s, "concurrency/"+name)
			if err := m.Lock(ctx); err != nil {
				return err
			}
			return m.Unlock(context.WithoutCancel(ctx))
		}
	}
}
