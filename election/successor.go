package election

import (
	"context"
	"sync"
	"time"

	"github.com/leasehold/leasehold/fencing"
	"github.com/leasehold/leasehold/internal/keyspace"
	"github.com/leasehold/leasehold/internal/prefer"
	"github.com/leasehold/leasehold/internal/retry"
	"github.com/leasehold/leasehold/internal/watchstream"
	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// handoffWait bounds how long a leader that gives way waits for a preferred
// candidate to queue next: one that never does (its campaigns fail) delays
// the handover by no more than this.
const handoffWait = 2 * time.Second

// A successor follows, for one term, whether the candidate queued right
// behind it is a preferred one: resigning then hands the name straight to
// it, not to a lower candidate that has yet to see the preferred one's
// record and withdraw (it would lead for a moment, then give way in turn).
// A ranked leader follows from its work's start, so that when a preferred
// candidate appears the answer is known without a read of the queue.
type successor struct {
	t    *Term
	stop context.CancelFunc

	mu      sync.Mutex
	ready   bool
	changed chan struct{} // closed at each change of ready
}

// successor starts following who queues right behind t, until stop or the
// session's end. The session owns the goroutine.
func (c *candidacy) successor(t *Term) *successor {
	ctx, stop := context.WithCancel(c.link.Life)
	s := &successor{t: t, stop: stop, changed: make(chan struct{})}
	if !c.link.Go(func() { c.followQueue(ctx, t, s) }) {
		stop() // the session has ended: nothing to hand over
	}
	return s
}

// await waits, up to handoffWait, until the candidate right behind the term
// is a preferred one, or ctx ends.
func (s *successor) await(ctx context.Context) {
	ctx, cancel := context.WithTimeout(ctx, handoffWait)
	defer cancel()
	for {
		s.mu.Lock()
		ready, changed := s.ready, s.changed
		s.mu.Unlock()
		if ready {
			return
		}
		select {
		case <-changed:
		case <-ctx.Done():
			return
		}
	}
}

func (s *successor) set(ready bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if ready != s.ready {
		s.ready = ready
		close(s.changed)
		s.changed = make(chan struct{})
	}
}

// followQueue keeps s.ready true exactly while the key right behind t's is
// a preferred candidate's, by one read and a watch of the queue: a read
// again only when the key right behind goes, or the watch began past the
// read. The candidate records' changes are seen through c's view.
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
			resp, err := retry.Once(c.link.Latency, ctx, c.link.Life, func() (*clientv3.GetResponse, error) {
				return c.link.Client.Get(ctx, queue, append(clientv3.WithFirstCreate(), clientv3.WithLimit(2))...)
			})
			if err != nil {
				retry.Pause(ctx, retry.MinBackoff)
				continue
			}
			if len(resp.Kvs) == 0 || string(resp.Kvs[0].Key) != t.Key() {
				s.set(false) // the term is lost: nothing to hand over
				return
			}
			next, read, readRev = nil, false, resp.Header.Revision
			if len(resp.Kvs) == 2 {
				next = resp.Kvs[1]
			}
		}
		// The view's change channel first: a change made while next is
		// judged must wake this loop, not pass unseen.
		_, changed := c.preferred()
		if c.judging != nil {
			c.judging(next)
		}
		s.set(next != nil && c.isPreferred(next.Lease))
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
		case <-changed: // the view of the records: is next still preferred?
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

// isPreferred reports whether a queue key on lease is a preferred
// candidate's: its session's record is live and nothing ranks above it.
func (c *candidacy) isPreferred(lease int64) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	r, ok := c.records[c.prefix+keyspace.Stem(lease)+"0"]
	return ok && prefer.Preferred(c.records, r)
}
