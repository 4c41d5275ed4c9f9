package bench_test

import (
	"context"
	"fmt"
	"math"
	"os"
	"slices"
	"strconv"
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
// LEASEHOLD_THROUGHPUT_WINDOW (default 2s) after a short warm-up. The
// etcd is embedded, or with LEASEHOLD_BENCH_SERVER=process in a process of
// its own (see server).
//
//	go test ./internal/bench -run '^$' -bench Throughput -benchtime 1x
func BenchmarkThroughput(b *testing.B) {
	window := throughputWindow(b)
	c := server(b)
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

// BenchmarkThroughputAlternating is BenchmarkThroughput with the three
// sides taking turns: each cell makes its workers once, then runs
// LEASEHOLD_THROUGHPUT_ROUNDS rounds (default 6) of one window per side, the
// order rotating from round to round, so drift in the machine's load falls
// on all three alike. It reports what takeTurns does: each side's median
// rate and, from the rounds, leasehold's rate over concurrency's (median,
// lowest, geometric mean with its 95% interval) and over the ceiling.
//
//	go test ./internal/bench -run '^$' -bench ThroughputAlternating -benchtime 1x
func BenchmarkThroughputAlternating(b *testing.B) {
	window := throughputWindow(b)
	rounds := throughputRounds(b)
	c := server(b)
	sides := []string{"ceiling", "leasehold", "concurrency"}
	for _, names := range []int{1, 100, 10000} {
		for _, sessions := range []int{1, 16, 64} {
			b.Run(fmt.Sprintf("names=%d/sessions=%d", names, sessions), func(b *testing.B) {
				pools := make([]*pool, len(sides))
				for s, side := range sides {
					pools[s] = newPool(b, c, names, sessions, func(cli *clientv3.Client, run string, i int) cycler {
						return newCycler(b, side, cli, run, i)
					})
				}
				takeTurns(b, sides, pools, rounds, window, "cycles/s")
			})
		}
	}
}

// takeTurns runs rounds of one window per pool, the order rotating from
// round to round, and reports each side's median rate (side-unit) and, from
// the rounds, the median and lowest of the second side's rate over the
// third's (ratio-median, ratio-min), their geometric mean with its 95%
// interval (ratio-geomean, ratio-lo95, ratio-hi95: an interval that holds
// 1 finds no difference), and the median of the second's over the first's
// (ceiling-ratio-median): sides are ceiling, leasehold, its rival. Each
// library's rate over the ceiling also gets its geometric mean and interval
// (ceiling-ratio-geomean, -lo95, -hi95 for leasehold; rival-ceiling-ratio-…
// for the rival), since the #29 target is a share of the ceiling.
func takeTurns(b *testing.B, sides []string, pools []*pool, rounds int, window time.Duration, unit string) {
	for range b.N {
		rates := make([][]float64, len(sides))
		for r := range rounds {
			for k := range sides {
				s := (r + k) % len(sides)
				rates[s] = append(rates[s], pools[s].rate(b, window))
			}
		}
		for s, side := range sides {
			b.ReportMetric(median(rates[s]), side+"-"+unit)
		}
		vsRival, vsCeiling := ratios(rates[1], rates[2]), ratios(rates[1], rates[0])
		b.ReportMetric(median(vsRival), "ratio-median")
		b.ReportMetric(slices.Min(vsRival), "ratio-min")
		reportGeomean(b, "ratio", vsRival)
		b.ReportMetric(median(vsCeiling), "ceiling-ratio-median")
		reportGeomean(b, "ceiling-ratio", vsCeiling)
		reportGeomean(b, "rival-ceiling-ratio", ratios(rates[2], rates[0]))
	}
}

// reportGeomean reports the geometric mean of ratios xs and its 95%
// interval as name-geomean, name-lo95 and name-hi95.
func reportGeomean(b *testing.B, name string, xs []float64) {
	mean, lo, hi := geomean(xs)
	b.ReportMetric(mean, name+"-geomean")
	b.ReportMetric(lo, name+"-lo95")
	b.ReportMetric(hi, name+"-hi95")
}

// throughputRounds is LEASEHOLD_THROUGHPUT_ROUNDS, or 6.
func throughputRounds(b *testing.B) int {
	env := os.Getenv("LEASEHOLD_THROUGHPUT_ROUNDS")
	if env == "" {
		return 6
	}
	n, err := strconv.Atoi(env)
	if err != nil || n < 1 {
		b.Fatalf("LEASEHOLD_THROUGHPUT_ROUNDS=%q: want a positive integer", env)
	}
	return n
}

// ratios is a[i]/b[i] for each round i.
func ratios(a, b []float64) []float64 {
	r := make([]float64, len(a))
	for i := range a {
		r[i] = a[i] / b[i]
	}
	return r
}

// geomean is the geometric mean of ratios xs, with its 95% interval: the
// mean of their logarithms plus or minus Student's t for len(xs)-1 degrees
// of freedom times its standard error (the rounds taken as independent;
// with one round, the interval is the mean).
func geomean(xs []float64) (mean, lo, hi float64) {
	logs := make([]float64, len(xs))
	var sum float64
	for i, x := range xs {
		logs[i] = math.Log(x)
		sum += logs[i]
	}
	m := sum / float64(len(xs))
	if len(xs) < 2 {
		return math.Exp(m), math.Exp(m), math.Exp(m)
	}
	var ss float64
	for _, l := range logs {
		ss += (l - m) * (l - m)
	}
	h := t975(len(xs)-1) * math.Sqrt(ss/float64(len(xs)-1)/float64(len(xs)))
	return math.Exp(m), math.Exp(m - h), math.Exp(m + h)
}

// t975 is the 97.5th percentile of Student's t with df degrees of freedom
// (df ≥ 1); past 30, 2.0 (1.96 in the limit).
func t975(df int) float64 {
	table := []float64{12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262, 2.228,
		2.201, 2.179, 2.160, 2.145, 2.131, 2.120, 2.110, 2.101, 2.093, 2.086,
		2.080, 2.074, 2.069, 2.064, 2.060, 2.056, 2.052, 2.048, 2.045, 2.042}
	if df <= len(table) {
		return table[df-1]
	}
	return 2.0
}

// median is the middle of xs (the mean of the two middles for an even count).
func median(xs []float64) float64 {
	s := slices.Sorted(slices.Values(xs))
	n := len(s)
	if n%2 == 1 {
		return s[n/2]
	}
	return (s[n/2-1] + s[n/2]) / 2
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
func rate(b *testing.B, c clients, names, sessions int, window time.Duration,
	worker func(cli *clientv3.Client, run string, i int) cycler) float64 {
	return newPool(b, c, names, sessions, worker).rate(b, window)
}

// pool is one cell's workers, made once and run for as many windows as
// asked.
type pool struct {
	run     string // the cell's key prefix: no history of earlier cells
	names   int
	workers []cycler
}

func newPool(b *testing.B, c clients, names, sessions int,
	worker func(cli *clientv3.Client, run string, i int) cycler) *pool {
	clis := make([]*clientv3.Client, min(sessions, 8))
	for i := range clis {
		clis[i] = c.Client(b)
	}
	p := &pool{run: fmt.Sprintf("tp-%d/", time.Now().UnixNano()), names: names, workers: make([]cycler, sessions)}
	for i := range p.workers {
		p.workers[i] = worker(clis[i%len(clis)], p.run, i)
	}
	return p
}

// rate runs every worker for window, after a warm-up of a fifth of it, and
// returns their aggregate cycles per second.
func (p *pool) rate(b *testing.B, window time.Duration) float64 {
	var cycles atomic.Int64
	var counting, stopping atomic.Bool
	var wg sync.WaitGroup
	sessions := len(p.workers)
	for i, cycle := range p.workers {
		wg.Go(func() {
			// Workers stop between cycles, not by cancellation: a cycle cut
			// short could leave a key that the next window waits behind.
			for k := 0; !stopping.Load(); k++ {
				// Worker i takes names i, i+sessions, …: its own when there
				// are enough, shared with others when there are fewer.
				name := fmt.Sprint(p.run, (i+k*sessions)%p.names)
				if err := cycle(context.Background(), name); err != nil {
					b.Error(err)
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
	stopping.Store(true)
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
