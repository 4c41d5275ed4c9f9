package election_test

import (
	"testing"

	"github.com/leasehold/leasehold/election"
	"github.com/leasehold/leasehold/fencing/fencingtest"
	"github.com/leasehold/leasehold/internal/testbed/etcdtest"
	clientv3 "go.etcd.io/etcd/client/v3"
)

func TestMain(m *testing.M) {
	fencingtest.RegisterHelper("group-replica", groupReplica)
	fencingtest.Main(m)
}

const wait = fencingtest.Wait

var (
	newSession  = fencingtest.Session
	newElection = etcdtest.Election
	next        = etcdtest.Next
)

func campaign(t testing.TB, e *election.Election, value string) *election.Term {
	t.Helper()
	term, err := e.Campaign(fencingtest.Context(t, wait), value)
	if err != nil {
		t.Fatalf("Campaign: %v", err)
	}
	return term
}

func exampleClient() *clientv3.Client { return etcdtest.Shared().Admin }

// candidatesOf reads the ranked candidates of the election name on c.
func candidatesOf(t testing.TB, c *fencingtest.Cluster, name string) []election.Candidate {
	t.Helper()
	cs, err := election.ReadCandidates(fencingtest.Context(t, wait), c.Admin, c.Root, name)
	if err != nil {
		t.Fatalf("ReadCandidates %q: %v", name, err)
	}
	return cs
}
