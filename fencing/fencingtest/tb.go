package fencingtest

import (
	"context"
	"fmt"
	"sync"
)

// TB is what the kit needs of a test: *testing.T, *testing.B, *testing.F
// and any testing.TB have it. Every helper that takes a TB fails the test
// through Fatalf when it cannot do what it says, and stops what it started
// through Cleanup.
type TB interface {
	Helper()
	Cleanup(f func())
	Fatalf(format string, args ...any)
	// Context ends just before the cleanups run: waits bounded by it end
	// with the test.
	Context() context.Context
}

// Background returns a TB for code that runs outside a test, such as an
// Example function or a program: its Fatalf panics with the message, and
// close ends its Context, then runs its cleanups, the last registered first.
// It is safe for concurrent use.
func Background() (t TB, close func()) {
	s := new(standalone)
	return s, s.Close
}

// standalone is Background's TB. The zero value is ready to use.
type standalone struct {
	mu       sync.Mutex
	ctx      context.Context
	cancel   context.CancelFunc
	cleanups []func()
}

// Helper does nothing: there is no test to report a line to.
func (*standalone) Helper() {}

// Cleanup registers f to run at Close.
func (s *standalone) Cleanup(f func()) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.cleanups = append(s.cleanups, f)
}

// Fatalf panics with the formatted message.
func (*standalone) Fatalf(format string, args ...any) {
	panic(fmt.Sprintf(format, args...))
}

// Context returns a context that ends when Close begins.
func (s *standalone) Context() context.Context {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.ctx == nil {
		s.ctx, s.cancel = context.WithCancel(context.Background())
	}
	return s.ctx
}

// Close ends Context, then runs the cleanups, the last registered first,
// including any registered while they run.
func (s *standalone) Close() {
	s.mu.Lock()
	if s.cancel != nil {
		s.cancel()
	}
	s.mu.Unlock()
	for {
		s.mu.Lock()
		n := len(s.cleanups)
		if n == 0 {
			s.mu.Unlock()
			return
		}
		f := s.cleanups[n-1]
		s.cleanups = s.cleanups[:n-1]
		s.mu.Unlock()
		f()
	}
}
