package revqueue

import (
	"context"
	"maps"
	"slices"
	"strconv"
	"strings"
	"sync"

	"github.com/leasehold/leasehold/internal/retry"
	"github.com/leasehold/leasehold/internal/watchstream"
	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// MaxSweeps bounds the key ranges a session sweeps for keys written by
// requests whose replies were lost (see sweep), each with one watch
// and one goroutine. The first MaxSweeps queues with a retired slot get a
// range each: the session's own keys in that queue. After that, the two
// ranges (a new queue's among them) that share the longest prefix become
// one, swept as that prefix: every key under it is watched, and the
// session's own are picked out. A session that lost replies in any number
// of queues costs at most MaxSweeps watches once each range has armed.
const MaxSweeps = 16

// Sweeps is the set of key ranges a session sweeps: at most MaxSweeps
// prefixes, none of which starts another. Once a range covers a queue it
// stays covered until the session ends. The zero Sweeps is ready to use.
type Sweeps struct {
	mu   sync.Mutex
	stop map[string]context.CancelFunc // guarded by mu: each swept prefix, and the stop of its sweeper
}

// Cover makes sure mine (a queue's directory and the session's key stem:
// the prefix of every key of the session in that queue) is swept. For each
// prefix the set gains it calls start, with mu held; start calls armed once
// the new sweeper's watch is armed and its first read done, and returns
// the sweeper's stop. The sweepers of the ranges a new prefix replaces stop
// only then: until it arms (a refused watch never does), they go on.
func (s *Sweeps) Cover(mine string, start func(prefix string, armed func()) context.CancelFunc) {
	s.mu.Lock()
	defer s.mu.Unlock()
	ps := slices.Collect(maps.Keys(s.stop))
	add, drop := Plan(ps, mine, MaxSweeps)
	if s.stop == nil {
		s.stop = map[string]context.CancelFunc{}
	}
	for _, a := range add {
		var replaced []context.CancelFunc
		for _, p := range drop {
			if strings.HasPrefix(p, a) {
				replaced = append(replaced, s.stop[p])
			}
		}
		var once sync.Once
		stopReplaced := func() {
			once.Do(func() {
				for _, stop := range replaced {
					stop()
				}
				replaced = nil // nothing of theirs outlives them
			})
		}
		stop := start(a, stopReplaced)
		// Replaced itself before it armed, it hands on those it replaced.
		s.stop[a] = func() { stop(); stopReplaced() }
	}
	for _, p := range drop {
		delete(s.stop, p)
	}
}

// Plan returns how a set of at most limit prefixes, none starting another,
// comes to cover mine: the prefixes to add (none when one of ps already
// starts mine) and those of ps they start, which they replace. Below the
// limit it adds mine. At the limit it merges the two of ps and mine that
// share the longest prefix (the range widens least) into that prefix, and
// adds mine too if the merge left it uncovered. The set stays within the
// limit, none of its prefixes starts another, and it keeps covering
// everything it covered.
func Plan(ps []string, mine string, limit int) (add, drop []string) {
	for _, p := range ps {
		if strings.HasPrefix(mine, p) {
			return nil, nil
		}
	}
	add = []string{mine}
	if len(ps) >= max(limit, 1) {
		all := append(slices.Clone(ps), mine)
		merged, best := "", -1
		for i := range all {
			for _, b := range all[i+1:] {
				if n := common(all[i], b); n > best {
					merged, best = all[i][:n], n
				}
			}
		}
		switch {
		case strings.HasPrefix(mine, merged):
			add = []string{merged}
		case !strings.HasPrefix(merged, mine): // else mine covers the merge
			add = []string{merged, mine}
		}
	}
	for _, p := range ps {
		if slices.ContainsFunc(add, func(a string) bool { return strings.HasPrefix(p, a) }) {
			drop = append(drop, p)
		}
	}
	return add, drop
}

// common returns the length of the longest common prefix of a and b.
func common(a, b string) int {
	n := 0
	for n < len(a) && n < len(b) && a[n] == b[n] {
		n++
	}
	return n
}

// sweep runs a sweeper of the keys under prefix until the session ends or
// the returned stop is called (Sweeps: at most MaxSweeps of
// them, however many queues lost replies), and calls armed once its watch
// is armed and its first read done. An enqueue whose reply was lost
// may be applied after any delete of ours (etcd gives no bound), and the
// session's lease would then keep a ghost key in the queue, ahead of every
// later waiter, until the session ends. The sweeper watches the keys under
// prefix, from before a read that finds any already there, and deletes each
// life of a key of this session whose slot no live call of this session
// held when it saw it (that life only: removeGhost): a retired slot is never
// handed out again, so only a late request writes it. Once the session ends
// its lease is gone, and a late enqueue on it fails.
func sweep(s *Session, prefix string, armed func()) context.CancelFunc {
	ctx, stop := context.WithCancel(s.Life)
	s.Go(func() {
		defer stop()
		armed := sync.OnceFunc(armed)
		for wait := retry.MinBackoff; ctx.Err() == nil; wait = min(2*wait, retry.MaxBackoff) {
			if sweepOnce(ctx, s, prefix, armed) {
				wait = retry.MinBackoff // the watch broke after working: no reason to wait long
			}
			retry.Pause(ctx, wait)
		}
	})
	return stop
}

// sweepOnce watches the keys under prefix and deletes each ghost of the
// session (see sweep): those there when the watch is armed, then each one
// written, until the watch breaks or ctx ends. It reports whether the watch
// was armed and every delete succeeded.
func sweepOnce(ctx context.Context, s *Session, prefix string, onArmed func()) (armed bool) {
	ctx, cancel := context.WithCancel(clientv3.WithRequireLeader(ctx))
	defer cancel()
	ctx = watchstream.Context(ctx, s.Client)
	for resp := range s.Client.Watch(ctx, prefix, clientv3.WithPrefix(), clientv3.WithCreatedNotify(), clientv3.WithFilterDelete()) {
		if resp.Canceled || resp.Err() != nil {
			watchstream.Ended(ctx, s.Client, resp)
			return armed
		}
		var lives []target
		if !armed { // the creation: ghosts written before the watch
			armed = true
			var err error
			if lives, err = ghostsUnder(ctx, s, prefix); err != nil {
				return false
			}
			onArmed()
		}
		for _, ev := range resp.Events {
			if ghost(s, ev.Kv) {
				lives = append(lives, target{string(ev.Kv.Key), ev.Kv.CreateRevision})
			}
		}
		for _, l := range lives {
			dctx, dcancel := context.WithTimeout(ctx, s.TTL/3)
			ok := removeGhost(dctx, s, l)
			dcancel()
			if !ok {
				return false // refused or unanswered: back off, as for a watch that fails to arm
			}
		}
	}
	return armed
}

// sweepPage is how many keys one read of a sweeper's arming takes: a
// shared range may hold any number of other sessions' and the
// application's keys.
const sweepPage = 1000

// ghostsUnder reads the keys under prefix, keys only, in pages of
// sweepPage, and returns the lives of the session's ghosts among them (see
// ghost). Each page gets a third of the session's TTL. The pages need not
// share a revision: a ghost written once the watch is armed is the watch's,
// and one written before stays at its place in key order until deleted.
func ghostsUnder(ctx context.Context, s *Session, prefix string) ([]target, error) {
	var lives []target
	from, end := prefix, clientv3.GetPrefixRangeEnd(prefix)
	for {
		got, err := retry.Once(s.Latency, ctx, s.Life, func() (*clientv3.GetResponse, error) {
			gctx, cancel := context.WithTimeout(ctx, s.TTL/3)
			defer cancel()
			return s.Client.Get(gctx, from, clientv3.WithRange(end), clientv3.WithKeysOnly(), clientv3.WithLimit(sweepPage))
		})
		if err != nil {
			return nil, err
		}
		for _, kv := range got.Kvs {
			if ghost(s, kv) {
				lives = append(lives, target{string(kv.Key), kv.CreateRevision})
			}
		}
		if !got.More || len(got.Kvs) == 0 {
			return lives, nil
		}
		from = string(got.Kvs[len(got.Kvs)-1].Key) + "\x00"
	}
}

// ghost reports whether kv is named as a queue key of the session
// ("<dir><stem><slot>", the slot as the session writes it) whose slot no
// live call holds. A prefix shared by several queues also holds other
// sessions' keys, and the application's own: removeGhost checks the lease,
// which a keys-only read does not carry.
func ghost(s *Session, kv *mvccpb.KeyValue) bool {
	key := string(kv.Key)
	i := strings.LastIndexByte(key, '/') + 1
	rest, ok := strings.CutPrefix(key[i:], s.KeyStem)
	if !ok {
		return false
	}
	n, err := strconv.ParseUint(rest, 10, 64)
	return err == nil && n > 0 && strconv.FormatUint(n, 10) == rest && !s.Keys.InUse(key[:i], n)
}

// removeGhost deletes the life of a key seen with a slot no live call
// held, only if it is still that life, on the session's lease: the slot may
// since have gone back to the pool and to a new call, whose key is the same
// (TestSweeperSparesReusedSlot), and a key under a shared range that only
// looks like the session's is not its to delete.
func removeGhost(ctx context.Context, s *Session, l target) bool {
	_, err := retry.Once(s.Latency, ctx, s.Life, s.Client.Txn(ctx).If(clientv3.Compare(clientv3.CreateRevision(l.key), "=", l.rev),
		clientv3.Compare(clientv3.LeaseValue(l.key), "=", s.Lease)).
		Then(clientv3.OpDelete(l.key)).Commit)
	return err == nil
}
