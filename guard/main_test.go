package guard_test

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/leasehold/leasehold/fencing"
	"github.com/leasehold/leasehold/fencing/fencingtest"
	"github.com/leasehold/leasehold/guard"
	"github.com/leasehold/leasehold/internal/testbed/etcdtest"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
)

func TestMain(m *testing.M) {
	fencingtest.RegisterHelper("holder", holder)
	fencingtest.Main(m)
}

// holder locks a name and prints "locked <token>", then for each stdin line
// "write <key> <value>" makes a guarded put and prints "wrote ok",
// "wrote notowner" or "wrote error <err>". Args: endpoint, name, TTL.
func holder(args []string) int {
	ttl, _ := time.ParseDuration(args[2])
	cli, err := clientv3.New(clientv3.Config{Endpoints: []string{args[0]}, Logger: zap.NewNop()})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer cli.Close()
	ctx := context.Background()
	s, err := fencing.NewSession(ctx, cli, fencing.WithTTL(ttl))
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	m, _ := fencing.NewMutex(s, args[1])
	h, err := m.Lock(ctx)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	fmt.Println("locked", h.Token())
	in := bufio.NewScanner(os.Stdin)
	for in.Scan() {
		f := strings.Fields(in.Text())
		if len(f) != 3 || f[0] != "write" {
			continue
		}
		wctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		_, err := guard.Put(wctx, h, f[1], f[2])
		cancel()
		switch {
		case err == nil:
			fmt.Println("wrote ok")
		case errors.Is(err, guard.ErrNotOwner):
			fmt.Println("wrote notowner")
		default:
			fmt.Println("wrote error", err)
		}
	}
	return 0
}

var (
	newSession = fencingtest.Session
	lock       = fencingtest.Lock
)

const wait = fencingtest.Wait

// watch is guard.Watch whose cancel runs at the end of the test.
func watch(t testing.TB, o guard.Owner) context.Context {
	t.Helper()
	ctx, cancel := guard.Watch(t.Context(), o)
	t.Cleanup(cancel)
	return ctx
}

func get(t testing.TB, c *fencingtest.Cluster, key string) string {
	t.Helper()
	resp, err := c.Admin.Get(fencingtest.Context(t, wait), key)
	if err != nil {
		t.Fatal(err)
	}
	if len(resp.Kvs) == 0 {
		return ""
	}
	return string(resp.Kvs[0].Value)
}

func exampleClient() *clientv3.Client { return etcdtest.Shared().Admin }
