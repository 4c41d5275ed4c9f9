package robust_test

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"slices"
	"sort"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/leasehold/leasehold/fencing"
	"github.com/leasehold/leasehold/fencing/fencingtest"
	"github.com/leasehold/leasehold/fencing/gate"
	"github.com/leasehold/leasehold/internal/testbed/etcdtest"
	clientv3 "go.etcd.io/etcd/client/v3"
)

func TestMain(m *testing.M) {
	fencingtest.RegisterHelper("worker", workerHelper)
	fencingtest.RegisterHelper("group-worker", groupWorkerHelper)
	fencingtest.RegisterHelper("sql-worker", sqlWorkerHelper)
	fencingtest.RegisterHelper("shared-worker", sharedWorkerHelper)
	fencingtest.RegisterHelper("multi-worker", multiWorkerHelper)
	fencingtest.RegisterHelper("redis-worker", redisWorkerHelper)
	fencingtest.Main(m)
}

// runLength says how long a workload runs: 25 s of faults, or with
// LEASEHOLD_ROBUST_LONG=1 until 1000 lock keys were created (each Lock
// creates one; nearly all become owners), for at most an hour.
func runLength() (time.Duration, int) {
	if os.Getenv("LEASEHOLD_ROBUST_LONG") != "" {
		return time.Hour, 1000
	}
	return 25 * time.Second, 0
}

// TestLeaseholdUnderFaults is the suite: leasehold's guarded and fenced
// writes must come out of every fault with no violation.
func TestLeaseholdUnderFaults(t *testing.T) {
	etcdtest.Long(t)
	r := runWorkload(t, "leasehold", true)
	r.log(t)
	for _, v := range r.violations() {
		t.Error(v)
	}
	if r.owners < 5 {
		t.Errorf("only %d ownership changes: the workload did not exercise the lock", r.owners)
	}
}

// BenchmarkUnderFaults runs TestLeaseholdUnderFaults's workload with
// leasehold's guarded and fenced writes, then with etcd's concurrency.Mutex
// and plain writes, and reports each one's violations. It is what the suite
// demonstrates, measured: a benchmark and not a test, since how many
// updates concurrency loses depends on timing and can be none in one short
// run. One run of each, whatever b.N:
//
//	go test ./internal/robust -run '^$' -bench UnderFaults -benchtime 1x
func BenchmarkUnderFaults(b *testing.B) {
	for _, impl := range []string{"leasehold", "concurrency"} {
		b.Run("impl="+impl, func(b *testing.B) {
			r := runWorkload(b, impl, impl == "leasehold")
			r.log(b)
			for _, v := range r.violations() {
				b.Log("violation:", v)
			}
			b.ReportMetric(float64(len(r.violations())), "violations")
			b.ReportMetric(float64(r.owners), "owner-changes")
		})
	}
}

// store is the system outside etcd: it keeps every accepted write in order,
// behind a Gate (enforce) or only noting what the Gate would have refused.
type store struct {
	gate     gate.Gate
	enforce  bool
	mu       sync.Mutex
	accepted []fencing.Token // guarded by mu
	stale    int             // guarded by mu: writes the gate refused (or would have)
}

func (s *store) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	t, err := fencing.ParseToken(r.Header.Get(gate.Header))
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	err = s.gate.Do(r.Context(), t, func(context.Context) error {
		s.mu.Lock()
		defer s.mu.Unlock()
		s.accepted = append(s.accepted, t)
		return nil
	})
	if err != nil {
		s.mu.Lock()
		s.stale++
		if !s.enforce {
			s.accepted = append(s.accepted, t) // a store without a fence takes it
		}
		s.mu.Unlock()
		if s.enforce {
			http.Error(w, err.Error(), http.StatusConflict)
		}
	}
}

// run is one workload's history and what the cluster ended with.
type run struct {
	impl     string
	events   []event
	keys     []*keyLife // every life of every lock key, from the admin's watch
	counter  int64
	store    []fencing.Token
	stale    int
	owners   int
	faults   map[string]int
	duration time.Duration
}

// keyLife is when one lock key existed: [created, deleted). concurrency
// reuses a session's key for its next Lock, so one key can have many lives.
type keyLife struct{ created, deleted int64 }

func runWorkload(t testing.TB, impl string, enforce bool) *run {
	c := fencingtest.Three(t)
	maxTime, minOwners := runLength()
	st := &store{enforce: enforce}
	srv := httptest.NewServer(st)
	t.Cleanup(srv.Close)
	prefix := "leasehold/"
	if impl == "concurrency" {
		prefix = "concurrency/"
	}
	hist := watchHistory(t, c, prefix)
	h := newHarness(t, c, impl, srv.URL)
	ctx, cancel := context.WithCancel(t.Context())
	var wg sync.WaitGroup
	for i := range 3 {
		h.inProcess(ctx, &wg, fmt.Sprint("w", i))
	}
	for i := range 2 {
		h.subprocess(fmt.Sprint("p", i))
	}
	events := h.collect()
	start := time.Now()
	h.faultLoop(ctx, hist, func() bool {
		if time.Since(start) > maxTime {
			return true
		}
		return minOwners > 0 && hist.created() >= minOwners
	})
	cancel()
	h.stopAll()
	wg.Wait()
	r := &run{impl: impl, events: events(), faults: h.faults, duration: time.Since(start)}
	resp, err := c.Admin.Get(t.Context(), counterKey)
	if err != nil {
		t.Fatal(err)
	}
	if len(resp.Kvs) > 0 {
		r.counter, _ = strconv.ParseInt(string(resp.Kvs[0].Value), 10, 64)
	}
	r.keys = hist.until(t, resp.Header.Revision)
	st.mu.Lock()
	r.store, r.stale = st.accepted, st.stale
	st.mu.Unlock()
	r.owners = len(r.ownerChanges())
	return r
}

// history follows every key under a prefix from the admin client.
type history struct {
	mu    sync.Mutex
	lives []*keyLife          // guarded by mu
	live  map[string]*keyLife // guarded by mu: the current life of each existing key
	seen  int64               // guarded by mu: the last revision observed
	raw   []*clientv3.Event   // guarded by mu: every event, in order
}

func watchHistory(t testing.TB, c *fencingtest.Cluster, prefix string) *history {
	resp, err := c.Admin.Get(t.Context(), "robust/none")
	if err != nil {
		t.Fatal(err)
	}
	h := &history{live: map[string]*keyLife{}, seen: resp.Header.Revision}
	ctx, cancel := context.WithCancel(t.Context())
	t.Cleanup(cancel)
	wch := c.Admin.Watch(ctx, prefix, clientv3.WithPrefix(), clientv3.WithRev(resp.Header.Revision+1),
		clientv3.WithProgressNotify())
	go func() {
		for resp := range wch {
			if err := resp.Err(); err != nil {
				t.Errorf("history watch broke: %v", err) // compaction is kept behind it
				return
			}
			h.mu.Lock()
			h.raw = append(h.raw, resp.Events...)
			for _, ev := range resp.Events {
				k := string(ev.Kv.Key)
				if ev.Type == clientv3.EventTypePut && ev.IsCreate() {
					l := &keyLife{created: ev.Kv.CreateRevision}
					h.lives = append(h.lives, l)
					h.live[k] = l
				} else if ev.Type == clientv3.EventTypeDelete && h.live[k] != nil {
					h.live[k].deleted = ev.Kv.ModRevision
					delete(h.live, k)
				}
			}
			h.seen = max(h.seen, resp.Header.Revision)
			h.mu.Unlock()
		}
	}()
	return h
}

func (h *history) created() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return len(h.lives)
}

func (h *history) progress() int64 {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.seen
}

// events waits until the history has seen everything written so far, and
// returns every event, in order.
func (h *history) events(t testing.TB, c *fencingtest.Cluster) []*clientv3.Event {
	resp, err := c.Admin.Get(t.Context(), "robust/none")
	if err != nil {
		t.Fatal(err)
	}
	h.until(t, resp.Header.Revision)
	h.mu.Lock()
	defer h.mu.Unlock()
	return slices.Clone(h.raw)
}

// until waits until the history has seen rev, and returns it.
func (h *history) until(t testing.TB, rev int64) []*keyLife {
	fencingtest.WaitFor(t, time.Minute, "the history to catch up", func() bool { return h.progress() >= rev })
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.lives
}

// ownerChanges lists, in revision order, each key that became the owner
// (the oldest existing key) and the revision at which it did.
func (r *run) ownerChanges() [][2]int64 {
	type edge struct {
		rev    int64
		create bool
		key    int64
	}
	var edges []edge
	for _, k := range r.keys {
		edges = append(edges, edge{k.created, true, k.created})
		if k.deleted > 0 {
			edges = append(edges, edge{k.deleted, false, k.created})
		}
	}
	sort.Slice(edges, func(i, j int) bool { return edges[i].rev < edges[j].rev })
	alive := map[int64]bool{}
	var changes [][2]int64 // (owner token, revision)
	var owner int64
	for _, e := range edges {
		if e.create {
			alive[e.key] = true
		} else {
			delete(alive, e.key)
		}
		oldest := int64(0)
		for k := range alive {
			if oldest == 0 || k < oldest {
				oldest = k
			}
		}
		if oldest != owner && oldest != 0 {
			changes = append(changes, [2]int64{oldest, e.rev})
		}
		owner = oldest
	}
	return changes
}

// ownerAt returns the token of the owner at revision rev (0: nobody).
func (r *run) ownerAt(rev int64) int64 { return ownerOf(r.keys, rev) }

// ownerOf returns the token of the oldest key of lives alive at rev (0:
// none).
func ownerOf(lives []*keyLife, rev int64) int64 {
	owner := int64(0)
	for _, k := range lives {
		if k.created <= rev && (k.deleted == 0 || k.deleted > rev) && (owner == 0 || k.created < owner) {
			owner = k.created
		}
	}
	return owner
}

// violations checks the history: (1) counter equals acknowledged increments,
// (2) the store never accepted an older token after a newer one, (3) owner
// tokens strictly increase and every acquire was an owner, (4) every
// acknowledged write was made by the owner at its commit revision.
func (r *run) violations() []string {
	var out []string
	acked, unknown := 0, 0
	values := map[int64]string{}
	owners := map[int64]bool{}
	for _, ch := range r.ownerChanges() {
		owners[ch[0]] = true
	}
	for _, e := range r.events {
		switch {
		case e.kind == "attempt":
			// Unknown until its write event settles it; a worker killed
			// mid-write never sends one.
			unknown++
		case e.kind == "write" && e.outcome != "unknown":
			unknown--
			if e.outcome != "ok" {
				break
			}
			acked++
			if prev, dup := values[e.value]; dup {
				out = append(out, fmt.Sprintf("value %d acknowledged twice (%s and %s)", e.value, prev, e.worker))
			}
			values[e.value] = e.worker
			if o := r.ownerAt(e.rev); o != e.token {
				out = append(out, fmt.Sprintf("%s wrote %d at revision %d with token %d while %d owned the lock", e.worker, e.value, e.rev, e.token, o))
			}
		case e.kind == "acquire" && !owners[e.token]:
			out = append(out, fmt.Sprintf("%s acquired with token %d, which never owned the lock", e.worker, e.token))
		}
	}
	if lost := int64(acked) - r.counter; lost > 0 || r.counter > int64(acked+unknown) {
		out = append(out, fmt.Sprintf("counter %d after %d acknowledged increments (%d of unknown outcome): %d lost", r.counter, acked, unknown, lost))
	}
	for i := 1; i < len(r.store); i++ {
		if r.store[i].Compare(r.store[i-1]) < 0 {
			out = append(out, fmt.Sprintf("store accepted token %v after %v", r.store[i], r.store[i-1]))
		}
	}
	changes := r.ownerChanges()
	for i := 1; i < len(changes); i++ {
		if changes[i][0] <= changes[i-1][0] {
			out = append(out, fmt.Sprintf("owner token %d after %d", changes[i][0], changes[i-1][0]))
		}
	}
	return out
}

func (r *run) log(t testing.TB) {
	counts := map[string]int{}
	for _, e := range r.events {
		counts[e.kind+"/"+e.outcome]++
	}
	t.Logf("%s: %v, %d ownership changes, counter %d, store accepted %d (%d stale refused), events %v, faults %v",
		r.impl, r.duration.Round(time.Second), r.owners, r.counter, len(r.store), r.stale, counts, r.faults)
}
