package fencing

import (
	"context"
	"fmt"

	"github.com/leasehold/leasehold/internal/keyspace"
	"github.com/leasehold/leasehold/internal/revqueue"
)

// Mutex is a distributed lock on one name: a queue of keys ordered by etcd
// create revision, whose oldest key owns the lock. Each Lock call queues its
// own key, so two Lock calls exclude each other whether they share a session
// or not, and each acquired Hold carries a fencing token.
//
// A Mutex holds no state between calls: it is safe for concurrent use, and
// any number of Mutexes may share a name and a session.
type Mutex struct {
	s    *Session
	name string
	q    revqueue.Queue
}

// NewMutex returns the lock called name on session s. Names follow
// ValidateName: printable, without '#', hierarchical ("jobs/billing") or
// not. Each name owns a key range no other name reaches (its keys start with
// the session's root, the name, then "#lock/"), so "a" and "a/b" are two
// independent locks. Other names return ErrInvalidName; a nil s returns
// ErrInvalidArgument.
func NewMutex(s *Session, name string) (*Mutex, error) {
	if s == nil {
		return nil, fmt.Errorf("fencing: NewMutex: %w: nil session", ErrInvalidArgument)
	}
	if err := ValidateName(name); err != nil {
		return nil, fmt.Errorf("fencing: NewMutex: %w", err)
	}
	return &Mutex{s: s, name: name, q: revqueue.Queue{Client: s.cli, Prefix: keyspace.Prefix(s.link.Root, string(KindLock), name), Latency: s.link.Latency, Watches: s.link.Watches}}, nil
}

// Lock blocks until this call owns the lock and returns its Hold. On success
// the hold's key existed, on the session's live lease, at a revision where
// it was the oldest in the queue.
//
// Only the direct successor of a released key wakes, so a handoff costs the
// same with one waiter or a thousand. The wait survives compaction,
// reconnects and routine etcd maintenance: failures that pass are retried
// until ctx ends (DESIGN.md, "How an acquire works"). Lock returns an error
// wrapping ErrSessionExpired if the session ends first, ErrKeyDeleted if
// someone else deleted its queued key while it waited, or ctx's error.
//
// Lock returns by ctx's deadline, plus at most 50 ms spent cleaning up. On
// every failure its key is removed: at once when etcd answers, otherwise by
// the session in the background, and by the lease's end at the latest.
func (m *Mutex) Lock(ctx context.Context) (*Hold, error) {
	if err := m.usable(ctx); err != nil {
		return nil, fmt.Errorf("fencing: lock: %w", err)
	}
	return m.s.hold(ctx, "lock", KindLock, m.name, m.q.Acquire)
}

// TryLock acquires the lock if nobody holds or waits for it, in one request
// (sent again after a passing failure, as Lock's are; a repeat that finds
// this call's own key at the head owns with it). Otherwise it returns an
// error wrapping ErrLocked, naming the owner, and writes nothing (an attempt
// that went unanswered and lands later is deleted, as Lock's are). Its
// other errors are Lock's.
func (m *Mutex) TryLock(ctx context.Context) (*Hold, error) {
	if err := m.usable(ctx); err != nil {
		return nil, fmt.Errorf("fencing: trylock: %w", err)
	}
	return m.s.tryHold(ctx, "trylock", KindLock, m.name, m.q.TryAcquire)
}

func (m *Mutex) usable(ctx context.Context) error {
	if m == nil {
		return fmt.Errorf("%w: nil Mutex", ErrInvalidArgument)
	}
	return m.s.usable(ctx)
}
