package election

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/leasehold/leasehold/internal/retry"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// Observation is one state of an election: who leads (nil: nobody), or an
// error that kept Observe from knowing.
type Observation struct {
	Leader *Leader // nil when nobody leads (or when Err is set)
	Err    error
}

// Observe sends the current state first (Leader nil when nobody leads), then
// each change: a new leader, nobody leading, or the leader's value changed
// by Proclaim. A state is sent only once it was read from etcd, so a leader
// whose key is gone is never reported as leading. When a read or the watch
// fails, or its watch cannot be established or is ended by etcd (a lost etcd
// leader), or a check read after 5 s of silence fails (a partition), Observe
// sends an Observation with Err and tries again with backoff. A watch that
// is compacted or broken is resumed from a fresh read without an error. The
// channel closes promptly once ctx is done, and at no other time, except
// for bad input (a nil ctx, an Election New did not make): then it holds
// one Observation whose Err wraps fencing.ErrInvalidArgument, and is
// already closed.
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
	e     *Election
	ctx   context.Context
	ch    chan<- Observation
	last  *Leader
	sent  bool
	retry time.Duration
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
		if !errors.Is(err, errWatchBroken) && !o.send(Observation{Err: err}) {
			return
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
	// clientv3's Watch blocks until the server creates the watch: the
	// timeout has to cancel the watch's own context to bound it.
	var timedOut atomic.Bool
	arm := time.AfterFunc(observeArmTimeout, func() { timedOut.Store(true); cancel() })
	wch := o.e.s.Client().Watch(wctx, o.e.q.Prefix, clientv3.WithPrefix(), clientv3.WithCreatedNotify())
	resp, ok := <-wch
	arm.Stop()
	switch {
	case timedOut.Load():
		return fmt.Errorf("election: observe %q: watch not established within %v", o.e.name, observeArmTimeout)
	case !ok || resp.Err() != nil:
		return watchErr(resp, ok)
	}
	cur, rev, err := o.read()
	if err != nil {
		return err
	}
	if !o.report(cur) {
		return nil
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
		select {
		case resp, ok = <-wch:
		case <-quiet.C:
			if cur, rev, err = o.read(); err != nil {
				return err
			}
			if !o.report(cur) {
				return nil
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
		reread := false
		for _, ev := range resp.Events {
			switch {
			case ev.Kv.ModRevision <= rev: // already in the read
			case cur == nil && ev.Type == clientv3.EventTypePut:
				reread = true // somebody joined an empty queue
			case cur != nil && string(ev.Kv.Key) == cur.Key && ev.Type == clientv3.EventTypeDelete:
				reread = true // the leader left: its successor is the oldest left
			case cur != nil && string(ev.Kv.Key) == cur.Key:
				next := *cur // the leader proclaimed
				next.Value = string(ev.Kv.Value)
				cur = &next
			}
		}
		if reread {
			if cur, rev, err = o.read(); err != nil {
				return err
			}
		}
		if !o.report(cur) {
			return nil
		}
	}
}

// read reads the leader, bounded like the watch's arming: a read that hangs
// in a partition must become an Err observation, not silence.
func (o *observer) read() (*Leader, int64, error) {
	ctx, cancel := context.WithTimeout(o.ctx, observeArmTimeout)
	defer cancel()
	return o.e.leader(ctx)
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

// report sends cur if it differs from what was sent last. It returns false
// once ctx is done.
func (o *observer) report(cur *Leader) bool {
	if o.sent && same(o.last, cur) {
		return true
	}
	if !o.send(Observation{Leader: cur}) {
		return false
	}
	o.last, o.sent, o.retry = cur, true, observeRetryMin
	return true
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

func same(a, b *Leader) bool {
	if a == nil || b == nil {
		return a == b
	}
	return *a == *b
}
