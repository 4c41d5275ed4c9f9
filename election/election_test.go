package election_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/leasehold/leasehold/election"
	"github.com/leasehold/leasehold/fencing"
	"github.com/leasehold/leasehold/fencing/fencingtest"
	"github.com/leasehold/leasehold/guard"
	"github.com/leasehold/leasehold/internal/keyspace"
	"github.com/leasehold/leasehold/internal/testbed/etcdtest"
)

func TestNewRejectsBadInput(t *testing.T) {
	c := fencingtest.Single(t)
	s := newSession(t, c.Client(t))
	for _, name := range []string{"", "a\x00b", "\xff"} {
		if _, err := election.New(s, name); !errors.Is(err, fencing.ErrInvalidName) {
			t.Errorf("New(%q): %v; want ErrInvalidName", name, err)
		}
	}
	if _, err := election.New(nil, "a"); !errors.Is(err, fencing.ErrInvalidArgument) {
		t.Errorf("New(nil): %v; want ErrInvalidArgument", err)
	}
	if keys := etcdtest.Keys(t, c, ""); len(keys) != 0 {
		t.Fatalf("keys left behind: %q", keys)
	}
}

func TestCampaignLeaderResign(t *testing.T) {
	c := fencingtest.Single(t)
	e := newElection(t, newSession(t, c.Client(t)), "svc")
	if _, err := e.Leader(fencingtest.Context(t, wait)); !errors.Is(err, election.ErrNoLeader) {
		t.Fatalf("Leader of an empty election: %v; want ErrNoLeader", err)
	}
	term := campaign(t, e, "host-a")
	l, err := e.Leader(fencingtest.Context(t, wait))
	if err != nil || l.Value != "host-a" || l.Token != term.Token() || l.Key != term.Key() {
		t.Fatalf("Leader = %+v, %v; want host-a with the term's token and key", l, err)
	}
	if err := term.Proclaim(fencingtest.Context(t, wait), "host-a:8080"); err != nil {
		t.Fatal(err)
	}
	if l, _ := e.Leader(fencingtest.Context(t, wait)); l.Value != "host-a:8080" || term.Value() != "host-a:8080" {
		t.Fatalf("after Proclaim: Leader %q, Value %q", l.Value, term.Value())
	}
	if _, err := guard.Put(fencingtest.Context(t, wait), term, "svc/config", "x"); err != nil {
		t.Fatalf("guarded Put by the term: %v", err)
	}
	if err := term.Resign(fencingtest.Context(t, wait)); err != nil {
		t.Fatal(err)
	}
	if err := term.Resign(fencingtest.Context(t, wait)); !errors.Is(err, election.ErrNotLeader) {
		t.Fatalf("second Resign: %v; want ErrNotLeader", err)
	}
	if err := term.Proclaim(fencingtest.Context(t, wait), "x"); !errors.Is(err, election.ErrNotLeader) {
		t.Fatalf("Proclaim after Resign: %v; want ErrNotLeader", err)
	}
	if cause := context.Cause(term.Context()); !errors.Is(cause, election.ErrNotLeader) {
		t.Fatalf("Context() after Resign: %v; want ErrNotLeader", cause)
	}
}

// Proclaim and Resign after an operator deleted the key: ErrNotLeader.
func TestProclaimResignAfterKeyDeleted(t *testing.T) {
	c := fencingtest.Single(t)
	term := campaign(t, newElection(t, newSession(t, c.Client(t)), "deleted"), "v")
	ctx := term.Context()
	c.Delete(t, term.Key())
	if err := term.Proclaim(fencingtest.Context(t, wait), "w"); !errors.Is(err, election.ErrNotLeader) {
		t.Fatalf("Proclaim: %v; want ErrNotLeader", err)
	}
	if etcdtest.Exists(t, c, term.Key()) {
		t.Fatal("Proclaim after the delete recreated the key")
	}
	if err := term.Resign(fencingtest.Context(t, wait)); !errors.Is(err, election.ErrNotLeader) {
		t.Fatalf("Resign: %v; want ErrNotLeader", err)
	}
	<-ctx.Done()
	if cause := context.Cause(ctx); !errors.Is(cause, fencing.ErrKeyDeleted) {
		t.Fatalf("cause = %v; want ErrKeyDeleted", cause)
	}
}

// After an RPC error a term stays resignable: a retry ends the term. The
// first attempt, held in the partition, may land after it heals; the retry
// then finds the term gone and says ErrNotLeader. Either way the key goes.
func TestResignRetriesAfterNetworkError(t *testing.T) {
	c := fencingtest.Single(t)
	cli, link := c.ProxiedClient(t)
	term := campaign(t, newElection(t, newSession(t, cli), "retry"), "v")
	link.Blackhole()
	short, cancel := context.WithTimeout(t.Context(), 200*time.Millisecond)
	defer cancel()
	if err := term.Resign(short); err == nil || errors.Is(err, election.ErrNotLeader) {
		t.Fatalf("Resign through a blackhole: %v; want a network error", err)
	}
	link.Restore()
	fencingtest.WaitFor(t, wait, "a retried Resign to get an answer", func() bool {
		ctx, cancel := context.WithTimeout(t.Context(), time.Second)
		defer cancel()
		err := term.Resign(ctx)
		return err == nil || errors.Is(err, election.ErrNotLeader)
	})
	if etcdtest.Exists(t, c, term.Key()) {
		t.Fatal("key outlived Resign")
	}
}

// S5: a candidate whose lease is revoked while it waits fails.
func TestCampaignFailsWhenLeaseRevokedWhileWaiting(t *testing.T) {
	c := fencingtest.Single(t)
	campaign(t, newElection(t, newSession(t, c.Client(t)), "revoke"), "leader")
	s := newSession(t, c.Client(t), fencing.WithTTL(2*time.Second))
	e := newElection(t, s, "revoke")
	errc := make(chan error, 1)
	go func() {
		_, err := e.Campaign(fencingtest.Context(t, wait), "candidate")
		errc <- err
	}()
	fencingtest.WaitFor(t, wait, "the candidate to queue", func() bool {
		return len(etcdtest.Keys(t, c, keyspace.Prefix(fencing.DefaultRoot, "election", "revoke"))) == 2
	})
	c.Revoke(t, s.Lease())
	if err := <-errc; !errors.Is(err, fencing.ErrSessionExpired) {
		t.Fatalf("Campaign with revoked lease: %v; want ErrSessionExpired", err)
	}
	if n := len(etcdtest.Keys(t, c, keyspace.Prefix(fencing.DefaultRoot, "election", "revoke"))); n != 1 {
		t.Fatalf("%d keys; want only the leader's", n)
	}
}

// S8: a cancelled campaign leaves no key.
func TestCancelledCampaignLeavesNoKey(t *testing.T) {
	c := fencingtest.Single(t)
	campaign(t, newElection(t, newSession(t, c.Client(t)), "cancel"), "leader")
	e := newElection(t, newSession(t, c.Client(t)), "cancel")
	ctx, cancel := context.WithCancel(t.Context())
	errc := make(chan error, 1)
	go func() {
		_, err := e.Campaign(ctx, "candidate")
		errc <- err
	}()
	fencingtest.WaitFor(t, wait, "the candidate to queue", func() bool {
		return len(etcdtest.Keys(t, c, keyspace.Prefix(fencing.DefaultRoot, "election", "cancel"))) == 2
	})
	cancel()
	if err := <-errc; !errors.Is(err, context.Canceled) {
		t.Fatalf("cancelled Campaign: %v", err)
	}
	if n := len(etcdtest.Keys(t, c, keyspace.Prefix(fencing.DefaultRoot, "election", "cancel"))); n != 1 {
		t.Fatalf("%d keys; want only the leader's", n)
	}
}

// Observe reports the current state, nobody leading after a resign, then the
// new leader and its proclaimed value.
func TestObserveReportsEveryChange(t *testing.T) {
	c := fencingtest.Single(t)
	obs := newElection(t, newSession(t, c.Client(t)), "observed").Observe(t.Context())
	if o := next(t, obs); o.Leader != nil || o.Err != nil {
		t.Fatalf("first observation = %+v; want nobody leading", o)
	}
	a := campaign(t, newElection(t, newSession(t, c.Client(t)), "observed"), "a")
	if o := next(t, obs); o.Leader == nil || o.Leader.Value != "a" || o.Leader.Token != a.Token() {
		t.Fatalf("observation = %+v; want a", o)
	}
	if err := a.Proclaim(fencingtest.Context(t, wait), "a2"); err != nil {
		t.Fatal(err)
	}
	if o := next(t, obs); o.Leader == nil || o.Leader.Value != "a2" {
		t.Fatalf("observation = %+v; want a2", o)
	}
	if err := a.Resign(fencingtest.Context(t, wait)); err != nil {
		t.Fatal(err)
	}
	if o := next(t, obs); o.Leader != nil {
		t.Fatalf("observation after Resign = %+v; want nobody leading", o)
	}
	b := campaign(t, newElection(t, newSession(t, c.Client(t)), "observed"), "b")
	if o := next(t, obs); o.Leader == nil || o.Leader.Token != b.Token() || b.Token().Compare(a.Token()) <= 0 {
		t.Fatalf("observation = %+v; want b with a greater token than %v", o, a.Token())
	}
}

// A reader slower than the changes gets the latest state, not each one in
// between: nothing piles up while it does not read. Before, every change
// was queued (clientv3 buffers a watch nobody reads, without bound), and a
// reader that came back got 200 stale values before the current one.
func TestObserveSlowReaderGetsTheLatest(t *testing.T) {
	c := fencingtest.Single(t)
	obs := newElection(t, newSession(t, c.Client(t)), "slow-reader").Observe(t.Context())
	next(t, obs) // nobody leads
	a := campaign(t, newElection(t, newSession(t, c.Client(t)), "slow-reader"), "a")
	next(t, obs)
	const n = 200
	for i := range n {
		if err := a.Proclaim(fencingtest.Context(t, wait), fmt.Sprint("a", i)); err != nil {
			t.Fatal(err)
		}
	}
	got := 0
	for o := next(t, obs); o.Leader == nil || o.Leader.Value != fmt.Sprint("a", n-1); o = next(t, obs) {
		got++
	}
	// The watch's events may still be arriving as the reader starts (late on
	// a loaded machine), and each one that arrives while it reads is the
	// latest then; a backlog would hold all n.
	if got > n/4 {
		t.Fatalf("%d stale observations before the latest; want the latest at once, or nearly", got)
	}
}

func TestObserveClosesWhenCtxDone(t *testing.T) {
	c := fencingtest.Single(t)
	ctx, cancel := context.WithCancel(t.Context())
	obs := newElection(t, newSession(t, c.Client(t)), "closing").Observe(ctx)
	next(t, obs)
	cancel()
	for range obs { // drains until closed; the test deadline bounds it
	}
}

// S9: Observe and a waiting Campaign both survive compaction and a broken
// connection: their client talks to one member, which is stopped while the
// leader resigns and history is compacted, then restarted.
func TestObserveAndCampaignSurviveCompaction(t *testing.T) {
	etcdtest.Long(t)
	c := fencingtest.Three(t)
	leader := campaign(t, newElection(t, newSession(t, c.Client(t)), "compact"), "first")
	var ctr etcdtest.Counter
	cli := fencingtest.NewClient(t, []string{c.Members[0].ClientURL.String()}, etcdtest.WithCounter(&ctr))
	e := newElection(t, newSession(t, cli, fencing.WithTTL(30*time.Second)), "compact")
	obs := e.Observe(t.Context())
	if o := next(t, obs); o.Leader == nil || o.Leader.Value != "first" {
		t.Fatalf("observation = %+v; want first", o)
	}
	won := make(chan *election.Term, 1)
	go func() {
		term, err := e.Campaign(fencingtest.Context(t, wait), "second")
		if err != nil {
			t.Error(err)
		}
		won <- term
	}()
	// Stop the member only once the candidate waits (Observe's watch and
	// the candidate's): a stop that loses the enqueue's reply fails the
	// Campaign instead, as it should.
	fencingtest.WaitFor(t, wait, "the candidate to wait", func() bool { return ctr.Requests("Watch") >= 2 })
	etcdtest.CompactWhileDown(t, c, 0, func() {
		if err := leader.Resign(fencingtest.Context(t, wait)); err != nil {
			t.Fatal(err)
		}
	})
	if term := <-won; term == nil || term.Token().Compare(leader.Token()) <= 0 {
		t.Fatalf("Campaign across compaction: term %v", term)
	}
	for {
		o := next(t, obs)
		if o.Err != nil {
			continue // the member was down: Observe may say it could not tell
		}
		if o.Leader != nil && o.Leader.Value == "second" {
			break
		}
	}
}

// The election keeps working when the raft leader member is stopped.
func TestElectionSurvivesRaftLeaderLoss(t *testing.T) {
	etcdtest.Long(t)
	c := fencingtest.Three(t)
	first := campaign(t, newElection(t, newSession(t, c.Client(t)), "raft"), "a")
	e := newElection(t, newSession(t, c.Client(t)), "raft")
	won := make(chan *election.Term, 1)
	go func() {
		term, err := e.Campaign(fencingtest.Context(t, wait), "b")
		if err != nil {
			t.Error(err)
		}
		won <- term
	}()
	fencingtest.WaitFor(t, wait, "the candidate to queue", func() bool {
		return len(etcdtest.Keys(t, c, keyspace.Prefix(fencing.DefaultRoot, "election", "raft"))) == 2
	})
	c.StopLeader(t)
	c.WaitLeader(t)
	if err := first.Resign(fencingtest.Context(t, wait)); err != nil {
		t.Fatalf("Resign with the raft leader stopped: %v", err)
	}
	if term := <-won; term == nil || term.Token().Compare(first.Token()) <= 0 {
		t.Fatalf("next term %v", term)
	}
}

// Observe says so when it cannot reach etcd, instead of going silent.
func TestObserveReportsUnreachable(t *testing.T) {
	etcdtest.Long(t)
	c := fencingtest.Single(t)
	cli, link := c.ProxiedClient(t)
	obs := newElection(t, newSession(t, cli), "unreachable").Observe(t.Context())
	next(t, obs)
	link.Blackhole()
	t.Cleanup(link.Restore)
	for o := next(t, obs); o.Err == nil; o = next(t, obs) {
	}
	// Once etcd answers again, the state comes again, even unchanged: the
	// reader's last word was the Err (found by review: it never came).
	link.Restore()
	for o := next(t, obs); o.Err != nil; o = next(t, obs) {
	}
}

// A term whose client is closed is over: its context ends, Proclaim and
// Resign fail at once (clientv3 retries a closed client's failure by itself
// until the caller's ctx ends) with ErrNotLeader, and the key goes with the
// lease.
func TestResignOnClosedClient(t *testing.T) {
	c := fencingtest.Single(t)
	cli := fencingtest.NewClient(t, c.Endpoints())
	term := campaign(t, newElection(t, newSession(t, cli, fencing.WithTTL(2*time.Second)), "closed"), "v")
	cli.Close()
	if cause := fencingtest.Ended(t, term.Context(), wait, "the term"); !errors.Is(cause, fencing.ErrSessionClosed) {
		t.Errorf("the term ended with %v; want ErrSessionClosed", cause)
	}
	err := etcdtest.ReturnsBy(t, wait, "Proclaim on a closed client", func() error { return term.Proclaim(t.Context(), "w") })
	if !errors.Is(err, election.ErrNotLeader) || !errors.Is(err, fencing.ErrSessionClosed) {
		t.Errorf("Proclaim on a closed client: %v; want ErrNotLeader and ErrSessionClosed", err)
	}
	err = etcdtest.ReturnsBy(t, wait, "Resign on a closed client", func() error { return term.Resign(t.Context()) })
	if !errors.Is(err, election.ErrNotLeader) || !errors.Is(err, fencing.ErrSessionClosed) {
		t.Fatalf("Resign on a closed client: %v; want ErrNotLeader and ErrSessionClosed", err)
	}
	fencingtest.WaitFor(t, wait, "the key to go with the lease", func() bool { return !etcdtest.Exists(t, c, term.Key()) })
}

// A term whose session stopped vouching is over: Resign says ErrNotLeader,
// whether the key went with the lease or is still there, and removes it.
func TestResignAfterSessionLost(t *testing.T) {
	c := fencingtest.Single(t)
	cli, link := c.ProxiedClient(t)
	s := newSession(t, cli, fencing.WithTTL(2*time.Second))
	t.Cleanup(link.Restore)
	term := campaign(t, newElection(t, s, "lost"), "v")
	link.Blackhole()
	<-s.Done()
	link.Restore()
	var err error
	fencingtest.WaitFor(t, wait, "Resign to get an answer", func() bool {
		ctx, cancel := context.WithTimeout(t.Context(), time.Second)
		defer cancel()
		err = term.Resign(ctx)
		return err == nil || errors.Is(err, election.ErrNotLeader)
	})
	if !errors.Is(err, election.ErrNotLeader) {
		t.Fatalf("Resign after the session was lost: %v; want ErrNotLeader", err)
	}
	if etcdtest.Exists(t, c, term.Key()) {
		t.Fatal("key outlived Resign")
	}
}

// A Resign called with the term's own context releases the term (see
// fencing's TestUnlockWithTheHoldsOwnContext).
func TestResignWithTheTermsOwnContext(t *testing.T) {
	c := fencingtest.Single(t)
	term := campaign(t, newElection(t, newSession(t, c.Client(t)), "own-context"), "a")
	if err := term.Resign(term.Context()); err != nil {
		t.Fatalf("Resign(term.Context()): %v", err)
	}
	if etcdtest.Exists(t, c, term.Key()) {
		t.Fatal("the term's key is left")
	}
}
