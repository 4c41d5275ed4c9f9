package election

import (
	"context"
	"sync"
	"time"

	"github.com/leasehold/leasehold/fencing"
	"github.com/leasehold/leasehold/internal/keyspace"
	"github.com/leasehold/leasehold/internal/rank"
	"github.com/leasehold/leasehold/internal/retry"
	"github.com/leasehold/leasehold/internal/watchstream"
	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// handoffWait bounds how long a leader that resigns waits for the right
// candidate to queue next: one that never does (its campaigns fail) delays
// the handover by no more than this.
const handoffWait = 2 * time.Second

// A successor follows, for one term, who is queued right behind it, so that
// a leader that resigns can hand the name straight to the right candidate:
// not to a lower one that has yet to see a preferred one's record and
// withdraw (it would lead for a moment, then give way in turn). A ranked
// leader follows from its work's start, so that when it resigns the answer
// is known without a read of the queue. The candidates' records are judged
// when asked (await), against the candidacy's view as it is then.
type successor struct {
	c    *candidacy
	t    *Term
	stop context.CancelFunc

	mu      sync.Mutex
	known   bool             // next is the queue as read, and watched since
	gone    bool             // the term's key no longer leads: nothing to hand over
	next    *mvccpb.KeyValue // right behind the term's key; nil if none
	changed chan struct{}    // closed at each change of the fields above
}

// successor starts following who queues right behind t, until stop or the
// session's end. The session owns the goroutine.
func (c *candidacy) successor(t *Term) *successor {
	ctx, stop := context.WithCancel(c.link.Life)
	s := &successor{c: c, t: t, stop: stop, changed: make(chan struct{})}
	if !c.link.Go(func() { c.followQueue(ctx, t, s) }) {
		stop() // the session has ended: nothing to hand over
	}
	return s
}

// await waits until ok holds of the key right behind the term, and reports
// whether it did: false once the term is found gone or ctx ends.
func (s *successor) await(ctx context.Context, ok func(next *mvccpb.KeyValue) bool) bool {
	for {
		// The view's change channel first: a change made while next is
		// judged must wake this loop, not pass unseen.
		_, viewChanged := s.c.preferred()
		s.mu.Lock()
		known, gone, next, changed := s.known, s.gone, s.next, s.changed
		s.mu.Unlock()
		switch {
		case gone:
			return false
		case known && ok(next):
			return true
		}
		if s.c.judging != nil {
			s.c.judging(next)
		}
		select {
		case <-changed:
		case <-viewChanged:
		case <-ctx.Done():
			return false
		}
	}
}

// set records what the follower knows of the key right behind the term.
func (s *successor) set(known, gone bool, next *mvccpb.KeyValue) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if known != s.known || gone != s.gone || next != s.next {
		s.known, s.gone, s.next = known, gone, next
		close(s.changed)
		s.changed = make(chan struct{})
	}
}

// followQueue keeps s's next the key right behind t's, by one read and a
// watch of the queue: a read again only when the key right behind goes, or
// the watch began past the read.
func (c *candidacy) followQueue(ctx context.Context, t *Term, s *successor) {
	queue := keyspace.Prefix(c.link.Root, string(fencing.KindElection), t.Token().Name)
	// A watch created past the read reads again, for the enqueue that may
	// have landed in between.
	made := c.watchFromNow(ctx, queue)
	var w watchOn
	var next *mvccpb.KeyValue // right behind t's key, as of readRev and the events since
	read, readRev := true, int64(0)
	wait := retry.MinBackoff // doubles while watches fail to arm, as the candidacy's
	for ctx.Err() == nil {
		if read {
			s.set(false, false, nil) // until the read: the key behind may have gone
			resp, err := retry.Once(c.link.Latency, ctx, c.link.Life, func() (*clientv3.GetResponse, error) {
				return c.link.Client.Get(ctx, queue, append(clientv3.WithFirstCreate(), clientv3.WithLimit(2))...)
			})
			if err != nil {
				retry.Pause(ctx, retry.MinBackoff)
				continue
			}
			if len(resp.Kvs) == 0 || string(resp.Kvs[0].Key) != t.Key() {
				s.set(true, true, nil) // the term is lost: nothing to hand over
				return
			}
			next, read, readRev = nil, false, resp.Header.Revision
			if len(resp.Kvs) == 2 {
				next = resp.Kvs[1]
			}
		}
		s.set(true, false, next)
		select {
		case w = <-made:
			made = nil
		case resp, ok := <-w.wch:
			switch {
			case ctx.Err() != nil:
			case !ok || resp.Canceled || resp.Err() != nil:
				watchstream.Ended(w.ctx, c.link.Client, resp)
				retry.Pause(ctx, wait)
				wait = min(2*wait, retry.MaxBackoff)
				w, made, read = watchOn{}, c.watchFromNow(ctx, queue), true
			case resp.Created:
				read, wait = resp.Header.Revision > readRev, retry.MinBackoff
			default:
				next, read = behind(next, resp.Events, readRev)
			}
		case <-ctx.Done():
		}
	}
}

// behind applies a queue's events after rev to next, the key right behind
// the term's: with none, the first key created since takes the place; once
// next goes, only a read can tell who is behind now (read is true).
func behind(next *mvccpb.KeyValue, evs []*clientv3.Event, rev int64) (_ *mvccpb.KeyValue, read bool) {
	for _, ev := range evs {
		switch {
		case ev.Kv.ModRevision <= rev:
		case next == nil && ev.IsCreate():
			next = ev.Kv
		case next != nil && ev.Type == clientv3.EventTypeDelete && string(ev.Kv.Key) == string(next.Key):
			return nil, true
		}
	}
	return next, false
}

// preferredNext reports whether next, the key right behind a leader's, is
// a preferred candidate's: its session's record is live and nothing ranks
// above it. What a leader that gives way waits for.
func (c *candidacy) preferredNext(next *mvccpb.KeyValue) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	r, ok := c.records[c.recordKey(next)]
	return ok && rank.Preferred(c.records, r)
}

// unopposed reports whether no live record ranks above next, the key right
// behind a leader's: there is none, or it ranks nothing (it will not
// withdraw), or it is preferred. What a leader that leaves waits for: one
// that is opposed is about to withdraw, and would give up at once a term
// handed to it.
func (c *candidacy) unopposed(next *mvccpb.KeyValue) bool {
	if next == nil {
		return true
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	r, ok := c.records[c.recordKey(next)]
	return !ok || rank.Preferred(c.records, r)
}

// recordKey is the record key of the candidate whose queue key is kv, or
// "" for none.
func (c *candidacy) recordKey(kv *mvccpb.KeyValue) string {
	if kv == nil {
		return ""
	}
	return c.prefix + keyspace.Stem(kv.Lease) + "0"
}
