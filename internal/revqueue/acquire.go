package revqueue

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/leasehold/leasehold/internal/ctxutil"
	"github.com/leasehold/leasehold/internal/sessionlink"
	"go.etcd.io/etcd/api/v3/mvccpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/grpc/codes"
)

// ErrLeaseGone is returned by Acquire when the server no longer has the
// session's lease: it refused the enqueue, or the key went with the lease.
var ErrLeaseGone = errors.New("lease gone")

// Session is what acquiring needs of a fencing.Session.
type Session = sessionlink.Link

// CleanupBudget is how long a failed or cancelled acquire goes on, after its
// ctx has ended, trying to remove its key before it returns; what is left
// carries on in the background, owned by the session. On a healthy cluster a
// delete takes a millisecond or two, so the key is usually gone on return.
const CleanupBudget = 25 * time.Millisecond

// slot is the key of one acquire: "<prefix><lease in hex>-<slot>". No other
// session ever writes it (the lease is the session's), and no other live
// call of this session: a slot is reused only after the call that had it
// has finished with its key (see sessionlink.KeyPool).
type slot struct {
	key     string
	put     func() // hands the slot back; only once the key is known gone
	written bool   // an enqueue of the key succeeded
	unsure  bool   // an enqueue of the key failed without an answer: it may yet be applied
}

func (q Queue) newSlot(s *Session) *slot {
	n := s.Keys.Get(q.Prefix)
	return &slot{
		key: q.Prefix + s.KeyStem + strconv.FormatUint(n, 10),
		put: func() { s.Keys.Put(q.Prefix, n) },
	}
}

// release is an Entry's Free: it runs once the owner's delete of the key has
// returned, with retire set when an earlier delete of this life failed
// unanswered (it may be applied late, onto the key's next life).
func (sl *slot) release(s *Session) func(retire bool) {
	return func(retire bool) {
		switch {
		case sl.unsure:
			sweep(s, sl.key) // a lost enqueue may yet write the key again
		case !retire:
			sl.put()
		}
	}
}

// Acquire queues one new key holding value on s's lease and waits until it
// owns the queue. See Wait for what ownership means. It returns ErrLost if
// the session ends first (before, during, or as the wait ends), ErrLeaseGone,
// ErrKeyGone, ctx's error or the client's. On every error the key is removed.
// On success, the caller calls the Entry's Free once it has deleted the key.
//
// An enqueue that fails for a passing reason (a lost reply, a leader
// change) is sent again, with the same key, until ctx ends: the key is this
// call's alone, so the repeat finds it if the lost attempt wrote it, and
// keeps its place in the queue. One call never has two keys.
func (q Queue) Acquire(ctx context.Context, s *Session, value string) (*Entry, error) {
	if err := usable(ctx, s); err != nil {
		return nil, err
	}
	sl := q.newSlot(s)
	var e *Entry
	err := retry(ctx, s.Life, q.Latency, &sl.unsure, func(ctx context.Context) (err error) {
		e, err = q.Enqueue(ctx, sl.key, value, s.Lease)
		return err
	})
	if err != nil {
		return nil, q.settle(ctx, s, sl, err)
	}
	sl.written = true
	e.Free = sl.release(s)
	return e, q.settle(ctx, s, sl, q.Wait(ctx, e, s.Life))
}

// TryAcquire is Acquire that queues only if the queue is empty, in one
// request; otherwise it writes nothing and returns the owner's key-value.
// Like Acquire, it sends the request again after a passing failure; the
// repeat that finds this call's own key at the head owns with it.
func (q Queue) TryAcquire(ctx context.Context, s *Session, value string) (*Entry, *mvccpb.KeyValue, error) {
	if err := usable(ctx, s); err != nil {
		return nil, nil, err
	}
	sl := q.newSlot(s)
	var (
		e     *Entry
		owner *mvccpb.KeyValue
	)
	err := retry(ctx, s.Life, q.Latency, &sl.unsure, func(ctx context.Context) (err error) {
		e, owner, err = q.TryEnqueue(ctx, sl.key, value, s.Lease)
		return err
	})
	switch {
	case err != nil:
		return nil, nil, q.settle(ctx, s, sl, err)
	case owner != nil && string(owner.Key) == sl.key:
		// A lost attempt queued the key, alone: it owns.
		e = &Entry{Key: sl.key, Rev: owner.CreateRevision, readRev: owner.ModRevision}
	case owner != nil:
		return nil, owner, q.settle(ctx, s, sl, errTaken)
	}
	sl.written = true
	e.Free = sl.release(s)
	return e, nil, q.settle(ctx, s, sl, nil)
}

// errTaken is TryAcquire finding the queue taken: an error for settle only.
var errTaken = errors.New("queue taken")

// AttemptFloor is the least time one attempt of a retried request gets;
// more when requests are slow (see attemptTimeout). A write that reaches a
// leader as it hands leadership over is dropped without an answer, and etcd
// gives up on it only at its request timeout (7 s by default): a new
// attempt reaches the new leader at once.
const AttemptFloor = 500 * time.Millisecond

// attemptCeiling caps the growth of an attempt's time.
const attemptCeiling = 8 * time.Second

// attemptTimeout is how long attempt n (from 0) of a request may wait for
// its answer: four times the usual request time, at least AttemptFloor,
// doubled for each earlier attempt that got no answer (a link slower than
// the estimate), at most attemptCeiling. The estimate learns from every
// answer, so a client far from its cluster is not cut short for long.
func attemptTimeout(lat *sessionlink.Latency, n int) time.Duration {
	d := max(AttemptFloor, 4*lat.Get())
	for range n {
		if d *= 2; d >= attemptCeiling {
			return attemptCeiling
		}
	}
	return min(d, attemptCeiling)
}

// errNoAnswer is an attempt that got no answer in its time.
var errNoAnswer = errors.New("no answer")

// Retry runs send until it succeeds, fails for good (an answer, not a
// passing failure: see Unknown), or ctx ends, backing off between attempts;
// each attempt gets attemptTimeout. It sets *unsure when an attempt's
// outcome is unknown. For idempotent writes: Unlock, Resign, Proclaim. When
// ctx ends during a backoff, the error is ctx's, with the last attempt's.
func Retry(ctx context.Context, lat *sessionlink.Latency, unsure *bool, send func(context.Context) error) error {
	return retry(ctx, ctx, lat, unsure, send)
}

// retry is Retry that also stops once life ends.
func retry(ctx, life context.Context, lat *sessionlink.Latency, unsure *bool, send func(context.Context) error) error {
	wait, unanswered := retryMin, 0
	for {
		err := attempt(ctx, life, lat, unanswered, send)
		if err == nil {
			return nil
		}
		*unsure = *unsure || Unknown(err)
		if !transient(err) || ctx.Err() != nil || life.Err() != nil {
			return err
		}
		if errors.Is(err, errNoAnswer) {
			unanswered++ // it has waited enough: no backoff
		} else {
			pause(ctx, wait)
			wait = min(2*wait, retryMax)
		}
		if ctx.Err() != nil {
			return fmt.Errorf("%w (last attempt: %v)", ctx.Err(), err)
		}
	}
}

// attempt runs send with a ctx cancelled after attemptTimeout(lat, n), or
// once life ends, and feeds the time of an answered attempt to lat.
func attempt(ctx, life context.Context, lat *sessionlink.Latency, n int, send func(context.Context) error) error {
	// A timer that cancels, not a deadline: a deadline travels with the
	// request (grpc-timeout) and costs both ends a timer per request.
	actx, cancel := context.WithCancel(ctx)
	defer cancel()
	if life != ctx {
		defer context.AfterFunc(life, cancel)()
	}
	d := attemptTimeout(lat, n)
	t := time.AfterFunc(d, cancel)
	defer t.Stop()
	start := time.Now()
	err := send(actx)
	switch {
	case err == nil:
		lat.Observe(time.Since(start))
	case ctx.Err() == nil && life.Err() == nil && actx.Err() != nil:
		return fmt.Errorf("%w within %v: %w", errNoAnswer, d, err)
	}
	return err
}

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
		sl.put() // nothing was written
	}
	switch {
	case errors.Is(err, errTaken):
		return nil
	case s.Life.Err() != nil:
		return ErrLost
	case errors.Is(err, rpctypes.ErrLeaseNotFound):
		return ErrLeaseGone
	case errors.Is(err, ErrKeyGone) && leaseGone(ctx, s):
		return ErrLeaseGone
	}
	return err
}

// rejected reports whether etcd refused a request outright (no permission,
// no such lease, no leader, a dropped proposal): then it wrote nothing, and
// there is no key to remove. Only etcd's own answers count: the gRPC client
// reports some failures after the request was applied (a reply too large).
func rejected(err error) bool {
	var ee rpctypes.EtcdError
	if errors.As(err, &ee) {
		switch ee.Code() {
		case codes.PermissionDenied, codes.Unauthenticated, codes.InvalidArgument, codes.NotFound, codes.FailedPrecondition,
			codes.ResourceExhausted, codes.OutOfRange, codes.AlreadyExists, codes.Unimplemented:
			return true
		}
	}
	return errors.Is(err, rpctypes.ErrNoLeader) || dropped(err)
}

// dropped reports a proposal raft refused before appending it (a leader
// handing over, a full proposal queue): etcd passes it on as text.
func dropped(err error) bool { return strings.Contains(err.Error(), "raft proposal dropped") }

// stopping reports raft's "stopped" from a member shutting down: passing,
// but the proposal may have been appended, and committed by the next leader.
func stopping(err error) bool { return strings.Contains(err.Error(), "raft: stopped") }

// Unknown reports whether a write that failed with err may yet have been
// applied: the request may have reached etcd and its reply been lost (a
// timeout, a broken connection, ctx ending in flight). A refusal that etcd
// answered (no leader, a dropped proposal, no permission) applied nothing.
func Unknown(err error) bool {
	return err != nil && !rejected(err)
}

// leaseGone tells whether the server lost s's lease, which the session itself
// learns only at its next renewal.
func leaseGone(ctx context.Context, s *Session) bool {
	ctx, cancel := ctxutil.Detach(ctx, CleanupBudget, s.TTL/3)
	defer cancel()
	ttl, err := s.Client.TimeToLive(ctx, s.Lease)
	return err == nil && ttl.TTL <= 0
}

// removeKey deletes the key of a failed or cancelled acquire. It tries once,
// for CleanupBudget past ctx's end; if that fails, the session keeps trying
// in the background for as long as it lives (once it ends, the lease takes
// the key). The slot is free again only if the first delete returned and
// every enqueue was answered: a request whose reply was lost may yet be
// applied, so such a slot is never reused, and its key is swept for the
// rest of the session (see sweep).
func removeKey(ctx context.Context, s *Session, sl *slot) {
	dctx, cancel := ctxutil.Detach(ctx, CleanupBudget, s.TTL/3)
	removed := tryRemove(dctx, s, sl.key)
	cancel()
	switch {
	case sl.unsure:
		sweep(s, sl.key) // deletes the key now if the try failed, and whenever it comes back
	case removed:
		sl.put()
	default:
		s.Go(func() {
			for wait := retryMin; s.Life.Err() == nil; wait = min(2*wait, retryMax) {
				pause(s.Life, wait)
				tctx, cancel := context.WithTimeout(s.Life, s.TTL/3)
				ok := tryRemove(tctx, s, sl.key)
				cancel()
				if ok {
					return
				}
			}
		})
	}
}

// sweep keeps key deleted for as long as the session lives. An enqueue of
// key whose reply was lost may be applied after any delete of ours (etcd
// gives no bound), and the session's lease would then keep a ghost key in
// the queue, ahead of every later waiter, until the session ends. So a
// watch, from before a read that finds any such write, deletes each new
// life of the key as it appears. The slot is never reused, so nothing else
// writes key. Once the session ends its lease is gone, and a late enqueue
// on it fails.
func sweep(s *Session, key string) {
	s.Go(func() {
		for wait := retryMin; s.Life.Err() == nil; wait = min(2*wait, retryMax) {
			if sweepOnce(s, key) {
				wait = retryMin // the watch broke after working: no reason to wait long
			}
			pause(s.Life, wait)
		}
	})
}

// sweepOnce watches key and deletes it whenever it exists, until the watch
// breaks or the session ends. It reports whether the watch was armed and
// every delete succeeded.
func sweepOnce(s *Session, key string) (armed bool) {
	ctx, cancel := context.WithCancel(clientv3.WithRequireLeader(s.Life))
	defer cancel()
	for resp := range s.Client.Watch(ctx, key, clientv3.WithCreatedNotify(), clientv3.WithFilterDelete()) {
		if resp.Canceled || resp.Err() != nil {
			return armed
		}
		armed = true
		// On creation, a write made before the watch; then each put.
		dctx, dcancel := context.WithTimeout(s.Life, s.TTL/3)
		ok := tryRemove(dctx, s, key)
		dcancel()
		if !ok {
			return false // refused or unanswered: back off, as for a watch that fails to arm
		}
	}
	return armed
}

func tryRemove(ctx context.Context, s *Session, key string) bool {
	_, err := s.Client.Delete(ctx, key)
	return err == nil
}
