package fencing_test

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"testing"

	"github.com/leasehold/leasehold/fencing"
	"github.com/leasehold/leasehold/internal/etcdtest"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// committed is a guarded write that etcd applied: made under the hold whose
// key is key (created at keyRev), committed at rev.
type committed struct {
	key    string
	keyRev int64
	rev    int64
}

// writeLog records the guarded writes of a test's holders.
type writeLog struct {
	mu     sync.Mutex
	writes []committed
}

// write makes a guarded put under h and records it if etcd applied it.
func (l *writeLog) write(ctx context.Context, cli *clientv3.Client, h *fencing.Hold) error {
	resp, err := cli.Txn(ctx).If(h.IsOwner()).Then(clientv3.OpPut("history-data/"+h.Key(), h.Token().String())).Commit()
	if err != nil || !resp.Succeeded {
		return fmt.Errorf("guarded write: %v (applied %v)", err, err == nil && resp.Succeeded)
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	l.writes = append(l.writes, committed{h.Key(), h.Token().Revision, resp.Header.Revision})
	return nil
}

// queued is a key alive at some revision.
type queued struct {
	key string
	rev int64 // create revision
}

// checkHistory reads the keys under prefix alive at each recorded write's
// revision, and fails t for each write that rule refuses: rule gets those
// keys, oldest first, and the writer's key. Nothing may have been compacted.
func (l *writeLog) checkHistory(t *testing.T, c *etcdtest.Cluster, prefix string, rule func(alive []queued, me queued) error) {
	t.Helper()
	ctx := etcdtest.Context(t, wait)
	l.mu.Lock()
	writes := slices.Clone(l.writes)
	l.mu.Unlock()
	for _, w := range writes {
		resp, err := c.Admin.Get(ctx, prefix, clientv3.WithPrefix(), clientv3.WithKeysOnly(), clientv3.WithRev(w.rev),
			clientv3.WithSort(clientv3.SortByCreateRevision, clientv3.SortAscend))
		if err != nil {
			t.Fatalf("keys at revision %d: %v", w.rev, err)
		}
		alive := make([]queued, len(resp.Kvs))
		for i, kv := range resp.Kvs {
			alive[i] = queued{string(kv.Key), kv.CreateRevision}
		}
		me := queued{w.key, w.keyRev}
		if !slices.Contains(alive, me) {
			t.Errorf("write at revision %d under %s@%d, which was not alive", w.rev, w.key, w.keyRev)
			continue
		}
		if err := rule(alive, me); err != nil {
			t.Errorf("write at revision %d: %v", w.rev, err)
		}
	}
	t.Logf("%d guarded writes checked", len(writes))
}
