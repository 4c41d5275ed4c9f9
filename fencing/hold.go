package fencing

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/leasehold/leasehold/internal/ctxutil"
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

// Unlock releases the hold by deleting its key, which hands the lock to the
// next waiter at once. It deletes this hold's key and nothing else: an old
// hold's Unlock can never release a newer one, even one of the same session
// (which reuses a key only once every delete sent for it has returned). It
// returns by ctx's deadline.
//
// Unlock first ends the hold's contexts (Context, and every guard.Watch of
// the hold), with ErrNotHeld as their cause, so work under the hold stops
// before the key goes, whatever happens next. ctx may be one of them (work
// that unlocks with its own context): that end does not stop the delete,
// which keeps ctx's deadline, or without one goes on until it is answered or
// the session ends (within a TTL when etcd cannot be reached). It returns an
// error wrapping ErrNotHeld if the hold was already released or lost (key
// deleted, lease gone, session ended); a key of an ended session that still
// exists is deleted all the same. After any other error (ctx ended first,
// etcd refused) the key may still be in etcd, owning the lock, and guarded
// writes of the hold still commit: call Unlock again, or close the session,
// to release it. Failures that pass (a lost reply, a leader change, a member
// restarting) are retried until ctx ends: deleting the key is idempotent. On
// a closed client it returns at once, wrapping ErrNotHeld and the session's
// Err (ErrSessionClosed, unless it had ended before): the key stays until
// the session's lease expires.
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

// Context returns a context that is cancelled as soon as the hold can no
// longer prove ownership, with the cause (context.Cause): the key deleted or
// replaced (ErrKeyDeleted), the session's Err (lease expired or
// revoked, ValidUntil passed without a renewal, session closed), or
// ErrNotHeld once Unlock was called. Every call returns the same context.
//
// Context never blocks: the first call starts a watch of the hold's key in
// the background, and a Lock pays for no watch until it is asked for. Until
// the watch is armed (established on the server, one round trip when etcd is
// reachable) the context still ends at the session's end, at ValidUntil at
// the latest, and a deletion of the key before arming is found by the read
// that arming ends with; once armed, a deletion is seen within one watch
// round trip. guard.Watch returns only once its watch is armed.
func (h *Hold) Context() context.Context {
	if h == nil || h.s == nil {
		return ctxutil.Ended(fmt.Errorf("fencing: %w: hold not made by Lock", ErrInvalidArgument))
	}
	return h.own.Context()
}
