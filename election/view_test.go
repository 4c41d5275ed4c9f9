package election_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/leasehold/leasehold/election"
	"github.com/leasehold/leasehold/fencing"
	"github.com/leasehold/leasehold/fencing/fencingtest"
	"github.com/leasehold/leasehold/fencing/inspect"
	"github.com/leasehold/leasehold/internal/keyspace"
	"github.com/leasehold/leasehold/internal/testbed/etcdtest"
)

// runReplica runs a RunGroup replica of group with identity id over names
// until stop or the test's end.
func runReplica(t *testing.T, c *fencingtest.Cluster, group, id string, names []string) (stop func()) {
	return etcdtest.GroupReplica(t, c.Client(t), group, id, names)
}

// jobNames returns n names under t's name, sorted.
func jobNames(t *testing.T, n int) []string {
	names := make([]string, n)
	for i := range names {
		names[i] = fmt.Sprintf("%s/job-%03d", t.Name(), i)
	}
	return names
}

// readGroup reads group, failing t on an error.
func readGroup(t *testing.T, c *fencingtest.Cluster, group string) election.Group {
	t.Helper()
	g, err := election.ReadGroup(fencingtest.Context(t, wait), c.Admin, fencing.DefaultRoot, group)
	if err != nil {
		t.Fatal(err)
	}
	return g
}

// balanced reports whether g has exactly the replicas ids, in join order,
// and names, each led by a replica, none beyond the cap.
func balanced(g election.Group, names []string, ids ...string) bool {
	if g.Misplaced != 0 || g.Excess != 0 || len(g.Replicas) != len(ids) || len(g.Names) != len(names) {
		return false
	}
	leads, assigned := 0, 0
	for i, r := range g.Replicas {
		if r.Identity != ids[i] || r.Leads > g.Cap || r.Listed != len(names) {
			return false
		}
		leads, assigned = leads+r.Leads, assigned+r.Assigned
	}
	for i, n := range g.Names {
		if n.Name != names[i] || n.Leader == nil || !slices.Contains(ids, n.Leader.Value) || n.Assigned != n.Leader.Value {
			return false
		}
	}
	return leads == len(names) && assigned == len(names)
}

// ReadGroup sees two replicas share ten names, then one take them all when
// the other leaves; each leader is the key the replica's session holds.
func TestReadGroupFollowsBalance(t *testing.T) {
	c := fencingtest.Single(t)
	names := jobNames(t, 10)
	stopA := runReplica(t, c, "workers", "replica-a", names)
	fencingtest.WaitFor(t, wait, "replica-a to lead every name", func() bool {
		return balanced(readGroup(t, c, "workers"), names, "replica-a")
	})
	runReplica(t, c, "workers", "replica-b", names)
	var g election.Group
	fencingtest.WaitFor(t, wait, "two replicas, balanced", func() bool {
		g = readGroup(t, c, "workers")
		return balanced(g, names, "replica-a", "replica-b")
	})
	if g.Cap != 5 || g.Revision == 0 || g.Name != "workers" {
		t.Fatalf("group %+v; want cap 5, a revision, name workers", g)
	}
	for _, n := range g.Names {
		queue, _ := inspect.KeyPrefix(fencing.DefaultRoot, fencing.KindElection, n.Name)
		r := g.Replicas[slices.IndexFunc(g.Replicas, func(r election.Replica) bool { return r.Identity == n.Leader.Value })]
		if n.Leader.Lease != r.Lease || n.Leader.Token.Name != n.Name || n.Leader.Token.Revision <= 0 ||
			!strings.HasPrefix(n.Leader.Key, queue) {
			t.Errorf("name %s: leader %+v; want the key of %s's lease %x", n.Name, n.Leader, r.Identity, int64(r.Lease))
		}
	}
	member, _ := inspect.KeyPrefix(fencing.DefaultRoot, fencing.Kind(keyspace.KindGroup), "workers")
	if member != fencing.DefaultRoot+"workers#group/" || !strings.HasPrefix(g.Replicas[0].Key, member) {
		t.Errorf("membership prefix %q, key %q", member, g.Replicas[0].Key)
	}

	stopA()
	fencingtest.WaitFor(t, wait, "replica-b alone, leading every name", func() bool {
		g = readGroup(t, c, "workers")
		return balanced(g, names, "replica-b")
	})
	if g.Cap != 10 || g.Replicas[0].Leads != 10 {
		t.Fatalf("after replica-a left: %+v", g)
	}
}

// More names than one txn may read: the leaders are read in batches.
func TestReadGroupReadsManyNames(t *testing.T) {
	c := fencingtest.Single(t)
	names := jobNames(t, 150)
	runReplica(t, c, "many", "only", names)
	fencingtest.WaitFor(t, wait, "one replica leading 150 names", func() bool {
		return balanced(readGroup(t, c, "many"), names, "only")
	})
}

// A key under the membership prefix that RunGroup did not write is left
// out, as RunGroup leaves it out; the group's JSON decodes back to it.
func TestReadGroupSkipsForeignKeysAndRoundTrips(t *testing.T) {
	c := fencingtest.Single(t)
	names := jobNames(t, 3)
	member, _ := inspect.KeyPrefix(fencing.DefaultRoot, fencing.Kind(keyspace.KindGroup), "mixed")
	if _, err := c.Admin.Put(fencingtest.Context(t, wait), member+"not-a-member", "not JSON"); err != nil {
		t.Fatal(err)
	}
	runReplica(t, c, "mixed", "replica-a", names)
	var g election.Group
	fencingtest.WaitFor(t, wait, "replica-a to lead every name", func() bool {
		g = readGroup(t, c, "mixed")
		return balanced(g, names, "replica-a")
	})
	b, err := json.Marshal(g)
	if err != nil {
		t.Fatal(err)
	}
	lease := fmt.Sprintf(`"lease":"%x"`, int64(g.Replicas[0].Lease))
	if !strings.Contains(string(b), lease) || !strings.Contains(string(b), `"declined":[]`) {
		t.Errorf("JSON %s lacks %s or an empty declined list", b, lease)
	}
	var back election.Group
	if err := json.Unmarshal(b, &back); err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(back, g) {
		t.Fatalf("JSON round trip changed the group:\n%+v\n%+v", g, back)
	}
	if err := json.Unmarshal([]byte(`{"lease":"zz"}`), &election.Replica{}); err == nil {
		t.Error("a lease that is not hex was accepted")
	}
}

// ReadGroup and ReadCandidates refuse bad input with a sentinel and a
// message that names them, and read nothing.
func TestReadGroupRejectsBadInput(t *testing.T) {
	c := fencingtest.Single(t)
	ctx := fencingtest.Context(t, wait)
	var nilCtx context.Context
	for _, tc := range []struct {
		what       string
		ctx        context.Context
		root, name string
		want       error
	}{
		{"nil context", nilCtx, fencing.DefaultRoot, "g", fencing.ErrInvalidArgument},
		{"empty root", ctx, "", "g", fencing.ErrInvalidArgument},
		{"bad root", ctx, "bad\x00root", "g", fencing.ErrInvalidArgument},
		{"empty group", ctx, fencing.DefaultRoot, "", fencing.ErrInvalidName},
		{"group with #", ctx, fencing.DefaultRoot, "a#b", fencing.ErrInvalidName},
	} {
		_, err := election.ReadGroup(tc.ctx, c.Admin, tc.root, tc.name)
		_, cerr := election.ReadCandidates(tc.ctx, c.Admin, tc.root, tc.name)
		for call, err := range map[string]error{"ReadGroup": err, "ReadCandidates": cerr} {
			if !errors.Is(err, tc.want) {
				t.Errorf("%s with %s: %v; want %v", call, tc.what, err, tc.want)
			}
			etcdtest.NamesPackageOnce(t, "election", err)
			if err != nil && !strings.HasPrefix(err.Error(), "election: "+call) {
				t.Errorf("%s with %s: %q does not name %s", call, tc.what, err, call)
			}
		}
	}
	if _, err := election.ReadCandidates(ctx, nil, fencing.DefaultRoot, "g"); !errors.Is(err, fencing.ErrInvalidArgument) {
		t.Errorf("ReadCandidates with a nil client: %v", err)
	}
	if cs, err := election.ReadCandidates(ctx, c.Admin, fencing.DefaultRoot, "nobody"); err != nil || cs != nil {
		t.Errorf("ReadCandidates of an election with no ranked candidate = %v, %v; want none", cs, err)
	}
	for _, bad := range []struct{ root, prefix string }{{"", "a"}, {fencing.DefaultRoot, "a#"}} {
		if _, err := election.ReadCandidatesUnder(ctx, c.Admin, bad.root, bad.prefix); err == nil || !strings.HasPrefix(err.Error(), "election: ReadCandidatesUnder") {
			t.Errorf("ReadCandidatesUnder(%q, %q): %v; want an error that names it", bad.root, bad.prefix, err)
		}
	}
	if _, err := election.ReadGroup(ctx, nil, fencing.DefaultRoot, "g"); !errors.Is(err, fencing.ErrInvalidArgument) {
		t.Errorf("ReadGroup with a nil client: %v", err)
	}
	if _, err := inspect.Read(ctx, c.Admin, fencing.DefaultRoot, fencing.Kind(keyspace.KindGroup), "g"); !errors.Is(err, fencing.ErrInvalidArgument) {
		t.Errorf("Read of a group: %v; want ErrInvalidArgument (a group is no queue)", err)
	}
	g, err := election.ReadGroup(ctx, c.Admin, fencing.DefaultRoot, "nobody")
	if err != nil || g.Name != "nobody" || g.Revision == 0 || len(g.Replicas) != 0 || len(g.Names) != 0 || g.Misplaced != 0 {
		t.Errorf("ReadGroup of a group with no members = %+v, %v", g, err)
	}
}
