package fencing

import (
	"errors"
	"fmt"

	"github.com/leasehold/leasehold/internal/keyspace"
	"github.com/leasehold/leasehold/internal/ownwatch"
	"github.com/leasehold/leasehold/internal/revqueue"
)

// Sentinel errors. Every error this package returns that a caller may act on
// wraps one of them: test with errors.Is.
var (
	// ErrInvalidName is returned for a lock name that cannot be isolated
	// from other names (see NewMutex), and by ParseToken for such a name.
	ErrInvalidName = keyspace.ErrInvalidName

	// ErrInvalidToken is returned by ParseToken for text that String did
	// not produce.
	ErrInvalidToken = errors.New("invalid token")

	// ErrInvalidArgument is returned for a nil context, client, session,
	// owner or function, a closed client, a nil option or an option out of
	// range, and by the methods of a value not made by its constructor (a
	// zero Mutex, say). Nothing was written to etcd.
	ErrInvalidArgument = errors.New("invalid argument")

	// ErrLocked is returned by TryLock when another hold owns the lock, by
	// a Semaphore's TryAcquire when every permit is taken, by an RWMutex's
	// TryLock and TryRLock when the lock cannot be had at once, and by
	// election's TryCampaign when another candidate leads or waits. They
	// wrote nothing.
	ErrLocked = errors.New("locked")

	// ErrNotHeld is returned by Unlock when the hold was already released or
	// lost. Unlock then deleted nothing that belongs to anyone else.
	ErrNotHeld = errors.New("not held")

	// ErrStaleToken is returned by a gate.Gate's Admit and Do (fencing/gate)
	// for a token older than one it has already admitted under the same
	// name, and by the fenced stores of fencing/sqlfence for a token older
	// than their fence.
	ErrStaleToken = errors.New("stale token")

	// ErrClusterMismatch is returned by a fenced store (fencing/sqlfence)
	// for a token issued by another etcd cluster than the tokens it has
	// admitted under the name: revisions of two clusters do not compare, so
	// the token is refused, never compared. It is what follows a rebuilt or
	// restored etcd cluster; the store's doc says what an operator does.
	ErrClusterMismatch = errors.New("token from another etcd cluster")

	// ErrSessionExpired is returned by every call that acquires (Lock,
	// TryLock, Acquire, TryAcquire, RLock, TryRLock, and election's
	// Campaign) when the session's lease was found gone, or the session had
	// ended, before it acquired. The error also wraps the session's cause.
	ErrSessionExpired = errors.New("session expired")

	// ErrLimitMismatch is returned by a Semaphore's Acquire and TryAcquire
	// when keys of the name were queued with another limit: every process
	// using a name must agree on its number of permits (see Semaphore). The
	// call wrote nothing that stays.
	ErrLimitMismatch = revqueue.ErrLimitMismatch

	// ErrOverLimit is returned by a Semaphore's AcquireN and TryAcquireN
	// for more units than the name's limit: they could never be granted.
	// A waiter gets it when the limit is lowered below its units. The call
	// wrote nothing that stays.
	ErrOverLimit = revqueue.ErrOverLimit

	// ErrRevoked is the cause, wrapping ErrKeyDeleted, of the context of a
	// Semaphore's hold that SetLimit revoked (RevokeOverLimit).
	ErrRevoked = ownwatch.ErrRevoked

	// ErrKeyDeleted means a key of this library was deleted by someone else
	// (an operator), or replaced. Lock and election's Campaign return it
	// when their queued key went while they waited (they do not queue again:
	// one call writes one key). It is the cause of a Hold's or a Term's
	// context when the owner key went, and of guarded txns' ErrNotOwner
	// reports of it.
	ErrKeyDeleted = ownwatch.ErrKeyDeleted
)

// Causes of a session's end, returned by Session.Err and wrapped by the
// errors of everything that depended on the session.
var (
	// ErrLeaseExpired: the server reported the lease gone (expired or
	// revoked). Every key on it has been deleted.
	ErrLeaseExpired = errors.New("lease expired or revoked")

	// ErrLeaseUnconfirmed: ValidUntil passed without an acknowledged
	// renewal (a partition, a long pause). The server may expire the lease
	// at any moment from now on, so the session no longer vouches for it.
	ErrLeaseUnconfirmed = errors.New("lease not renewed in time")

	// ErrSessionClosed: Close was called, or the client was closed.
	ErrSessionClosed = errors.New("session closed")
)

// errClientClosed ends a session whose client was closed.
var errClientClosed = fmt.Errorf("%w: client closed", ErrSessionClosed)

// errNilContext is ErrInvalidArgument for a nil ctx: like net/http, an
// error, not a panic.
var errNilContext = fmt.Errorf("%w: nil context", ErrInvalidArgument)
