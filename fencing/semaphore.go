package fencing

import (
	"context"
	"fmt"

	"github.com/leasehold/leasehold/internal/keyspace"
	"github.com/leasehold/leasehold/internal/retry"
	"github.com/leasehold/leasehold/internal/revqueue"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// Semaphore is a distributed weighted semaphore, shaped like
// golang.org/x/sync/semaphore.Weighted: holds of n units each, at most the
// name's limit in use at once across every process and session, granted
// first come, first served. A waiter for n units holds back every waiter
// behind it, so large requests are not starved by small ones. A hold has
// everything a Mutex's has, one key whatever its units; owning the key
// proves its units. A hold's token is greater than that of every hold
// granted before it queued.
//
// The limit is the one given to NewSemaphore until SetLimit gives the name
// one of its own, which every process then follows. Without one, every
// process must give the same limit: a call that meets keys queued with
// another returns ErrLimitMismatch.
//
// A Semaphore holds no state between calls: it is safe for concurrent use.
type Semaphore struct {
	s     *Session
	name  string
	limit int
	q     revqueue.Queue
}

// NewSemaphore returns the semaphore of limit units called name on session
// s. Names follow ValidateName; each name's semaphore is independent of its
// lock, read-write lock and election. A limit below 1 or a nil s returns
// ErrInvalidArgument, an invalid name ErrInvalidName.
func NewSemaphore(s *Session, name string, limit int) (*Semaphore, error) {
	switch {
	case s == nil:
		return nil, fmt.Errorf("fencing: NewSemaphore: %w: nil session", ErrInvalidArgument)
	case limit < 1:
		return nil, fmt.Errorf("fencing: NewSemaphore: %w: limit %d, want at least 1", ErrInvalidArgument, limit)
	}
	if err := ValidateName(name); err != nil {
		return nil, fmt.Errorf("fencing: NewSemaphore: %w", err)
	}
	q := revqueue.Queue{Client: s.cli, Prefix: keyspace.Prefix(s.link.Root, string(KindSemaphore), name), Latency: s.link.Latency, Watches: s.link.Watches}
	// The Queue with the record's read set once, for every call's units.
	return &Semaphore{s: s, name: name, limit: limit, q: revqueue.NewCounted(q, limit, 1).Queue}, nil
}

// Limit returns the limit the semaphore was made with; the name's own,
// once SetLimit set one, overrides it.
func (m *Semaphore) Limit() int { return m.limit }

// Acquire is AcquireN for one unit.
func (m *Semaphore) Acquire(ctx context.Context) (*Hold, error) { return m.AcquireN(ctx, 1) }

// AcquireN blocks until this call holds n units, and returns the Hold. On
// success the hold's key existed, on the session's live lease, at a
// revision where its units and those of every older key fitted the limit.
//
// Uncontended, it sends one request. Contended, it wakes only when its
// turn may have come, whatever the number of waiters. n below 1 returns
// ErrInvalidArgument and n above the name's limit ErrOverLimit, also for a
// waiter when the limit is lowered below n. Its errors, retries and cleanup
// are otherwise Mutex.Lock's, plus ErrLimitMismatch.
func (m *Semaphore) AcquireN(ctx context.Context, n int) (*Hold, error) {
	c, err := m.counted(ctx, n)
	if err != nil {
		return nil, fmt.Errorf("fencing: acquire: %w", err)
	}
	return m.s.hold(ctx, "acquire", KindSemaphore, m.name, c.Acquire)
}

// TryAcquire is TryAcquireN for one unit.
func (m *Semaphore) TryAcquire(ctx context.Context) (*Hold, error) { return m.TryAcquireN(ctx, 1) }

// TryAcquireN takes n units if they are free and nobody waits, without
// waiting: one request when no key is queued and the name has no limit of
// its own, two otherwise. If they are not free it returns an error
// wrapping ErrLocked, naming the oldest holder, and writes nothing. Its
// other errors are AcquireN's.
func (m *Semaphore) TryAcquireN(ctx context.Context, n int) (*Hold, error) {
	c, err := m.counted(ctx, n)
	if err != nil {
		return nil, fmt.Errorf("fencing: tryacquire: %w", err)
	}
	return m.s.tryHold(ctx, "tryacquire", KindSemaphore, m.name, c.TryAcquire)
}

// SetLimit makes limit the name's limit, for every process that uses the
// name, whatever limit it was made with. Raising it admits the waiters
// that now fit at once. Lowering it admits no one until the units in use
// fit, and a waiter for more units than the limit fails with ErrOverLimit
// when it is first in line. It takes no units back unless RevokeOverLimit
// is given.
//
// The limit stays, in one key of the name that is on no lease, until an
// operator deletes it; delete it only while no process uses the name.
// Every process using the name must run a version that knows this key.
// A limit below 1 returns ErrInvalidArgument.
func (m *Semaphore) SetLimit(ctx context.Context, limit int, opts ...LimitOption) error {
	if err := m.live(ctx); err != nil {
		return fmt.Errorf("fencing: setlimit: %w", err)
	}
	if limit < 1 {
		return fmt.Errorf("fencing: setlimit %q: %w: limit %d, want at least 1", m.name, ErrInvalidArgument, limit)
	}
	var o limitOptions
	for _, opt := range opts {
		if opt == nil {
			return fmt.Errorf("fencing: setlimit %q: %w: nil option", m.name, ErrInvalidArgument)
		}
		opt(&o)
	}
	if err := revqueue.NewCounted(m.q, m.limit, 1).SetLimit(ctx, &m.s.link.Session, limit, o.revoke); err != nil {
		if serr := m.s.Err(); serr != nil && ctx.Err() == nil {
			err = fmt.Errorf("%w: %w", ErrSessionExpired, serr) // it ended the attempts
		}
		return fmt.Errorf("fencing: setlimit %q: %w", m.name, acquireError(m.s, err))
	}
	return nil
}

// ReadLimit returns the name's limit: its own, once SetLimit set one, else
// the limit the semaphore was made with. It reads etcd once; once the
// session has ended it returns ErrSessionExpired, as SetLimit does.
func (m *Semaphore) ReadLimit(ctx context.Context) (int, error) {
	if err := m.live(ctx); err != nil {
		return 0, fmt.Errorf("fencing: readlimit: %w", err)
	}
	rec := keyspace.LimitKey(m.q.Prefix)
	resp, err := retry.Once(m.s.link.Latency, ctx, m.s.ctx, func() (*clientv3.GetResponse, error) { return m.s.cli.Get(ctx, rec) })
	if err != nil {
		return 0, fmt.Errorf("fencing: readlimit %q: %w", m.name, err)
	}
	if len(resp.Kvs) == 0 {
		return m.limit, nil
	}
	l, err := keyspace.UnmarshalLimit(resp.Kvs[0].Value)
	if err != nil {
		return 0, fmt.Errorf("fencing: readlimit %q: %w", m.name, err)
	}
	return l.Limit, nil
}

// LimitOption configures SetLimit.
type LimitOption func(*limitOptions)

type limitOptions struct{ revoke bool }

// RevokeOverLimit makes SetLimit take units back when the new limit is
// below the units in use: it deletes the keys of the newest holds, in the
// same write as the limit, until the rest fit. A revoked hold's context
// ends with ErrRevoked (wrapping ErrKeyDeleted), and its guarded writes
// fail from that revision on, as after any loss.
func RevokeOverLimit() LimitOption { return func(o *limitOptions) { o.revoke = true } }

// counted is the queue of holds of n units, or why it cannot be used.
func (m *Semaphore) counted(ctx context.Context, n int) (revqueue.Counted, error) {
	if err := m.usable(ctx); err != nil {
		return revqueue.Counted{}, err
	}
	if n < 1 {
		return revqueue.Counted{}, fmt.Errorf("%q: %w: %d units, want at least 1", m.name, ErrInvalidArgument, n)
	}
	return revqueue.NewCounted(m.q, m.limit, n), nil
}

// live is usable, and the session not ended: SetLimit and ReadLimit send
// on its client, bounded by its life.
func (m *Semaphore) live(ctx context.Context) error {
	if err := m.usable(ctx); err != nil {
		return err
	}
	if err := m.s.Err(); err != nil {
		return fmt.Errorf("%w: %w", ErrSessionExpired, err)
	}
	return nil
}

func (m *Semaphore) usable(ctx context.Context) error {
	if m == nil || m.s == nil {
		return fmt.Errorf("%w: Semaphore not made by NewSemaphore", ErrInvalidArgument)
	}
	return m.s.usable(ctx)
}
