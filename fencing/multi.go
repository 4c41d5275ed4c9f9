package fencing

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/leasehold/leasehold/internal/keyspace"
	"github.com/leasehold/leasehold/internal/lifetime"
	"github.com/leasehold/leasehold/internal/revqueue"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// MultiMutex is the locks of several names, taken together, all or none:
// each name's lock is the one NewMutex gives, so a MultiMutex and a Mutex
// that share a name exclude each other. Like a Mutex it holds no state
// between calls and is safe for concurrent use.
type MultiMutex struct {
	s     *Session
	names []string
	m     revqueue.Multi
}

// NewMultiMutex returns the locks of names on s, taken together. It
// accepts 1 to 64 distinct names, each valid by ValidateName: Lock writes
// one key per name and reads each queue in a single etcd txn, two
// operations per name, and etcd refuses a txn with more operations in a
// list than its --max-txn-ops (128 by default). A nil s, no names, a
// duplicate or more than 64 names return ErrInvalidArgument, an invalid
// name ErrInvalidName; nothing is written.
func NewMultiMutex(s *Session, names ...string) (*MultiMutex, error) {
	switch {
	case s == nil:
		return nil, fmt.Errorf("fencing: NewMultiMutex: %w: nil session", ErrInvalidArgument)
	case len(names) == 0:
		return nil, fmt.Errorf("fencing: NewMultiMutex: %w: no names", ErrInvalidArgument)
	case len(names) > revqueue.MaxNames:
		return nil, fmt.Errorf("fencing: NewMultiMutex: %w: %d names, more than the %d that one etcd txn of at most 128 operations can lock",
			ErrInvalidArgument, len(names), revqueue.MaxNames)
	}
	if err := s.usable(context.Background()); err != nil {
		return nil, fmt.Errorf("fencing: NewMultiMutex: %w", err)
	}
	m := &MultiMutex{s: s, names: slices.Clone(names), m: make(revqueue.Multi, len(names))}
	seen := make(map[string]bool, len(names))
	for i, name := range names {
		if err := ValidateName(name); err != nil {
			return nil, fmt.Errorf("fencing: NewMultiMutex: %w", err)
		}
		if seen[name] {
			return nil, fmt.Errorf("fencing: NewMultiMutex: %w: %q given twice", ErrInvalidArgument, name)
		}
		seen[name] = true
		m.m[i] = revqueue.Queue{Client: s.cli, Prefix: keyspace.Prefix(s.link.Root, string(KindLock), name),
			Latency: s.link.Latency, Watches: s.link.Watches}
	}
	return m, nil
}

// Lock blocks until this call holds the lock of every name, and returns
// their holds. One etcd txn queues a key per name, so the holds share one
// token revision; on success every key existed, on the live lease, at one
// revision where each was oldest in its queue. Uncontended: one request.
//
// A key waits only for the older key just ahead of it, so Locks of
// MultiMutexes and Mutexes never wait in a cycle, whatever the order of
// names; one that waits in a Lock while holding another lock can still
// deadlock: take every name it needs in one MultiMutex. Passing
// failures are retried until ctx ends; a lost reply keeps the places.
//
// Its errors are Mutex.Lock's, and ErrInvalidArgument from a server whose
// --max-txn-ops is below twice the names. On every failure every key is
// removed. It returns by ctx's deadline, plus 50 ms of cleanup at most.
func (m *MultiMutex) Lock(ctx context.Context) (*MultiHold, error) {
	if err := m.usable(ctx); err != nil {
		return nil, fmt.Errorf("fencing: lock: %w", err)
	}
	start := time.Now()
	es, err := m.m.Acquire(ctx, &m.s.link.Session, m.s.identity)
	if err != nil {
		return nil, fmt.Errorf("fencing: lock %q: %w", m.names, m.acquireError(err, 2))
	}
	return m.hold(es, start), nil
}

// TryLock takes the lock of every name if nobody holds or waits for any of
// them, in one request (sent again after a passing failure, as Lock's are;
// a repeat that finds this call's own keys at the heads owns with them).
// Otherwise it returns an error wrapping ErrLocked, naming a taken name and
// its owner, and writes nothing (an attempt that went unanswered and lands
// later is deleted, as Lock's are). Its other errors are Lock's.
func (m *MultiMutex) TryLock(ctx context.Context) (*MultiHold, error) {
	if err := m.usable(ctx); err != nil {
		return nil, fmt.Errorf("fencing: trylock: %w", err)
	}
	start := time.Now()
	es, taken, owner, err := m.m.TryAcquire(ctx, &m.s.link.Session, m.s.identity)
	switch {
	case err != nil:
		return nil, fmt.Errorf("fencing: trylock %q: %w", m.names, m.acquireError(err, 1))
	case es == nil:
		name := m.names[taken]
		return nil, fmt.Errorf("fencing: trylock %q: %w: %q by %q (token %v)", m.names, ErrLocked, name, owner.Value,
			Token{Name: name, Revision: owner.CreateRevision, Cluster: m.s.cluster})
	}
	return m.hold(es, start), nil
}

// acquireError is acquireError, with etcd's refusal of a txn with more
// operations in a list than --max-txn-ops (perOp per name) made clear.
func (m *MultiMutex) acquireError(err error, perName int) error {
	if errors.Is(err, rpctypes.ErrTooManyOps) {
		return fmt.Errorf("%w: %d names need %d operations in one txn, more than the server's --max-txn-ops: %w",
			ErrInvalidArgument, len(m.names), perName*len(m.names), err)
	}
	return acquireError(m.s, err)
}

func (m *MultiMutex) hold(es []*revqueue.Entry, start time.Time) *MultiHold {
	holds := make([]*Hold, len(es))
	for i, e := range es {
		holds[i] = newHold(m.s, KindLock, m.names[i], e, start)
	}
	return &MultiHold{holds: holds}
}

func (m *MultiMutex) usable(ctx context.Context) error {
	if m == nil || len(m.m) == 0 {
		return fmt.Errorf("%w: MultiMutex not made by NewMultiMutex", ErrInvalidArgument)
	}
	return m.s.usable(ctx)
}

// MultiHold is the holds of one MultiMutex.Lock or TryLock: one Hold per
// name, all with one token revision. It is safe for concurrent use.
type MultiHold struct {
	holds []*Hold // set by Lock, never changed: read without locking

	mu     sync.Mutex
	ctx    context.Context         // guarded by mu: nil until Context is first called
	cancel context.CancelCauseFunc // guarded by mu: ends ctx
}

// Holds returns the hold of each name, in the order the names were given
// to NewMultiMutex. Each is an ordinary Hold (guard.Txn, Context, Token).
func (m *MultiHold) Holds() []*Hold {
	if m == nil {
		return nil
	}
	return slices.Clone(m.holds)
}

// Tokens returns the token of each name's hold, in the order of Holds: one
// Revision, for every name, greater than that of every earlier owner of
// any of the names.
func (m *MultiHold) Tokens() []Token {
	if m == nil {
		return nil
	}
	ts := make([]Token, len(m.holds))
	for i, h := range m.holds {
		ts[i] = h.Token()
	}
	return ts
}

// IsOwner returns one compare per hold (Hold.IsOwner), in the order of
// Holds. Put them all in a txn's If to make writes that commit only while
// every hold owns its lock.
func (m *MultiHold) IsOwner() []clientv3.Cmp {
	if m == nil {
		return nil
	}
	cmps := make([]clientv3.Cmp, len(m.holds))
	for i, h := range m.holds {
		cmps[i] = h.IsOwner()
	}
	return cmps
}

// Context returns a context that ends as soon as any hold's Context ends,
// with that hold's cause (the first to end wins): ErrNotHeld once Unlock
// was called. Every call returns the same context, and none blocks.
func (m *MultiHold) Context() context.Context {
	if m == nil || len(m.holds) == 0 {
		return lifetime.Ended(fmt.Errorf("fencing: %w: hold not made by MultiMutex", ErrInvalidArgument))
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.ctx == nil {
		m.ctx, m.cancel = context.WithCancelCause(context.Background())
		for _, h := range m.holds {
			hctx := h.Context()
			if hctx.Err() != nil { // ended already: at once, with no goroutine
				m.cancel(context.Cause(hctx))
				continue
			}
			context.AfterFunc(hctx, func() { m.end(context.Cause(hctx)) })
		}
	}
	return m.ctx
}

// end ends the MultiHold's context, if made, with cause (unless it ended).
func (m *MultiHold) end(cause error) {
	m.mu.Lock()
	cancel := m.cancel
	m.mu.Unlock()
	if cancel != nil {
		cancel(cause)
	}
}

// Unlock releases every hold, as Hold.Unlock does each, side by side. If
// any was already released or lost, it returns an error wrapping
// ErrNotHeld, having released the rest; its error wraps every hold's
// error. It returns by ctx's deadline.
func (m *MultiHold) Unlock(ctx context.Context) error {
	if m == nil || len(m.holds) == 0 {
		return fmt.Errorf("fencing: unlock: %w: hold not made by MultiMutex", ErrInvalidArgument)
	}
	if ctx == nil {
		return fmt.Errorf("fencing: unlock %v: %w", m.Tokens(), errNilContext)
	}
	// As Hold.Unlock does for one, end every context first, so that work
	// stops before any key goes. ctx may be the MultiHold's own context (or
	// a hold's, or made from one), which this ends: the deletes then go on
	// without it, within its deadline, until the session ends.
	alive := ctx.Err() == nil
	for _, h := range m.holds {
		h.own.Link.Owners.Lost(h.own.Key, h.own.Rev, errReleased)
	}
	m.end(errReleased) // at once: the holds' ends reach it in goroutines of their own
	if alive && errors.Is(context.Cause(ctx), errReleased) {
		var cancel context.CancelFunc
		ctx, cancel = lifetime.Outlive(ctx, m.holds[0].s.link.Life)
		defer cancel()
	}
	reports := make([]func(), len(m.holds))
	errs := make([]error, len(m.holds))
	var wg sync.WaitGroup
	for i, h := range m.holds {
		wg.Go(func() { reports[i], errs[i] = h.unlock(ctx) })
	}
	wg.Wait()
	for _, report := range reports {
		report() // the observer and logger run with no lock held
	}
	var failed unlockErrors
	for _, err := range errs {
		if err != nil {
			failed = append(failed, err)
		}
	}
	switch len(failed) {
	case 0:
		return nil
	case 1:
		return failed[0]
	}
	return failed
}

// unlockErrors is the errors of several holds' Unlock, each naming its
// token, in one error that names the package once.
type unlockErrors []error

func (e unlockErrors) Error() string {
	texts := make([]string, len(e))
	for i, err := range e {
		texts[i] = strings.TrimPrefix(err.Error(), "fencing: ")
	}
	return "fencing: " + strings.Join(texts, "; ")
}

func (e unlockErrors) Unwrap() []error { return e }
