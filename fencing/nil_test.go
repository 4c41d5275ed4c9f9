package fencing_test

import (
	"context"
	"errors"
	"testing"

	"github.com/leasehold/leasehold/fencing"
	"github.com/leasehold/leasehold/fencing/fencingtest"
	"github.com/leasehold/leasehold/internal/testbed/etcdtest"
)

// Every exported function and method given a nil or zero value returns
// ErrInvalidArgument (or does its documented no-op), never panics, and
// writes nothing.
func TestNilAndZeroInputs(t *testing.T) {
	c := fencingtest.Single(t)
	cli := c.Client(t)
	ctx := fencingtest.Context(t, wait)
	s := newSession(t, cli)
	h := lock(t, newMutex(t, s, "nil-inputs"))
	var nilCtx context.Context
	invalid := map[string]func() error{
		"NewSession(nil ctx)":    func() error { _, err := fencing.NewSession(nilCtx, cli); return err },
		"NewSession(nil client)": func() error { _, err := fencing.NewSession(ctx, nil); return err },
		"NewSession(nil option)": func() error { _, err := fencing.NewSession(ctx, cli, nil); return err },
		"NewMutex(nil session)":  func() error { _, err := fencing.NewMutex(nil, "x"); return err },
		"nil Mutex Lock":         func() error { _, err := (*fencing.Mutex)(nil).Lock(ctx); return err },
		"zero Mutex Lock":        func() error { _, err := new(fencing.Mutex).Lock(ctx); return err },
		"zero Mutex TryLock":     func() error { _, err := new(fencing.Mutex).TryLock(ctx); return err },
		"Lock(nil ctx)":          func() error { _, err := newMutex(t, s, "nil-inputs").Lock(nilCtx); return err },
		"TryLock(nil ctx)":       func() error { _, err := newMutex(t, s, "nil-inputs").TryLock(nilCtx); return err },
		"zero Hold Unlock":       func() error { return new(fencing.Hold).Unlock(ctx) },
		"Unlock(nil ctx)":        func() error { return h.Unlock(nilCtx) },
		"zero Hold Context":      func() error { return context.Cause(new(fencing.Hold).Context()) },
		"zero Session Close":     func() error { return new(fencing.Session).Close(ctx) },
		"Close(nil ctx)":         func() error { return s.Close(nilCtx) },
	}
	for name, call := range invalid {
		t.Run(name, func(t *testing.T) {
			err := call()
			if !errors.Is(err, fencing.ErrInvalidArgument) {
				t.Errorf("got %v, want ErrInvalidArgument", err)
			}
			etcdtest.NamesPackageOnce(t, "fencing", err)
		})
	}
	if s.Err() != nil || h.Context().Err() != nil {
		t.Errorf("bad calls ended the session (%v) or the hold (%v)", s.Err(), context.Cause(h.Context()))
	}

	t.Run("documented no-ops", func(t *testing.T) {
		if ls, err := fencing.NewSession(ctx, cli, fencing.WithLogger(nil)); err != nil {
			t.Errorf("WithLogger(nil): %v", err)
		} else {
			ls.Close(ctx)
		}
	})
	if err := h.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	if keys := etcdtest.Keys(t, c, ""); len(keys) != 0 {
		t.Errorf("keys left: %v", keys)
	}
}
