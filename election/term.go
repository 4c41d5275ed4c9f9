package election

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"

	"github.com/leasehold/leasehold/fencing"
	"github.com/leasehold/leasehold/guard"
	"github.com/leasehold/leasehold/internal/ownwatch"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// Term is one won campaign: one key in etcd, the oldest of its election. It
// implements guard.Owner and is safe for concurrent use.
type Term struct {
	s     *fencing.Session // set by Campaign, never changed: read without locking
	token fencing.Token
	key   string
	life  *fencing.Tenure // reports acquisition, then resignation or loss

	mu       sync.Mutex  // serialises Proclaim and Resign
	value    string      // guarded by mu: the last value written
	resigned atomic.Bool // set once Resign succeeded or found the term lost

	// ctxMu is separate from mu: arming a watch can block (until ValidUntil
	// in a partition), and Resign must not wait for it.
	ctxMu sync.Mutex
	ctx   context.Context // guarded by ctxMu: nil until Context is first called
}

// errResigned is the cause of a term's contexts after Resign.
var errResigned = fmt.Errorf("%w: resigned", ErrNotLeader)

// Token returns the term's fencing token: greater than every earlier term's.
func (t *Term) Token() fencing.Token { return t.token }

// Key returns the term's etcd key.
func (t *Term) Key() string { return t.key }

// Session returns the session whose lease the term's key is attached to.
func (t *Term) Session() *fencing.Session { return t.s }

// Value returns the value campaigned with, or the last one proclaimed.
func (t *Term) Value() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.value
}

// Proclaim changes the leader's value, as observers see it, only while the
// term lasts. It returns an error wrapping ErrNotLeader (and
// guard.ErrNotOwner) when the term was already lost or resigned; after any
// other error the value may or may not have changed, and Proclaim may be
// retried.
func (t *Term) Proclaim(ctx context.Context, value string) error {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.resigned.Load() {
		return fmt.Errorf("election: proclaim %v: %w: resigned", t.token, ErrNotLeader)
	}
	if _, err := guard.Put(ctx, t, t.key, value, clientv3.WithLease(t.s.Lease())); err != nil {
		return t.err("proclaim", err) // a failed txn has reported the loss
	}
	t.value = value
	return nil
}

// Resign ends the term by deleting its key, which hands leadership to the
// next candidate at once. It returns an error wrapping ErrNotLeader when the
// term was already lost (key gone, or session ended: a key still there is
// deleted all the same) or resigned. After any other error (the network) the
// term is unchanged and Resign may be retried. The term's Context ends,
// with ErrNotLeader as its cause, before the key goes.
func (t *Term) Resign(ctx context.Context) error {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.resigned.Load() {
		return fmt.Errorf("election: resign %v: %w: already resigned", t.token, ErrNotLeader)
	}
	ownwatch.Lost(t.key, errResigned)
	_, err := guard.Delete(ctx, t, t.key)
	if err != nil && !errors.Is(err, guard.ErrNotOwner) {
		return fmt.Errorf("election: resign %v: %w", t.token, err)
	}
	t.resigned.Store(true)
	if err != nil {
		return t.err("resign", err) // a failed txn has reported the loss
	}
	if err := t.s.Err(); err != nil {
		// The key was still there, but the session had stopped vouching
		// for it: the term had already ended.
		t.life.Lose(err)
		return fmt.Errorf("election: resign %v: %w: %w", t.token, ErrNotLeader, err)
	}
	t.life.Release()
	return nil
}

// Context returns a context cancelled as soon as the term can no longer be
// proven, with the cause: guard.ErrOwnerKeyGone, the session's Err, or
// ErrNotLeader after Resign. It is guard.Watch of the term, armed on the
// first call (which waits until the watch is established on the server) and
// shared by later calls; Campaign pays for no watch until it is asked for.
func (t *Term) Context() context.Context {
	t.ctxMu.Lock()
	defer t.ctxMu.Unlock()
	if t.ctx == nil {
		if t.resigned.Load() {
			ctx, cancel := context.WithCancelCause(context.Background())
			cancel(errResigned)
			return ctx
		}
		// The watch's goroutine ends with the context: at Resign (Lost), at
		// the loss, or when the session ends.
		t.ctx, _ = guard.Watch(context.Background(), t)
	}
	return t.ctx
}

func (t *Term) err(op string, err error) error {
	if errors.Is(err, guard.ErrNotOwner) {
		return fmt.Errorf("election: %s %v: %w: %w", op, t.token, ErrNotLeader, err)
	}
	return fmt.Errorf("election: %s %v: %w", op, t.token, err)
}
