package bench_test

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"runtime"
	"runtime/pprof"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/leasehold/leasehold/election"
	"github.com/leasehold/leasehold/fencing"
	"github.com/leasehold/leasehold/fencing/fencingtest"
	"github.com/leasehold/leasehold/internal/testbed/etcdtest"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
)

// BenchmarkHoldCost measures what holds and waiters cost the process that
// has them, in a subprocess so that the embedded etcd is not counted: n
// holds on one session, each with its watched context (Hold.Context), or n
// Lock calls waiting on n names another process holds, or n Acquire calls
// queued 100 to a semaphore on semaphores whose 2 permits another process
// holds (one queue of 10 000 would measure etcd: each enqueue reads the
// queue sorted by create revision, O(queue)), or one
// election.RunGroup replica leading n names alone (each work with its
// watched context). It reports, per hold, waiter or led name, the heap in use, the goroutine stacks and the
// goroutines (a waiter's own goroutine, the caller's, included), and the
// gRPC watch streams of the process; and what they cost etcd, per hold,
// waiter or name: the heap in use of this process after a collection, which
// hosts the embedded member (keys, leases, watchers), and the member's
// database in use. The heap also holds the raft log's latest entries (etcd
// keeps 5 000 to 15 000 in memory, snapshot to snapshot), of which a cell's
// writes may add all, some or none: about ±0.2 KiB per hold at n = 10 000,
// more at 1 000. LEASEHOLD_HOLDS sets n (default
// 1000,10000; 100000 takes minutes). LEASEHOLD_COST_PROFILE=path writes the
// helper's heap and goroutine profiles to path.heap and path.goroutine.
//
//	go test ./internal/bench -run '^$' -bench HoldCost -benchtime 1x
func BenchmarkHoldCost(b *testing.B) {
	sizes := []int{1000, 10000}
	if env := os.Getenv("LEASEHOLD_HOLDS"); env != "" {
		sizes = nil
		for _, f := range strings.Split(env, ",") {
			n, err := strconv.Atoi(f)
			if err != nil {
				b.Fatalf("LEASEHOLD_HOLDS: %v", err)
			}
			sizes = append(sizes, n)
		}
	}
	c := cluster(b)
	admin := c.Admin // connected and warm: a client made or connecting between the two readings would count
	for _, mode := range []string{"hold", "wait", "semwait", "group"} {
		for _, n := range sizes {
			b.Run(fmt.Sprintf("%s/n=%d", mode, n), func(b *testing.B) {
				for range b.N {
					prefix := fmt.Sprintf("cost-%s-%d-%d/", mode, n, time.Now().UnixNano())
					switch mode {
					case "wait":
						holdAll(b, c, prefix, n)
					case "semwait":
						holdPermits(b, c, prefix, n)
					}
					p := fencingtest.StartHelper(b, "cost", c.Endpoints()[0], mode, fmt.Sprint(n), prefix)
					base := readCost(b, p)
					server := serverCost(b, admin)
					p.Send(b, "go")
					got := readCost(b, p)
					serverGot := serverCost(b, admin)
					// Its sessions revoked before the next cell's readings:
					// leases left to expire would end in them.
					if !stopHelper(p) {
						b.Fatal("the cost helper did not exit within a minute of its stdin closing")
					}
					per := func(v, v0 float64) float64 { return (v - v0) / float64(n) }
					b.ReportMetric(per(serverGot.Heap, server.Heap)/1024, "server-heap-KiB/op")
					b.ReportMetric(per(serverGot.DB, server.DB), "server-db-B/op")
					b.ReportMetric(per(got.Heap, base.Heap)/1024, "heap-KiB/op")
					b.ReportMetric(per(got.Stack, base.Stack)/1024, "stack-KiB/op")
					b.ReportMetric(per(got.Goroutines, base.Goroutines), "goroutines/op")
					b.ReportMetric(got.Heap/(1<<20), "heap-MiB")
					b.ReportMetric(got.WatchStreams, "watch-streams")
				}
			})
		}
	}
}

// holdAll holds prefix0 … prefix<n-1> on a session of this process until
// the benchmark ends, for the waiters to wait on.
func holdAll(b *testing.B, c *fencingtest.Cluster, prefix string, n int) {
	s := fencingtest.Session(b, c.Client(b), fencing.WithTTL(30*time.Second))
	for i := range n {
		m, _ := fencing.NewMutex(s, fmt.Sprint(prefix, i))
		if _, err := m.TryLock(context.Background()); err != nil {
			b.Fatal(err)
		}
	}
}

// The semwait mode's semaphores: semaphoreLimit permits each, and
// semaphoreQueue waiters queued on each.
const (
	semaphoreLimit = 2
	semaphoreQueue = 100
)

// holdPermits holds every permit of the semaphores prefix0 … for n
// waiters until the benchmark ends, for the waiters to queue behind.
func holdPermits(b *testing.B, c *fencingtest.Cluster, prefix string, n int) {
	s := fencingtest.Session(b, c.Client(b), fencing.WithTTL(30*time.Second))
	for i := range (n + semaphoreQueue - 1) / semaphoreQueue {
		m, err := fencing.NewSemaphore(s, fmt.Sprint(prefix, i), semaphoreLimit)
		if err != nil {
			b.Fatal(err)
		}
		for range semaphoreLimit {
			if _, err := m.Acquire(context.Background()); err != nil {
				b.Fatal(err)
			}
		}
	}
}

// serverUse is what the embedded etcd uses: this process's heap in use
// (after a collection) and the member's database in use, in bytes.
type serverUse struct{ Heap, DB float64 }

func serverCost(b *testing.B, admin *clientv3.Client) serverUse {
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	st, err := admin.Status(context.Background(), admin.Endpoints()[0])
	if err != nil {
		b.Fatal(err)
	}
	return serverUse{float64(ms.HeapInuse), float64(st.DbSizeInUse)}
}

// cost is what the helper measured.
type cost struct {
	Heap, Stack, Goroutines, WatchStreams float64
}

func readCost(b *testing.B, p *fencingtest.Proc) cost {
	b.Helper()
	var c cost
	if err := json.Unmarshal([]byte(p.Expect(b, 10*time.Minute, "cost ")), &c); err != nil {
		b.Fatal(err)
	}
	return c
}

// costHelper measures itself before and after taking n holds (or starting
// n waiters) on one session. Args: endpoint, "hold", "wait", "semwait" or
// "group", n, the names' prefix. It
// prints "cost {json}" at rest, waits for a line on stdin, takes the holds,
// prints again, and exits when stdin closes.
func costHelper(args []string) int {
	var ctr etcdtest.Counter
	cfg := clientv3.Config{Endpoints: args[:1], Logger: zap.NewNop()}
	etcdtest.WithCounter(&ctr)(&cfg)
	cli, err := clientv3.New(cfg)
	if err != nil {
		return 1
	}
	n, _ := strconv.Atoi(args[2])
	ctx := context.Background()
	s, err := fencing.NewSession(ctx, cli, fencing.WithTTL(30*time.Second))
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	report := func() {
		runtime.GC()
		var ms runtime.MemStats
		runtime.ReadMemStats(&ms)
		out, _ := json.Marshal(cost{Heap: float64(ms.HeapInuse), Stack: float64(ms.StackInuse),
			Goroutines: float64(runtime.NumGoroutine()), WatchStreams: float64(ctr.Streams("Watch"))})
		fmt.Println("cost", string(out))
	}
	report()
	var line string
	fmt.Scanln(&line)
	switch args[1] {
	case "group":
		stop := leadAll(ctx, cli, args[3], n)
		defer stop() // the group's sessions revoked before the process exits
	case "semwait":
		err = queueAll(ctx, s, &ctr, args[3], n)
	default:
		err = holdOrWait(ctx, s, &ctr, args[1] == "wait", args[3], n)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	if path := os.Getenv("LEASEHOLD_COST_PROFILE"); path != "" {
		writeProfiles(path) // before the report: the benchmark ends the process after it
	}
	report()
	fmt.Scanln(&line)
	s.Close(ctx)
	return 0
}

// holdOrWait takes n holds, each with its watched context, or starts n
// waiters, on s, and returns once each has its watch.
func holdOrWait(ctx context.Context, s *fencing.Session, ctr *etcdtest.Counter, wait bool, prefix string, n int) error {
	watches := ctr.Requests("Watch")
	returned := make(chan error, 1) // a waiter that stopped waiting
	for i := range n {
		m, _ := fencing.NewMutex(s, fmt.Sprint(prefix, i))
		if wait {
			go waitOn(returned, i, func() error { _, err := m.Lock(ctx); return err })
			continue
		}
		h, err := m.TryLock(ctx)
		if err != nil {
			return err
		}
		h.Context() // the hold's watch: what ends the context on a loss
	}
	return settle(ctr, watches+n, returned)
}

// queueAll starts n Acquire calls, semaphoreQueue on each of the
// semaphores prefix0 …, and returns once each has its watch.
func queueAll(ctx context.Context, s *fencing.Session, ctr *etcdtest.Counter, prefix string, n int) error {
	watches := ctr.Requests("Watch")
	returned := make(chan error, 1)
	for i := range n {
		m, _ := fencing.NewSemaphore(s, fmt.Sprint(prefix, i/semaphoreQueue), semaphoreLimit)
		go waitOn(returned, i, func() error { _, err := m.Acquire(ctx); return err })
	}
	return settle(ctr, watches+n, returned)
}

// waitOn runs waiter i, which waits for as long as the process lives, and
// reports on returned (unless a report is pending) if it stops waiting.
func waitOn(returned chan<- error, i int, wait func() error) {
	err := wait()
	select {
	case returned <- fmt.Errorf("waiter %d stopped waiting: %v", i, err):
	default:
	}
}

// settle returns once the process has sent watches watch requests and its
// goroutine count has stopped falling: the reads that arm the watches run
// in goroutines of their own until they return. It returns the error of
// a waiter that stopped waiting instead, if one does first.
func settle(ctr *etcdtest.Counter, watches int, returned <-chan error) error {
	for ctr.Requests("Watch") < watches {
		select {
		case err := <-returned:
			return err
		case <-time.After(10 * time.Millisecond):
		}
	}
	for last := runtime.NumGoroutine(); ; {
		time.Sleep(500 * time.Millisecond)
		now := runtime.NumGoroutine()
		if now >= last {
			return nil
		}
		last = now
	}
}

// leadAll runs one election.RunGroup replica for the n names prefix0 …
// prefix<n-1>, alone, so that it leads them all, each work with its watched
// context, and returns once every work has started, with what stops the
// replica and waits for it to return (its sessions revoked).
func leadAll(ctx context.Context, cli *clientv3.Client, prefix string, n int) (stop func()) {
	names := make([]string, n)
	for i := range names {
		names[i] = fmt.Sprint(prefix, i)
	}
	ctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	var started atomic.Int64
	go func() {
		defer close(done)
		election.RunGroup(ctx, cli, strings.TrimSuffix(prefix, "/"), names, func(ctx context.Context, _ *election.Term) error {
			started.Add(1) // ctx is the term's watched context
			<-ctx.Done()
			return nil
		}, election.WithSessionOptions(fencing.WithTTL(30*time.Second)))
	}()
	for started.Load() < int64(n) {
		time.Sleep(10 * time.Millisecond)
	}
	return func() { cancel(); <-done }
}

// writeProfiles writes the heap and goroutine profiles to path.heap and
// path.goroutine, for go tool pprof.
func writeProfiles(path string) {
	for _, name := range []string{"heap", "goroutine"} {
		f, err := os.Create(path + "." + name)
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			return
		}
		pprof.Lookup(name).WriteTo(f, 0)
		f.Close()
	}
}
