package bench_test

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/leasehold/leasehold/election"
	"github.com/leasehold/leasehold/fencing"
	"github.com/leasehold/leasehold/fencing/fencingtest"
	"github.com/leasehold/leasehold/internal/assign"
	"github.com/leasehold/leasehold/internal/testbed/assigntest"
	"github.com/leasehold/leasehold/internal/testbed/etcdtest"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/client/v3/concurrency"
	"go.uber.org/zap"
)

// groupTTL is the lease TTL of every replica: a crashed one's names move
// after it.
const groupTTL = 3 * time.Second

// idleWindow is how long the idle requests are counted: six renewal
// periods of groupTTL.
const idleWindow = 2 * groupTTL

// BenchmarkGroup runs election.RunGroup with N names over R replicas, each on
// its own client, and reports, for one replica joining, one leaving
// gracefully and one crashing (a subprocess, SIGKILLed): the time until every
// name runs on exactly one replica and none runs more than ⌈N/R⌉, and the
// names moved against the fewest that must move. At rest it counts every
// request the replicas send for idleWindow. The concurrency sub-benchmark is
// what etcd's package offers for the same job: R replicas, each with one
// session, campaigning for all N names; it reports how many names the
// busiest replica leads, and its idle requests.
//
// LEASEHOLD_GROUP=10000/10 runs only that cell (names/replicas), the scale
// that #29 asks about; it takes minutes.
func BenchmarkGroup(b *testing.B) {
	c := cluster(b)
	namesSet, replicasSet := []int{10, 100, 1000}, []int{2, 3, 4, 5}
	if env := os.Getenv("LEASEHOLD_GROUP"); env != "" {
		var n, r int
		if _, err := fmt.Sscanf(env, "%d/%d", &n, &r); err != nil {
			b.Fatalf("LEASEHOLD_GROUP=%q: want names/replicas: %v", env, err)
		}
		namesSet, replicasSet = []int{n}, []int{r}
	}
	for _, names := range namesSet {
		for _, replicas := range replicasSet {
			b.Run(fmt.Sprintf("names=%d/replicas=%d/leasehold", names, replicas), func(b *testing.B) {
				for range b.N {
					groupRun(b, c, names, replicas)
				}
			})
			b.Run(fmt.Sprintf("names=%d/replicas=%d/concurrency", names, replicas), func(b *testing.B) {
				for range b.N {
					perNameCampaigns(b, c, names, replicas)
				}
			})
		}
	}
}

// tracker records which replica runs each name's work, and wakes waiters at
// each change.
type tracker struct {
	mu      sync.Mutex
	holder  map[string]string // name → replica running it
	changed chan struct{}     // closed at the next change
}

func newTracker() *tracker {
	return &tracker{holder: map[string]string{}, changed: make(chan struct{})}
}

// set records that id runs name.
func (t *tracker) set(name, id string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.holder[name] = id
	t.wake()
}

// end records that id stopped running name, unless another replica took it.
func (t *tracker) end(name, id string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.holder[name] == id {
		delete(t.holder, name)
		t.wake()
	}
}

func (t *tracker) wake() {
	close(t.changed)
	t.changed = make(chan struct{})
}

// loads returns each replica's count of names, and the names' holders.
func (t *tracker) loads() (map[string]int, map[string]string, chan struct{}) {
	t.mu.Lock()
	defer t.mu.Unlock()
	l := map[string]int{}
	for _, id := range t.holder {
		l[id]++
	}
	h := make(map[string]string, len(t.holder))
	for n, id := range t.holder {
		h[n] = id
	}
	return l, h, t.changed
}

// balanced waits until the n names run on exactly ids, none over its cap,
// and returns how long that took since start and the holders.
func (t *tracker) balanced(b *testing.B, n int, ids []string, start time.Time) (time.Duration, map[string]string) {
	deadline := time.After(time.Minute)
	for {
		l, h, changed := t.loads()
		ok := len(h) == n && len(l) == len(ids)
		for _, id := range ids {
			ok = ok && l[id] > 0 && l[id] <= assign.Cap(n, len(ids))
		}
		if ok {
			return time.Since(start), h
		}
		select {
		case <-changed:
		case <-deadline:
			b.Fatalf("%d names not balanced over %v: %v", n, ids, l)
		}
	}
}

// least is the fewest names that must move from holders for ids to be
// balanced (assigntest.Least, with replicas named by id).
func least(holders map[string]string, ids []string) int {
	ms := make([]assign.Member, len(ids))
	for i, id := range ids {
		ms[i].Key = id
	}
	return assigntest.Least(holders, ms)
}

func groupNames(group string, n int) []string {
	names := make([]string, n)
	for i := range names {
		names[i] = fmt.Sprintf("%s/%d", group, i)
	}
	return names
}

func groupRun(b *testing.B, c *fencingtest.Cluster, n, r int) {
	group := fmt.Sprintf("bench-group-%d-%d-%d", n, r, time.Now().UnixNano())
	names := groupNames(group, n)
	tr := newTracker()
	ctrs := &counters{}
	var stops []func()
	start := func(id string) func() {
		ctr := &etcdtest.Counter{}
		ctrs.list = append(ctrs.list, ctr)
		cli := c.Client(b, etcdtest.WithCounter(ctr))
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		go func() {
			done <- election.RunGroup(ctx, cli, group, names, func(ctx context.Context, t *election.Term) error {
				tr.set(t.Token().Name, id)
				<-ctx.Done()
				tr.end(t.Token().Name, id)
				return nil
			}, election.WithSessionOptions(fencing.WithIdentity(id), fencing.WithTTL(groupTTL)))
		}()
		return func() {
			cancel()
			if err := <-done; err != nil {
				b.Error(err)
			}
		}
	}
	var ids []string
	for i := range r - 1 {
		ids = append(ids, fmt.Sprint("r", i))
		stops = append(stops, start(ids[i]))
	}
	defer func() {
		for _, stop := range stops {
			stop()
		}
	}()
	_, before := tr.balanced(b, n, ids, time.Now())

	// Join.
	t0 := time.Now()
	ids = append(ids, fmt.Sprint("r", r-1))
	stops = append(stops, start(ids[r-1]))
	d, after := tr.balanced(b, n, ids, t0)
	b.ReportMetric(float64(d.Microseconds())/1000, "join-ms")
	b.ReportMetric(float64(assigntest.Moved(before, after)), "join-moved")
	b.ReportMetric(float64(least(before, ids)), "join-least")

	idle(b, ctrs)

	// Graceful leave of the first replica.
	t0 = time.Now()
	stops[0]()
	stops = stops[1:]
	d, after2 := tr.balanced(b, n, ids[1:], t0)
	b.ReportMetric(float64(d.Microseconds())/1000, "leave-ms")
	b.ReportMetric(float64(assigntest.Moved(after, after2)), "leave-moved")
	b.ReportMetric(float64(least(after, ids[1:])), "leave-least")

	// Crash: a replica in a subprocess joins, then is killed.
	ids = ids[1:]
	p := fencingtest.StartHelper(b, "group", c.Endpoints()[0], group, "crashy", fmt.Sprint(n))
	go follow(p, tr, "crashy")
	_, before = tr.balanced(b, n, append(ids, "crashy"), time.Now())
	t0 = time.Now()
	p.Kill(b)
	d, after = tr.balanced(b, n, ids, t0)
	b.ReportMetric(float64(d.Microseconds())/1000, "crash-ms")
	b.ReportMetric(float64(least(before, ids)), "crash-least")
	b.ReportMetric(float64(assigntest.Moved(before, after)), "crash-moved")
}

// follow reads a group helper's lines into tr.
func follow(p *fencingtest.Proc, tr *tracker, id string) {
	for line := range p.Lines() {
		if name, ok := strings.CutPrefix(line, "leading "); ok {
			tr.set(name, id)
		} else if name, ok := strings.CutPrefix(line, "stopped "); ok {
			tr.end(name, id)
		}
	}
}

// groupHelper is a RunGroup replica: args are the endpoint, the group, the
// identity and the number of names. It prints "leading NAME" and "stopped
// NAME" around each work.
func groupHelper(args []string) int {
	cli, err := clientv3.New(clientv3.Config{Endpoints: args[:1], Logger: zap.NewNop()})
	if err != nil {
		return 1
	}
	var n int
	fmt.Sscan(args[3], &n)
	var mu sync.Mutex
	out := bufio.NewWriter(os.Stdout)
	say := func(what, name string) {
		mu.Lock()
		defer mu.Unlock()
		fmt.Fprintln(out, what, name)
		out.Flush()
	}
	err = election.RunGroup(context.Background(), cli, args[1], groupNames(args[1], n), func(ctx context.Context, t *election.Term) error {
		say("leading", t.Token().Name)
		<-ctx.Done()
		say("stopped", t.Token().Name)
		return nil
	}, election.WithSessionOptions(fencing.WithIdentity(args[2]), fencing.WithTTL(groupTTL)))
	fmt.Fprintln(os.Stderr, err)
	return 1
}

// perNameCampaigns is the same job with etcd's concurrency package: r
// replicas, one session each, campaign for every name; whoever campaigns
// first leads.
func perNameCampaigns(b *testing.B, c *fencingtest.Cluster, n, r int) {
	group := fmt.Sprintf("concurrency/bench-group-%d-%d-%d", n, r, time.Now().UnixNano())
	ctx, cancel := context.WithCancel(context.Background())
	ctrs := &counters{}
	tr := newTracker()
	var wg sync.WaitGroup
	defer func() { cancel(); wg.Wait() }() // before the sessions close
	for i := range r {
		ctr := &etcdtest.Counter{}
		ctrs.list = append(ctrs.list, ctr)
		s, err := concurrency.NewSession(c.Client(b, etcdtest.WithCounter(ctr)), concurrency.WithTTL(int(groupTTL/time.Second)))
		if err != nil {
			b.Fatal(err)
		}
		defer s.Close()
		for _, name := range groupNames(group, n) {
			wg.Go(func() {
				if concurrency.NewElection(s, name).Campaign(ctx, fmt.Sprint(i)) == nil {
					tr.set(name, fmt.Sprint("r", i))
				}
			})
		}
	}
	for {
		_, h, changed := tr.loads()
		if len(h) == n {
			break
		}
		<-changed
	}
	for { // every candidate queued, so the idle count starts at rest
		resp, err := c.Admin.Get(context.Background(), group+"/", clientv3.WithPrefix(), clientv3.WithCountOnly())
		if err != nil {
			b.Fatal(err)
		}
		if resp.Count == int64(n*r) {
			break
		}
	}
	l, _, _ := tr.loads()
	busiest := 0
	for _, v := range l {
		busiest = max(busiest, v)
	}
	b.ReportMetric(float64(busiest), "busiest-leads")
	b.ReportMetric(float64(assign.Cap(n, r)), "cap")
	idle(b, ctrs)
}

// idle lets one TTL pass for what is in flight to settle (candidates still
// arming watches), then counts every request for idleWindow.
func idle(b *testing.B, ctrs *counters) {
	time.Sleep(groupTTL)
	for _, ctr := range ctrs.list {
		ctr.Reset()
	}
	time.Sleep(idleWindow)
	all, kas := 0, 0
	for _, ctr := range ctrs.list {
		all, kas = all+ctr.Requests(""), kas+ctr.Requests("LeaseKeepAlive")
	}
	b.ReportMetric(float64(all)/idleWindow.Seconds(), "idle-req/s")
	b.ReportMetric(float64(all-kas), "idle-non-keepalive")
}
