package fencing

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/leasehold/leasehold/internal/admit"
	"github.com/leasehold/leasehold/internal/keyspace"
	"github.com/leasehold/leasehold/internal/ownwatch"
	"github.com/leasehold/leasehold/internal/retry"
	"github.com/leasehold/leasehold/internal/revqueue"
	"github.com/leasehold/leasehold/internal/sessionlink"
	"go.etcd.io/etcd/api/v3/mvccpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// Session is one etcd lease, kept alive, shared by any number of holds. It
// vouches for its lease until ValidUntil, a deadline computed so that it
// passes before the server can expire the lease; when it passes without a
// renewal, or the lease is reported gone, or the session is closed, Done
// closes and every hold on the session is lost. A session never recovers:
// create a new one.
//
// A Session is safe for concurrent use.
type Session struct {
	cli      *clientv3.Client
	id       clientv3.LeaseID
	cluster  uint64        // ID of the etcd cluster that granted the lease
	ttl      time.Duration // granted by the server
	margin   time.Duration
	period   time.Duration // between renewals
	identity string
	log      *slog.Logger
	obs      Observer

	ctx    context.Context // ends, with the cause, when done closes
	cancel context.CancelCauseFunc
	link   *sessionlink.Link // what guard, election and revqueue need of s

	closingCtx context.Context // ends when Close is called: stops a revoke after loss
	closing    context.CancelFunc
	wg         sync.WaitGroup // background goroutines, waited for by Close

	mu         sync.Mutex
	validUntil time.Time     // guarded by mu; only grows while the session lives
	expiry     *time.Timer   // guarded by mu; fires at validUntil
	err        error         // guarded by mu; nil until done closes
	endedEarly time.Duration // guarded by mu: how long before validUntil done closed
	leaseGone  bool          // guarded by mu: the server said the lease is gone, or a revoke returned
	revoking   chan struct{} // guarded by mu: closed once the revoke sent at an unconfirmed end returns
	done       chan struct{}
}

// NewSession grants a lease and keeps it alive until Close or until it is
// lost. It returns ErrInvalidArgument for a nil or closed client or a bad
// option, and ctx's error if ctx ends first, naming the endpoints and why
// they did not answer. A grant whose reply was lost leaves its lease on the
// server until it expires, one TTL later; no other failure leaves a lease.
func NewSession(ctx context.Context, cli *clientv3.Client, opts ...SessionOption) (*Session, error) {
	if ctx == nil {
		return nil, fmt.Errorf("fencing: NewSession: %w", errNilContext)
	}
	if cli == nil {
		return nil, fmt.Errorf("fencing: NewSession: %w: nil client", ErrInvalidArgument)
	}
	if cli.Ctx().Err() != nil {
		return nil, fmt.Errorf("fencing: NewSession: %w: client is closed", ErrInvalidArgument)
	}
	cfg, err := newSessionConfig(opts)
	if err != nil {
		return nil, fmt.Errorf("fencing: NewSession: %w", err)
	}
	sent := time.Now()
	g, err := cli.Grant(ctx, int64(cfg.TTL/time.Second))
	if err != nil {
		return nil, fmt.Errorf("fencing: NewSession: grant lease: %w", unreachable(ctx, cli, err))
	}
	s := &Session{
		cli:        cli,
		id:         g.ID,
		cluster:    g.ResponseHeader.GetClusterId(),
		ttl:        time.Duration(g.TTL) * time.Second,
		margin:     cfg.Margin,
		identity:   cfg.Identity,
		obs:        cfg.Observer,
		log:        cfg.Logger.With("lease", fmt.Sprintf("%x", int64(g.ID))),
		validUntil: sent.Add(time.Duration(g.TTL)*time.Second - cfg.Margin),
		done:       make(chan struct{}),
	}
	s.period = s.ttl / 3
	s.ctx, s.cancel = context.WithCancelCause(context.Background())
	s.link = s.newLink(cfg)
	s.link.Latency.Observe(time.Since(sent)) // the grant's round trip
	s.closingCtx, s.closing = context.WithCancel(context.Background())
	s.expiry = time.AfterFunc(time.Until(s.validUntil), s.checkExpiry)
	s.wg.Go(s.keepAlive)
	s.log.Debug("session started", "ttl", s.ttl, "margin", s.margin)
	return s, nil
}

// newLink returns what the library's packages need of s, whose lease and
// context are set.
func (s *Session) newLink(cfg sessionConfig) *sessionlink.Link {
	lat := &retry.Latency{Places: admit.New(cfg.InFlight)}
	l := &sessionlink.Link{
		Session: revqueue.Session{Client: s.cli, Lease: s.id, TTL: s.ttl, KeyStem: keyspace.Stem(int64(s.id)),
			Life: s.ctx, Go: s.background, Latency: lat, Keys: new(revqueue.KeyPool), Sweeps: new(revqueue.Sweeps)},
		Root: cfg.Root, Identity: cfg.Identity, Cluster: s.cluster,
		Owners: new(ownwatch.Registry), Expired: ErrLeaseExpired,
		Track: func(kind, name string, rev int64, key string, wait time.Duration) sessionlink.Tenure {
			return s.track(Kind(kind), Token{Name: name, Revision: rev, Cluster: s.cluster}, key, wait)
		},
		Reject:       s.reject,
		AcquireError: func(err error) error { return acquireError(s, err) },
	}
	l.Watches = ownwatch.NewMux(s.cli, s.ctx, s.background)
	return l
}

// hold runs acquire, one call's acquire of the queue of kind and name on s,
// and returns the hold of its key; op names the call in errors.
func (s *Session) hold(ctx context.Context, op string, kind Kind, name string,
	acquire func(context.Context, *revqueue.Session, string) (*revqueue.Entry, error)) (*Hold, error) {
	start := time.Now()
	e, err := acquire(ctx, &s.link.Session, s.identity)
	if err != nil {
		return nil, fmt.Errorf("fencing: %s %q: %w", op, name, acquireError(s, err))
	}
	return newHold(s, kind, name, e, start), nil
}

// tryHold is hold for a try, which either owns at once or writes nothing
// and names an owner (ErrLocked).
func (s *Session) tryHold(ctx context.Context, op string, kind Kind, name string,
	try func(context.Context, *revqueue.Session, string) (*revqueue.Entry, *mvccpb.KeyValue, error)) (*Hold, error) {
	start := time.Now()
	e, owner, err := try(ctx, &s.link.Session, s.identity)
	switch {
	case err != nil:
		return nil, fmt.Errorf("fencing: %s %q: %w", op, name, acquireError(s, err))
	case e == nil && owner == nil:
		return nil, fmt.Errorf("fencing: %s %q: %w: taken by others as it tried", op, name, ErrLocked)
	case e == nil:
		return nil, fmt.Errorf("fencing: %s %q: %w by %q (token %v)", op, name, ErrLocked, owner.Value,
			Token{Name: name, Revision: owner.CreateRevision, Cluster: s.cluster})
	}
	return newHold(s, kind, name, e, start), nil
}

// acquireError maps why an acquire on s failed to this package's sentinels:
// ErrSessionExpired (wrapping the session's cause, or ErrLeaseExpired when
// the server found the lease gone first); other errors
// (ErrKeyDeleted, ctx's, the client's) pass through. Package election reaches it
// through the session's Link (sessionlink.Of).
func acquireError(s *Session, err error) error {
	switch {
	case errors.Is(err, revqueue.ErrLost):
		err = fmt.Errorf("%w: %w", ErrSessionExpired, s.Err())
	case errors.Is(err, revqueue.ErrLeaseGone):
		// The server says so before the session's next renewal does: the
		// same cause, whichever learns first.
		err = fmt.Errorf("%w: %w: lease %x not found on the server", ErrSessionExpired, ErrLeaseExpired, int64(s.id))
	}
	return err
}

// Lease returns the session's lease. Every key the session writes is
// attached to it.
func (s *Session) Lease() clientv3.LeaseID { return s.id }

// Cluster returns the ID of the etcd cluster that granted the session's
// lease: the Cluster of every token the session's holds and terms carry.
func (s *Session) Cluster() uint64 { return s.cluster }

// Client returns the client the session was created with.
func (s *Session) Client() *clientv3.Client { return s.cli }

// TTL returns the lease TTL the server granted.
func (s *Session) TTL() time.Duration { return s.ttl }

// ValidUntil is the last moment this process can prove its lease alive: the
// send time of the last acknowledged keepalive (or of the grant), plus the
// TTL the server granted, minus the safety margin. The server cannot expire
// the lease before it, since it counts the TTL from receiving the request.
// A timer closes Done at ValidUntil; the margin covers the timer's latency.
// After Done closes, ValidUntil is in the past.
//
// It cannot stop a process that pauses across it: code that resumes first
// may act before the timer runs. Only guarded and fenced writes cover a
// pause longer than the margin.
func (s *Session) ValidUntil() time.Time {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.validUntil
}

// Done returns a channel closed when the session stops vouching for its
// lease: lease expired or revoked, not renewed before ValidUntil, or session
// or client closed. It is never closed for any other reason.
func (s *Session) Done() <-chan struct{} { return s.done }

// Context returns a context that ends when Done closes, with Err as its
// cause (context.Cause). Work derived from it stops when the session stops
// vouching, even while it is blocked in a call to etcd.
func (s *Session) Context() context.Context { return s.ctx }

// Err returns nil while Done is open, then why it closed: an error wrapping
// ErrLeaseExpired, ErrLeaseUnconfirmed or ErrSessionClosed. The first cause
// wins; later ones never replace it.
func (s *Session) Err() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.err
}

// Close ends the session: it closes Done first, so holds stop vouching
// before anything is sent, then stops renewing and revokes the lease, which
// releases every hold of the session at once. It returns within the earlier
// of ctx's deadline and one TTL; if the revoke cannot be sent (a partition),
// or the client is already closed, the lease expires on its own within one
// TTL. It sends no revoke for a lease the server has said is gone (a revoke
// that returned, or a renewal that found it expired): closing a closed
// session then returns nil at once.
//
// The session owns the cleanup that outlives the calls made on it (removing
// the key of a Lock that failed while etcd was unreachable): Close ends it
// and waits for it, within the same bound, so no goroutine of the session
// outlives Close.
func (s *Session) Close(ctx context.Context) error {
	if err := s.usable(ctx); err != nil {
		return fmt.Errorf("fencing: close session: %w", err)
	}
	s.lose(ErrSessionClosed)
	defer s.wg.Wait()
	s.mu.Lock()
	revoking := s.revoking
	s.mu.Unlock()
	if revoking != nil { // the revoke of an unconfirmed end: its answer decides
		select {
		case <-revoking:
		case <-ctx.Done():
		}
	}
	defer s.closing() // a background revoke is redundant now
	if s.isLeaseGone() || s.cli.Ctx().Err() != nil {
		// A revoke of a lease known gone only makes clientv3 log etcd's
		// refusal; with the client closed nothing can be sent, and the
		// lease expires within one TTL.
		return nil
	}
	rctx, cancel := context.WithTimeout(ctx, s.ttl)
	defer cancel()
	_, err := s.cli.Revoke(rctx, s.id)
	if err != nil && !errors.Is(err, rpctypes.ErrLeaseNotFound) {
		return fmt.Errorf("fencing: close session: revoke lease %x: %w", int64(s.id), err)
	}
	s.setLeaseGone()
	return nil
}

func (s *Session) isLeaseGone() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.leaseGone
}

func (s *Session) setLeaseGone() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.leaseGone = true
}

// lose ends the session with cause, unless it already ended.
func (s *Session) lose(cause error) {
	if !s.end(cause) {
		return
	}
	// Logged without s.mu: the handler is the caller's code, and may call
	// back into the session.
	if errors.Is(cause, ErrSessionClosed) {
		s.log.Debug("session closed", "cause", cause)
	} else {
		s.log.Warn("session lost", "cause", cause)
	}
}

// end records cause and closes done, unless the session already ended.
func (s *Session) end(cause error) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.err != nil {
		return false
	}
	s.err = cause
	now := time.Now()
	s.endedEarly = s.validUntil.Sub(now)
	if now.Before(s.validUntil) {
		s.validUntil = now
	}
	s.expiry.Stop()
	close(s.done)
	s.cancel(cause)
	if errors.Is(cause, ErrLeaseUnconfirmed) {
		// The lease may still be alive on the server (a pause, a short
		// partition): revoke it, so the next owner need not wait for it to
		// expire. Bounded by one TTL, after which it has expired anyway.
		s.revoking = make(chan struct{})
		s.wg.Go(func() {
			defer close(s.revoking)
			ctx, cancel := context.WithTimeout(s.closingCtx, s.ttl)
			defer cancel()
			if _, err := s.cli.Revoke(ctx, s.id); err == nil || errors.Is(err, rpctypes.ErrLeaseNotFound) {
				s.setLeaseGone() // Close need not send another
			}
		})
	}
	return true
}

// background runs f in a goroutine that Close waits for, unless the session
// has ended: s.mu orders every Add before the Wait in Close, which ends the
// session first.
func (s *Session) background(f func()) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.err != nil {
		return false
	}
	s.wg.Go(f)
	return true
}

// checkExpiry runs when the expiry timer fires. A renewal may have moved
// validUntil meanwhile: only a deadline that really passed ends the session.
func (s *Session) checkExpiry() {
	s.mu.Lock()
	until := s.validUntil
	s.mu.Unlock()
	if time.Now().Before(until) {
		return
	}
	s.lose(fmt.Errorf("%w: ValidUntil %s passed without a renewal", ErrLeaseUnconfirmed, until.Format("15:04:05.000")))
}

// renewed extends validUntil after a renewal sent at sent was acknowledged
// with ttl. A reply that arrives after validUntil passed cannot revive the
// session: its holds may already have been given up.
func (s *Session) renewed(sent time.Time, ttl time.Duration) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.err != nil || !time.Now().Before(s.validUntil) {
		return false
	}
	if until := sent.Add(ttl - s.margin); until.After(s.validUntil) {
		s.validUntil = until
		s.expiry.Reset(time.Until(until))
	}
	return true
}

// keepAlive renews the lease every period. Each renewal is one request and
// its answer, with its send time taken before the request: clientv3's
// KeepAlive channel does not say when the acknowledged request was sent.
func (s *Session) keepAlive() {
	r := newRenewer(s.cli, s.id)
	defer r.close()
	wait := s.period
	for {
		select {
		case <-s.ctx.Done():
			return
		case <-s.cli.Ctx().Done():
			s.lose(errClientClosed)
			return
		case <-time.After(wait):
		}
		// The send time is the request's, taken after opening a stream (a
		// token can take long): it counts for ValidUntil and the latency. A
		// failure is reported from the renewal's start.
		start := time.Now()
		ttl, sent, err := r.renew(s.ctx, s.period, time.Until(s.ValidUntil()))
		if err != nil {
			sent = start
		}
		switch {
		case err == nil:
			s.link.Latency.Observe(time.Since(sent))
			if s.renewed(sent, time.Duration(ttl)*time.Second) {
				s.reportRenewal(sent, nil)
			}
			wait = s.period - time.Since(sent)
		case errors.Is(err, rpctypes.ErrLeaseNotFound):
			s.setLeaseGone()
			s.reportRenewal(sent, err)
			s.lose(fmt.Errorf("%w: lease %x not found on renewal", ErrLeaseExpired, int64(s.id)))
			return
		default:
			// Retry soon: ValidUntil leaves TTL-margin-period for retries.
			s.log.Debug("lease renewal failed", "err", err)
			s.reportRenewal(sent, err)
			wait = s.period / 4
		}
	}
}

// usable returns ErrInvalidArgument for a nil ctx, or a session that
// NewSession did not make.
func (s *Session) usable(ctx context.Context) error {
	switch {
	case ctx == nil:
		return errNilContext
	case s == nil || s.link == nil:
		return fmt.Errorf("%w: session not made by NewSession", ErrInvalidArgument)
	}
	return nil
}
