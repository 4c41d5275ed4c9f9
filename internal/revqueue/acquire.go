package revqueue

import (
	"context"
	"errors"
	"strconv"
	"time"

	"github.com/leasehold/leasehold/internal/ctxutil"
	"github.com/leasehold/leasehold/internal/sessionlink"
	"go.etcd.io/etcd/api/v3/mvccpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
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
	key  string
	free func() // hands the slot back; only once the key is known gone
}

func (q Queue) newSlot(s *Session) slot {
	n := s.Keys.Get(q.Prefix)
	return slot{
		key:  q.Prefix + s.KeyStem + strconv.FormatUint(n, 10),
		free: func() { s.Keys.Put(q.Prefix, n) },
	}
}

// Acquire queues one new key holding value on s's lease and waits until it
// owns the queue. See Wait for what ownership means. It returns ErrLost if
// the session ends first (before, during, or as the wait ends), ErrLeaseGone,
// ErrKeyGone, ctx's error or the client's. On every error the key is removed.
// On success, the caller calls the Entry's Free once it has deleted the key.
func (q Queue) Acquire(ctx context.Context, s *Session, value string) (*Entry, error) {
	if err := usable(ctx, s); err != nil {
		return nil, err
	}
	sl := q.newSlot(s)
	e, err := q.Enqueue(ctx, sl.key, value, s.Lease)
	if err != nil {
		return nil, q.settle(ctx, s, sl, err, true)
	}
	e.Free = sl.free
	return e, q.settle(ctx, s, sl, q.Wait(ctx, e, s.Life), false)
}

// TryAcquire is Acquire that queues only if the queue is empty, in one
// request; otherwise it writes nothing and returns the owner's key-value.
func (q Queue) TryAcquire(ctx context.Context, s *Session, value string) (*Entry, *mvccpb.KeyValue, error) {
	if err := usable(ctx, s); err != nil {
		return nil, nil, err
	}
	sl := q.newSlot(s)
	e, owner, err := q.TryEnqueue(ctx, sl.key, value, s.Lease)
	if err == nil && owner != nil {
		sl.free() // nothing was written
		return nil, owner, nil
	}
	if e != nil {
		e.Free = sl.free
	}
	return e, nil, q.settle(ctx, s, sl, err, err != nil)
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
// failure. sent says the enqueue itself failed: its reply may have been lost
// after the key was written.
func (q Queue) settle(ctx context.Context, s *Session, sl slot, err error, sent bool) error {
	if err == nil && s.Life.Err() != nil {
		err = ErrLost // the session ended as the wait did
	}
	if err == nil {
		return nil
	}
	if sent && rejected(err) {
		sl.free() // nothing was written
	} else {
		removeKey(ctx, s, sl, sent)
	}
	switch {
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
// no such lease): then it wrote nothing, and there is no key to remove.
func rejected(err error) bool {
	switch code(err) {
	case codes.PermissionDenied, codes.Unauthenticated, codes.InvalidArgument, codes.NotFound, codes.FailedPrecondition:
		return true
	}
	return errors.Is(err, rpctypes.ErrPermissionDenied) || errors.Is(err, rpctypes.ErrLeaseNotFound)
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
// the key). The slot is free again only if the first delete returned, and
// the enqueue's did too: a request whose reply was lost may yet be applied,
// onto the key's next life, so such a slot is never reused. An enqueue whose
// reply was lost (unsure) may even be applied after a delete, so its key is
// deleted once more a TTL later.
func removeKey(ctx context.Context, s *Session, sl slot, unsure bool) {
	key := sl.key
	dctx, cancel := ctxutil.Detach(ctx, CleanupBudget, s.TTL/3)
	removed := tryRemove(dctx, s, key)
	cancel()
	if removed && !unsure {
		sl.free()
		return
	}
	s.Go(func() {
		delay, again := retryMin, unsure
		if removed {
			delay, again = s.TTL, false
		}
		for {
			pause(s.Life, delay)
			if s.Life.Err() != nil {
				return
			}
			tctx, cancel := context.WithTimeout(s.Life, s.TTL/3)
			ok := tryRemove(tctx, s, key)
			cancel()
			switch {
			case !ok:
				delay = min(2*delay, retryMax)
			case again:
				delay, again = s.TTL, false
			default:
				return
			}
		}
	})
}

func tryRemove(ctx context.Context, s *Session, key string) bool {
	_, err := s.Client.Delete(ctx, key)
	return err == nil
}
