package robust_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/leasehold/leasehold/election"
	"github.com/leasehold/leasehold/fencing"
	"github.com/leasehold/leasehold/fencing/fencingtest"
	"github.com/leasehold/leasehold/fencing/inspect"
	"github.com/leasehold/leasehold/guard"
	"github.com/leasehold/leasehold/internal/testbed/etcdtest"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// An operator grants a team's service one range, computed by
// inspect.SubtreePrefix, and the service can use every API on every name
// under "teamA/", under the default root or its own; outside that range
// ("teamB/x", and "teamA" itself) every call fails with etcd's permission
// error and leaves no key.
func TestGrantOfSubtree(t *testing.T) {
	for _, root := range []string{fencing.DefaultRoot, "billing/locks/"} {
		t.Run(root, func(t *testing.T) {
			c := fencingtest.Single(t)
			etcdtest.EnableAuth(t, c)
			grant, err := inspect.SubtreePrefix(root, "teamA/")
			if err != nil {
				t.Fatal(err)
			}
			etcdtest.AddUser(t, c, "teamA", grant, "data/teamA/")
			cli := c.Client(t, etcdtest.WithAuth("teamA", "teamA"))
			opts := []fencing.SessionOption{fencing.WithRoot(root)}
			for _, name := range []string{"teamA/x", "teamA/y/z", "teamA/"} {
				granted(t, cli, opts, name)
			}
			for _, name := range []string{"teamB/x", "teamA", "teamAB/x"} {
				denied(t, cli, opts, name)
			}
			if keys := etcdtest.Keys(t, c, root); len(keys) != 0 {
				t.Fatalf("keys left under %s: %q", root, keys)
			}
		})
	}
}

// granted uses every API on name.
func granted(t *testing.T, cli *clientv3.Client, opts []fencing.SessionOption, name string) {
	t.Helper()
	ctx := fencingtest.Context(t, time.Minute)
	s, other := fencingtest.Session(t, cli, opts...), fencingtest.Session(t, cli, opts...)
	h, err := etcdtest.Mutex(t, s, name).Lock(ctx)
	if err != nil {
		t.Fatalf("Lock(%q): %v", name, err)
	}
	if _, err := etcdtest.Mutex(t, other, name).TryLock(ctx); !errors.Is(err, fencing.ErrLocked) {
		t.Fatalf("TryLock(%q) of a held lock: %v; want ErrLocked", name, err)
	}
	if _, err := guard.Put(ctx, h, "data/"+name, "1"); err != nil {
		t.Fatalf("guarded Put under %q: %v", name, err)
	}
	if err := h.Context().Err(); err != nil {
		t.Fatalf("hold of %q ended: %v", name, context.Cause(h.Context()))
	}
	if err := h.Unlock(ctx); err != nil {
		t.Fatalf("Unlock(%q): %v", name, err)
	}
	h, err = etcdtest.Mutex(t, other, name).TryLock(ctx)
	if err != nil {
		t.Fatalf("TryLock(%q) of a free lock: %v", name, err)
	}
	if err := h.Unlock(ctx); err != nil {
		t.Fatalf("Unlock(%q): %v", name, err)
	}

	e, err := election.New(s, name)
	if err != nil {
		t.Fatal(err)
	}
	octx, stop := context.WithCancel(ctx)
	defer stop()
	obs := e.Observe(octx)
	if o := <-obs; o.Err != nil || o.Leader != nil {
		t.Fatalf("first observation of %q: %+v", name, o)
	}
	term, err := e.Campaign(ctx, "a")
	if err != nil {
		t.Fatalf("Campaign(%q): %v", name, err)
	}
	if o := <-obs; o.Err != nil || o.Leader == nil || o.Leader.Token != term.Token() {
		t.Fatalf("observation of %q's leader: %+v", name, o)
	}
	oe, _ := election.New(other, name)
	if _, err := oe.TryCampaign(ctx, "b"); !errors.Is(err, fencing.ErrLocked) {
		t.Fatalf("TryCampaign(%q) with a leader: %v; want ErrLocked", name, err)
	}
	if err := term.Proclaim(ctx, "a2"); err != nil {
		t.Fatalf("Proclaim(%q): %v", name, err)
	}
	if _, err := guard.Txn(ctx, term).Then(clientv3.OpPut("data/"+name, "2")).Commit(); err != nil {
		t.Fatalf("guarded txn under %q's term: %v", name, err)
	}
	if err := term.Resign(ctx); err != nil {
		t.Fatalf("Resign(%q): %v", name, err)
	}
	ran := false
	work := func(context.Context, *election.Term) error { ran = true; return nil }
	if err := election.Run(ctx, cli, name, "r", work, election.WithSessionOptions(opts...)); err != nil || !ran {
		t.Fatalf("Run(%q): %v (work ran: %v)", name, err, ran)
	}
	ran = false
	if err := election.RunGroup(ctx, cli, name, []string{name}, work, election.AfterSuccess(election.Return),
		election.WithSessionOptions(opts...)); err != nil || !ran {
		t.Fatalf("RunGroup(%q): %v (work ran: %v)", name, err, ran)
	}
}

// denied tries every API on name, and wants etcd's permission error.
func denied(t *testing.T, cli *clientv3.Client, opts []fencing.SessionOption, name string) {
	t.Helper()
	s := fencingtest.Session(t, cli, opts...)
	e, _ := election.New(s, name)
	calls := map[string]func(ctx context.Context) error{
		"Lock":        func(ctx context.Context) error { _, err := etcdtest.Mutex(t, s, name).Lock(ctx); return err },
		"TryLock":     func(ctx context.Context) error { _, err := etcdtest.Mutex(t, s, name).TryLock(ctx); return err },
		"Campaign":    func(ctx context.Context) error { _, err := e.Campaign(ctx, "v"); return err },
		"TryCampaign": func(ctx context.Context) error { _, err := e.TryCampaign(ctx, "v"); return err },
		"Observe":     func(ctx context.Context) error { return (<-e.Observe(ctx)).Err },
		"Run": func(ctx context.Context) error {
			work := func(context.Context, *election.Term) error { t.Errorf("Run(%q) led", name); return nil }
			return election.Run(ctx, cli, name, "r", work, election.WithSessionOptions(opts...))
		},
		"RunGroup": func(ctx context.Context) error {
			work := func(context.Context, *election.Term) error { t.Errorf("RunGroup(%q) led", name); return nil }
			return election.RunGroup(ctx, cli, name, []string{name}, work, election.WithSessionOptions(opts...))
		},
	}
	for call, f := range calls {
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		err := f(ctx)
		cancel()
		if !errors.Is(err, rpctypes.ErrPermissionDenied) {
			t.Errorf("%s(%q) outside the grant: %v; want ErrPermissionDenied", call, name, err)
		}
		if strings.HasPrefix(call, "Run") {
			etcdtest.NamesPackageOnce(t, "election", err)
		}
	}
}
