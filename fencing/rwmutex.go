package fencing

import (
	"context"
	"fmt"

	"github.com/leasehold/leasehold/internal/keyspace"
	"github.com/leasehold/leasehold/internal/revqueue"
)

// RWMutex is a distributed read-write lock: any number of read holds, or
// one write hold, of one name at once. Readers and writers queue in one
// line, served first come, first served: a queued writer holds back every
// reader that arrives after it (no writer starves), and readers queued
// together enter together. A release costs a request only to those it lets
// in.
//
// Holds are Hold values with everything a Mutex's has. A write hold's token
// is greater than that of every earlier hold, read or write; a read hold's
// is greater than that of every earlier write hold. Guarded writes under a
// read hold commit only while that hold lasts: readers that write must
// fence each other themselves.
//
// An RWMutex holds no state between calls: it is safe for concurrent use.
type RWMutex struct {
	s       *Session
	name    string
	readers revqueue.Readers
	writers revqueue.Writers
}

// NewRWMutex returns the read-write lock called name on session s. Names
// follow ValidateName; each name's read-write lock is independent of its
// lock, semaphore and election. A nil s returns ErrInvalidArgument, an
// invalid name ErrInvalidName.
func NewRWMutex(s *Session, name string) (*RWMutex, error) {
	if s == nil {
		return nil, fmt.Errorf("fencing: NewRWMutex: %w: nil session", ErrInvalidArgument)
	}
	if err := ValidateName(name); err != nil {
		return nil, fmt.Errorf("fencing: NewRWMutex: %w", err)
	}
	q := revqueue.Queue{Client: s.cli, Prefix: keyspace.Prefix(s.link.Root, string(KindRWLock), name), Latency: s.link.Latency, Watches: s.link.Watches}
	return &RWMutex{s: s, name: name, readers: revqueue.NewReaders(q), writers: revqueue.NewWriters(q)}, nil
}

// Lock blocks until this call holds the lock for writing: no other hold,
// read or write, exists. Its errors, retries and cleanup are Mutex.Lock's.
func (m *RWMutex) Lock(ctx context.Context) (*Hold, error) {
	if err := m.usable(ctx); err != nil {
		return nil, fmt.Errorf("fencing: lock: %w", err)
	}
	return m.s.hold(ctx, "lock", KindRWLock, m.name, m.writers.Acquire)
}

// RLock blocks until this call holds the lock for reading: no write hold
// exists, and no writer queued before it. Its errors, retries and cleanup
// are Mutex.Lock's.
func (m *RWMutex) RLock(ctx context.Context) (*Hold, error) {
	if err := m.usable(ctx); err != nil {
		return nil, fmt.Errorf("fencing: rlock: %w", err)
	}
	return m.s.hold(ctx, "rlock", KindRWLock, m.name, m.readers.Acquire)
}

// TryLock takes the lock for writing if nobody holds or waits for it, in
// one request; otherwise it returns an error wrapping ErrLocked, naming the
// oldest key's holder, and writes nothing.
func (m *RWMutex) TryLock(ctx context.Context) (*Hold, error) {
	if err := m.usable(ctx); err != nil {
		return nil, fmt.Errorf("fencing: trylock: %w", err)
	}
	return m.s.tryHold(ctx, "trylock", KindRWLock, m.name, m.writers.TryAcquire)
}

// TryRLock takes the lock for reading if no writer holds or waits for it,
// in one request; otherwise it returns an error wrapping ErrLocked, naming
// the oldest writer, and writes nothing.
func (m *RWMutex) TryRLock(ctx context.Context) (*Hold, error) {
	if err := m.usable(ctx); err != nil {
		return nil, fmt.Errorf("fencing: tryrlock: %w", err)
	}
	return m.s.tryHold(ctx, "tryrlock", KindRWLock, m.name, m.readers.TryAcquire)
}

func (m *RWMutex) usable(ctx context.Context) error {
	if m == nil || m.s == nil {
		return fmt.Errorf("%w: RWMutex not made by NewRWMutex", ErrInvalidArgument)
	}
	return m.s.usable(ctx)
}
