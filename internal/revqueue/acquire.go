package revqueue

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"go.etcd.io/etcd/api/v3/mvccpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/grpc/codes"
)

// ErrLeaseGone is returned by Acquire when the server no longer has the
// session's lease: it refused the enqueue, or the key went with the lease.
var ErrLeaseGone = errors.New("revqueue: lease gone")

// Session is what acquiring needs of a fencing.Session.
type Session interface {
	Client() *clientv3.Client
	Lease() clientv3.LeaseID
	TTL() time.Duration
	// Context ends when the session stops vouching for its lease.
	Context() context.Context
}

// Prefix is the key range of one name of one kind ("lock", "election"):
// "leasehold/lock/12:jobs/billing/". The name's length comes first, so no key
// of another name starts with it, whatever the names ("a" owns
// "leasehold/lock/1:a/", "a/b" owns "leasehold/lock/3:a/b/"), and keys stay
// printable for operators, logs and environment variables.
func Prefix(kind, name string) string {
	return "leasehold/" + kind + "/" + strconv.Itoa(len(name)) + ":" + name + "/"
}

var seq atomic.Uint64

// newKey returns a key under prefix that no other acquire, in any process,
// ever uses: the lease is unique to one session, the sequence to the process.
// The creation time (Unix milliseconds, by this process's clock) in between
// lets operators see how long a key has waited or held; nothing relies on it.
func newKey(prefix string, lease clientv3.LeaseID) string {
	return fmt.Sprintf("%s%016x-%d-%d", prefix, int64(lease), time.Now().UnixMilli(), seq.Add(1))
}

// ParseKey splits a key written by Acquire into its kind, name and the
// creation time its writer recorded (zero when the key has none). It reports
// false for a key of any other shape.
func ParseKey(key string) (kind, name string, created time.Time, ok bool) {
	rest, ok := strings.CutPrefix(key, "leasehold/")
	if !ok {
		return "", "", time.Time{}, false
	}
	kind, rest, ok = strings.Cut(rest, "/")
	if !ok {
		return "", "", time.Time{}, false
	}
	n, rest, ok := strings.Cut(rest, ":")
	size, err := strconv.Atoi(n)
	if !ok || err != nil || size < 0 || size >= len(rest) || rest[size] != '/' || strconv.Itoa(size) != n {
		return "", "", time.Time{}, false
	}
	name, rest = rest[:size], rest[size+1:]
	if parts := strings.Split(rest, "-"); len(parts) == 3 {
		if ms, err := strconv.ParseInt(parts[1], 10, 64); err == nil && ms > 0 {
			created = time.UnixMilli(ms).UTC()
		}
	}
	return kind, name, created, true
}

// Acquire queues one new key holding value on s's lease and waits until it
// owns the queue. See Wait for what ownership means. It returns ErrLost if
// the session ends first (before, during, or as the wait ends), ErrLeaseGone,
// ErrKeyGone, ctx's error or the client's. On every error the key is removed.
func (q Queue) Acquire(ctx context.Context, s Session, value string) (*Entry, error) {
	if err := usable(ctx, s); err != nil {
		return nil, err
	}
	key := newKey(q.Prefix, s.Lease())
	e, err := q.Enqueue(ctx, key, value, s.Lease())
	if err != nil {
		return nil, q.settle(ctx, s, key, err, true)
	}
	return e, q.settle(ctx, s, key, q.Wait(ctx, e, s.Context()), false)
}

// TryAcquire is Acquire that queues only if the queue is empty, in one
// request; otherwise it writes nothing and returns the owner's key-value.
func (q Queue) TryAcquire(ctx context.Context, s Session, value string) (*Entry, *mvccpb.KeyValue, error) {
	if err := usable(ctx, s); err != nil {
		return nil, nil, err
	}
	key := newKey(q.Prefix, s.Lease())
	e, owner, err := q.TryEnqueue(ctx, key, value, s.Lease())
	if err == nil && owner != nil {
		return nil, owner, nil
	}
	return e, nil, q.settle(ctx, s, key, err, err != nil)
}

func usable(ctx context.Context, s Session) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if s.Context().Err() != nil {
		return ErrLost
	}
	return nil
}

// settle classifies the outcome of an acquire and removes the key on
// failure. sent says the enqueue itself failed: its reply may have been lost
// after the key was written.
func (q Queue) settle(ctx context.Context, s Session, key string, err error, sent bool) error {
	if err == nil && s.Context().Err() != nil {
		err = ErrLost // the session ended as the wait did
	}
	if err == nil {
		return nil
	}
	if !(sent && rejected(err)) {
		removeKey(ctx, s, key, sent)
	}
	switch {
	case s.Context().Err() != nil:
		return ErrLost
	case errors.Is(err, rpctypes.ErrLeaseNotFound):
		return ErrLeaseGone
	case errors.Is(err, ErrKeyGone) && leaseGone(s):
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
func leaseGone(s Session) bool {
	ctx, cancel := context.WithTimeout(context.Background(), s.TTL()/3)
	defer cancel()
	ttl, err := s.Client().TimeToLive(ctx, s.Lease())
	return err == nil && ttl.TTL <= 0
}

// removeKey deletes the key of a failed or cancelled acquire (even if ctx is
// done). It tries at once; if that fails, it keeps trying in the background
// for as long as the session lives (once the session ends, the lease takes
// the key). An enqueue whose reply was lost (unsure) may even be applied
// after a delete, so its key is deleted once more a TTL later.
func removeKey(ctx context.Context, s Session, key string, unsure bool) {
	period := s.TTL() / 3
	removed := tryRemove(context.WithoutCancel(ctx), key, s, period)
	if removed && !unsure {
		return
	}
	lives := s.Context()
	go func() {
		delay, again := period/4, unsure
		if removed {
			delay, again = s.TTL(), false
		}
		for {
			pause(lives, delay)
			if lives.Err() != nil {
				return
			}
			if !tryRemove(lives, key, s, period) {
				delay = period / 4
				continue
			}
			if !again {
				return
			}
			delay, again = s.TTL(), false
		}
	}()
}

func tryRemove(ctx context.Context, key string, s Session, timeout time.Duration) bool {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	_, err := s.Client().Delete(ctx, key)
	return err == nil
}
