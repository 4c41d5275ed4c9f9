package election

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"

	"github.com/leasehold/leasehold/fencing"
	"github.com/leasehold/leasehold/guard"
	"github.com/leasehold/leasehold/internal/ctxutil"
	"github.com/leasehold/leasehold/internal/ownwatch"
	"github.com/leasehold/leasehold/internal/revqueue"
	"github.com/leasehold/leasehold/internal/sessionlink"
	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// Term is one won campaign: one key in etcd, the oldest of its election. It
// implements guard.Owner and is safe for concurrent use.
type Term struct {
	s     *fencing.Session  // set by Campaign, never changed: read without locking
	link  *sessionlink.Link // s's, for the library's own use
	token fencing.Token
	key   string
	life  sessionlink.Tenure // reports acquisition, then resignation or loss
	free  func(retire bool)  // hands the key back to the session once Resign deleted it

	mu       sync.Mutex             // serialises Proclaim and Resign
	value    atomic.Pointer[string] // the last value written: read without mu, which Proclaim holds over a request
	resigned atomic.Bool            // set once Resign succeeded or found the term lost
	unsure   bool                   // guarded by mu: a delete failed, and may yet be applied
	modRev   int64                  // guarded by mu: the key's last write this term knows of

	// ctxMu is separate from mu: Proclaim and Resign hold mu over a request,
	// and Context must never wait for the network.
	ctxMu   sync.Mutex
	watch   *ownwatch.Watcher // guarded by ctxMu: nil until Context is first called
	stopped bool              // guarded by ctxMu: Resign was called
}

// errResigned is the cause of a term's contexts after Resign.
var errResigned = fmt.Errorf("%w: resigned", ErrNotLeader)

// Token returns the term's fencing token: greater than every earlier term's.
func (t *Term) Token() fencing.Token { return t.token }

// Key returns the term's etcd key. No other live term has it: the session
// may reuse it for a later Campaign on the same election once this term's
// Resign has deleted it, and the token tells the two apart.
func (t *Term) Key() string { return t.key }

// Session returns the session whose lease the term's key is attached to.
func (t *Term) Session() *fencing.Session { return t.s }

// Value returns the value campaigned with, or the last one proclaimed. It
// never waits, not even for a Proclaim in flight.
func (t *Term) Value() string {
	if v := t.value.Load(); v != nil {
		return *v
	}
	return ""
}

// Proclaim changes the leader's value, as observers see it, only while the
// term lasts, in one guarded txn; it returns by ctx's deadline. Failures that
// pass (a lost reply, a leader change) are retried until ctx ends: the same
// guarded put twice is harmless. It returns an error wrapping ErrNotLeader
// (and guard.ErrNotOwner) when the term was already lost or resigned; after
// any other error (ctx ended first, etcd refused) the value may or may not
// have changed, and Proclaim may be called again.
func (t *Term) Proclaim(ctx context.Context, value string) error {
	if err := t.usable(ctx); err != nil {
		return fmt.Errorf("election: proclaim: %w", err)
	}
	lost, err := t.proclaim(ctx, value)
	if lost != nil { // reported with no lock held: the observer is user code
		t.link.Owners.Lost(t.key, t.token.Revision, lost)
		t.reject(err)
	}
	return err
}

// reject reports a write refused because the term was lost.
func (t *Term) reject(err error) {
	t.link.Reject(t.token.Name, t.token.Revision, err)
}

// proclaim writes value while the term lasts. When the ownership compare
// failed, it returns the loss to report.
func (t *Term) proclaim(ctx context.Context, value string) (lost, _ error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.resigned.Load() {
		return nil, fmt.Errorf("election: proclaim %v: %w: resigned", t.token, ErrNotLeader)
	}
	var lostAt int64 // revision of a read that found the term lost
	var unsure bool
	err := revqueue.Retry(ctx, t.link.Latency, &unsure, func(ctx context.Context) (err error) {
		lostAt, err = t.put(ctx, value)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("election: proclaim %v: %w", t.token, err)
	}
	if lostAt != 0 {
		return fmt.Errorf("%w: proclaim failed its ownership compare at revision %d", fencing.ErrKeyDeleted, lostAt),
			fmt.Errorf("election: proclaim %v at revision %d: %w: %w", t.token, lostAt, ErrNotLeader, guard.ErrNotOwner)
	}
	t.value.Store(&value)
	return nil, nil
}

// put writes value over the key's last known write, in one guarded txn. The
// compare on that write's revision keeps an attempt of an earlier Proclaim,
// given up and applied late, from undoing a later one: it finds the key
// written since, and writes nothing. When the compare fails, put reads the
// key: gone or replaced, the term is lost (it returns the revision of that
// read); holding value, a lost attempt of this call landed; otherwise it
// writes again over what it found. Called with t.mu held.
func (t *Term) put(ctx context.Context, value string) (lostAt int64, _ error) {
	for {
		resp, err := t.s.Client().Txn(ctx).
			If(t.isOwner(), clientv3.Compare(clientv3.ModRevision(t.key), "=", t.modRev)).
			Then(clientv3.OpPut(t.key, value, clientv3.WithLease(t.s.Lease()))).
			Else(clientv3.OpGet(t.key)).Commit()
		if err != nil {
			return 0, err
		}
		if resp.Succeeded {
			t.modRev = resp.Header.Revision
			return 0, nil
		}
		var kv *mvccpb.KeyValue
		if len(resp.Responses) > 0 {
			if kvs := resp.Responses[0].GetResponseRange().Kvs; len(kvs) > 0 {
				kv = kvs[0]
			}
		}
		if kv == nil || kv.CreateRevision != t.token.Revision {
			return resp.Header.Revision, nil
		}
		t.modRev = kv.ModRevision
		if string(kv.Value) == value {
			return 0, nil
		}
	}
}

// usable returns fencing.ErrInvalidArgument for a nil ctx, or a term
// Campaign did not make.
func (t *Term) usable(ctx context.Context) error {
	switch {
	case ctx == nil:
		return fmt.Errorf("%w: nil context", fencing.ErrInvalidArgument)
	case t == nil || t.link == nil:
		return fmt.Errorf("%w: term not made by Campaign", fencing.ErrInvalidArgument)
	}
	return nil
}

func (t *Term) isOwner() clientv3.Cmp {
	return clientv3.Compare(clientv3.CreateRevision(t.key), "=", t.token.Revision)
}

// Resign ends the term by deleting its key, which hands leadership to the
// next candidate at once; it returns by ctx's deadline.
//
// Resign first ends the term's contexts (Context, and every guard.Watch of
// the term), with ErrNotLeader as their cause, so work under the term stops
// before the key goes, whatever happens next. It returns an error wrapping
// ErrNotLeader when the term was already lost (key gone, or session ended: a
// key still there is deleted all the same) or resigned. Failures that pass
// (a lost reply, a leader change, a member restarting) are retried until ctx
// ends: deleting the key is idempotent. After any other error (ctx ended
// first, etcd refused) the key may still be in etcd, leading, and guarded
// writes of the term still commit: call Resign again, or close the session,
// to hand leadership over.
func (t *Term) Resign(ctx context.Context) error {
	if err := t.usable(ctx); err != nil {
		return fmt.Errorf("election: resign: %w", err)
	}
	report, err := t.resign(ctx, nil)
	report() // the observer and logger run with no lock held
	return err
}

// resign is Resign; reason, when not nil, is why the library resigns on its
// own (ErrRebalanced), as the observer is told.
func (t *Term) resign(ctx context.Context, reason error) (report func(), _ error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.resigned.Load() {
		return func() {}, fmt.Errorf("election: resign %v: %w: already resigned", t.token, ErrNotLeader)
	}
	t.ctxMu.Lock()
	t.stopped = true // a later Context is born ended
	t.ctxMu.Unlock()
	// Reaches only the term's own watches: its tenure hears of
	// ErrKeyDeleted alone, so no user code runs under t.mu.
	t.link.Owners.Lost(t.key, t.token.Revision, errResigned)
	// A plain delete of ours cannot touch a later term's key: no other
	// session writes it, and this one reuses it only once every delete sent
	// for this term has returned (a failed one may be applied late, onto
	// the key's next life: then the key is never reused). Deleting nothing
	// proves the term already lost.
	var resp *clientv3.DeleteResponse
	lost := false // an attempt went unanswered: it may be the one that deleted
	err := revqueue.Retry(ctx, t.link.Latency, &lost, func(ctx context.Context) (err error) {
		resp, err = t.s.Client().Delete(ctx, t.key)
		return err
	})
	t.unsure = t.unsure || lost
	if err != nil {
		return func() {}, fmt.Errorf("election: resign %v: %w", t.token, err)
	}
	t.resigned.Store(true)
	t.free(t.unsure)
	if resp.Deleted == 0 && !lost {
		err := fmt.Errorf("election: resign %v at revision %d: %w: %w", t.token, resp.Header.Revision, ErrNotLeader, guard.ErrNotOwner)
		return func() {
			t.life.Lose(fmt.Errorf("%w: %q found gone by Resign", fencing.ErrKeyDeleted, t.key))
			t.reject(err)
		}, err
	}
	if err := t.s.Err(); err != nil {
		// The key was still there, but the session had stopped vouching
		// for it: the term had already ended.
		return func() { t.life.Lose(err) }, fmt.Errorf("election: resign %v: %w: %w", t.token, ErrNotLeader, err)
	}
	return func() { t.life.Release(reason) }, nil
}

// Context returns a context cancelled as soon as the term can no longer be
// proven, with the cause: fencing.ErrKeyDeleted, the session's Err, or
// ErrNotLeader once Resign was called. Every call returns the same context.
//
// Context never blocks: the first call starts a watch of the term's key in
// the background, and Campaign pays for no watch until it is asked for. Until
// the watch is armed (established on the server, one round trip when etcd is
// reachable) the context still ends at the session's end, at ValidUntil at
// the latest, and a deletion of the key before arming is found by the read
// that arming ends with; once armed, a deletion is seen within one watch
// round trip. guard.Watch returns only once its watch is armed.
func (t *Term) Context() context.Context {
	if t == nil || t.link == nil {
		return ctxutil.Ended(fmt.Errorf("election: %w: term not made by Campaign", fencing.ErrInvalidArgument))
	}
	t.ctxMu.Lock()
	defer t.ctxMu.Unlock()
	if t.watch == nil {
		if t.stopped {
			return ctxutil.Ended(errResigned)
		}
		// The watch's goroutine ends with the context: at Resign, at the
		// loss, or when the session ends.
		t.watch = ownwatch.Start(context.Background(), t.link.Owner(t.key, t.token.Revision))
	}
	return t.watch.Context()
}
