// Package sessionlink carries what the library's own packages need of a
// fencing.Session beyond its exported methods: its registry of owner keys,
// its watch stream and the background work it owns. Guard and election
// reach it with Of(s), without fencing exporting it and without any state
// shared between sessions; the revision queue gets only its part, Session.
package sessionlink

import (
	"log/slog"
	"time"

	"github.com/leasehold/leasehold/internal/keyspace"
	"github.com/leasehold/leasehold/internal/ownwatch"
	"github.com/leasehold/leasehold/internal/revqueue"
)

// Link is one session, as the library sees it: what the revision queue needs
// of it, and what its owners, election and guard need beyond that.
type Link struct {
	revqueue.Session
	// Root is the key prefix of the session's queues (fencing.WithRoot).
	Root string
	// Identity is the value the session writes into its keys
	// (fencing.WithIdentity).
	Identity string
	// Cluster is the ID of the etcd cluster that granted the lease: the
	// Cluster of the session's tokens.
	Cluster uint64
	// Owners is the registry of the session's owner keys.
	Owners *ownwatch.Registry
	// Watches serves the session's watches on one stream; nil for a
	// client whose KV or Watcher is wrapped.
	Watches *ownwatch.Mux
	// Expired is the cause a watch reports with ownwatch.ErrKeyDeleted when a
	// key went with its lease (fencing.ErrLeaseExpired).
	Expired error
	// Track reports an ownership of kind ("lock", "election") of the name
	// with token revision rev and key key, acquired after waiting wait, to
	// the session's observer and logger; then its end, once.
	Track func(kind, name string, rev int64, key string, wait time.Duration) Tenure
	// Reject reports a write refused because the ownership of name at rev
	// was lost.
	Reject func(name string, rev int64, cause error)
	// AcquireError maps why an acquire failed to fencing's sentinels.
	AcquireError func(err error) error
}

// Settings are what election.Run needs of the session options it is handed
// before it has a session: read by fencing's one parser of options.
type Settings struct {
	TTL    time.Duration // as asked, rounded up to whole seconds
	Logger *slog.Logger  // a discarding one when unset; nil only with Read's error
}

// Set once by fencing's init, through Register.
var (
	of       any // func(S) *Link
	settings any // func([]O) (Settings, error)
)

// Register makes Of find the Link of a session of type S with link, and Read
// parse options of type O with read. Package fencing calls it once, in its
// init, for *fencing.Session and fencing.SessionOption: the only S and O.
func Register[S, O any](link func(S) *Link, read func([]O) (Settings, error)) {
	of, settings = link, read
}

// Of returns the Link of s, a *fencing.Session; nil for a nil session or one
// NewSession did not make. It is how the library's packages reach what a
// session does not export: a typed call, not a value in a context.
func Of[S any](s S) *Link { return of.(func(S) *Link)(s) }

// Read parses opts, fencing.SessionOptions, as NewSession does: an option
// NewSession would refuse is an error here too.
func Read[O any](opts []O) (Settings, error) { return settings.(func([]O) (Settings, error))(opts) }

// Owner describes, for a watch, the ownership of key created at rev on l's
// lease.
func (l *Link) Owner(key string, rev int64) ownwatch.Owner {
	o := ownwatch.Owner{Client: l.Client, Key: key, Rev: rev, Life: l.Life, LeaseID: l.Lease, Expired: l.Expired,
		Owners: l.Owners, Go: l.Go, Mux: l.Watches, Latency: l.Latency}
	if kind, name, ok := keyspace.ParseKey(l.Root, key); ok && kind == keyspace.KindSemaphore {
		o.Revoker = keyspace.LimitKey(keyspace.Prefix(l.Root, kind, name)) // SetLimit may revoke the hold
	}
	return o
}
