package election

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"sync"

	"github.com/leasehold/leasehold/fencing"
	"github.com/leasehold/leasehold/internal/keyspace"
	"github.com/leasehold/leasehold/internal/rank"
	"github.com/leasehold/leasehold/internal/retry"
	"github.com/leasehold/leasehold/internal/sessionlink"
	"github.com/leasehold/leasehold/internal/watchstream"
	"go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// A candidacy is a ranked replica's record among a name's candidates, on one
// session, and its view of the others' records. The records sit next to the
// election's queue, each on its replica's session lease, so a candidate
// whose lease is gone is gone from every view with its queue key.
type candidacy struct {
	link   *sessionlink.Link
	prefix string // of the name's records
	drain  *Drain
	log    *slog.Logger

	mu      sync.Mutex
	self    rank.Record                     // as last written, once etcd answered
	records map[string]rank.Record          // by key, as last read or watched
	rev     int64                           // the view holds every change up to this revision
	err     error                           // why etcd refused the record; nil if it did not
	changed chan struct{}                   // closed at each change of records
	cancels map[int]context.CancelCauseFunc // of whilePreferred's contexts
	nextID  int                             // of the next entry in cancels

	stop context.CancelFunc
	done chan struct{} // closed when the watch has returned

	// The first campaign's enqueue writes the record (firstWrite); first is
	// closed once it has answered, or will not, and wrote says whether the
	// record went with it.
	first     chan struct{}
	firstOnce sync.Once
	wrote     bool

	// judging, set by tests before a successor starts, runs each time a
	// successor's await has judged next and is about to wait.
	judging func(next *mvccpb.KeyValue)
}

// join starts this replica's candidacy for name on s, and follows the
// others' records until leave or the session ends. The record goes out with
// the first campaign's enqueue, in its txn (firstWrite): the record and the
// queue key appear at one revision, so a leader that gives way sees both at
// once. Until that txn answers, the view is empty and this replica ranks as
// preferred. That is safe because the view only steers who campaigns (a
// term won is checked against the records read in its own txn, see
// readRecords), and the usual case is a replica the others give way to.
func join(s *fencing.Session, name string, levels []int64, drain *Drain, log *slog.Logger) *candidacy {
	l := sessionlink.Of(s)
	prefix := keyspace.Prefix(l.Root, keyspace.KindCandidate, name)
	c := &candidacy{link: l, prefix: prefix, drain: drain, log: log, changed: make(chan struct{}), done: make(chan struct{}), first: make(chan struct{}),
		self: rank.Record{Key: prefix + l.KeyStem + "0", ID: l.Identity, Priority: levels}}
	var draining <-chan struct{}
	if drain != nil {
		c.self.Drain, draining = drain.state()
	}
	wctx, stop := context.WithCancel(l.Life)
	c.stop = stop
	go c.follow(wctx, c.open(wctx), draining)
	return c
}

// firstWrite returns the writes and the callback of the first campaign's
// enqueue (revqueue.Queue's With and Wrote), then nils: later campaigns
// leave the record to follow.
func (c *candidacy) firstWrite() ([]clientv3.Op, func([]*etcdserverpb.ResponseOp, int64)) {
	select {
	case <-c.first:
		return nil, nil
	default:
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	put := clientv3.OpPut(c.self.Key, rank.Encode(c.self), clientv3.WithLease(c.link.Lease))
	return []clientv3.Op{put}, c.enqueued
}

// enqueued takes the records read in the txn that wrote the record with
// the first enqueue, at rev; none if an earlier txn of it did, whose reply
// was lost (follow's read then fills the view).
func (c *candidacy) enqueued(also []*etcdserverpb.ResponseOp, rev int64) {
	if len(also) == 1 && also[0].GetResponseRange() != nil {
		c.replace(also[0].GetResponseRange().Kvs, rev, nil)
	}
	c.mu.Lock()
	c.wrote = true
	c.mu.Unlock()
	c.firstDone()
}

// firstDone tells follow that the first campaign's enqueue has answered,
// or will not: if it did not write the record, follow does.
func (c *candidacy) firstDone() { c.firstOnce.Do(func() { close(c.first) }) }

// open makes a watch of the records from now on (see watchFromNow).
func (c *candidacy) open(ctx context.Context) <-chan watchOn {
	return c.watchFromNow(ctx, c.prefix)
}

// watchFromNow makes a watch of prefix from now on, in a goroutine the
// session owns, while the caller reads: not a watch from the read's
// revision, which etcd catches up only every 100 ms, and a handover would
// wait for. The channel yields the watch once etcd has created it
// (clientv3's Watch returns only then, and a resign must not wait for
// that), or a closed one once ctx or the session ends; the caller then
// checks it began in time (arm). The watch fails when its member has no
// raft leader: a member cut off from the quorum would otherwise keep it
// open and silent while the session renews through another member.
func (c *candidacy) watchFromNow(ctx context.Context, prefix string) <-chan watchOn {
	made := make(chan watchOn, 1)
	ctx = watchstream.Context(clientv3.WithRequireLeader(ctx), c.link.Client)
	if !c.link.Go(func() {
		made <- watchOn{c.link.Client.Watch(ctx, prefix, clientv3.WithPrefix(), clientv3.WithCreatedNotify()), ctx}
	}) {
		closed := make(chan clientv3.WatchResponse)
		close(closed)
		made <- watchOn{closed, ctx}
	}
	return made
}

// watchOn is a watch and the context it was made with, which tells
// watchstream.Ended the stream it went on.
type watchOn struct {
	wch clientv3.WatchChan
	ctx context.Context
}

// arm takes wch's created notice. A watch that began past the last read
// would miss the records written in between: then it reads again.
func (c *candidacy) arm(ctx context.Context, w watchOn) error {
	select {
	case resp, ok := <-w.wch:
		switch {
		case !ok:
			return fmt.Errorf("election: watch candidates %q: %w", c.prefix, errWatchBroken)
		case resp.Err() != nil:
			watchstream.Ended(w.ctx, c.link.Client, resp)
			return fmt.Errorf("election: watch candidates %q: %w", c.prefix, retry.Typed(resp.Err()))
		case resp.Header.Revision > c.seen():
			return c.read(ctx, nil)
		}
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// seen is the revision the view is complete up to.
func (c *candidacy) seen() int64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.rev
}

// leave stops following the records; the session's end removes the record.
func (c *candidacy) leave() {
	c.stop()
	<-c.done
}

// preferred reports whether no live candidate ranks above this replica, and
// returns a channel closed at the next change of the view. A candidacy
// whose record etcd refused is never preferred (see failed).
func (c *candidacy) preferred() (bool, <-chan struct{}) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.preferredLocked(), c.changed
}

func (c *candidacy) preferredLocked() bool {
	return c.err == nil && rank.Preferred(c.records, c.self)
}

// fail marks the candidacy refused: etcd will not take its record (no
// permission on the candidates' keys), so Run must stop and say why.
func (c *candidacy) fail(err error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.err = err
	c.notify()
}

// failed returns why etcd refused this replica's record, or nil.
func (c *candidacy) failed() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.err
}

// whilePreferred returns a child of ctx that ends, with a cause wrapping
// ErrPreempted, once a live candidate ranks above this replica, and a stop
// that ends it. The change of the view that says so ends it on the spot
// (notify), with no goroutine to wake in between: a handover waits for it.
func (c *candidacy) whilePreferred(ctx context.Context) (context.Context, func()) {
	pctx, cancel := context.WithCancelCause(ctx)
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.preferredLocked() {
		cancel(c.preemptionLocked())
		return pctx, func() {}
	}
	if c.cancels == nil {
		c.cancels = map[int]context.CancelCauseFunc{}
	}
	id := c.nextID
	c.nextID++
	c.cancels[id] = cancel
	return pctx, func() {
		c.mu.Lock()
		delete(c.cancels, id)
		c.mu.Unlock()
		cancel(nil)
	}
}

// preemption says who this replica gives way to, or why it cannot lead.
func (c *candidacy) preemption() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.preemptionLocked()
}

func (c *candidacy) preemptionLocked() error {
	if c.err != nil {
		return c.err
	}
	others := maps.Clone(c.records)
	delete(others, c.self.Key)
	top := rank.Top(others)
	if len(top) == 0 {
		return ErrPreempted
	}
	r := others[top[0]]
	if c.self.Drain {
		return fmt.Errorf("%w: drained; %q (priority %v) is live", ErrPreempted, r.ID, r.Priority)
	}
	return fmt.Errorf("%w: %q (priority %v) ranks above %v", ErrPreempted, r.ID, r.Priority, c.self.Priority)
}

// readRecords is the read of every record that a campaign makes in the txn
// that finds it leads (revqueue.Queue.Also): a term just won is checked
// against records written before the win that the watch may not have
// delivered yet, with no request of its own.
func (c *candidacy) readRecords() clientv3.Op { return clientv3.OpGet(c.prefix, clientv3.WithPrefix()) }

// refresh takes into the view the records read along with the win (resps,
// at rev), or reads them again if the win came without them.
func (c *candidacy) refresh(ctx context.Context, resps []*etcdserverpb.ResponseOp, rev int64) error {
	if len(resps) == 1 {
		if rr := resps[0].GetResponseRange(); rr != nil {
			c.replace(rr.Kvs, rev, nil)
			return nil
		}
	}
	return c.read(ctx, nil)
}

// read replaces the view with a fresh read, after writing this replica's
// record as put in the same txn when put is set; the watch's events up to
// the read's revision are then old news.
func (c *candidacy) read(ctx context.Context, put *rank.Record) error {
	ops := []clientv3.Op{clientv3.OpGet(c.prefix, clientv3.WithPrefix())}
	if put != nil {
		ops = append([]clientv3.Op{clientv3.OpPut(put.Key, rank.Encode(*put), clientv3.WithLease(c.link.Lease))}, ops...)
	}
	var resp *clientv3.TxnResponse
	var unsure bool
	err := retry.Until(ctx, c.link.Life, c.link.Latency, &unsure, func(ctx context.Context) (err error) {
		resp, err = c.link.Client.Txn(ctx).Then(ops...).Commit()
		return err
	})
	if err != nil {
		return fmt.Errorf("election: candidates %q: %w", c.prefix, err)
	}
	last := resp.Responses[len(resp.Responses)-1].GetResponseRange()
	if len(resp.Responses) != len(ops) || last == nil {
		return fmt.Errorf("election: candidates %q: %w", c.prefix, retry.ErrMalformed)
	}
	c.replace(last.Kvs, resp.Header.Revision, put)
	return nil
}

// follow applies the records' changes from the watch made yields, making
// a new one and reading again when it breaks, and writes this replica's
// record again when the drain changes or someone deleted it, until ctx ends.
func (c *candidacy) follow(ctx context.Context, made <-chan watchOn, draining <-chan struct{}) {
	defer close(c.done)
	select {
	case <-c.first:
	case <-ctx.Done():
		return
	}
	c.mu.Lock()
	wrote := c.wrote
	c.mu.Unlock()
	if !wrote { // else the enqueue's txn wrote the record and read the others
		c.write(ctx)
	}
	// The pause doubles while watches fail to arm: a refused one (a denied
	// range) is refused again.
	wait := retry.MinBackoff
	for {
		w := <-made // ctx's end ends the wait
		err := c.arm(ctx, w)
		if err == nil {
			wait = retry.MinBackoff
			draining = c.sync(ctx, draining) // the record, if the first write failed
			err = c.watch(ctx, w, draining)
		}
		if ctx.Err() != nil {
			return
		}
		if !errors.Is(err, errWatchBroken) {
			c.log.Warn("watch of candidates failed; reading again", "err", err)
		}
		retry.Pause(ctx, wait)
		wait = min(2*wait, retry.MaxBackoff)
		made = c.open(ctx)
		if err := c.read(ctx, nil); err == nil {
			draining = c.sync(ctx, draining)
		}
	}
}

// write writes the record and reads the others; a refusal fails the
// candidacy.
func (c *candidacy) write(ctx context.Context) {
	c.mu.Lock()
	self := c.self
	c.mu.Unlock()
	if err := c.read(ctx, &self); err != nil && ctx.Err() == nil {
		if refused(err) {
			c.fail(err)
		} else {
			c.log.Warn("writing the candidate record failed", "err", err)
		}
	}
}

// watch applies the records' changes from w until it breaks or ctx ends.
func (c *candidacy) watch(ctx context.Context, w watchOn, draining <-chan struct{}) error {
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-draining:
			draining = c.sync(ctx, draining)
		case resp, ok := <-w.wch:
			if !ok || resp.Canceled {
				watchstream.Ended(w.ctx, c.link.Client, resp)
				return errWatchBroken
			}
			if err := resp.Err(); err != nil {
				return retry.Typed(err)
			}
			c.apply(resp.Events, resp.Header.Revision)
			draining = c.sync(ctx, draining)
		}
	}
}

// sync writes this replica's record again if the drain changed or the
// record is missing from the view, and returns the drain's next change. A
// changed drain counts once etcd has answered the write, with the records
// read in its txn: judged on the view before it, a drained leader would
// give way to a candidate whose record was already gone.
func (c *candidacy) sync(ctx context.Context, draining <-chan struct{}) <-chan struct{} {
	c.mu.Lock()
	_, present := c.records[c.self.Key]
	self := c.self
	if c.drain != nil {
		self.Drain, draining = c.drain.state()
	}
	changed := !present || self.Drain != c.self.Drain
	c.mu.Unlock()
	if changed {
		if err := c.read(ctx, &self); err != nil && ctx.Err() == nil {
			c.log.Warn("writing the candidate record failed", "err", err)
		}
	}
	return draining
}

// apply takes a watch response's events into the view; rev, its header's
// revision, is the one the view is then complete up to.
func (c *candidacy) apply(evs []*clientv3.Event, rev int64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, ev := range evs {
		if ev.Kv.ModRevision <= c.rev {
			continue // the view has it
		}
		key := string(ev.Kv.Key)
		if ev.Type == clientv3.EventTypeDelete {
			delete(c.records, key)
			continue
		}
		c.set(key, ev.Kv.Value)
	}
	c.rev = max(c.rev, rev)
	c.notify()
}

// replace makes kvs, read at rev, the view, and self, when set, this
// replica's record as written in the txn of that read. A read older than
// the view (a campaign's, answered after the watch delivered later
// changes) is left out: it would bring back a record whose deletion the
// view has already applied, for good.
func (c *candidacy) replace(kvs []*mvccpb.KeyValue, rev int64, self *rank.Record) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if self != nil {
		c.self = *self
	}
	if rev >= c.rev {
		c.rev = rev
		c.records = map[string]rank.Record{}
		for _, kv := range kvs {
			c.set(string(kv.Key), kv.Value)
		}
	}
	c.notify()
}

// set records the record key key with value; one that cannot be decoded
// (not written by Run) is left out, as a candidate that does not rank.
func (c *candidacy) set(key string, value []byte) {
	r, err := rank.Decode(key, value)
	if err != nil {
		c.log.Warn("ignoring a candidate record", "err", err)
		delete(c.records, key)
		return
	}
	c.records[key] = r
}

// notify tells the view's followers of a change, and ends whilePreferred's
// contexts when this replica is no longer preferred. Cancelling runs no
// code of theirs (a context's AfterFunc runs in its own goroutine), so it
// is safe under mu.
func (c *candidacy) notify() {
	close(c.changed)
	c.changed = make(chan struct{})
	if len(c.cancels) > 0 && !c.preferredLocked() {
		cause := c.preemptionLocked()
		for id, cancel := range c.cancels {
			cancel(cause)
			delete(c.cancels, id)
		}
	}
}
