package fencing_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/leasehold/leasehold/fencing"
	"github.com/leasehold/leasehold/fencing/fencingtest"
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
func (l *writeLog) checkHistory(t *testing.T, c *fencingtest.Cluster, prefix string, rule func(alive []queued, me queued) error) {
	t.Helper()
	ctx := fencingtest.Context(t, wait)
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

// picker chooses, for one acquire, the kind of hold and the call that takes it.
type picker func(rng *rand.Rand) (kind string, lock func(context.Context) (*fencing.Hold, error))

// underFaults runs workers side by side for 10 s, each on its own proxied
// client, one session (TTL 2 s) after another. On each session, pick is
// made by newPicker; every hold a call returns gets guarded writes into log
// and, now and then, a fault (holdWithFaults). It returns how many workers
// took a hold of each kind.
func underFaults(t *testing.T, c *fencingtest.Cluster, workers int, log *writeLog, newPicker func(*fencing.Session) (picker, error)) map[string]int {
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	var mu sync.Mutex
	took := map[string]map[int]bool{}
	var wg sync.WaitGroup
	for w := range workers {
		cli, link := c.ProxiedClient(t)
		wg.Go(func() {
			rng := rand.New(rand.NewPCG(uint64(w), 7))
			for ctx.Err() == nil {
				s, err := fencing.NewSession(ctx, cli, fencing.WithTTL(2*time.Second))
				if err != nil {
					continue
				}
				pick, err := newPicker(s)
				if err != nil {
					t.Error(err)
					return
				}
				for ctx.Err() == nil && s.Err() == nil {
					kind, lock := pick(rng)
					actx, cancel := context.WithTimeout(ctx, time.Duration(50+rng.IntN(400))*time.Millisecond)
					h, err := lock(actx)
					cancel()
					if err != nil {
						continue
					}
					mu.Lock()
					if took[kind] == nil {
						took[kind] = map[int]bool{}
					}
					took[kind][w] = true
					mu.Unlock()
					holdWithFaults(ctx, c, s, link, h, rng, log)
				}
				cctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
				s.Close(cctx)
				cancel()
			}
		})
	}
	wg.Wait()
	n := map[string]int{}
	for k, ws := range took {
		n[k] = len(ws)
	}
	return n
}

// holdWithFaults makes guarded writes under h and, now and then, suffers
// a fault, then unlocks.
func holdWithFaults(ctx context.Context, c *fencingtest.Cluster, s *fencing.Session, link *fencingtest.Link, h *fencing.Hold,
	rng *rand.Rand, log *writeLog) {
	for range 1 + rng.IntN(3) {
		log.write(ctx, s.Client(), h)
	}
	switch rng.IntN(12) {
	case 0: // partitioned past its TTL: the lease expires, the others go on
		link.Blackhole()
		<-s.Done()
		link.Restore()
	case 1: // an operator deletes the key
		c.Admin.Delete(ctx, h.Key())
	case 2: // an operator revokes the lease
		c.Admin.Revoke(ctx, s.Lease())
	}
	log.write(ctx, s.Client(), h) // refused unless the hold survived
	uctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	h.Unlock(uctx)
	cancel()
}
