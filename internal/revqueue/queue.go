// Package revqueue is the revision queue shared by fencing.Mutex and
// election.Election: the keys under one prefix, ordered by create revision,
// whose oldest key owns the name.
//
// Each waiter watches only its direct predecessor, so a handoff wakes one
// waiter whatever the queue length, and every wait re-derives its position
// from a fresh read after any doubt (a broken or compacted watch), never from
// the order of events on different watches.
package revqueue

import (
	"context"
	"errors"
	"fmt"
	"slices"

	"github.com/leasehold/leasehold/internal/ownwatch"
	"github.com/leasehold/leasehold/internal/retry"
	"github.com/leasehold/leasehold/internal/watchstream"
	"go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// ErrLost is returned by Wait when its lost context ended.
var ErrLost = errors.New("session lost while waiting")

// Queue is the waiting line of one name: every key under Prefix. Prefix must
// isolate the name: no key of another name may start with it.
type Queue struct {
	Client *clientv3.Client
	Prefix string
	// KeyDir is where the queue's own entries put their keys, under Prefix:
	// "" for a mutex; a read-write lock's readers and writers, and a
	// semaphore's limit, each have their own (see Counted, Readers).
	KeyDir string
	// Latency, if set, estimates a request's time, to bound each attempt.
	Latency *retry.Latency
	// Watches, if set, is the session's watch stream: a waiter's watch of
	// the key ahead is one more watch on it, with no goroutine of its own
	// (clientv3 gives each Watch call one).
	Watches *ownwatch.Mux
	// Extra, if set, adds to the txns of the plain queue's Enqueue and
	// Wait. Behind a pointer: a Queue is passed by value down every
	// waiter's stack, and 32 bytes more in each frame took a waiter's stack
	// from 8 KiB to 16 (BenchmarkHoldCost).
	Extra *Extra
}

// Extra is what an election's ranked candidate adds to its queue's txns.
type Extra struct {
	// Also are reads made in the same txn as the one that finds an entry
	// owns the queue (Enqueue's or Wait's), so at its revision: their
	// results are the Entry's Also. Only the plain queue's Enqueue and
	// Wait make them.
	Also []clientv3.Op
	// With are writes made in the txn that writes an entry's key, only when
	// it does, ahead of Also (whose reads see them); Wrote, if set, is told
	// of each such txn (Also's results and its revision), and of each that
	// found the key written by an earlier one, whose reply was lost (with
	// no results).
	With  []clientv3.Op
	Wrote func(also []*etcdserverpb.ResponseOp, rev int64)
}

func (q Queue) also() []clientv3.Op {
	if q.Extra == nil {
		return nil
	}
	return q.Extra.Also
}

func (q Queue) with() []clientv3.Op {
	if q.Extra == nil {
		return nil
	}
	return q.Extra.With
}

// wrote tells Extra.Wrote, if set, of an enqueue's txn.
func (q Queue) wrote(also []*etcdserverpb.ResponseOp, rev int64) {
	if q.Extra != nil && q.Extra.Wrote != nil {
		q.Extra.Wrote(also, rev)
	}
}

// Entry is one waiter's place in a queue.
type Entry struct {
	Key string
	Rev int64 // create revision of Key: the fencing token once it owns
	// Free hands the entry's key back to its session. The owner calls it
	// once its delete of Key has returned (Unlock, Resign), with retire set
	// if an earlier delete of this life failed unanswered: then, as when an
	// enqueue of it did, the key is never reused.
	Free func(retire bool)

	pred      string // key of the direct predecessor; "" once Entry owns
	predRev   int64  // create revision of pred: keys are reused, lives are not
	predOwner bool   // pred was the owner when last read
	readRev   int64  // revision of the read that found pred (or ahead)

	// Under a rule other than the mutex's (Counted, Readers), what the
	// entry waits on instead of pred; nil once it owns.
	ahead []target
	puts  bool      // a put on ahead[0] may also let it own: the waiter ahead was admitted
	fast  bool      // the end of any of ahead lets it own: confirm needs only its own key
	w     *weighing // a weighted semaphore's entry: what it knows of the keys ahead

	// Also are the results of the Queue's Also, read in the txn of the
	// entry's last read (the one that found it owns, once it does), at
	// revision AlsoRev.
	Also    []*etcdserverpb.ResponseOp
	AlsoRev int64
}

// target is one life of a key.
type target struct {
	key string
	rev int64
}

// Owner reports whether the entry owned the queue when last read.
func (e *Entry) Owner() bool { return e.pred == "" && e.ahead == nil }

// waitingOn says what the entry waits for, to tell whether a read moved it on.
func (e *Entry) waitingOn() target {
	if len(e.ahead) > 0 {
		return target{e.ahead[0].key, int64(len(e.ahead))}
	}
	return target{e.pred, e.predRev}
}

// Enqueue writes key (with value, on lease) at the tail of the queue in one
// txn, which also reads the entry's direct predecessor and the queue length.
// If key already exists (an earlier Enqueue of it, whose reply was lost, was
// applied), it writes nothing and takes up that key's place instead.
func (q Queue) Enqueue(ctx context.Context, key, value string, lease clientv3.LeaseID) (*Entry, error) {
	e, newest, err := q.put(ctx, key, value, lease, 2, func(e *Entry) func(context.Context, bool) error {
		return func(ctx context.Context, _ bool) error { return q.confirm(ctx, e, true) }
	})
	if err != nil || newest == nil || len(newest.Kvs) < 2 {
		return e, err
	}
	// With two keys in the queue, the predecessor is the owner.
	e.pred, e.predRev, e.predOwner = string(newest.Kvs[1].Key), newest.Kvs[1].CreateRevision, newest.Count == 2
	return e, nil
}

// put writes key (with value, on lease) at the tail of the queue in one txn
// that also reads the n newest keys, ours first, and returns them. If key
// already exists (an earlier put of it, whose reply was lost, was applied),
// it writes nothing, takes up that key's place and returns the entry as
// confirm placed it, with no keys.
func (q Queue) put(ctx context.Context, key, value string, lease clientv3.LeaseID, n int64,
	confirm func(*Entry) func(context.Context, bool) error) (*Entry, *etcdserverpb.RangeResponse, error) {
	ops := append([]clientv3.Op{
		clientv3.OpPut(key, value, clientv3.WithLease(lease)),
		// Within a txn, reads see its writes: our key is the newest, so the
		// n newest keys are ours and those just ahead of it. A sorted range
		// counts every key before the limit: Count is the queue's length.
		clientv3.OpGet(q.Prefix, clientv3.WithPrefix(), clientv3.WithKeysOnly(),
			clientv3.WithSort(clientv3.SortByCreateRevision, clientv3.SortDescend), clientv3.WithLimit(n)),
	}, q.with()...)
	resp, err := q.Client.Txn(ctx).If(clientv3.Compare(clientv3.CreateRevision(key), "=", 0)).Then(append(ops, q.also()...)...).
		Else(clientv3.OpGet(key, clientv3.WithKeysOnly())).Commit()
	if err != nil {
		return nil, nil, err
	}
	if !resp.Succeeded {
		q.wrote(nil, 0)
		e, err := q.rejoin(ctx, resp, confirm)
		return e, nil, err
	}
	if err := shape(resp, len(ops)+len(q.also())); err != nil {
		return nil, nil, err
	}
	rr := resp.Responses[1].GetResponseRange()
	if len(rr.Kvs) == 0 || string(rr.Kvs[0].Key) != key {
		return nil, nil, fmt.Errorf("revqueue: enqueue %q: own key not newest in queue", key)
	}
	e := &Entry{Key: key, Rev: rr.Kvs[0].CreateRevision, readRev: resp.Header.Revision}
	e.also(resp, len(ops))
	q.wrote(e.Also, e.AlsoRev)
	return e, rr, nil
}

// TryEnqueue writes key only if the queue is empty, in one txn. When it is
// not, it writes nothing and returns the owner's key-value instead.
func (q Queue) TryEnqueue(ctx context.Context, key, value string, lease clientv3.LeaseID) (*Entry, *mvccpb.KeyValue, error) {
	resp, err := q.Client.Txn(ctx).
		If(clientv3.Compare(clientv3.CreateRevision(q.Prefix), "=", 0).WithPrefix()).
		Then(clientv3.OpPut(key, value, clientv3.WithLease(lease))).
		Else(clientv3.OpGet(q.Prefix, clientv3.WithFirstCreate()...)).
		Commit()
	if err != nil {
		return nil, nil, err
	}
	if err := shape(resp, 1); err != nil {
		return nil, nil, err
	}
	if !resp.Succeeded {
		return nil, first(resp.Responses[0].GetResponseRange().Kvs), nil
	}
	// The compare proved the range empty, so the put created the key: its
	// create revision is the txn's revision, and no read is needed.
	return &Entry{Key: key, Rev: resp.Header.Revision, readRev: resp.Header.Revision}, nil, nil
}

// Wait blocks until e owns the queue, and returns nil only after a read that
// found e's key alive (so its lease too) and no older key in the queue.
// It returns ownwatch.ErrKeyDeleted if e's key disappeared (an operator's
// delete, or its lease's end), ErrLost once lost (the
// session's context) ends, even while blocked in etcd, or ctx's error. A
// broken or compacted watch is resumed from a fresh read; a read that fails
// for a passing reason (no etcd leader, a timeout, a lost connection) is
// tried again: the place in the queue is still ours.
func (q Queue) Wait(ctx context.Context, e *Entry, lost context.Context) error {
	return q.wait(ctx, e, lost,
		func(ctx context.Context) (bool, error) {
			return q.waitDeleted(ctx, e.pred, e.predRev, e.readRev, false)
		},
		func(ctx context.Context, sure bool) error { return q.confirm(ctx, e, !sure) })
}

// wait is Wait with its two steps given: until returns once what e waits
// for has ended (sure) or a broken watch leaves it open (not sure), and
// confirm reads where e stands then.
func (q Queue) wait(ctx context.Context, e *Entry, lost context.Context,
	until func(ctx context.Context) (sure bool, err error), confirm func(ctx context.Context, sure bool) error) error {
	if e.Owner() {
		return nil // uncontended: no context or watch to set up
	}
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	defer context.AfterFunc(lost, cancel)()
	wait, unanswered := retry.MinBackoff, 0
	for !e.Owner() {
		before := e.waitingOn()
		sure, err := until(wctx)
		if err == nil {
			err = retry.Attempt(wctx, wctx, q.Latency, unanswered, func(ctx context.Context) error { return confirm(ctx, sure) })
		}
		if errors.Is(err, retry.ErrNoAnswer) {
			unanswered++
		} else {
			unanswered = 0
		}
		switch {
		case lost.Err() != nil:
			return ErrLost
		case ctx.Err() != nil:
			return ctx.Err()
		case err != nil && !retry.Transient(err):
			return err
		case err == nil && (sure || e.waitingOn() != before):
			// The predecessor went, or a broken watch's read found the
			// queue moved on (e now owns, or waits for another key): no
			// reason to wait before going on.
			wait = retry.MinBackoff
			continue
		}
		// A passing failure, or a watch that broke with the queue as it
		// was (its member may have no leader while reads go elsewhere):
		// back off before the next.
		retry.Pause(wctx, wait)
		wait = min(2*wait, retry.MaxBackoff)
	}
	return nil
}

// waitDeleted returns once key's life created at rev is over (sure), or
// written again when puts is set, or once a watch failure leaves the
// question open (not sure). readRev is the revision at which that life was
// last seen.
func (q Queue) waitDeleted(ctx context.Context, key string, rev, readRev int64, puts bool) (sure bool, err error) {
	if q.Watches != nil {
		return q.waitGone(ctx, key, rev, readRev, puts)
	}
	wctx, cancel := context.WithCancel(clientv3.WithRequireLeader(ctx))
	defer cancel()
	// Watch from now, not from readRev+1: a watch that starts in the past is
	// served by etcd's unsynced loop, every 100 ms. The gap between readRev and
	// the watch's start is covered by one read below.
	opts := []clientv3.OpOption{clientv3.WithCreatedNotify()}
	if !puts {
		opts = append(opts, clientv3.WithFilterPut())
	}
	wctx = watchstream.Context(wctx, q.Client)
	wch := q.Client.Watch(wctx, key, opts...)
	for resp := range wch {
		if resp.Canceled || resp.Err() != nil {
			watchstream.Ended(wctx, q.Client, resp)
			break
		}
		if resp.Created {
			if resp.Header.Revision <= readRev {
				continue
			}
			// A key with the same create revision now was not deleted in
			// the gap (a deleted key comes back as a new life, with a new
			// create revision, behind us), and the watch sees any later
			// delete.
			var g *clientv3.GetResponse
			err := retry.Attempt(ctx, ctx, q.Latency, 0, func(ctx context.Context) (err error) {
				g, err = q.Client.Get(ctx, key, clientv3.WithKeysOnly())
				return err
			})
			if err != nil {
				return false, err
			}
			if len(g.Kvs) == 0 || g.Kvs[0].CreateRevision != rev || puts && g.Kvs[0].ModRevision > readRev {
				return true, nil
			}
			continue
		}
		for _, ev := range resp.Events { // deletes, and puts if asked for
			// A watch made on a member that lags may first deliver the
			// delete of an earlier life of the key, before readRev.
			if ev.Kv.ModRevision > readRev {
				return true, nil
			}
		}
	}
	return false, ctx.Err()
}

// waitGone is waitDeleted on the session's watch stream. The watch is
// armed, from now on, by a read of the key (unless it starts at readRev or
// before), and re-armed the same way whenever the stream breaks: it ends
// only once the key's life created at rev is over, or it was written again
// when puts is set (sure), or ctx ends. Its registry is its own: the key
// ahead may be this session's, whose ownership must not hear of it.
func (q Queue) waitGone(ctx context.Context, key string, rev, readRev int64, puts bool) (sure bool, err error) {
	w := ownwatch.Start(ctx, ownwatch.Owner{Client: q.Client, Key: key, Rev: rev, Seen: readRev, Puts: puts, Life: ctx,
		Owners: new(ownwatch.Registry), Mux: q.Watches, Latency: q.Latency})
	<-w.Context().Done()
	w.Stop(context.Canceled)
	cause := context.Cause(w.Context())
	return errors.Is(cause, ownwatch.ErrKeyDeleted) || errors.Is(cause, ownwatch.ErrKeyWritten), ctx.Err()
}

// confirm checks, in one txn, that e's key still exists, and finds its new
// predecessor. When the predecessor that just went was the owner, nothing
// older than e can remain (keys only join at the tail), so the check is O(1)
// unless full is set.
func (q Queue) confirm(ctx context.Context, e *Entry, full bool) error {
	mine := clientv3.Compare(clientv3.CreateRevision(e.Key), "=", e.Rev)
	if e.predOwner && !full {
		// The count makes etcd answer through the leader: a txn of compares
		// alone is served by any member from its own, maybe lagging, state.
		resp, err := q.Client.Txn(ctx).If(mine).Then(
			append([]clientv3.Op{clientv3.OpGet(e.Key, clientv3.WithCountOnly())}, q.also()...)...).Commit()
		if err != nil {
			return err
		}
		if !resp.Succeeded {
			return gone(e, resp)
		}
		if err := shape(resp, 1+len(q.also())); err != nil {
			return err
		}
		e.also(resp, 1)
		e.pred, e.predOwner = "", false
		return nil
	}
	resp, err := q.Client.Txn(ctx).If(mine).Then(append([]clientv3.Op{
		clientv3.OpGet(q.Prefix, clientv3.WithPrefix(), clientv3.WithKeysOnly(), clientv3.WithMaxCreateRev(e.Rev-1),
			clientv3.WithSort(clientv3.SortByCreateRevision, clientv3.SortDescend), clientv3.WithLimit(1)),
		clientv3.OpGet(q.Prefix, append(clientv3.WithFirstCreate(), clientv3.WithKeysOnly())...),
	}, q.also()...)...).Commit()
	if err != nil {
		return err
	}
	if !resp.Succeeded {
		return gone(e, resp)
	}
	if err := shape(resp, 2+len(q.also())); err != nil {
		return err
	}
	e.also(resp, 2)
	e.readRev = resp.Header.Revision
	e.pred, e.predOwner = "", false
	if pred := first(resp.Responses[0].GetResponseRange().Kvs); pred != nil {
		e.setPred(pred, first(resp.Responses[1].GetResponseRange().Kvs))
	}
	return nil
}

// gone is ownwatch.ErrKeyDeleted for e, found missing by the read resp.
func gone(e *Entry, resp *clientv3.TxnResponse) error {
	return fmt.Errorf("%w: %s (created at revision %d) not found at revision %d", ownwatch.ErrKeyDeleted, e.Key, e.Rev, resp.Header.Revision)
}

// also keeps the results of the Queue's Also, which follow the first n of
// resp's: a copy, as a slice of resp's would keep its whole reply alive as
// long as the entry (a Term's life; even an empty slice points into it).
func (e *Entry) also(resp *clientv3.TxnResponse, n int) {
	e.Also, e.AlsoRev = nil, resp.Header.Revision
	if len(resp.Responses) > n {
		e.Also = slices.Clone(resp.Responses[n:])
	}
}

// Seen returns the revision of the last read that found e's key alive: a
// watch of it that starts there, or earlier, needs no read to arm
// (ownwatch.Owner.Seen).
func (e *Entry) Seen() int64 { return max(e.readRev, e.AlsoRev) }

func (e *Entry) setPred(pred, owner *mvccpb.KeyValue) {
	e.pred, e.predRev = string(pred.Key), pred.CreateRevision
	e.predOwner = owner != nil && string(owner.Key) == e.pred
}

func shape(resp *clientv3.TxnResponse, n int) error {
	if resp.Header == nil || len(resp.Responses) < n {
		return fmt.Errorf("%w: %d results, want %d", retry.ErrMalformed, len(resp.Responses), n)
	}
	return nil
}

func first(kvs []*mvccpb.KeyValue) *mvccpb.KeyValue {
	if len(kvs) == 0 {
		return nil
	}
	return kvs[0]
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
