// Package inspect is the operator's view of leasehold: the key ranges of
// names (for etcd grants, etcdctl and watches), the queues as etcd holds
// them, and the timing budget of a session configuration (an election's
// ranked candidates and RunGroup groups: election.ReadCandidates and
// ReadGroup). It only reads; an
// application that locks needs none of it.
package inspect

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/leasehold/leasehold/fencing"
	"github.com/leasehold/leasehold/internal/keyspace"
	"go.etcd.io/etcd/api/v3/mvccpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
	"golang.org/x/sync/errgroup"
)

// KeyPrefix returns the prefix of every etcd key of the queue of kind
// called name under root, and of no other key: the lock (fencing.KindLock),
// semaphore (KindSemaphore), read-write lock (KindRWLock) or election
// (KindElection) of that name. Use it to watch or list one queue. Kind
// "group" gives the membership keys of the election.RunGroup group called
// name. Kind "" gives the range of every key of the name:
// every queue, a group's members, and any key an application keeps about
// the name; grant it to give a service one name (etcdctl role
// grant-permission --prefix ROLE readwrite PREFIX). A bad root or kind
// returns fencing.ErrInvalidArgument, a bad name fencing.ErrInvalidName.
func KeyPrefix(root string, kind fencing.Kind, name string) (string, error) {
	if err := check(root, kind, "", fencing.KindLock, fencing.KindSemaphore, fencing.KindRWLock, fencing.KindElection, fencing.Kind(keyspace.KindGroup)); err != nil {
		return "", fmt.Errorf("inspect: KeyPrefix: %w", err)
	}
	if err := keyspace.ValidateName(name); err != nil {
		return "", fmt.Errorf("inspect: KeyPrefix: %w", err)
	}
	return keyspace.Prefix(root, string(kind), name), nil
}

// SubtreePrefix returns a prefix of the etcd keys of exactly the locks and
// elections under root whose names start with namePrefix: names are written
// into keys as they are, so it is root+namePrefix. Grant it to give a
// service every name under "teamA/" (and not "teamA" itself, nor "teamB/x"),
// or list them all with etcdctl get --prefix. A namePrefix that no name
// starts (one with '#', say) returns fencing.ErrInvalidName.
func SubtreePrefix(root, namePrefix string) (string, error) {
	if err := check(root, "", ""); err != nil {
		return "", fmt.Errorf("inspect: SubtreePrefix: %w", err)
	}
	if err := keyspace.ValidatePrefix(namePrefix); err != nil {
		return "", fmt.Errorf("inspect: SubtreePrefix: %w", err)
	}
	return root + namePrefix, nil
}

// Queue is the state of one lock, election, semaphore or read-write lock
// as Read found it: its keys in create revision order, which is the order
// they hold in; the oldest holds under every kind.
type Queue struct {
	Kind     fencing.Kind `json:"kind"`
	Name     string       `json:"name"`
	Revision int64        `json:"revision"` // etcd revision of the read
	Entries  []Entry      `json:"entries"`  // oldest first; empty when free
	// Limit is a semaphore's limit: the name's own (Semaphore.SetLimit),
	// else as its oldest key records it; 0 for the other kinds.
	Limit int `json:"limit,omitempty"`
	// LimitSet says the limit is the name's own, set by SetLimit.
	LimitSet bool `json:"limit_set,omitempty"`
}

// Entry is one key of a queue: the owner, or a waiter.
type Entry struct {
	Token fencing.Token `json:"token"` // the fencing token it has or will have
	Key   string        `json:"key"`
	// Value is what the key holds: the holder's identity
	// (fencing.WithIdentity) for a lock, the candidate's value for an
	// election.
	Value string `json:"value"`
	// Lease is the key's lease; JSON gives it in hex, as etcdctl and the
	// library's logs do.
	Lease clientv3.LeaseID `json:"-"`
	// TTL is the lease's time left, read after the keys (TimeToLive, which
	// truncates to whole seconds), and GrantedTTL its full TTL. A live
	// session renews every third of its TTL, so TTL stays at or above two
	// thirds of GrantedTTL less a second; lower means missed renewals.
	TTL        time.Duration `json:"ttl_ns"`
	GrantedTTL time.Duration `json:"granted_ttl_ns"`
	// Expired says the lease was gone when its TTL was read: the key is
	// being deleted, and its holder no longer owns anything.
	Expired bool `json:"expired"`
	// Holds says the entry held at the read's revision, by its kind's
	// rule: a lock's or election's oldest key; a semaphore's oldest keys
	// whose units fit the limit, and those granted before it was lowered
	// (without a limit of the name's own, a key queued with another limit,
	// and every key behind it, holds nothing: their calls fail with
	// fencing.ErrLimitMismatch); a
	// read-write lock's oldest key if a writer's, and every reader's key
	// older than all writers'. The others wait, in order.
	Holds bool `json:"holds"`
	// Mode is "read" or "write" for a read-write lock's entry, "" for the
	// other kinds.
	Mode string `json:"mode,omitempty"`
	// Units is the units a semaphore's entry holds or waits for; 0 for the
	// other kinds.
	Units int `json:"units,omitempty"`
}

type entryAlias Entry // Entry without its JSON methods

// MarshalJSON writes the entry with its lease in hex.
func (e Entry) MarshalJSON() ([]byte, error) {
	return keyspace.MarshalLeased((*entryAlias)(&e), int64(e.Lease))
}

// UnmarshalJSON reads what MarshalJSON writes.
func (e *Entry) UnmarshalJSON(b []byte) error {
	lease, err := keyspace.UnmarshalLeased(b, (*entryAlias)(e))
	if err != nil {
		return fmt.Errorf("inspect: %w", err)
	}
	e.Lease = clientv3.LeaseID(lease)
	return nil
}

// Owner returns the queue's first entry, which owns the lock or leads the
// election (and holds a semaphore's permit or a read-write lock, as the
// oldest key), and false when the queue is empty.
func (q Queue) Owner() (Entry, bool) {
	if len(q.Entries) == 0 {
		return Entry{}, false
	}
	return q.Entries[0], true
}

// Holders returns the entries that held at the read's revision (see
// Entry.Holds), oldest first.
func (q Queue) Holders() []Entry { return q.pick(true) }

// Waiters returns the entries that waited at the read's revision, in the
// order they were queued.
func (q Queue) Waiters() []Entry { return q.pick(false) }

func (q Queue) pick(holds bool) []Entry {
	var es []Entry
	for _, e := range q.Entries {
		if e.Holds == holds {
			es = append(es, e)
		}
	}
	return es
}

// roles sets each entry's Holds and Mode, and a semaphore's Limit and
// Units, from its keys under prefix, their versions (a semaphore's waiter
// that was granted put its key again) and the limit record's Held.
func (q *Queue) roles(prefix string, versions map[string]int64, held int64) {
	writerAhead, mixed, units := false, false, 0
	for i := range q.Entries {
		e := &q.Entries[i]
		dir, _, _ := strings.Cut(strings.TrimPrefix(e.Key, prefix), "/")
		switch q.Kind {
		case fencing.KindSemaphore:
			limit, n, _ := keyspace.ParseUnitsDir(dir + "/")
			if i == 0 && !q.LimitSet {
				q.Limit = limit
			}
			mixed = mixed || !q.LimitSet && limit != q.Limit
			e.Units, units = n, units+n
			e.Holds = !mixed && (versions[e.Key] >= 2 || e.Token.Revision <= held || units <= q.Limit)
		case fencing.KindRWLock:
			e.Mode = map[string]string{"r": "read", "w": "write"}[dir]
			e.Holds = i == 0 || e.Mode == "read" && !writerAhead
			writerAhead = writerAhead || e.Mode == "write"
		default:
			e.Holds = i == 0
		}
	}
}

// Read returns the queue of the lock (fencing.KindLock), election
// (fencing.KindElection), semaphore (fencing.KindSemaphore) or read-write
// lock (fencing.KindRWLock) called name under root, in one linearizable read of
// its keys followed by one TimeToLive per lease. It writes nothing. A bad
// argument returns fencing.ErrInvalidArgument, a bad name
// fencing.ErrInvalidName.
func Read(ctx context.Context, cli *clientv3.Client, root string, kind fencing.Kind, name string) (Queue, error) {
	err := usable(ctx, cli, root, kind, queueKinds...)
	if err == nil {
		err = keyspace.ValidateName(name)
	}
	if err != nil {
		return Queue{}, fmt.Errorf("inspect: Read: %w", err)
	}
	prefix := keyspace.Prefix(root, string(kind), name)
	if kind == fencing.KindSemaphore {
		prefix = keyspace.LimitKey(prefix) // and the limit record, just before the queue
	}
	qs, rev, err := inspect(ctx, cli, root, prefix, kind)
	if err != nil {
		return Queue{}, err
	}
	if len(qs) == 0 {
		return Queue{Kind: kind, Name: name, Revision: rev, Entries: []Entry{}}, nil
	}
	return qs[0], nil
}

// ReadPrefix returns, sorted by kind then name, the queue of every lock,
// election, semaphore and read-write lock under root whose name starts with
// namePrefix ("" for all), or only those of one kind when kind is not "".
// Free locks have no keys and are not listed.
func ReadPrefix(ctx context.Context, cli *clientv3.Client, root string, kind fencing.Kind, namePrefix string) ([]Queue, error) {
	err := usable(ctx, cli, root, kind, append([]fencing.Kind{""}, queueKinds...)...)
	if err == nil {
		err = keyspace.ValidatePrefix(namePrefix)
	}
	if err != nil {
		return nil, fmt.Errorf("inspect: ReadPrefix: %w", err)
	}
	qs, _, err := inspect(ctx, cli, root, root+namePrefix, kind)
	return qs, err
}

// queueKinds are the kinds whose keys form a queue that Read shows.
var queueKinds = []fencing.Kind{fencing.KindLock, fencing.KindElection, fencing.KindSemaphore, fencing.KindRWLock}

// check validates a root, and a kind among those the caller accepts ("" for
// any kind, when it accepts that): Read would find no queue of a group, and
// KeyPrefix has a range for every kind.
func check(root string, kind fencing.Kind, accepted ...fencing.Kind) error {
	if err := keyspace.ValidateRoot(root); err != nil {
		return fmt.Errorf("%w: %w", fencing.ErrInvalidArgument, err)
	}
	if !slices.Contains(accepted, kind) {
		return fmt.Errorf("%w: kind %q", fencing.ErrInvalidArgument, kind)
	}
	return nil
}

// usable is check, and a ctx and a client to read with.
func usable(ctx context.Context, cli *clientv3.Client, root string, kind fencing.Kind, accepted ...fencing.Kind) error {
	switch {
	case ctx == nil:
		return fmt.Errorf("%w: nil context", fencing.ErrInvalidArgument)
	case cli == nil:
		return fmt.Errorf("%w: nil client", fencing.ErrInvalidArgument)
	}
	return check(root, kind, accepted...)
}

// inspect reads every key under prefix of a queue of kind ("" for any),
// grouped by queue, then the leases' TTLs. It returns the revision of the
// read too.
func inspect(ctx context.Context, cli *clientv3.Client, root, prefix string, kind fencing.Kind) ([]Queue, int64, error) {
	qs, rev, err := readQueues(ctx, cli, root, prefix, kind)
	if err != nil {
		return nil, 0, err
	}
	if err := readLeases(ctx, cli, qs); err != nil {
		return nil, 0, err
	}
	return qs, rev, nil
}

// readQueues groups the keys under prefix by queue, each group in create
// revision order, and returns the revision of the read.
func readQueues(ctx context.Context, cli *clientv3.Client, root, prefix string, only fencing.Kind) ([]Queue, int64, error) {
	resp, err := cli.Get(ctx, prefix, clientv3.WithPrefix(), clientv3.WithSort(clientv3.SortByCreateRevision, clientv3.SortAscend))
	if err != nil {
		return nil, 0, fmt.Errorf("inspect: read %q: %w", prefix, err)
	}
	byName := map[string]*Queue{}
	var qs []*Queue
	versions, helds := map[string]int64{}, map[*Queue]int64{}
	queue := func(kind fencing.Kind, name string) *Queue {
		q := byName[string(kind)+keyspace.Sep+name]
		if q == nil {
			q = &Queue{Kind: kind, Name: name, Revision: resp.Header.Revision, Entries: []Entry{}}
			byName[string(kind)+keyspace.Sep+name] = q
			qs = append(qs, q)
		}
		return q
	}
	for _, kv := range resp.Kvs {
		kind, name, ok := keyspace.ParseKey(root, string(kv.Key))
		switch {
		case !ok && (only == "" || only == fencing.KindSemaphore):
			if l, ok := limitOf(root, kv); ok {
				q := queue(fencing.KindSemaphore, l.name)
				q.Limit, q.LimitSet, helds[q] = l.limit.Limit, true, l.limit.Held
			}
		case !ok || !slices.Contains(queueKinds, fencing.Kind(kind)) || (only != "" && kind != string(only)):
			continue // not a queue key: someone else's, under the root
		default:
			q := queue(fencing.Kind(kind), name)
			q.Entries = append(q.Entries, entryOf(name, kv, resp.Header.GetClusterId()))
			versions[string(kv.Key)] = kv.Version
		}
	}
	slices.SortFunc(qs, func(a, b *Queue) int { return cmp.Or(cmp.Compare(a.Kind, b.Kind), cmp.Compare(a.Name, b.Name)) })
	out := make([]Queue, len(qs))
	for i, q := range qs {
		q.roles(keyspace.Prefix(root, string(q.Kind), q.Name), versions, helds[q])
		out[i] = *q
	}
	return out, resp.Header.Revision, nil
}

// entryOf is the key kv of a queue of name, read from cluster, without its
// lease's TTL.
func entryOf(name string, kv *mvccpb.KeyValue, cluster uint64) Entry {
	return Entry{Token: fencing.Token{Name: name, Revision: kv.CreateRevision, Cluster: cluster},
		Key: string(kv.Key), Value: string(kv.Value), Lease: clientv3.LeaseID(kv.Lease)}
}

// namedLimit is a semaphore's limit record and the name it is of.
type namedLimit struct {
	limit keyspace.Limit
	name  string
}

// limitOf reads kv as a semaphore's limit record under root, if it is one.
func limitOf(root string, kv *mvccpb.KeyValue) (namedLimit, bool) {
	rest, _ := strings.CutPrefix(string(kv.Key), root)
	name, ok := strings.CutSuffix(rest, keyspace.Sep+keyspace.KindSemaphore)
	if !ok || keyspace.ValidateName(name) != nil {
		return namedLimit{}, false
	}
	l, err := keyspace.UnmarshalLimit(kv.Value)
	return namedLimit{l, name}, err == nil
}

// leaseQueries bounds the TimeToLive requests in flight during an inspect.
const leaseQueries = 16

// readLeases fills in each entry's lease TTL, asking once per lease.
func readLeases(ctx context.Context, cli *clientv3.Client, qs []Queue) error {
	type ttl struct {
		left, granted time.Duration
		gone          bool
	}
	leases := map[clientv3.LeaseID]*ttl{}
	for _, q := range qs {
		for _, e := range q.Entries {
			if e.Lease != clientv3.NoLease {
				leases[e.Lease] = &ttl{}
			}
		}
	}
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(leaseQueries)
	for id, t := range leases {
		g.Go(func() error {
			resp, err := cli.TimeToLive(gctx, id)
			switch {
			case errors.Is(err, rpctypes.ErrLeaseNotFound):
				t.gone = true
			case err != nil:
				return fmt.Errorf("inspect: lease %x: %w", int64(id), err)
			default:
				t.left, t.granted = time.Duration(resp.TTL)*time.Second, time.Duration(resp.GrantedTTL)*time.Second
				t.gone = resp.TTL < 0
			}
			return nil
		})
	}
	if err := g.Wait(); err != nil {
		return err
	}
	for _, q := range qs {
		for i := range q.Entries {
			e := &q.Entries[i]
			if t := leases[e.Lease]; t != nil {
				e.TTL, e.GrantedTTL, e.Expired = t.left, t.granted, t.gone
			}
		}
	}
	return nil
}
