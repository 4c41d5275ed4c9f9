package retry

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/leasehold/leasehold/internal/admit"
	"github.com/leasehold/leasehold/internal/testbed/stacks"
)

// enter is where an attempt waits for a place, as a stack names it.
const enter = "github.com/leasehold/leasehold/internal/admit.(*Places).Enter"

// An attempt waits for a place among its Latency's attempts in flight; one
// whose ctx or life ends first sends nothing, and its error wraps
// ErrNotSent with the cause, a failure whose outcome is known. The place
// goes to the next attempt once the one out returns.
func TestAttemptWaitsForAPlace(t *testing.T) {
	l := &Latency{Places: admit.New(1)}
	out, release := make(chan struct{}), make(chan struct{})
	firstDone := make(chan error, 1)
	go func() {
		firstDone <- Attempt(context.Background(), context.Background(), l, 0, func(context.Context) error {
			close(out)
			<-release
			return nil
		})
	}()
	<-out
	errHeld := errors.New("the hold's cause")
	for _, c := range []struct {
		name string
		// contexts returns the attempt's ctx and life, and what ends one.
		contexts func() (ctx, life context.Context, end func())
	}{
		{"ctx ends", func() (context.Context, context.Context, func()) {
			ctx, end := context.WithCancel(context.Background())
			return ctx, context.Background(), end
		}},
		{"life ends", func() (context.Context, context.Context, func()) {
			life, end := context.WithCancel(context.Background())
			return context.Background(), life, end
		}},
		// A wait's read, whose life is its ctx, ended with a cause (a
		// hold's context): ctx's error, not the cause, whichever of the
		// two the wait sees first.
		{"own life ends with a cause", func() (context.Context, context.Context, func()) {
			ctx, end := context.WithCancelCause(context.Background())
			return ctx, ctx, func() { end(errHeld) }
		}},
	} {
		for range 20 {
			ctx, life, end := c.contexts()
			sent := false
			done := make(chan error, 1)
			go func() {
				done <- Attempt(ctx, life, l, 0, func(context.Context) error { sent = true; return nil })
			}()
			waitUntil(t, "the attempt to wait for a place", func() bool { return stacks.Blocked(enter) == 1 })
			end()
			err := <-done
			if sent || !errors.Is(err, admit.ErrNotSent) || !errors.Is(err, context.Canceled) || Unknown(err) || Transient(err) {
				t.Fatalf("%s: sent %v, err %v; want nothing sent, ErrNotSent and context.Canceled, outcome known, not passing", c.name, sent, err)
			}
		}
	}
	next := make(chan error, 1)
	go func() {
		next <- Attempt(context.Background(), context.Background(), l, 0, func(context.Context) error { return nil })
	}()
	waitUntil(t, "the next attempt to wait for a place", func() bool { return stacks.Blocked(enter) == 1 })
	close(release)
	if err := <-firstDone; err != nil {
		t.Fatal(err)
	}
	if err := <-next; err != nil {
		t.Fatalf("next attempt after the place was freed: %v", err)
	}
	ended, end := context.WithCancel(context.Background())
	end()
	if err := l.Places.Enter(ended, ended); err != nil {
		t.Errorf("the place is still taken once every attempt returned: %v", err)
	}
}

// waitUntil polls cond for at most ten seconds.
func waitUntil(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for end := time.Now().Add(10 * time.Second); !cond(); time.Sleep(time.Millisecond) {
		if time.Now().After(end) {
			t.Fatalf("gave up waiting for %s", what)
		}
	}
}
