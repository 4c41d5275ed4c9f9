// Package ownwatch turns the ownership of one etcd key into a context: the
// context ends, with a cause, as soon as ownership can no longer be proven.
// It is the machinery behind guard.Watch and Hold.Context, kept here so that
// fencing and guard share it without an import cycle.
package ownwatch

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/leasehold/leasehold/internal/retry"
	"github.com/leasehold/leasehold/internal/watchstream"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// ErrKeyDeleted is the library's one "key gone" error, exported as
// fencing.ErrKeyDeleted: the cause of a watched context whose owner key was
// deleted or replaced by a key with another create revision, and the error
// of a queued waiter whose key was deleted.
var ErrKeyDeleted = errors.New("key deleted")

// ErrKeyWritten is the cause of a watch with Puts set whose key was written
// again after Seen: a semaphore's waiter learns that the key ahead moved up.
var ErrKeyWritten = errors.New("key written again")

// ErrRevoked is the cause, wrapping ErrKeyDeleted, of a watched context
// whose key was deleted by the write of its Owner's Revoker: a semaphore's
// hold revoked when its limit was lowered.
var ErrRevoked = errors.New("revoked")

// Owner names the key to watch and the create revision that proves
// ownership.
type Owner struct {
	Client *clientv3.Client
	Key    string
	Rev    int64
	// Life is the session's context: it ends, with the cause, when the
	// session stops vouching for its lease.
	Life    context.Context
	LeaseID clientv3.LeaseID
	// Expired is the cause to report, with ErrKeyDeleted, when the key went
	// because its lease was revoked or expired.
	Expired error
	// Owners is the session's registry: the watch registers there, so that
	// a loss proven elsewhere (a guarded txn, Unlock) ends it too.
	Owners *Registry
	// Go, if set, runs the watch's goroutine on behalf of the session, so
	// that closing the session waits for it; false means the session has
	// ended, and the watch ends at once. Unset: a plain goroutine.
	Go func(f func()) bool
	// Mux, if set, serves the watch on the session's one stream, with no
	// goroutine of its own; unset, the watch has a clientv3 Watch and a
	// goroutine.
	Mux *Mux
	// Latency, if set, estimates a request's time: the read that arms a
	// watch is sent again when its reply is overdue (see retry.Attempt).
	Latency *retry.Latency
	// Seen, if past Rev, is a revision at which the key was read alive at
	// Rev: a watch that starts there, or earlier, needs no read to arm.
	Seen int64
	// Revoker, if set, is a key whose write may delete the owner key (a
	// semaphore's limit record): a delete at the revision it was written is
	// a revocation, reported with ErrRevoked.
	Revoker string
	// Puts, if set, ends the watch also when the key is written again after
	// Seen, with ErrKeyWritten: a waiter's, not an owner's (Owners is then
	// the waiter's own registry).
	Puts bool
}

// written returns the cause for a put of the key at revision mod, or nil
// if it does not end the watch.
func (o Owner) written(mod int64) error {
	if !o.Puts || mod <= max(o.Seen, o.Rev) {
		return nil
	}
	return fmt.Errorf("%w: %q at revision %d", ErrKeyWritten, o.Key, mod)
}

// known reports whether the key is known alive at Rev at revision rev, where
// a watch starts: no read needs to cover a gap before it.
func (o Owner) known(rev int64) bool { return rev == o.Rev || rev > o.Rev && rev <= o.Seen }

// retryDelay paces re-arming a broken watch while the session still vouches.
const retryDelay = 50 * time.Millisecond

// maxRetryDelay caps the pause before a Mux creates again a watch the
// server keeps refusing.
const maxRetryDelay = 5 * time.Second

// leaseCheckTimeout bounds the one read that names the cause of a deleted
// key: the context is cancelled when it ends, whatever it found.
const leaseCheckTimeout = 100 * time.Millisecond

// Watch is Start, then a wait until the watch is armed (established on the
// server, and the key seen alive at or after its start revision), or
// ownership is lost, or parent is done (the context is then already done). cancel ends the watch with context.Canceled and returns after its
// goroutine has exited.
func Watch(parent context.Context, o Owner) (context.Context, context.CancelFunc) {
	w := Start(parent, o)
	<-w.armed
	return w.ctx, func() { w.Stop(context.Canceled) }
}

// Watcher is one running watch of an owner key.
type Watcher struct {
	o      Owner
	ctx    context.Context
	cancel context.CancelCauseFunc
	armed  chan struct{}
	done   chan struct{}
	wctx   context.Context // the current etcd watch's context
	wstop  context.CancelFunc

	// Served by a Mux: the watch's ID on the stream, the end of its
	// registration, and the once that closes armed.
	id         int64 // under the Mux's mu; Mux.retry gives it a new one
	unregister func()
	armOnce    sync.Once
	retryIn    time.Duration // the pause before the next retry; 0 after a create (under the Mux's mu)
	// start, once the server created the watch, is a revision after which
	// every event of the key comes on it, in order (under the Mux's mu).
	start int64
}

// Start returns at once a watch whose context is cancelled with a cause once
// o's ownership can no longer be proven: ErrKeyDeleted, the lease's cause, or
// parent's cause. The etcd watch is armed in the background; until it is,
// the context still ends with the session (at ValidUntil at the latest), and
// a deletion made before arming is found by the read that arming ends with.
func Start(parent context.Context, o Owner) *Watcher {
	ctx, cancel := context.WithCancelCause(parent)
	w := &Watcher{o: o, ctx: ctx, cancel: cancel, armed: make(chan struct{}), done: make(chan struct{})}
	if o.Mux != nil {
		w.unregister = o.Owners.Register(o.Key, o.Rev, func(cause error) { cancel(cause) })
		if !o.Mux.add(w) {
			cancel(context.Cause(o.Life)) // the session ended: nothing to watch
			w.finish()
		}
		return w
	}
	// The session's end cancels the watch at once, even while it is blocked
	// in etcd (clientv3's Watch call blocks until the server creates the
	// watch): the context ends at ValidUntil whatever the network does.
	stopLife := context.AfterFunc(o.Life, func() { cancel(context.Cause(o.Life)) })
	unregister := o.Owners.Register(o.Key, o.Rev, func(cause error) { cancel(cause) })
	if o.Life.Err() != nil {
		cancel(context.Cause(o.Life)) // now, not when the AfterFunc runs
	}
	watch := func() {
		defer close(w.done)
		defer unregister()
		defer stopLife()
		wch := w.arm()
		close(w.armed)
		w.run(wch)
	}
	switch {
	case o.Go == nil:
		go watch()
	case !o.Go(watch):
		cancel(context.Cause(o.Life)) // the session ended: nothing to watch
		unregister()
		stopLife()
		close(w.armed)
		close(w.done)
	}
	return w
}

// Context returns the watched context.
func (w *Watcher) Context() context.Context { return w.ctx }

// Stop ends the watch with cause (unless it already ended) and returns after
// its goroutine has exited.
func (w *Watcher) Stop(cause error) {
	w.cancel(cause)
	<-w.done
}

// arm starts an etcd watch from now and waits until the server created it,
// then covers the gap before its start revision with one read of the key.
// It returns nil once ownership is lost or ctx is done.
func (w *Watcher) arm() clientv3.WatchChan {
	// The pause doubles while creates fail: a refused one (a denied range)
	// is refused again.
	for d := retryDelay; w.ctx.Err() == nil; d = min(2*d, maxRetryDelay) {
		wctx, stop := context.WithCancel(clientv3.WithRequireLeader(w.ctx))
		w.wctx, w.wstop = watchstream.Context(wctx, w.o.Client), stop
		// From now, not from the token's revision: a watch that starts in the
		// past is served by etcd's unsynced loop, up to 100 ms late.
		wch := w.o.Client.Watch(w.wctx, w.o.Key, clientv3.WithCreatedNotify())
		if w.created(wch) {
			return wch
		}
		w.wstop()
		pause(w.ctx, d)
	}
	return nil
}

// created waits for the created notice of wch and checks the key is still
// ours at a revision no older than the watch's start.
func (w *Watcher) created(wch clientv3.WatchChan) bool {
	resp, ok := <-wch // wch closes if ctx ends
	if !ok || !resp.Created || resp.Err() != nil {
		watchstream.Ended(w.wctx, w.o.Client, resp)
		return false
	}
	if w.o.known(resp.Header.Revision) {
		return true // nothing happened since the key was seen alive
	}
	return w.read()
}

// read checks the key is still ours, now; false if the read failed.
func (w *Watcher) read() bool {
	var g *clientv3.GetResponse
	err := retry.Attempt(w.ctx, w.ctx, w.o.Latency, 0, func(ctx context.Context) (err error) {
		g, err = w.o.Client.Get(ctx, w.o.Key, clientv3.WithKeysOnly())
		return err
	})
	if err != nil {
		return false
	}
	if len(g.Kvs) == 0 || g.Kvs[0].CreateRevision != w.o.Rev {
		gone := fmt.Errorf("%w: %q not found at revision %d", ErrKeyDeleted, w.o.Key, g.Header.Revision)
		cause := w.leaseCause(gone, len(g.Kvs) == 0)
		if cause == gone && len(g.Kvs) == 0 && w.o.Revoker != "" {
			cause = w.revokedUnseen(gone)
		}
		w.o.Owners.Lost(w.o.Key, w.o.Rev, cause)
	} else if err := w.o.written(g.Kvs[0].ModRevision); err != nil {
		w.o.Owners.Lost(w.o.Key, w.o.Rev, err)
	}
	return true
}

// check arms a watch the Mux created at a revision past the key's: it
// reads the key until a read succeeds or the watch ends.
func (w *Watcher) check() {
	for !w.read() && w.ctx.Err() == nil {
		pause(w.ctx, retryDelay)
	}
	w.markArmed()
}

func (w *Watcher) markArmed() { w.armOnce.Do(func() { close(w.armed) }) }

// finish ends a watch served by a Mux once its context has ended.
func (w *Watcher) finish() {
	w.unregister()
	w.markArmed()
	close(w.done)
}

func (w *Watcher) run(wch clientv3.WatchChan) {
	defer func() {
		if w.wstop != nil {
			w.wstop()
		}
	}()
	for wch != nil {
		select {
		case <-w.ctx.Done():
			return
		case resp, ok := <-wch:
			if !ok || resp.Canceled || resp.Err() != nil {
				// Compacted or broken: re-arm from a fresh read, never
				// turn it into a loss while the session still vouches.
				watchstream.Ended(w.wctx, w.o.Client, resp)
				w.wstop()
				wch = w.arm()
				continue
			}
			for _, ev := range resp.Events {
				if ev.Kv.ModRevision < w.o.Rev {
					// An earlier life of the key (sessions reuse their
					// keys), from a watch made on a member that lags.
					continue
				}
				if ev.Type == clientv3.EventTypeDelete || ev.Kv.CreateRevision != w.o.Rev {
					// A proof for everything registered for the key (this
					// watch among them), as a failed guarded txn's is.
					w.o.Owners.Lost(w.o.Key, w.o.Rev, w.goneCause(ev))
					return
				}
				if err := w.o.written(ev.Kv.ModRevision); err != nil {
					w.o.Owners.Lost(w.o.Key, w.o.Rev, err)
					return
				}
			}
		}
	}
}

// goneCause tells a key deleted alone from one deleted with its lease: the
// session would learn of a revoked lease only at its next renewal. The read
// costs one round trip (at most leaseCheckTimeout) before the cancel, and a
// Revoker's one more; it never delays the cancel at ValidUntil, which the
// session does on its own.
func (w *Watcher) goneCause(ev *clientv3.Event) error {
	gone := fmt.Errorf("%w: %q %v at revision %d", ErrKeyDeleted, w.o.Key, ev.Type, ev.Kv.ModRevision)
	cause := w.leaseCause(gone, ev.Type == clientv3.EventTypeDelete)
	if cause != gone || ev.Type != clientv3.EventTypeDelete || w.o.Revoker == "" {
		return cause
	}
	return w.revokedCause(gone, ev.Kv.ModRevision)
}

// revokedCause is gone, wrapped in ErrRevoked when the Revoker was written
// at rev, the revision of the delete: one read, at that revision.
func (w *Watcher) revokedCause(gone error, rev int64) error {
	ctx, cancel := context.WithTimeout(w.ctx, leaseCheckTimeout)
	defer cancel()
	g, err := retry.Once(w.o.Latency, ctx, ctx, func() (*clientv3.GetResponse, error) {
		return w.o.Client.Get(ctx, w.o.Revoker, clientv3.WithRev(rev), clientv3.WithKeysOnly())
	})
	if err != nil || len(g.Kvs) == 0 || g.Kvs[0].ModRevision != rev {
		return gone
	}
	return fmt.Errorf("%w by a write of %s: %w", ErrRevoked, w.o.Revoker, gone)
}

// revokedUnseen is revokedCause for a delete the watch did not see (the
// read that armed it found the key gone): the Revoker's last write revoked
// the key if the key was alive just before it and gone at it. Two reads;
// a later write of the Revoker, or a compaction, leaves gone as it is.
func (w *Watcher) revokedUnseen(gone error) error {
	ctx, cancel := context.WithTimeout(w.ctx, 2*leaseCheckTimeout)
	defer cancel()
	rec, err := retry.Once(w.o.Latency, ctx, ctx, func() (*clientv3.GetResponse, error) {
		return w.o.Client.Get(ctx, w.o.Revoker, clientv3.WithKeysOnly())
	})
	if err != nil || len(rec.Kvs) == 0 || rec.Kvs[0].ModRevision <= w.o.Rev {
		return gone
	}
	at := rec.Kvs[0].ModRevision
	resp, err := retry.Once(w.o.Latency, ctx, ctx, func() (*clientv3.TxnResponse, error) {
		return w.o.Client.Txn(ctx).Then(clientv3.OpGet(w.o.Key, clientv3.WithRev(at-1), clientv3.WithKeysOnly()),
			clientv3.OpGet(w.o.Key, clientv3.WithRev(at), clientv3.WithKeysOnly())).Commit()
	})
	if err != nil || len(resp.Responses) < 2 {
		return gone
	}
	before, after := resp.Responses[0].GetResponseRange().GetKvs(), resp.Responses[1].GetResponseRange().GetKvs()
	if len(before) == 0 || before[0].CreateRevision != w.o.Rev || len(after) != 0 {
		return gone
	}
	return fmt.Errorf("%w by a write of %s: %w", ErrRevoked, w.o.Revoker, gone)
}

// leaseCause is gone, wrapped in the lease's end when the key was deleted
// and its lease is gone too: whether the watch saw the delete or the read
// that armed it found the key missing.
func (w *Watcher) leaseCause(gone error, deleted bool) error {
	if !deleted || w.o.Expired == nil {
		return gone
	}
	ctx, cancel := context.WithTimeout(w.ctx, leaseCheckTimeout)
	defer cancel()
	ttl, err := retry.Once(w.o.Latency, ctx, ctx, func() (*clientv3.LeaseTimeToLiveResponse, error) { return w.o.Client.TimeToLive(ctx, w.o.LeaseID) })
	if err != nil || ttl.TTL > 0 {
		return gone
	}
	return fmt.Errorf("%w: lease %x: %w", w.o.Expired, int64(w.o.LeaseID), gone)
}

// pause waits for d, or until ctx is done.
func pause(ctx context.Context, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
	case <-ctx.Done():
	}
}
