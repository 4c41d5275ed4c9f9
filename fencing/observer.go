package fencing

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/leasehold/leasehold/internal/ownwatch"
	"github.com/leasehold/leasehold/internal/sessionlink"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// Observer receives the events of a session and of every ownership made on
// it, for metrics. Any field may be nil. Callbacks run on the goroutine that
// made or noticed the event, so several may run at once; they must return
// quickly. None runs while the library holds a lock of its own, so a
// callback may call any method of the session or the ownership it reports.
//
// Each ownership reports OnAcquire once, then exactly one of OnRelease
// (Unlock, Resign, or the session closed) or OnLoss. A loss is reported when
// this process learns of it: the session ended, the owner's watched context
// ended (Hold.Context, Term.Context, Run), a guarded txn found the owner's key
// gone, or Unlock or Resign did.
type Observer struct {
	OnAcquire func(AcquireEvent)
	OnRelease func(ReleaseEvent)
	OnLoss    func(LossEvent)
	OnRenew   func(RenewEvent)
	OnReject  func(RejectEvent)
}

// AcquireEvent reports a won Lock or Campaign.
type AcquireEvent struct {
	Kind  Kind
	Token Token
	Lease clientv3.LeaseID
	Wait  time.Duration // from the call to ownership
}

// ReleaseEvent reports an ownership given up on purpose: Unlock, Resign, or
// the session closed.
type ReleaseEvent struct {
	Kind  Kind
	Token Token
	Lease clientv3.LeaseID
	Held  time.Duration // from acquisition to release
	// Reason is why the library gave the ownership up on its own:
	// election.ErrRebalanced when election.RunGroup handed the name to
	// another replica. Nil when the caller asked (Unlock, Resign, Close).
	Reason error
}

// LossEvent reports an ownership that ended without being given up.
type LossEvent struct {
	Kind  Kind
	Token Token
	Lease clientv3.LeaseID
	Held  time.Duration // from acquisition to the loss being noticed
	// Cause wraps ErrLeaseExpired, ErrLeaseUnconfirmed, ErrSessionClosed
	// or ErrKeyDeleted.
	Cause error
	// Early is how long before the session's ValidUntil the loss was
	// noticed: well above zero when etcd told (a revoked lease, a deleted
	// key), about zero when ValidUntil passed without a renewal.
	Early time.Duration
}

// RenewEvent reports one lease renewal attempt.
type RenewEvent struct {
	Lease     clientv3.LeaseID
	RoundTrip time.Duration
	// Left is how long the session can still vouch for its lease without
	// another renewal: ValidUntil minus now, after this attempt.
	Left time.Duration
	// Err is why the attempt failed (it is retried); nil on success.
	Err error
}

// RejectEvent reports a write refused for a stale or lost ownership: a
// guarded txn whose ownership compare failed (Cause wraps guard.ErrNotOwner)
// or a token a gate.Gate (fencing/gate) refused (Cause wraps ErrStaleToken).
type RejectEvent struct {
	Token Token
	Cause error
}

// WithObserver makes the session, and every lock and election on it, report
// to o. Unset: nothing is reported.
func WithObserver(o Observer) SessionOption {
	return func(c *sessionConfig) { c.Observer = o }
}

func (o Observer) any() bool {
	return o.OnAcquire != nil || o.OnRelease != nil || o.OnLoss != nil || o.OnRenew != nil || o.OnReject != nil
}

// reject reports a write refused because the ownership of name at rev was
// lost.
func (s *Session) reject(name string, rev int64, cause error) {
	if f := s.obs.OnReject; f != nil {
		f(RejectEvent{Token: Token{Name: name, Revision: rev, Cluster: s.cluster}, Cause: cause})
	}
}

// tenure is one ownership being reported: acquired, then released or lost,
// exactly once. Mutex makes one per Hold; package election one per term.
type tenure struct {
	s     *Session
	kind  Kind
	token Token
	start time.Time
	ended atomic.Bool

	mu         sync.Mutex  // held by Track until both are set
	stop       func() bool // stops the report of the session's end
	unregister func()      // stops the reports of losses proven by watches and txns
}

// nobody is the tenure of an ownership nobody listens to.
type nobody struct{}

func (nobody) Release(error) {}
func (nobody) Lose(error)    {}

// track reports an ownership of kind with token t and key key, acquired after
// waiting wait, to the session's observer and logger. It then reports the
// ownership's end when the session ends (closing it is a release, any other
// end a loss) or when a watch or a guarded txn on the session proves key
// gone, unless Release or Lose reported it first. With no observer and no
// logger that would print a loss, it does nothing.
func (s *Session) track(kind Kind, t Token, key string, wait time.Duration) sessionlink.Tenure {
	if !s.obs.any() && !s.log.Enabled(context.Background(), slog.LevelWarn) {
		return nobody{} // nobody to tell: a Lock pays for no report
	}
	tn := &tenure{s: s, kind: kind, token: t, start: time.Now()}
	if s.log.Enabled(context.Background(), slog.LevelDebug) { // spares every Lock the boxing of the attributes
		s.log.Debug("acquired", "kind", kind, "name", t.Name, "token", t, "wait", wait)
	}
	if f := s.obs.OnAcquire; f != nil {
		f(AcquireEvent{Kind: kind, Token: t, Lease: s.id, Wait: wait})
	}
	tn.mu.Lock()
	defer tn.mu.Unlock()
	tn.unregister = s.link.Owners.Register(key, t.Revision, func(cause error) {
		if errors.Is(cause, ownwatch.ErrKeyDeleted) { // not Unlock's own notice
			tn.Lose(cause)
		}
	})
	// Runs in its own goroutine, which waits for mu if the session has
	// already ended.
	tn.stop = context.AfterFunc(s.ctx, func() { tn.Lose(context.Cause(s.ctx)) })
	return tn
}

// Release reports the ownership given up, for reason (nil: the caller
// asked), unless its end was reported.
func (tn *tenure) Release(reason error) { tn.end(nil, reason) }

// Lose reports the ownership lost with cause, unless its end was reported. A
// cause wrapping ErrSessionClosed is reported as a release: the session was
// closed on purpose, which gives up its ownerships.
func (tn *tenure) Lose(cause error) { tn.end(cause, nil) }

func (tn *tenure) end(cause, reason error) {
	if !tn.ended.CompareAndSwap(false, true) {
		return
	}
	tn.mu.Lock()
	tn.stop()
	tn.unregister()
	tn.mu.Unlock()
	held := time.Since(tn.start)
	if cause == nil || errors.Is(cause, ErrSessionClosed) {
		if tn.s.log.Enabled(context.Background(), slog.LevelDebug) {
			tn.s.log.Debug("released", "kind", tn.kind, "name", tn.token.Name, "token", tn.token, "held", held, "reason", reason)
		}
		if f := tn.s.obs.OnRelease; f != nil {
			f(ReleaseEvent{Kind: tn.kind, Token: tn.token, Lease: tn.s.id, Held: held, Reason: reason})
		}
		return
	}
	early := tn.s.early()
	tn.s.log.Warn("lost", "kind", tn.kind, "name", tn.token.Name, "token", tn.token, "held", held,
		"cause", cause, slog.Duration("early", early))
	if f := tn.s.obs.OnLoss; f != nil {
		f(LossEvent{Kind: tn.kind, Token: tn.token, Lease: tn.s.id, Held: held, Cause: cause, Early: early})
	}
}

// early returns how long before ValidUntil a loss noticed now is: for a
// session that already ended, how long before ValidUntil it ended.
func (s *Session) early() time.Duration {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.err != nil {
		return s.endedEarly
	}
	return time.Until(s.validUntil)
}

// reportRenewal tells the observer about one renewal attempt sent at sent.
func (s *Session) reportRenewal(sent time.Time, err error) {
	f := s.obs.OnRenew
	if f == nil || s.ctx.Err() != nil {
		return // an attempt cut short by the session's end is no renewal failure
	}
	now := time.Now()
	f(RenewEvent{Lease: s.id, RoundTrip: now.Sub(sent), Left: s.ValidUntil().Sub(now), Err: err})
}
