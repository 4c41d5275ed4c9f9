package guard_test

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/leasehold/leasehold/fencing/fencingtest"
	"github.com/leasehold/leasehold/guard"
	"github.com/leasehold/leasehold/internal/testbed/etcdtest"
)

// Guarded writes take places among their session's requests in flight
// (fencing.WithMaxInFlight), as its locks' requests do: a burst of them
// sends at most the limit at once, and each still commits. etcd's answers
// are held until every write is either out or waiting for a place.
func TestTxnsBoundedInFlight(t *testing.T) {
	const limit = 3
	s, f := etcdtest.LimitedSession(t, fencingtest.Single(t), limit)
	h := lock(t, s, "burst")
	ctx := fencingtest.Context(t, wait)
	f.Burst(t, s, limit, 30, func(i int) error {
		_, err := guard.Put(ctx, h, fmt.Sprint("burst/", i), "v")
		return err
	})
}

// A guarded write whose ctx ends while it waits for a place sent nothing:
// its error is ctx's, definite, not ErrOutcomeUnknown, and nothing is
// written.
func TestTxnGivesUpWaitingForAPlace(t *testing.T) {
	c := fencingtest.Single(t)
	s, f := etcdtest.LimitedSession(t, c, 1)
	h := lock(t, s, "waits")
	f.Hold()
	ctx := fencingtest.Context(t, wait)
	first := make(chan error, 1)
	go func() { _, err := guard.Put(ctx, h, "first", "v"); first <- err }()
	f.AwaitQueued(t, s, 1, 0)
	short, cancel := context.WithCancel(ctx)
	second := make(chan error, 1)
	go func() { _, err := guard.Put(short, h, "second", "v"); second <- err }()
	f.AwaitQueued(t, s, 1, 1)
	cancel()
	if err := <-second; !errors.Is(err, context.Canceled) || errors.Is(err, guard.ErrOutcomeUnknown) {
		t.Fatalf("guarded Put cancelled while waiting for a place: %v; want context.Canceled, outcome known", err)
	}
	f.Release()
	if err := <-first; err != nil {
		t.Fatalf("first guarded Put: %v", err)
	}
	if got := get(t, c, "second"); got != "" {
		t.Errorf("second = %q; want nothing written", got)
	}
}
