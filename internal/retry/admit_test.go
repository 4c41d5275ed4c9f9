package retry

import (
	"context"
	"errors"
	"testing"
	"time"
)

// An attempt waits for a place among its Latency's attempts in flight; one
// whose ctx or life ends first sends nothing, and its error wraps
// ErrNotSent with the cause, a failure whose outcome is known. The place
// goes to the next attempt once the one out returns.
func TestAttemptWaitsForAPlace(t *testing.T) {
	l := new(Latency)
	l.SetLimit(1)
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
			waitUntil(t, "the attempt to wait for a place", func() bool { return l.Waiting() == 1 })
			end()
			err := <-done
			if sent || !errors.Is(err, ErrNotSent) || !errors.Is(err, context.Canceled) || Unknown(err) || Transient(err) {
				t.Fatalf("%s: sent %v, err %v; want nothing sent, ErrNotSent and context.Canceled, outcome known, not passing", c.name, sent, err)
			}
		}
	}
	next := make(chan error, 1)
	go func() {
		next <- Attempt(context.Background(), context.Background(), l, 0, func(context.Context) error { return nil })
	}()
	waitUntil(t, "the next attempt to wait for a place", func() bool { return l.Waiting() == 1 })
	close(release)
	if err := <-firstDone; err != nil {
		t.Fatal(err)
	}
	if err := <-next; err != nil {
		t.Fatalf("next attempt after the place was freed: %v", err)
	}
	if n := len(l.places); n != 0 {
		t.Errorf("%d places taken once every attempt returned; want 0", n)
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
