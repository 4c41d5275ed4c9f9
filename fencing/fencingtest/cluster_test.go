package fencingtest_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/leasehold/leasehold/internal/testbed/etcdtest"
	"github.com/leasehold/leasehold/internal/testbed/kit"

	"github.com/leasehold/leasehold/fencing/fencingtest"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
)

func TestMain(m *testing.M) {
	fencingtest.RegisterHelper("leased-key", leasedKey)
	fencingtest.RegisterHelper("replica", replica)
	fencingtest.Main(m)
}

// leasedKey puts a key on a kept-alive lease and prints "ready <key> <lease>",
// then runs until stdin closes. Args: endpoint, key, ttl seconds.
func leasedKey(args []string) int {
	ttl, _ := strconv.ParseInt(args[2], 10, 64)
	cli, err := clientv3.New(clientv3.Config{Endpoints: []string{args[0]}, Logger: zap.NewNop()})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer cli.Close()
	ctx := context.Background()
	id, err := putLeased(ctx, cli, args[1], ttl)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	fmt.Printf("ready %s %d\n", args[1], id)
	os.Stdin.Read(make([]byte, 1)) // until the test closes stdin
	return 0
}

func putLeased(ctx context.Context, cli *clientv3.Client, key string, ttl int64) (clientv3.LeaseID, error) {
	g, err := cli.Grant(ctx, ttl)
	if err != nil {
		return 0, err
	}
	if _, err := cli.Put(ctx, key, "held", clientv3.WithLease(g.ID)); err != nil {
		return 0, err
	}
	ka, err := cli.KeepAlive(ctx, g.ID)
	if err != nil {
		return 0, err
	}
	go func() {
		for range ka { // drain, or clientv3 warns and drops
		}
	}()
	return g.ID, nil
}

// waitDeleted waits until key is deleted, watching from the admin client.
func waitDeleted(t *testing.T, c *fencingtest.Cluster, key string, d time.Duration) {
	t.Helper()
	ctx := fencingtest.Context(t, d)
	wch := c.Admin.Watch(ctx, key)
	if !etcdtest.Exists(t, c, key) {
		return
	}
	for resp := range wch {
		for _, ev := range resp.Events {
			if ev.Type == clientv3.EventTypeDelete {
				return
			}
		}
	}
	t.Fatalf("key %q not deleted within %v", key, d)
}

func TestSingleServes(t *testing.T) {
	start := time.Now()
	c := fencingtest.Single(t)
	t.Logf("single member ready in %v", time.Since(start))
	ctx := fencingtest.Context(t, 10*time.Second)
	if _, err := c.Admin.Put(ctx, "k", "v"); err != nil {
		t.Fatalf("Put: %v", err)
	}
	if !etcdtest.Exists(t, c, "k") {
		t.Fatal("key k missing after Put")
	}
	if n := c.Delete(t, "k"); n != 1 {
		t.Fatalf("Delete(k) deleted %d keys; want 1", n)
	}
}

// A blackholed client's lease expires on the server, while a client with the
// same TTL whose link works keeps its key: the fault is real and per client.
func TestBlackholeExpiresLeaseOfOneClient(t *testing.T) {
	c := fencingtest.Single(t)
	cut, link := c.ProxiedClient(t)
	healthy, _ := c.ProxiedClient(t)
	ctx := fencingtest.Context(t, 30*time.Second)
	if _, err := putLeased(ctx, cut, "cut", 1); err != nil {
		t.Fatal(err)
	}
	if _, err := putLeased(ctx, healthy, "healthy", 1); err != nil {
		t.Fatal(err)
	}
	link.Blackhole()
	waitDeleted(t, c, "cut", 20*time.Second)
	if !etcdtest.Exists(t, c, "healthy") {
		t.Fatal("healthy client's key expired too: the fault was not per client")
	}
	// The blackholed client hears nothing until the link is restored.
	short, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
	defer cancel()
	if _, err := cut.Get(short, "cut"); err == nil {
		t.Fatal("Get through a blackholed link succeeded")
	}
	link.Restore()
	fencingtest.WaitFor(t, 20*time.Second, "the restored link to serve", func() bool {
		rctx, cancel := context.WithTimeout(ctx, time.Second)
		defer cancel()
		_, err := cut.Get(rctx, "cut")
		return err == nil
	})
}

func TestDelayedLinkStillServes(t *testing.T) {
	c := fencingtest.Single(t)
	cli, link := c.ProxiedClient(t)
	link.Delay(20 * time.Millisecond)
	ctx := fencingtest.Context(t, 10*time.Second)
	if _, err := cli.Put(ctx, "k", "v"); err != nil {
		t.Fatalf("Put through delayed link: %v", err)
	}
	link.Restore()
}

// A three-member cluster keeps serving writes after its leader is stopped,
// and the stopped member rejoins on restart.
func TestThreeSurvivesLeaderStop(t *testing.T) {
	start := time.Now()
	c := fencingtest.Three(t)
	t.Logf("three members ready in %v", time.Since(start))
	ctx := fencingtest.Context(t, 30*time.Second)
	old := c.StopLeader(t)
	if etcdtest.Running(c.Members[old]) {
		t.Fatalf("member %d still running after StopLeader", old)
	}
	now := c.WaitLeader(t)
	if now == old {
		t.Fatalf("stopped member %d still reported as leader", old)
	}
	if _, err := c.Admin.Put(ctx, "after-stop", "v"); err != nil {
		t.Fatalf("Put with leader stopped: %v", err)
	}
	c.Restart(t, old)
	// The restarted member serves the write it missed.
	cli := fencingtest.NewClient(t, []string{c.Members[old].ClientURL.String()})
	fencingtest.WaitFor(t, 20*time.Second, "restarted member to catch up", func() bool {
		resp, err := cli.Get(ctx, "after-stop", clientv3.WithSerializable())
		return err == nil && len(resp.Kvs) == 1
	})
}

// A member's ports lie below the ports the kernel gives outgoing
// connections: a stopped member's port is free for a moment, and a client
// connecting just then must not get it, or the member's Restart fails (an
// hour's soak failed so: "restart m0: listen tcp 127.0.0.1:35437: bind:
// address already in use").
func TestFreeAddrBelowEphemeralPorts(t *testing.T) {
	b, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range")
	if err != nil {
		t.Skipf("the kernel does not say which ports it gives connections: %v", err)
	}
	var low int
	if _, err := fmt.Sscan(string(b), &low); err != nil {
		t.Fatalf("ip_local_port_range %q: %v", b, err)
	}
	if low <= 1025 {
		t.Skipf("the kernel gives connections every port from %d: none is left below", low)
	}
	for range 50 {
		addr, err := kit.FreeAddr()
		if err != nil {
			t.Fatal(err)
		}
		_, p, _ := strings.Cut(addr, ":")
		port, err := strconv.Atoi(p)
		if err != nil || port < 1024 || port >= low {
			t.Fatalf("FreeAddr() = %s; want a port from 1024 up to below %d, where no connection is given one", addr, low)
		}
	}
}

// A SIGSTOPped process stops renewing its lease: the server expires it and
// deletes the key.
func TestStoppedProcessLosesLease(t *testing.T) {
	c := fencingtest.Single(t)
	p := fencingtest.StartHelper(t, "leased-key", c.Endpoints()[0], "paused", "1")
	p.Expect(t, 20*time.Second, "ready")
	p.Stop(t)
	waitDeleted(t, c, "paused", 20*time.Second)
	p.Cont(t)
	p.Kill(t)
}

func TestCompactCancelsOldWatches(t *testing.T) {
	c := fencingtest.Single(t)
	ctx := fencingtest.Context(t, 10*time.Second)
	resp, err := c.Admin.Put(ctx, "k", "1")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Admin.Put(ctx, "k", "2"); err != nil {
		t.Fatal(err)
	}
	rev := c.Compact(t)
	if rev <= resp.Header.Revision {
		t.Fatalf("Compact returned %d; want > %d", rev, resp.Header.Revision)
	}
	w := <-c.Admin.Watch(ctx, "k", clientv3.WithRev(resp.Header.Revision))
	if !errors.Is(w.Err(), rpctypes.ErrCompacted) {
		t.Fatalf("watch from compacted revision: err %v; want ErrCompacted", w.Err())
	}
}

func TestRevokeDeletesLeasedKeys(t *testing.T) {
	c := fencingtest.Single(t)
	cli := c.Client(t)
	ctx := fencingtest.Context(t, 10*time.Second)
	id, err := putLeased(ctx, cli, "leased", 30)
	if err != nil {
		t.Fatal(err)
	}
	c.Revoke(t, id)
	if etcdtest.Exists(t, c, "leased") {
		t.Fatal("key outlived its revoked lease")
	}
}
