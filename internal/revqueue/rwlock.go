package revqueue

import (
	"context"
	"fmt"
	"strings"

	"github.com/leasehold/leasehold/internal/retry"
	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"
)

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
