package revqueue

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/leasehold/leasehold/internal/keyspace"
	"github.com/leasehold/leasehold/internal/retry"
	"github.com/leasehold/leasehold/internal/watchstream"
	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// ErrLimitMismatch is returned when a semaphore's entry meets a key queued
// with another limit while the name has no limit record: two processes
// would otherwise enforce two limits.
var ErrLimitMismatch = errors.New("semaphore limit mismatch")

// ErrOverLimit is returned when a hold asks for more units than the name's
// limit: it could never be granted.
var ErrOverLimit = errors.New("more units than the semaphore's limit")

// Counted is a weighted semaphore: holds of Units units each, granted first
// come, first served, while the units of the keys at or ahead of a key fit
// the name's limit. Keys only join at the tail, so a granted key stays
// granted until it goes: owning its key proves its units.
//
// The limit is the name's record (keyspace.Limit, at Record) if it has one,
// else the one every key was queued with (its directory, UnitsDir): an
// entry refuses to share a queue with another. A record that lowers the
// limit names the newest key that held then (Held): lowering takes no
// units back. Every grant is a write at its revision, the enqueue's or the
// waiter's mark (its key put again, unchanged), so that SetLimit, which
// compares that no key changed since its read, never misses one.
//
// An entry waits on one thing: the first waiter on the end of any key ahead
// and on the record (one watch of both), every later waiter on its direct
// predecessor, whose mark or end moves it up.
type Counted struct {
	Queue
	Limit  int    // this process's limit, used while the name has no record
	Units  int    // units of each hold
	Record string // the name's limit record, outside Prefix
}

// NewCounted returns the semaphore of limit (unless the name's record says
// otherwise) whose holds take units units.
func NewCounted(q Queue, limit, units int) Counted {
	q.KeyDir = keyspace.UnitsDir(limit, units)
	rec := keyspace.LimitKey(q.Prefix)
	if q.Extra == nil { // a Counted's Queue, reused for other units, has it
		q.Extra = &Extra{Also: []clientv3.Op{clientv3.OpGet(rec)}} // the enqueue reads the record too
	}
	return Counted{Queue: q, Limit: limit, Units: units, Record: rec}
}

// weighing is what a Counted entry knows of the queue ahead of it.
type weighing struct {
	limit  int   // the name's limit at the last read
	held   int64 // the record's Held
	recMod int64 // the record's mod revision at the last read; 0: none
	ahead  []weighed
	all    bool // ahead is every key ahead, not only the newest
	stale  bool // the record changed since the last read
}

// weighed is one key ahead and its units.
type weighed struct {
	target
	units int
}

// sum is the units of the keys ahead that e knows of.
func (w *weighing) sum() int {
	n := 0
	for _, k := range w.ahead {
		n += k.units
	}
	return n
}

// Acquire is Queue.Acquire under the semaphore's rule.
func (c Counted) Acquire(ctx context.Context, s *Session, value string) (*Entry, error) {
	return c.acquire(ctx, s, value, c.enqueue, func(ctx context.Context, e *Entry, lost context.Context) error {
		return c.wait(ctx, e, lost, c.until(e), c.confirm(e))
	})
}

// TryAcquire takes the units if they are free and nobody waits, without
// waiting: one request when the queue is empty and the name has no record,
// two otherwise. If they are not free it writes nothing and returns the
// oldest key.
func (c Counted) TryAcquire(ctx context.Context, s *Session, value string) (*Entry, *mvccpb.KeyValue, error) {
	return c.tryAcquire(ctx, s, value, c.try)
}

// enqueue writes key at the tail and reads the keys ahead of it (as many as
// the limit could admit) and the record: it owns if they fit.
func (c Counted) enqueue(ctx context.Context, key, value string, lease clientv3.LeaseID) (*Entry, error) {
	e, newest, err := c.put(ctx, key, value, lease, int64(c.Limit)+1, c.confirm)
	if err != nil || newest == nil {
		return e, err
	}
	e.w = &weighing{}
	fits, err := c.place(e, 1, newest.Kvs[1:], newest.More, first(e.Also[0].GetResponseRange().Kvs))
	switch {
	case err != nil:
		return e, err
	case newest.More && e.w.limit > c.Limit:
		return e, c.confirm(e)(ctx, false) // the record's limit is above what was read
	case fits:
		e.grant() // at the enqueue's revision, a write
	}
	return e, nil
}

// confirm returns where e stands, granted by a mark when it fits: from
// what e knows when sure is set and no record changed, else from a read.
func (c Counted) confirm(e *Entry) func(ctx context.Context, sure bool) error {
	return func(ctx context.Context, sure bool) error {
		if e.w == nil {
			e.w = &weighing{} // rejoined after a lost reply
		}
		known := sure && e.w.all && !e.w.stale
		for range 4 {
			fits := known && e.w.sum()+c.Units <= e.w.limit
			if !fits { // what e knows does not grant it, or it knows nothing
				var err error
				if fits, err = c.survey(ctx, e); err != nil || !fits {
					return err
				}
			}
			if marked, err := c.mark(ctx, e); err != nil || marked {
				return err
			}
			known = false // the record moved since: read again
		}
		return fmt.Errorf("%w: the limit of %s kept changing", retry.ErrNoAnswer, c.Record)
	}
}

// survey reads e's key, the keys ahead (as many as the limit could admit)
// and the record, and places e; fits reports that e may be granted.
func (c Counted) survey(ctx context.Context, e *Entry) (fits bool, err error) {
	for {
		n := int64(max(c.Limit, e.w.limit)) + 1
		resp, err := c.read(ctx, e, clientv3.OpGet(e.Key, clientv3.WithKeysOnly()),
			clientv3.OpGet(c.Prefix, clientv3.WithPrefix(), clientv3.WithKeysOnly(), clientv3.WithMaxCreateRev(e.Rev-1),
				clientv3.WithSort(clientv3.SortByCreateRevision, clientv3.SortDescend), clientv3.WithLimit(n)),
			clientv3.OpGet(c.Record))
		if err != nil {
			return false, err
		}
		own := first(resp.Responses[0].GetResponseRange().Kvs)
		ahead := resp.Responses[1].GetResponseRange()
		if own == nil {
			return false, gone(e, resp)
		}
		fits, err := c.place(e, own.Version, ahead.Kvs, ahead.More, first(resp.Responses[2].GetResponseRange().Kvs))
		if err != nil || !ahead.More || int64(e.w.limit) < n {
			return fits, err
		}
		// The record's limit is above what was read: read as many as it admits.
	}
}

// place sets what e waits on from the keys just ahead of it, newest first
// (more says there are others), and the record; fits reports that e's
// units fit, so that a mark grants them. version is e's key's.
func (c Counted) place(e *Entry, version int64, ahead []*mvccpb.KeyValue, more bool, rec *mvccpb.KeyValue) (fits bool, err error) {
	w := e.w
	if err := c.setRecord(w, rec); err != nil {
		return false, err
	}
	w.ahead, w.all = w.ahead[:0], !more
	for _, kv := range ahead {
		limit, units, err := c.parse(kv)
		if err != nil {
			return false, err
		}
		if rec == nil && limit != c.Limit {
			return false, fmt.Errorf("%w: %s was queued with limit %d, this call's is %d", ErrLimitMismatch, kv.Key, limit, c.Limit)
		}
		w.ahead = append(w.ahead, weighed{target{string(kv.Key), kv.CreateRevision}, units})
	}
	e.grant()
	sum := w.sum()
	switch {
	case version >= 2:
		return false, nil // marked: granted
	case e.Rev <= w.held:
		// Held when the limit last changed: granted, but marked so that the
		// waiter behind, which watches for it, moves up.
		e.ahead, e.fast = targets(ahead), true
		return true, nil
	case c.Units > w.limit:
		return false, fmt.Errorf("%w: %s asks %d units, the name's limit is %d", ErrOverLimit, e.Key, c.Units, w.limit)
	}
	e.ahead = targets(ahead) // not empty unless the units fit
	switch {
	case w.all && sum+c.Units <= w.limit:
		e.fast = true // granted by the enqueue, or by a mark
		return true, nil
	case ahead[0].Version >= 2 || ahead[0].CreateRevision <= w.held || w.all && sum <= w.limit:
		// The predecessor holds, so every key ahead does (the keys that hold
		// are the oldest): the end of any, or a new limit, may make room.
		e.fast = true
	default:
		e.ahead, e.puts = e.ahead[:1], true
	}
	return false, nil
}

// grant marks e as owning.
func (e *Entry) grant() { e.pred, e.ahead, e.puts, e.fast = "", nil, false, false }

// setRecord reads the record into w: the name's limit, or c's without one.
func (c Counted) setRecord(w *weighing, rec *mvccpb.KeyValue) error {
	w.limit, w.held, w.recMod, w.stale = c.Limit, 0, 0, false
	if rec == nil {
		return nil
	}
	l, err := keyspace.UnmarshalLimit(rec.Value)
	if err != nil {
		return err
	}
	w.limit, w.held, w.recMod = l.Limit, l.Held, rec.ModRevision
	return nil
}

// parse reads the limit and units a key of the queue was queued with.
func (c Counted) parse(kv *mvccpb.KeyValue) (limit, units int, err error) {
	rest, _ := strings.CutPrefix(string(kv.Key), c.Prefix)
	limit, units, ok := keyspace.ParseUnitsDir(rest)
	if !ok {
		return 0, 0, fmt.Errorf("%w: %s is no semaphore key", ErrLimitMismatch, kv.Key)
	}
	return limit, units, nil
}

// mark grants e its units: its key put again, unchanged, only while it
// exists and the record is the one e's units were weighed against. It
// reports false, with no error, when the record moved.
func (c Counted) mark(ctx context.Context, e *Entry) (bool, error) {
	resp, err := c.Client.Txn(ctx).
		If(clientv3.Compare(clientv3.CreateRevision(e.Key), "=", e.Rev), clientv3.Compare(clientv3.ModRevision(c.Record), "=", e.w.recMod)).
		Then(clientv3.OpPut(e.Key, "", clientv3.WithIgnoreValue(), clientv3.WithIgnoreLease())).
		Else(clientv3.OpGet(e.Key, clientv3.WithKeysOnly())).Commit()
	if err != nil {
		return false, err
	}
	e.readRev = resp.Header.Revision
	if resp.Succeeded {
		e.grant()
		return true, nil
	}
	if err := shape(resp, 1); err != nil {
		return false, err
	}
	if first(resp.Responses[0].GetResponseRange().Kvs) == nil {
		return false, gone(e, resp)
	}
	e.w.stale = true
	return false, nil
}

// until waits for what e waits on: its predecessor's mark or end, or, for
// the first waiter, room.
func (c Counted) until(e *Entry) func(ctx context.Context) (bool, error) {
	return func(ctx context.Context) (bool, error) {
		if e.fast {
			return c.waitRoom(ctx, e)
		}
		return c.waitDeleted(ctx, e.ahead[0].key, e.ahead[0].rev, e.readRev, e.puts)
	}
}

// waitRoom returns (sure) once the keys ahead of the first waiter e that
// ended leave room for its units, or the record changed, or a key ahead
// ended while e does not know them all; or once a watch failure leaves the
// question open. One watch of the record and the queue: ends are counted
// here, with no request until e fits.
func (c Counted) waitRoom(ctx context.Context, e *Entry) (sure bool, err error) {
	wctx, cancel := context.WithCancel(clientv3.WithRequireLeader(ctx))
	defer cancel()
	w := e.w
	wctx = watchstream.Context(wctx, c.Client)
	wch := c.Client.Watch(wctx, c.Record, clientv3.WithRange(clientv3.GetPrefixRangeEnd(c.Prefix)), clientv3.WithCreatedNotify())
	for resp := range wch {
		if resp.Canceled || resp.Err() != nil {
			watchstream.Ended(wctx, c.Client, resp)
			break
		}
		if resp.Created && resp.Header.Revision > e.readRev {
			// The gap since the read: one read of what may have changed.
			if err := c.recheck(ctx, e); err != nil {
				return false, err
			}
		}
		for _, ev := range resp.Events {
			if ev.Kv.ModRevision <= e.readRev {
				continue // a lagging member's replay
			}
			switch key := string(ev.Kv.Key); {
			case key == c.Record:
				w.stale = true
			case ev.Type == clientv3.EventTypeDelete && !w.all:
				w.stale = true // maybe a key ahead that e does not know
			case ev.Type == clientv3.EventTypeDelete:
				w.drop(key)
			}
		}
		if w.stale || w.sum()+c.Units <= w.limit {
			return true, nil
		}
	}
	return false, ctx.Err()
}

// recheck reads the record and the keys ahead of e, and drops those that
// ended since e's last read.
func (c Counted) recheck(ctx context.Context, e *Entry) error {
	var resp *clientv3.TxnResponse
	err := retry.Attempt(ctx, ctx, c.Latency, 0, func(ctx context.Context) (err error) {
		resp, err = c.Client.Txn(ctx).Then(clientv3.OpGet(c.Record, clientv3.WithKeysOnly()),
			clientv3.OpGet(c.Prefix, clientv3.WithPrefix(), clientv3.WithKeysOnly(), clientv3.WithMaxCreateRev(e.Rev-1))).Commit()
		return err
	})
	if err != nil {
		return err
	}
	if err := shape(resp, 2); err != nil {
		return err
	}
	if rec := first(resp.Responses[0].GetResponseRange().Kvs); rec != nil && rec.ModRevision != e.w.recMod || rec == nil && e.w.recMod != 0 {
		e.w.stale = true
	}
	if !e.w.all {
		e.w.stale = true // a key ahead that e does not know may have ended
	}
	live := lives(resp.Responses[1].GetResponseRange().Kvs)
	for _, k := range slices.Clone(e.w.ahead) {
		if !live[k.target] {
			e.w.drop(k.key)
		}
	}
	return nil
}

// drop forgets the key ahead that ended.
func (w *weighing) drop(key string) {
	w.ahead = slices.DeleteFunc(w.ahead, func(k weighed) bool { return k.key == key })
}

// try takes the units if they fit: one txn that writes key only if the
// queue is empty and the name has no record, and otherwise reads the
// oldest keys and the record; when they fit, a second txn writes key only
// if no key joined and the record did not change since that read.
func (c Counted) try(ctx context.Context, key, value string, lease clientv3.LeaseID) (*Entry, *mvccpb.KeyValue, error) {
	n := int64(c.Limit)
	read := []clientv3.Op{clientv3.OpGet(c.Prefix, clientv3.WithPrefix(),
		clientv3.WithSort(clientv3.SortByCreateRevision, clientv3.SortAscend), clientv3.WithLimit(n)), clientv3.OpGet(c.Record)}
	cond := []clientv3.Cmp{clientv3.Compare(clientv3.CreateRevision(c.Prefix), "=", 0).WithPrefix(),
		clientv3.Compare(clientv3.CreateRevision(c.Record), "=", 0)}
	if c.Units > c.Limit {
		// Only the record can grant that many: read it first (a create
		// revision is never negative).
		cond = []clientv3.Cmp{clientv3.Compare(clientv3.CreateRevision(c.Record), "<", 0)}
	}
	// Others may take the room first: give up as taken after a few tries.
	for range 4 {
		resp, err := c.Client.Txn(ctx).If(cond...).Then(clientv3.OpPut(key, value, clientv3.WithLease(lease))).Else(read...).Commit()
		if err != nil {
			return nil, nil, err
		}
		if resp.Succeeded {
			return &Entry{Key: key, Rev: resp.Header.Revision, readRev: resp.Header.Revision}, nil, nil
		}
		if err := shape(resp, 2); err != nil {
			return nil, nil, err
		}
		rr, rec := resp.Responses[0].GetResponseRange(), first(resp.Responses[1].GetResponseRange().Kvs)
		e := &Entry{Key: key, readRev: resp.Header.Revision, w: &weighing{}}
		for _, kv := range rr.Kvs {
			if string(kv.Key) == key {
				// An unanswered attempt wrote it, granted: it owns.
				e.Rev = kv.CreateRevision
				return e, nil, nil
			}
		}
		e.Rev = resp.Header.Revision + 1 // behind every key read
		more := rr.Count > int64(len(rr.Kvs))
		newest := slices.Clone(rr.Kvs)
		slices.Reverse(newest)
		fits, err := c.place(e, 1, newest, more, rec)
		switch {
		case err != nil:
			return nil, nil, err
		case more && e.w.limit > int(n):
			// The record admits more keys than were read: read them all.
			n = int64(e.w.limit)
			read[0] = clientv3.OpGet(c.Prefix, clientv3.WithPrefix(),
				clientv3.WithSort(clientv3.SortByCreateRevision, clientv3.SortAscend), clientv3.WithLimit(n))
			cond = []clientv3.Cmp{clientv3.Compare(clientv3.CreateRevision(c.Record), "<", 0)} // read only
			continue
		case !fits:
			return nil, first(rr.Kvs), nil
		}
		// Room: write key if no key joined and the limit stayed (keys
		// that left only make more room).
		cond = []clientv3.Cmp{clientv3.Compare(clientv3.CreateRevision(c.Prefix), "<", resp.Header.Revision+1).WithPrefix(),
			clientv3.Compare(clientv3.ModRevision(c.Record), "=", e.w.recMod)}
	}
	return nil, nil, errTaken
}

// maxRevoked bounds the holds one SetLimit revokes: their deletes share a
// txn with the record's put, and etcd allows 128 operations in one.
const maxRevoked = 120

// SetLimit makes limit the name's limit, read by every entry from now on.
// Its record names the newest key that holds at its revision (by the
// previous limit, a mark, or an earlier record): those keep their units,
// unless revoke is set: then the newest of them are deleted, in the same
// txn, until the units of the rest fit. It reads the queue, then writes
// only if no key of the queue was written since (every grant is a write),
// and reads again otherwise, after a pause that doubles, until ctx ends.
func (c Counted) SetLimit(ctx context.Context, s *Session, limit int, revoke bool) error {
	for wait := retry.MinBackoff; ; wait = min(2*wait, retry.MaxBackoff) {
		var done, unsure bool
		err := retry.Until(ctx, s.Life, c.Latency, &unsure, func(ctx context.Context) (err error) {
			done, err = c.setLimit(ctx, limit, revoke)
			return err
		})
		if err != nil || done {
			return err
		}
		// A key of the queue was written since the read: a grant may
		// have slipped in. Churn makes that likely; back off, then read again.
		retry.Pause(ctx, wait)
	}
}

func (c Counted) setLimit(ctx context.Context, limit int, revoke bool) (done bool, err error) {
	resp, err := c.Client.Txn(ctx).Then(clientv3.OpGet(c.Record),
		clientv3.OpGet(c.Prefix, clientv3.WithPrefix(), clientv3.WithKeysOnly(),
			clientv3.WithSort(clientv3.SortByCreateRevision, clientv3.SortAscend))).Commit()
	if err != nil {
		return false, err
	}
	if err := shape(resp, 2); err != nil {
		return false, err
	}
	rec := first(resp.Responses[0].GetResponseRange().Kvs)
	w := &weighing{}
	if err := c.setRecord(w, rec); err != nil {
		return false, err
	}
	held, err := c.holding(w, rec != nil, resp.Responses[1].GetResponseRange().Kvs)
	if err != nil {
		return false, err
	}
	newest := w.held
	if len(held) > 0 {
		newest = max(newest, held[len(held)-1].rev)
	}
	ops := []clientv3.Op{clientv3.OpPut(c.Record, string(keyspace.MarshalLimit(keyspace.Limit{Limit: limit, Held: newest})))}
	if revoke {
		if ops, err = revocations(ops, held, limit); err != nil {
			return false, err
		}
	}
	put, err := c.Client.Txn(ctx).If(
		clientv3.Compare(clientv3.ModRevision(c.Record), "=", w.recMod),
		clientv3.Compare(clientv3.ModRevision(c.Prefix), "<", resp.Header.Revision+1).WithPrefix(),
	).Then(ops...).Commit()
	if err != nil {
		return false, err
	}
	return put.Succeeded, nil
}

// holding returns the keys that hold among queue, oldest first: the
// unbroken run, from the oldest, of keys marked, at or before w's Held, or
// whose units and those of every older key fit the limit, under w's record
// (byRecord) or else the limit the oldest key was queued with. Without a
// record, a key of another limit ends the run: its call fails with
// ErrLimitMismatch, and keys behind it were never weighed against it.
func (c Counted) holding(w *weighing, byRecord bool, queue []*mvccpb.KeyValue) ([]weighed, error) {
	var held []weighed
	sum, limit := 0, w.limit
	for i, kv := range queue {
		l, units, err := c.parse(kv)
		if err != nil {
			return nil, err
		}
		if !byRecord && i == 0 {
			limit = l
		}
		sum += units
		if !byRecord && l != limit || kv.Version < 2 && kv.CreateRevision > w.held && sum > limit {
			break
		}
		held = append(held, weighed{target{string(kv.Key), kv.CreateRevision}, units})
	}
	return held, nil
}

// revocations adds to ops the deletes of the newest of held until the
// units of the rest fit limit.
func revocations(ops []clientv3.Op, held []weighed, limit int) ([]clientv3.Op, error) {
	sum := 0
	for _, k := range held {
		sum += k.units
	}
	for i := len(held) - 1; i >= 0 && sum > limit; i-- {
		if len(ops) > maxRevoked {
			return nil, fmt.Errorf("semaphore: more than %d holds to revoke at once", maxRevoked)
		}
		ops = append(ops, clientv3.OpDelete(held[i].key))
		sum -= held[i].units
	}
	return ops, nil
}
