package gate

import (
	"context"
	"errors"
	"fmt"
	"sync"

	"github.com/leasehold/leasehold/fencing"
)

// Gate guards a store other than etcd: it remembers, per name, the highest
// token it has admitted, and refuses older ones. A former owner that was
// paused or partitioned past its lease, and still writes, is refused once its
// successor has written.
//
// Admit alone checks; it does not order the write that follows it. Do admits
// and runs the write under the gate, so no newer token is admitted between
// the check and the write.
//
// The zero Gate is ready to use and keeps its marks in memory, one per name
// it ever admitted; set Store to keep them across restarts, or elsewhere
// when names have no bound (see AllowNames). A Gate is safe for concurrent
// use. Tokens of different etcd clusters (or of a cluster restored from a
// backup) must not pass through one Gate: their revisions do not compare.
type Gate struct {
	// Store keeps the high-water marks; nil means this process's memory.
	Store Store
	// OnReject, if set, is told of every token refused as stale, after the
	// refusal and with no lock of the Gate held.
	OnReject func(fencing.RejectEvent)

	mu    sync.Mutex
	mem   MemoryStore          // used when Store is nil
	names map[string]*nameLock // guarded by mu: serialises Do per name, while one runs
}

// nameLock serialises the Do calls of one name; it is dropped once none
// holds or waits for it, so the map stays as small as the calls in flight.
type nameLock struct {
	sync.Mutex
	refs int // guarded by Gate.mu
}

// errNilContext is fencing.ErrInvalidArgument for a nil ctx, as fencing
// reports it.
var errNilContext = fmt.Errorf("%w: nil context", fencing.ErrInvalidArgument)

// Admit admits t unless a greater token of the same name was admitted
// before: then it returns an error wrapping fencing.ErrStaleToken. Admitting
// the highest token again succeeds (a retry). A token that String could not
// print (empty name, revision not positive) returns fencing.ErrInvalidToken.
// ctx bounds a Store that talks to the network (EtcdStore).
func (g *Gate) Admit(ctx context.Context, t fencing.Token) error {
	return g.report(t, g.admit(ctx, t))
}

func (g *Gate) admit(ctx context.Context, t fencing.Token) error {
	if ctx == nil {
		return fmt.Errorf("gate: admit %v: %w", t, errNilContext)
	}
	if err := fencing.ValidateName(t.Name); err != nil || t.Revision <= 0 {
		return fmt.Errorf("gate: admit %q@%d: %w", t.Name, t.Revision, fencing.ErrInvalidToken)
	}
	if err := g.store().Advance(ctx, t.Name, t.Revision); err != nil {
		return fmt.Errorf("gate: admit %v: %w", t, err)
	}
	return nil
}

// report tells the observer of a stale token, with no lock of g's held.
func (g *Gate) report(t fencing.Token, err error) error {
	if f := g.OnReject; f != nil && errors.Is(err, fencing.ErrStaleToken) {
		f(fencing.RejectEvent{Token: t, Cause: err})
	}
	return err
}

// Do admits t and, if it is admitted, runs write with ctx while no other Do
// of the same name runs in this process: a newer token cannot be admitted
// through this Gate between this check and this write. It returns Admit's
// error or write's; a nil write returns fencing.ErrInvalidArgument,
// admitting nothing.
//
// Do orders writes within one process only. When several processes guard
// one store (each with its own Gate, sharing an EtcdStore), a slow write
// admitted by one can still land after a newer one admitted by another:
// such a store must check the token itself, in the same transaction as the
// write (see fencing/sqlfence).
func (g *Gate) Do(ctx context.Context, t fencing.Token, write func(ctx context.Context) error) error {
	if write == nil {
		return fmt.Errorf("gate: Do %v: %w: nil write", t, fencing.ErrInvalidArgument)
	}
	admitted, err := g.do(ctx, t, write)
	if !admitted {
		return g.report(t, err) // the observer runs after the name's lock is released
	}
	return err
}

func (g *Gate) do(ctx context.Context, t fencing.Token, write func(context.Context) error) (admitted bool, _ error) {
	mu := g.lockName(t.Name)
	defer g.unlockName(t.Name, mu)
	if err := g.admit(ctx, t); err != nil {
		return false, err
	}
	return true, write(ctx)
}

func (g *Gate) store() Store {
	if g.Store != nil {
		return g.Store
	}
	return &g.mem
}

func (g *Gate) lockName(name string) *nameLock {
	g.mu.Lock()
	if g.names == nil {
		g.names = map[string]*nameLock{}
	}
	mu := g.names[name]
	if mu == nil {
		mu = new(nameLock)
		g.names[name] = mu
	}
	mu.refs++
	g.mu.Unlock()
	mu.Lock()
	return mu
}

func (g *Gate) unlockName(name string, mu *nameLock) {
	mu.Unlock()
	g.mu.Lock()
	defer g.mu.Unlock()
	if mu.refs--; mu.refs == 0 {
		delete(g.names, name)
	}
}
