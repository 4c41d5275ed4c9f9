package fencing_test

import (
	"testing"

	"github.com/leasehold/leasehold/fencing"
	"github.com/leasehold/leasehold/fencing/fencingtest"
	"github.com/leasehold/leasehold/internal/testbed/etcdtest"
	clientv3 "go.etcd.io/etcd/client/v3"
)

func TestMain(m *testing.M) { fencingtest.Main(m) }

const wait = fencingtest.Wait

var (
	newSession = fencingtest.Session
	newMutex   = etcdtest.Mutex
)

func lock(t testing.TB, m *fencing.Mutex) *fencing.Hold {
	t.Helper()
	h, err := m.Lock(fencingtest.Context(t, wait))
	if err != nil {
		t.Fatalf("Lock: %v", err)
	}
	return h
}

// exampleClient is a client of the embedded etcd the examples share.
func exampleClient() *clientv3.Client { return etcdtest.Shared().Admin }
