package bench_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/leasehold/leasehold/fencing"
	"github.com/leasehold/leasehold/fencing/fencingtest"
	"github.com/leasehold/leasehold/internal/keyspace"
	"github.com/leasehold/leasehold/internal/testbed/etcdtest"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/client/v3/concurrency"
	"go.uber.org/zap"
)

func TestMain(m *testing.M) {
	fencingtest.RegisterHelper("hold", holdHelper)
	fencingtest.RegisterHelper("group", groupHelper)
	fencingtest.RegisterHelper("cost", costHelper)
	fencingtest.RegisterHelper("etcd", etcdHelper)
	fencingtest.Main(m)
}

// holdHelper takes a lock with leasehold or concurrency, prints "locked",
// and holds it until killed. Args: endpoint, impl, name, TTL seconds.
func holdHelper(args []string) int {
	cli, err := clientv3.New(clientv3.Config{Endpoints: []string{args[0]}, Logger: zap.NewNop()})
	if err != nil {
		return 1
	}
	ctx := context.Background()
	var ttl int
	fmt.Sscan(args[3], &ttl)
	l, err := newLocker(ctx, args[1], cli, args[2], ttl)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	if _, err := l.lock(ctx); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	fmt.Println("locked")
	select {}
}

// locker is one participant's handle on a lock, in either implementation.
type locker interface {
	lock(ctx context.Context) (unlock func(context.Context) error, err error)
	tryLock(ctx context.Context) (unlock func(context.Context) error, err error)
	prefix() string // where the lock's keys live
	close()
}

var impls = []string{"leasehold", "concurrency"}

// observed is leasehold with every operability hook on: an Observer whose
// callbacks count, and a debug-level text logger writing to io.Discard.
const observed = "leasehold+observed"

func newLocker(ctx context.Context, impl string, cli *clientv3.Client, name string, ttl int) (locker, error) {
	opts := []fencing.SessionOption{fencing.WithTTL(time.Duration(ttl) * time.Second)}
	if impl == observed {
		impl = "leasehold"
		var events atomic.Int64
		count := func() { events.Add(1) }
		opts = append(opts, fencing.WithLogger(slog.New(slog.NewTextHandler(io.Discard, &slog.HandlerOptions{Level: slog.LevelDebug}))),
			fencing.WithObserver(fencing.Observer{
				OnAcquire: func(fencing.AcquireEvent) { count() }, OnRelease: func(fencing.ReleaseEvent) { count() },
				OnLoss: func(fencing.LossEvent) { count() }, OnRenew: func(fencing.RenewEvent) { count() },
			}))
	}
	switch impl {
	case "leasehold":
		s, err := fencing.NewSession(ctx, cli, opts...)
		if err != nil {
			return nil, err
		}
		m, err := fencing.NewMutex(s, name)
		return &ours{s: s, m: m, name: name}, err
	case "concurrency":
		s, err := concurrency.NewSession(cli, concurrency.WithTTL(ttl))
		return &theirs{s: s, name: "concurrency/" + name}, err
	}
	return nil, fmt.Errorf("no implementation %q", impl)
}

type ours struct {
	s    *fencing.Session
	m    *fencing.Mutex
	name string
}

func (o *ours) lock(ctx context.Context) (func(context.Context) error, error) {
	h, err := o.m.Lock(ctx)
	if err != nil {
		return nil, err
	}
	return h.Unlock, nil
}

func (o *ours) tryLock(ctx context.Context) (func(context.Context) error, error) {
	h, err := o.m.TryLock(ctx)
	if err != nil {
		return nil, err
	}
	return h.Unlock, nil
}

func (o *ours) prefix() string { return keyspace.Prefix(fencing.DefaultRoot, "lock", o.name) }
func (o *ours) close()         { o.s.Close(context.Background()) }

type theirs struct {
	s    *concurrency.Session
	name string
}

// lock uses a new concurrency.Mutex per call: a Mutex keeps the state of
// one acquisition.
func (c *theirs) lock(ctx context.Context) (func(context.Context) error, error) {
	m := concurrency.NewMutex(c.s, c.name)
	if err := m.Lock(ctx); err != nil {
		return nil, err
	}
	return m.Unlock, nil
}

func (c *theirs) tryLock(ctx context.Context) (func(context.Context) error, error) {
	m := concurrency.NewMutex(c.s, c.name)
	if err := m.TryLock(ctx); err != nil {
		return nil, err
	}
	return m.Unlock, nil
}

func (c *theirs) prefix() string { return c.name + "/" }
func (c *theirs) close()         { c.s.Close() }

// lockers makes n participants of one lock, spread over a few clients that
// count their requests.
func lockers(b *testing.B, c *fencingtest.Cluster, impl, name string, n int) ([]locker, *counters) {
	b.Helper()
	clis, ctrs := countedClients(b, c, n)
	ls := make([]locker, n)
	for i := range ls {
		l, err := newLocker(context.Background(), impl, clis[i%len(clis)], name, 10)
		if err != nil {
			b.Fatal(err)
		}
		ls[i] = l
		b.Cleanup(l.close)
	}
	return ls, ctrs
}

// countedClients returns the clients n participants share (at most 8), each
// counting its requests.
func countedClients(b *testing.B, c *fencingtest.Cluster, n int) ([]*clientv3.Client, *counters) {
	ctrs := &counters{}
	var clis []*clientv3.Client
	for range min(n, 8) {
		ctr := &etcdtest.Counter{}
		ctrs.list = append(ctrs.list, ctr)
		clis = append(clis, c.Client(b, etcdtest.WithCounter(ctr)))
	}
	return clis, ctrs
}

// counters adds up several clients' request counts, leaving out lease
// renewals, which run on their own clock.
type counters struct{ list []*etcdtest.Counter }

func (c *counters) requests() int {
	n := 0
	for _, ctr := range c.list {
		n += ctr.Requests("") - ctr.Requests("LeaseKeepAlive")
	}
	return n
}

// alternate runs cycle(side, timed) for sides 0 and 1: warm times each,
// untimed, then b.N times each under the timer, in alternating order per
// iteration, so that drift in the machine's load falls on both alike.
func alternate(b *testing.B, warm int, cycle func(side int, timed bool)) {
	for range warm {
		cycle(0, false)
		cycle(1, false)
	}
	b.ResetTimer()
	for n := range b.N {
		for _, side := range []int{n % 2, 1 - n%2} {
			cycle(side, true)
		}
	}
	b.StopTimer()
}

// alternateTimes is alternate for a cycle that measures itself: it returns
// each side's timed durations.
func alternateTimes(b *testing.B, warm int, cycle func(side int) time.Duration) (d [2][]time.Duration) {
	alternate(b, warm, func(side int, timed bool) {
		if t := cycle(side); timed {
			d[side] = append(d[side], t)
		}
	})
	return d
}

// percentileMs is the p-th percentile of d (0 < p < 1), in milliseconds; d
// is left as it was.
func percentileMs(d []time.Duration, p float64) float64 {
	d = slices.Clone(d)
	slices.Sort(d)
	return float64(d[min(len(d)-1, int(p*float64(len(d))))].Nanoseconds()) / 1e6
}

// latencies collects durations and reports their percentiles.
type latencies struct {
	mu sync.Mutex
	d  []time.Duration
}

func (l *latencies) add(d time.Duration) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.d = append(l.d, d)
}

func (l *latencies) report(b *testing.B) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if len(l.d) == 0 {
		return
	}
	b.ReportMetric(l.at(0.50), "p50-ms")
	b.ReportMetric(l.at(0.99), "p99-ms")
	b.ReportMetric(l.at(1), "max-ms")
}

// reportP50 reports the median alone, as unit.
func (l *latencies) reportP50(b *testing.B, unit string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if len(l.d) > 0 {
		b.ReportMetric(l.at(0.5), unit)
	}
}

// at returns the p quantile in ms, sorting first. Called with mu held.
func (l *latencies) at(p float64) float64 {
	slices.Sort(l.d)
	return float64(l.d[min(len(l.d)-1, int(p*float64(len(l.d))))].Microseconds()) / 1000
}

// cluster starts the single-member etcd of one benchmark and warms it up:
// the first few hundred requests of a new server and client are slower, and
// would otherwise count against whichever implementation runs first.
func cluster(b *testing.B) *fencingtest.Cluster {
	c := fencingtest.Single(b)
	warmUp(b, c.Admin)
	return c
}

func warmUp(b *testing.B, cli *clientv3.Client) {
	ctx := context.Background()
	for i := range 1000 {
		if _, err := cli.Put(ctx, "warmup", fmt.Sprint(i)); err != nil {
			b.Fatal(err)
		}
	}
}

// clients makes the clients of a benchmark's etcd: a *fencingtest.Cluster
// in this process, or an etcd of its own process (separate).
type clients interface {
	Client(t fencingtest.TB, opts ...fencingtest.ClientOption) *clientv3.Client
}

// separate is an etcd in a process of its own, started by etcdHelper.
type separate struct{ endpoints []string }

func (s separate) Client(t fencingtest.TB, opts ...fencingtest.ClientOption) *clientv3.Client {
	return fencingtest.NewClient(t, s.endpoints, opts...)
}

// server starts the etcd of a throughput benchmark and warms it up: in this
// process, or with LEASEHOLD_BENCH_SERVER=process in a process of its own
// (still the kit's etcd, fsync off unless LEASEHOLD_ETCD_FSYNC=1 is set, which
// the process inherits), as etcd and its clients are apart in
// production. An embedded server shares the clients' Go runtime (its
// collector, its scheduler), so every client allocation and wake-up slows
// the server too.
func server(b *testing.B) clients {
	switch mode := os.Getenv("LEASEHOLD_BENCH_SERVER"); mode {
	case "":
		return cluster(b)
	case "process":
		p := fencingtest.StartHelper(b, "etcd")
		b.Cleanup(func() { stopHelper(p) }) // before StartHelper's kill: the helper removes its data dir
		s := separate{endpoints: []string{p.Expect(b, time.Minute, "endpoint")}}
		warmUp(b, s.Client(b))
		return s
	default:
		b.Fatalf("LEASEHOLD_BENCH_SERVER=%q: want unset or process", mode)
		return nil
	}
}

// stopHelper closes p's stdin, which ends a helper of this package cleanly,
// and reports whether it exited within a minute.
func stopHelper(p *fencingtest.Proc) bool {
	p.Close()
	select {
	case <-p.Exited():
		return true
	case <-time.After(time.Minute):
		return false
	}
}

// etcdHelper runs a single-member etcd, prints "endpoint <url>", and once
// its stdin closes stops it and removes its data.
func etcdHelper([]string) int {
	s, done := fencingtest.Background()
	defer done()
	c := fencingtest.Single(s)
	fmt.Println("endpoint", c.Endpoints()[0])
	io.Copy(io.Discard, os.Stdin)
	return 0
}
