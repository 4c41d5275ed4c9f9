package guard_test

import (
	"context"
	"testing"

	"github.com/leasehold/leasehold/fencing/fencingtest"
	"github.com/leasehold/leasehold/guard"
	"github.com/leasehold/leasehold/internal/testbed/etcdtest"
)

// Every error guard returns names the package once, first.
func TestErrorsNamePackageOnce(t *testing.T) {
	c := fencingtest.Single(t)
	ctx := fencingtest.Context(t, wait)
	s := newSession(t, c.Client(t))
	released := lock(t, s, "errtext")
	if err := released.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	h := lock(t, s, "errtext-2")
	cancelled, cancel := context.WithCancel(ctx)
	cancel()
	errs := map[string]func() error{
		"Put(released)":    func() error { _, err := guard.Put(ctx, released, "k", "v"); return err },
		"Delete(released)": func() error { _, err := guard.Delete(ctx, released, "k"); return err },
		"Put(cancelled)":   func() error { _, err := guard.Put(cancelled, h, "k", "v"); return err },
	}
	for name, call := range errs {
		t.Run(name, func(t *testing.T) { etcdtest.NamesPackageOnce(t, "guard", call()) })
	}
}
