package inspect_test

import (
	"testing"

	"github.com/leasehold/leasehold/fencing"
	"github.com/leasehold/leasehold/fencing/fencingtest"
	"github.com/leasehold/leasehold/fencing/inspect"
	"github.com/leasehold/leasehold/internal/testbed/etcdtest"
	clientv3 "go.etcd.io/etcd/client/v3"
)

func TestMain(m *testing.M) { fencingtest.Main(m) }

const (
	wait = fencingtest.Wait
	root = fencing.DefaultRoot
)

var (
	newSession = fencingtest.Session
	newMutex   = etcdtest.Mutex
)

// lockPrefix is the key range of the lock name.
func lockPrefix(t testing.TB, name string) string {
	t.Helper()
	p, err := inspect.KeyPrefix(root, fencing.KindLock, name)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// exampleClient is a client of the embedded etcd the examples share.
func exampleClient() *clientv3.Client { return etcdtest.Shared().Admin }
