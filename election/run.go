package election

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"strings"
	"time"

	"github.com/leasehold/leasehold/fencing"
	"github.com/leasehold/leasehold/guard"
	"github.com/leasehold/leasehold/internal/lifetime"
	"github.com/leasehold/leasehold/internal/ownwatch"
	"github.com/leasehold/leasehold/internal/revqueue"
	"github.com/leasehold/leasehold/internal/sessionlink"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// Policy says what Run does when work returns while its term still lasts.
type Policy int

const (
	// Return resigns and makes Run return work's result (nil or the error).
	Return Policy = iota
	// Recampaign resigns, backs off with jitter, and campaigns again.
	Recampaign
	// KeepLeading keeps the term, with no work running, until ctx ends or
	// the term is lost (then Run campaigns again).
	KeepLeading
)

// RunOption configures Run. A nil RunOption makes Run return
// fencing.ErrInvalidArgument.
type RunOption func(*runConfig)

type runConfig struct {
	session    []fencing.SessionOption
	declineFor time.Duration // RunGroup: how long a decline lasts (tests shorten it)
	backoffMin time.Duration
	backoffMax time.Duration
	onSuccess  Policy
	onError    Policy
	started    func(*Term)
	stopped    func(*Term, error)
	health     *guard.Health
	healthSet  bool
	onSession  func(*fencing.Session)
	// Priority, PriorityVersion and WithDrain (prefer.go)
	priority    []int64
	badPriority error
	drain       *Drain
	drainSet    bool
	weight      int // RunGroup's share (Weight); 0: unset
	weightSet   bool
}

// WithSessionOptions applies opts to every session Run creates (see
// fencing.NewSession): its TTL, safety margin, identity, root, observer and
// logger, to which Run logs too. Several WithSessionOptions add up. A nil or
// out-of-range option makes Run return fencing.ErrInvalidArgument.
func WithSessionOptions(opts ...fencing.SessionOption) RunOption {
	return func(c *runConfig) { c.session = append(c.session, opts...) }
}

// WithHealth makes Run track each term in h while its work runs, so that h
// fails while a work outlives its term (see guard.Health).
func WithHealth(h *guard.Health) RunOption {
	return func(c *runConfig) { c.health, c.healthSet = h, true }
}

// WithBackoff sets the bounds of the jittered exponential backoff between
// campaigns after a lost term, a failed campaign or a failed work. Unset:
// 100 ms to 5 s. Run returns fencing.ErrInvalidArgument unless
// 0 < min <= max.
func WithBackoff(min, max time.Duration) RunOption {
	return func(c *runConfig) { c.backoffMin, c.backoffMax = min, max }
}

// AfterSuccess sets what Run does when work returns nil while still
// leading. Unset: Return (the work is done); RunGroup's default is
// Recampaign.
func AfterSuccess(p Policy) RunOption { return func(c *runConfig) { c.onSuccess = p } }

// AfterError sets what Run does when work returns an error while still
// leading. Unset: Recampaign.
func AfterError(p Policy) RunOption { return func(c *runConfig) { c.onError = p } }

// OnStartedLeading sets a function called with each term Run wins, before
// work starts. It runs in Run's goroutine (RunGroup's: its name's, so calls
// for different names may run at once): keep it short. A nil f is not
// called.
func OnStartedLeading(f func(*Term)) RunOption { return func(c *runConfig) { c.started = f } }

// OnStoppedLeading sets a function called once for each term Run won, after
// work has returned and the term ended, with why it ended (the term
// context's cause). It is never called for a term that was not won. It runs
// in Run's goroutine (RunGroup's: its name's): keep it short. A nil f is not
// called.
func OnStoppedLeading(f func(t *Term, cause error)) RunOption {
	return func(c *runConfig) { c.stopped = f }
}

// OnSession sets a function called with each session Run (or RunGroup)
// makes, once etcd has granted its lease and before the replica campaigns
// on it. Until the next call it is the session the replica takes part on,
// so that a health check can read its state exactly (Err, ValidUntil, Done)
// rather than infer it from renewal events: the replica can campaign and
// lead while that session's Err is nil. Run closes the session; f must not.
// It runs in Run's goroutine: keep it short. A nil f is not called.
func OnSession(f func(*fencing.Session)) RunOption {
	return func(c *runConfig) { c.onSession = f }
}

// Run is the singleton worker: it campaigns for name with value, runs work
// under the term's context (ended the moment the term cannot be proven, or
// when ctx ends), and after a lost term campaigns again once work has
// returned, after a jittered backoff. At most one work runs per Run; a work
// whose term was lost may run on until it sees its context end, so fence
// its effects (guard.Txn, the term's token). When work returns while its
// term lasts, AfterSuccess (default Return) and AfterError (default
// Recampaign) decide.
//
// When ctx ends, Run resigns, so that another replica takes over at once,
// and returns nil at most two seconds after work returns (unanswered, the
// lease expires within its TTL). Run makes its sessions, a new one after
// each one lost, and closes them.
//
// Errors: bad arguments (fencing.ErrInvalidName, fencing.ErrInvalidArgument),
// etcd refusing the name's keys (rpctypes.ErrPermissionDenied), or work's
// error under Return.
func Run(ctx context.Context, cli *clientv3.Client, name, value string,
	work func(ctx context.Context, t *Term) error, opts ...RunOption) error {
	c, sc, err := configure(runConfig{onError: Recampaign}, opts)
	if err == nil {
		err = c.validate(ctx, cli, name, work)
	}
	if err != nil {
		return fmt.Errorf("election: Run %q: %w", name, err)
	}
	r := &runner{cfg: &c, cli: cli, name: name, value: value, work: work, ttl: sc.TTL,
		log: sc.Logger.With("kind", fencing.KindElection, "name", name)}
	r.resignFailed = r.closeSession // revoking the lease is the other way to hand over
	r.stays = ctx                   // a preemption ends the term, not the replica
	r.reason = preemptedReason
	defer r.closeSession(ctx)
	return r.loop(ctx)
}

// configure applies opts over c, with the default backoff, and returns the
// session options they carry, read as NewSession reads them.
func configure(c runConfig, opts []RunOption) (runConfig, sessionlink.Settings, error) {
	c.backoffMin, c.backoffMax = 100*time.Millisecond, 5*time.Second
	for _, o := range opts {
		if o == nil {
			return c, sessionlink.Settings{}, fmt.Errorf("%w: nil option", fencing.ErrInvalidArgument)
		}
		o(&c)
	}
	sc, err := sessionlink.Read(c.session)
	return c, sc, err
}

func (c *runConfig) validate(ctx context.Context, cli *clientv3.Client, name string, work func(context.Context, *Term) error) error {
	switch {
	case cli == nil:
		return fmt.Errorf("%w: nil client", fencing.ErrInvalidArgument)
	case ctx == nil:
		return fmt.Errorf("%w: nil context", fencing.ErrInvalidArgument)
	case work == nil:
		return fmt.Errorf("%w: nil work", fencing.ErrInvalidArgument)
	case c.health == nil && c.healthSet:
		return fmt.Errorf("%w: nil health", fencing.ErrInvalidArgument)
	case c.backoffMin <= 0 || c.backoffMax < c.backoffMin:
		return fmt.Errorf("%w: backoff [%v, %v]", fencing.ErrInvalidArgument, c.backoffMin, c.backoffMax)
	}
	if err := c.checkRank(); err != nil {
		return err
	}
	return fencing.ValidateName(name)
}

type runner struct {
	cfg   *runConfig // shared by a group's runners, never written
	cli   *clientv3.Client
	name  string
	value string
	work  func(context.Context, *Term) error
	log   *slog.Logger
	ttl   time.Duration // bounds each lease grant
	s     *fencing.Session
	cand  *candidacy // on s, when the replica ranks itself
	fails int        // consecutive rounds that ended without a completed term
	// resignFailed hands a term over that Resign could not: Run closes
	// its session, RunGroup ends the session's round.
	resignFailed func(context.Context)
	// reason is why the term is resigned when ctx ended (RunGroup's
	// ErrRebalanced), as the observer is told; nil when the caller asked.
	reason func(ctx context.Context) error
	// stays, when set, lasts as long as the replica does (RunGroup's round):
	// a resign gets a leave's grace only once it ends.
	stays context.Context
	// handoff, when set, runs before every resign: a ranked Run waits for
	// the right candidate to queue next.
	handoff func(ctx context.Context, t *Term, reason error)
	// succ follows who queues right behind the term a ranked replica
	// leads, from its work's start until lead returns.
	succ *successor
}

func (r *runner) loop(ctx context.Context) error {
	for ctx.Err() == nil {
		t, err := r.campaign(ctx)
		if err != nil {
			if err = r.campaignFailed(ctx, err); err != nil {
				return underPrefix(fmt.Sprintf("election: Run %q", r.name), err)
			}
			continue
		}
		again, err := r.lead(ctx, t)
		if !again {
			return err
		}
	}
	return nil
}

// lead serves one term and decides what comes next: whether Run campaigns
// again, and what Run returns if not. A ranked replica's term also ends when
// a preferred candidate appears: then Run campaigns again at once, which
// waits until no live candidate ranks above it.
func (r *runner) lead(ctx context.Context, t *Term) (again bool, _ error) {
	if r.cand == nil {
		return r.next(ctx, r.serve(ctx, t))
	}
	defer func() {
		if r.succ != nil {
			r.succ.stop()
			r.succ = nil
		}
	}()
	pctx, done := r.cand.whilePreferred(ctx)
	res := r.serve(pctx, t)
	preempted := errors.Is(context.Cause(pctx), ErrPreempted)
	done()
	if preempted && ctx.Err() == nil {
		r.fails = 0
		return true, nil
	}
	return r.next(ctx, res)
}

// underPrefix wraps err, an error of this package, under prefix, naming the
// package once: "election: Run "x": campaign "x": permission denied".
func underPrefix(prefix string, err error) error {
	return &prefixed{text: prefix + ": " + strings.TrimPrefix(err.Error(), "election: "), err: err}
}

type prefixed struct {
	text string
	err  error
}

func (e *prefixed) Error() string { return e.text }
func (e *prefixed) Unwrap() error { return e.err }

// refused reports whether a campaign failed for a reason no retry can fix:
// a bad argument, or etcd refusing this user the name's keys (an operator
// must change a grant; a replica that idles with a log line would hide it).
func refused(err error) bool {
	return errors.Is(err, fencing.ErrInvalidArgument) || errors.Is(err, rpctypes.ErrPermissionDenied)
}

// campaign makes a session if there is none (or it ended) and campaigns.
func (r *runner) campaign(ctx context.Context) (*Term, error) {
	if r.s != nil && r.s.Err() != nil {
		r.closeSession(ctx)
	}
	if r.s == nil {
		s, err := r.cfg.newSession(ctx, r.cli, r.ttl)
		if err != nil {
			return nil, err
		}
		r.s = s
	}
	e, err := New(r.s, r.name)
	if err != nil {
		return nil, err
	}
	if !r.cfg.ranked() {
		return e.Campaign(ctx, r.value)
	}
	if r.cand == nil {
		r.cand = join(r.s, r.name, r.cfg.rank(), r.cfg.drain, r.log)
		r.handoff = r.handOff
	}
	return r.campaignRanked(ctx, e)
}

// campaignRanked waits until no live candidate ranks above this replica,
// then campaigns while that holds. A term won just as a preferred candidate
// appeared is resigned before any work starts; if that resign fails, the
// session was closed to hand over, and the error wraps ErrSessionClosed.
func (r *runner) campaignRanked(ctx context.Context, e *Election) (*Term, error) {
	e.q.Extra = &revqueue.Extra{Also: []clientv3.Op{r.cand.readRecords()}}
	defer r.cand.firstDone() // if no campaign wrote the record, follow does
	for {
		if err := r.untilPreferred(ctx); err != nil {
			return nil, err
		}
		pctx, done := r.cand.whilePreferred(ctx)
		e.q.Extra.With, e.q.Extra.Wrote = r.cand.firstWrite()
		t, err := e.Campaign(pctx, r.value)
		r.cand.firstDone()
		preempted := errors.Is(context.Cause(pctx), ErrPreempted)
		done()
		if ferr := r.cand.failed(); ferr != nil {
			if err == nil {
				r.giveWay(ctx, t, ferr)
			}
			return nil, ferr
		}
		switch {
		case err != nil && preempted && ctx.Err() == nil:
			r.log.Debug("stopped campaigning", "cause", context.Cause(pctx))
			continue
		case err != nil:
			return nil, err
		}
		also, rev := t.also, t.alsoRev
		t.also = nil
		if err := r.cand.refresh(ctx, also, rev); err != nil {
			r.giveWay(ctx, t, err)
			return nil, err
		}
		if ok, _ := r.cand.preferred(); ok {
			return t, nil
		}
		if err := r.giveWay(ctx, t, r.cand.preemption()); r.s == nil {
			// resignFailed closed the session to hand over: the candidacy
			// went with it, and Run campaigns again on a new one. The
			// resign's error is told, not wrapped: it is not the campaign's
			// (a refusal to delete must not end Run as a refused campaign).
			return nil, fmt.Errorf("election: gave way to a preferred candidate: %w: resign: %v", fencing.ErrSessionClosed, err)
		}
	}
}

// handOff waits, up to handoffWait, until the right candidate is queued
// right behind t: a preferred one when t gives way (reason set); when t
// ends for any other reason, one that no live record outranks, so that a
// lower candidate about to withdraw is not handed a term it would give up
// at once. The view is read first then: the record that outranks it may be
// newer than the view's last event (a leader stopped the moment a preferred
// record appears). Who is behind is known already for a term that ran work
// (lead follows it from the start), and found by a read and a watch for one
// resigned before.
func (r *runner) handOff(ctx context.Context, t *Term, reason error) {
	ctx, cancel := context.WithTimeout(ctx, handoffWait)
	defer cancel()
	s := r.succ
	if s == nil || s.t != t {
		s = r.cand.successor(t)
		defer s.stop()
	}
	if reason != nil {
		s.await(ctx, r.cand.preferredNext)
		return
	}
	if err := r.cand.read(ctx, nil); err != nil {
		return // resign at once rather than judge on a view that may lag
	}
	s.await(ctx, r.cand.unopposed)
}

// untilPreferred waits until no live candidate ranks above this replica,
// or ctx or the session ends.
func (r *runner) untilPreferred(ctx context.Context) error {
	for {
		if err := r.cand.failed(); err != nil {
			return err
		}
		ok, changed := r.cand.preferred()
		if ok {
			return nil
		}
		select {
		case <-changed:
		case <-ctx.Done():
			return ctx.Err()
		case <-r.s.Done():
			return r.s.Err()
		}
	}
}

// giveWay resigns a term no work ran under, with cause as the reason, and
// returns what resign reports.
func (r *runner) giveWay(ctx context.Context, t *Term, cause error) error {
	gctx, cancel := context.WithCancelCause(ctx)
	cancel(cause)
	return r.resign(gctx, t)
}

// campaignFailed returns err when no retry can help (etcd refused the
// name's keys); otherwise it says why this replica is not leading, backs off
// and returns nil.
func (r *runner) campaignFailed(ctx context.Context, err error) error {
	if refused(err) {
		return err
	}
	if ctx.Err() == nil {
		r.log.Warn("campaign failed; retrying", "err", err)
	}
	r.fails++
	r.backoff(ctx)
	return nil
}

// newSession makes a session with c's options. The lease grant gets one TTL:
// etcd that cannot grant a lease that long is unreachable, and the caller
// says so (a logged retry) instead of waiting in silence.
func (c *runConfig) newSession(ctx context.Context, cli *clientv3.Client, ttl time.Duration) (*fencing.Session, error) {
	gctx, cancel := context.WithTimeout(ctx, ttl)
	defer cancel()
	s, err := fencing.NewSession(gctx, cli, c.session...)
	if err == nil && c.onSession != nil {
		c.onSession(s)
	}
	return s, err
}

// served is how one term ended.
type served struct {
	workErr error  // what work returned
	policy  Policy // what the term's end asks for: AfterSuccess's or AfterError's
	lost    bool   // the term ended before work returned or Run's ctx ended
	cause   error  // why the term ended, as OnStoppedLeading is told
}

// serve runs work for t and ends t: it resigns unless the term was lost.
func (r *runner) serve(ctx context.Context, t *Term) served {
	r.log.Debug("leading", "token", t.Token(), "lease", fmt.Sprintf("%x", int64(t.Session().Lease())))
	if r.cfg.started != nil {
		r.cfg.started(t)
	}
	res := r.runWork(ctx, t)
	if res.lost {
		r.drop(ctx, t)
	} else {
		res.cause = r.resign(ctx, t)
	}
	level := slog.LevelDebug
	if res.lost && !errors.Is(res.cause, errResigned) { // a resign asked for is no loss
		level = slog.LevelWarn
	}
	r.log.Log(ctx, level, "stopped leading", "token", t.Token(), "cause", res.cause, "work_err", res.workErr)
	if r.cfg.stopped != nil {
		r.cfg.stopped(t, res.cause)
	}
	return res
}

// runWork runs work under a context watched for t, tracked by the health
// check, and keeps the term while the policy is KeepLeading. The watch and
// the tracking end before it returns, so before the term is resigned.
func (r *runner) runWork(ctx context.Context, t *Term) (res served) {
	// guard.Watch, knowing where the term's key was last read alive: a
	// watch that starts there arms with no read before work starts.
	wctx, stop := ownwatch.Watch(ctx, t.own.Owner())
	defer stop()
	if r.cand != nil {
		// Once the term is armed, not before: its read and watch would
		// delay the arming, and work's start with it.
		r.succ = r.cand.successor(t)
	}
	if h := r.cfg.health; h != nil {
		defer h.Track(wctx, t)() // also if work panics
	}
	res.workErr = r.work(wctx, t)
	res.policy = r.cfg.onSuccess
	if res.workErr != nil {
		res.policy = r.cfg.onError
	}
	if res.policy == KeepLeading {
		<-wctx.Done()
	}
	res.lost = wctx.Err() != nil && ctx.Err() == nil
	res.cause = context.Cause(wctx)
	return res
}

// next applies the policies to a served term: it reports whether Run
// campaigns again (after a backoff), and what Run returns if not.
func (r *runner) next(ctx context.Context, res served) (again bool, _ error) {
	switch {
	case ctx.Err() != nil:
		return false, nil
	case res.lost || res.policy == KeepLeading:
		r.fails++
	case res.policy == Return:
		return false, res.workErr
	case res.workErr != nil:
		r.fails++
	default:
		r.fails = 0
	}
	r.backoff(ctx)
	return true, nil
}

// leaveGrace bounds each request Run sends, once ctx has ended and work has
// returned, to hand over: the resign, and the revoke of its lease.
const leaveGrace = time.Second

// resign ends a term that is still valid, at once, even when ctx is done:
// the next replica must not wait for the lease to expire.
func (r *runner) resign(ctx context.Context, t *Term) error {
	// A handoff ends ctx but not the replica: the resign may take up to a
	// TTL, as long as the replica stays, not only a leave's grace.
	base := ctx
	if r.stays != nil {
		base = r.stays
	}
	rctx, cancel := lifetime.Detach(base, leaveGrace, r.s.TTL())
	defer cancel()
	var reason error
	if r.reason != nil {
		reason = r.reason(ctx)
	}
	if r.handoff != nil {
		// Half the grace at most once ctx has ended: the resign needs the rest.
		hctx, hcancel := lifetime.Detach(base, leaveGrace/2, r.s.TTL())
		r.handoff(hctx, t, reason)
		hcancel()
	}
	report, err := t.resign(rctx, reason)
	report()
	if errors.Is(err, ErrNotLeader) {
		return err // already lost: nothing is left to hand over
	}
	if err != nil {
		r.log.Warn("resign failed; the key goes by a delete in the background or with the lease", "token", t.Token(), "err", err)
		r.resignFailed(ctx)
		return err
	}
	if reason != nil {
		return fmt.Errorf("%w: %w", errResigned, reason)
	}
	return errResigned
}

// drop resigns a lost term while its session still vouches, for one
// request: a key still there (a loss seen wrongly) must not keep leading,
// and a key found gone hands its slot back to the session. A resign that
// fails is sent again in the background, for as long as the session lives:
// a loss is proven (a read or an event), so the key is almost surely gone,
// and ending the session for it (a RunGroup replica's every name) would
// cost far more than the slot it frees.
func (r *runner) drop(ctx context.Context, t *Term) {
	if r.s.Err() != nil {
		return // the session's end revokes its lease
	}
	rctx, cancel := lifetime.Detach(ctx, leaveGrace, leaveGrace)
	defer cancel()
	if err := t.Resign(rctx); err != nil && !errors.Is(err, ErrNotLeader) {
		r.log.Debug("resign of a lost term failed; sending it again in the background", "token", t.Token(), "err", err)
		t.link.Go(func() { t.Resign(t.link.Life) })
	}
}

// backoff sleeps a jittered exponential delay, or until ctx ends.
func (r *runner) backoff(ctx context.Context) {
	backoff(ctx, r.cfg.backoffMin, r.cfg.backoffMax, r.fails)
}

// backoff sleeps a jittered delay from lo, doubled for each of fails up to
// hi, or until ctx ends.
func backoff(ctx context.Context, lo, hi time.Duration, fails int) {
	d := lo << min(fails, 20)
	if d <= 0 || d > hi {
		d = hi
	}
	d = d/2 + rand.N(d/2+1) // jitter keeps replicas from campaigning in step
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
	case <-ctx.Done():
	}
}

func (r *runner) closeSession(ctx context.Context) {
	if r.s == nil {
		return
	}
	if r.cand != nil {
		r.cand.leave()
		r.cand = nil
	}
	cctx, cancel := lifetime.Detach(ctx, leaveGrace, r.s.TTL())
	defer cancel()
	r.s.Close(cctx)
	r.s = nil
}
