package fencing

import (
	"context"
	"log/slog"
	"sync/atomic"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
)

// Kind says what an ownership is.
type Kind string

const (
	KindLock     Kind = "lock"     // a Hold of a Mutex
	KindElection Kind = "election" // a term of an election (package election)
)

// Observer receives the events of a session and of every ownership made on
// it, for metrics. Any field may be nil. Callbacks run synchronously, on the
// goroutine that made or noticed the event, and must return quickly without
// calling back into the session.
//
// Each ownership reports OnAcquire once, then exactly one of OnRelease or
// OnLoss. A loss is reported when this process learns of it: the session
// ended, the owner's watched context ended (Hold.Context), or Unlock or
// Resign found the key gone.
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

// ReleaseEvent reports an ownership given up on purpose (Unlock, Resign).
type ReleaseEvent struct {
	Kind  Kind
	Token Token
	Lease clientv3.LeaseID
	Held  time.Duration // from acquisition to release
}

// LossEvent reports an ownership that ended without being given up.
type LossEvent struct {
	Kind  Kind
	Token Token
	Lease clientv3.LeaseID
	Held  time.Duration // from acquisition to the loss being noticed
	// Cause wraps ErrLeaseExpired, ErrLeaseUnconfirmed, ErrSessionClosed
	// or guard.ErrOwnerKeyGone.
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
	// Margin is how long the session can still vouch for its lease without
	// another renewal: ValidUntil minus now, after this attempt.
	Margin time.Duration
	// Err is why the attempt failed (it is retried); nil on success.
	Err error
}

// RejectEvent reports a write refused for a stale or lost ownership: a
// guarded txn whose ownership compare failed (Cause wraps guard.ErrNotOwner)
// or a token a Gate refused (Cause wraps ErrStaleToken).
type RejectEvent struct {
	Token Token
	Cause error
}

// WithObserver makes the session, and every lock and election on it, report
// to o. Unset: nothing is reported.
func WithObserver(o Observer) SessionOption {
	return func(c *sessionConfig) { c.observer = o }
}

// Observer returns the observer the session reports to (the zero Observer
// when none was set), so that packages built on sessions can report too.
func (s *Session) Observer() Observer { return s.obs }

// Tenure is one ownership being reported: acquired, then released or lost,
// exactly once. Mutex makes one per Hold; package election one per term.
type Tenure struct {
	s     *Session
	kind  Kind
	token Token
	start time.Time
	ended atomic.Bool
	stop  func() bool // stops the report of the session's end
}

// Track reports an ownership of kind with token t, acquired after waiting
// wait, to the session's observer and logger, and reports its loss if the
// session ends first. End it with Release or Lose.
func (s *Session) Track(kind Kind, t Token, wait time.Duration) *Tenure {
	tn := &Tenure{s: s, kind: kind, token: t, start: time.Now()}
	s.log.Debug("acquired", "kind", kind, "name", t.Name, "token", t, "wait", wait)
	if f := s.obs.OnAcquire; f != nil {
		f(AcquireEvent{Kind: kind, Token: t, Lease: s.id, Wait: wait})
	}
	tn.stop = context.AfterFunc(s.ctx, func() {
		// May run before Track returns (a session already ended): not stop.
		if tn.ended.CompareAndSwap(false, true) {
			tn.lost(context.Cause(s.ctx))
		}
	})
	return tn
}

// Release reports the ownership given up, unless its end was reported.
func (tn *Tenure) Release() {
	if !tn.ended.CompareAndSwap(false, true) {
		return
	}
	tn.stop()
	held := time.Since(tn.start)
	tn.s.log.Debug("released", "kind", tn.kind, "name", tn.token.Name, "token", tn.token, "held", held)
	if f := tn.s.obs.OnRelease; f != nil {
		f(ReleaseEvent{Kind: tn.kind, Token: tn.token, Lease: tn.s.id, Held: held})
	}
}

// Watch reports the ownership lost when ctx, a context that ends when the
// ownership can no longer be proven, ends with a cause other than released.
func (tn *Tenure) Watch(ctx context.Context, released error) {
	context.AfterFunc(ctx, func() {
		if c := context.Cause(ctx); c != released {
			tn.Lose(c)
		}
	})
}

// Lose reports the ownership lost with cause, unless its end was reported.
func (tn *Tenure) Lose(cause error) {
	if !tn.ended.CompareAndSwap(false, true) {
		return
	}
	tn.stop()
	tn.lost(cause)
}

func (tn *Tenure) lost(cause error) {
	held, early := time.Since(tn.start), tn.s.early()
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
	if f == nil {
		return
	}
	now := time.Now()
	f(RenewEvent{Lease: s.id, RoundTrip: now.Sub(sent), Margin: s.ValidUntil().Sub(now), Err: err})
}
