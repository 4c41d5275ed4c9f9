package fencingtest

import (
	"context"
	"errors"
	"os"
	"strings"
	"time"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	"go.etcd.io/etcd/client/pkg/v3/types"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/server/v3/embed"
)

// MoveLeader hands raft leadership from the current leader to another
// running member, as etcdctl move-leader does, and returns both indexes.
// What the code under test should see: nothing; requests in flight are
// retried or fail with a passing error that the library retries.
// etcd refuses a transferee that has not caught up (after a restart, say):
// it is asked again until the transfer is made.
func (c *Cluster) MoveLeader(t TB) (from, to int) {
	t.Helper()
	var err error
	WaitFor(t, time.Minute, "a leader transfer", func() bool {
		from, to, err = c.moveLeader()
		return err == nil
	})
	return from, to
}

func (c *Cluster) moveLeader() (from, to int, err error) {
	from, to = c.leader(), -1
	if from < 0 {
		return from, to, errors.New("no leader")
	}
	for k := 1; k < len(c.Members) && to < 0; k++ {
		if i := (from + k) % len(c.Members); c.Members[i].running() {
			to = i
		}
	}
	if to < 0 {
		return from, to, errors.New("no other member running")
	}
	lead, target := c.Members[from].server(), c.Members[to].server()
	if lead == nil || target == nil {
		return from, to, errors.New("member stopped")
	}
	ctx, cancel := context.WithTimeout(context.Background(), adminTimeout)
	defer cancel()
	return from, to, lead.Server.MoveLeader(ctx, lead.Server.Lead(), uint64(target.Server.MemberID()))
}

// ReplaceMember removes member i from the cluster, wipes its data, adds it
// back as a new member (a new ID, same name and ports) and starts it empty:
// it catches up from the others, as a member whose disk was replaced does.
// What the code under test should see: nothing, as with Stop; a client
// connected to i reconnects to a member that lost its history, and the
// library's watches resume from the revision they had.
func (c *Cluster) ReplaceMember(t TB, i int) {
	t.Helper()
	m := c.Members[i]
	e := m.server()
	if e == nil {
		t.Fatalf("fencingtest: replace %s: not running", m.Name)
	}
	id := uint64(e.Server.MemberID())
	// etcd refuses to remove a member until the others have been connected
	// for a while (after a restart, say): wait for that, as an operator does.
	var err error
	var added *clientv3.MemberAddResponse
	WaitFor(t, time.Minute, "etcd to accept the removal of "+m.Name, func() bool {
		_, err = c.Admin.MemberRemove(Context(t, adminTimeout), id)
		if err != nil && !c.isMember(t, id) {
			err = nil // applied: the member served its own removal, and stopped before answering
		}
		return !errors.Is(err, rpctypes.ErrUnhealthy)
	})
	if err != nil {
		t.Fatalf("fencingtest: remove %s: %v", m.Name, err)
	}
	m.pause()
	if err := os.RemoveAll(m.dir); err != nil {
		t.Fatalf("fencingtest: wipe %s: %v", m.Name, err)
	}
	WaitFor(t, time.Minute, "etcd to accept "+m.Name+" back", func() bool {
		added, err = c.Admin.MemberAdd(Context(t, adminTimeout), []string{m.PeerURL.String()})
		return !errors.Is(err, rpctypes.ErrUnhealthy)
	})
	if err != nil {
		t.Fatalf("fencingtest: add %s back: %v", m.Name, err)
	}
	// MemberAdd answers once the leader applied it; the new member fetches
	// the member list from whichever peer answers first, and a follower that
	// has not applied it yet makes the start fail ("member count is unequal").
	WaitFor(t, time.Minute, "every member to list "+m.Name+" again", func() bool {
		return c.allList(types.ID(added.Member.ID))
	})
	var initial []string
	for _, o := range c.Members {
		initial = append(initial, o.Name+"="+o.PeerURL.String())
	}
	m.cluster = strings.Join(initial, ",")
	if err := m.start("existing"); err != nil {
		t.Fatalf("fencingtest: start %s anew: %v", m.Name, err)
	}
}

// allList reports whether every running member has applied the addition
// of member id.
func (c *Cluster) allList(id types.ID) bool {
	for _, o := range c.Members {
		if e := o.server(); e != nil && e.Server.Cluster().Member(id) == nil {
			return false
		}
	}
	return true
}

// isMember reports whether the cluster still lists member id (true when it
// cannot tell).
func (c *Cluster) isMember(t TB, id uint64) bool {
	resp, err := c.Admin.MemberList(Context(t, adminTimeout))
	if err != nil {
		return true
	}
	for _, m := range resp.Members {
		if m.ID == id {
			return true
		}
	}
	return false
}

// server returns the member's embedded etcd, or nil while it is stopped.
func (m *Member) server() *embed.Etcd {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.etcd
}
