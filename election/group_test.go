package election_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"runtime"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/leasehold/leasehold/internal/testbed/etcdtest"

	"github.com/leasehold/leasehold/election"
	"github.com/leasehold/leasehold/fencing"
	"github.com/leasehold/leasehold/fencing/fencingtest"
	"github.com/leasehold/leasehold/internal/assign"
	"github.com/leasehold/leasehold/internal/keyspace"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// world runs RunGroup replicas of one group and records, for each name,
// which replica's work runs it now.
type world struct {
	t     *testing.T
	c     *fencingtest.Cluster
	group string
	names []string

	mu       sync.Mutex
	working  map[string]string   // name → replica whose work for it runs now
	starts   map[string][]string // name → the replicas whose works for it started, in order
	overlaps []string            // names whose works ran on two replicas at once
	causes   map[string][]error  // replica → why its works' contexts ended
	released map[string][]string // replica → the names it released for a reason
	failing  map[string][]string // replica → names whose works fail there
}

func newWorld(t *testing.T, c *fencingtest.Cluster, n int) *world {
	names := make([]string, n)
	for i := range names {
		names[i] = fmt.Sprintf("%s/job-%d", t.Name(), i)
	}
	return &world{t: t, c: c, group: t.Name(), names: names, working: map[string]string{}, starts: map[string][]string{},
		causes: map[string][]error{}, released: map[string][]string{}, failing: map[string][]string{}}
}

type replica struct {
	id     string
	cancel context.CancelFunc
	done   chan error
}

// start runs replica id with names (the world's when nil) on cli (its own
// client when nil).
func (w *world) start(id string, cli *clientv3.Client, names []string, opts ...election.RunOption) *replica {
	if cli == nil {
		cli = w.c.Client(w.t)
	}
	if names == nil {
		names = w.names
	}
	obs := fencing.Observer{OnRelease: func(e fencing.ReleaseEvent) {
		if errors.Is(e.Reason, election.ErrRebalanced) {
			w.mu.Lock()
			w.released[id] = append(w.released[id], e.Token.Name)
			w.mu.Unlock()
		}
	}}
	all := append([]election.RunOption{
		election.WithBackoff(10*time.Millisecond, 100*time.Millisecond),
		election.WithSessionOptions(fencing.WithIdentity(id), fencing.WithTTL(30*time.Second), fencing.WithObserver(obs)),
	}, opts...)
	ctx, cancel := context.WithCancel(context.Background())
	r := &replica{id: id, cancel: cancel, done: make(chan error, 1)}
	go func() { r.done <- election.RunGroup(ctx, cli, w.group, names, w.work(id), all...) }()
	w.t.Cleanup(func() { r.stop(w.t) })
	return r
}

// stop ends the replica and waits for RunGroup to return nil.
func (r *replica) stop(t *testing.T) {
	t.Helper()
	r.cancel()
	select {
	case err := <-r.done:
		if err != nil {
			t.Errorf("RunGroup of %s: %v", r.id, err)
		}
		r.done <- nil // a second stop returns at once
	case <-time.After(wait):
		t.Fatalf("RunGroup of %s did not return", r.id)
	}
}

func (w *world) work(id string) func(context.Context, *election.Term) error {
	return func(ctx context.Context, term *election.Term) error {
		name := term.Token().Name
		w.mu.Lock()
		if other := w.working[name]; other != "" {
			w.overlaps = append(w.overlaps, fmt.Sprintf("%s on %s and %s", name, other, id))
		}
		fail := slices.Contains(w.failing[id], name)
		if !fail {
			w.working[name] = id
			w.starts[name] = append(w.starts[name], id)
		}
		w.mu.Unlock()
		if fail {
			return errors.New("this replica cannot run " + name)
		}
		<-ctx.Done()
		w.mu.Lock()
		if w.working[name] == id {
			delete(w.working, name)
		}
		w.causes[id] = append(w.causes[id], context.Cause(ctx))
		w.mu.Unlock()
		return nil
	}
}

// loads returns how many names each replica works on, and how many names
// of want nobody works on.
func (w *world) loads(want []string) (map[string]int, int) {
	w.mu.Lock()
	defer w.mu.Unlock()
	l, idle := map[string]int{}, 0
	for _, n := range want {
		if id := w.working[n]; id != "" {
			l[id]++
		} else {
			idle++
		}
	}
	return l, idle
}

// waitBalanced waits until every name of want runs on one of ids, none
// leading more than its share, and checks that etcd says the same.
func (w *world) waitBalanced(want []string, ids ...string) map[string]int {
	w.t.Helper()
	limit := assign.Cap(len(want), len(ids))
	var l map[string]int
	fencingtest.WaitFor(w.t, 2*wait, fmt.Sprintf("%d names balanced over %v", len(want), ids), func() bool {
		var idle int
		l, idle = w.loads(want)
		if idle > 0 || len(l) != len(ids) {
			return false
		}
		for _, id := range ids {
			if l[id] == 0 || l[id] > limit {
				return false
			}
		}
		return true
	})
	w.checkLeaders(want)
	return l
}

// checkLeaders checks that each name's leader in etcd is the replica that
// runs its work.
func (w *world) checkLeaders(want []string) {
	w.t.Helper()
	cli := w.c.Client(w.t)
	for _, n := range want {
		resp, err := cli.Get(fencingtest.Context(w.t, wait), keyspace.Prefix(fencing.DefaultRoot, "election", n), clientv3.WithFirstCreate()...)
		if err != nil {
			w.t.Fatal(err)
		}
		w.mu.Lock()
		id := w.working[n]
		w.mu.Unlock()
		if len(resp.Kvs) == 0 || string(resp.Kvs[0].Value) != id {
			w.t.Fatalf("%s: etcd says %v leads, work runs on %q", n, resp.Kvs, id)
		}
	}
}

func (w *world) checkNoOverlap() {
	w.t.Helper()
	w.mu.Lock()
	defer w.mu.Unlock()
	if len(w.overlaps) > 0 {
		w.t.Fatalf("works ran at once: %v", w.overlaps)
	}
}

// handedOff counts the works of id whose context ended with ErrRebalanced.
func (w *world) handedOff(id string) int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return countIs(w.causes[id], election.ErrRebalanced)
}

// countIs counts the errors of errs that wrap target.
func countIs(errs []error, target error) int {
	n := 0
	for _, err := range errs {
		if errors.Is(err, target) {
			n++
		}
	}
	return n
}

func TestGroupBalancesJoinAndLeave(t *testing.T) {
	c := fencingtest.Single(t)
	w := newWorld(t, c, 30)
	w.start("a", nil, nil)
	w.waitBalanced(w.names, "a")

	w.start("b", nil, nil)
	loads := w.waitBalanced(w.names, "a", "b")
	if moved := w.handedOff("a"); moved != loads["b"] {
		t.Errorf("join of b: a handed off %d names, b leads %d", moved, loads["b"])
	}

	cr := w.start("c", nil, nil)
	before := loads
	loads = w.waitBalanced(w.names, "a", "b", "c")
	t.Logf("loads after c joined: %v (before: %v)", loads, before)
	moved := w.handedOff("a") + w.handedOff("b") - before["b"]
	if moved > loads["c"]+3 { // c's share, and the few a changed cap pushes on
		t.Errorf("join of c moved %d names; c leads %d", moved, loads["c"])
	}

	cr.stop(t) // graceful leave: c's names move, by handoff, to a and b
	w.waitBalanced(w.names, "a", "b")
	w.checkNoOverlap()
	handed := w.handedOff("a")
	w.mu.Lock()
	defer w.mu.Unlock()
	if len(w.released["a"]) == 0 || len(w.released["a"]) != handed {
		t.Errorf("observer of a saw %d releases for a reason, works saw %d handoffs", len(w.released["a"]), handed)
	}
	for _, cause := range w.causes["c"] {
		if !errors.Is(cause, context.Canceled) {
			t.Errorf("a work of c, which left, ended with %v, not its ctx's cause", cause)
		}
	}
}

func TestGroupFailingNameMoves(t *testing.T) {
	c := fencingtest.Single(t)
	w := newWorld(t, c, 6)
	// a cannot run half the names: it declines them, in vain while alone.
	// Whichever of them the hash gives a once b joins must move to b.
	w.failing["a"] = w.names[:3]
	a := w.start("a", nil, nil)
	w.waitBalanced(w.names[3:], "a")
	w.start("b", nil, nil)
	w.waitBalanced(w.names, "a", "b") // 3 each: a runs all it can
	a.stop(t)
	w.waitBalanced(w.names, "b")
	w.checkNoOverlap()
}

func TestGroupReturnPolicy(t *testing.T) {
	c := fencingtest.Single(t)
	w := newWorld(t, c, 4)
	w.failing["a"] = w.names[2:3]
	r := w.start("a", nil, nil, election.AfterError(election.Return))
	select {
	case err := <-r.done:
		if err == nil || !strings.Contains(err.Error(), "cannot run") {
			t.Fatalf("RunGroup = %v, want the work's error", err)
		}
		r.done <- nil
	case <-time.After(wait):
		t.Fatal("RunGroup did not return the work's error")
	}
	if keys := etcdtest.Keys(t, c, fencing.DefaultRoot); len(keys) != 0 {
		t.Fatalf("keys left: %v", keys)
	}
}

func TestGroupNamesChangeBetweenRuns(t *testing.T) {
	c := fencingtest.Single(t)
	w := newWorld(t, c, 6)
	old, cur := w.names[:4], w.names[2:]
	a := w.start("a", nil, old)
	b := w.start("b", nil, old)
	w.waitBalanced(old, "a", "b")
	b.stop(t)
	w.start("b", nil, cur) // b restarts with two names gone and two new
	w.waitBalanced(w.names, "a", "b")
	w.mu.Lock()
	for _, n := range cur[2:] {
		if w.working[n] != "b" {
			t.Errorf("%s, only b lists it, runs on %q", n, w.working[n])
		}
	}
	w.mu.Unlock()
	a.stop(t)
	w.start("a", nil, cur)
	w.waitBalanced(cur, "a", "b")
	if l, idle := w.loads(old[:2]); idle != 2 {
		t.Errorf("names nobody lists any more still run: %v", l)
	}
	w.checkNoOverlap()
}

func TestGroupPartitionedReplicaLosesItsNames(t *testing.T) {
	c := fencingtest.Single(t)
	w := newWorld(t, c, 10)
	cli, link := c.ProxiedClient(t)
	ttl := election.WithSessionOptions(fencing.WithTTL(2 * time.Second))
	w.start("a", nil, nil, ttl)
	w.start("b", cli, nil, ttl)
	w.waitBalanced(w.names, "a", "b")
	link.Blackhole()
	w.waitBalanced(w.names, "a") // b's lease expires; a takes b's names
	link.Restore()
	w.waitBalanced(w.names, "a", "b")
}

func TestGroupCrashedReplicaLosesItsNames(t *testing.T) {
	c := fencingtest.Single(t)
	w := newWorld(t, c, 10)
	w.start("a", nil, nil, election.WithSessionOptions(fencing.WithTTL(2*time.Second)))
	p := fencingtest.StartHelper(t, "group-replica", append([]string{c.Endpoints()[0], w.group, "crashy"}, w.names...)...)
	fencingtest.WaitFor(t, 2*wait, "crashy leads half the names", func() bool {
		l, _ := w.loads(w.names)
		return l["a"] == 5
	})
	p.Expect(t, wait, "leading")
	p.Kill(t)
	w.waitBalanced(w.names, "a")
}

// groupReplica is RunGroup in a subprocess: args are the endpoint, the
// group, the identity and the names. It prints "leading NAME" for each term.
func groupReplica(args []string) int {
	cli, err := clientv3.New(clientv3.Config{Endpoints: args[:1], DialTimeout: 5 * time.Second})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer cli.Close()
	ctx, cancel := context.WithCancel(context.Background())
	go func() { os.Stdin.Read(make([]byte, 1)); cancel() }()
	err = election.RunGroup(ctx, cli, args[1], args[3:], func(ctx context.Context, t *election.Term) error {
		fmt.Println("leading", t.Token().Name)
		<-ctx.Done()
		return nil
	}, election.WithSessionOptions(fencing.WithIdentity(args[2]), fencing.WithTTL(2*time.Second)))
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	return 0
}

func TestRunGroupRejectsBadArguments(t *testing.T) {
	c := fencingtest.Single(t)
	cli := c.Client(t)
	work := func(context.Context, *election.Term) error { return nil }
	for _, tc := range []struct {
		group string
		names []string
		want  error
	}{
		{"g", nil, fencing.ErrInvalidArgument},
		{"g", []string{"a", "a"}, fencing.ErrInvalidArgument},
		{"g", []string{"a", "b#c"}, fencing.ErrInvalidName},
		{"g#", []string{"a"}, fencing.ErrInvalidName},
		{"", []string{"a"}, fencing.ErrInvalidName},
	} {
		if err := election.RunGroup(t.Context(), cli, tc.group, tc.names, work); !errors.Is(err, tc.want) {
			t.Errorf("RunGroup(%q, %q) = %v, want %v", tc.group, tc.names, err, tc.want)
		}
	}
	if err := election.RunGroup(t.Context(), cli, "g", []string{"a"}, nil); !errors.Is(err, fencing.ErrInvalidArgument) {
		t.Errorf("RunGroup with nil work = %v", err)
	}
	if err := election.RunGroup(t.Context(), cli, "g", []string{"a"}, work, nil); !errors.Is(err, fencing.ErrInvalidArgument) {
		t.Errorf("RunGroup with a nil option = %v", err)
	}
	if keys := etcdtest.Keys(t, c, ""); len(keys) != 0 {
		t.Fatalf("keys left: %v", keys)
	}
}

// RunGroup returns soon after ctx ends even when etcd cannot be reached to
// leave: a second for the membership key, one for the resigns (sent
// together) and one for the revoke, as documented.
func TestRunGroupReturnsSoonAfterCtxWhenUnreachable(t *testing.T) {
	c := fencingtest.Single(t)
	w := newWorld(t, c, 4)
	cli, link := c.ProxiedClient(t)
	r := w.start("a", cli, nil)
	w.waitBalanced(w.names, "a")
	link.Blackhole()
	defer link.Restore()
	r.cancel()
	if err := etcdtest.ReturnsBy(t, 3*time.Second+overrun, "RunGroup after its ctx ended", func() error { return <-r.done }); err != nil {
		t.Errorf("RunGroup: %v", err)
	}
	r.done <- nil
}

// A term whose key is gone by the time it is resigned (work returned before
// its watch saw the deletion) is over: nothing is left to hand over, and the
// replica's other names run on.
func TestGroupResignOfGoneKeyKeepsOtherNames(t *testing.T) {
	c := fencingtest.Single(t)
	w := newWorld(t, c, 4)
	var once sync.Once
	deleted := make(chan struct{})
	victim := w.names[0]
	work := w.work("a")
	r := &replica{id: "a", done: make(chan error, 1)}
	ctx, cancel := context.WithCancel(context.Background())
	r.cancel = cancel
	t.Cleanup(func() { r.stop(t) })
	go func() {
		r.done <- election.RunGroup(ctx, c.Client(t), w.group, w.names, func(ctx context.Context, term *election.Term) error {
			gone := false
			if term.Token().Name == victim {
				once.Do(func() {
					c.Delete(t, term.Key()) // and return before the watch tells
					gone = true
				})
			}
			if gone {
				close(deleted)
				return nil
			}
			return work(ctx, term)
		}, election.WithBackoff(10*time.Millisecond, 100*time.Millisecond), election.WithSessionOptions(fencing.WithIdentity("a")))
	}()
	<-deleted
	w.waitBalanced(w.names, "a") // the victim runs again
	w.mu.Lock()
	defer w.mu.Unlock()
	if len(w.causes["a"]) != 0 {
		t.Fatalf("other names' works were stopped: %v", w.causes["a"])
	}
}

// A handoff whose resign meets an etcd that refuses requests for longer than
// a second keeps at it: the replica's other names are not dropped.
func TestGroupSlowHandoffKeepsOtherNames(t *testing.T) {
	c := fencingtest.Single(t)
	w := newWorld(t, c, 10)
	var refusing atomic.Bool
	var refused atomic.Int32
	replies := &etcdtest.Replies{Decide: func(_ string, req any) etcdtest.Fault {
		if refusing.Load() && etcdtest.DeletesUnder(req, fencing.DefaultRoot) {
			refused.Add(1)
			return etcdtest.Refuse
		}
		return etcdtest.Pass
	}}
	w.start("a", c.Client(t, replies.Option()), nil)
	w.waitBalanced(w.names, "a")
	refusing.Store(true)
	w.start("b", nil, nil)
	fencingtest.WaitFor(t, wait, "a refused resign", func() bool { return refused.Load() > 0 })
	time.Sleep(2 * time.Second) // the fault's length: longer than a leave's grace
	refusing.Store(false)
	w.waitBalanced(w.names, "a", "b")
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, cause := range w.causes["a"] {
		if !errors.Is(cause, election.ErrRebalanced) {
			t.Errorf("a work of a ended with %v, not a handoff", cause)
		}
	}
}

// member reads the membership value of the replica with identity id.
func member(t *testing.T, c *fencingtest.Cluster, group, id string) (assign.Member, bool) {
	resp, err := c.Admin.Get(t.Context(), keyspace.Prefix(fencing.DefaultRoot, keyspace.KindGroup, group), clientv3.WithPrefix())
	if err != nil {
		t.Fatal(err)
	}
	for _, kv := range resp.Kvs {
		if m, err := assign.Decode(string(kv.Key), kv.Value); err == nil && m.ID == id {
			return m, true
		}
	}
	return assign.Member{}, false
}

// A replica that keeps failing a name keeps declining it, past the length
// of one decline: a replica that joins later still takes it.
func TestGroupDeclinesAgainAfterDeclineEnds(t *testing.T) {
	c := fencingtest.Single(t)
	w := newWorld(t, c, 4)
	w.failing["a"] = w.names[:2]
	w.start("a", nil, nil, election.WithDeclineFor(time.Second))
	fencingtest.WaitFor(t, wait, "a declines", func() bool { m, _ := member(t, c, w.group, "a"); return len(m.Declined) == 2 })
	time.Sleep(3 * time.Second) // a runs alone, failing, for three declines' length
	w.start("b", nil, nil)
	w.waitBalanced(w.names, "a", "b")
}

// A replica never campaigns for a name it has declined: an old watch event
// of its own membership key must not bring back a value without a decline it
// has since written.
func TestGroupNeverCampaignsForDeclinedName(t *testing.T) {
	c := fencingtest.Single(t)
	w := newWorld(t, c, 10)
	w.failing["a"] = w.names
	// Follow a's membership value and a's election keys from the start.
	resp, err := c.Admin.Get(t.Context(), "none")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	wch := c.Admin.Watch(ctx, fencing.DefaultRoot, clientv3.WithPrefix(), clientv3.WithRev(resp.Header.Revision+1))
	w.start("a", nil, nil)
	w.start("b", nil, nil)
	fencingtest.WaitFor(t, 2*wait, "a declines every name", func() bool {
		m, _ := member(t, c, w.group, "a")
		return len(m.Declined) == len(w.names)
	})
	end, err := c.Admin.Get(t.Context(), "none")
	if err != nil {
		t.Fatal(err)
	}
	declined := map[string]bool{}
	for resp := range wch {
		for _, ev := range resp.Events {
			kind, name, _ := keyspace.ParseKey(fencing.DefaultRoot, string(ev.Kv.Key))
			switch {
			case ev.Type != clientv3.EventTypePut:
			case kind == keyspace.KindGroup:
				if m, err := assign.Decode(string(ev.Kv.Key), ev.Kv.Value); err == nil && m.ID == "a" {
					for _, n := range m.Declined {
						declined[n] = true
					}
				}
			case kind == string(fencing.KindElection) && ev.IsCreate() && string(ev.Kv.Value) == "a" && declined[name]:
				t.Errorf("a campaigned for %s at revision %d, after declining it", name, ev.Kv.ModRevision)
			}
		}
		if resp.Header.Revision >= end.Header.Revision {
			return
		}
	}
}

// A membership value that cannot be decoded (an operator's write) is no
// member: its replica writes its own value again.
func TestGroupRewritesGarbledMembership(t *testing.T) {
	c := fencingtest.Single(t)
	w := newWorld(t, c, 4)
	w.start("a", nil, nil)
	w.start("b", nil, nil)
	w.waitBalanced(w.names, "a", "b")
	m, _ := member(t, c, w.group, "b")
	resp, err := c.Admin.Get(t.Context(), m.Key)
	if err != nil || len(resp.Kvs) == 0 {
		t.Fatalf("b's key: %v", err)
	}
	if _, err := c.Admin.Put(t.Context(), m.Key, "{garbled", clientv3.WithLease(clientv3.LeaseID(resp.Kvs[0].Lease))); err != nil {
		t.Fatal(err)
	}
	fencingtest.WaitFor(t, wait, "b writes its membership again", func() bool {
		_, ok := member(t, c, w.group, "b")
		return ok
	})
	w.waitBalanced(w.names, "a", "b")
}

// rebalances counts a RunGroup's "rebalanced" log records.
type rebalances struct{ n atomic.Int32 }

func (h *rebalances) Enabled(context.Context, slog.Level) bool { return true }
func (h *rebalances) Handle(_ context.Context, r slog.Record) error {
	if r.Message == "rebalanced" {
		h.n.Add(1)
	}
	return nil
}
func (h *rebalances) WithAttrs([]slog.Attr) slog.Handler { return h }
func (h *rebalances) WithGroup(string) slog.Handler      { return h }

// A name that moves away and back again and again while its work ignores
// its context costs one waiting loop, not one per move: each new loop waits
// for the work still running, and a loop handed over before its turn ends.
func TestGroupFlapsWhileWorkIgnoresCtxStayBounded(t *testing.T) {
	c := fencingtest.Single(t)
	group, name := t.Name(), t.Name()+"/job"
	started, release := make(chan struct{}, 1), make(chan struct{})
	var running, overlaps atomic.Int32
	work := func(context.Context, *election.Term) error {
		if running.Add(1) > 1 {
			overlaps.Add(1)
		}
		defer running.Add(-1)
		select {
		case started <- struct{}{}:
		default:
		}
		<-release // ignores its context
		return nil
	}
	first := func(what string) {
		t.Helper()
		select {
		case <-started:
		case <-time.After(wait):
			t.Fatal(what)
		}
	}
	h := &rebalances{}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	cli := c.Client(t)
	go func() {
		done <- election.RunGroup(ctx, cli, group, []string{name}, work,
			election.WithSessionOptions(fencing.WithTTL(30*time.Second), fencing.WithLogger(slog.New(h))))
	}()
	var once sync.Once
	t.Cleanup(func() {
		once.Do(func() { close(release) })
		cancel()
		if err := <-done; err != nil {
			t.Errorf("RunGroup: %v", err)
		}
	})
	first("the work did not start")
	// A member that ranks above the replica takes the name while it exists.
	key := keyspace.Prefix(fencing.DefaultRoot, keyspace.KindGroup, group) + "other"
	val := assign.Encode(assign.Member{Key: key, ID: "other", Names: []string{name}, Priority: []int64{1}})
	const flaps = 40
	for i := range flaps {
		if _, err := c.Admin.Put(t.Context(), key, val); err != nil {
			t.Fatal(err)
		}
		fencingtest.WaitFor(t, wait, "the name moves away", func() bool { return h.n.Load() >= int32(2*i+2) })
		if _, err := c.Admin.Delete(t.Context(), key); err != nil {
			t.Fatal(err)
		}
		fencingtest.WaitFor(t, wait, "the name comes back", func() bool { return h.n.Load() >= int32(2*i+3) })
	}
	// Counted by stack: the embedded etcd's goroutines come and go beside.
	fencingtest.WaitFor(t, wait, "no loop per move", func() bool { return nameLoops() <= 2 })
	// The name's last loop leads once the old work returns, and never beside it.
	once.Do(func() { close(release) })
	first("the work did not start again after the old one returned")
	if n := overlaps.Load(); n > 0 {
		t.Errorf("the name's work ran twice at once %d times", n)
	}
}

// nameLoops counts the goroutines of RunGroup's name loops in this process.
func nameLoops() int {
	buf := make([]byte, 1<<20)
	for {
		n := runtime.Stack(buf, true)
		if n < len(buf) {
			return strings.Count(string(buf[:n]), "election.(*round).start.func")
		}
		buf = make([]byte, 2*len(buf))
	}
}
