package guard_test

import (
	"context"
	"errors"
	"testing"

	"github.com/leasehold/leasehold/fencing"
	"github.com/leasehold/leasehold/fencing/fencingtest"
	"github.com/leasehold/leasehold/guard"
	"github.com/leasehold/leasehold/internal/testbed/etcdtest"
)

// foreignOwner is an Owner whose session NewSession did not make.
type foreignOwner struct{ s *fencing.Session }

func (foreignOwner) Token() fencing.Token        { return fencing.Token{Name: "x", Revision: 1} }
func (foreignOwner) Key() string                 { return "x" }
func (o foreignOwner) Session() *fencing.Session { return o.s }

// guard's functions given a nil ctx, owner or function, or an owner without
// a real session, return fencing.ErrInvalidArgument, never panic, and write
// nothing.
func TestNilAndZeroInputs(t *testing.T) {
	c := fencingtest.Single(t)
	ctx := fencingtest.Context(t, wait)
	h := lock(t, newSession(t, c.Client(t)), "nil-inputs")
	var nilCtx context.Context
	noop := func(context.Context) error { return nil }
	invalid := map[string]func() error{
		"Txn(nil owner)":       func() error { _, err := guard.Txn(ctx, nil).Commit(); return err },
		"Txn(nil ctx)":         func() error { _, err := guard.Txn(nilCtx, h).Commit(); return err },
		"Put(nil owner)":       func() error { _, err := guard.Put(ctx, nil, "k", "v"); return err },
		"Delete(nil owner)":    func() error { _, err := guard.Delete(ctx, nil, "k"); return err },
		"Txn(nil session)":     func() error { _, err := guard.Txn(ctx, foreignOwner{}).Commit(); return err },
		"Txn(zero session)":    func() error { _, err := guard.Txn(ctx, foreignOwner{new(fencing.Session)}).Commit(); return err },
		"Do(nil owner)":        func() error { return guard.Do(ctx, nil, noop) },
		"Do(nil function)":     func() error { return guard.Do(ctx, h, nil) },
		"Do(nil ctx)":          func() error { return guard.Do(nilCtx, h, noop) },
		"Watch(nil owner)":     func() error { w, cancel := guard.Watch(ctx, nil); cancel(); return context.Cause(w) },
		"Watch(nil ctx)":       func() error { w, cancel := guard.Watch(nilCtx, h); cancel(); return context.Cause(w) },
		"Watch(foreign owner)": func() error { w, cancel := guard.Watch(ctx, foreignOwner{}); cancel(); return context.Cause(w) },
	}
	for name, call := range invalid {
		t.Run(name, func(t *testing.T) {
			err := call()
			if !errors.Is(err, fencing.ErrInvalidArgument) {
				t.Errorf("got %v, want ErrInvalidArgument", err)
			}
			etcdtest.NamesPackageOnce(t, "guard", err)
		})
	}
	var health guard.Health
	health.Track(nilCtx, h)()
	health.Track(ctx, nil)()
	if err := h.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	if keys := etcdtest.Keys(t, c, ""); len(keys) != 0 {
		t.Errorf("keys left: %v", keys)
	}
}
