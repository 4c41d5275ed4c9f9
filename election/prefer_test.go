package election_test

import (
	"context"
	"errors"
	"fmt"
	"path"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/leasehold/leasehold/election"
	"github.com/leasehold/leasehold/fencing"
	"github.com/leasehold/leasehold/fencing/fencingtest"
	"github.com/leasehold/leasehold/fencing/inspect"
	"github.com/leasehold/leasehold/internal/keyspace"
	"github.com/leasehold/leasehold/internal/testbed/etcdtest"
	"go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/grpc"
)

// fleet runs ranked Run replicas of one name, each on its own client, and
// records each work's start and end. Its check fails the test if two works
// ever ran at once.
type fleet struct {
	t        *testing.T
	c        *fencingtest.Cluster
	mu       sync.Mutex
	working  string             // who works now
	overlaps []string           // "a while b": a work started while another ran
	starts   []string           // who started working, in order
	terms    []string           // who won a term, in order (one given way at once too)
	causes   map[string][]error // why each one's works ended
	stops    map[string]func() error
}

const fleetName = "svc"

func newFleet(t *testing.T, c *fencingtest.Cluster) *fleet {
	return &fleet{t: t, c: c, causes: map[string][]error{}, stops: map[string]func() error{}}
}

// start runs replica id on its own client (cli, or a new one when nil).
func (f *fleet) start(id string, cli *clientv3.Client, opts ...election.RunOption) {
	if cli == nil {
		cli = f.c.Client(f.t)
	}
	won := fencing.Observer{OnAcquire: func(fencing.AcquireEvent) {
		f.mu.Lock()
		f.terms = append(f.terms, id)
		f.mu.Unlock()
	}}
	all := append([]election.RunOption{election.WithBackoff(10*time.Millisecond, 100*time.Millisecond),
		election.WithSessionOptions(fencing.WithIdentity(id), fencing.WithObserver(won))}, opts...)
	f.stops[id] = fencingtest.Go(f.t, func(ctx context.Context) error {
		return election.Run(ctx, cli, fleetName, id, f.work(id), all...)
	})
}

// stop ends replica id's Run (which resigns at once) and waits for it.
func (f *fleet) stop(id string) {
	if err := f.stops[id](); err != nil {
		f.t.Fatalf("Run of %s: %v", id, err)
	}
}

func (f *fleet) work(id string) func(ctx context.Context, t *election.Term) error {
	return func(ctx context.Context, t *election.Term) error {
		f.mu.Lock()
		if f.working != "" {
			f.overlaps = append(f.overlaps, id+" while "+f.working)
		}
		f.working = id
		f.starts = append(f.starts, id)
		f.mu.Unlock()
		<-ctx.Done()
		f.mu.Lock()
		f.working = ""
		f.causes[id] = append(f.causes[id], context.Cause(ctx))
		f.mu.Unlock()
		return nil
	}
}

// waitLeader waits until id works and etcd says it leads.
func (f *fleet) waitLeader(id string) {
	f.t.Helper()
	fencingtest.WaitFor(f.t, wait, id+" leading", func() bool {
		f.mu.Lock()
		working := f.working
		f.mu.Unlock()
		owner, ok := f.c.Queue(f.t, fencing.KindElection, fleetName).Owner()
		return working == id && ok && owner.Value == id
	})
}

// lowThenHigh starts "low" (priority 1) and waits until it leads, then
// "high" (priority 2), and waits until high has taken over.
func (f *fleet) lowThenHigh() {
	f.t.Helper()
	f.start("low", nil, election.Priority(1))
	f.waitLeader("low")
	f.start("high", nil, election.Priority(2))
	f.waitLeader("high")
}

// waitQueued waits until id waits in the election's queue.
func (f *fleet) waitQueued(id string) {
	f.t.Helper()
	fencingtest.WaitFor(f.t, wait, id+" queued", func() bool {
		return slices.ContainsFunc(f.c.Queue(f.t, fencing.KindElection, fleetName).Waiters(),
			func(e inspect.Entry) bool { return e.Value == id })
	})
}

// waitCandidates waits until the records of ids, and only those, are live.
func (f *fleet) waitCandidates(ids ...string) {
	f.t.Helper()
	slices.Sort(ids)
	fencingtest.WaitFor(f.t, wait, fmt.Sprintf("candidates %v", ids), func() bool {
		var live []string
		for _, c := range candidatesOf(f.t, f.c, fleetName) {
			live = append(live, c.ID)
		}
		slices.Sort(live)
		return slices.Equal(live, ids)
	})
}

func (f *fleet) started() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Clone(f.starts)
}

func (f *fleet) check(want ...string) {
	f.t.Helper()
	f.mu.Lock()
	overlaps := f.overlaps
	f.mu.Unlock()
	if len(overlaps) > 0 {
		f.t.Fatalf("works ran at once: %v", overlaps)
	}
	f.checkTerms(want...)
}

// checkTerms fails unless works started, and terms were won, in want's
// order.
func (f *fleet) checkTerms(want ...string) {
	f.t.Helper()
	f.mu.Lock()
	defer f.mu.Unlock()
	if !slices.Equal(f.starts, want) {
		f.t.Fatalf("works started on %v, want %v", f.starts, want)
	}
	if !slices.Equal(f.terms, want) {
		f.t.Fatalf("terms won by %v, want %v: a candidate won and gave way at once", f.terms, want)
	}
}

// preempted counts id's works that ended with ErrPreempted.
func (f *fleet) preempted(id string) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return countIs(f.causes[id], election.ErrPreempted)
}

// permutations returns every order of s.
func permutations(s []string) [][]string {
	if len(s) <= 1 {
		return [][]string{slices.Clone(s)}
	}
	var out [][]string
	for i := range s {
		rest := slices.Concat(s[:i], s[i+1:])
		for _, p := range permutations(rest) {
			out = append(out, append([]string{s[i]}, p...))
		}
	}
	return out
}

// A rolling upgrade of three replicas from v1.4.2 to v1.5.0 (each new
// replica started and ready before the one it replaces stops, as a
// Deployment with maxUnavailable 0 does) moves leadership exactly once, to
// the first new replica, whatever the order the old ones are replaced in.
func TestPriorityRollingUpgradeMovesOnce(t *testing.T) {
	c := fencingtest.Single(t)
	for _, order := range permutations([]string{"a", "b", "c"}) {
		t.Run(strings.Join(order, ""), func(t *testing.T) {
			f := newFleet(t, c)
			for _, id := range []string{"a", "b", "c"} {
				f.start(id, nil, election.PriorityVersion("v1.4.2"))
			}
			f.waitCandidates("a", "b", "c")
			fencingtest.WaitFor(t, wait, "a leader", func() bool { return len(f.started()) > 0 })
			first := f.started()[0]
			f.waitLeader(first)
			live := []string{"a", "b", "c"}
			for i, old := range order {
				id := old + "2"
				f.start(id, nil, election.PriorityVersion("v1.5.0+linux"))
				live = append(live, id)
				f.waitCandidates(live...)
				if i == 0 {
					f.waitLeader(id)
				} else {
					f.waitQueued(id)
				}
				f.stop(old)
				live = slices.DeleteFunc(live, func(s string) bool { return s == old })
				f.waitCandidates(live...)
			}
			f.waitLeader(order[0] + "2")
			f.check(first, order[0]+"2")
			if n := f.preempted(first); n != 1 {
				t.Fatalf("%s's work ended with ErrPreempted %d times, want 1 (causes %v)", first, n, f.causes[first])
			}
			for _, id := range live {
				f.stop(id)
			}
		})
	}
}

// A canary (the lowest priority) leads only while no other candidate is
// live, and gives way as soon as one is.
func TestPriorityCanaryLeadsOnlyAlone(t *testing.T) {
	c := fencingtest.Single(t)
	f := newFleet(t, c)
	f.start("canary", nil, election.Priority(1))
	f.waitLeader("canary")
	f.start("a", nil, election.Priority(2))
	f.waitLeader("a")
	f.start("b", nil, election.Priority(2))
	f.waitQueued("b")
	f.stop("a")
	f.waitLeader("b")
	f.stop("b")
	f.waitLeader("canary")
	f.start("a", nil, election.Priority(2))
	f.waitLeader("a")
	f.check("canary", "a", "b", "canary", "a")
	if n := f.preempted("canary"); n != 2 {
		t.Fatalf("the canary's work ended with ErrPreempted %d times, want 2: %v", n, f.causes["canary"])
	}
}

// Equal priorities never preempt each other: the first leads, the others
// queue, and a newcomer of the same priority queues too.
func TestPriorityEqualNeverPreempts(t *testing.T) {
	c := fencingtest.Single(t)
	f := newFleet(t, c)
	f.start("a", nil, election.Priority(7, 1))
	f.waitLeader("a")
	f.start("b", nil, election.Priority(7, 1))
	f.start("c", nil, election.Priority(7, 1))
	f.waitQueued("b")
	f.waitQueued("c")
	f.stop("a")
	fencingtest.WaitFor(t, wait, "a second leader", func() bool { return len(f.started()) == 2 })
	second := f.started()[1]
	f.waitLeader(second)
	f.start("d", nil, election.Priority(7, 1))
	f.waitQueued("d")
	f.check("a", second)
}

// A preferred replica cut off from etcd has no live session, so it cannot
// win: a lower one leads meanwhile, and the preferred one takes over again
// once its link heals and it has a new session.
func TestPriorityPartitionedPreferredDoesNotWin(t *testing.T) {
	c := fencingtest.Single(t)
	f := newFleet(t, c)
	ttl := election.WithSessionOptions(fencing.WithTTL(fencing.MinTTL))
	f.start("low", nil, election.Priority(1), ttl)
	f.waitLeader("low")
	cli, link := c.ProxiedClient(t)
	f.start("high", cli, election.Priority(2), ttl)
	f.waitLeader("high")
	link.Blackhole()
	f.waitLeader("low") // once high's lease expired in etcd
	f.waitCandidates("low")
	link.Restore()
	f.waitLeader("high")
	f.check("low", "high", "low", "high")
	f.mu.Lock()
	defer f.mu.Unlock()
	if causes := f.causes["high"]; len(causes) != 1 || errors.Is(causes[0], election.ErrPreempted) {
		t.Fatalf("high's first term should end with the partition, not a preemption: %v", causes)
	}
}

// Drain moves leadership off a replica, to one of equal priority; undrained,
// it does not take leadership back. A drained replica alone still leads.
func TestDrainMovesLeadership(t *testing.T) {
	c := fencingtest.Single(t)
	f := newFleet(t, c)
	var da, db election.Drain
	f.start("a", nil, election.WithDrain(&da))
	f.waitLeader("a")
	f.start("b", nil, election.WithDrain(&db))
	f.waitQueued("b")
	da.Set(true)
	f.waitLeader("b")
	if q := c.Queue(t, fencing.KindElection, fleetName); len(q.Entries) != 1 {
		t.Fatalf("drained a still queues: %+v", q.Entries) // it would win if b went
	}
	da.Set(false)
	f.waitQueued("a") // and leadership stays with b: equal priorities
	db.Set(true)
	f.waitLeader("a")
	f.stop("a")
	f.waitLeader("b") // drained, but alone
	f.check("a", "b", "a", "b")
	f.mu.Lock()
	defer f.mu.Unlock()
	if cause := f.causes["a"][0]; !errors.Is(cause, election.ErrPreempted) || !strings.Contains(cause.Error(), "drained") {
		t.Fatalf("a's drained term ended with %v, want ErrPreempted saying drained", cause)
	}
}

// Observe shows the ranked candidates with the leader, read together: who
// is preferred moves with a newcomer, a drain and a departure, and a lock of
// the same name is no candidate.
func TestObserveShowsCandidates(t *testing.T) {
	c := fencingtest.Single(t)
	f := newFleet(t, c)
	e, err := election.New(fencingtest.Session(t, c.Client(t)), fleetName)
	if err != nil {
		t.Fatal(err)
	}
	obs := e.Observe(fencingtest.Context(t, time.Minute))
	if o := fencingtest.Receive(t, obs, "the first observation"); o.Err != nil || o.Leader != nil || o.Candidates != nil {
		t.Fatalf("first observation %+v, want nobody leading and no candidate", o)
	}
	until := func(what string, leader string, want ...election.Candidate) {
		t.Helper()
		for {
			o := fencingtest.Receive(t, obs, what)
			if o.Err != nil {
				t.Fatalf("%s: %v", what, o.Err)
			}
			if o.Leader != nil && o.Leader.Value == leader && sameCandidates(o.Candidates, want) {
				return
			}
		}
	}
	var dh election.Drain
	f.start("low", nil, election.Priority(1))
	until("low leading, alone", "low", election.Candidate{ID: "low", Priority: []int64{1}, Preferred: true})
	h, err := etcdtest.Mutex(t, fencingtest.Session(t, c.Client(t)), fleetName).Lock(fencingtest.Context(t, wait))
	if err != nil {
		t.Fatal(err)
	}
	f.start("high", nil, election.Priority(2), election.WithDrain(&dh))
	until("high preferred and leading", "high",
		election.Candidate{ID: "high", Priority: []int64{2}, Preferred: true}, election.Candidate{ID: "low", Priority: []int64{1}})
	f.waitLeader("high") // its work started: a drain before would end its term unworked
	dh.Set(true)
	until("high drained, low leading", "low",
		election.Candidate{ID: "high", Priority: []int64{2}, Drain: true}, election.Candidate{ID: "low", Priority: []int64{1}, Preferred: true})
	f.waitLeader("low")
	f.stop("high")
	until("high gone", "low", election.Candidate{ID: "low", Priority: []int64{1}, Preferred: true})
	if err := h.Unlock(fencingtest.Context(t, wait)); err != nil {
		t.Fatal(err)
	}
	f.stop("low")
	f.check("low", "high", "low")
}

// sameCandidates compares candidates by all but their keys, in any order.
func sameCandidates(got, want []election.Candidate) bool {
	strip := func(cs []election.Candidate) []string {
		var out []string
		for _, c := range cs {
			out = append(out, fmt.Sprintf("%s %v drain=%v preferred=%v", c.ID, c.Priority, c.Drain, c.Preferred))
		}
		slices.Sort(out)
		return out
	}
	return slices.Equal(strip(got), strip(want))
}

func TestPriorityRejectsBadInput(t *testing.T) {
	c := fencingtest.Single(t)
	cli := c.Client(t)
	work := func(context.Context, *election.Term) error { return nil }
	for name, opts := range map[string][]election.RunOption{
		"no levels":        {election.Priority()},
		"too many levels":  {election.Priority(make([]int64, 17)...)},
		"two priorities":   {election.Priority(1), election.Priority(2)},
		"version then int": {election.PriorityVersion("1.2"), election.Priority(1, 3)},
		"pre-release":      {election.PriorityVersion("v1.2.0-rc.1")},
		"not a version":    {election.PriorityVersion("latest")},
		"nil drain":        {election.WithDrain(nil)},
	} {
		err := election.Run(fencingtest.Context(t, wait), cli, fleetName, "x", work, opts...)
		if !errors.Is(err, fencing.ErrInvalidArgument) {
			t.Errorf("%s: Run = %v, want ErrInvalidArgument", name, err)
		}
	}
	err := election.Run(fencingtest.Context(t, wait), cli, fleetName, "x", work, election.Priority(1, 2), election.Priority(1, 2))
	if err != nil {
		t.Fatalf("the same priority twice: %v", err)
	}
	if q := c.Queue(t, fencing.KindElection, fleetName); len(q.Entries)+len(candidatesOf(t, c, fleetName)) > 0 {
		t.Fatalf("keys left after Runs that returned: %+v", q)
	}
}

// An operator who deletes a leader's candidate record does not move
// leadership: the replica writes its record again, and the lower replica,
// which queued while the record was gone, withdraws again.
func TestCandidateRecordWrittenAgainAfterDelete(t *testing.T) {
	c := fencingtest.Single(t)
	f := newFleet(t, c)
	f.lowThenHigh()
	var key string
	for _, cand := range candidatesOf(t, c, fleetName) {
		if cand.ID == "high" {
			key = cand.Key
		}
	}
	c.Delete(t, key)
	fencingtest.WaitFor(t, wait, "high's record written again, low not queued", func() bool {
		q := c.Queue(t, fencing.KindElection, fleetName)
		return len(candidatesOf(t, c, fleetName)) == 2 && len(q.Entries) == 1
	})
	f.check("low", "high")
}

// A ranked leader whose lease is revoked loses its term; the lower replica,
// which was not queued, queues and leads; the revoked one, on a new session,
// ranks again and takes leadership back.
func TestRankedLeaderRevoked(t *testing.T) {
	c := fencingtest.Single(t)
	f := newFleet(t, c)
	f.lowThenHigh()
	c.RevokeOwner(t, fencing.KindElection, fleetName)
	fencingtest.WaitFor(t, wait, "high leading again after low", func() bool { return len(f.started()) == 4 })
	f.waitLeader("high")
	f.waitCandidates("low", "high")
	f.mu.Lock()
	lost := f.causes["high"][0]
	f.mu.Unlock()
	if !errors.Is(lost, fencing.ErrKeyDeleted) && !errors.Is(lost, fencing.ErrLeaseExpired) {
		t.Fatalf("high's revoked term ended with %v, want its loss", lost)
	}
	// A revoke ends the term in etcd before the holder's watch tells its
	// work (the work must fence its writes): no overlap check here.
	f.checkTerms("low", "high", "low", "high")
}

// A ranked replica that waits for its turn (not preferred) returns by its
// ctx, also once its client is closed, and leaves neither a record nor a
// queue key.
func TestRankedRunReturnsWhileOutranked(t *testing.T) {
	c := fencingtest.Single(t)
	f := newFleet(t, c)
	f.start("high", nil, election.Priority(2))
	f.waitLeader("high")
	f.start("low", nil, election.Priority(1))
	f.waitCandidates("low", "high")
	f.stop("low")
	f.waitCandidates("high")
	if q := c.Queue(t, fencing.KindElection, fleetName); len(q.Entries) != 1 {
		t.Fatalf("keys left by the outranked replica: %+v", q.Entries)
	}
	cli := c.Client(t)
	f.start("closed", cli, election.Priority(1), election.WithSessionOptions(fencing.WithTTL(fencing.MinTTL)))
	f.waitCandidates("closed", "high")
	cli.Close()
	f.stop("closed")         // within fencingtest.Wait, or the test fails
	f.waitCandidates("high") // its lease goes, with the record, within its TTL
	f.check("high")
}

// A ranked Run that wins a term just as a preferred candidate appears
// resigns it before any work. When that resign fails, Run closes its session
// to hand over, and campaigns again on a new one. (It went on with the closed
// session's nil candidacy and crashed, once in CI.) The new session, whose
// view is empty until its first enqueue reads the records, wins a term and
// gives it up too, then waits while outranked, and leads once the preferred
// candidate goes. The preferred record is written while low's first enqueue
// is held, and low's watch of the records is held, so that only the
// enqueue's read of the records finds it.
func TestRankedGaveWayResignFails(t *testing.T) {
	c := fencingtest.Single(t)
	queue := keyspace.Prefix(fencing.DefaultRoot, string(fencing.KindElection), fleetName)
	enqueuing, proceed := make(chan struct{}), make(chan struct{})
	var enqueues, deletes atomic.Int32
	intercept := etcdtest.Unary(func(ctx context.Context, method string, req, reply any,
		cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
		switch {
		case etcdtest.PutsUnder(req, queue) && enqueues.Add(1) == 1:
			close(enqueuing)
			select {
			case <-proceed:
			case <-ctx.Done():
				return ctx.Err()
			}
		case etcdtest.DeletesUnder(req, queue) && deletes.Add(1) == 1:
			return rpctypes.ErrGRPCPermissionDenied // the resign of the term given way
		}
		return invoker(ctx, method, req, reply, cc, opts...)
	})
	h := newHeldWatch(keyspace.Prefix(fencing.DefaultRoot, keyspace.KindCandidate, fleetName))
	f := newFleet(t, c)
	f.start("low", c.Client(t, h.option(), intercept), election.Priority(1))
	select {
	case <-enqueuing:
	case <-time.After(wait):
		t.Fatalf("no enqueue by low after %v", wait)
	}
	high := newSession(t, c.Client(t), fencing.WithIdentity("high"))
	defer election.JoinCandidates(high, fleetName, 2)()
	f.waitCandidates("high")
	close(proceed)
	fencingtest.WaitFor(t, wait, "low's resign refused", func() bool { return deletes.Load() >= 1 })
	close(h.release)
	// Low's first session is closed: its record and key go with its lease.
	// Its next session writes a record with its enqueue, gives the term up,
	// and waits without a key in the queue.
	fencingtest.WaitFor(t, wait, "low's next record, and no key queued", func() bool {
		q := c.Queue(t, fencing.KindElection, fleetName)
		return len(candidatesOf(t, c, fleetName)) == 2 && len(q.Entries) == 0
	})
	if err := high.Close(fencingtest.Context(t, wait)); err != nil { // its record goes with its lease
		t.Fatal(err)
	}
	f.waitLeader("low")
	f.mu.Lock()
	defer f.mu.Unlock()
	if want := []string{"low", "low", "low"}; !slices.Equal(f.starts, []string{"low"}) || !slices.Equal(f.terms, want) {
		t.Fatalf("works started on %v and terms won by %v, want [low] and %v", f.starts, f.terms, want)
	}
}

// A ranked replica whose user may use the election's keys but not the
// candidates' fails with etcd's permission error, also while it waits
// behind a leader (its enqueue goes out along with its record's write), and
// leaves no key behind.
func TestPriorityWithoutCandidatePermission(t *testing.T) {
	c := fencingtest.Single(t)
	etcdtest.EnableAuth(t, c)
	queue, err := inspect.KeyPrefix(fencing.DefaultRoot, fencing.KindElection, fleetName)
	if err != nil {
		t.Fatal(err)
	}
	etcdtest.AddUser(t, c, "svc", queue)
	ctx, cancel := context.WithCancel(fencingtest.Context(t, time.Minute))
	defer cancel()
	working := make(chan struct{})
	leader := make(chan error, 1)
	go func() {
		leader <- election.Run(ctx, c.Admin, fleetName, "leader", func(ctx context.Context, _ *election.Term) error {
			close(working)
			<-ctx.Done()
			return nil
		})
	}()
	<-working
	cli := c.Client(t, etcdtest.WithAuth("svc", "svc"))
	err = election.Run(ctx, cli, fleetName, "ranked", func(context.Context, *election.Term) error {
		t.Error("work ran without a candidate record")
		return nil
	}, election.Priority(1))
	if !errors.Is(err, rpctypes.ErrPermissionDenied) {
		t.Fatalf("Run: %v; want ErrPermissionDenied", err)
	}
	if q := c.Queue(t, fencing.KindElection, fleetName); len(q.Entries) != 1 || q.Entries[0].Value != "leader" {
		t.Fatalf("queue after the refused replica returned: %+v; want the leader's key alone", q.Entries)
	}
	cancel()
	if err := <-leader; err != nil {
		t.Fatal(err)
	}
}

// A ranked replica's record goes out in its first enqueue's txn: the record
// and the queue key are created at one revision, so a leader sees the
// preferred candidate queued the moment it sees its record. With that
// txn's reply lost, the retry finds the key, and with it the record, already
// written: the replica still ranks, and leads.
func TestPreferredRecordGoesWithEnqueue(t *testing.T) {
	c := fencingtest.Single(t)
	queue := keyspace.Prefix(fencing.DefaultRoot, string(fencing.KindElection), fleetName)
	for name, fault := range map[string]etcdtest.Fault{"answered": etcdtest.Pass, "reply lost": etcdtest.LoseReply} {
		t.Run(name, func(t *testing.T) {
			f := newFleet(t, c)
			f.start("low", nil, election.Priority(1))
			f.waitLeader("low")
			var hit atomic.Bool
			r := &etcdtest.Replies{Decide: func(_ string, req any) etcdtest.Fault {
				if etcdtest.PutsUnder(req, queue) && hit.CompareAndSwap(false, true) {
					return fault
				}
				return etcdtest.Pass
			}}
			f.start("high", c.Client(t, r.Option()), election.Priority(2))
			f.waitLeader("high")
			var record, key int64
			for _, cand := range candidatesOf(t, c, fleetName) {
				if cand.ID == "high" {
					record = createRevision(t, c, cand.Key)
				}
			}
			for _, e := range c.Queue(t, fencing.KindElection, fleetName).Entries {
				if e.Value == "high" {
					key = e.Token.Revision
				}
			}
			if record == 0 || record != key {
				t.Fatalf("high's record created at revision %d, its queue key at %d; want one txn", record, key)
			}
			f.check("low", "high")
			f.stop("high")
			f.stop("low")
		})
	}
}

func createRevision(t *testing.T, c *fencingtest.Cluster, key string) int64 {
	t.Helper()
	resp, err := c.Admin.Get(fencingtest.Context(t, wait), key)
	if err != nil || len(resp.Kvs) != 1 {
		t.Fatalf("get %s: %v, %v", key, resp, err)
	}
	return resp.Kvs[0].CreateRevision
}

// A ranked leader's watches of the candidates' records and of who queues
// behind it fail when its member loses the raft quorum (they require a
// leader), and are made again: once the quorum is back, a preferred
// candidate that queues behind the leader is seen as its successor.
func TestRankedLeaderFollowsSuccessorAcrossLostQuorum(t *testing.T) {
	etcdtest.Long(t)
	c := fencingtest.Three(t)
	var ctr etcdtest.Counter
	queue := newHeldWatch(keyspace.Prefix(fencing.DefaultRoot, string(fencing.KindElection), fleetName))
	close(queue.release) // counted, not held
	cli := fencingtest.NewClient(t, []string{c.Members[0].ClientURL.String()}, etcdtest.WithCounter(&ctr), queue.option())
	s := newSession(t, cli, fencing.WithTTL(30*time.Second))
	term := campaign(t, newElection(t, s, fleetName), "low")
	ready, stop := election.FollowSuccessor(s, fleetName, term, 1)
	defer stop()
	queue.waitHeld(t)
	streams := ctr.Streams("Watch")
	c.Stop(1)
	c.Stop(2)
	// etcd cancels the watch streams that require a leader after a few
	// election timeouts without one; a new stream is refused until the
	// quorum is back.
	fencingtest.WaitFor(t, wait, "the watches to be cancelled", func() bool { return ctr.Streams("Watch") > streams })
	c.Restart(t, 1)
	c.Restart(t, 2)
	c.WaitLeader(t)
	fencingtest.WaitFor(t, wait, "the queue's watch to be made again", func() bool { return queue.creates.Load() >= 2 })
	if ready() {
		t.Fatal("a successor seen with nobody queued behind the leader")
	}
	f := newFleet(t, c)
	f.start("high", nil, election.Priority(2))
	f.waitQueued("high")
	fencingtest.WaitFor(t, wait, "the leader to see its preferred successor", ready)
	if err := term.Resign(fencingtest.Context(t, wait)); err != nil {
		t.Fatal(err)
	}
	f.waitLeader("high")
}

// A leader whose watch of the candidates' records is created only after a
// preferred candidate wrote its record still sees that record: the watch
// began past the leader's last read, so the leader reads again (arm).
func TestRankedLeaderSeesRecordWrittenBeforeItsWatch(t *testing.T) {
	c := fencingtest.Single(t)
	f := newFleet(t, c)
	h := newHeldWatch(keyspace.Prefix(fencing.DefaultRoot, keyspace.KindCandidate, fleetName))
	f.start("low", c.Client(t, h.option()), election.Priority(1))
	h.waitHeld(t)
	f.waitLeader("low")
	f.start("high", nil, election.Priority(2))
	f.waitQueued("high")
	close(h.release)
	f.waitLeader("high")
	f.check("low", "high")
	if n := f.preempted("low"); n != 1 {
		t.Fatalf("low's works preempted: %d, want 1", n)
	}
}

// A ranked leader whose watch of the queue is created only after a
// preferred candidate queued behind it still sees that candidate as its
// successor: the watch began past the leader's read of the queue, so it
// reads again.
func TestSuccessorSeesEnqueueBeforeItsWatch(t *testing.T) {
	c := fencingtest.Single(t)
	h := newHeldWatch(keyspace.Prefix(fencing.DefaultRoot, string(fencing.KindElection), fleetName))
	s := newSession(t, c.Client(t, h.option()))
	term := campaign(t, newElection(t, s, fleetName), "low")
	ready, stop := election.FollowSuccessor(s, fleetName, term, 1)
	defer stop()
	h.waitHeld(t)
	f := newFleet(t, c)
	f.start("high", nil, election.Priority(2))
	f.waitQueued("high")
	if ready() {
		t.Fatal("a successor seen before the leader read or watched it")
	}
	close(h.release)
	fencingtest.WaitFor(t, wait, "the leader to see its preferred successor", ready)
	if err := term.Resign(fencingtest.Context(t, wait)); err != nil {
		t.Fatal(err)
	}
	f.waitLeader("high")
}

// A ranked leader that waits for a preferred successor sees a change of the
// candidates' view that lands after it judged the key behind the term, and
// before it waits: it takes the view's change channel before judging. Here
// the change is the last event (a record goes, the queue does not move), so
// a wait that took the channel after judging would wait on the next change
// for good.
func TestSuccessorSeesViewChangeWhileJudging(t *testing.T) {
	c := fencingtest.Single(t)
	s := newSession(t, c.Client(t))
	term := campaign(t, newElection(t, s, fleetName), "low")
	// top ranks above mid and never queues: mid is preferred once top goes.
	top := newSession(t, c.Client(t))
	defer election.JoinCandidates(top, fleetName, 3)()
	mid := newSession(t, c.Client(t))
	defer election.JoinCandidates(mid, fleetName, 2)()
	e := newElection(t, mid, fleetName)
	fencingtest.WaitFor(t, wait, "the records of top and mid", func() bool {
		return len(candidatesOf(t, c, fleetName)) == 2
	})

	// The wait's first judging (no one behind) waits for the view to hold
	// all three records, its own too; mid queues only then, so its key is
	// judged after the follower's read and watch are set up, with no event
	// left to wake the wait but the one its judging makes.
	settled, changed := make(chan error, 1), make(chan error, 1)
	var first, acted sync.Once
	judging := func(next string, view func() (records int, preferred bool)) {
		if next == "" {
			first.Do(func() { settled <- awaitView(view, "all three records", 3, false) })
			return
		}
		acted.Do(func() { changed <- topGoesWhileJudging(top, view) })
	}
	await, stop := election.AwaitSuccessorJudging(s, fleetName, term, judging, 1)
	defer stop()
	awaited := make(chan bool, 1)
	go func() { awaited <- await(fencingtest.Context(t, wait)) }()
	receive(t, settled, "the leader to judge that no one is behind")
	ctx, cancel := context.WithCancel(fencingtest.Context(t, wait))
	campaigned := make(chan error, 1)
	go func() {
		_, err := e.Campaign(ctx, "mid")
		campaigned <- err
	}()
	defer func() { cancel(); <-campaigned }()
	receive(t, changed, "the leader to judge mid")
	if !fencingtest.Receive(t, awaited, "the leader to see mid preferred once top has gone") {
		t.Fatal("the wait for a preferred successor gave up")
	}
}

// topGoesWhileJudging runs in the wait, once it has judged mid not
// preferred and before it waits: with mid ranked below top in the view, it
// ends top's session and waits until the view has seen top's record go.
func topGoesWhileJudging(top *fencing.Session, view func() (records int, preferred bool)) error {
	if _, preferred := view(); preferred {
		return errors.New("mid preferred while top is live")
	}
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	if err := top.Close(ctx); err != nil {
		return err
	}
	return awaitView(view, "top's record to go", 2, true)
}

// awaitView waits until view holds records records and says preferred.
func awaitView(view func() (int, bool), what string, records int, preferred bool) error {
	if !fencingtest.Within(wait, func() bool { n, p := view(); return n == records && p == preferred }) {
		return fmt.Errorf("gave up waiting for the view: %s", what)
	}
	return nil
}

// receive waits for one error from ch, and fails t if it is not nil.
func receive(t *testing.T, ch <-chan error, what string) {
	t.Helper()
	select {
	case err := <-ch:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(wait):
		t.Fatalf("gave up after %v waiting for %s", wait, what)
	}
}

// heldWatch holds a client's requests to watch key until release is closed
// (held is closed when it first does), and counts them. A held request
// stalls the client's whole watch stream it goes on (clientv3 sends on it
// from one goroutine): every watch that requires a leader, for their events
// too. Ownership watches go on the session's own stream (ownwatch.Mux).
type heldWatch struct {
	key     string
	creates atomic.Int32
	once    sync.Once
	held    chan struct{}
	release chan struct{}
}

func newHeldWatch(key string) *heldWatch {
	return &heldWatch{key: key, held: make(chan struct{}), release: make(chan struct{})}
}

// waitHeld waits until a request to watch the key was made.
func (h *heldWatch) waitHeld(t *testing.T) {
	t.Helper()
	select {
	case <-h.held:
	case <-time.After(wait):
		t.Fatalf("no watch of %q after %v", h.key, wait)
	}
}

func (h *heldWatch) option() fencingtest.ClientOption {
	return func(cfg *clientv3.Config) {
		cfg.DialOptions = append(cfg.DialOptions, grpc.WithChainStreamInterceptor(
			func(ctx context.Context, desc *grpc.StreamDesc, cc *grpc.ClientConn, method string,
				streamer grpc.Streamer, opts ...grpc.CallOption) (grpc.ClientStream, error) {
				cs, err := streamer(ctx, desc, cc, method, opts...)
				if err != nil || path.Base(method) != "Watch" {
					return cs, err
				}
				return heldStream{cs, h}, nil
			}))
	}
}

type heldStream struct {
	grpc.ClientStream
	h *heldWatch
}

func (s heldStream) SendMsg(m any) error {
	if r, ok := m.(*etcdserverpb.WatchRequest); ok && string(r.GetCreateRequest().GetKey()) == s.h.key {
		s.h.creates.Add(1)
		s.h.once.Do(func() { close(s.h.held) })
		select {
		case <-s.h.release:
		case <-s.Context().Done():
			return s.Context().Err()
		}
	}
	return s.ClientStream.SendMsg(m)
}

// waitQueue waits until the election's queue holds the keys of ids, and only
// those, in this order: the leader's first.
func (f *fleet) waitQueue(ids ...string) {
	f.t.Helper()
	fencingtest.WaitFor(f.t, wait, fmt.Sprintf("the queue %v", ids), func() bool {
		var got []string
		for _, e := range f.c.Queue(f.t, fencing.KindElection, fleetName).Entries {
			got = append(got, e.Value)
		}
		return slices.Equal(got, ids)
	})
}

// Replicas of one name with and without a priority (an older leasehold's
// Run, or one given none) exclude each other, as the package doc says: the
// unranked ones queue as ever and never give way, the ranked ones queue
// behind them like any other, and among themselves follow their ranks.
// Steps (q: the queue, leader first):
//
//  1. old (unranked) leads; high (2) queues behind it, low (1), outranked,
//     does not: q = old high. old keeps leading; old2 (unranked) queues
//     although it ranks nothing: q = old high old2.
//  2. old stops: high, next, leads; old2 behind it does not preempt it.
//  3. high stops: old2, next, leads; low, now preferred, queues behind it;
//     high comes back: low withdraws, high queues behind old2, which keeps
//     leading; old2 stops: high leads.
//  4. high stops: low leads alone. old3 (unranked) queues, then high comes
//     back: low is preempted and, with old3 right behind it and not high,
//     resigns after its handoff wait; old3 leads and keeps leading with
//     high behind it. old3 stops: high; high stops: low.
func TestPriorityMixedWithUnranked(t *testing.T) {
	c := fencingtest.Single(t)
	f := newFleet(t, c)
	f.start("old", nil)
	f.waitLeader("old")
	f.start("high", nil, election.Priority(2))
	f.waitQueued("high")
	f.start("low", nil, election.Priority(1))
	f.waitCandidates("high", "low")
	f.waitQueue("old", "high")
	f.start("old2", nil)
	f.waitQueue("old", "high", "old2")
	f.waitLeader("old")

	f.stop("old")
	f.waitLeader("high")
	f.waitQueue("high", "old2")

	f.stop("high")
	f.waitLeader("old2")
	f.waitQueue("old2", "low")
	f.start("high", nil, election.Priority(2))
	f.waitCandidates("high", "low")
	f.waitQueue("old2", "high")
	f.waitLeader("old2")
	f.stop("old2")
	f.waitLeader("high")
	f.waitQueue("high")

	f.stop("high")
	f.waitLeader("low")
	f.start("old3", nil)
	f.waitQueue("low", "old3")
	f.start("high", nil, election.Priority(2))
	f.waitLeader("old3")
	f.waitCandidates("high", "low")
	f.waitQueue("old3", "high")
	f.stop("old3")
	f.waitLeader("high")
	f.stop("high")
	f.waitLeader("low")
	f.stop("low")

	f.check("old", "high", "old2", "high", "low", "old3", "high", "low")
	f.mu.Lock()
	defer f.mu.Unlock()
	for id, causes := range f.causes {
		want := 0
		if id == "low" {
			want = 1 // by high, with old3 behind it
		}
		if n := countIs(causes, election.ErrPreempted); n != want {
			t.Errorf("%s's works ended with ErrPreempted %d times, want %d: %v", id, n, want, causes)
		}
	}
	for _, id := range []string{"old", "old2", "old3"} {
		if causes := f.causes[id]; len(causes) != 1 || !errors.Is(causes[0], context.Canceled) {
			t.Errorf("the unranked %s's work ended with %v, want once, when its Run was stopped", id, causes)
		}
	}
}

// Weight has no effect on Run, but Run refuses a weight <= 0 as RunGroup
// does, ranked or not, before anything is written: its client sent etcd no
// request, and no key is under the name.
func TestRunRejectsBadWeight(t *testing.T) {
	c := fencingtest.Single(t)
	var ctr etcdtest.Counter
	cli := c.Client(t, etcdtest.WithCounter(&ctr))
	before := ctr.Requests("")
	for _, w := range []int{0, -1} {
		for _, opts := range [][]election.RunOption{{election.Weight(w)}, {election.Priority(1), election.Weight(w)}} {
			err := election.Run(fencingtest.Context(t, wait), cli, fleetName, "x", func(context.Context, *election.Term) error {
				t.Errorf("Weight(%d): work ran", w)
				return nil
			}, opts...)
			if !errors.Is(err, fencing.ErrInvalidArgument) {
				t.Errorf("Weight(%d) of %d options: Run = %v, want ErrInvalidArgument", w, len(opts), err)
			}
		}
	}
	if n := ctr.Requests(""); n != before {
		t.Fatalf("requests sent to etcd: %d, want none: %v", n-before, &ctr)
	}
	name, err := inspect.KeyPrefix(fencing.DefaultRoot, "", fleetName)
	if err != nil {
		t.Fatal(err)
	}
	if keys := etcdtest.Keys(t, c, name); len(keys) > 0 {
		t.Fatalf("keys under the name: %q", keys)
	}
}
