package election

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync/atomic"
	"time"

	"github.com/leasehold/leasehold/fencing"
	"github.com/leasehold/leasehold/internal/rank"
	"github.com/leasehold/leasehold/internal/retry"
	"github.com/leasehold/leasehold/internal/watchstream"
	"go.etcd.io/etcd/api/v3/mvccpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// Observation is one state of an election: who leads (nil: nobody), or an
// error that kept Observe from knowing.
type Observation struct {
	Leader *Leader // nil when nobody leads (or when Err is set)
	// Candidates are the live ranked candidates (Priority, WithDrain), by
	// key, read at the same revision as Leader; nil when none is ranked.
	Candidates []Candidate
	Err        error
}

// Candidate is a ranked candidate of an election, as its record in etcd says.
type Candidate struct {
	Key string `json:"key"` // its record: <root><name>#candidate/<lease>-0
	ID  string `json:"id"`  // its session's identity (fencing.WithIdentity)
	// Priority is compared level by level, a prefix ranking lower.
	Priority []int64 `json:"priority"`
	// Drain says it asked to rank below every candidate not drained.
	Drain bool `json:"drain,omitempty"`
	// Preferred says no live candidate ranks above it: only a preferred
	// candidate campaigns, and a leader that is not preferred gives way.
	Preferred bool `json:"preferred"`
}

// Observe sends the current state first (Leader nil when nobody leads), then
// each change: a new leader, nobody leading, the leader's value changed by
// Proclaim, or a ranked candidate come, gone or re-ranked. A state is sent
// only once read from etcd, so a leader whose key is gone is never reported
// as leading; a reader slower than the changes gets the latest state, not
// each one in between. When etcd cannot be read or watched, or a check after
// 5 s of silence fails (a partition), Observe sends an Observation with Err
// and tries again with backoff; a compacted or broken watch is resumed
// without an error. The channel closes promptly once ctx is done, and at no
// other time, except for bad input (a nil ctx, an Election New did not
// make): then it holds one Observation whose Err wraps
// fencing.ErrInvalidArgument, and is already closed.
func (e *Election) Observe(ctx context.Context) <-chan Observation {
	if err := e.usable(ctx); err != nil {
		ch := make(chan Observation, 1)
		ch <- Observation{Err: fmt.Errorf("election: observe: %w", err)}
		close(ch)
		return ch
	}
	ch := make(chan Observation)
	go e.observe(ctx, ch)
	return ch
}

const (
	// observeArmTimeout bounds the wait for a watch to be established: past
	// it, Observe reports that it cannot tell who leads.
	observeArmTimeout = 5 * time.Second
	// observeQuiet is how long a watch may stay silent before Observe checks
	// with a read that etcd still answers.
	observeQuiet    = 5 * time.Second
	observeRetryMin = 50 * time.Millisecond
	observeRetryMax = 2 * time.Second
)

type observer struct {
	e       *Election
	ctx     context.Context
	ch      chan<- Observation
	last    Observation  // the last state the reader received
	sent    bool         // last is set
	pending *Observation // a newer state, not yet received
	retry   time.Duration
	refused bool // the last watch was refused for its stream's auth token
}

func (e *Election) observe(ctx context.Context, ch chan<- Observation) {
	defer close(ch)
	o := &observer{e: e, ctx: ctx, ch: ch, retry: observeRetryMin}
	for ctx.Err() == nil {
		err := o.follow()
		if err == nil || ctx.Err() != nil {
			continue
		}
		// A broken or compacted watch is no news for the caller: resume from
		// a fresh read. A read that fails is: the state is unknown.
		if !errors.Is(err, errWatchBroken) {
			if !o.send(Observation{Err: err}) {
				return
			}
			o.sent = false // the reader's last word is the Err: the state comes again
		}
		o.pause()
	}
}

// follow arms a watch on the whole queue, reads the leader, and then
// follows the watch until it breaks. The read comes after the watch is
// armed, so nothing falls between them: events up to the read's revision
// are already in it, later ones arrive on the watch.
func (o *observer) follow() error {
	wctx, cancel := context.WithCancel(clientv3.WithRequireLeader(o.ctx))
	defer cancel()
	wch, err := o.arm(wctx, cancel)
	if err != nil {
		return err
	}
	var v view
	if err := o.reread(&v); err != nil {
		return err
	}
	// A partitioned watch is silent, not broken. After observeQuiet without
	// a word on it, read the leader again (bounded): a read that fails is
	// reported, one that works is the current state. A read, not a progress
	// request: etcd answers those only when every watch on the stream is
	// synced, and would leave an idle Observe crying wolf.
	quiet := time.NewTimer(observeQuiet)
	defer quiet.Stop()
	for {
		var resp clientv3.WatchResponse
		var ok bool
		// The watch is read while the reader is slow: clientv3 buffers what
		// nobody reads, without bound. A newer state replaces the pending one.
		var out chan<- Observation
		var next Observation
		if o.pending != nil {
			out, next = o.ch, *o.pending
		}
		select {
		case out <- next:
			o.last, o.sent, o.pending, o.retry = next, true, nil, observeRetryMin
			continue
		case <-o.ctx.Done():
			return nil
		case resp, ok = <-wch:
		case <-quiet.C:
			if err := o.reread(&v); err != nil {
				return err
			}
			quiet.Reset(observeQuiet)
			continue
		}
		quiet.Reset(observeQuiet)
		if !ok {
			return watchErr(resp, false)
		}
		if resp.Err() != nil || resp.Canceled {
			return watchErr(resp, true)
		}
		if !o.apply(&v, resp.Events) {
			o.report(v.cur, v.rs)
		} else if err := o.reread(&v); err != nil {
			return err
		}
	}
}

// reread reads v afresh and reports it.
func (o *observer) reread(v *view) (err error) {
	if v.cur, v.rs, v.rev, err = o.read(); err == nil {
		o.report(v.cur, v.rs)
	}
	return err
}

// view is what an observer knows: the leader and the candidates' records,
// as read at rev and followed since.
type view struct {
	cur *Leader
	rs  map[string]rank.Record
	rev int64
}

// arm starts the watch on every kind of the name (the queue and the
// candidates) and waits, at most observeArmTimeout, until the server has
// created it. cancel ends wctx.
func (o *observer) arm(wctx context.Context, cancel context.CancelFunc) (clientv3.WatchChan, error) {
	// clientv3's Watch blocks until the server creates the watch: the
	// timeout has to cancel the watch's own context to bound it.
	var timedOut atomic.Bool
	timer := time.AfterFunc(observeArmTimeout, func() { timedOut.Store(true); cancel() })
	wctx = watchstream.Context(wctx, o.e.s.Client())
	wch := o.e.s.Client().Watch(wctx, o.e.keys, clientv3.WithPrefix(), clientv3.WithCreatedNotify())
	resp, ok := <-wch
	timer.Stop()
	watchstream.Ended(wctx, o.e.s.Client(), resp)
	switch {
	case timedOut.Load():
		return nil, fmt.Errorf("election: observe %q: watch not established within %v", o.e.name, observeArmTimeout)
	case ok && resp.Err() != nil && watchstream.TokenRefusal(resp.Err().Error()) && !o.refused:
		// No news either, once: the next watch goes on a new stream, with a
		// new token. Refused again, the token will not do (a static one,
		// none while auth is on), and the reader hears of it.
		o.refused = true
		return nil, fmt.Errorf("%w: %v", errWatchBroken, resp.Err())
	case !ok || resp.Err() != nil:
		return nil, watchErr(resp, ok)
	}
	o.refused = false
	return wch, nil
}

// apply folds a watch's events into v; true when the leader must be read
// again.
func (o *observer) apply(v *view, events []*clientv3.Event) (reread bool) {
	for _, ev := range events {
		key := string(ev.Kv.Key)
		switch {
		case ev.Kv.ModRevision <= v.rev: // already in the read
		case strings.HasPrefix(key, o.e.cands):
			v.rs = candidateEvent(v.rs, ev)
		case !strings.HasPrefix(key, o.e.q.Prefix): // another kind of the name
		case v.cur == nil && ev.Type == clientv3.EventTypePut:
			reread = true // somebody joined an empty queue
		case v.cur != nil && key == v.cur.Key && ev.Type == clientv3.EventTypeDelete:
			reread = true // the leader left: its successor is the oldest left
		case v.cur != nil && key == v.cur.Key:
			next := *v.cur // the leader proclaimed
			next.Value = string(ev.Kv.Value)
			v.cur = &next
		}
	}
	return reread
}

// read reads the leader and the candidates' records in one txn, bounded
// like the watch's arming: a read that hangs in a partition must become an
// Err observation, not silence.
func (o *observer) read() (*Leader, map[string]rank.Record, int64, error) {
	ctx, cancel := context.WithTimeout(o.ctx, observeArmTimeout)
	defer cancel()
	resp, err := retry.Once(o.e.q.Latency, ctx, o.e.s.Context(), func() (*clientv3.TxnResponse, error) {
		return o.e.s.Client().Txn(ctx).Then(
			clientv3.OpGet(o.e.q.Prefix, clientv3.WithFirstCreate()...),
			clientv3.OpGet(o.e.cands, clientv3.WithPrefix()),
		).Commit()
	})
	if err != nil {
		return nil, nil, 0, fmt.Errorf("election: observe %q: %w", o.e.name, err)
	}
	var cur *Leader
	if kvs := resp.Responses[0].GetResponseRange().Kvs; len(kvs) > 0 {
		cur = &Leader{Value: string(kvs[0].Value), Key: string(kvs[0].Key),
			Token: fencing.Token{Name: o.e.name, Revision: kvs[0].CreateRevision, Cluster: resp.Header.GetClusterId()}}
	}
	return cur, records(resp.Responses[1].GetResponseRange().Kvs), resp.Header.Revision, nil
}

// records decodes candidates' records, by key; a record that does not
// decode is left out, as Run's candidacy does.
func records(kvs []*mvccpb.KeyValue) map[string]rank.Record {
	rs := make(map[string]rank.Record, len(kvs))
	for _, kv := range kvs {
		if r, err := rank.Decode(string(kv.Key), kv.Value); err == nil {
			rs[r.Key] = r
		}
	}
	return rs
}

// candidateEvent applies a watched change of a candidate's record to rs.
// A record that does not decode is left out, as Run's candidacy does.
func candidateEvent(rs map[string]rank.Record, ev *clientv3.Event) map[string]rank.Record {
	key := string(ev.Kv.Key)
	delete(rs, key)
	if ev.Type == clientv3.EventTypePut {
		if r, err := rank.Decode(key, ev.Kv.Value); err == nil {
			rs[key] = r
		}
	}
	return rs
}

// candidates lists rs by key, each marked preferred or not; nil when empty.
func candidates(rs map[string]rank.Record) []Candidate {
	var cs []Candidate
	for _, k := range slices.Sorted(maps.Keys(rs)) {
		r := rs[k]
		cs = append(cs, Candidate{Key: k, ID: r.ID, Priority: r.Priority, Drain: r.Drain, Preferred: rank.Preferred(rs, r)})
	}
	return cs
}

// watchErr tells a watch that ended for no reason the caller needs to know
// (compacted, closed with its connection) from one that ended because etcd
// cannot answer (no leader, no permission): only the latter is reported.
func watchErr(resp clientv3.WatchResponse, ok bool) error {
	if !ok {
		return errWatchBroken
	}
	err := resp.Err()
	if err == nil || errors.Is(err, rpctypes.ErrCompacted) {
		return fmt.Errorf("%w: %v", errWatchBroken, err)
	}
	return fmt.Errorf("election: watch: %w", retry.Typed(err))
}

// report makes the state pending, unless the reader has it already.
func (o *observer) report(cur *Leader, rs map[string]rank.Record) {
	obs := Observation{Leader: cur, Candidates: candidates(rs)}
	if o.sent && same(o.last.Leader, cur) && slices.EqualFunc(o.last.Candidates, obs.Candidates, sameCandidate) {
		o.pending = nil // back to what the reader has
		return
	}
	o.pending = &obs
}

func (o *observer) send(obs Observation) bool {
	select {
	case o.ch <- obs:
		return true
	case <-o.ctx.Done():
		return false
	}
}

// pause backs off between failed attempts, doubling up to observeRetryMax.
func (o *observer) pause() {
	t := time.NewTimer(o.retry)
	defer t.Stop()
	select {
	case <-t.C:
	case <-o.ctx.Done():
	}
	o.retry = min(2*o.retry, observeRetryMax)
}

func sameCandidate(a, b Candidate) bool {
	return a.Key == b.Key && a.ID == b.ID && slices.Equal(a.Priority, b.Priority) && a.Drain == b.Drain && a.Preferred == b.Preferred
}

func same(a, b *Leader) bool {
	if a == nil || b == nil {
		return a == b
	}
	return *a == *b
}
