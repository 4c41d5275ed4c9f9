package election_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/leasehold/leasehold/election"
	"github.com/leasehold/leasehold/fencing"
	"github.com/leasehold/leasehold/fencing/fencingtest"
	"github.com/leasehold/leasehold/internal/keyspace"
	"github.com/leasehold/leasehold/internal/testbed/etcdtest"
)

// replicas runs n Run replicas of one election, each on its own client,
// whose work blocks until its context ends. It records who works.
type replicas struct {
	mu       sync.Mutex
	working  int                               // guarded by mu: works running now
	maxSeen  int                               // guarded by mu: most works ever running at once
	terms    []*election.Term                  // guarded by mu: every term won, in order
	workDone map[fencing.Token]context.Context // guarded by mu: each term's work context
	starts   atomic.Int32
	stops    atomic.Int32
	cancels  []context.CancelFunc
	done     chan error
	stopOnce sync.Once
	errs     []error // Run's results, once stop returned
}

func startReplicas(t *testing.T, c *fencingtest.Cluster, n int, opts ...election.RunOption) *replicas {
	r := &replicas{done: make(chan error, n), workDone: map[fencing.Token]context.Context{}}
	for i := range n {
		ctx, cancel := context.WithCancel(t.Context())
		r.cancels = append(r.cancels, cancel)
		cli := c.Client(t)
		all := append([]election.RunOption{
			election.WithBackoff(10*time.Millisecond, 100*time.Millisecond),
			election.OnStartedLeading(func(*election.Term) { r.starts.Add(1) }),
			election.OnStoppedLeading(func(*election.Term, error) { r.stops.Add(1) }),
		}, opts...)
		go func() { r.done <- election.Run(ctx, cli, "workers", fmt.Sprint("replica-", i), r.work, all...) }()
	}
	t.Cleanup(func() { r.stop() })
	return r
}

func (r *replicas) work(ctx context.Context, term *election.Term) error {
	r.mu.Lock()
	r.working++
	r.maxSeen = max(r.maxSeen, r.working)
	r.terms = append(r.terms, term)
	r.workDone[term.Token()] = ctx
	r.mu.Unlock()
	<-ctx.Done()
	r.mu.Lock()
	r.working--
	r.mu.Unlock()
	return ctx.Err()
}

// stop cancels every replica and returns what their Runs returned.
func (r *replicas) stop() []error {
	r.stopOnce.Do(func() {
		for _, cancel := range r.cancels {
			cancel()
		}
		for range r.cancels {
			r.errs = append(r.errs, <-r.done)
		}
	})
	return r.errs
}

func (r *replicas) most() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.maxSeen
}

func (r *replicas) leaders() []*election.Term {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]*election.Term(nil), r.terms...)
}

func (r *replicas) waitTerms(t *testing.T, n int) []*election.Term {
	t.Helper()
	fencingtest.WaitFor(t, wait, fmt.Sprintf("%d terms", n), func() bool { return len(r.leaders()) >= n })
	return r.leaders()
}

// Exactly one replica works at a time; revoking the leader's lease moves the
// work to another replica with a greater token, and the old work's context
// ends with the lease's cause.
//
// An operator's revoke ends the old term and starts the next at the same
// revision; the old work may still run until its watch reports the loss
// (one watch round trip), which is why work must fence its effects. The
// one-at-a-time check therefore covers the steady state before the fault.
func TestRunOneWorkerAndFailoverOnRevoke(t *testing.T) {
	c := fencingtest.Single(t)
	r := startReplicas(t, c, 3, election.WithSessionOptions(fencing.WithTTL(2*time.Second)))
	first := r.waitTerms(t, 1)[0]
	fencingtest.WaitFor(t, wait, "all replicas to campaign", func() bool {
		return len(etcdtest.Keys(t, c, keyspace.Prefix(fencing.DefaultRoot, "election", "workers"))) == 3
	})
	if m := r.most(); m > 1 {
		t.Fatalf("%d works ran at once", m)
	}
	c.Revoke(t, first.Session().Lease())
	second := r.waitTerms(t, 2)[1]
	if second.Token().Compare(first.Token()) <= 0 {
		t.Fatalf("token after failover %v not greater than %v", second.Token(), first.Token())
	}
	r.mu.Lock()
	old := r.workDone[first.Token()]
	r.mu.Unlock()
	<-old.Done()
	if cause := context.Cause(old); !errors.Is(cause, fencing.ErrLeaseExpired) {
		t.Fatalf("old work's cause = %v; want ErrLeaseExpired", cause)
	}
}

// Cancelling the leader's Run hands over at once: the next replica leads
// long before the leader's lease (TTL 60 s) could have expired.
func TestRunHandsOverAtOnceOnCancel(t *testing.T) {
	c := fencingtest.Single(t)
	r := startReplicas(t, c, 3, election.WithSessionOptions(fencing.WithTTL(60*time.Second)))
	first := r.waitTerms(t, 1)[0]
	for i, cancel := range r.cancels {
		if fmt.Sprint("replica-", i) == first.Value() {
			cancel()
		}
	}
	second := r.waitTerms(t, 2)[1] // the wait's deadline (30 s) is half the TTL
	if second.Token().Compare(first.Token()) <= 0 {
		t.Fatalf("token %v not greater than %v", second.Token(), first.Token())
	}
	for _, err := range r.stop() {
		if err != nil {
			t.Errorf("Run = %v; want nil after cancel", err)
		}
	}
	if s, e := r.starts.Load(), r.stops.Load(); s != e || s < 2 {
		t.Fatalf("OnStartedLeading %d times, OnStoppedLeading %d; want equal, at least 2", s, e)
	}
	if m := r.most(); m > 1 {
		t.Fatalf("%d works ran at once", m)
	}
	if keys := etcdtest.Keys(t, c, "leasehold/"); len(keys) != 0 {
		t.Fatalf("keys left after every Run returned: %q", keys)
	}
}

func TestRunPolicies(t *testing.T) {
	c := fencingtest.Single(t)
	cli := c.Client(t)
	ctx := fencingtest.Context(t, wait)
	fast := election.WithBackoff(time.Millisecond, 10*time.Millisecond)

	// Default: nil means done.
	runs := 0
	err := election.Run(ctx, cli, "policy", "v", func(context.Context, *election.Term) error { runs++; return nil }, fast)
	if err != nil || runs != 1 {
		t.Fatalf("Run with work returning nil: %v after %d runs; want nil after 1", err, runs)
	}
	// Default: an error means campaign again.
	boom := errors.New("boom")
	runs = 0
	err = election.Run(ctx, cli, "policy", "v", func(context.Context, *election.Term) error {
		if runs++; runs < 3 {
			return boom
		}
		return nil
	}, fast)
	if err != nil || runs != 3 {
		t.Fatalf("Run with failing work: %v after %d runs; want nil after 3", err, runs)
	}
	// AfterError(Return) stops Run with the error.
	err = election.Run(ctx, cli, "policy", "v", func(context.Context, *election.Term) error { return boom },
		fast, election.AfterError(election.Return))
	if !errors.Is(err, boom) {
		t.Fatalf("Run with AfterError(Return): %v; want boom", err)
	}
	// AfterSuccess(KeepLeading) keeps the term until ctx ends.
	kctx, cancel := context.WithCancel(ctx)
	won := make(chan *election.Term, 1)
	done := make(chan error, 1)
	go func() {
		done <- election.Run(kctx, cli, "policy", "v", func(_ context.Context, t *election.Term) error { won <- t; return nil },
			fast, election.AfterSuccess(election.KeepLeading))
	}()
	// Wait for the work, not for the key: a key is there before Campaign
	// returns, and a ctx ended then ends the campaign, with no term.
	var term *election.Term
	select {
	case term = <-won:
	case <-time.After(wait):
		t.Fatal("Run never led")
	}
	fencingtest.WaitFor(t, wait, "the term to be kept", func() bool {
		return len(etcdtest.Keys(t, c, keyspace.Prefix(fencing.DefaultRoot, "election", "policy"))) == 1
	})
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("Run with KeepLeading: %v", err)
	}
	if term == nil || etcdtest.Exists(t, c, term.Key()) {
		t.Fatal("KeepLeading's term not resigned when ctx ended")
	}
}

func TestRunRejectsBadArguments(t *testing.T) {
	c := fencingtest.Single(t)
	ctx := fencingtest.Context(t, wait)
	work := func(context.Context, *election.Term) error { return nil }
	for _, tc := range []struct {
		name string
		err  error
		want error
	}{
		{"nil client", election.Run(ctx, nil, "a", "v", work), fencing.ErrInvalidArgument},
		{"nil work", election.Run(ctx, c.Admin, "a", "v", nil), fencing.ErrInvalidArgument},
		{"bad name", election.Run(ctx, c.Admin, "", "v", work), fencing.ErrInvalidName},
		{"bad TTL", election.Run(ctx, c.Admin, "a", "v", work, election.WithSessionOptions(fencing.WithTTL(time.Second))), fencing.ErrInvalidArgument},
		{"bad backoff", election.Run(ctx, c.Admin, "a", "v", work, election.WithBackoff(0, 0)), fencing.ErrInvalidArgument},
	} {
		if !errors.Is(tc.err, tc.want) {
			t.Errorf("%s: %v; want %v", tc.name, tc.err, tc.want)
		}
	}
	if keys := etcdtest.Keys(t, c, ""); len(keys) != 0 {
		t.Fatalf("keys left behind: %q", keys)
	}
}

// With etcd down, Run says why it does not lead (a lease grant that cannot
// complete is given up after one TTL and retried), and leads once etcd is
// back.
func TestRunReportsUnreachableEtcd(t *testing.T) {
	c := fencingtest.Single(t)
	cli := c.Client(t)
	c.Stop(0)
	var buf etcdtest.Buffer
	log := slog.New(slog.NewTextHandler(&buf, nil))
	ctx, cancel := context.WithCancel(t.Context())
	led := make(chan struct{})
	done := make(chan error, 1)
	go func() {
		done <- election.Run(ctx, cli, "unreachable", "v", func(ctx context.Context, _ *election.Term) error {
			close(led)
			<-ctx.Done()
			return nil
		}, election.WithSessionOptions(fencing.WithTTL(2*time.Second), fencing.WithLogger(log)), election.WithBackoff(10*time.Millisecond, 100*time.Millisecond))
	}()
	fencingtest.WaitFor(t, time.Minute, "a logged grant failure", func() bool {
		return strings.Contains(buf.String(), "campaign failed") && strings.Contains(buf.String(), "grant lease")
	})
	c.Restart(t, 0)
	select {
	case <-led:
	case <-time.After(time.Minute):
		t.Fatalf("no term within a minute of etcd's return:\n%s", buf.String())
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("Run: %v", err)
	}
}

// A term that the leader's own code resigns (an operator's request, as
// examples/leader's POST /resign) ends normally: Run logs its end at debug,
// as README's log levels have it, not at warn, which is for losses.
func TestRunLogsRequestedResignAtDebug(t *testing.T) {
	c := fencingtest.Single(t)
	var h levels
	terms := make(chan *election.Term, 1)
	stop := fencingtest.Go(t, func(ctx context.Context) error {
		return election.Run(ctx, c.Client(t), "resigned", "v", func(ctx context.Context, term *election.Term) error {
			select {
			case terms <- term:
			default: // a later term: the test has its one
			}
			<-ctx.Done()
			return nil
		}, election.AfterSuccess(election.KeepLeading), election.WithBackoff(time.Second, time.Second),
			election.WithSessionOptions(fencing.WithLogger(slog.New(&h))))
	})
	term := fencingtest.Receive(t, terms, "a term")
	if err := term.Resign(fencingtest.Context(t, wait)); err != nil {
		t.Fatal(err)
	}
	fencingtest.WaitFor(t, wait, `"stopped leading" logged`, func() bool { return len(h.of("stopped leading")) > 0 })
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	if got := h.of("stopped leading"); got[0] != slog.LevelDebug {
		t.Errorf(`"stopped leading" of the resigned term logged at %v, want %v`, got[0], slog.LevelDebug)
	}
	if warned := h.atLeast(slog.LevelWarn); len(warned) > 0 {
		t.Errorf("logged at warn or above: %q", warned)
	}
}

// levels records the level and message of each log record.
type levels struct {
	mu      sync.Mutex
	records []slog.Record
}

func (h *levels) Enabled(context.Context, slog.Level) bool { return true }
func (h *levels) Handle(_ context.Context, r slog.Record) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.records = append(h.records, r)
	return nil
}
func (h *levels) WithAttrs([]slog.Attr) slog.Handler { return h }
func (h *levels) WithGroup(string) slog.Handler      { return h }

// of returns the levels of the records with message msg, in order.
func (h *levels) of(msg string) []slog.Level {
	h.mu.Lock()
	defer h.mu.Unlock()
	var out []slog.Level
	for _, r := range h.records {
		if r.Message == msg {
			out = append(out, r.Level)
		}
	}
	return out
}

// atLeast returns the messages of the records at level or above.
func (h *levels) atLeast(level slog.Level) []string {
	h.mu.Lock()
	defer h.mu.Unlock()
	var out []string
	for _, r := range h.records {
		if r.Level >= level {
			out = append(out, r.Message)
		}
	}
	return out
}
