// Package sessionlink carries what the library's own packages need of a
// fencing.Session beyond its exported methods: its registry of owner keys and
// the background work it owns. The session puts its Link in its own context,
// so guard, election and the revision queue reach it from a *Session without
// fencing exporting it, and without any state shared between sessions.
package sessionlink

import (
	"context"
	"time"

	"github.com/leasehold/leasehold/internal/ownwatch"
	"github.com/leasehold/leasehold/internal/retry"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// Link is one session, as the library sees it.
type Link struct {
	Client *clientv3.Client
	Lease  clientv3.LeaseID
	// Root is the key prefix of the session's queues (fencing.WithRoot).
	Root string
	// Identity is the value the session writes into its keys
	// (fencing.WithIdentity).
	Identity string
	// KeyStem starts the name of every key the session writes in a queue,
	// after the queue's prefix: the lease in hex and a dash.
	KeyStem string
	// Cluster is the ID of the etcd cluster that granted the lease: the
	// Cluster of the session's tokens.
	Cluster uint64
	TTL     time.Duration
	// Life is the session's context: it ends, with the cause, when the
	// session stops vouching for its lease.
	Life context.Context
	// Owners is the registry of the session's owner keys.
	Owners *ownwatch.Registry
	// Watches serves the session's watches on one stream; nil for a
	// client whose KV or Watcher is wrapped.
	Watches *ownwatch.Mux
	// Keys hands out the session's key slots.
	Keys *KeyPool
	// Sweeps is the set of key ranges the session sweeps for keys written
	// by requests whose replies were lost.
	Sweeps *Sweeps
	// Expired is the cause a watch reports with ownwatch.ErrKeyDeleted when a
	// key went with its lease (fencing.ErrLeaseExpired).
	Expired error
	// Go runs f in a goroutine owned by the session: Close waits for it, so
	// f must return soon after Life ends. It reports false, and runs
	// nothing, once the session has ended.
	Go func(f func()) bool

	// Track reports an ownership of kind ("lock", "election") of the name
	// with token revision rev and key key, acquired after waiting wait, to
	// the session's observer and logger; then its end, once.
	Track func(kind, name string, rev int64, key string, wait time.Duration) Tenure
	// Reject reports a write refused because the ownership of name at rev
	// was lost.
	Reject func(name string, rev int64, cause error)
	// AcquireError maps why an acquire failed to fencing's sentinels.
	AcquireError func(err error) error
	// Latency estimates how long a request takes, to bound each attempt
	// of a retried one, and holds the session's places for requests in
	// flight: every request of the session's calls takes one.
	Latency *retry.Latency
}

type key struct{}

// With returns a child of ctx that carries l.
func With(ctx context.Context, l *Link) context.Context { return context.WithValue(ctx, key{}, l) }

// Of returns the Link that ctx (a session's context) carries, or nil.
func Of(ctx context.Context) *Link {
	if ctx == nil {
		return nil
	}
	l, _ := ctx.Value(key{}).(*Link)
	return l
}

// Owner describes, for a watch, the ownership of key created at rev on l's
// lease.
func (l *Link) Owner(key string, rev int64) ownwatch.Owner {
	return ownwatch.Owner{Client: l.Client, Key: key, Rev: rev, Life: l.Life, LeaseID: l.Lease, Expired: l.Expired,
		Owners: l.Owners, Go: l.Go, Mux: l.Watches, Latency: l.Latency}
}
