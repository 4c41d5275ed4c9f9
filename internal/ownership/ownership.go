// Package ownership is one ownership of one key by a session: what a
// fencing.Hold and an election.Term are, and what every later kind of hold
// wraps. It owns the ownership's contexts (one watch, started on first use),
// its release (one delete, retried while failures pass, sent once the
// contexts have ended) and the slot of its key; the public types add their
// names, errors and reports.
package ownership

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"

	"github.com/leasehold/leasehold/internal/lifetime"
	"github.com/leasehold/leasehold/internal/ownwatch"
	"github.com/leasehold/leasehold/internal/retry"
	"github.com/leasehold/leasehold/internal/sessionlink"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// Ownership is one life of one key: the key created at revision Rev on the
// session's lease. Link, Key and Rev never change. It is safe for
// concurrent use.
type Ownership struct {
	Link *sessionlink.Link
	Key  string
	Rev  int64
	Seen int64 // a revision at which Key was read alive at Rev (see ownwatch.Owner.Seen)

	life      sessionlink.Tenure // reports acquisition, then release or loss
	free      func(retire bool)  // hands the key back to the session once Release deleted it
	stopCause error              // the cause of the contexts once Release began

	mu       sync.Mutex  // serialises Release, and the owner's writes of its own key (Lock)
	released atomic.Bool // set once the key was deleted or found gone, and its slot handed back

	// smu is never held over a request: finish, which the session's Close
	// waits for, must not wait for a Release that holds mu over one.
	smu      sync.Mutex
	unsure   bool // guarded by smu: a delete by name failed, and may yet be applied
	handed   bool // guarded by smu: the session is deleting the key (see finish)
	busy     bool // guarded by smu: a Release may have a delete by name in flight
	finished bool // guarded by smu: finish's delete returned

	// ctxMu is separate from mu: Release holds mu over a request, and
	// Context must never wait for the network.
	ctxMu   sync.Mutex
	watch   *ownwatch.Watcher // guarded by ctxMu: nil until Context is first called
	stopped bool              // guarded by ctxMu: Release began
	ended   context.Context   // guarded by ctxMu: the context of one first asked for after Release began
}

// New returns the ownership of key at rev on l's session, last read alive
// at revision seen. life reports it; free hands the key's slot back once it
// is deleted; stopCause is the cause its contexts end with once Release
// begins.
func New(l *sessionlink.Link, key string, rev, seen int64, life sessionlink.Tenure, free func(retire bool), stopCause error) *Ownership {
	return &Ownership{Link: l, Key: key, Rev: rev, Seen: seen, life: life, free: free, stopCause: stopCause}
}

// Owner describes the ownership for a watch of it.
func (o *Ownership) Owner() ownwatch.Owner {
	w := o.Link.Owner(o.Key, o.Rev)
	w.Seen = o.Seen
	return w
}

// IsOwner is the compare that holds exactly while this ownership lasts: the
// key exists with its create revision.
func (o *Ownership) IsOwner() clientv3.Cmp {
	return clientv3.Compare(clientv3.CreateRevision(o.Key), "=", o.Rev)
}

// Context returns the context that ends as soon as the ownership can no
// longer be proven (see ownwatch.Start), or with stopCause once Release
// began. Every call returns the same context, and none blocks.
func (o *Ownership) Context() context.Context {
	o.ctxMu.Lock()
	defer o.ctxMu.Unlock()
	if o.watch == nil {
		if o.stopped {
			if o.ended == nil {
				o.ended = lifetime.Ended(o.stopCause)
			}
			return o.ended
		}
		// The watch's goroutine ends with the context: at Release, at the
		// loss, or when the session ends.
		o.watch = ownwatch.Start(context.Background(), o.Owner())
	}
	return o.watch.Context()
}

// Outcome is what Release found.
type Outcome int

const (
	// Deleted: Release deleted the key (or an unanswered attempt may have).
	Deleted Outcome = iota + 1
	// Gone: the key was already gone; the ownership had been lost.
	Gone
	// Done: an earlier Release had ended the ownership; nothing was sent.
	Done
)

// Release ends the ownership: it ends its contexts with stopCause, then
// deletes the key, sending again after failures that pass until ctx ends.
// It returns the revision of the delete's answer. On an error the key may
// still exist, owning, and Release may be called again; if ctx ended first,
// the session goes on deleting the key in the background (see finish). A plain delete is
// as safe as a guarded one: no other session writes the key, and this one
// reuses it only once every delete sent for this life has returned (a
// failed one may land late, on the key's next life: then the key is never
// reused).
func (o *Ownership) Release(ctx context.Context) (Outcome, int64, error) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.released.Load() {
		return Done, 0, nil
	}
	o.ctxMu.Lock()
	o.stopped = true // a later Context is born ended
	o.ctxMu.Unlock()
	alive := ctx.Err() == nil
	// Reaches only this ownership's own watches and tenure; the tenure
	// reports only ErrKeyDeleted (see Lost), so no user code runs under mu.
	o.Link.Owners.Lost(o.Key, o.Rev, o.stopCause)
	if alive && errors.Is(context.Cause(ctx), o.stopCause) {
		// ctx is this ownership's own context, or made from it (guard.Do's):
		// the line above ended it, so that the work stops before the key
		// goes. The delete goes on without it, within its deadline, until
		// the session ends (TestUnlockWithTheHoldsOwnContext).
		var cancel context.CancelFunc
		ctx, cancel = lifetime.Outlive(ctx, o.Link.Life)
		defer cancel()
	}
	var resp *clientv3.DeleteResponse
	lost := false // an attempt went unanswered: it may be the one that deleted
	o.smu.Lock()
	o.busy = true
	o.smu.Unlock()
	err := retry.Do(ctx, o.Link.Client, o.Link.Latency, &lost, func(ctx context.Context) (err error) {
		resp, err = o.Link.Client.Delete(ctx, o.Key)
		return err
	})
	o.smu.Lock()
	o.busy = false
	o.unsure = o.unsure || lost
	handed, finished := o.handed, o.finished
	if err != nil && ctx.Err() != nil && !handed && !errors.Is(err, retry.ErrClientClosed) {
		o.handed = o.Link.Go(o.finish)
	}
	o.smu.Unlock()
	if err != nil {
		if finished {
			o.settle() // finish deleted the key while this Release's deletes were out
		}
		return 0, 0, err
	}
	o.settle()
	if resp.Deleted == 0 && !lost && !handed { // not a delete of the session's either
		return Gone, resp.Header.Revision, nil
	}
	return Deleted, resp.Header.Revision, nil
}

// settle marks the ownership released and hands its slot back, once: retired
// if a delete by name may yet land on a later life of the key. Call it only
// when no delete by name is in flight.
func (o *Ownership) settle() bool {
	if !o.released.CompareAndSwap(false, true) {
		return false
	}
	o.smu.Lock()
	unsure := o.unsure
	o.smu.Unlock()
	o.free(unsure)
	return true
}

// finish deletes the key of a Release whose ctx ended first, so that a key
// whose holder gave it up does not keep its place in the queue for the
// session's whole life (Curator's release does the same). It sends until a
// delete returns, etcd refuses it, or the session ends (the lease then takes
// the key), and never waits for mu. Its delete compares the key's create
// revision, so it can never remove a later life of the key; the slot goes
// back once no delete by name is in flight either (see Release).
func (o *Ownership) finish() {
	var resp *clientv3.TxnResponse
	var unsure bool
	err := retry.Until(o.Link.Life, o.Link.Life, o.Link.Latency, &unsure, func(ctx context.Context) (err error) {
		resp, err = o.Link.Client.Txn(ctx).If(o.IsOwner()).Then(clientv3.OpDelete(o.Key)).Commit()
		return err
	})
	if err != nil {
		return
	}
	o.smu.Lock()
	o.finished = true
	idle := !o.busy
	gone := !resp.Succeeded && !unsure && !o.unsure // no delete of ours removed it
	o.smu.Unlock()
	if !idle || !o.settle() {
		return // a Release in flight settles, and reports
	}
	if gone {
		o.life.Lose(fmt.Errorf("%w: %q found gone by the release", ownwatch.ErrKeyDeleted, o.Key)) // runs the user's observer: no lock held
		return
	}
	o.life.Release(nil)
}

// Released reports whether Release has ended the ownership.
func (o *Ownership) Released() bool { return o.released.Load() }

// Lock serialises the owner's own writes of its key (Proclaim) with Release.
func (o *Ownership) Lock() { o.mu.Lock() }

// Unlock undoes Lock.
func (o *Ownership) Unlock() { o.mu.Unlock() }

// Lost ends every watch of the ownership, and its tenure, with cause: a
// write found the ownership compare false. Call it with no lock held: the
// tenure's report runs the user's observer.
func (o *Ownership) Lost(cause error) { o.Link.Owners.Lost(o.Key, o.Rev, cause) }

// Reject reports a write refused because the ownership of name was lost.
func (o *Ownership) Reject(name string, err error) { o.Link.Reject(name, o.Rev, err) }

// ReportRelease reports the ownership given up; reason is why the library
// gave it up on its own (nil when the caller asked). Only the first report
// of the ownership's end counts.
func (o *Ownership) ReportRelease(reason error) { o.life.Release(reason) }

// ReportLoss reports the ownership lost, with cause. Only the first report
// of the ownership's end counts.
func (o *Ownership) ReportLoss(cause error) { o.life.Lose(cause) }
