package fencing

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/leasehold/leasehold/internal/lifetime"
	"github.com/leasehold/leasehold/internal/ownership"
	"github.com/leasehold/leasehold/internal/retry"
	"github.com/leasehold/leasehold/internal/revqueue"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// Hold is one acquired ownership of a lock: one key in etcd, created by one
// call of Mutex.Lock, Semaphore.Acquire (a permit) or RWMutex.Lock or RLock.
// It is safe for concurrent use.
//
// Context gives a context that ends when ownership can no longer be proven;
// guard.Txn (or IsOwner in your own txns) makes writes that commit only while
// the hold owns the lock.
type Hold struct {
	s     *Session // set at creation, never changed: read without locking
	token Token
	own   *ownership.Ownership // the key, its contexts and its release
}

// errReleased is the cause of a hold's contexts after Unlock; made once, as
// Unlock is on every lock's path.
var errReleased = fmt.Errorf("%w: released by Unlock", ErrNotHeld)

// newHold is the hold of e, a key of the queue of kind and name on s that
// owns, acquired after waiting since start.
func newHold(s *Session, kind Kind, name string, e *revqueue.Entry, start time.Time) *Hold {
	t := Token{Name: name, Revision: e.Rev, Cluster: s.cluster}
	life := s.track(kind, t, e.Key, time.Since(start))
	return &Hold{s: s, token: t, own: ownership.New(s.link, e.Key, e.Rev, e.Seen(), life, e.Free, errReleased)}
}

// Token returns the hold's fencing token: greater than the token of every
// earlier owner of the lock.
func (h *Hold) Token() Token { return h.token }

// Key returns the hold's etcd key. No other live hold has it: the session
// may reuse it for a later Lock on the same name once this hold's Unlock has
// deleted it, and the key's create revision (the token) tells the two apart.
func (h *Hold) Key() string { return h.own.Key }

// Session returns the session whose lease the hold's key is attached to.
func (h *Hold) Session() *Session { return h.s }

// IsOwner returns the compare that holds exactly while this hold owns the
// lock: its key exists with its creation revision. Put it first in a txn's
// If to make writes that commit only while the hold owns the lock.
func (h *Hold) IsOwner() clientv3.Cmp { return h.own.IsOwner() }

// Unlock releases the hold: it ends the hold's contexts, with ErrNotHeld as
// their cause, so that work stops before the key goes, then deletes the key,
// which hands the lock to the next waiter at once. It never releases another
// hold. ctx may be the hold's own context; failures that pass are retried
// until ctx ends.
//
// It returns an error wrapping ErrNotHeld if the hold was already released
// or lost (a key still there on an ended session is deleted all the same).
// If ctx ends before etcd answers, it returns ctx's error and the session
// goes on deleting the key in the background, until it is gone or the
// session ends; until then the key keeps its place and the hold's guarded
// writes still commit. After any other error (etcd refused) call Unlock
// again, or close the session. It returns by ctx's deadline.
func (h *Hold) Unlock(ctx context.Context) error {
	if h == nil || h.s == nil {
		return fmt.Errorf("fencing: unlock: %w: hold not made by Lock", ErrInvalidArgument)
	}
	if ctx == nil {
		return fmt.Errorf("fencing: unlock %v: %w", h.token, errNilContext)
	}
	report, err := h.unlock(ctx)
	report() // the observer and logger run with no lock held
	return err
}

func (h *Hold) unlock(ctx context.Context) (report func(), _ error) {
	outcome, _, err := h.own.Release(ctx)
	closed := errors.Is(err, retry.ErrClientClosed) // the key goes with the lease
	switch {
	case closed:
	case err != nil:
		return func() {}, fmt.Errorf("fencing: unlock %v: %w", h.token, err)
	case outcome == ownership.Done:
		return func() {}, fmt.Errorf("fencing: unlock %v: %w: already released", h.token, ErrNotHeld)
	case outcome == ownership.Gone:
		return func() { h.own.ReportLoss(ErrKeyDeleted) }, fmt.Errorf("fencing: unlock %v: %w: key already gone", h.token, ErrNotHeld)
	}
	if err := h.s.Err(); err != nil || closed {
		err = cmp.Or(err, errClientClosed) // the client's close ends the session
		return func() { h.own.ReportLoss(err) }, fmt.Errorf("fencing: unlock %v: %w: %w", h.token, ErrNotHeld, err)
	}
	return func() { h.own.ReportRelease(nil) }, nil
}

// Context returns a context that ends as soon as the hold can no longer
// prove ownership, with the cause (context.Cause): ErrKeyDeleted (the key
// deleted or replaced), the session's Err (lease expired or revoked,
// ValidUntil passed without a renewal, session closed), or ErrNotHeld once
// Unlock was called. Every call returns the same context.
//
// Context never blocks. Its first call starts a watch of the key, which
// sees a deletion within one round trip once armed; until then the context
// still ends with the session, by ValidUntil at the latest. guard.Watch
// returns only once its watch is armed.
func (h *Hold) Context() context.Context {
	if h == nil || h.s == nil {
		return lifetime.Ended(fmt.Errorf("fencing: %w: hold not made by Lock", ErrInvalidArgument))
	}
	return h.own.Context()
}
