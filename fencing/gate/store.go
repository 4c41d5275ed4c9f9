package gate

import (
	"context"
	"fmt"
	"strconv"
	"sync"

	"github.com/leasehold/leasehold/fencing"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// Store keeps a Gate's high-water marks.
type Store interface {
	// Advance raises the mark of name to rev, atomically. It returns an
	// error wrapping fencing.ErrStaleToken, and changes nothing, if the
	// mark is already above rev; a mark equal to rev is admitted again (a
	// retry).
	Advance(ctx context.Context, name string, rev int64) error
}

// MemoryStore keeps high-water marks in memory, one per name ever admitted
// (forgetting one would let a stale token in): for names without bound, use
// a store that keeps them elsewhere, such as EtcdStore. The zero value is
// ready to use; it is safe for concurrent use.
type MemoryStore struct {
	mu   sync.Mutex
	high map[string]int64 // guarded by mu
}

// Advance implements Store.
func (m *MemoryStore) Advance(_ context.Context, name string, rev int64) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if cur := m.high[name]; cur > rev {
		return fmt.Errorf("%w: %d already admitted", fencing.ErrStaleToken, cur)
	}
	if m.high == nil {
		m.high = map[string]int64{}
	}
	m.high[name] = rev
	return nil
}

// EtcdStore keeps a Gate's high-water marks in etcd, one key per name under
// Prefix, so they survive restarts and are shared by every process that
// guards the same store. Each update compares the key's mod revision with
// the one it read, so concurrent gates never lower a mark. Sharing marks
// does not order writes across processes: see Gate.Do.
type EtcdStore struct {
	Client *clientv3.Client
	Prefix string // e.g. "myapp/gate/ledger/"; each name's key is Prefix+name
}

// Advance implements Store.
func (s *EtcdStore) Advance(ctx context.Context, name string, rev int64) error {
	if s.Client == nil {
		return fmt.Errorf("%w: EtcdStore with a nil Client", fencing.ErrInvalidArgument)
	}
	key := s.Prefix + name
	for {
		resp, err := s.Client.Get(ctx, key)
		if err != nil {
			return err
		}
		var cur, mod int64
		if len(resp.Kvs) > 0 {
			mod = resp.Kvs[0].ModRevision
			if cur, err = strconv.ParseInt(string(resp.Kvs[0].Value), 10, 64); err != nil {
				return fmt.Errorf("mark %q: %w", key, err)
			}
		}
		switch {
		case cur > rev:
			return fmt.Errorf("%w: %d already admitted", fencing.ErrStaleToken, cur)
		case cur == rev:
			return nil
		}
		txn, err := s.Client.Txn(ctx).
			If(clientv3.Compare(clientv3.ModRevision(key), "=", mod)).
			Then(clientv3.OpPut(key, strconv.FormatInt(rev, 10))).
			Commit()
		if err != nil {
			return err
		}
		if txn.Succeeded {
			return nil
		}
		// Another gate moved the mark meanwhile: read it again.
	}
}
