package revqueue

import (
	"context"
	"fmt"
	"sync"

	"github.com/leasehold/leasehold/internal/ownwatch"
	"github.com/leasehold/leasehold/internal/retry"
	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// MaxNames bounds the queues of one Multi. etcd refuses a txn one of whose
// lists (compares, success ops, failure ops, each counted apart) holds more
// than its --max-txn-ops operations, 128 by default; Multi's enqueue puts a
// key and reads a predecessor per queue, two ops each in its success list,
// and no other txn of Multi has more than one op per queue in a list.
const MaxNames = 64

// Multi is the plain (mutex) queues of several names, acquired together:
// one key in each, all written by one txn, so all with one create revision.
// A key waits only for older keys, and every key of one acquire has the
// same revision, so acquires of overlapping sets of names, in any order,
// and single Acquires of their queues never wait for each other in a
// cycle. The queues share a client, and none has an Extra.
type Multi []Queue

// Acquire is Queue.Acquire for every queue of m at once: it writes a key in
// each, in one txn, and returns their entries, in m's order, once each owns
// its queue. On success the entries' keys were read alive, each oldest in
// its queue, at one revision: the enqueue's when each owned at once (one
// request), else a final txn comparing every key's create revision. On
// every error every key is removed, as Acquire's is. A lost reply keeps the
// place: a txn writes all of its keys or none, so a repeat that finds any
// of this call's keys takes up their places.
func (m Multi) Acquire(ctx context.Context, s *Session, value string) ([]*Entry, error) {
	if err := usable(ctx, s); err != nil {
		return nil, err
	}
	slots := m.newSlots(s)
	var (
		es     []*Entry
		unsure bool
	)
	err := retry.Until(ctx, s.Life, m[0].Latency, &unsure, func(ctx context.Context) (err error) {
		es, err = m.enqueue(ctx, slots, value, s.Lease)
		return err
	})
	setUnsure(slots, unsure)
	if err != nil {
		return nil, m.settle(ctx, s, slots, err)
	}
	for i, sl := range slots {
		sl.written = true
		es[i].Free = sl.release(s)
	}
	return es, m.settle(ctx, s, slots, m.wait(ctx, es, s.Life))
}

// TryAcquire writes a key in every queue of m, in one txn, only if every
// queue is empty, and returns their entries. Otherwise it writes nothing
// and returns the index of a queue found taken and its owner's key-value.
// Like Acquire, it sends the txn
// again after a passing failure; a repeat that finds this call's own keys
// at the head of every queue owns with them.
func (m Multi) TryAcquire(ctx context.Context, s *Session, value string) ([]*Entry, int, *mvccpb.KeyValue, error) {
	if err := usable(ctx, s); err != nil {
		return nil, 0, nil, err
	}
	slots := m.newSlots(s)
	var (
		es     []*Entry
		taken  int
		owner  *mvccpb.KeyValue
		unsure bool
	)
	err := retry.Until(ctx, s.Life, m[0].Latency, &unsure, func(ctx context.Context) (err error) {
		es, taken, owner, err = m.try(ctx, slots, value, s.Lease)
		return err
	})
	setUnsure(slots, unsure)
	switch {
	case err != nil:
		return nil, 0, nil, m.settle(ctx, s, slots, err)
	case es == nil:
		return nil, taken, owner, m.settle(ctx, s, slots, errTaken)
	}
	for i, sl := range slots {
		sl.written = true
		es[i].Free = sl.release(s)
	}
	return es, 0, nil, m.settle(ctx, s, slots, nil)
}

func (m Multi) newSlots(s *Session) []*slot {
	slots := make([]*slot, len(m))
	for i, q := range m {
		slots[i] = q.newSlot(s)
	}
	return slots
}

// setUnsure marks every slot unsure if an attempt went unanswered: it wrote
// all of their keys or none.
func setUnsure(slots []*slot, unsure bool) {
	for _, sl := range slots {
		sl.unsure = unsure
	}
}

// enqueue is put for every queue of m in one txn: if no key of slots
// exists, it writes them all and reads, in each queue, the two newest keys
// (ours, and the predecessor). Otherwise an earlier attempt, whose reply was
// lost, wrote them all, and it takes up their places (rejoin).
func (m Multi) enqueue(ctx context.Context, slots []*slot, value string, lease clientv3.LeaseID) ([]*Entry, error) {
	n := len(m)
	cmps := make([]clientv3.Cmp, n)
	ops := make([]clientv3.Op, 2*n)
	gets := make([]clientv3.Op, n)
	for i, q := range m {
		key := slots[i].key
		cmps[i] = clientv3.Compare(clientv3.CreateRevision(key), "=", 0)
		ops[i] = clientv3.OpPut(key, value, clientv3.WithLease(lease))
		// Reads see the txn's writes: the two newest keys of each queue
		// are ours and our predecessor, and Count is the queue's length.
		ops[n+i] = clientv3.OpGet(q.Prefix, clientv3.WithPrefix(), clientv3.WithKeysOnly(),
			clientv3.WithSort(clientv3.SortByCreateRevision, clientv3.SortDescend), clientv3.WithLimit(2))
		gets[i] = clientv3.OpGet(key, clientv3.WithKeysOnly())
	}
	resp, err := m[0].Client.Txn(ctx).If(cmps...).Then(ops...).Else(gets...).Commit()
	if err != nil {
		return nil, err
	}
	if !resp.Succeeded {
		return m.rejoin(ctx, resp, slots)
	}
	if err := shape(resp, 2*n); err != nil {
		return nil, err
	}
	es := make([]*Entry, n)
	for i := range m {
		rr := resp.Responses[n+i].GetResponseRange()
		kvs := rr.GetKvs()
		if len(kvs) == 0 || string(kvs[0].Key) != slots[i].key {
			return nil, fmt.Errorf("revqueue: enqueue %q: own key not newest in queue", slots[i].key)
		}
		e := &Entry{Key: slots[i].key, Rev: kvs[0].CreateRevision, readRev: resp.Header.Revision}
		if len(kvs) > 1 {
			// With two keys in the queue, the predecessor is the owner.
			e.pred, e.predRev, e.predOwner = string(kvs[1].Key), kvs[1].CreateRevision, rr.GetCount() == 2
		}
		es[i] = e
	}
	return es, nil
}

// rejoin takes up the places of the keys an earlier enqueue of slots wrote
// (resp, its repeat, found one): that enqueue wrote every one of them, so a
// key missing now was deleted since.
func (m Multi) rejoin(ctx context.Context, resp *clientv3.TxnResponse, slots []*slot) ([]*Entry, error) {
	if err := shape(resp, len(m)); err != nil {
		return nil, err
	}
	es := make([]*Entry, len(m))
	for i, q := range m {
		kv := first(resp.Responses[i].GetResponseRange().GetKvs())
		if kv == nil {
			return nil, fmt.Errorf("%w: %s, written by an enqueue whose reply was lost, not found at revision %d",
				ownwatch.ErrKeyDeleted, slots[i].key, resp.Header.Revision)
		}
		e := &Entry{Key: slots[i].key, Rev: kv.CreateRevision, readRev: resp.Header.Revision}
		if err := q.confirm(ctx, e, true); err != nil {
			return nil, err
		}
		es[i] = e
	}
	return es, nil
}

// try is TryEnqueue for every queue of m in one txn: it writes every key
// of slots only if every queue is empty, and otherwise reads each queue's
// head. Heads that are all this call's keys were written by an earlier
// attempt whose reply was lost: it owns with them.
func (m Multi) try(ctx context.Context, slots []*slot, value string, lease clientv3.LeaseID) ([]*Entry, int, *mvccpb.KeyValue, error) {
	n := len(m)
	cmps := make([]clientv3.Cmp, n)
	puts := make([]clientv3.Op, n)
	heads := make([]clientv3.Op, n)
	for i, q := range m {
		cmps[i] = clientv3.Compare(clientv3.CreateRevision(q.Prefix), "=", 0).WithPrefix()
		puts[i] = clientv3.OpPut(slots[i].key, value, clientv3.WithLease(lease))
		heads[i] = clientv3.OpGet(q.Prefix, clientv3.WithFirstCreate()...)
	}
	resp, err := m[0].Client.Txn(ctx).If(cmps...).Then(puts...).Else(heads...).Commit()
	if err != nil {
		return nil, 0, nil, err
	}
	if err := shape(resp, n); err != nil {
		return nil, 0, nil, err
	}
	es := make([]*Entry, n)
	if resp.Succeeded {
		// The compares proved every queue empty, so each put created its
		// key at the txn's revision.
		for i := range m {
			es[i] = &Entry{Key: slots[i].key, Rev: resp.Header.Revision, readRev: resp.Header.Revision}
		}
		return es, 0, nil, nil
	}
	gone, mine := -1, 0
	for i := range m {
		head := first(resp.Responses[i].GetResponseRange().GetKvs())
		switch {
		case head != nil && string(head.Key) == slots[i].key:
			es[i] = &Entry{Key: slots[i].key, Rev: head.CreateRevision, readRev: resp.Header.Revision}
			mine++
		case head != nil:
			return nil, i, head, nil
		default:
			gone = i
		}
	}
	switch {
	case gone < 0:
		return es, 0, nil, nil // a lost attempt wrote every key, each at the head of its queue
	case mine == 0:
		// A failed compare, yet every queue empty at the same revision.
		return nil, 0, nil, fmt.Errorf("%w: every queue found empty where a compare found a key", retry.ErrMalformed)
	}
	// A lost attempt wrote every key, and one has gone since.
	return nil, 0, nil, fmt.Errorf("%w: %s, written by a try whose reply was lost, not found at revision %d",
		ownwatch.ErrKeyDeleted, slots[gone].key, resp.Header.Revision)
}

// wait waits until every entry of es owns its queue, one after another
// (each key waits only for older keys, so whichever it waits for first, the
// others' predecessors go meanwhile), then checks, in one txn, that every
// key is still alive: at that revision each is the oldest in its queue,
// since nothing older can join a queue. Entries that all owned at once need
// no request.
func (m Multi) wait(ctx context.Context, es []*Entry, lost context.Context) error {
	waited := false
	for i, q := range m {
		if es[i].Owner() {
			continue
		}
		waited = true
		if err := q.Wait(ctx, es[i], lost); err != nil {
			return err
		}
	}
	if !waited {
		return nil
	}
	var unsure bool // a read: an unanswered attempt writes nothing
	return retry.Until(ctx, lost, m[0].Latency, &unsure, func(ctx context.Context) error { return m.check(ctx, es) })
}

// check reads, in one txn, that every key of es is alive with its create
// revision, and returns ownwatch.ErrKeyDeleted for the first one that is not.
func (m Multi) check(ctx context.Context, es []*Entry) error {
	cmps := make([]clientv3.Cmp, len(es))
	gets := make([]clientv3.Op, len(es))
	for i, e := range es {
		cmps[i] = clientv3.Compare(clientv3.CreateRevision(e.Key), "=", e.Rev)
		gets[i] = clientv3.OpGet(e.Key, clientv3.WithKeysOnly())
	}
	// The count makes etcd answer through the leader: a txn of compares
	// alone is served by any member from its own, maybe lagging, state.
	resp, err := m[0].Client.Txn(ctx).If(cmps...).Then(clientv3.OpGet(es[0].Key, clientv3.WithCountOnly())).Else(gets...).Commit()
	if err != nil {
		return err
	}
	if !resp.Succeeded {
		if err := shape(resp, len(es)); err != nil {
			return err
		}
		for i, e := range es {
			if kv := first(resp.Responses[i].GetResponseRange().GetKvs()); kv == nil || kv.CreateRevision != e.Rev {
				return gone(e, resp)
			}
		}
		return fmt.Errorf("%w: a compare failed on keys all found alive", retry.ErrMalformed)
	}
	for _, e := range es {
		e.readRev = resp.Header.Revision
	}
	return nil
}

// settle is Queue.settle for every slot of one acquire: on failure it
// removes every key that an attempt may have written, side by side, each
// within removeKey's budget.
func (m Multi) settle(ctx context.Context, s *Session, slots []*slot, err error) error {
	if err == nil && s.Life.Err() != nil {
		err = ErrLost // the session ended as the wait did
	}
	if err == nil {
		return nil
	}
	var wg sync.WaitGroup
	for _, sl := range slots {
		if sl.written || sl.unsure {
			wg.Go(func() { removeKey(ctx, s, sl) })
		} else {
			sl.put(s) // nothing was written
		}
	}
	wg.Wait()
	return failure(ctx, s, err)
}
