package election_test

import (
	"context"
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/leasehold/leasehold/election"
	"github.com/leasehold/leasehold/fencing"
	"github.com/leasehold/leasehold/fencing/fencingtest"
	"github.com/leasehold/leasehold/guard"
	"github.com/leasehold/leasehold/internal/keyspace"
	"github.com/leasehold/leasehold/internal/testbed/etcdtest"
)

// overrun is how far past its documented bound a call may return here: slack
// for a loaded CI machine, far below the TTL that the old bounds added.
const overrun = time.Second

// Term.Context is a getter: it returns at once even when etcd cannot be
// reached.
func TestTermContextNeverBlocks(t *testing.T) {
	c := fencingtest.Single(t)
	cli, link := c.ProxiedClient(t)
	term := campaign(t, newElection(t, newSession(t, cli, fencing.WithTTL(60*time.Second)), "getter"), "v")
	link.Blackhole()
	defer link.Restore()
	got := make(chan context.Context, 1)
	go func() { got <- term.Context() }()
	select {
	case <-got:
	case <-time.After(wait / 2): // the session vouches for a minute: blocking would run past this
		t.Fatal("Term.Context blocked while etcd was unreachable")
	}
	// Value does not wait for a Proclaim stuck in the partition.
	pctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go term.Proclaim(pctx, "w")
	value := make(chan string, 1)
	go func() { value <- term.Value() }()
	select {
	case v := <-value:
		if v != "v" && v != "w" {
			t.Errorf("Value = %q", v)
		}
	case <-time.After(wait / 2):
		t.Fatal("Term.Value waited for a Proclaim in flight")
	}
}

// Resign ends the term's contexts first, even when its ctx is already done;
// the session then deletes the key, and a second Resign finds the term over.
func TestResignWithADoneContextEndsContextsAtOnce(t *testing.T) {
	c := fencingtest.Single(t)
	term := campaign(t, newElection(t, newSession(t, c.Client(t)), "resign-fails"), "v")
	tctx := term.Context()
	done, cancel := context.WithCancel(context.Background())
	cancel()
	if err := term.Resign(done); !errors.Is(err, context.Canceled) {
		t.Fatalf("Resign with a done ctx: %v, want ctx's error", err)
	}
	if !errors.Is(context.Cause(tctx), election.ErrNotLeader) || !errors.Is(context.Cause(term.Context()), election.ErrNotLeader) {
		t.Errorf("contexts after the failed Resign: causes %v and %v, want ErrNotLeader", context.Cause(tctx), context.Cause(term.Context()))
	}
	fencingtest.WaitFor(t, wait, "the session to delete the key", func() bool { return !etcdtest.Exists(t, c, term.Key()) })
	// The key can be gone before the session's delete has returned to it:
	// until then a Resign cannot tell that delete's work from its own and
	// reports success (a CI run saw it); once it returned, ErrNotLeader.
	fencingtest.WaitFor(t, wait, "Resign to find the term over", func() bool {
		err := term.Resign(fencingtest.Context(t, wait))
		if err != nil && !errors.Is(err, election.ErrNotLeader) {
			t.Fatalf("Resign again: %v; want ErrNotLeader (already resigned)", err)
		}
		return err != nil
	})
}

// Observers that call back into the term they report do not deadlock:
// Proclaim and Resign report with no lock held.
func TestTermCallbacksRunOutsideLocks(t *testing.T) {
	c := fencingtest.Single(t)
	var (
		term atomic.Pointer[election.Term]
		busy atomic.Bool // the calls below report too: no endless recursion
	)
	poke := func() {
		if !busy.CompareAndSwap(false, true) {
			return
		}
		defer busy.Store(false)
		if tm := term.Load(); tm != nil {
			_ = tm.Value()
			_ = tm.Proclaim(context.Background(), "from a callback")
			_ = tm.Resign(context.Background())
		}
	}
	obs := fencing.Observer{
		OnLoss:   func(fencing.LossEvent) { poke() },
		OnReject: func(fencing.RejectEvent) { poke() },
	}
	s := newSession(t, c.Client(t), fencing.WithObserver(obs))
	e := newElection(t, s, "reentrant")
	finished := make(chan struct{})
	go func() {
		defer close(finished)
		tm, err := e.Campaign(context.Background(), "v")
		if err != nil {
			t.Error(err)
			return
		}
		term.Store(tm)
		c.Delete(t, tm.Key())
		_ = tm.Proclaim(context.Background(), "w") // ownership compare fails: OnReject, OnLoss
		tm, _ = e.Campaign(context.Background(), "v")
		term.Store(tm)
		c.Delete(t, tm.Key())
		_ = tm.Resign(context.Background()) // nothing to delete: OnLoss, OnReject
	}()
	select {
	case <-finished:
	case <-time.After(wait):
		t.Fatal("a callback that calls back into the term deadlocked")
	}
}

func TestRunRejectsNilOption(t *testing.T) {
	c := fencingtest.Single(t)
	work := func(context.Context, *election.Term) error { return nil }
	err := election.Run(fencingtest.Context(t, wait), c.Client(t), "nil-option", "v", work, election.WithSessionOptions(fencing.WithTTL(5*time.Second)), nil)
	if !errors.Is(err, fencing.ErrInvalidArgument) {
		t.Fatalf("Run with a nil option: %v, want ErrInvalidArgument", err)
	}
	if keys := etcdtest.Keys(t, c, ""); len(keys) != 0 {
		t.Errorf("keys left: %v", keys)
	}
}

// Run returns soon after ctx ends even when etcd cannot be reached to
// resign.
func TestRunReturnsSoonAfterCtxWhenUnreachable(t *testing.T) {
	c := fencingtest.Single(t)
	cli, link := c.ProxiedClient(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	leading := make(chan struct{})
	ended := make(chan error, 1)
	go func() {
		ended <- election.Run(ctx, cli, "run-unreachable", "v", func(ctx context.Context, _ *election.Term) error {
			close(leading)
			<-ctx.Done()
			return nil
		}, election.WithSessionOptions(fencing.WithTTL(60*time.Second)))
	}()
	select {
	case <-leading:
	case <-time.After(wait):
		t.Fatal("Run never led")
	}
	link.Blackhole()
	defer link.Restore()
	cancel()
	// A second for the resign and one for the revoke, as documented; the
	// old bound was a TTL for each.
	if err := etcdtest.ReturnsBy(t, 2*time.Second+overrun, "Run after its ctx ended", func() error { return <-ended }); err != nil {
		t.Errorf("Run: %v", err)
	}
}

// A work that takes its time to stop after ctx ends (a command's grace
// period) still gets its term resigned: Run's hand-over budget starts when
// work returns, not when ctx ends.
func TestRunResignsAfterSlowWork(t *testing.T) {
	c := fencingtest.Single(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	leading := make(chan struct{})
	ended := make(chan error, 1)
	go func() {
		ended <- election.Run(ctx, c.Client(t), "run-slow-stop", "v", func(ctx context.Context, _ *election.Term) error {
			close(leading)
			<-ctx.Done()
			<-time.After(1500 * time.Millisecond) // the fault: a shutdown longer than the hand-over budget
			return nil
		}, election.WithSessionOptions(fencing.WithTTL(60*time.Second)))
	}()
	<-leading
	cancel()
	if err := <-ended; err != nil {
		t.Fatalf("Run: %v", err)
	}
	if keys := etcdtest.Keys(t, c, ""); len(keys) != 0 {
		t.Errorf("keys left after Run returned: %v", keys)
	}
}

// Campaign, Proclaim, Resign and guarded txns return by their ctx's
// deadline when etcd cannot be reached, however long the session's TTL.
func TestTermCallsKeepTheirDeadline(t *testing.T) {
	etcdtest.Long(t)
	c := fencingtest.Single(t)
	cli, link := c.ProxiedClient(t)
	s := newSession(t, cli, fencing.WithTTL(60*time.Second))
	term := campaign(t, newElection(t, s, "deadline"), "v")
	other := newElection(t, s, "deadline-other")
	link.Blackhole()
	defer link.Restore()
	calls := map[string]func(ctx context.Context) error{
		"Campaign": func(ctx context.Context) error { _, err := other.Campaign(ctx, "v"); return err },
		"Proclaim": func(ctx context.Context) error { return term.Proclaim(ctx, "w") },
		"guard.Put": func(ctx context.Context) error {
			_, err := guard.Put(ctx, term, "deadline/data", "v")
			return err
		},
		"Resign": term.Resign,
	}
	for _, name := range []string{"Campaign", "Proclaim", "guard.Put", "Resign"} {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		err := etcdtest.ReturnsBy(t, time.Second+overrun, name+" with a 1 s ctx", func() error { return calls[name](ctx) })
		cancel()
		if err == nil {
			t.Errorf("%s through a blackholed link succeeded", name)
		}
	}
	link.Restore()
	fencingtest.WaitFor(t, wait, "the failed Campaign's key removed", func() bool {
		return len(etcdtest.Keys(t, c, keyspace.Prefix(fencing.DefaultRoot, "election", "deadline-other"))) == 0
	})
}

// TryCampaign leads a free election in one request; a taken one returns
// fencing.ErrLocked naming the leader, and writes nothing.
func TestTryCampaign(t *testing.T) {
	c := fencingtest.Single(t)
	e := newElection(t, newSession(t, c.Client(t)), "try")
	term, err := e.TryCampaign(fencingtest.Context(t, wait), "first")
	if err != nil {
		t.Fatalf("TryCampaign of a free election: %v", err)
	}
	if l, err := e.Leader(fencingtest.Context(t, wait)); err != nil || l.Token != term.Token() || l.Value != "first" {
		t.Fatalf("Leader: %+v, %v", l, err)
	}
	other := newElection(t, newSession(t, c.Client(t)), "try")
	_, err = other.TryCampaign(fencingtest.Context(t, wait), "second")
	if !errors.Is(err, fencing.ErrLocked) || !strings.Contains(err.Error(), `"first"`) || !strings.Contains(err.Error(), term.Token().String()) {
		t.Fatalf("TryCampaign of a led election: %v, want ErrLocked naming the leader", err)
	}
	if keys := etcdtest.Keys(t, c, keyspace.Prefix(fencing.DefaultRoot, "election", "try")); len(keys) != 1 {
		t.Fatalf("keys after the refused TryCampaign: %v", keys)
	}
	if err := term.Resign(fencingtest.Context(t, wait)); err != nil {
		t.Fatal(err)
	}
	next, err := other.TryCampaign(fencingtest.Context(t, wait), "second")
	if err != nil {
		t.Fatalf("TryCampaign after the resign: %v", err)
	}
	if next.Token().Compare(term.Token()) <= 0 {
		t.Errorf("token %v not after %v", next.Token(), term.Token())
	}
	if err := next.Resign(fencingtest.Context(t, wait)); err != nil {
		t.Fatal(err)
	}
}

// Run's sessions take fencing's own options; a bad one is Run's error.
func TestRunWithSessionOptions(t *testing.T) {
	c := fencingtest.Single(t)
	var got time.Duration
	var value string
	err := election.Run(fencingtest.Context(t, wait), c.Client(t), "session-options", "v", func(_ context.Context, term *election.Term) error {
		got = term.Session().TTL()
		l, err := newElection(t, term.Session(), "session-options").Leader(fencingtest.Context(t, wait))
		value = l.Value
		return err
	}, election.WithSessionOptions(fencing.WithTTL(3*time.Second), fencing.WithIdentity("ignored for elections")))
	if err != nil || got != 3*time.Second || value != "v" {
		t.Fatalf("Run: %v; session TTL %v, leader value %q; want 3s and %q", err, got, value, "v")
	}
	work := func(context.Context, *election.Term) error { return nil }
	for name, opt := range map[string]election.RunOption{
		"nil":    election.WithSessionOptions(nil),
		"TTL 1s": election.WithSessionOptions(fencing.WithTTL(time.Second)),
	} {
		if err := election.Run(fencingtest.Context(t, wait), c.Client(t), "session-options", "v", work, opt); !errors.Is(err, fencing.ErrInvalidArgument) {
			t.Errorf("Run with a %s session option: %v, want ErrInvalidArgument", name, err)
		}
	}
	if keys := etcdtest.Keys(t, c, ""); len(keys) != 0 {
		t.Errorf("keys left: %v", keys)
	}
}

// After a term is lost with its session alive (its key deleted), Run clears
// the term, so its session's next campaign reuses the key.
func TestRunClearsLostTerm(t *testing.T) {
	c := fencingtest.Single(t)
	keys := make(chan string, 2)
	err := election.Run(fencingtest.Context(t, wait), c.Client(t), "run-lost", "v", func(ctx context.Context, term *election.Term) error {
		keys <- term.Key()
		if len(keys) == 1 {
			c.Delete(t, term.Key())
			<-ctx.Done() // lost: Run campaigns again
		}
		return nil
	}, election.WithBackoff(time.Millisecond, time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	if first, second := <-keys, <-keys; first != second {
		t.Errorf("the campaign after the loss used key %q, not the lost term's %q", second, first)
	}
}
