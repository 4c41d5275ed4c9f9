package revqueue

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/leasehold/leasehold/internal/retry"
	"github.com/leasehold/leasehold/internal/watchstream"
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

// waitEnds returns once the lives in e.ahead ended after e.readRev (sure):
// any one of them when any is set, else all of them; or once a watch
// failure leaves the question open. One watch of the keys under Prefix+dir,
// deletes only: ends are counted here, with no request until the last.
func (q Queue) waitEnds(ctx context.Context, e *Entry, dir string, any bool) (sure bool, err error) {
	wctx, cancel := context.WithCancel(clientv3.WithRequireLeader(ctx))
	defer cancel()
	left := make(map[string]bool, len(e.ahead))
	for _, t := range e.ahead {
		left[t.key] = true
	}
	ended := func() bool { return len(left) < len(e.ahead) && (any || len(left) == 0) }
	wctx = watchstream.Context(wctx, q.Client)
	wch := q.Client.Watch(wctx, q.Prefix+dir, clientv3.WithPrefix(), clientv3.WithCreatedNotify(), clientv3.WithFilterPut())
	for resp := range wch {
		if resp.Canceled || resp.Err() != nil {
			watchstream.Ended(wctx, q.Client, resp)
			break
		}
		if resp.Created {
			if resp.Header.Revision <= e.readRev {
				continue
			}
			// The gap since the read: nothing can join ahead of e, so a
			// life ahead is over iff it is not among the keys ahead now.
			var g *clientv3.GetResponse
			err := retry.Attempt(ctx, ctx, q.Latency, 0, func(ctx context.Context) (err error) {
				g, err = q.Client.Get(ctx, q.Prefix+dir, clientv3.WithPrefix(), clientv3.WithKeysOnly(), clientv3.WithMaxCreateRev(e.Rev-1))
				return err
			})
			if err != nil {
				return false, err
			}
			live := lives(g.Kvs)
			for _, t := range e.ahead {
				if !live[t] {
					delete(left, t.key)
				}
			}
		}
		for _, ev := range resp.Events {
			// A watch made on a member that lags may first deliver the
			// delete of an earlier life of a key, before readRev.
			if ev.Kv.ModRevision > e.readRev {
				delete(left, string(ev.Kv.Key))
			}
		}
		if ended() {
			return true, nil
		}
	}
	return false, ctx.Err()
}

// lives is the set of the lives of kvs.
func lives(kvs []*mvccpb.KeyValue) map[target]bool {
	live := make(map[target]bool, len(kvs))
	for _, kv := range kvs {
		live[target{string(kv.Key), kv.CreateRevision}] = true
	}
	return live
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

// Readers is the readers' side of a read-write lock whose keys are all
// under Prefix: readers' under Prefix + "r/", writers' under Prefix + "w/".
// A reader owns once no writer's key is older than its own, so readers
// queued together enter together, and a queued writer holds back the
// readers behind it. A reader waits on the newest writer ahead of it: a
// writer's release wakes exactly the readers queued behind it.
type Readers struct{ Queue }

// NewReaders returns the readers' side of the read-write lock whose keys
// are under prefix.
func NewReaders(q Queue) Readers {
	q.KeyDir = "r/"
	return Readers{q}
}

// Writers is the writers' side of the read-write lock whose keys are under
// Prefix (see Readers): a writer owns once no key at all is older. Behind a
// writer it waits on that writer, as a mutex's waiter does. Behind readers
// it waits on all the readers queued since the writer ahead of them, with
// one watch, counting their ends itself: their releases, in any order and
// however many, cost it no request until the last.
type Writers struct{ Queue }

// NewWriters returns the writers' side of the read-write lock whose keys
// are under prefix.
func NewWriters(q Queue) Writers {
	q.KeyDir = "w/"
	return Writers{q}
}

// Acquire is Queue.Acquire under the writers' rule.
func (w Writers) Acquire(ctx context.Context, s *Session, value string) (*Entry, error) {
	return w.acquire(ctx, s, value, w.enqueue, func(ctx context.Context, e *Entry, lost context.Context) error {
		return w.wait(ctx, e, lost, func(ctx context.Context) (bool, error) {
			if e.ahead != nil {
				return w.waitEnds(ctx, e, "r/", false)
			}
			return w.waitDeleted(ctx, e.pred, e.predRev, e.readRev, false)
		}, w.confirm(e))
	})
}

// enqueue writes key and reads its predecessor: a writer it waits on, or a
// reader, behind which it reads where it stands.
func (w Writers) enqueue(ctx context.Context, key, value string, lease clientv3.LeaseID) (*Entry, error) {
	e, newest, err := w.put(ctx, key, value, lease, 2, w.confirm)
	if err != nil || newest == nil || len(newest.Kvs) < 2 {
		return e, err
	}
	if pred := newest.Kvs[1]; strings.HasPrefix(string(pred.Key), w.Prefix+w.KeyDir) {
		// With two keys in the queue, the predecessor is the owner.
		e.pred, e.predRev, e.predOwner = string(pred.Key), pred.CreateRevision, newest.Count == 2
		return e, nil
	}
	return e, w.confirm(e)(ctx, false)
}

// confirm reads where e stands: its key alive, the newest writer ahead and
// every reader ahead. When the writer just gone was the owner, nothing can
// be ahead any more: only e's own key is checked.
func (w Writers) confirm(e *Entry) func(ctx context.Context, sure bool) error {
	return func(ctx context.Context, sure bool) error {
		if sure && e.predOwner {
			e.predOwner = false
			return w.own(ctx, e)
		}
		resp, err := w.read(ctx, e, newestWriter(w.Prefix, e.Rev),
			clientv3.OpGet(w.Prefix+"r/", clientv3.WithPrefix(), clientv3.WithKeysOnly(), clientv3.WithMaxCreateRev(e.Rev-1)))
		if err != nil {
			return err
		}
		w.place(e, first(resp.Responses[0].GetResponseRange().Kvs), resp.Responses[1].GetResponseRange().Kvs)
		return nil
	}
}

// place sets what e waits on: the readers queued after the newest writer
// ahead of it, or else that writer.
func (w Writers) place(e *Entry, writer *mvccpb.KeyValue, readers []*mvccpb.KeyValue) {
	e.pred, e.predOwner, e.ahead, e.puts, e.fast = "", false, nil, false, false
	var run []*mvccpb.KeyValue
	for _, kv := range readers {
		if writer == nil || kv.CreateRevision > writer.CreateRevision {
			run = append(run, kv)
		}
	}
	switch {
	case len(run) > 0:
		e.ahead = targets(run)
	case writer != nil:
		e.pred, e.predRev = string(writer.Key), writer.CreateRevision
	}
}

// Acquire is Queue.Acquire under the readers' rule.
func (r Readers) Acquire(ctx context.Context, s *Session, value string) (*Entry, error) {
	return r.acquire(ctx, s, value, r.enqueue, func(ctx context.Context, e *Entry, lost context.Context) error {
		return r.wait(ctx, e, lost, func(ctx context.Context) (bool, error) {
			return r.waitDeleted(ctx, e.ahead[0].key, e.ahead[0].rev, e.readRev, false)
		}, r.confirm(e))
	})
}

// TryAcquire takes a read hold if no writer holds or waits, in one
// request; otherwise it writes nothing and returns the oldest writer.
func (r Readers) TryAcquire(ctx context.Context, s *Session, value string) (*Entry, *mvccpb.KeyValue, error) {
	return r.tryAcquire(ctx, s, value, func(ctx context.Context, key, value string, lease clientv3.LeaseID) (*Entry, *mvccpb.KeyValue, error) {
		resp, err := r.Client.Txn(ctx).
			If(clientv3.Compare(clientv3.CreateRevision(r.writers()), "=", 0).WithPrefix()).
			// A repeat after a lost reply puts the key again: read its
			// create revision back rather than assume the put made it.
			Then(clientv3.OpPut(key, value, clientv3.WithLease(lease)), clientv3.OpGet(key, clientv3.WithKeysOnly())).
			Else(clientv3.OpGet(r.writers(), clientv3.WithFirstCreate()...)).
			Commit()
		if err != nil {
			return nil, nil, err
		}
		if err := shape(resp, 1); err != nil {
			return nil, nil, err
		}
		kv := first(resp.Responses[len(resp.Responses)-1].GetResponseRange().Kvs)
		switch {
		case kv == nil:
			return nil, nil, fmt.Errorf("%w: no key where one was read", retry.ErrMalformed)
		case !resp.Succeeded:
			return nil, kv, nil
		}
		return &Entry{Key: key, Rev: kv.CreateRevision, readRev: resp.Header.Revision}, nil, nil
	})
}

func (r Readers) writers() string { return r.Prefix + "w/" }

// newestWriter reads the newest writer's key of the read-write lock under
// prefix, older than rev when rev > 0.
func newestWriter(prefix string, rev int64) clientv3.Op {
	opts := []clientv3.OpOption{clientv3.WithPrefix(), clientv3.WithKeysOnly(),
		clientv3.WithSort(clientv3.SortByCreateRevision, clientv3.SortDescend), clientv3.WithLimit(1)}
	if rev > 0 {
		opts = append(opts, clientv3.WithMaxCreateRev(rev-1))
	}
	return clientv3.OpGet(prefix+"w/", opts...)
}

// enqueue writes key and reads the newest writer, which is ahead of it.
func (r Readers) enqueue(ctx context.Context, key, value string, lease clientv3.LeaseID) (*Entry, error) {
	resp, err := r.Client.Txn(ctx).If(clientv3.Compare(clientv3.CreateRevision(key), "=", 0)).Then(
		clientv3.OpPut(key, value, clientv3.WithLease(lease)), clientv3.OpGet(key, clientv3.WithKeysOnly()), newestWriter(r.Prefix, 0),
	).Else(clientv3.OpGet(key, clientv3.WithKeysOnly())).Commit()
	if err != nil {
		return nil, err
	}
	if !resp.Succeeded {
		return r.rejoin(ctx, resp, r.confirm)
	}
	if err := shape(resp, 3); err != nil {
		return nil, err
	}
	own := first(resp.Responses[1].GetResponseRange().Kvs)
	if own == nil {
		return nil, fmt.Errorf("%w: own key not read back", retry.ErrMalformed)
	}
	e := &Entry{Key: key, Rev: own.CreateRevision, readRev: resp.Header.Revision}
	r.place(e, first(resp.Responses[2].GetResponseRange().Kvs))
	return e, nil
}

// confirm reads where e stands: its key alive, and the newest writer ahead.
func (r Readers) confirm(e *Entry) func(ctx context.Context, sure bool) error {
	return func(ctx context.Context, _ bool) error {
		resp, err := r.read(ctx, e, newestWriter(r.Prefix, e.Rev))
		if err != nil {
			return err
		}
		r.place(e, first(resp.Responses[0].GetResponseRange().Kvs))
		return nil
	}
}

func (r Readers) place(e *Entry, writer *mvccpb.KeyValue) {
	e.pred, e.ahead, e.puts, e.fast = "", nil, false, false
	if writer != nil {
		e.ahead = targets([]*mvccpb.KeyValue{writer})
	}
}

// rejoin makes the entry of a key an enqueue found already written, and
// finds where it stands.
func (q Queue) rejoin(ctx context.Context, resp *clientv3.TxnResponse, confirm func(*Entry) func(context.Context, bool) error) (*Entry, error) {
	if err := shape(resp, 1); err != nil {
		return nil, err
	}
	kv := first(resp.Responses[0].GetResponseRange().Kvs)
	if kv == nil {
		return nil, fmt.Errorf("%w: no key where the compare found one", retry.ErrMalformed)
	}
	e := &Entry{Key: string(kv.Key), Rev: kv.CreateRevision, readRev: resp.Header.Revision}
	return e, confirm(e)(ctx, false)
}

// read runs ops in one txn that first checks e's key is alive, and records
// the read's revision.
func (q Queue) read(ctx context.Context, e *Entry, ops ...clientv3.Op) (*clientv3.TxnResponse, error) {
	if len(ops) == 0 {
		// A txn of compares alone is served by any member from its own,
		// maybe lagging, state; a linearizable read goes through the leader.
		ops = []clientv3.Op{clientv3.OpGet(e.Key, clientv3.WithCountOnly())}
	}
	resp, err := q.Client.Txn(ctx).If(clientv3.Compare(clientv3.CreateRevision(e.Key), "=", e.Rev)).Then(ops...).Commit()
	if err != nil {
		return nil, err
	}
	if !resp.Succeeded {
		return nil, gone(e, resp)
	}
	if err := shape(resp, len(ops)); err != nil {
		return nil, err
	}
	e.readRev = resp.Header.Revision
	return resp, nil
}

// own checks e's key is alive: all an entry needs once nothing ahead can
// hold it back.
func (q Queue) own(ctx context.Context, e *Entry) error {
	if _, err := q.read(ctx, e); err != nil {
		return err
	}
	e.pred, e.ahead = "", nil
	return nil
}

func targets(kvs []*mvccpb.KeyValue) []target {
	ts := make([]target, len(kvs))
	for i, kv := range kvs {
		ts[i] = target{string(kv.Key), kv.CreateRevision}
	}
	return ts
}
