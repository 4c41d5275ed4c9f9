package fencing_test

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/leasehold/leasehold/fencing"
	"github.com/leasehold/leasehold/fencing/fencingtest"
	"github.com/leasehold/leasehold/internal/etcdtest"
)

// A burst of Lock calls on one session sends at most WithMaxInFlight
// requests at once; the rest wait for a place, and every call then owns
// (#29: a hundred thousand Locks started together queued the lease's
// renewal behind them, and the session ended). etcd's answers are held
// until every call is either out or waiting for a place.
func TestSessionBoundsRequestsInFlight(t *testing.T) {
	const limit = 4
	s, f := etcdtest.LimitedSession(t, fencingtest.Single(t), limit)
	ctx := fencingtest.Context(t, wait)
	f.Burst(t, s, limit, 40, func(i int) error {
		h, err := newMutex(t, s, fmt.Sprint("burst/", i)).Lock(ctx)
		if err != nil {
			return err
		}
		return h.Unlock(ctx)
	})
	if err := s.Err(); err != nil {
		t.Errorf("session ended: %v", err)
	}
}

// A Lock whose ctx ends while it waits for a place sent nothing: it
// returns ctx's error, and its key goes back to the session's pool, not
// retired and swept as after a request whose outcome is unknown.
func TestLockGivesUpWaitingForAPlace(t *testing.T) {
	s, f := etcdtest.LimitedSession(t, fencingtest.Single(t), 1)
	f.Hold()
	ctx := fencingtest.Context(t, wait)
	first := make(chan error, 1)
	go func() { _, err := newMutex(t, s, "first").Lock(ctx); first <- err }()
	f.AwaitQueued(t, s, 1, 0)
	short, cancel := context.WithCancel(ctx)
	second := make(chan error, 1)
	go func() { _, err := newMutex(t, s, "second").Lock(short); second <- err }()
	f.AwaitQueued(t, s, 1, 1)
	cancel()
	if err := <-second; !errors.Is(err, context.Canceled) {
		t.Fatalf("Lock cancelled while waiting for a place: %v; want context.Canceled", err)
	}
	f.Release()
	if err := <-first; err != nil {
		t.Fatalf("first Lock: %v", err)
	}
	if _, _, swept := fencing.KeyPoolSize(s); swept != 0 {
		t.Errorf("%d keys retired and swept; want none: the cancelled Lock sent nothing", swept)
	}
	if got := f.Most(); got > 1 {
		t.Errorf("%d requests were out at once; want 1", got)
	}
}
