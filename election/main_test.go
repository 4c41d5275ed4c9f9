package election_test

import (
	"testing"
	"time"

	"github.com/leasehold/leasehold/election"
	"github.com/leasehold/leasehold/fencing"
	"github.com/leasehold/leasehold/internal/etcdtest"
	"github.com/leasehold/leasehold/internal/fencingtest"
	clientv3 "go.etcd.io/etcd/client/v3"
)

func TestMain(m *testing.M) {
	etcdtest.RegisterHelper("group-replica", groupReplica)
	etcdtest.Main(m)
}

const wait = fencingtest.Wait

var newSession = fencingtest.Session

func newElection(t testing.TB, s *fencing.Session, name string) *election.Election {
	t.Helper()
	e, err := election.New(s, name)
	if err != nil {
		t.Fatalf("New(%q): %v", name, err)
	}
	return e
}

func campaign(t testing.TB, e *election.Election, value string) *election.Term {
	t.Helper()
	term, err := e.Campaign(etcdtest.Context(t, wait), value)
	if err != nil {
		t.Fatalf("Campaign: %v", err)
	}
	return term
}

// next receives the next observation, failing t after the deadline.
func next(t testing.TB, ch <-chan election.Observation) election.Observation {
	t.Helper()
	select {
	case o, ok := <-ch:
		if !ok {
			t.Fatal("Observe channel closed early")
		}
		return o
	case <-time.After(wait):
		t.Fatal("no observation")
		return election.Observation{}
	}
}

func exampleClient() *clientv3.Client { return etcdtest.Shared().Admin }
