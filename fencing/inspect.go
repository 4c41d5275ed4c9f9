package fencing

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/leasehold/leasehold/internal/revqueue"
	"go.etcd.io/etcd/api/v3/mvccpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
	"golang.org/x/sync/errgroup"
)

// Queue is the state of one lock or election as Inspect read it: its keys in
// order, the owner first.
type Queue struct {
	Kind     Kind         `json:"kind"`
	Name     string       `json:"name"`
	Revision int64        `json:"revision"` // etcd revision of the read
	Entries  []QueueEntry `json:"entries"`  // owner first; empty when free
}

// QueueEntry is one key of a queue: the owner, or a waiter.
type QueueEntry struct {
	Token Token  `json:"token"` // the fencing token it has or will have
	Key   string `json:"key"`
	// Value is what the key holds: the holder's identity (WithIdentity) for
	// a lock, the candidate's value for an election.
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
	// Created is when the key was written, by its writer's clock; zero for
	// keys that do not record it, as no key written since sessions reuse
	// their keys does. Age is the time since, at the read.
	Created time.Time     `json:"created,omitzero"`
	Age     time.Duration `json:"age_ns"`
}

// queueEntryJSON is QueueEntry with its lease in hex.
type queueEntryJSON struct {
	*queueEntryAlias
	Lease string `json:"lease"`
}

type queueEntryAlias QueueEntry

// MarshalJSON writes the entry with its lease in hex.
func (e QueueEntry) MarshalJSON() ([]byte, error) {
	return json.Marshal(queueEntryJSON{(*queueEntryAlias)(&e), strconv.FormatInt(int64(e.Lease), 16)})
}

// UnmarshalJSON reads what MarshalJSON writes.
func (e *QueueEntry) UnmarshalJSON(b []byte) error {
	v := queueEntryJSON{queueEntryAlias: (*queueEntryAlias)(e)}
	if err := json.Unmarshal(b, &v); err != nil {
		return err
	}
	id, err := strconv.ParseInt(v.Lease, 16, 64)
	if err != nil {
		return fmt.Errorf("fencing: lease %q: %w", v.Lease, err)
	}
	e.Lease = clientv3.LeaseID(id)
	return nil
}

// Owner returns the queue's first entry, which owns the lock or leads the
// election, and false when the queue is empty.
func (q Queue) Owner() (QueueEntry, bool) {
	if len(q.Entries) == 0 {
		return QueueEntry{}, false
	}
	return q.Entries[0], true
}

// KeyPrefix returns the etcd key range that holds the queue of the lock or
// election called name, for tools that read or watch it: every key of the
// queue, and no other, starts with it. An empty name gives the range of
// every queue of kind; an empty kind gives "leasehold/", which holds every
// queue and whatever else was put under it (a Gate store's keys, say).
func KeyPrefix(kind Kind, name string) string {
	switch {
	case kind == "":
		return "leasehold/"
	case name == "":
		return "leasehold/" + string(kind) + "/"
	}
	return revqueue.Prefix(string(kind), name)
}

// Inspect returns the queue of the lock (KindLock) or election
// (KindElection) called name, in one linearizable read of its keys followed
// by one TimeToLive per lease. It writes nothing. A bad kind or name returns
// ErrInvalidArgument or ErrInvalidName.
func Inspect(ctx context.Context, cli *clientv3.Client, kind Kind, name string) (Queue, error) {
	if err := checkKind(ctx, cli, kind); err != nil {
		return Queue{}, fmt.Errorf("fencing: Inspect: %w", err)
	}
	if err := ValidateName(name); err != nil {
		return Queue{}, fmt.Errorf("fencing: Inspect: %w", err)
	}
	qs, rev, err := inspect(ctx, cli, KeyPrefix(kind, name), func(string) bool { return true })
	if err != nil {
		return Queue{}, err
	}
	if len(qs) == 0 {
		return Queue{Kind: kind, Name: name, Revision: rev, Entries: []QueueEntry{}}, nil
	}
	return qs[0], nil
}

// InspectPrefix returns, sorted by kind then name, the queue of every lock
// and election whose name starts with namePrefix ("" for all), or only those
// of one kind when kind is not "". Free locks have no keys and are not
// listed.
func InspectPrefix(ctx context.Context, cli *clientv3.Client, kind Kind, namePrefix string) ([]Queue, error) {
	if kind == "" && ctx != nil && cli != nil {
		var all []Queue
		for _, k := range []Kind{KindElection, KindLock} {
			qs, err := InspectPrefix(ctx, cli, k, namePrefix)
			if err != nil {
				return nil, err
			}
			all = append(all, qs...)
		}
		return all, nil
	}
	if err := checkKind(ctx, cli, kind); err != nil {
		return nil, fmt.Errorf("fencing: InspectPrefix: %w", err)
	}
	qs, _, err := inspect(ctx, cli, KeyPrefix(kind, ""), func(name string) bool { return strings.HasPrefix(name, namePrefix) })
	return qs, err
}

func checkKind(ctx context.Context, cli *clientv3.Client, kind Kind) error {
	switch {
	case ctx == nil:
		return errNilContext
	case cli == nil:
		return fmt.Errorf("%w: nil client", ErrInvalidArgument)
	case kind != KindLock && kind != KindElection:
		return fmt.Errorf("%w: kind %q", ErrInvalidArgument, kind)
	}
	return nil
}

// inspect reads every key under prefix whose name passes keep, grouped by
// name, then the leases' TTLs. It returns the revision of the read too.
func inspect(ctx context.Context, cli *clientv3.Client, prefix string, keep func(name string) bool) ([]Queue, int64, error) {
	qs, rev, err := readQueues(ctx, cli, prefix, keep)
	if err != nil {
		return nil, 0, err
	}
	if err := readLeases(ctx, cli, qs); err != nil {
		return nil, 0, err
	}
	return qs, rev, nil
}

// readQueues groups the keys under prefix by name, each group in create
// revision order, and returns the revision of the read.
func readQueues(ctx context.Context, cli *clientv3.Client, prefix string, keep func(string) bool) ([]Queue, int64, error) {
	resp, err := cli.Get(ctx, prefix, clientv3.WithPrefix(), clientv3.WithSort(clientv3.SortByCreateRevision, clientv3.SortAscend))
	if err != nil {
		return nil, 0, fmt.Errorf("fencing: inspect %q: %w", prefix, err)
	}
	now := time.Now()
	byName := map[string]*Queue{}
	var qs []*Queue
	for _, kv := range resp.Kvs {
		kind, name, created, ok := revqueue.ParseKey(string(kv.Key))
		if !ok || !keep(name) {
			continue // not a queue key: someone else's, under our prefix
		}
		q := byName[kind+"/"+name]
		if q == nil {
			q = &Queue{Kind: Kind(kind), Name: name, Revision: resp.Header.Revision}
			byName[kind+"/"+name] = q
			qs = append(qs, q)
		}
		q.Entries = append(q.Entries, entry(kv, name, created, now))
	}
	slices.SortFunc(qs, func(a, b *Queue) int { return cmp.Or(cmp.Compare(a.Kind, b.Kind), cmp.Compare(a.Name, b.Name)) })
	out := make([]Queue, len(qs))
	for i, q := range qs {
		out[i] = *q
	}
	return out, resp.Header.Revision, nil
}

func entry(kv *mvccpb.KeyValue, name string, created, now time.Time) QueueEntry {
	e := QueueEntry{Token: Token{Name: name, Revision: kv.CreateRevision}, Key: string(kv.Key), Value: string(kv.Value),
		Lease: clientv3.LeaseID(kv.Lease), Created: created}
	if !created.IsZero() {
		e.Age = now.Sub(created).Round(time.Millisecond)
	}
	return e
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
				return fmt.Errorf("fencing: inspect: lease %x: %w", int64(id), err)
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
