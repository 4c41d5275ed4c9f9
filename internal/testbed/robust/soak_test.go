package robust_test

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"maps"
	"math"
	"net/http"
	"net/http/httptest"
	"os"
	"runtime"
	"runtime/pprof"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/leasehold/leasehold/fencing"
	"github.com/leasehold/leasehold/fencing/fencingtest"
	"github.com/leasehold/leasehold/internal/keyspace"
	"github.com/leasehold/leasehold/internal/testbed/etcdtest"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// The soak: the lock workload (locks, guarded increments, fenced writes to a
// store) and the group workload (RunGroup replicas with ranks and weights,
// guarded increments per name; each replica also a ranked Run of one more
// name, with drains, Proclaim and an Observe: runReplica) together on one
// cluster, under the suite's
// fault mix on both and leader transfers, for LEASEHOLD_SOAK (a duration:
// "1h"; CI runs "90s"). Each workload has one subprocess worker that SIGKILL
// spares (lifelong), whose series are one process's over the whole run; the
// others are killed and replaced every 20 s or so. Every
// LEASEHOLD_SOAK_EVERY (1m; a twelfth of the length when shorter) each
// worker subprocess reports its goroutines, live
// heap, sessions (leases granted and not revoked) and open watches (census),
// and the test its own and the cluster's keys, leases, watchers and
// watch streams. Checks: both workloads' violations, none; at each pause of
// the faults (every quarter of the run, or every 3 minutes if that is
// sooner), one lease per live session and the keys back to their level
// at the first pause and holding there, and again after one fault of the
// mix run alone (the next kind in turn: an hour runs each kind alone at
// least once); no judged series grows over
// the last half; each lifelong worker reported in at least half the last
// half's rows; once the workers stop, no key and no lease is left.
// LEASEHOLD_SOAK_SVG names the plot's file (else one in a temp dir);
// LEASEHOLD_SOAK_GOROUTINES a file for the test process's goroutines, grouped
// by stack, as the faults stop (to trace a growth the table shows).
const (
	soakEnv       = "LEASEHOLD_SOAK"
	soakEveryEnv  = "LEASEHOLD_SOAK_EVERY"
	soakSVGEnv    = "LEASEHOLD_SOAK_SVG"
	soakStacksEnv = "LEASEHOLD_SOAK_GOROUTINES"
)

func TestSoak(t *testing.T) {
	length, err := time.ParseDuration(os.Getenv(soakEnv))
	if err != nil {
		t.Skipf("%s unset or not a duration: the soak runs only when asked", soakEnv)
	}
	every := min(time.Minute, length/12)
	if e, err := time.ParseDuration(os.Getenv(soakEveryEnv)); err == nil {
		every = e
	}
	t.Setenv(soakEveryEnv, every.String()) // the worker subprocesses sample too
	c := fencingtest.Three(t)
	st := &store{enforce: true}
	srv := httptest.NewServer(st)
	t.Cleanup(srv.Close)
	hist := watchHistory(t, c, "")
	lock := newHarness(t, c, "leasehold", srv.URL)
	group := newHarness(t, c, "group", groupName)
	group.helper = "group-worker"
	sm := &soakSamples{procs: map[string]procSample{}}
	lock.sample, group.sample = sm.from("lock"), sm.from("group")
	lock.extra = []func(){group.blackhole, group.sigstop, group.sigkill, group.deleteLeader, group.deleteMember,
		lock.moveLeader}
	ctx, cancel := context.WithCancel(t.Context())
	var wg sync.WaitGroup
	for i := range 3 {
		lock.inProcess(ctx, &wg, fmt.Sprint("w", i))
	}
	for i := range 2 {
		group.inProcessGroup(ctx, &wg, fmt.Sprint("g", i))
	}
	for i := range 2 {
		lock.subprocess(fmt.Sprint("p", i))
		group.subprocess(fmt.Sprint("q", i))
	}
	lock.lifelong(lifelong)
	group.lifelong(lifelong)
	lockEvents, groupEvents := lock.collect(), group.collect()
	start := time.Now()
	sampling := make(chan struct{})
	go func() {
		defer close(sampling)
		sm.run(ctx, c, start, every)
	}()
	// Faults overlap (one starts every 0.3-1 s, each lasts past the TTL):
	// every quarter of the run, or soakPauseEvery if sooner, they pause
	// until the ones under way end, and keys and leases must come back to
	// the workload's level. Then one fault of the mix runs alone, the next
	// kind in turn, and they must come back again: what a fault leaves
	// behind is then its own.
	window, steady := max(every, min(length/4, soakPauseEvery)), int64(-1)
	kinds, alone := lock.kinds(hist), []string(nil)
	for end := start.Add(window); time.Since(start) < length; end = time.Now().Add(window) {
		lock.faultLoop(ctx, hist, func() bool { return time.Now().After(end) || time.Since(start) > length })
		group.settle()
		if time.Since(start) < length {
			steady = waitSteady(t, c, lock, group, steady, "the faults")
			alone = append(alone, probe(lock, group, kinds[len(alone)%len(kinds)]))
			steady = waitSteady(t, c, lock, group, steady, alone[len(alone)-1]+" alone")
		}
	}
	t.Logf("faults run alone, in turn: %v", alone)
	if length >= time.Hour && len(alone) < len(kinds) {
		t.Errorf("%d faults run alone in %v, fewer than the mix's %d kinds", len(alone), length, len(kinds))
	}
	dumpGoroutines(t)
	live, locking := group.live(2), lock.live(3)
	waitGroupBalanced(t, c, live)
	waitRunLed(t, c)
	waitLeases(t, c, locking+3*live)
	cancel()
	<-sampling
	lock.stopAll()
	group.stopAll()
	wg.Wait()

	raw := hist.events(t, c)
	r := &run{impl: "leasehold", events: lockEvents(), faults: lock.faults, duration: time.Since(start),
		keys: livesUnder(raw, keyspace.Prefix(fencing.DefaultRoot, string(fencing.KindLock), lockName))}
	r.counter = counterValue(t, c)
	st.mu.Lock()
	r.store, r.stale = st.accepted, st.stale
	st.mu.Unlock()
	r.owners = len(r.ownerChanges())
	r.log(t)
	gev := groupEvents()
	acked := 0
	for _, e := range gev {
		if e.kind == "write" && e.outcome == "ok" {
			acked++
		}
	}
	single := acknowledged(gev, runName)
	t.Logf("group: %d acknowledged increments (%d of them %s's), faults %v", acked, single, runName, group.faults)
	if r.owners < 5 || acked < groupNames || single == 0 {
		t.Errorf("%d lock owners, %d group increments, %d of %s: a workload did not run", r.owners, acked, single, runName)
	}
	for _, v := range append(r.violations(), groupViolations(raw, gev)...) {
		t.Error(v)
	}
	sm.report(t)
	for _, g := range sm.growing() {
		t.Error(g)
	}
	for _, s := range []string{"lifelong lock worker heap MiB", "lifelong group replica heap MiB"} {
		if n, of := sm.reported(t, s); n < of/2 {
			t.Errorf("%s: reported in %d of the last half's %d rows; a lifelong worker must report through the run", s, n, of)
		}
	}
	fencingtest.WaitFor(t, time.Minute, "every key and lease of the workers to go", func() bool {
		keys, leases, err := keysAndLeases(t.Context(), c)
		return err == nil && keys == 0 && leases == 0
	})
}

// waitSteady waits, once the faults under way (after names them) have
// ended, for etcd to hold one lease per live session (each lock worker
// one, each group replica three) and no more keys than at the first such
// pause (steady < 0: this is the first, and it sets the level), give or
// take the workload's own swing, without a break for steadyFor. It returns
// the level.
func waitSteady(t *testing.T, c *fencingtest.Cluster, lock, group *harness, steady int64, after string) int64 {
	want := int64(lock.live(3) + 3*group.live(2))
	var keys, leases int64
	var since time.Time // when the level was last reached, zero while not there
	fencingtest.WaitFor(t, time.Minute, "keys and leases back to the workload's level, and holding, after "+after, func() bool {
		k, l, err := keysAndLeases(t.Context(), c)
		keys, leases = k, l
		if err != nil || l != want || (steady >= 0 && k > steady+steadySwing) {
			since = time.Time{}
			return false
		}
		if since.IsZero() {
			since = time.Now()
		}
		return time.Since(since) > steadyFor
	})
	t.Logf("after %s: %d leases, %d keys (level %d)", after, leases, keys, steady)
	if steady < 0 {
		return keys
	}
	return steady
}

// soakPauseEvery is the longest stretch of faults between two checks of
// the workload's level: an hour's soak pauses more often than the mix has
// kinds of fault (TestSoak checks it), so that each runs alone.
const soakPauseEvery = 3 * time.Minute

// steadyFor is how long the level must hold without a break: past a
// lease's TTL and etcd's expiry scan, so that a check right after a fault
// that acts at once (a SIGKILL: the dead worker's lease still counted in
// place of its replacement's, not yet granted) cannot pass before the
// fault has had its effect.
const steadyFor = 2*ttl + time.Second

// probe runs fault alone, waits for it to end, and names it by the count it
// added to the harnesses' tallies, with the workload it aims at ("no fault"
// if its target was busy or gone, or its request failed).
func probe(lock, group *harness, fault func()) string {
	before := map[*harness]map[string]int{lock: lock.tally(), group: group.tally()}
	fault()
	lock.settle()
	group.settle()
	for h, was := range before {
		for kind, n := range h.tally() {
			switch {
			case n <= was[kind]:
			case clusterFault[kind]:
				return kind
			case h == lock:
				return "lock " + kind
			default:
				return "group " + kind
			}
		}
	}
	return "no fault"
}

// clusterFault marks the kinds of fault that aim at the cluster, not at
// one workload.
var clusterFault = map[string]bool{"stop-member": true, "stop-leader": true, "compact": true, "revoke": true, "move-leader": true}

// tally returns a copy of the harness's fault counts.
func (h *harness) tally() map[string]int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return maps.Clone(h.faults)
}

// steadySwing is how far the keys move with the workload alone: waiters
// queue and leave, elections are contested.
const steadySwing = 10

// live returns the number of the harness's workers: inProcess of them in
// this process, and its subprocesses.
func (h *harness) live(inProcess int) int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return inProcess + len(h.procs)
}

// dumpGoroutines writes the process's goroutines, grouped by stack, to the
// file LEASEHOLD_SOAK_GOROUTINES names, if it names one.
func dumpGoroutines(t *testing.T) {
	path := os.Getenv(soakStacksEnv)
	if path == "" {
		return
	}
	f, err := os.Create(path)
	if err == nil {
		err = errors.Join(pprof.Lookup("goroutine").WriteTo(f, 1), f.Close())
	}
	if err != nil {
		t.Errorf("writing the goroutines: %v", err)
	}
}

// moveLeader moves etcd's leadership to another member, as an operator
// does before maintenance.
func (h *harness) moveLeader() {
	h.mu.Lock()
	busy := h.busy["members"] // a member is down: a transfer may find no target
	h.mu.Unlock()
	if !busy {
		h.c.MoveLeader(h.t)
		h.count("move-leader")
	}
}

// livesUnder returns the lives of the keys under prefix in raw.
func livesUnder(raw []*clientv3.Event, prefix string) []*keyLife {
	var lives []*keyLife
	live := map[string]*keyLife{}
	for _, ev := range raw {
		k := string(ev.Kv.Key)
		if !strings.HasPrefix(k, prefix) {
			continue
		}
		if ev.Type == clientv3.EventTypePut && ev.IsCreate() {
			l := &keyLife{created: ev.Kv.CreateRevision}
			lives = append(lives, l)
			live[k] = l
		} else if ev.Type == clientv3.EventTypeDelete && live[k] != nil {
			live[k].deleted = ev.Kv.ModRevision
			delete(live, k)
		}
	}
	return lives
}

func counterValue(t *testing.T, c *fencingtest.Cluster) int64 {
	resp, err := c.Admin.Get(t.Context(), counterKey)
	if err != nil {
		t.Fatal(err)
	}
	if len(resp.Kvs) == 0 {
		return 0
	}
	n, _ := strconv.ParseInt(string(resp.Kvs[0].Value), 10, 64)
	return n
}

// keysAndLeases counts the library's keys (under its default root) and
// every lease in etcd.
func keysAndLeases(ctx context.Context, c *fencingtest.Cluster) (keys, leases int64, err error) {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	resp, err := c.Admin.Get(ctx, fencing.DefaultRoot, clientv3.WithPrefix(), clientv3.WithCountOnly())
	if err != nil {
		return 0, 0, err
	}
	ls, err := c.Admin.Leases(ctx)
	if err != nil {
		return 0, 0, err
	}
	return resp.Count, int64(len(ls.Leases)), nil
}

// procSample is what a process reports of itself.
type procSample struct {
	goroutines int
	heap       uint64 // bytes live after a GC
	leases     int    // its sessions' leases, granted and not revoked (census)
	watches    int    // watches open on its streams (census)
	at         time.Time
}

func sampleSelf() procSample {
	runtime.GC() // the live heap, not the garbage of the last minute
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return procSample{goroutines: runtime.NumGoroutine(), heap: ms.HeapAlloc, at: time.Now()}
}

// printSamples prints the process's sample every period until ctx ends, for
// the harness to read from the subprocess's output.
func printSamples(ctx context.Context, every time.Duration, cs *census) {
	// A worker the faults kill lives ~20 s: sample it four times a period,
	// or most rows would have no fresh sample of it.
	ticks(ctx, every/4, func() {
		s := sampleSelf()
		leases, watches := cs.counts()
		fmt.Printf("sample %d %d %d %d\n", s.goroutines, s.heap, leases, watches)
	})
}

// ticks calls f every period until ctx ends.
func ticks(ctx context.Context, every time.Duration, f func()) {
	tick := time.NewTicker(every)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
			f()
		}
	}
}

func parseSample(line string) (procSample, bool) {
	f := strings.Fields(line)
	if len(f) != 5 || f[0] != "sample" {
		return procSample{}, false
	}
	g, err1 := strconv.Atoi(f[1])
	h, err2 := strconv.ParseUint(f[2], 10, 64)
	l, err3 := strconv.Atoi(f[3])
	w, err4 := strconv.Atoi(f[4])
	return procSample{goroutines: g, heap: h, leases: l, watches: w, at: time.Now()}, errors.Join(err1, err2, err3, err4) == nil
}

// lifelong names the subprocess worker of each workload that SIGKILL spares
// (harness.lifelong): its series are one process's over the whole run.
const lifelong = "lifelong"

// soakSeries names the series, in the order of the table and the plot. A
// "lock worker" or "group replica" series is the mean over every worker
// subprocess of its workload, the lifelong one included; a "lifelong" one
// is that worker's alone. Judged ones must not grow. The test process hosts the three etcd members,
// whose restarts move its goroutines by a hundred or two (hence the floor),
// and the history every check reads, which grows its heap by design: that
// is shown, not judged; so are watch streams, which come and go with the
// members' restarts.
var soakSeries = []soakSeriesT{
	{"lock worker goroutines", true, 10},
	{"lock worker heap MiB", true, 2},
	{"lock worker sessions", true, 1},
	{"lock worker watches", true, 4},
	{"group replica goroutines", true, 10},
	{"group replica heap MiB", true, 2},
	{"group replica sessions", true, 1},
	{"group replica watches", true, 10},
	{"lifelong lock worker goroutines", true, 10},
	{"lifelong lock worker heap MiB", true, 0.5}, // one process: no mean over young ones to smooth
	{"lifelong lock worker sessions", true, 1},
	{"lifelong lock worker watches", true, 4},
	{"lifelong group replica goroutines", true, 10},
	{"lifelong group replica heap MiB", true, 0.5}, // one process: no mean over young ones to smooth
	{"lifelong group replica sessions", true, 1},
	{"lifelong group replica watches", true, 10},
	{"test process goroutines", true, 200},
	{"test process heap MiB", false, 0},
	{"keys", true, 10},
	// A SIGKILLed group replica's three leases stay until they expire while
	// its successor's three are granted; two such kills may overlap.
	{"leases", true, 8},
	{"watchers", true, 10},
	{"watch streams", false, 0},
}

type soakSeriesT struct {
	name   string
	judged bool
	floor  float64 // growth below this is noise, whatever the fit says
}

// soakSamples collects the series: one row per period.
type soakSamples struct {
	mu    sync.Mutex
	procs map[string]procSample // guarded by mu: the latest sample of each worker subprocess, by role/name
	at    []float64             // seconds since the start
	rows  [][]float64           // one value per soakSeries entry
}

// from takes the samples of one harness's subprocesses.
func (sm *soakSamples) from(role string) func(string, procSample) {
	return func(proc string, s procSample) {
		sm.mu.Lock()
		defer sm.mu.Unlock()
		sm.procs[role+"/"+proc] = s
	}
}

// run samples every period until ctx ends.
func (sm *soakSamples) run(ctx context.Context, c *fencingtest.Cluster, start time.Time, every time.Duration) {
	ticks(ctx, every, func() { sm.row(ctx, c, start, every) })
}

// row takes one sample of every series.
func (sm *soakSamples) row(ctx context.Context, c *fencingtest.Cluster, start time.Time, every time.Duration) {
	self := sampleSelf()
	keys, leases, err := keysAndLeases(ctx, c)
	if err != nil {
		return // a member down and the admin's request timed out: skip the row
	}
	watchers, streams := watchGauges(c)
	sm.mu.Lock()
	defer sm.mu.Unlock()
	var row []float64
	for _, role := range []string{"lock/", "group/", "lock/" + lifelong, "group/" + lifelong} {
		row = append(row, sm.mean(role, self.at, 2*every)...)
	}
	sm.at = append(sm.at, time.Since(start).Seconds())
	sm.rows = append(sm.rows, append(row, float64(self.goroutines), mib(self.heap),
		float64(keys), float64(leases), watchers, streams))
}

// mean returns the mean goroutines, heap (MiB), sessions and watches of the
// subprocesses whose role/name starts with role that reported within fresh
// of now: killed or paused ones drop out. Called with mu held.
func (sm *soakSamples) mean(role string, now time.Time, fresh time.Duration) []float64 {
	sum, n := make([]float64, 4), 0
	for name, s := range sm.procs {
		if strings.HasPrefix(name, role) && now.Sub(s.at) < fresh {
			for i, v := range []float64{float64(s.goroutines), mib(s.heap), float64(s.leases), float64(s.watches)} {
				sum[i] += v
			}
			n++
		}
	}
	for i := range sum {
		sum[i] /= float64(n) // NaN when none reported
	}
	return sum
}

func mib(b uint64) float64 { return float64(b) / (1 << 20) }

// watchGauges reads etcd's watcher and watch-stream gauges from a running
// member's /metrics. The gauges are process-wide: the three members' sum.
func watchGauges(c *fencingtest.Cluster) (watchers, streams float64) {
	watchers, streams = math.NaN(), math.NaN()
	for _, m := range c.Members {
		if !etcdtest.Running(m) {
			continue
		}
		cli := http.Client{Timeout: 5 * time.Second}
		resp, err := cli.Get(m.ClientURL.String() + "/metrics")
		if err != nil {
			continue
		}
		defer resp.Body.Close()
		sc := bufio.NewScanner(resp.Body)
		sc.Buffer(nil, 1<<20)
		for sc.Scan() {
			f := strings.Fields(sc.Text())
			if len(f) != 2 {
				continue
			}
			v, err := strconv.ParseFloat(f[1], 64)
			switch {
			case err != nil:
			case f[0] == "etcd_debugging_mvcc_watcher_total":
				watchers = v
			case f[0] == "etcd_debugging_mvcc_watch_stream_total":
				streams = v
			}
		}
		return watchers, streams
	}
	return watchers, streams
}

// growing names each judged series whose fitted slope over the last half of
// the run grows by more than its noise: three standard deviations of the
// fit's residuals, a tenth of its mean, or its floor, whichever is largest.
func (sm *soakSamples) growing() []string {
	sm.mu.Lock()
	defer sm.mu.Unlock()
	var out []string
	if len(sm.rows) < 4 {
		return []string{fmt.Sprintf("only %d samples: too few to tell a trend", len(sm.rows))}
	}
	half := len(sm.rows) / 2
	for i, s := range soakSeries {
		if !s.judged {
			continue
		}
		var xs, ys []float64
		for j := half; j < len(sm.rows); j++ {
			if v := sm.rows[j][i]; !math.IsNaN(v) {
				xs, ys = append(xs, sm.at[j]), append(ys, v)
			}
		}
		if len(xs) < 3 {
			continue
		}
		slope, mean, sd := fit(xs, ys)
		growth := slope * (xs[len(xs)-1] - xs[0])
		if noise := max(3*sd, mean/10, s.floor); growth > noise {
			out = append(out, fmt.Sprintf("%s grows over the last half: %+.1f (noise %.1f, mean %.1f)", s.name, growth, noise, mean))
		}
	}
	return out
}

// reported counts the rows of the last half that have a value of series,
// of how many.
func (sm *soakSamples) reported(t *testing.T, series string) (n, of int) {
	sm.mu.Lock()
	defer sm.mu.Unlock()
	i := slices.IndexFunc(soakSeries, func(s soakSeriesT) bool { return s.name == series })
	if i < 0 {
		t.Fatalf("no series %q", series)
	}
	for _, row := range sm.rows[len(sm.rows)/2:] {
		if of++; !math.IsNaN(row[i]) {
			n++
		}
	}
	return n, of
}

// fit returns the least-squares slope of ys over xs, the mean of ys and the
// standard deviation of the residuals.
func fit(xs, ys []float64) (slope, mean, sd float64) {
	n := float64(len(xs))
	var sx, sy, sxx, sxy float64
	for i := range xs {
		sx, sy, sxx, sxy = sx+xs[i], sy+ys[i], sxx+xs[i]*xs[i], sxy+xs[i]*ys[i]
	}
	if d := n*sxx - sx*sx; d != 0 {
		slope = (n*sxy - sx*sy) / d
	}
	mean = sy / n
	icept := (sy - slope*sx) / n
	var ss float64
	for i := range xs {
		r := ys[i] - (icept + slope*xs[i])
		ss += r * r
	}
	return slope, mean, math.Sqrt(ss / n)
}

// report logs the samples as a table and writes the plot.
func (sm *soakSamples) report(t *testing.T) {
	sm.mu.Lock()
	defer sm.mu.Unlock()
	var b strings.Builder
	b.WriteString("| min |")
	for _, s := range soakSeries {
		b.WriteString(" " + s.name + " |")
	}
	b.WriteString("\n|" + strings.Repeat(" --- |", len(soakSeries)+1) + "\n")
	for j, row := range sm.rows {
		fmt.Fprintf(&b, "| %.1f |", sm.at[j]/60)
		for _, v := range row {
			fmt.Fprintf(&b, " %.1f |", v)
		}
		b.WriteString("\n")
	}
	t.Logf("soak samples:\n%s", b.String())
	path := os.Getenv(soakSVGEnv)
	if path == "" {
		path = t.TempDir() + "/soak.svg"
	}
	if err := os.WriteFile(path, []byte(plot(sm.at, sm.rows)), 0o644); err != nil {
		t.Errorf("writing the plot: %v", err)
		return
	}
	t.Logf("plot written to %s", path)
}

// plot draws each series in a panel of its own, over minutes, as an SVG.
func plot(at []float64, rows [][]float64) string {
	const w, h, cols, pad = 420, 160, 2, 40
	rowsN := (len(soakSeries) + cols - 1) / cols
	var b strings.Builder
	fmt.Fprintf(&b, `<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" font-family="sans-serif" font-size="11">`+"\n", w*cols, h*rowsN)
	b.WriteString(`<rect width="100%" height="100%" fill="white"/>` + "\n")
	tmax := 1.0
	if len(at) > 0 {
		tmax = max(at[len(at)-1], 1)
	}
	for i, s := range soakSeries {
		x0, y0 := float64(i%cols*w+pad), float64(i/cols*h+20)
		pw, ph := float64(w-pad-10), float64(h-pad-10)
		lo, hi := math.Inf(1), math.Inf(-1)
		for _, r := range rows {
			if !math.IsNaN(r[i]) {
				lo, hi = min(lo, r[i]), max(hi, r[i])
			}
		}
		if math.IsInf(lo, 1) {
			lo, hi = 0, 1
		}
		lo = min(lo, 0)
		if hi <= lo {
			hi = lo + 1
		}
		fmt.Fprintf(&b, `<text x="%.0f" y="%.0f">%s</text>`+"\n", x0, y0-6, s.name)
		fmt.Fprintf(&b, `<rect x="%.0f" y="%.0f" width="%.0f" height="%.0f" fill="none" stroke="#999"/>`+"\n", x0, y0, pw, ph)
		fmt.Fprintf(&b, `<text x="%.0f" y="%.0f" text-anchor="end">%.4g</text>`+"\n", x0-3, y0+8, hi)
		fmt.Fprintf(&b, `<text x="%.0f" y="%.0f" text-anchor="end">%.4g</text>`+"\n", x0-3, y0+ph, lo)
		fmt.Fprintf(&b, `<text x="%.0f" y="%.0f" text-anchor="end">%.0f min</text>`+"\n", x0+pw, y0+ph+13, tmax/60)
		var pts []string
		for j, r := range rows {
			if math.IsNaN(r[i]) {
				continue
			}
			pts = append(pts, fmt.Sprintf("%.1f,%.1f", x0+pw*at[j]/tmax, y0+ph-ph*(r[i]-lo)/(hi-lo)))
		}
		fmt.Fprintf(&b, `<polyline fill="none" stroke="#1f77b4" stroke-width="1.5" points="%s"/>`+"\n", strings.Join(pts, " "))
	}
	b.WriteString("</svg>\n")
	return b.String()
}
