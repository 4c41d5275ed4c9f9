package fencingtest

import (
	"fmt"
	"strconv"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
)

const adminTimeout = 10 * time.Second

// Compact compacts the cluster's history up to the current revision and
// returns that revision: every watch that starts, or lags, before it is
// cancelled by the server with a compaction error. What the code under test
// should see: nothing; holds, terms and observers resume their watches.
func (c *Cluster) Compact(t TB) int64 {
	t.Helper()
	ctx := Context(t, adminTimeout)
	resp, err := c.Admin.Get(ctx, "\x00")
	if err != nil {
		t.Fatalf("fencingtest: compact: read revision: %v", err)
	}
	rev := resp.Header.Revision
	if _, err := c.Admin.Compact(ctx, rev, clientv3.WithCompactPhysical()); err != nil {
		t.Fatalf("fencingtest: compact to %d: %v", rev, err)
	}
	return rev
}

// Revoke revokes a lease from the admin client, as an operator would; to
// the code that holds it, the same as an expiry. What that code should see:
// its session ends with fencing.ErrLeaseExpired; its holds' and terms'
// contexts end with fencing.ErrKeyDeleted wrapping it; its guarded writes
// are refused (guard.ErrNotOwner); the next in line owns each name at once.
// RevokeOwner finds the lease of a name's owner.
func (c *Cluster) Revoke(t TB, id clientv3.LeaseID) {
	t.Helper()
	if _, err := c.Admin.Revoke(Context(t, adminTimeout), id); err != nil {
		t.Fatalf("fencingtest: revoke %x: %v", id, err)
	}
}

// Delete deletes one key from the admin client and returns how many keys
// went. For an owner's key, DeleteOwner says what the code should see.
func (c *Cluster) Delete(t TB, key string) int64 {
	t.Helper()
	resp, err := c.Admin.Delete(Context(t, adminTimeout), key)
	if err != nil {
		t.Fatalf("fencingtest: delete %q: %v", key, err)
	}
	return resp.Deleted
}

// Exists reports whether key exists, read linearizably from the admin client.
func (c *Cluster) Exists(t TB, key string) bool {
	t.Helper()
	resp, err := c.Admin.Get(Context(t, adminTimeout), key, clientv3.WithCountOnly())
	if err != nil {
		t.Fatalf("fencingtest: get %q: %v", key, err)
	}
	return resp.Count > 0
}

// Keys returns every key under prefix, read from the admin client.
func (c *Cluster) Keys(t TB, prefix string) []string {
	t.Helper()
	resp, err := c.Admin.Get(Context(t, adminTimeout), prefix, clientv3.WithPrefix(), clientv3.WithKeysOnly())
	if err != nil {
		t.Fatalf("fencingtest: list %q: %v", prefix, err)
	}
	var keys []string
	for _, kv := range resp.Kvs {
		keys = append(keys, string(kv.Key))
	}
	return keys
}

// Deletion watches key from the admin client and returns a channel that
// receives the time at which the deletion of key was seen. The watch is
// established when Deletion returns. The channel is closed without a value if
// the test ends first.
func (c *Cluster) Deletion(t TB, key string) <-chan time.Time {
	t.Helper()
	wch := c.Admin.Watch(Context(t, time.Minute), key, clientv3.WithCreatedNotify(), clientv3.WithFilterPut())
	<-wch
	seen := make(chan time.Time, 1)
	go func() {
		defer close(seen)
		for resp := range wch {
			if len(resp.Events) > 0 {
				seen <- time.Now()
				return
			}
		}
	}()
	return seen
}

// StoppedBefore waits for the deletion that Deletion reports, and returns
// when it was seen and nil if stopped had closed strictly before: the S3
// order, a holder stops before the server gives its key away. Otherwise the
// error says what happened.
func StoppedBefore(stopped <-chan struct{}, deletion <-chan time.Time) (time.Time, error) {
	stoppedAt := When(stopped)
	deletedAt, ok := <-deletion
	if !ok {
		return deletedAt, fmt.Errorf("watch ended without a delete")
	}
	select {
	case at := <-stoppedAt:
		if !at.Before(deletedAt) {
			return deletedAt, fmt.Errorf("stopped at %v, not before the delete seen at %v", at, deletedAt)
		}
		return deletedAt, nil
	default:
		return deletedAt, fmt.Errorf("key deleted by the server (seen at %v) while the holder still went on", deletedAt)
	}
}

// When returns a channel that receives the time at which done closed.
func When(done <-chan struct{}) <-chan time.Time {
	at := make(chan time.Time, 1)
	go func() {
		<-done
		at <- time.Now()
	}()
	return at
}

// WithAuth makes a client log in as user.
func WithAuth(user, password string) ClientOption {
	return func(cfg *clientv3.Config) { cfg.Username, cfg.Password = user, password }
}

// EnableAuth turns etcd authentication on, with a root user whose client
// replaces Admin. The kit's members hash passwords at bcrypt's lowest cost,
// so that an Authenticate is quick (etcd's default, 10, takes ~50 ms of CPU
// each, and over a second under the race detector).
func (c *Cluster) EnableAuth(t TB) {
	t.Helper()
	ctx := Context(t, adminTimeout)
	for _, step := range []func() error{
		func() error { _, err := c.Admin.UserAdd(ctx, "root", "root"); return err },
		func() error { _, err := c.Admin.UserGrantRole(ctx, "root", "root"); return err },
		func() error { _, err := c.Admin.AuthEnable(ctx); return err },
	} {
		if err := step(); err != nil {
			t.Fatalf("fencingtest: enable auth: %v", err)
		}
	}
	root, err := dial(c.Endpoints(), append(c.tlsOption(), WithAuth("root", "root"))...)
	if err != nil {
		t.Fatalf("fencingtest: root client: %v", err)
	}
	c.Admin.Close()
	c.Admin = root
}

// AddUser creates user, with password user, granted read and write on each
// key prefix (none: a user who may touch nothing).
func (c *Cluster) AddUser(t TB, user string, prefixes ...string) {
	t.Helper()
	ctx := Context(t, adminTimeout)
	if _, err := c.Admin.UserAdd(ctx, user, user); err != nil {
		t.Fatalf("fencingtest: add user %s: %v", user, err)
	}
	if len(prefixes) == 0 {
		return
	}
	if _, err := c.Admin.RoleAdd(ctx, user); err != nil {
		t.Fatalf("fencingtest: add role %s: %v", user, err)
	}
	for _, p := range prefixes {
		if _, err := c.Admin.RoleGrantPermission(ctx, user, p, clientv3.GetPrefixRangeEnd(p), clientv3.PermissionType(clientv3.PermReadWrite)); err != nil {
			t.Fatalf("fencingtest: grant %s on %q: %v", user, p, err)
		}
	}
	if _, err := c.Admin.UserGrantRole(ctx, user, user); err != nil {
		t.Fatalf("fencingtest: grant role %s: %v", user, err)
	}
}

// CompactWhileDown stops member i, runs meanwhile (a release, say) on the
// others, writes a few keys and compacts past them, then restarts i: its
// clients reconnect and must resume their watches from a revision that is
// gone.
func (c *Cluster) CompactWhileDown(t TB, i int, meanwhile func()) {
	t.Helper()
	c.Stop(i)
	c.WaitLeader(t)
	meanwhile()
	for n := range 10 {
		if _, err := c.Admin.Put(Context(t, adminTimeout), "fencingtest/filler", strconv.Itoa(n)); err != nil {
			t.Fatalf("fencingtest: filler: %v", err)
		}
	}
	c.Compact(t)
	c.Restart(t, i)
}
