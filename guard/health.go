package guard

import (
	"errors"
	"fmt"
	"net/http"
	"sync"
	"time"
)

// ErrOverdue is returned by Health.Check while a process still acts on an
// ownership whose session's ValidUntil has passed: its work ignored its
// context, and may write after a successor took over.
var ErrOverdue = errors.New("guard: acting on an ownership past its ValidUntil")

// Health tells a liveness probe whether this process acts only on
// ownerships it can still prove. Between Track and its done, the process
// believes it owns o (a leader runs its work); once o's session's
// ValidUntil has passed and done has not been called, Check fails. Unlike a
// check on the time since the last renewal, it needs no tolerance to tune:
// ValidUntil already is the conservative deadline, and a work that honours
// its context returns as it passes.
//
// Owning nothing is healthy. The zero Health is ready to use and safe for
// concurrent use.
type Health struct {
	mu     sync.Mutex
	owners map[*Owner]struct{} // guarded by mu: what the process acts on now
}

// Track records that the process acts on o from now until done is called.
// Calling done more than once is harmless.
func (h *Health) Track(o Owner) (done func()) {
	key := &o
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.owners == nil {
		h.owners = make(map[*Owner]struct{})
	}
	h.owners[key] = struct{}{}
	return func() {
		h.mu.Lock()
		defer h.mu.Unlock()
		delete(h.owners, key)
	}
}

// Check returns nil unless the process still acts on an ownership whose
// session's ValidUntil has passed: then an error wrapping ErrOverdue that
// names its token and how long ago ValidUntil passed.
func (h *Health) Check() error {
	h.mu.Lock()
	defer h.mu.Unlock()
	now := time.Now()
	for o := range h.owners {
		if until := (*o).Session().ValidUntil(); !now.Before(until) {
			return fmt.Errorf("%w: %v, %v after ValidUntil", ErrOverdue, (*o).Token(), now.Sub(until).Round(time.Millisecond))
		}
	}
	return nil
}

// ServeHTTP answers 200 "ok" while Check passes, and 503 with Check's error
// otherwise: mount it as a liveness endpoint, so that a process stuck in
// work that outlived its ownership is restarted.
func (h *Health) ServeHTTP(w http.ResponseWriter, _ *http.Request) {
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	w.Header().Set("Cache-Control", "no-store")
	if err := h.Check(); err != nil {
		w.WriteHeader(http.StatusServiceUnavailable)
		fmt.Fprintln(w, err)
		return
	}
	fmt.Fprintln(w, "ok")
}
