package fencingtest

import (
	"github.com/leasehold/leasehold/fencing"
	"github.com/leasehold/leasehold/fencing/inspect"
)

// Queue returns the queue of the kind's name under c.Root as the admin
// client reads it now: who holds, who waits, with their tokens, values and
// leases (see package inspect).
func (c *Cluster) Queue(t TB, kind fencing.Kind, name string) inspect.Queue {
	t.Helper()
	q, err := inspect.Read(Context(t, adminTimeout), c.Admin, c.Root, kind, name)
	if err != nil {
		t.Fatalf("fencingtest: read %s %q: %v", kind, name, err)
	}
	return q
}

// WaitNewLeader waits until the election name has a leader whose value (the
// value it campaigned with; election.Run's value) is not old, and returns
// it. With old "", any leader will do.
func (c *Cluster) WaitNewLeader(t TB, name, old string) inspect.Entry {
	t.Helper()
	return c.waitOwner(t, fencing.KindElection, name, "a leader other than "+old, func(e inspect.Entry) bool {
		return e.Value != old
	})
}

// RevokeOwner waits for the kind's name to have an owner and revokes its
// lease, as an operator's etcdctl lease revoke, or an expiry, does; it
// returns the owner as it was. What the code under test should see: the
// owner's session ends with fencing.ErrLeaseExpired, its holds' and terms'
// contexts end with fencing.ErrKeyDeleted wrapping fencing.ErrLeaseExpired,
// its guarded writes are refused with guard.ErrNotOwner, and the next in
// line owns the name at once. For the lease of a session you hold, Revoke
// its Lease().
func (c *Cluster) RevokeOwner(t TB, kind fencing.Kind, name string) inspect.Entry {
	t.Helper()
	owner := c.waitOwner(t, kind, name, "an owner", nil)
	c.Revoke(t, owner.Lease)
	return owner
}

// DeleteOwner waits for the kind's name to have an owner and deletes its key
// from the admin client, as an operator who clears a stuck lock does, and
// returns the owner as it was. What the code under test should see: the
// hold's or term's context ends with fencing.ErrKeyDeleted, its guarded
// writes are refused with guard.ErrNotOwner, and the next in line owns the
// name; the owner's session lives on, and Unlock or Resign reports
// fencing.ErrNotHeld or election.ErrNotLeader.
func (c *Cluster) DeleteOwner(t TB, kind fencing.Kind, name string) inspect.Entry {
	t.Helper()
	owner := c.waitOwner(t, kind, name, "an owner", nil)
	c.Delete(t, owner.Key)
	return owner
}

// waitOwner waits until the kind's name has an owner for which ok (nil:
// any) holds, and returns it.
func (c *Cluster) waitOwner(t TB, kind fencing.Kind, name, what string, ok func(inspect.Entry) bool) inspect.Entry {
	t.Helper()
	var owner inspect.Entry
	WaitFor(t, Wait, string(kind)+" "+name+" to have "+what, func() bool {
		e, held := c.Queue(t, kind, name).Owner()
		owner = e
		return held && (ok == nil || ok(e))
	})
	return owner
}
