package election

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"

	"github.com/leasehold/leasehold/fencing"
	"github.com/leasehold/leasehold/guard"
	"github.com/leasehold/leasehold/internal/lifetime"
	"github.com/leasehold/leasehold/internal/ownership"
	"github.com/leasehold/leasehold/internal/retry"
	"github.com/leasehold/leasehold/internal/sessionlink"
	"go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// Term is one won campaign: one key in etcd, the oldest of its election. It
// implements guard.Owner and is safe for concurrent use.
type Term struct {
	s     *fencing.Session  // set by Campaign, never changed: read without locking
	link  *sessionlink.Link // s's, for the library's own use
	token fencing.Token
	own   *ownership.Ownership // the key, its contexts and its release; its Lock serialises Proclaim and Resign

	value  atomic.Pointer[string] // the last value written: read without the lock, which Proclaim holds over a request
	modRev int64                  // guarded by own's Lock: the key's last write this term knows of

	// The results of the Election's queue's Also, read with the win at
	// alsoRev: for Run's ranked campaign, which takes them at once.
	also    []*etcdserverpb.ResponseOp
	alsoRev int64
}

// errResigned is the cause of a term's contexts after Resign.
var errResigned = fmt.Errorf("%w: resigned", ErrNotLeader)

// Token returns the term's fencing token: greater than every earlier term's.
func (t *Term) Token() fencing.Token { return t.token }

// Key returns the term's etcd key. No other live term has it: the session
// may reuse it for a later Campaign on the same election once this term's
// Resign has deleted it, and the token tells the two apart.
func (t *Term) Key() string { return t.own.Key }

// Session returns the session whose lease the term's key is attached to.
func (t *Term) Session() *fencing.Session { return t.s }

// Value returns the value campaigned with, or the last one proclaimed. It
// never waits, not even for a Proclaim in flight.
func (t *Term) Value() string {
	if v := t.value.Load(); v != nil {
		return *v
	}
	return ""
}

// Proclaim changes the leader's value, as observers see it, only while the
// term lasts, in one guarded txn; it returns by ctx's deadline. Failures that
// pass (a lost reply, a leader change) are retried until ctx ends: the same
// guarded put twice is harmless. It returns an error wrapping ErrNotLeader
// (and guard.ErrNotOwner) when the term was already lost or resigned; after
// any other error (ctx ended first, etcd refused) the value may or may not
// have changed, and Proclaim may be called again. On a closed client it
// returns at once, wrapping ErrNotLeader and the session's Err, as Resign.
func (t *Term) Proclaim(ctx context.Context, value string) error {
	if err := t.usable(ctx); err != nil {
		return fmt.Errorf("election: proclaim: %w", err)
	}
	lost, err := t.proclaim(ctx, value)
	if lost != nil { // reported with no lock held: the observer is user code
		t.own.Lost(lost)
		t.own.Reject(t.token.Name, err)
	}
	return err
}

// proclaim writes value while the term lasts. When the ownership compare
// failed, it returns the loss to report.
func (t *Term) proclaim(ctx context.Context, value string) (lost, _ error) {
	t.own.Lock()
	defer t.own.Unlock()
	if t.own.Released() {
		return nil, fmt.Errorf("election: proclaim %v: %w: resigned", t.token, ErrNotLeader)
	}
	var lostAt int64 // revision of a read that found the term lost
	var unsure bool
	err := retry.Do(ctx, t.link.Client, t.link.Latency, &unsure, func(ctx context.Context) (err error) {
		lostAt, err = t.put(ctx, value)
		return err
	})
	switch {
	case errors.Is(err, retry.ErrClientClosed):
		return nil, fmt.Errorf("election: proclaim %v: %w: %w", t.token, ErrNotLeader, endCause(t.s))
	case err != nil:
		return nil, fmt.Errorf("election: proclaim %v: %w", t.token, err)
	}
	if lostAt != 0 {
		return fmt.Errorf("%w: proclaim failed its ownership compare at revision %d", fencing.ErrKeyDeleted, lostAt),
			fmt.Errorf("election: proclaim %v at revision %d: %w: %w", t.token, lostAt, ErrNotLeader, guard.ErrNotOwner)
	}
	t.value.Store(&value)
	return nil, nil
}

// put writes value over the key's last known write, in one guarded txn. The
// compare on that write's revision keeps an attempt of an earlier Proclaim,
// given up and applied late, from undoing a later one: it finds the key
// written since, and writes nothing. When the compare fails, put reads the
// key: gone or replaced, the term is lost (it returns the revision of that
// read); holding value, a lost attempt of this call landed; otherwise it
// writes again over what it found. Called with t.own locked.
func (t *Term) put(ctx context.Context, value string) (lostAt int64, _ error) {
	key := t.own.Key
	for {
		resp, err := t.s.Client().Txn(ctx).
			If(t.own.IsOwner(), clientv3.Compare(clientv3.ModRevision(key), "=", t.modRev)).
			Then(clientv3.OpPut(key, value, clientv3.WithLease(t.s.Lease()))).
			Else(clientv3.OpGet(key)).Commit()
		if err != nil {
			return 0, err
		}
		if resp.Succeeded {
			t.modRev = resp.Header.Revision
			return 0, nil
		}
		var kv *mvccpb.KeyValue
		if len(resp.Responses) > 0 {
			if kvs := resp.Responses[0].GetResponseRange().Kvs; len(kvs) > 0 {
				kv = kvs[0]
			}
		}
		if kv == nil || kv.CreateRevision != t.token.Revision {
			return resp.Header.Revision, nil
		}
		t.modRev = kv.ModRevision
		if string(kv.Value) == value {
			return 0, nil
		}
	}
}

// usable returns fencing.ErrInvalidArgument for a nil ctx, or a term
// Campaign did not make.
func (t *Term) usable(ctx context.Context) error {
	switch {
	case ctx == nil:
		return fmt.Errorf("%w: nil context", fencing.ErrInvalidArgument)
	case t == nil || t.link == nil:
		return fmt.Errorf("%w: term not made by Campaign", fencing.ErrInvalidArgument)
	}
	return nil
}

// Resign ends the term: it ends the term's contexts (Context, and every
// guard.Watch of it) with ErrNotLeader as their cause, so that work stops
// before the key goes, then deletes the key, which hands leadership to the
// next candidate at once. ctx may be the term's own context; failures that
// pass are retried until ctx ends. It returns by ctx's deadline.
//
// It returns an error wrapping ErrNotLeader if the term was already lost or
// resigned (a key still there on an ended session is deleted all the same),
// or, at once, if the client is closed (the key goes with the lease). If ctx
// ends before etcd answers, it returns ctx's error and the session goes on
// deleting the key until it is gone or the session ends; meanwhile the key
// leads and guarded writes still commit. After any other error (etcd
// refused) call Resign again, or close the session.
func (t *Term) Resign(ctx context.Context) error {
	if err := t.usable(ctx); err != nil {
		return fmt.Errorf("election: resign: %w", err)
	}
	report, err := t.resign(ctx, nil)
	report() // the observer and logger run with no lock held
	return err
}

// resign is Resign; reason, when not nil, is why the library resigns on its
// own (ErrRebalanced), as the observer is told.
func (t *Term) resign(ctx context.Context, reason error) (report func(), _ error) {
	outcome, rev, err := t.own.Release(ctx)
	closed := errors.Is(err, retry.ErrClientClosed) // the key goes with the lease
	switch {
	case closed:
	case err != nil:
		return func() {}, fmt.Errorf("election: resign %v: %w", t.token, err)
	case outcome == ownership.Done:
		return func() {}, fmt.Errorf("election: resign %v: %w: already resigned", t.token, ErrNotLeader)
	case outcome == ownership.Gone: // deleting nothing proves the term already lost
		err := fmt.Errorf("election: resign %v at revision %d: %w: %w", t.token, rev, ErrNotLeader, guard.ErrNotOwner)
		return func() {
			t.own.ReportLoss(fmt.Errorf("%w: %q found gone by Resign", fencing.ErrKeyDeleted, t.own.Key))
			t.own.Reject(t.token.Name, err)
		}, err
	}
	if closed || t.s.Err() != nil {
		// The key was still there, but the session had stopped vouching
		// for it (or the client's close is ending it): the term had ended.
		err := endCause(t.s)
		return func() { t.own.ReportLoss(err) }, fmt.Errorf("election: resign %v: %w: %w", t.token, ErrNotLeader, err)
	}
	return func() { t.own.ReportRelease(reason) }, nil
}

// Context returns a context that ends as soon as the term can no longer be
// proven, with the cause (context.Cause): fencing.ErrKeyDeleted (the key
// deleted or replaced), the session's Err (lease expired or revoked,
// ValidUntil passed without a renewal, session closed), or ErrNotLeader once
// Resign was called. Every call returns the same context.
//
// Context never blocks. Its first call starts a watch of the key, which
// sees a deletion within one round trip once armed; until then the context
// still ends with the session, by ValidUntil at the latest. guard.Watch
// returns only once its watch is armed.
func (t *Term) Context() context.Context {
	if t == nil || t.link == nil {
		return lifetime.Ended(fmt.Errorf("election: %w: term not made by Campaign", fencing.ErrInvalidArgument))
	}
	return t.own.Context()
}

// endCause is s's Err, or the client's close that is ending s: a call that
// found the client closed may return before the session notices.
func endCause(s *fencing.Session) error {
	if err := s.Err(); err != nil {
		return err
	}
	return fmt.Errorf("%w: client closed", fencing.ErrSessionClosed)
}
