package fencing_test

import (
	"context"
	"testing"

	"github.com/leasehold/leasehold/fencing"
	"github.com/leasehold/leasehold/fencing/fencingtest"
	"github.com/leasehold/leasehold/internal/testbed/etcdtest"
)

// Every error fencing returns names the package once, first, whatever it
// wraps: "fencing: trylock \"x\": locked: ...".
func TestErrorsNamePackageOnce(t *testing.T) {
	c := fencingtest.Single(t)
	cli := c.Client(t)
	ctx := fencingtest.Context(t, wait)
	s := newSession(t, cli)
	h := lock(t, newMutex(t, s, "errtext"))
	closed := newSession(t, cli)
	closed.Close(ctx)
	cancelled, cancel := context.WithCancel(ctx)
	cancel()
	errs := map[string]func() error{
		"NewSession(TTL)":    func() error { _, err := fencing.NewSession(ctx, cli, fencing.WithTTL(1)); return err },
		"NewSession(root)":   func() error { _, err := fencing.NewSession(ctx, cli, fencing.WithRoot("")); return err },
		"NewMutex(name)":     func() error { _, err := fencing.NewMutex(s, "a#b"); return err },
		"TryLock(held)":      func() error { _, err := newMutex(t, newSession(t, cli), "errtext").TryLock(ctx); return err },
		"Lock(closed)":       func() error { _, err := newMutex(t, closed, "errtext-2").Lock(ctx); return err },
		"Lock(cancelled)":    func() error { _, err := newMutex(t, s, "errtext-3").Lock(cancelled); return err },
		"Unlock(twice)":      func() error { h2 := lock(t, newMutex(t, s, "errtext-4")); h2.Unlock(ctx); return h2.Unlock(ctx) },
		"ParseToken":         func() error { _, err := fencing.ParseToken("x"); return err },
		"Session.Close(nil)": func() error { var nilCtx context.Context; return s.Close(nilCtx) },
	}
	for name, call := range errs {
		t.Run(name, func(t *testing.T) { etcdtest.NamesPackageOnce(t, "fencing", call()) })
	}
	if err := h.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
}
