package fencing

import (
	"context"
	"fmt"
	"strconv"

	clientv3 "go.etcd.io/etcd/client/v3"
)

// EtcdGateStore keeps a Gate's high-water marks in etcd, one key per name
// under Prefix, so they survive restarts and are shared by every process
// that guards the same store. Each update compares the key's mod revision
// with the one it read, so concurrent gates never lower a mark. Sharing
// marks does not order writes across processes: see Gate.Do.
type EtcdGateStore struct {
	Client *clientv3.Client
	Prefix string // e.g. "myapp/gate/ledger/"; each name's key is Prefix+name
}

// Advance implements GateStore.
func (s *EtcdGateStore) Advance(ctx context.Context, name string, rev int64) error {
	if s.Client == nil {
		return fmt.Errorf("%w: EtcdGateStore with a nil Client", ErrInvalidArgument)
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
				return fmt.Errorf("fencing: gate mark %q: %w", key, err)
			}
		}
		switch {
		case cur > rev:
			return fmt.Errorf("%w: %d already admitted", ErrStaleToken, cur)
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
