package bench_test

import (
	"context"
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/leasehold/leasehold/fencing"
	"github.com/leasehold/leasehold/fencing/redisfence"
	"github.com/leasehold/leasehold/internal/testbed/redistest"
	"github.com/redis/go-redis/v9"
)

func redisBench(b *testing.B, pool int) (*redis.Client, *redisfence.Fence) {
	rdb := redis.NewClient(&redis.Options{Addr: redistest.Shared(b).Addr, DisableIdentity: true, PoolSize: pool, MaxRetries: -1})
	b.Cleanup(func() { rdb.Close() })
	fence, err := redisfence.New(redistest.GoRedis{Client: rdb})
	if err != nil {
		b.Fatal(err)
	}
	return rdb, fence
}

// BenchmarkRedisFenceWrite is a fenced write (redisfence.Do: one EVALSHA
// that compares and raises the mark, then writes) against the same write
// sent plain, on the same Redis through the same go-redis client,
// alternating every iteration so that drift in the machine's load falls on
// both alike. write=set is one SET, plain as one command; write=set+rpush is
// a SET and an RPUSH, plain as MULTI/EXEC in one round trip. It reports
// each side's p50/p99 and ratio-p50 (fenced over plain).
func BenchmarkRedisFenceWrite(b *testing.B) {
	b.Run("write=set", func(b *testing.B) {
		benchRedisPair(b, func(ctx context.Context, rdb *redis.Client) error {
			return rdb.Set(ctx, "{bench}:v", "value", 0).Err()
		}, func(ctx context.Context, f *redisfence.Fence, t fencing.Token) error {
			_, err := f.Do(ctx, t, redisfence.Set("{bench}:v", "value"))
			return err
		})
	})
	b.Run("write=set+rpush", func(b *testing.B) {
		benchRedisPair(b, func(ctx context.Context, rdb *redis.Client) error {
			_, err := rdb.TxPipelined(ctx, func(p redis.Pipeliner) error {
				p.Set(ctx, "{bench}:v", "value", 0)
				p.RPush(ctx, "{bench}:log", "entry")
				return nil
			})
			return err
		}, func(ctx context.Context, f *redisfence.Fence, t fencing.Token) error {
			_, err := f.Do(ctx, t, redisfence.Set("{bench}:v", "value"), redisfence.RPush("{bench}:log", "entry"))
			return err
		})
	})
}

func benchRedisPair(b *testing.B, plain func(context.Context, *redis.Client) error,
	fenced func(context.Context, *redisfence.Fence, fencing.Token) error) {
	rdb, fence := redisBench(b, 4)
	ctx := context.Background()
	token := fencing.Token{Name: "bench", Revision: 1, Cluster: 1}
	fencedVsPlain(b, [2]func() error{func() error { return plain(ctx, rdb) }, func() error { return fenced(ctx, fence, token) }})
	rdb.Del(ctx, "{bench}:log")
}

// BenchmarkRedisFenceWriters is the throughput of W writers at once, each
// incrementing its own key: plain INCRBY, fenced each under its own name
// (distinct), and fenced all under one name (shared: one mark). Redis runs
// one command at a time, so the fence's cost is its script's time on the
// server, whatever the names.
func BenchmarkRedisFenceWriters(b *testing.B) {
	for _, writers := range []int{1, 4, 16} {
		for _, mode := range []string{"plain", "distinct", "shared"} {
			b.Run(fmt.Sprintf("writers=%d/%s", writers, mode), func(b *testing.B) {
				rdb, fence := redisBench(b, writers)
				ctx := context.Background()
				var next atomic.Int64
				var wg sync.WaitGroup
				b.ResetTimer()
				start := time.Now()
				for w := range writers {
					wg.Go(func() {
						name := "bench-w" + strconv.Itoa(w)
						if mode == "shared" {
							name = "bench-shared"
						}
						key := "{" + name + "}:n" + strconv.Itoa(w)
						token := fencing.Token{Name: name, Revision: 1, Cluster: 1}
						for next.Add(1) <= int64(b.N) {
							var err error
							if mode == "plain" {
								err = rdb.IncrBy(ctx, key, 1).Err()
							} else {
								_, err = fence.Do(ctx, token, redisfence.IncrBy(key, 1))
							}
							if err != nil {
								b.Error(err)
								return
							}
						}
					})
				}
				wg.Wait()
				b.StopTimer()
				b.ReportMetric(float64(b.N)/time.Since(start).Seconds(), "writes/s")
			})
		}
	}
}
