package revqueue

import (
	"context"
	"errors"
	"strconv"
	"time"

	"github.com/leasehold/leasehold/internal/admit"
	"github.com/leasehold/leasehold/internal/lifetime"
	"github.com/leasehold/leasehold/internal/ownwatch"
	"github.com/leasehold/leasehold/internal/retry"
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
// ownwatch.ErrKeyDeleted, ctx's error or the client's. On every error the key is removed.
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
	return failure(ctx, s, err)
}

// failure is what an acquire that failed with err, its keys removed,
// returns: nil for a try that found the queue taken, ErrLost once the
// session ended, ErrLeaseGone when the server lost the lease, else err.
func failure(ctx context.Context, s *Session, err error) error {
	switch {
	case errors.Is(err, errTaken):
		return nil
	case s.Life.Err() != nil:
		return ErrLost
	case errors.Is(err, rpctypes.ErrLeaseNotFound):
		return ErrLeaseGone
	case errors.Is(err, ownwatch.ErrKeyDeleted) && leaseGone(ctx, s):
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

func tryRemove(ctx context.Context, s *Session, key string) error {
	_, err := retry.Once(s.Latency, ctx, s.Life, func() (*clientv3.DeleteResponse, error) { return s.Client.Delete(ctx, key) })
	return err
}
