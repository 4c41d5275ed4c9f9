package robust_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/leasehold/leasehold/election"
	"github.com/leasehold/leasehold/fencing"
	"github.com/leasehold/leasehold/fencing/fencingtest"
	"github.com/leasehold/leasehold/guard"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
)

// With etcd auth on, a user allowed only the library's prefix (and its own
// data's) can use every API; a user allowed nothing gets a permission error
// and leaves no key behind.
func TestAuthLimitedToPrefixes(t *testing.T) {
	c := fencingtest.Single(t)
	c.EnableAuth(t)
	c.AddUser(t, "svc", "leasehold/", "app/")
	c.AddUser(t, "nobody")
	ctx := fencingtest.Context(t, time.Minute)

	svc := c.Client(t, fencingtest.WithAuth("svc", "svc"))
	s := fencingtest.Session(t, svc)
	h := fencingtest.Lock(t, s, "jobs/billing")
	if _, err := fencingtest.Mutex(t, s, "jobs/billing").TryLock(ctx); !errors.Is(err, fencing.ErrLocked) {
		t.Fatalf("TryLock: %v; want ErrLocked", err)
	}
	if _, err := guard.Put(ctx, h, "app/state", "1"); err != nil {
		t.Fatalf("guarded Put: %v", err)
	}
	// Armed: the session's watch stream carries svc's token (a watch
	// created without it is refused, and never arms).
	wctx, stop := guard.Watch(ctx, h)
	defer stop()
	if wctx.Err() != nil {
		t.Fatalf("watched hold ended: %v", context.Cause(wctx))
	}
	if err := h.Unlock(ctx); err != nil {
		t.Fatalf("Unlock: %v", err)
	}
	if cause := fencingtest.Ended(t, wctx, time.Minute, "the watch after Unlock"); !errors.Is(cause, fencing.ErrNotHeld) {
		t.Fatalf("cause %v, want ErrNotHeld", cause)
	}
	e, _ := election.New(s, "api")
	obs := e.Observe(ctx)
	if o := <-obs; o.Err != nil || o.Leader != nil {
		t.Fatalf("first observation: %+v", o)
	}
	term, err := e.Campaign(ctx, "svc-1")
	if err != nil {
		t.Fatalf("Campaign: %v", err)
	}
	if err := term.Proclaim(ctx, "svc-1b"); err != nil {
		t.Fatalf("Proclaim: %v", err)
	}
	if err := term.Resign(ctx); err != nil {
		t.Fatalf("Resign: %v", err)
	}
	ran := false
	if err := election.Run(ctx, svc, "runner", "svc-1", func(context.Context, *election.Term) error { ran = true; return nil }); err != nil || !ran {
		t.Fatalf("Run: %v (work ran: %v)", err, ran)
	}

	nobody := c.Client(t, fencingtest.WithAuth("nobody", "nobody"))
	ns, err := fencing.NewSession(ctx, nobody)
	if err == nil {
		t.Cleanup(func() { ns.Close(context.Background()) })
		_, err = fencingtest.Mutex(t, ns, "jobs/billing").Lock(ctx)
		if !errors.Is(err, rpctypes.ErrPermissionDenied) {
			t.Fatalf("Lock without permission: %v; want ErrPermissionDenied", err)
		}
		_, err = fencingtest.Mutex(t, ns, "jobs/billing").TryLock(ctx)
		if !errors.Is(err, rpctypes.ErrPermissionDenied) {
			t.Fatalf("TryLock without permission: %v; want ErrPermissionDenied", err)
		}
		ne, _ := election.New(ns, "api")
		if _, err := ne.Campaign(ctx, "x"); !errors.Is(err, rpctypes.ErrPermissionDenied) {
			t.Fatalf("Campaign without permission: %v; want ErrPermissionDenied", err)
		}
	} else if !errors.Is(err, rpctypes.ErrPermissionDenied) {
		t.Fatalf("NewSession without permission: %v", err)
	}
	if keys := c.Keys(t, "leasehold/"); len(keys) != 0 {
		t.Fatalf("keys left behind: %q", keys)
	}
}
