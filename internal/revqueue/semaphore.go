package revqueue

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/leasehold/leasehold/internal/retry"
	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// ErrLimitMismatch is returned when a semaphore's entry meets a key queued
// with another limit: two processes would otherwise enforce two limits.
var ErrLimitMismatch = errors.New("semaphore limit mismatch")

// Counted is a semaphore: the queue's Limit oldest keys own together. Keys
// only join at the tail, so an entry among the Limit oldest stays among
// them until its key goes: owning its key proves its permit.
//
// Each key sits under Prefix + "<Limit>/", so every entry reads the limit
// of those ahead of it and refuses to share a queue with another limit. An
// entry waits on the one key whose end changes its standing: the first
// waiter on the Limit owners (one watch of the prefix; the end of any owner
// admits it), every later waiter on its direct predecessor, whose deletion
// or admission (a put of its key, Touch) moves it up. A release wakes the
// waiter it admits, and the admitted waiter's put wakes the next.
type Counted struct {
	Queue
	Limit int
}

// NewCounted returns the semaphore of limit permits whose keys are under
// prefix.
func NewCounted(q Queue, limit int) Counted {
	q.KeyDir = strconv.Itoa(limit) + "/"
	return Counted{Queue: q, Limit: limit}
}

// Acquire is Queue.Acquire under the semaphore's rule. An entry that had to
// wait is touched (its key put again, unchanged) once it owns, in the
// background, so that the waiter behind it learns it moved up.
func (c Counted) Acquire(ctx context.Context, s *Session, value string) (*Entry, error) {
	waited := false
	e, err := c.acquire(ctx, s, value, c.enqueue, func(ctx context.Context, e *Entry, lost context.Context) error {
		waited = !e.Owner()
		return c.wait(ctx, e, lost, c.until(e), c.confirm(e))
	})
	if err == nil && waited && c.Limit > 1 {
		s.Go(func() { c.touch(s, e) })
	}
	return e, err
}

// TryAcquire takes a permit if one is free without waiting: one request
// when the queue is empty or full, two when it is neither. Otherwise it
// writes nothing and returns the oldest key.
func (c Counted) TryAcquire(ctx context.Context, s *Session, value string) (*Entry, *mvccpb.KeyValue, error) {
	return c.tryAcquire(ctx, s, value, c.try)
}

// enqueue writes key at the tail and reads the Limit keys ahead of it.
func (c Counted) enqueue(ctx context.Context, key, value string, lease clientv3.LeaseID) (*Entry, error) {
	e, newest, err := c.put(ctx, key, value, lease, int64(c.Limit)+1, c.confirm)
	if err != nil || newest == nil {
		return e, err
	}
	return e, c.place(e, newest.Kvs[1:], newest.More)
}

// confirm returns the full read of where e stands: its key alive, and the
// Limit keys just ahead of it. When sure is set and the end of any key
// ahead admits e, only its own key is checked.
func (c Counted) confirm(e *Entry) func(ctx context.Context, sure bool) error {
	return func(ctx context.Context, sure bool) error {
		if sure && e.fast {
			return c.own(ctx, e)
		}
		resp, err := c.read(ctx, e, clientv3.OpGet(c.Prefix, clientv3.WithPrefix(), clientv3.WithKeysOnly(),
			clientv3.WithMaxCreateRev(e.Rev-1), clientv3.WithSort(clientv3.SortByCreateRevision, clientv3.SortDescend),
			clientv3.WithLimit(int64(c.Limit))))
		if err != nil {
			return err
		}
		rr := resp.Responses[0].GetResponseRange()
		return c.place(e, rr.Kvs, rr.More)
	}
}

// place sets what e waits on from the keys just ahead of it, newest first
// (up to Limit of them; more says there are others).
func (c Counted) place(e *Entry, ahead []*mvccpb.KeyValue, more bool) error {
	for _, kv := range ahead {
		if err := c.sameLimit(kv); err != nil {
			return err
		}
	}
	e.pred, e.ahead, e.puts, e.fast = "", nil, false, false
	switch {
	case len(ahead) < c.Limit:
		// Owns: fewer than Limit keys ahead, and none can join ahead.
	case !more:
		// The first waiter: the end of any of the owners admits it.
		e.ahead, e.fast = targets(ahead), true
	default:
		e.ahead, e.puts = targets(ahead[:1]), c.Limit > 1
	}
	return nil
}

// sameLimit refuses a key queued with another limit.
func (c Counted) sameLimit(kv *mvccpb.KeyValue) error {
	rest, _ := strings.CutPrefix(string(kv.Key), c.Prefix)
	dir, _, _ := strings.Cut(rest, "/")
	if dir+"/" != c.KeyDir {
		return fmt.Errorf("%w: %s was queued with limit %q, this call's is %d", ErrLimitMismatch, kv.Key, dir, c.Limit)
	}
	return nil
}

// until waits for the end of what e waits on: one key as Queue.Wait does
// (and its puts when they matter), or any of the owners.
func (c Counted) until(e *Entry) func(ctx context.Context) (bool, error) {
	return func(ctx context.Context) (bool, error) {
		if len(e.ahead) == 1 {
			return c.waitDeleted(ctx, e.ahead[0].key, e.ahead[0].rev, e.readRev, e.puts)
		}
		// The first waiter alone watches the owners: the end of any admits it.
		return c.waitEnds(ctx, e, "", true)
	}
}

// touch puts e's key again, unchanged, while it is e's, so that a waiter
// watching it learns it owns and moves up. It retries passing failures for
// as long as the session lives; a put that lands after the key went
// changes nothing (the compare).
func (c Counted) touch(s *Session, e *Entry) {
	var unsure bool
	retry.Do(s.Life, s.Client, c.Latency, &unsure, func(ctx context.Context) error {
		_, err := c.Client.Txn(ctx).If(clientv3.Compare(clientv3.CreateRevision(e.Key), "=", e.Rev)).
			Then(clientv3.OpPut(e.Key, "", clientv3.WithIgnoreValue(), clientv3.WithIgnoreLease())).Commit()
		return err
	})
}

// try takes a free permit: one txn that writes key only if the queue is
// empty, and otherwise reads the oldest Limit keys; while fewer than Limit
// keys are queued, a second txn writes key only if no key joined since.
func (c Counted) try(ctx context.Context, key, value string, lease clientv3.LeaseID) (*Entry, *mvccpb.KeyValue, error) {
	oldest := clientv3.OpGet(c.Prefix, clientv3.WithPrefix(),
		clientv3.WithSort(clientv3.SortByCreateRevision, clientv3.SortAscend), clientv3.WithLimit(int64(c.Limit)))
	free := clientv3.Compare(clientv3.CreateRevision(c.Prefix), "=", 0).WithPrefix()
	// Others may take the room first: give up as taken after a few tries.
	for range 4 {
		resp, err := c.Client.Txn(ctx).If(free).Then(clientv3.OpPut(key, value, clientv3.WithLease(lease))).Else(oldest).Commit()
		if err != nil {
			return nil, nil, err
		}
		if resp.Succeeded {
			return &Entry{Key: key, Rev: resp.Header.Revision, readRev: resp.Header.Revision}, nil, nil
		}
		if err := shape(resp, 1); err != nil {
			return nil, nil, err
		}
		rr := resp.Responses[0].GetResponseRange()
		for _, kv := range rr.Kvs {
			if string(kv.Key) == key {
				// An unanswered attempt wrote it among the oldest: it owns.
				return &Entry{Key: key, Rev: kv.CreateRevision, readRev: resp.Header.Revision}, nil, nil
			}
			if err := c.sameLimit(kv); err != nil {
				return nil, nil, err
			}
		}
		if rr.Count >= int64(c.Limit) {
			return nil, first(rr.Kvs), nil
		}
		// Room: write key if no key joined since this read (keys that
		// left only make more room).
		free = clientv3.Compare(clientv3.CreateRevision(c.Prefix), "<", resp.Header.Revision+1).WithPrefix()
	}
	return nil, nil, errTaken
}
