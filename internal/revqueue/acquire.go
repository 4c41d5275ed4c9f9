package revqueue

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/leasehold/leasehold/internal/admit"
	"github.com/leasehold/leasehold/internal/lifetime"
	"github.com/leasehold/leasehold/internal/retry"
	"github.com/leasehold/leasehold/internal/watchstream"
	"go.etcd.io/etcd/api/v3/mvccpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// ErrLeaseGone is returned by Acquire when the server no longer has the
// session's lease: it refused the enqueue, or the key went with the lease.
var ErrLeaseGone = errors.New("lease gone")

// Session is what acquiring needs of a fencing.Session.
type Session struct {
	Client *clientv3.Client
	Lease  clientv3.LeaseID
	TTL    time.Duration
	// KeyStem starts the name of every key the session writes in a queue,
	// after the queue's prefix: the lease in hex and a dash.
	KeyStem string
	// Life ends, with the cause, when the session stops vouching for its
	// lease.
	Life context.Context
	// Go runs f in a goroutine the session owns and Close waits for; false,
	// running nothing, once the session has ended.
	Go func(f func()) bool
	// Latency bounds each attempt of a retried request, and holds the
	// session's places in flight.
	Latency *retry.Latency
	Keys    *KeyPool // the session's key slots
	Sweeps  *Sweeps  // the ranges swept for keys of lost replies
}

// CleanupBudget is how long a failed or cancelled acquire goes on, after its
// ctx has ended, trying to remove its key before it returns; what is left
// carries on in the background, owned by the session. On a healthy cluster a
// delete takes a millisecond or two, so the key is usually gone on return.
const CleanupBudget = 25 * time.Millisecond

// slot is the key of one acquire: "<prefix><lease in hex>-<slot>". No other
// session ever writes it (the lease is the session's), and no other live
// call of this session: a slot is reused only after the call that had it
// has finished with its key (see KeyPool).
type slot struct {
	dir     string // the queue's directory: the key is dir + stem + n
	n       uint64
	key     string
	written bool // an enqueue of the key succeeded
	unsure  bool // an enqueue of the key failed without an answer: it may yet be applied
}

func (q Queue) newSlot(s *Session) *slot {
	dir := q.Prefix + q.KeyDir
	n := s.Keys.Get(dir)
	return &slot{dir: dir, n: n, key: dir + s.KeyStem + strconv.FormatUint(n, 10)}
}

// put hands the slot back; only once the key is known gone.
func (sl *slot) put(s *Session) { s.Keys.Put(sl.dir, sl.n) }

// retire gives the slot up for good; the session's sweepers delete its key
// whenever a late request writes it again.
func (sl *slot) retire(s *Session) {
	s.Keys.Retire(sl.dir, sl.n)
	s.Sweeps.Cover(sl.dir+s.KeyStem, func(prefix string, armed func()) context.CancelFunc { return sweep(s, prefix, armed) })
}

// release is an Entry's Free: it runs once the owner's delete of the key has
// returned, with retire set when an earlier delete of this life failed
// unanswered (it may be applied late, onto the key's next life).
func (sl *slot) release(s *Session) func(retire bool) {
	return func(retire bool) {
		if sl.unsure || retire {
			sl.retire(s) // a lost enqueue may yet write the key again
		} else {
			sl.put(s)
		}
	}
}

// Acquire queues one new key holding value on s's lease and waits until it
// owns the queue. See Wait for what ownership means. It returns ErrLost if
// the session ends first (before, during, or as the wait ends), ErrLeaseGone,
// ErrKeyDeleted, ctx's error or the client's. On every error the key is removed.
// On success, the caller calls the Entry's Free once it has deleted the key.
//
// An enqueue that fails for a passing reason (a lost reply, a leader
// change) is sent again, with the same key, until ctx ends: the key is this
// call's alone, so the repeat finds it if the lost attempt wrote it, and
// keeps its place in the queue. One call never has two keys.
func (q Queue) Acquire(ctx context.Context, s *Session, value string) (*Entry, error) {
	return q.acquire(ctx, s, value, q.Enqueue, q.Wait)
}

// acquire is Acquire under any rule: enqueue writes the key and finds its
// place, wait waits for its turn.
func (q Queue) acquire(ctx context.Context, s *Session, value string,
	enqueue func(ctx context.Context, key, value string, lease clientv3.LeaseID) (*Entry, error),
	wait func(ctx context.Context, e *Entry, lost context.Context) error) (*Entry, error) {
	if err := usable(ctx, s); err != nil {
		return nil, err
	}
	sl := q.newSlot(s)
	var e *Entry
	err := retry.Until(ctx, s.Life, q.Latency, &sl.unsure, func(ctx context.Context) (err error) {
		e, err = enqueue(ctx, sl.key, value, s.Lease)
		return err
	})
	if err != nil {
		return nil, q.settle(ctx, s, sl, err)
	}
	sl.written = true
	e.Free = sl.release(s)
	return e, q.settle(ctx, s, sl, wait(ctx, e, s.Life))
}

// TryAcquire is Acquire that queues only if the queue is empty, in one
// request; otherwise it writes nothing and returns the owner's key-value.
// Like Acquire, it sends the request again after a passing failure; the
// repeat that finds this call's own key at the head owns with it.
func (q Queue) TryAcquire(ctx context.Context, s *Session, value string) (*Entry, *mvccpb.KeyValue, error) {
	return q.tryAcquire(ctx, s, value, func(ctx context.Context, key, value string, lease clientv3.LeaseID) (*Entry, *mvccpb.KeyValue, error) {
		e, owner, err := q.TryEnqueue(ctx, key, value, lease)
		if owner != nil && string(owner.Key) == key {
			// A lost attempt queued the key, alone: it owns.
			return &Entry{Key: key, Rev: owner.CreateRevision, readRev: owner.ModRevision}, nil, nil
		}
		return e, owner, err
	})
}

// tryAcquire is TryAcquire under any rule: try either owns at once or
// writes nothing and returns an owner, and owns when a repeat finds the key
// an unanswered attempt wrote.
func (q Queue) tryAcquire(ctx context.Context, s *Session, value string,
	try func(ctx context.Context, key, value string, lease clientv3.LeaseID) (*Entry, *mvccpb.KeyValue, error)) (*Entry, *mvccpb.KeyValue, error) {
	if err := usable(ctx, s); err != nil {
		return nil, nil, err
	}
	sl := q.newSlot(s)
	var (
		e     *Entry
		owner *mvccpb.KeyValue
	)
	err := retry.Until(ctx, s.Life, q.Latency, &sl.unsure, func(ctx context.Context) (err error) {
		e, owner, err = try(ctx, sl.key, value, s.Lease)
		return err
	})
	switch {
	case err != nil:
		return nil, nil, q.settle(ctx, s, sl, err)
	case e == nil:
		return nil, owner, q.settle(ctx, s, sl, errTaken)
	}
	sl.written = true
	e.Free = sl.release(s)
	return e, nil, q.settle(ctx, s, sl, nil)
}

// errTaken is TryAcquire finding the queue taken: an error for settle only.
var errTaken = errors.New("queue taken")

func usable(ctx context.Context, s *Session) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if s.Life.Err() != nil {
		return ErrLost
	}
	return nil
}

// settle classifies the outcome of an acquire and removes the key on
// failure, unless no attempt could have written it.
func (q Queue) settle(ctx context.Context, s *Session, sl *slot, err error) error {
	if err == nil && s.Life.Err() != nil {
		err = ErrLost // the session ended as the wait did
	}
	if err == nil {
		return nil
	}
	if sl.written || sl.unsure {
		removeKey(ctx, s, sl)
	} else {
		sl.put(s) // nothing was written
	}
	switch {
	case errors.Is(err, errTaken):
		return nil
	case s.Life.Err() != nil:
		return ErrLost
	case errors.Is(err, rpctypes.ErrLeaseNotFound):
		return ErrLeaseGone
	case errors.Is(err, ErrKeyDeleted) && leaseGone(ctx, s):
		return ErrLeaseGone
	}
	return err
}

// leaseGone tells whether the server lost s's lease, which the session itself
// learns only at its next renewal.
func leaseGone(ctx context.Context, s *Session) bool {
	ctx, cancel := lifetime.Detach(ctx, CleanupBudget, s.TTL/3)
	defer cancel()
	ttl, err := retry.Once(s.Latency, ctx, s.Life, func() (*clientv3.LeaseTimeToLiveResponse, error) { return s.Client.TimeToLive(ctx, s.Lease) })
	return err == nil && ttl.TTL <= 0
}

// removeKey deletes the key of a failed or cancelled acquire. It tries once,
// for CleanupBudget past ctx's end. The slot is free again only if that
// delete returned and every enqueue was answered, or, if the delete found
// no place in flight in time and was never sent, once a delete in the
// background returns with every attempt answered. Otherwise it is retired:
// the session deletes the key again until a delete returns, if the try
// failed, and a sweeper of the session (see sweep) whenever a request whose reply
// was lost writes it again.
func removeKey(ctx context.Context, s *Session, sl *slot) {
	dctx, cancel := lifetime.Detach(ctx, CleanupBudget, s.TTL/3)
	err := tryRemove(dctx, s, sl.key)
	cancel()
	removed := err == nil
	switch {
	case removed && !sl.unsure:
		sl.put(s)
	case removed:
		sl.retire(s)
	case errors.Is(err, admit.ErrNotSent) && !sl.unsure:
		// The delete waited for a place past its budget (a burst on the
		// session) and was never sent: no delete of this key is in flight,
		// and no enqueue can land late. The slot stays in use, so that no
		// sweeper takes the key for a ghost, until a delete returns with
		// every attempt answered; then it is free again.
		s.Go(func() {
			if removeByName(s, sl.key) {
				sl.put(s)
			} else {
				sl.retire(s)
			}
		})
	default:
		// The key may stand, on a live lease, ahead of every later waiter:
		// a sweeper already running saw it written while its slot was in
		// use, and looks at it no more (TestFailedCleanupBehindSweeperLeavesNoKey).
		// Retired, the slot goes to no new call, so the key can be deleted
		// by name until a delete returns.
		sl.retire(s)
		s.Go(func() { removeByName(s, sl.key) })
	}
}

// removeByName deletes the key of a slot that no call will use again until
// this returns (retired, or held in use), again after each passing failure,
// until a delete returns, etcd refuses it, or the session ends (the lease
// then takes the key). It reports whether a delete returned with no
// attempt left unanswered: then none can land late, on a later life of the
// key.
func removeByName(s *Session, key string) (clean bool) {
	var unsure bool // a delete by name: one landing late removes nothing of a retired slot
	err := retry.Until(s.Life, s.Life, s.Latency, &unsure, func(ctx context.Context) error {
		_, err := s.Client.Delete(ctx, key)
		return err
	})
	return err == nil && !unsure
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

func tryRemove(ctx context.Context, s *Session, key string) error {
	_, err := retry.Once(s.Latency, ctx, s.Life, func() (*clientv3.DeleteResponse, error) { return s.Client.Delete(ctx, key) })
	return err
}
