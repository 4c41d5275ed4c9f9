package fencing

import (
	"context"
	"fmt"

	"github.com/leasehold/leasehold/internal/keyspace"
	"github.com/leasehold/leasehold/internal/revqueue"
)

// Semaphore is a distributed counting semaphore: at most Limit holds of one
// name at once, across every process and session, granted first come, first
// served. The Limit oldest keys of the name's queue hold a permit each, so
// owning its key proves a hold's permit. A hold has everything a Mutex's
// has: a token, a watched Context, guarded writes, Unlock. Each Acquire
// queues its own key, so permits of one session exclude each other. A
// hold's token is greater than that of every hold whose permit was granted
// before it queued.
//
// Every process using a name must give the same limit: Acquire and
// TryAcquire return ErrLimitMismatch when a key ahead of theirs was queued
// with another. To change a limit, stop every process that uses the name.
//
// A Semaphore holds no state between calls: it is safe for concurrent use.
type Semaphore struct {
	s     *Session
	name  string
	limit int
	q     revqueue.Counted
}

// NewSemaphore returns the semaphore of limit permits called name on
// session s. Names follow ValidateName; each name's semaphore is
// independent of its lock, read-write lock and election. A limit below 1
// or a nil s returns ErrInvalidArgument, an invalid name ErrInvalidName.
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
	return &Semaphore{s: s, name: name, limit: limit, q: revqueue.NewCounted(q, limit)}, nil
}

// Limit returns the number of permits.
func (m *Semaphore) Limit() int { return m.limit }

// Acquire blocks until this call holds a permit, and returns the Hold. On
// success the hold's key existed, on the session's live lease, at a
// revision where fewer than Limit keys were older.
//
// Uncontended, it sends one request. Contended, it wakes only when its
// turn may have come: a release wakes the one waiter it admits, whatever
// the number of waiters. Its errors, retries and cleanup are Mutex.Lock's,
// plus ErrLimitMismatch.
func (m *Semaphore) Acquire(ctx context.Context) (*Hold, error) {
	if err := m.usable(ctx); err != nil {
		return nil, fmt.Errorf("fencing: acquire: %w", err)
	}
	return m.s.hold(ctx, "acquire", KindSemaphore, m.name, m.q.Acquire)
}

// TryAcquire takes a permit if one is free and nobody waits, without
// waiting: one request when no key is queued or every permit is taken, two
// when some are free. Otherwise it returns an error wrapping ErrLocked,
// naming the oldest holder, and writes nothing. Its other errors are
// Acquire's.
func (m *Semaphore) TryAcquire(ctx context.Context) (*Hold, error) {
	if err := m.usable(ctx); err != nil {
		return nil, fmt.Errorf("fencing: tryacquire: %w", err)
	}
	return m.s.tryHold(ctx, "tryacquire", KindSemaphore, m.name, m.q.TryAcquire)
}

func (m *Semaphore) usable(ctx context.Context) error {
	if m == nil || m.s == nil {
		return fmt.Errorf("%w: Semaphore not made by NewSemaphore", ErrInvalidArgument)
	}
	return m.s.usable(ctx)
}
