package fencing_test

import (
	"context"
	"testing"
	"time"

	"github.com/leasehold/leasehold/fencing"
	"github.com/leasehold/leasehold/internal/etcdtest"
	clientv3 "go.etcd.io/etcd/client/v3"
)

func TestMain(m *testing.M) { etcdtest.Main(m) }

// wait bounds every blocking call in these tests.
const wait = 30 * time.Second

func newSession(t testing.TB, cli *clientv3.Client, opts ...fencing.SessionOption) *fencing.Session {
	t.Helper()
	s, err := fencing.NewSession(etcdtest.Context(t, wait), cli, opts...)
	if err != nil {
		t.Fatalf("NewSession: %v", err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		s.Close(ctx)
	})
	return s
}

func newMutex(t testing.TB, s *fencing.Session, name string) *fencing.Mutex {
	t.Helper()
	m, err := fencing.NewMutex(s, name)
	if err != nil {
		t.Fatalf("NewMutex(%q): %v", name, err)
	}
	return m
}

func lock(t testing.TB, m *fencing.Mutex) *fencing.Hold {
	t.Helper()
	h, err := m.Lock(etcdtest.Context(t, wait))
	if err != nil {
		t.Fatalf("Lock: %v", err)
	}
	return h
}

// lockKeys lists the keys queued under a lock name.
func lockKeys(t testing.TB, c *etcdtest.Cluster, name string) []string {
	t.Helper()
	return c.Keys(t, "leasehold/lock/"+name+"\x00")
}

// exampleClient is a client of the embedded etcd the examples share.
func exampleClient() *clientv3.Client { return etcdtest.Shared().Admin }
