package robust_test

import (
	"cmp"
	"context"
	"fmt"
	"maps"
	"math/rand/v2"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/leasehold/leasehold/fencing"
	"github.com/leasehold/leasehold/fencing/fencingtest"
	"github.com/leasehold/leasehold/internal/keyspace"
	"github.com/leasehold/leasehold/internal/testbed/etcdtest"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// harness runs the workers and injects the faults.
type harness struct {
	t      testing.TB
	c      *fencingtest.Cluster
	impl   string
	store  string                          // the store's URL; for the group workload, the group
	helper string                          // the helper subprocess workers run: "worker" unless set
	extra  []func()                        // faults of a workload's own, besides the common ones
	sample func(proc string, s procSample) // takes the subprocesses' resource samples (soak); nil: dropped
	events chan event
	rng    *rand.Rand
	faults map[string]int

	readers sync.WaitGroup // forward subprocess output to events

	mu     sync.Mutex
	links  map[string]*fencingtest.Link // guarded by mu: every worker's link, by worker
	procs  map[string]*fencingtest.Proc // guarded by mu: running subprocess workers, by worker
	kept   map[string]bool              // guarded by mu: subprocess workers SIGKILL spares (lifelong)
	holder string                       // guarded by mu: the worker that acquired last
	busy   map[any]bool                 // guarded by mu: links, processes and members under a fault now
	next   int                          // guarded by mu: numbers new subprocess workers
	done   []chan struct{}              // guarded by mu: ends of fault goroutines
}

// newHarness returns a harness for impl's workers on c; store is the
// store's URL (the group's name, for the group workload).
func newHarness(t testing.TB, c *fencingtest.Cluster, impl, store string) *harness {
	return &harness{t: t, c: c, impl: impl, store: store, events: make(chan event, 4096),
		faults: map[string]int{}, links: map[string]*fencingtest.Link{}, procs: map[string]*fencingtest.Proc{}, kept: map[string]bool{},
		rng: rand.New(rand.NewPCG(uint64(time.Now().UnixNano()), 2))}
}

// collect gathers the workers' events, taking each acquirer as the faults'
// next target. Call the returned func once every worker has stopped: it
// returns them all.
func (h *harness) collect() (events func() []event) {
	var all []event
	done := make(chan struct{})
	go func() {
		defer close(done)
		for e := range h.events {
			if e.kind == "acquire" {
				h.acquired(e.worker)
			}
			all = append(all, e)
		}
	}()
	return func() []event {
		close(h.events)
		<-done
		return all
	}
}

// proxied returns a client for the in-process worker name, through a link
// of its own that the faults may cut.
func (h *harness) proxied(name string) *clientv3.Client {
	cli, link := h.c.ProxiedClient(h.t)
	h.mu.Lock()
	h.links[name] = link
	h.mu.Unlock()
	return cli
}

func (h *harness) inProcess(ctx context.Context, wg *sync.WaitGroup, name string) {
	cli := h.proxied(name)
	w := &worker{name: name, impl: h.impl, cli: cli, store: h.store,
		emit: func(e event) { h.events <- e }, rng: rand.New(rand.NewPCG(h.rng.Uint64(), 3))}
	wg.Go(func() { w.run(ctx) })
}

// inProcessGroup runs a RunGroup replica (groupWorker) in this process,
// through a link of its own.
func (h *harness) inProcessGroup(ctx context.Context, wg *sync.WaitGroup, name string) {
	cli := h.proxied(name)
	wg.Go(func() { groupWorker(ctx, name, cli, func(e event) { h.events <- e }) })
}

func (h *harness) subprocess(name string) {
	link := h.c.NewLink(h.t)
	p := fencingtest.StartHelper(h.t, cmp.Or(h.helper, "worker"), append([]string{name, h.impl, h.store}, link.Endpoints()...)...)
	h.mu.Lock()
	h.links[name] = link
	h.procs[name] = p
	h.mu.Unlock()
	h.readers.Go(func() {
		for line := range p.Lines() {
			if e, ok := parseEvent(line); ok {
				h.events <- e
			} else if s, ok := parseSample(line); ok && h.sample != nil {
				h.sample(name, s)
			}
		}
	})
}

// faultLoop injects a random fault every 0.3–1 s until done says so, then
// waits for the faults under way to end.
func (h *harness) faultLoop(ctx context.Context, hist *history, done func() bool) {
	kinds := h.kinds(hist)
	for ctx.Err() == nil && !done() {
		pause(ctx, time.Duration(300+h.rng.IntN(700))*time.Millisecond)
		kinds[h.rng.IntN(len(kinds))]()
	}
	h.settle()
}

// kinds is the fault mix: the common faults, then the workload's own.
func (h *harness) kinds(hist *history) []func() {
	return append([]func(){h.blackhole, h.sigstop, h.sigkill, h.stopMember, h.stopLeader,
		func() { h.compact(hist) }, h.revoke, h.deleteOwner}, h.extra...)
}

// settle waits for the faults under way to end.
func (h *harness) settle() {
	h.mu.Lock()
	ends := h.done
	h.mu.Unlock()
	for _, d := range ends {
		<-d
	}
}

// during runs a fault on target for longer than the TTL, in the background,
// unless target is already under a fault.
func (h *harness) during(kind string, target any, start, end func()) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.busy == nil {
		h.busy = map[any]bool{}
	}
	if h.busy[target] {
		return
	}
	h.busy[target] = true
	h.faults[kind]++
	d := make(chan struct{})
	h.done = append(h.done, d)
	start()
	length := ttl + time.Duration(h.rng.IntN(1000))*time.Millisecond // longer than the TTL
	go func() {
		defer close(d)
		time.Sleep(length)
		end()
		h.mu.Lock()
		delete(h.busy, target)
		h.mu.Unlock()
	}()
}

// Faults aim at the holder three times in four: a fault on a waiter rarely
// tests anything.
func (h *harness) blackhole() {
	h.mu.Lock()
	l := h.links[h.target(h.links)]
	h.mu.Unlock()
	h.during("blackhole", l, l.Blackhole, l.Restore)
}

// target picks the holder if it is in m (most of the time), else anyone.
// It is called with mu held.
func (h *harness) target(m map[string]*fencingtest.Link) string {
	return pick(h.rng, h.holder, m)
}

func pick[T any](rng *rand.Rand, holder string, m map[string]T) string {
	if _, ok := m[holder]; ok && rng.IntN(4) > 0 {
		return holder
	}
	names := make([]string, 0, len(m))
	for n := range m {
		names = append(names, n)
	}
	slices.Sort(names)
	if len(names) == 0 {
		return ""
	}
	return names[rng.IntN(len(names))]
}

// acquired notes the latest holder, for the faults to aim at.
func (h *harness) acquired(worker string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.holder = worker
}

func (h *harness) sigstop() {
	p := h.pickProc()
	if p == nil {
		return
	}
	h.during("sigstop", p, func() { p.Stop(h.t) }, func() { p.Cont(h.t) })
}

// lifelong starts a subprocess worker that SIGKILL spares (other faults
// still reach it), so that one process of the workload lives the whole
// run: what accumulates in a process shows in its samples, not in those of
// workers killed every 20 s.
func (h *harness) lifelong(name string) {
	h.mu.Lock()
	h.kept[name] = true
	h.mu.Unlock()
	h.subprocess(name)
}

func (h *harness) sigkill() {
	h.mu.Lock()
	mortal := maps.Clone(h.procs)
	for n := range h.kept {
		delete(mortal, n)
	}
	name := pick(h.rng, h.holder, mortal)
	p, link := h.procs[name], h.links[name]
	if p == nil || h.busy[p] {
		h.mu.Unlock()
		return
	}
	delete(h.procs, name)
	delete(h.links, name)
	h.faults["sigkill"]++
	h.next++
	next := fmt.Sprint("k", h.next)
	h.mu.Unlock()
	p.Kill(h.t)
	link.Close() // its proxies would otherwise live, idle, until the test ends
	h.subprocess(next)
}

func (h *harness) pickProc() *fencingtest.Proc {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.procs[pick(h.rng, h.holder, h.procs)]
}

// stopMember stops one member for a while; at most one is down at a time,
// so the cluster keeps its quorum.
func (h *harness) stopMember() {
	i := h.rng.IntN(len(h.c.Members))
	h.during("stop-member", "members", func() { h.c.Stop(i) }, func() { h.c.Restart(h.t, i) })
}

func (h *harness) stopLeader() {
	i := etcdtest.Leader(h.c)
	if i < 0 {
		return
	}
	h.during("stop-leader", "members", func() { h.c.Stop(i) }, func() { h.c.Restart(h.t, i) })
}

// compact compacts up to what the history has already seen, so that its
// watch never loses an event.
func (h *harness) compact(hist *history) {
	ctx, cancel := context.WithTimeout(h.t.Context(), 5*time.Second)
	defer cancel()
	if _, err := h.c.Admin.Compact(ctx, hist.progress()); err == nil {
		h.count("compact")
	}
}

func (h *harness) revoke() {
	ctx, cancel := context.WithTimeout(h.t.Context(), 5*time.Second)
	defer cancel()
	leases, err := h.c.Admin.Leases(ctx)
	if err != nil || len(leases.Leases) == 0 {
		return
	}
	if _, err := h.c.Admin.Revoke(ctx, leases.Leases[h.rng.IntN(len(leases.Leases))].ID); err == nil {
		h.count("revoke")
	}
}

// deleteOwner deletes the current owner's key, as an operator might.
func (h *harness) deleteOwner() {
	ctx, cancel := context.WithTimeout(h.t.Context(), 5*time.Second)
	defer cancel()
	prefix := keyspace.Prefix(fencing.DefaultRoot, "lock", lockName)
	if h.impl == "concurrency" {
		prefix = "concurrency/"
	}
	resp, err := h.c.Admin.Get(ctx, prefix, append(clientv3.WithFirstCreate(), clientv3.WithKeysOnly())...)
	if err != nil || len(resp.Kvs) == 0 {
		return
	}
	if _, err := h.c.Admin.Delete(ctx, string(resp.Kvs[0].Key)); err == nil {
		h.count("delete-owner")
	}
}

func (h *harness) count(kind string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.faults[kind]++
}

// stopAll ends the subprocess workers: end of input stops them.
func (h *harness) stopAll() {
	h.mu.Lock()
	var procs []*fencingtest.Proc
	for _, p := range h.procs {
		procs = append(procs, p)
	}
	h.mu.Unlock()
	for _, p := range procs {
		p.Cont(h.t)
		p.Close()
	}
	for _, p := range procs {
		<-p.Exited()
	}
	h.readers.Wait()
}
