package election_test

import (
	"testing"

	"github.com/leasehold/leasehold/election"
	"github.com/leasehold/leasehold/internal/etcdtest"
	"github.com/leasehold/leasehold/internal/fencingtest"
	clientv3 "go.etcd.io/etcd/client/v3"
)

func TestMain(m *testing.M) {
	etcdtest.RegisterHelper("group-replica", groupReplica)
	etcdtest.Main(m)
}

const wait = fencingtest.Wait

var (
	newSession  = fencingtest.Session
	newElection = fencingtest.Election
	next        = fencingtest.Next
)

func campaign(t testing.TB, e *election.Election, value string) *election.Term {
	t.Helper()
	term, err := e.Campaign(etcdtest.Context(t, wait), value)
	if err != nil {
		t.Fatalf("Campaign: %v", err)
	}
	return term
}

func exampleClient() *clientv3.Client { return etcdtest.Shared().Admin }
