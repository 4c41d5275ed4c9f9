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

	clientv3 "go.etcd.io/etcd/client/v3"
)

// ErrKeyGone is the cause of a watched context whose owner key was deleted or
// replaced by a key with another create revision. guard exports it as
// ErrOwnerKeyGone.
var ErrKeyGone = errors.New("guard: owner key deleted or replaced")

// Lease is what a watch needs of a session: a context that ends, with the
// cause, when the session stops vouching for its lease.
type Lease interface {
	Context() context.Context
}

// Owner names the key to watch and the create revision that proves
// ownership.
type Owner struct {
	Client  *clientv3.Client
	Key     string
	Rev     int64
	Lease   Lease
	LeaseID clientv3.LeaseID
	// Expired is the cause to report, with ErrKeyGone, when the key went
	// because its lease was revoked or expired.
	Expired error
}

// retryDelay paces re-arming a broken watch while the session still vouches.
const retryDelay = 50 * time.Millisecond

// leaseCheckTimeout bounds the one read that names the cause of a deleted
// key: the context is cancelled when it ends, whatever it found.
const leaseCheckTimeout = 100 * time.Millisecond

// Watch returns a context cancelled with a cause once o's ownership can no
// longer be proven: ErrKeyGone, the lease's Err, or parent's cause. It
// returns once its watch is established on the server and the key was seen
// alive at or after the watch's start revision, or once ownership is lost or
// parent is done (the context is then already done). cancel ends the watch
// with context.Canceled and returns after its goroutine has exited.
func Watch(parent context.Context, o Owner) (context.Context, context.CancelFunc) {
	ctx, cancel := context.WithCancelCause(parent)
	// The session's end cancels the watch at once, even while it is blocked
	// in etcd (clientv3's Watch call blocks until the server creates the
	// watch): the context ends at ValidUntil whatever the network does.
	lease := o.Lease.Context()
	stopLease := context.AfterFunc(lease, func() { cancel(context.Cause(lease)) })
	w := &watcher{o: o, ctx: ctx, cancel: cancel, done: make(chan struct{})}
	unregister := Register(o.Key, func(cause error) { cancel(cause) })
	if lease.Err() != nil {
		cancel(context.Cause(lease)) // now, not when the AfterFunc runs
	}
	wch := w.arm()
	go func() {
		defer close(w.done)
		defer unregister()
		defer stopLease()
		w.run(wch)
	}()
	return ctx, func() {
		cancel(context.Canceled)
		<-w.done
	}
}

type watcher struct {
	o      Owner
	ctx    context.Context
	cancel context.CancelCauseFunc
	done   chan struct{}
	wctx   context.Context // the current etcd watch's context
	wstop  context.CancelFunc
}

// arm starts an etcd watch from now and waits until the server created it,
// then covers the gap before its start revision with one read of the key.
// It returns nil once ownership is lost or ctx is done.
func (w *watcher) arm() clientv3.WatchChan {
	for w.ctx.Err() == nil {
		w.wctx, w.wstop = context.WithCancel(clientv3.WithRequireLeader(w.ctx))
		// From now, not from the token's revision: a watch that starts in the
		// past is served by etcd's unsynced loop, up to 100 ms late.
		wch := w.o.Client.Watch(w.wctx, w.o.Key, clientv3.WithCreatedNotify())
		if w.created(wch) {
			return wch
		}
		w.wstop()
		w.pause()
	}
	return nil
}

// created waits for the created notice of wch and checks the key is still
// ours at a revision no older than the watch's start.
func (w *watcher) created(wch clientv3.WatchChan) bool {
	resp, ok := <-wch // wch closes if ctx ends
	if !ok || !resp.Created || resp.Err() != nil {
		return false
	}
	if resp.Header.Revision == w.o.Rev {
		return true // nothing happened since the key was created
	}
	g, err := w.o.Client.Get(w.ctx, w.o.Key, clientv3.WithKeysOnly())
	if err != nil {
		return false
	}
	if len(g.Kvs) == 0 || g.Kvs[0].CreateRevision != w.o.Rev {
		Lost(w.o.Key, fmt.Errorf("%w: %q not found at revision %d", ErrKeyGone, w.o.Key, g.Header.Revision))
	}
	return true
}

func (w *watcher) run(wch clientv3.WatchChan) {
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
				w.wstop()
				wch = w.arm()
				continue
			}
			for _, ev := range resp.Events {
				if ev.Type == clientv3.EventTypeDelete || ev.Kv.CreateRevision != w.o.Rev {
					// A proof for everything registered for the key (this
					// watch among them), as a failed guarded txn's is.
					Lost(w.o.Key, w.goneCause(ev))
					return
				}
			}
		}
	}
}

// goneCause tells a key deleted alone from one deleted with its lease: the
// session would learn of a revoked lease only at its next renewal. The read
// costs one round trip (at most leaseCheckTimeout) before the cancel; it
// never delays the cancel at ValidUntil, which the session does on its own.
func (w *watcher) goneCause(ev *clientv3.Event) error {
	gone := fmt.Errorf("%w: %q %v at revision %d", ErrKeyGone, w.o.Key, ev.Type, ev.Kv.ModRevision)
	if ev.Type != clientv3.EventTypeDelete || w.o.Expired == nil {
		return gone
	}
	ctx, cancel := context.WithTimeout(w.ctx, leaseCheckTimeout)
	defer cancel()
	ttl, err := w.o.Client.TimeToLive(ctx, w.o.LeaseID)
	if err != nil || ttl.TTL > 0 {
		return gone
	}
	return fmt.Errorf("%w: lease %x: %w", w.o.Expired, int64(w.o.LeaseID), gone)
}

func (w *watcher) pause() {
	t := time.NewTimer(retryDelay)
	defer t.Stop()
	select {
	case <-t.C:
	case <-w.ctx.Done():
	}
}

// The watchers of each key, so that a guarded txn that proves a loss can end
// them at once.
var (
	regMu sync.Mutex
	reg   = map[string]map[*func(error)]struct{}{}
)

// Register makes every Lost of key call f with its cause, until unregister
// is called. Watches register themselves; fencing's tenures register to
// report losses.
func Register(key string, f func(cause error)) (unregister func()) {
	regMu.Lock()
	defer regMu.Unlock()
	if reg[key] == nil {
		reg[key] = map[*func(error)]struct{}{}
	}
	p := &f
	reg[key][p] = struct{}{}
	return func() {
		regMu.Lock()
		defer regMu.Unlock()
		delete(reg[key], p)
		if len(reg[key]) == 0 {
			delete(reg, key)
		}
	}
}

// Lost tells everything registered for key that it is lost, with cause: a
// watch saw the key go, or a guarded txn found the owner compare false (which
// proves the loss before any watch event arrives), or the owner released it. The calls are made without
// the registry's lock, so they may register and unregister.
func Lost(key string, cause error) {
	regMu.Lock()
	fs := make([]func(error), 0, len(reg[key]))
	for f := range reg[key] {
		fs = append(fs, *f)
	}
	regMu.Unlock()
	for _, f := range fs {
		f(cause)
	}
}
