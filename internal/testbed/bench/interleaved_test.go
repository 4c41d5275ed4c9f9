package bench_test

import (
	"context"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/leasehold/leasehold/fencing"
	"github.com/leasehold/leasehold/fencing/fencingtest"
	"github.com/leasehold/leasehold/internal/keyspace"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/client/v3/concurrency"
)

// BenchmarkInterleavedLock is BenchmarkUncontended with leasehold and
// concurrency interleaved: every iteration runs one Lock+Unlock (or
// TryLock+Unlock) of each, in alternating order, so drift in the machine's
// load and the position in the run fall on both alike. It reports each
// side's p50/p99 of the whole cycle, the acquire and release steps apart, and
// ratio-p50 (leasehold's p50 over concurrency's).
//
// history=same locks one name throughout, as BenchmarkUncontended does.
// etcd keeps a deleted key in its index until the next compaction, and every
// range over a name's prefix walks them: leasehold writes a new key per Lock,
// concurrency one per session, so here leasehold's cost grows with the
// iterations (first-p50 and last-p50 are the first and last fifth).
// history=fresh locks a new name in every iteration: the cost of one cycle
// on a name without history, as after a compaction.
func BenchmarkInterleavedLock(b *testing.B) {
	c := cluster(b)
	ctx := context.Background()
	for _, op := range []string{"Lock", "TryLock"} {
		for _, history := range []string{"same", "fresh"} {
			b.Run(op+"/history="+history, func(b *testing.B) {
				ours, theirs := sessionPair(b, c)
				base := "paired-" + op + "-" + history + "-" + strconv.FormatInt(time.Now().UnixNano(), 36)
				name := func(n int) string {
					if history == "fresh" {
						return base + "-" + strconv.Itoa(n)
					}
					return base
				}
				locks := [2]func(n int) (func(context.Context) error, error){
					func(n int) (func(context.Context) error, error) {
						m, err := fencing.NewMutex(ours, name(n))
						if err != nil {
							return nil, err
						}
						var h *fencing.Hold
						if op == "Lock" {
							h, err = m.Lock(ctx)
						} else {
							h, err = m.TryLock(ctx)
						}
						if err != nil {
							return nil, err
						}
						return h.Unlock, nil
					},
					func(n int) (func(context.Context) error, error) {
						m := concurrency.NewMutex(theirs, "concurrency/"+name(n))
						var err error
						if op == "Lock" {
							err = m.Lock(ctx)
						} else {
							err = m.TryLock(ctx)
						}
						if err != nil {
							return nil, err
						}
						return m.Unlock, nil
					},
				}
				var total, acq, rel [2][]time.Duration
				run := func(i, n int) {
					start := time.Now()
					unlock, err := locks[i](n)
					if err != nil {
						b.Fatal(err)
					}
					mid := time.Now()
					if err := unlock(ctx); err != nil {
						b.Fatal(err)
					}
					end := time.Now()
					total[i] = append(total[i], end.Sub(start))
					acq[i] = append(acq[i], mid.Sub(start))
					rel[i] = append(rel[i], end.Sub(mid))
				}
				for n := range 20 { // warm both clients and sessions
					run(0, -1-n)
					run(1, -1-n)
				}
				total, acq, rel = [2][]time.Duration{}, [2][]time.Duration{}, [2][]time.Duration{}
				b.ResetTimer()
				for n := range b.N {
					run(n%2, n)
					run(1-n%2, n)
				}
				b.StopTimer()
				pct := percentileMs
				for i, side := range []string{"ours", "theirs"} {
					b.ReportMetric(pct(total[i], 0.5), side+"-p50-ms")
					b.ReportMetric(pct(total[i], 0.99), side+"-p99-ms")
					b.ReportMetric(pct(acq[i], 0.5), side+"-acq-p50-ms")
					b.ReportMetric(pct(rel[i], 0.5), side+"-rel-p50-ms")
					if b.N >= 100 {
						k := b.N / 5
						b.ReportMetric(pct(total[i][:k], 0.5), side+"-first-p50-ms")
						b.ReportMetric(pct(total[i][b.N-k:], 0.5), side+"-last-p50-ms")
					}
				}
				b.ReportMetric(pct(total[0], 0.5)/pct(total[1], 0.5), "ratio-p50")
				b.ReportMetric(pct(total[0], 0.99)/pct(total[1], 0.99), "ratio-p99")
				b.ReportMetric(pct(acq[0], 0.5)/pct(acq[1], 0.5), "ratio-acq-p50")
			})
		}
	}
}

// BenchmarkLockNameHistory measures Lock+Unlock, interleaved as in
// BenchmarkInterleavedLock, on names whose prefixes already hold the given
// number of deleted keys, for both implementations: what as many sessions
// that came and went leave behind until etcd compacts (each leaves one key
// per name in etcd's index; a session reuses its key, in both).
func BenchmarkLockNameHistory(b *testing.B) {
	c := cluster(b)
	ctx := context.Background()
	for _, hist := range []int{0, 1000, 10000, 50000} {
		b.Run("deleted="+strconv.Itoa(hist), func(b *testing.B) {
			ours, theirs := sessionPair(b, c)
			name := "history-" + strconv.Itoa(hist)
			m, err := fencing.NewMutex(ours, name)
			if err != nil {
				b.Fatal(err)
			}
			for _, prefix := range []string{keyspace.Prefix(fencing.DefaultRoot, "lock", name), "concurrency/" + name + "/"} {
				for done := 0; done < hist; {
					var ops []clientv3.Op
					for ; len(ops) < 128 && done < hist; done++ {
						ops = append(ops, clientv3.OpPut(prefix+"old-"+strconv.Itoa(done), ""))
					}
					if _, err := c.Admin.Txn(ctx).Then(ops...).Commit(); err != nil {
						b.Fatal(err)
					}
					if _, err := c.Admin.Delete(ctx, prefix, clientv3.WithPrefix()); err != nil {
						b.Fatal(err)
					}
				}
			}
			locks := [2]func() (func(context.Context) error, error){
				func() (func(context.Context) error, error) {
					h, err := m.Lock(ctx)
					if err != nil {
						return nil, err
					}
					return h.Unlock, nil
				},
				func() (func(context.Context) error, error) {
					m := concurrency.NewMutex(theirs, "concurrency/"+name)
					if err := m.Lock(ctx); err != nil {
						return nil, err
					}
					return m.Unlock, nil
				},
			}
			var total [2][]time.Duration
			run := func(i int) {
				start := time.Now()
				unlock, err := locks[i]()
				if err != nil {
					b.Fatal(err)
				}
				if err := unlock(ctx); err != nil {
					b.Fatal(err)
				}
				total[i] = append(total[i], time.Since(start))
			}
			alternate(b, 0, func(side int, _ bool) { run(side) })
			p50 := func(d []time.Duration) float64 {
				slices.Sort(d)
				return float64(d[len(d)/2].Microseconds()) / 1000
			}
			o, t := p50(total[0]), p50(total[1])
			b.ReportMetric(o, "ours-p50-ms")
			b.ReportMetric(t, "theirs-p50-ms")
			b.ReportMetric(o/t, "ratio-p50")
		})
	}
}

// sessionPair returns one session of each implementation, TTL 10 s, closed
// when b ends.
func sessionPair(b *testing.B, c *fencingtest.Cluster) (*fencing.Session, *concurrency.Session) {
	ctx := context.Background()
	ours, err := fencing.NewSession(ctx, c.Client(b), fencing.WithTTL(10*time.Second))
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { ours.Close(ctx) })
	theirs, err := concurrency.NewSession(c.Client(b), concurrency.WithTTL(10))
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { theirs.Close() })
	return ours, theirs
}
