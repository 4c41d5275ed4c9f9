package election

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"sync"
	"time"

	"github.com/leasehold/leasehold/fencing"
	"github.com/leasehold/leasehold/internal/assign"
	"github.com/leasehold/leasehold/internal/keyspace"
	"github.com/leasehold/leasehold/internal/lifetime"
	"github.com/leasehold/leasehold/internal/retry"
	"github.com/leasehold/leasehold/internal/sessionlink"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// ErrRebalanced is the cause of a term's context when RunGroup hands its name
// to another replica: one joined or left, or this one declined the name.
var ErrRebalanced = errors.New("rebalanced")

const (
	// declineAfter is how many terms of a name in a row must fail (work
	// returned an error, or the term was lost) before a replica declines
	// the name, so that another replica leads it.
	declineAfter = 3
	// defaultDeclineFor is how long a decline lasts: then the replica may be
	// given the name again.
	defaultDeclineFor = 5 * time.Minute
)

// RunGroup runs work for each of names on whichever replica of group (a
// RunGroup call, in any process) the name is assigned to, with Run's
// guarantees per name; a term's value is the session's identity. With R
// replicas listing the same N names, none leads more than ⌈N/R⌉ once they
// have seen each other (with Weight, its weight's share); a name that moves
// ends its work's context with a cause wrapping ErrRebalanced. A replica
// whose terms of a name fail three times in a row declines it for five
// minutes. Priority and WithDrain rank replicas: a name goes only to the
// highest-ranked replicas that list it. The options are Run's; both
// policies default to Recampaign. When ctx ends, RunGroup hands its names
// over and returns nil within three seconds of the works' return. At idle
// it sends only keepalives. Errors: bad arguments, a refused grant
// (rpctypes.ErrPermissionDenied), or work's under Return.
func RunGroup(ctx context.Context, cli *clientv3.Client, group string, names []string,
	work func(ctx context.Context, t *Term) error, opts ...RunOption) error {
	c, sc, err := configure(runConfig{onSuccess: Recampaign, onError: Recampaign, declineFor: defaultDeclineFor}, opts)
	if err == nil {
		err = c.validate(ctx, cli, group, work)
	}
	if err == nil {
		err = validateNames(names)
	}
	if err != nil {
		return fmt.Errorf("election: RunGroup %q: %w", group, err)
	}
	g := &grouper{cfg: c, cli: cli, group: group, names: slices.Clone(names), work: work,
		ttl: sc.TTL, log: sc.Logger.With("group", group), declined: map[string]time.Time{}}
	return g.loop(ctx)
}

func validateNames(names []string) error {
	if len(names) == 0 {
		return fmt.Errorf("%w: no names", fencing.ErrInvalidArgument)
	}
	seen := make(map[string]bool, len(names))
	for _, n := range names {
		if err := fencing.ValidateName(n); err != nil {
			return err
		}
		if seen[n] {
			return fmt.Errorf("%w: name %q twice", fencing.ErrInvalidArgument, n)
		}
		seen[n] = true
	}
	return nil
}

// grouper is one RunGroup call: a round per session.
type grouper struct {
	cfg   runConfig
	cli   *clientv3.Client
	group string
	names []string
	work  func(context.Context, *Term) error
	ttl   time.Duration
	log   *slog.Logger
	// declined are the names this replica declines, until when: kept across
	// rounds, so that a new session does not take a failing name back.
	declined map[string]time.Time
}

// loop makes a session, serves a round on it until it ends, and starts over,
// until ctx ends or a round returns an error.
func (g *grouper) loop(ctx context.Context) error {
	fails := 0
	for ctx.Err() == nil {
		s, err := g.cfg.newSession(ctx, g.cli, g.ttl)
		if err == nil {
			start := time.Now()
			err = g.serve(ctx, s)
			if time.Since(start) > g.ttl { // a round that lasted: start the backoff over
				fails = 0
			}
		}
		var ret *returned
		switch {
		case errors.As(err, &ret) && ret.err == nil:
			return nil
		case errors.As(err, &ret):
			return fmt.Errorf("election: RunGroup %q: work for %q: %w", g.group, ret.name, ret.err)
		case ctx.Err() != nil:
			return nil
		case refused(err):
			return underPrefix(fmt.Sprintf("election: RunGroup %q", g.group), err)
		}
		g.log.Warn("session lost or failed; joining again", "err", err)
		fails++
		backoff(ctx, g.cfg.backoffMin, g.cfg.backoffMax, fails)
	}
	return nil
}

// serve runs a round on s, then closes s. It returns the round's error, or
// why the session ended while ctx had not.
func (g *grouper) serve(ctx context.Context, s *fencing.Session) error {
	err := g.round(ctx, s)
	cctx, cancel := lifetime.Detach(ctx, leaveGrace, s.TTL())
	s.Close(cctx)
	cancel()
	if err == nil && ctx.Err() == nil {
		err = s.Err()
	}
	return err
}

// returned ends RunGroup with the result of a work whose policy was Return.
type returned struct {
	name string
	err  error
}

func (e *returned) Error() string { return fmt.Sprintf("work for %q returned: %v", e.name, e.err) }

// ends reports whether err ends RunGroup: a policy of Return, or a refusal.
func ends(err error) bool {
	var ret *returned
	return err != nil && (errors.As(err, &ret) || refused(err))
}

// round is the group's life on one session: it joins, follows the members
// and leads the names assigned to it, until ctx or the session ends or a
// name's loop ends RunGroup, and then leaves.
func (g *grouper) round(ctx context.Context, s *fencing.Session) error {
	l := sessionlink.Of(s)
	rctx, stop := context.WithCancelCause(ctx)
	defer stop(nil)
	unlink := context.AfterFunc(s.Context(), func() { stop(context.Cause(s.Context())) })
	defer unlink()
	r := &round{g: g, s: s, link: l, ctx: rctx, stop: stop,
		prefix:  keyspace.Prefix(l.Root, keyspace.KindGroup, g.group),
		members: map[string]assign.Member{}, running: map[string]*nameLoop{}, declined: g.declined,
		events: make(chan event), expiry: time.NewTimer(time.Hour)}
	defer r.expiry.Stop()
	r.undecline() // those that ended between rounds; arms the timer for the rest
	r.key = r.prefix + l.KeyStem + "0"
	err := r.putMember(rctx)
	if err == nil {
		err = r.follow(rctx)
	}
	r.leave(ctx, err)
	if ends(err) {
		return err
	}
	return nil
}

// round is one session of a RunGroup.
type round struct {
	g      *grouper
	s      *fencing.Session
	link   *sessionlink.Link
	ctx    context.Context         // ends with RunGroup's ctx, the session, or stop
	stop   context.CancelCauseFunc // ends the round, with the cause
	prefix string                  // of the group's membership keys
	key    string                  // this replica's membership key
	rev    int64                   // the last write of key this round knows of (0: none)

	members  map[string]assign.Member // by key, as last read
	running  map[string]*nameLoop     // the names this replica leads or campaigns for
	declined map[string]time.Time     // the grouper's: names declined, until when
	expiry   *time.Timer              // fires when the earliest decline ends
	draining <-chan struct{}          // closed when WithDrain's switch changes (nil: none)
	events   chan event               // from the names' loops
	wg       sync.WaitGroup           // the names' loops
}

// nameLoop is the goroutine that campaigns for one name and runs its work.
type nameLoop struct {
	stop context.CancelCauseFunc
	done chan struct{}
	// stopping: the name was handed over. Written only by the round's
	// goroutine, under mu, which the loop's goroutine reads it under.
	stopping bool

	mu      sync.Mutex
	after   *nameLoop // the loop of the name before this one; nil once entered
	entered bool      // its wait is over and it was not handed over first
}

// handOver ends l's work with cause.
func (l *nameLoop) handOver(cause error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.stop(cause)
	l.stopping = true
}

// enter ends l's wait: it reports whether l may lead, which it may not once
// handed over.
func (l *nameLoop) enter() bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.stopping {
		return false // its wait may have ended early: keep after for pending
	}
	l.entered, l.after = true, nil
	return true
}

// pending returns, for a loop handed over before its wait ended (which
// never leads), the loop it waited for; otherwise l.
func (l *nameLoop) pending() *nameLoop {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.stopping && !l.entered {
		return l.after
	}
	return l
}

// event is what a name's loop tells its round: that the name is to be
// declined, or that RunGroup must end with err.
type event struct {
	name    string
	decline bool
	err     error
}

// reassign computes who leads each name and starts or hands over this
// replica's names to match.
func (r *round) reassign() {
	a := assign.Assign(slices.Collect(maps.Values(r.members)))
	var took, gave []string
	for _, n := range r.g.names {
		mine := a[n] == r.key
		loop := r.running[n]
		switch {
		case mine && (loop == nil || loop.stopping):
			r.running[n] = r.start(n, loop)
			took = append(took, n)
		case !mine && loop != nil && !loop.stopping:
			to := r.members[a[n]].ID
			r.g.log.Debug("handing a name over", "name", n, "to", to, "reason", ErrRebalanced)
			loop.handOver(fmt.Errorf("%w: %q moves to %q", ErrRebalanced, n, to))
			gave = append(gave, n)
		}
	}
	if len(took)+len(gave) > 0 {
		r.g.log.Info("rebalanced", "replicas", len(r.members), "leading", r.leading(),
			"cap", assign.Cap(len(a), len(r.members)), "took", len(took), "gave", len(gave))
	}
}

// leading counts the names this replica runs a loop for.
func (r *round) leading() int {
	n := 0
	for _, l := range r.running {
		if !l.stopping {
			n++
		}
	}
	return n
}

// start runs the loop of name once the previous one, if any, has ended.
// A loop handed over before its wait ended never leads: it ends at once,
// and the new loop waits for the one before it, so a name that moves away
// and back while its work ignores its context adds no chain of waiting
// loops.
func (r *round) start(name string, prev *nameLoop) *nameLoop {
	for prev != nil {
		p := prev.pending()
		if p == prev {
			break
		}
		prev = p
	}
	ctx, stop := context.WithCancelCause(r.ctx)
	l := &nameLoop{stop: stop, done: make(chan struct{}), after: prev}
	r.wg.Go(func() {
		defer close(l.done)
		defer stop(nil)
		if prev != nil {
			select {
			case <-prev.done:
			case <-ctx.Done():
			}
		}
		if l.enter() {
			r.lead(ctx, name)
		}
	})
	return l
}

// leave ends every name's loop, after removing this replica's membership key
// so that the others start campaigning for its names at once. Unless ctx or
// the session ended first, the works' contexts end with err as the cause.
func (r *round) leave(ctx context.Context, err error) {
	if r.s.Err() == nil && r.rev != 0 {
		dctx, cancel := lifetime.Detach(ctx, leaveGrace, leaveGrace)
		var unsure bool
		retry.Do(dctx, r.link.Client, r.link.Latency, &unsure, func(ctx context.Context) error {
			_, err := r.s.Client().Delete(ctx, r.key)
			return err
		})
		cancel()
	}
	r.stop(fmt.Errorf("election: RunGroup %q ends: %w", r.g.group, err))
	r.wg.Wait()
}

// lead campaigns for name and runs its work, as Run does on the round's
// session, until ctx ends (the name was handed over, or the round ended).
func (r *round) lead(ctx context.Context, name string) {
	run := &runner{cfg: &r.g.cfg, cli: r.g.cli, name: name, value: r.link.Identity, work: r.g.work, ttl: r.g.ttl, s: r.s,
		log: r.g.log.With("kind", fencing.KindElection, "name", name)}
	run.resignFailed = func(context.Context) { r.stop(fmt.Errorf("%w: resign of %q failed", fencing.ErrSessionClosed, name)) }
	run.stays = r.ctx
	run.reason = rebalancedReason
	failed := 0 // terms in a row that failed
	for ctx.Err() == nil {
		e, err := New(r.s, name)
		var t *Term
		if err == nil {
			t, err = e.Campaign(ctx, run.value)
		}
		if err != nil {
			if err = run.campaignFailed(ctx, err); err != nil {
				r.tell(ctx, event{name: name, err: err})
				return
			}
			continue
		}
		res := run.serve(ctx, t)
		// A term the work resigned itself is no failure.
		if failed++; (!res.lost || errors.Is(res.cause, errResigned)) && res.workErr == nil {
			failed = 0
		}
		if failed >= declineAfter { // again after a decline that ended
			r.tell(ctx, event{name: name, decline: true})
			failed = 0
		}
		if again, err := run.next(ctx, res); !again {
			if ctx.Err() == nil { // a policy of Return
				r.tell(ctx, event{name: name, err: &returned{name: name, err: err}})
			}
			return
		}
	}
}

// tell hands ev to the round, unless ctx ends first.
func (r *round) tell(ctx context.Context, ev event) {
	select {
	case r.events <- ev:
	case <-ctx.Done():
	}
}
