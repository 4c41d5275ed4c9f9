package fencing

import (
	"context"
	"errors"
	"fmt"

	"github.com/leasehold/leasehold/internal/revqueue"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
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

// NewMutex returns the lock called name on session s. Any non-empty valid
// UTF-8 name of at most MaxNameLen bytes without a NUL byte is accepted,
// hierarchical ("jobs/billing", "a/b/c"), with empty segments ("a//b") or
// not: each name owns a key range no other name can reach, so "a" and "a/b"
// are two independent locks. Other names return ErrInvalidName; a nil s
// returns ErrInvalidArgument.
func NewMutex(s *Session, name string) (*Mutex, error) {
	if s == nil {
		return nil, fmt.Errorf("fencing: NewMutex: %w: nil session", ErrInvalidArgument)
	}
	if err := validName(name); err != nil {
		return nil, fmt.Errorf("fencing: NewMutex: %w", err)
	}
	return &Mutex{s: s, name: name, q: revqueue.Queue{Client: s.cli, Prefix: lockPrefix(name)}}, nil
}

// Name returns the lock's name.
func (m *Mutex) Name() string { return m.name }

// Lock blocks until this call owns the lock, and returns the Hold. On
// success the hold's key existed, on the session's live lease, at a revision
// where it was the oldest in the queue; the session had not ended.
//
// Uncontended, it sends one request. Contended, it waits for the deletion
// of the key just ahead of its own (so only the direct successor wakes on a
// handoff) and survives compaction and reconnects. It returns an error
// wrapping ErrSessionExpired if the session ends first, ErrKeyDeleted if its
// queued key is deleted by someone else, or ctx's error. On every failure
// its key is removed, within one TTL even when ctx is done; if the network is
// down, the session keeps trying, and the lease removes it in the end.
func (m *Mutex) Lock(ctx context.Context) (*Hold, error) {
	if err := m.usable(ctx); err != nil {
		return nil, err
	}
	key := m.s.newKey(m.q.Prefix)
	e, err := m.q.Enqueue(ctx, key, m.s.identity, m.s.id)
	if err == nil {
		err = m.q.Wait(ctx, e, m.s.Done())
	}
	if err == nil {
		err = m.sessionErr() // the session may have ended as the wait did
	}
	if err != nil {
		m.s.removeKey(ctx, key)
		return nil, m.lockErr("lock", err)
	}
	return newHold(m, e), nil
}

// TryLock acquires the lock if nobody holds or waits for it, in one request.
// Otherwise it returns an error wrapping ErrLocked, naming the owner, and
// writes nothing. Its other errors are Lock's.
func (m *Mutex) TryLock(ctx context.Context) (*Hold, error) {
	if err := m.usable(ctx); err != nil {
		return nil, err
	}
	key := m.s.newKey(m.q.Prefix)
	e, owner, err := m.q.TryEnqueue(ctx, key, m.s.identity, m.s.id)
	if err == nil && owner != nil {
		return nil, fmt.Errorf("fencing: trylock %q: %w by %q (token %v)", m.name, ErrLocked, owner.Value,
			Token{Name: m.name, Revision: owner.CreateRevision})
	}
	if err == nil {
		err = m.sessionErr()
	}
	if err != nil {
		m.s.removeKey(ctx, key)
		return nil, m.lockErr("trylock", err)
	}
	return newHold(m, e), nil
}

// usable refuses to start on an ended session or a done ctx.
func (m *Mutex) usable(ctx context.Context) error {
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("fencing: lock %q: %w", m.name, err)
	}
	if err := m.sessionErr(); err != nil {
		return m.lockErr("lock", err)
	}
	return nil
}

func (m *Mutex) sessionErr() error {
	if err := m.s.Err(); err != nil {
		return fmt.Errorf("%w: %w", ErrSessionExpired, err)
	}
	return nil
}

// lockErr maps what went wrong in the queue to this package's sentinels.
func (m *Mutex) lockErr(op string, err error) error {
	switch {
	case errors.Is(err, revqueue.ErrLost):
		err = m.sessionErr()
	case errors.Is(err, rpctypes.ErrLeaseNotFound):
		err = fmt.Errorf("%w: %w", ErrSessionExpired, err)
	case errors.Is(err, revqueue.ErrKeyGone):
		err = m.keyGoneErr()
	}
	return fmt.Errorf("fencing: %s %q: %w", op, m.name, err)
}

// keyGoneErr tells why a queued key vanished: with its lease, or alone.
func (m *Mutex) keyGoneErr() error {
	if err := m.sessionErr(); err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(m.s.ctx, m.s.period)
	defer cancel()
	ttl, err := m.s.cli.TimeToLive(ctx, m.s.id)
	if err == nil && ttl.TTL <= 0 {
		return fmt.Errorf("%w: lease %x gone", ErrSessionExpired, int64(m.s.id))
	}
	return ErrKeyDeleted
}
