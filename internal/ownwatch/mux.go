package ownwatch

import (
	"cmp"
	"context"
	"reflect"
	"sync"
	"time"

	"github.com/leasehold/leasehold/internal/watchstream"
	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// Mux serves every watch of one session on one etcd watch stream, read by
// one goroutine and written by another: a watch costs a map entry, its
// context and its registration, and no goroutine of its own (clientv3 gives
// each Watch call two). A broken stream is reopened and every watch re-armed
// on it, each with the read that covers the gap.
type Mux struct {
	cli  *clientv3.Client
	life context.Context
	run  func(f func()) bool

	start   sync.Once
	started bool // set once by start: the serving goroutine runs

	mu     sync.Mutex
	ws     map[int64]*Watcher // every live watch, by its watch ID
	nextID int64
	gen    int                // counts streams; a retry meant for an older one is dropped
	live   bool               // a stream is open: out is sent on it
	out    []*pb.WatchRequest // requests for the open stream, in order
	// creating are the IDs of the creates sent on the open stream and not
	// yet answered, in order: etcd answers a create it refuses (an expired
	// auth token, a denied range) with watch ID -1, not the one asked for.
	creating []int64
	wake     chan struct{}      // one token: out has requests
	reopen   context.CancelFunc // ends the open stream
	// idle are watches on the open stream whose Watcher has ended, by key,
	// kept for the next Watcher of the key (a waiter behind the same key,
	// cycle after cycle): reused, a watch costs no create and no cancel.
	idle map[string]*idleWatch
}

// idleWatch is a watch on the open stream that serves no Watcher.
type idleWatch struct {
	key   string
	id    int64
	start int64 // every event of its key after start comes on it, in order
	timer *time.Timer
}

// idleFor is how long a watch waits for reuse before it is cancelled: long
// enough for the next cycle of a lock handed over in a loop.
var idleFor = time.Second

// maxIdle bounds the idle watches of a session.
const maxIdle = 64

// NewMux returns the watch multiplexer of the session whose life is life,
// running its goroutines with run (see Owner.Go); nil if cli's KV or Watcher
// is wrapped (clientv3/namespace, say): the raw stream would not see the
// wrapped keys, and each watch then goes through cli.Watch.
func NewMux(cli *clientv3.Client, life context.Context, run func(f func()) bool) *Mux {
	if reflect.TypeOf(cli.Watcher) != plainWatcher || reflect.TypeOf(cli.KV) != plainKV {
		return nil
	}
	m := &Mux{cli: cli, life: life, run: run, ws: map[int64]*Watcher{}, idle: map[string]*idleWatch{}, wake: make(chan struct{}, 1)}
	context.AfterFunc(life, m.endAll) // at once, even while the stream waits on the network
	return m
}

var (
	plainWatcher = reflect.TypeOf(clientv3.NewWatchFromWatchClient(nil, nil))
	plainKV      = reflect.TypeOf(clientv3.NewKVFromKVClient(nil, nil))
)

// add serves w from now until its context ends; false if the session has
// ended.
func (m *Mux) add(w *Watcher) bool {
	m.start.Do(func() { m.started = m.run(m.serve) })
	if !m.started {
		return false
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.life.Err() != nil {
		return false // endAll may have run already: it would miss w
	}
	if iw := m.idle[w.o.Key]; iw != nil {
		m.unidle(iw)
		w.id, w.start = iw.id, iw.start
		m.ws[w.id] = w
		// Every event after start comes on the watch: past what the key was
		// seen alive at, none was missed; before its life (an earlier
		// life's), route skips them.
		if iw.start <= max(w.o.Rev, w.o.Seen) {
			w.markArmed()
		} else {
			m.run(w.check)
		}
	} else {
		m.nextID++
		w.id = m.nextID
		m.ws[w.id] = w
		m.send(m.create(w))
	}
	context.AfterFunc(w.ctx, func() { m.remove(w) })
	return true
}

// remove stops serving w, whose context has ended. A watch the server has
// created on the open stream is kept idle for the next watch of its key, if
// none is; any other is cancelled.
func (m *Mux) remove(w *Watcher) {
	m.mu.Lock()
	delete(m.ws, w.id)
	if m.live && w.start > 0 && m.idle[w.o.Key] == nil && len(m.idle) < maxIdle {
		iw := &idleWatch{key: w.o.Key, id: w.id, start: w.start}
		iw.timer = time.AfterFunc(idleFor, func() { m.expire(iw) })
		m.idle[iw.key] = iw
	} else {
		m.send(cancel(w.id))
	}
	m.mu.Unlock()
	w.finish()
}

// expire cancels iw unless it was reused or its stream ended.
func (m *Mux) expire(iw *idleWatch) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.idle[iw.key] == iw {
		m.unidle(iw)
		m.send(cancel(iw.id))
	}
}

// unidle takes iw out of the idle set. Called with mu held.
func (m *Mux) unidle(iw *idleWatch) {
	iw.timer.Stop()
	delete(m.idle, iw.key)
}

// dropIdle forgets every idle watch: the stream they were on has ended.
// Called with mu held.
func (m *Mux) dropIdle() {
	for _, iw := range m.idle {
		m.unidle(iw)
	}
}

// idleByID returns the idle watch with ID id, or nil. Called with mu held.
func (m *Mux) idleByID(id int64) *idleWatch {
	for _, iw := range m.idle {
		if iw.id == id {
			return iw
		}
	}
	return nil
}

// create returns the request that creates w's watch, which starts anew.
// Called with mu held.
func (m *Mux) create(w *Watcher) *pb.WatchRequest {
	w.start = 0
	return &pb.WatchRequest{RequestUnion: &pb.WatchRequest_CreateRequest{
		CreateRequest: &pb.WatchCreateRequest{Key: []byte(w.o.Key), WatchId: w.id}}}
}

// endAll ends every watch with the session's cause.
func (m *Mux) endAll() {
	m.mu.Lock()
	m.dropIdle()
	ws := make([]*Watcher, 0, len(m.ws))
	for _, w := range m.ws {
		ws = append(ws, w)
	}
	m.mu.Unlock()
	for _, w := range ws {
		w.cancel(context.Cause(m.life))
	}
}

// send queues r for the open stream; with none open, the next stream sends
// a create for every live watch. Called with mu held.
func (m *Mux) send(r *pb.WatchRequest) {
	if !m.live {
		return
	}
	m.out = append(m.out, r)
	if c := r.GetCreateRequest(); c != nil {
		m.creating = append(m.creating, c.WatchId)
	}
	select {
	case m.wake <- struct{}{}:
	default:
	}
}

func cancel(id int64) *pb.WatchRequest {
	return &pb.WatchRequest{RequestUnion: &pb.WatchRequest_CancelRequest{CancelRequest: &pb.WatchCancelRequest{WatchId: id}}}
}

// serve keeps a stream open while the session lives. It opens one again
// after a pause that doubles, up to maxRetryDelay, while streams end soon
// without creating a watch: each open fetches an auth token (a password
// check on the server), and a member without a leader refuses them all.
func (m *Mux) serve() {
	d := retryDelay
	for m.life.Err() == nil {
		opened := time.Now()
		// A stream that lived (a session with no watch creates none) is no
		// reason to wait long for the next one.
		if m.stream() || time.Since(opened) > maxRetryDelay {
			d = retryDelay
		}
		pause(m.life, d)
		d = min(2*d, maxRetryDelay)
	}
}

// stream opens a stream, creates every live watch on it, and routes its
// responses until it breaks. It reports whether the server created a watch
// on it.
func (m *Mux) stream() (created bool) {
	// Require a leader, as each clientv3 watch did: a member cut off from
	// the others ends the stream instead of going silent.
	ctx, cancel := context.WithCancel(clientv3.WithRequireLeader(m.life))
	defer cancel()
	s, err := pb.NewWatchClient(m.cli.ActiveConnection()).Watch(ctx)
	if err != nil {
		return false
	}
	m.mu.Lock()
	m.gen++
	m.live, m.reopen, m.out, m.creating = true, cancel, m.out[:0], nil
	for _, w := range m.ws {
		m.send(m.create(w))
	}
	m.mu.Unlock()
	sent := make(chan struct{})
	if !m.run(func() { defer close(sent); m.sender(ctx, cancel, s) }) {
		close(sent)
	}
	defer func() {
		cancel()
		<-sent
		m.mu.Lock()
		m.live, m.reopen, m.out, m.creating = false, nil, nil, nil
		m.dropIdle()
		m.mu.Unlock()
	}()
	for {
		resp, err := s.Recv()
		if err != nil {
			return created
		}
		created = m.route(resp) || created
	}
}

// sender writes the queued requests to s until ctx ends or a write fails
// (which ends the stream: the reader then sees it broken).
func (m *Mux) sender(ctx context.Context, fail context.CancelFunc, s pb.Watch_WatchClient) {
	for {
		select {
		case <-ctx.Done():
			return
		case <-m.wake:
		}
		m.mu.Lock()
		out := m.out
		m.out = nil
		m.mu.Unlock()
		for _, r := range out {
			if s.Send(r) != nil {
				fail()
				return
			}
		}
	}
}

// route hands one response to its watch. Anything that can wait on the
// network (the arming read, the lease read of a loss) runs in a goroutine of
// its own, so that one slow read never delays another watch's loss. It
// reports whether resp is a watch created.
func (m *Mux) route(resp *pb.WatchResponse) (created bool) {
	m.mu.Lock()
	id := resp.WatchId
	if resp.Created && len(m.creating) > 0 {
		// etcd answers creates in the order sent, refused ones too.
		if id == clientv3.InvalidWatchID {
			id = m.creating[0]
		}
		if m.creating = m.creating[1:]; len(m.creating) == 0 {
			m.creating = nil // a burst's array goes, not kept by its empty tail
		}
	}
	w := m.ws[id]
	created = resp.Created && !resp.Canceled
	if w != nil && created {
		w.retryIn = 0
	}
	m.advance(w, id, resp)
	gen := m.gen
	m.mu.Unlock()
	switch {
	case w == nil || w.ctx.Err() != nil:
		// Removed: its cancel is queued.
	case resp.Canceled:
		m.retry(w, gen, resp.CancelReason)
	case resp.Created:
		if w.o.known(resp.Header.Revision) {
			w.markArmed() // nothing happened since the key was seen alive
			return
		}
		m.run(w.check)
	default:
		for _, ev := range resp.Events {
			if ev.Kv.ModRevision < w.o.Rev {
				continue // an earlier life of the key, from a member that lags
			}
			if ev.Type == mvccpb.DELETE || ev.Kv.CreateRevision != w.o.Rev {
				m.run(func() { w.o.Owners.Lost(w.o.Key, w.o.Rev, w.goneCause((*clientv3.Event)(ev))) })
				return
			}
			if err := w.o.written(ev.Kv.ModRevision); err != nil {
				m.run(func() { w.o.Owners.Lost(w.o.Key, w.o.Rev, err) })
				return
			}
		}
	}
	return created
}

// advance moves the start of the watch id (w's, or an idle one) past what
// resp carries, and forgets an idle watch the server cancelled. Called with
// mu held.
func (m *Mux) advance(w *Watcher, id int64, resp *pb.WatchResponse) {
	var start *int64
	if w != nil {
		start = &w.start
	} else if iw := m.idleByID(id); iw == nil {
		return
	} else if resp.Canceled {
		// etcd keeps a watch it cancelled (compacted) until told to drop it.
		m.unidle(iw)
		m.send(cancel(iw.id))
		return
	} else {
		start = &iw.start
	}
	switch {
	case resp.Canceled:
		*start = 0
	case resp.Created:
		*start = resp.Header.Revision
	}
	for _, ev := range resp.Events {
		*start = max(*start, ev.Kv.ModRevision)
	}
}

// retry creates w again after the server cancelled it or refused to create
// it: at once on a new stream when the stream's auth token is the reason (a
// new stream gets a new token), else on this one after a pause that doubles
// with each refusal in a row (a denied range stays denied), up to
// maxRetryDelay. The new create has a new ID, after a cancel of the old: etcd
// keeps a watch it cancelled for compaction under its ID, and refuses a
// create that reuses it.
func (m *Mux) retry(w *Watcher, gen int, reason string) {
	if watchstream.TokenRefusal(reason) {
		m.mu.Lock()
		if m.gen == gen && m.reopen != nil {
			m.reopen()
		}
		m.mu.Unlock()
		return
	}
	m.mu.Lock()
	d := cmp.Or(w.retryIn, retryDelay)
	w.retryIn = min(2*d, maxRetryDelay)
	m.mu.Unlock()
	time.AfterFunc(d, func() {
		m.mu.Lock()
		defer m.mu.Unlock()
		if m.gen != gen || m.ws[w.id] != w {
			return // removed, or created again on a new stream
		}
		m.send(cancel(w.id))
		delete(m.ws, w.id)
		m.nextID++
		w.id = m.nextID
		m.ws[w.id] = w
		m.send(m.create(w))
	})
}
