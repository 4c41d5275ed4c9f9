package bench_test

import (
	"context"
	"fmt"
	"testing"

	"github.com/leasehold/leasehold/fencing"
	"github.com/leasehold/leasehold/fencing/fencingtest"
	"github.com/leasehold/leasehold/guard"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/client/v3/concurrency"
)

// BenchmarkGuardedWrites counts aggregate writes per second from 1, 16 and
// 64 owners, each holding the lock of a name of its own and writing a key
// of its own again and again: guarded by leasehold (guard.Put), guarded as
// concurrency users do (a txn on the mutex's IsOwner compare), and plain
// Puts from the same clients (etcd's ceiling). Each cell runs for
// LEASEHOLD_THROUGHPUT_WINDOW (default 2s) after a short warm-up, on an
// etcd placed as BenchmarkThroughput's.
//
//	go test ./internal/bench -run '^$' -bench GuardedWrites -benchtime 1x
func BenchmarkGuardedWrites(b *testing.B) {
	window := throughputWindow(b)
	c := server(b)
	for _, owners := range []int{1, 16, 64} {
		for _, impl := range []string{"put", "guarded", "concurrency-guarded"} {
			b.Run(fmt.Sprintf("owners=%d/%s", owners, impl), func(b *testing.B) {
				for range b.N {
					b.ReportMetric(rate(b, c, 1, owners, window, func(cli *clientv3.Client, run string, i int) cycler {
						return newWriter(b, impl, cli, run, i)
					}), "writes/s")
				}
			})
		}
	}
}

// BenchmarkGuardedWritesAlternating is BenchmarkGuardedWrites with the
// three sides taking turns, as BenchmarkThroughputAlternating's do (its
// LEASEHOLD_THROUGHPUT_ROUNDS and _WINDOW): ratio-median is guard.Put's rate
// over concurrency's guarded txn's, ceiling-ratio-median over plain Puts'.
//
//	go test ./internal/bench -run '^$' -bench GuardedWritesAlternating -benchtime 1x
func BenchmarkGuardedWritesAlternating(b *testing.B) {
	window, rounds := throughputWindow(b), throughputRounds(b)
	c := server(b)
	sides := []string{"put", "guarded", "concurrency-guarded"}
	for _, owners := range []int{1, 16, 64} {
		b.Run(fmt.Sprintf("owners=%d", owners), func(b *testing.B) {
			pools := make([]*pool, len(sides))
			for s, side := range sides {
				pools[s] = newPool(b, c, 1, owners, func(cli *clientv3.Client, run string, i int) cycler {
					return newWriter(b, side, cli, run, i)
				})
			}
			takeTurns(b, sides, pools, rounds, window, "writes/s")
		})
	}
}

// newWriter returns owner i's write: its lock is taken first, and held.
func newWriter(b *testing.B, impl string, cli *clientv3.Client, run string, i int) cycler {
	key, name := fmt.Sprint(run, "data/", i), fmt.Sprint(run, "owner/", i)
	switch impl {
	case "put":
		return func(ctx context.Context, _ string) error {
			_, err := cli.Put(ctx, key, "v")
			return err
		}
	case "guarded":
		h := fencingtest.Lock(b, fencingtest.Session(b, cli), name)
		return func(ctx context.Context, _ string) error {
			_, err := guard.Put(ctx, h, key, "v")
			return err
		}
	default:
		s, err := concurrency.NewSession(cli)
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { s.Close() })
		m := concurrency.NewMutex(s, "concurrency/"+name)
		if err := m.Lock(context.Background()); err != nil {
			b.Fatal(err)
		}
		return func(ctx context.Context, _ string) error {
			resp, err := cli.Txn(ctx).If(m.IsOwner()).Then(clientv3.OpPut(key, "v")).Commit()
			if err == nil && !resp.Succeeded {
				err = fencing.ErrNotHeld
			}
			return err
		}
	}
}
