package fencingtest

import (
	"context"
	"errors"
	"sync"
	"time"
)

// Go runs f in a goroutine, as one replica or worker of the code under
// test, with a context that ends when the test does. At the test's end it
// cancels that context and waits up to Wait for f to return, failing the
// test if f has not returned by then, or returned an error other than the
// context's. The returned stop does the same at once, for a test that stops
// a replica midway (a clean shutdown), and returns f's error.
func Go(t TB, f func(ctx context.Context) error) (stop func() error) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- f(ctx) }()
	var (
		once sync.Once
		err  error
	)
	stop = func() error {
		once.Do(func() {
			cancel()
			select {
			case err = <-done:
			case <-time.After(Wait):
				err = errors.New("it had not returned " + Wait.String() + " after its context ended")
				t.Fatalf("fencingtest: a function started by Go: %v", err)
			}
		})
		return err
	}
	t.Cleanup(func() {
		if err := stop(); err != nil && !errors.Is(err, context.Canceled) {
			t.Fatalf("fencingtest: a function started by Go returned %v", err)
		}
	})
	return stop
}

// Receive waits up to Wait for a value from ch and returns it, failing the
// test if none comes or ch closes: how a test waits for its work to start,
// or for an observation.
func Receive[V any](t TB, ch <-chan V, what string) V {
	t.Helper()
	select {
	case v, ok := <-ch:
		if !ok {
			t.Fatalf("fencingtest: %s: the channel closed", what)
		}
		return v
	case <-time.After(Wait):
		t.Fatalf("fencingtest: %s: nothing received within %v", what, Wait)
	}
	var zero V
	return zero
}
