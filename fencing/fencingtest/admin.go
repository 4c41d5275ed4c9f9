package fencingtest

import (
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

// withAuth makes a client log in as user.
func withAuth(user, password string) ClientOption {
	return func(cfg *clientv3.Config) { cfg.Username, cfg.Password = user, password }
}

// enableAuth turns etcd authentication on, with a root user whose client
// replaces Admin. The kit's members hash passwords at bcrypt's lowest cost,
// so that an Authenticate is quick (etcd's default, 10, takes ~50 ms of CPU
// each, and over a second under the race detector).
func (c *Cluster) enableAuth(t TB) {
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
	root, err := dial(c.Endpoints(), append(c.tlsOption(), withAuth("root", "root"))...)
	if err != nil {
		t.Fatalf("fencingtest: root client: %v", err)
	}
	c.Admin.Close()
	c.Admin = root
}
