package election

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"

	"github.com/leasehold/leasehold/fencing"
	"github.com/leasehold/leasehold/fencing/inspect"
	"github.com/leasehold/leasehold/internal/assign"
	"github.com/leasehold/leasehold/internal/keyspace"
	"go.etcd.io/etcd/api/v3/mvccpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// The operator's view of what Run and RunGroup keep in etcd beside the
// election queues that package inspect reads: ranked candidates and groups.
// Each takes a client and a root, and writes nothing.

// ReadCandidates returns the live ranked candidates of the election name
// under root (Priority, WithDrain), by key, each marked Preferred as Run
// judges it, from one read of their records; none when no replica ranks
// itself. A bad argument returns fencing.ErrInvalidArgument, a bad name
// fencing.ErrInvalidName.
func ReadCandidates(ctx context.Context, cli *clientv3.Client, root, name string) ([]Candidate, error) {
	if err := readable(ctx, cli, root, keyspace.ValidateName(name)); err != nil {
		return nil, fmt.Errorf("election: ReadCandidates: %w", err)
	}
	byName, err := readCandidates(ctx, cli, root, keyspace.Prefix(root, keyspace.KindCandidate, name))
	if err != nil {
		return nil, fmt.Errorf("election: ReadCandidates %q: %w", name, err)
	}
	return byName[name], nil
}

// ReadCandidatesUnder is ReadCandidates for every election whose name starts
// with namePrefix ("" for all), in one read of the keys under root and
// namePrefix (inspect.SubtreePrefix): by name, elections with no ranked
// candidate left out.
func ReadCandidatesUnder(ctx context.Context, cli *clientv3.Client, root, namePrefix string) (map[string][]Candidate, error) {
	if err := readable(ctx, cli, root, keyspace.ValidatePrefix(namePrefix)); err != nil {
		return nil, fmt.Errorf("election: ReadCandidatesUnder: %w", err)
	}
	byName, err := readCandidates(ctx, cli, root, root+namePrefix)
	if err != nil {
		return nil, fmt.Errorf("election: ReadCandidatesUnder %q: %w", namePrefix, err)
	}
	return byName, nil
}

// readCandidates reads the keys under prefix and returns the candidates of
// each election whose records it finds there.
func readCandidates(ctx context.Context, cli *clientv3.Client, root, prefix string) (map[string][]Candidate, error) {
	resp, err := cli.Get(ctx, prefix, clientv3.WithPrefix())
	if err != nil {
		return nil, err
	}
	kvsOf := map[string][]*mvccpb.KeyValue{} // each election's records
	for _, kv := range resp.Kvs {
		if kind, name, ok := keyspace.ParseKey(root, string(kv.Key)); ok && kind == keyspace.KindCandidate {
			kvsOf[name] = append(kvsOf[name], kv)
		}
	}
	byName := make(map[string][]Candidate, len(kvsOf))
	for name, kvs := range kvsOf {
		if cs := candidates(records(kvs)); cs != nil {
			byName[name] = cs
		}
	}
	return byName, nil
}

// readable checks the arguments of a read, nameErr the name's (or prefix's).
func readable(ctx context.Context, cli *clientv3.Client, root string, nameErr error) error {
	switch {
	case ctx == nil:
		return fmt.Errorf("%w: nil context", fencing.ErrInvalidArgument)
	case cli == nil:
		return fmt.Errorf("%w: nil client", fencing.ErrInvalidArgument)
	}
	if err := keyspace.ValidateRoot(root); err != nil {
		return fmt.Errorf("%w: %w", fencing.ErrInvalidArgument, err)
	}
	return nameErr
}

// Group is a RunGroup group as ReadGroup found it: its replicas,
// its names, which replica the group assigns each name to, and which one
// leads it.
type Group struct {
	Name string `json:"name"`
	// Revision is the etcd revision of the read: the members and every
	// name's leader are as they were at this revision.
	Revision int64 `json:"revision"`
	// Replicas are the group's members, in the order they joined (the
	// create revision of their membership keys); empty when none.
	Replicas []Replica `json:"replicas"`
	// Names are the names some replica lists, sorted.
	Names []GroupName `json:"names"`
	// Cap is ⌈len(Names)/len(Replicas)⌉: the most names a replica leads
	// once the group is balanced, when all have the same rank and weight
	// (Replica.Cap is each one's own).
	Cap int `json:"cap"`
	// Misplaced counts the names not led by the replica the group assigns
	// them to, names nobody leads included: 0 once the group is balanced.
	// It is above 0 for a moment after a replica joins, leaves or declines
	// a name, while names are handed over, and, after a replica crashes,
	// until its lease expires.
	Misplaced int `json:"misplaced"`
	// Excess counts the names led beyond each replica's Cap, summed over
	// the replicas.
	Excess int `json:"excess"`
}

// Replica is one member of a group: one RunGroup call, on one session.
type Replica struct {
	Key      string `json:"key"`      // its membership key
	Identity string `json:"identity"` // its session's identity (fencing.WithIdentity)
	// Lease is its session's lease, which holds its membership key and the
	// keys of its terms; JSON gives it in hex.
	Lease  clientv3.LeaseID `json:"-"`
	Listed int              `json:"listed"` // how many names it is willing to lead
	// Declined are the names it asks not to be given, because its work for
	// them kept failing; empty when none.
	Declined []string `json:"declined"`
	Leads    int      `json:"leads"`    // how many names it leads now
	Assigned int      `json:"assigned"` // how many names the group assigns it
	// Cap is the most names it leads once the group is balanced: its
	// weight's share among the replicas given any names (lower-ranked
	// replicas are given none while higher ones list them).
	Cap int `json:"cap"`
	// Priority, Drain and Weight are its rank and share as it set them
	// (Priority, WithDrain, Weight); empty, false and 1 when
	// unset, or for a replica of a version that has none.
	Priority []int64 `json:"priority,omitempty"`
	Drain    bool    `json:"drain,omitempty"`
	Weight   int     `json:"weight"`
}

type replicaAlias Replica // Replica without its JSON methods

// MarshalJSON writes the replica with its lease in hex, as etcdctl does.
func (r Replica) MarshalJSON() ([]byte, error) {
	return keyspace.MarshalLeased((*replicaAlias)(&r), int64(r.Lease))
}

// UnmarshalJSON reads what MarshalJSON writes.
func (r *Replica) UnmarshalJSON(b []byte) error {
	lease, err := keyspace.UnmarshalLeased(b, (*replicaAlias)(r))
	if err != nil {
		return fmt.Errorf("election: %w", err)
	}
	r.Lease = clientv3.LeaseID(lease)
	return nil
}

// GroupName is one name of a group: who should lead it, and who does.
type GroupName struct {
	Name string `json:"name"`
	// Assigned is the identity of the replica the group assigns the name
	// to. Identities need not be unique; Misplaced compares leases.
	Assigned string `json:"assigned"`
	// Leader is the owner key of the name's election, nil when nobody
	// leads it. Its Value is the leading replica's identity and its Lease
	// that replica's Lease. ReadGroup reads no lease TTLs: TTL, GrantedTTL
	// and Expired are zero.
	Leader *inspect.Entry `json:"leader"`
}

// leaderBatch is how many names' leaders one txn reads: etcd refuses txns
// of more than --max-txn-ops operations, 128 by default.
const leaderBatch = 64

// groupReads bounds how often ReadGroup starts over after a compaction
// removed the revision it reads the leaders at.
const groupReads = 3

// ReadGroup returns the RunGroup group called group under root, the view
// of an operator (cmd inspect):
// its replicas, as their membership keys say, each name's leader, and how
// far the group is from balanced (Group.Misplaced, Group.Excess). It reads
// the members with one Get, then the leaders at that Get's revision, in
// txns of up to 64 names, so the Group shows one moment. A key under the
// membership prefix that RunGroup did not write is left out, as RunGroup
// leaves it out. A group with no members returns a Group with no replicas
// and no names. ReadGroup writes nothing. A bad argument returns
// fencing.ErrInvalidArgument, a bad group name fencing.ErrInvalidName.
func ReadGroup(ctx context.Context, cli *clientv3.Client, root, group string) (Group, error) {
	if err := readable(ctx, cli, root, keyspace.ValidateName(group)); err != nil {
		return Group{}, fmt.Errorf("election: ReadGroup: %w", err)
	}
	for attempt := 1; ; attempt++ {
		g, err := readGroup(ctx, cli, root, group)
		if err == nil || !errors.Is(err, rpctypes.ErrCompacted) || attempt == groupReads {
			return g, err
		}
	}
}

// readGroup is one attempt of ReadGroup.
func readGroup(ctx context.Context, cli *clientv3.Client, root, group string) (Group, error) {
	prefix := keyspace.Prefix(root, keyspace.KindGroup, group)
	resp, err := cli.Get(ctx, prefix, clientv3.WithPrefix(), clientv3.WithSort(clientv3.SortByCreateRevision, clientv3.SortAscend))
	if err != nil {
		return Group{}, fmt.Errorf("election: ReadGroup %q: read %q: %w", group, prefix, err)
	}
	g := Group{Name: group, Revision: resp.Header.Revision, Replicas: []Replica{}, Names: []GroupName{}}
	var members []assign.Member
	for _, kv := range resp.Kvs {
		m, err := assign.Decode(string(kv.Key), kv.Value)
		if err != nil {
			continue // not a member: RunGroup ignores it too
		}
		members = append(members, m)
		g.Replicas = append(g.Replicas, Replica{Key: m.Key, Identity: m.ID, Lease: clientv3.LeaseID(kv.Lease),
			Listed: len(m.Names), Declined: append([]string{}, m.Declined...),
			Priority: m.Priority, Drain: m.Drain, Weight: max(m.Weight, 1)})
	}
	assigned := assign.Assign(members) // name → member key, as every replica computes it
	names := slices.Sorted(maps.Keys(assigned))
	leaders, err := readLeaders(ctx, cli, root, names, g.Revision)
	if err != nil {
		return Group{}, fmt.Errorf("election: ReadGroup %q: %w", group, err)
	}
	byKey := map[string]int{}                       // replica index by membership key
	byLease := map[clientv3.LeaseID]int{}           // replica index by lease
	for i, r := range slices.Backward(g.Replicas) { // the first wins a shared lease
		byKey[r.Key] = i
		byLease[r.Lease] = i
	}
	delete(byLease, clientv3.NoLease) // a key with no lease leads nothing of RunGroup's
	g.Cap = assign.Cap(len(names), len(g.Replicas))
	caps := assign.Caps(members)
	for i := range g.Replicas {
		g.Replicas[i].Cap = caps[g.Replicas[i].Key]
	}
	for _, n := range names {
		to := byKey[assigned[n]]
		g.Replicas[to].Assigned++
		gn := GroupName{Name: n, Assigned: g.Replicas[to].Identity, Leader: leaders[n]}
		lead, led := 0, false
		if gn.Leader != nil {
			lead, led = byLease[gn.Leader.Lease]
		}
		if led {
			g.Replicas[lead].Leads++
		}
		if !led || lead != to {
			g.Misplaced++
		}
		g.Names = append(g.Names, gn)
	}
	for _, r := range g.Replicas {
		g.Excess += max(0, r.Leads-r.Cap)
	}
	return g, nil
}

// readLeaders returns the owner of each name's election at revision rev,
// leaderBatch names per txn; a name nobody leads is left out.
func readLeaders(ctx context.Context, cli *clientv3.Client, root string, names []string, rev int64) (map[string]*inspect.Entry, error) {
	out := make(map[string]*inspect.Entry, len(names))
	for batch := range slices.Chunk(names, leaderBatch) {
		ops := make([]clientv3.Op, len(batch))
		for i, n := range batch {
			ops[i] = clientv3.OpGet(keyspace.Prefix(root, string(fencing.KindElection), n),
				append(clientv3.WithFirstCreate(), clientv3.WithRev(rev))...)
		}
		resp, err := cli.Txn(ctx).Then(ops...).Commit()
		if err != nil {
			return nil, fmt.Errorf("read leaders: %w", err)
		}
		for i, r := range resp.Responses {
			if kvs := r.GetResponseRange().GetKvs(); len(kvs) > 0 {
				kv := kvs[0]
				out[batch[i]] = &inspect.Entry{Key: string(kv.Key), Value: string(kv.Value), Lease: clientv3.LeaseID(kv.Lease),
					Token: fencing.Token{Name: batch[i], Revision: kv.CreateRevision, Cluster: resp.Header.GetClusterId()}}
			}
		}
	}
	return out, nil
}
