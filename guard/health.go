package guard

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"sync"
	"sync/atomic"
	"time"
)

// ErrOverdue is returned by Health.Check while a process still acts on an
// ownership that has ended (its session's ValidUntil passed, or its context
// ended): its work ignored its context, and may write after a successor
// took over.
var ErrOverdue = errors.New("acting on an ownership that has ended")

// Health tells a liveness probe whether this process acts only on
// ownerships it can still prove. Between Track and its done, the process
// acts on an ownership (a leader runs its work); once the ownership has
// ended, by its session's ValidUntil or by its context, and done has not been
// called within Grace, Check fails. Unlike a check on the time since the last
// renewal, it guesses nothing: ValidUntil already is the conservative
// deadline.
//
// Owning nothing is healthy. The zero Health is ready to use and safe for
// concurrent use.
type Health struct {
	// Grace is how long work may take to return after its ownership ended
	// before Check fails. Zero fails at once; a probe that allows a few
	// failures in a row (Kubernetes allows three) absorbs the moment
	// between a loss and a well-behaved work's return.
	Grace time.Duration

	mu     sync.Mutex
	owners map[*tracked]struct{} // guarded by mu: what the process acts on now
}

type tracked struct {
	o     Owner
	ended atomic.Int64 // UnixNano when the context ended; 0 before
}

// Track records that the process acts on o, under ctx (the context its work
// runs with: Hold.Context, Term.Context or Watch's), from now until done is
// called. Calling done more than once is harmless. A nil o tracks nothing; a
// nil ctx leaves ValidUntil alone to end the ownership.
func (h *Health) Track(ctx context.Context, o Owner) (done func()) {
	if o == nil {
		return func() {}
	}
	t := &tracked{o: o}
	stop := func() bool { return false }
	if ctx != nil {
		stop = context.AfterFunc(ctx, func() { t.ended.Store(time.Now().UnixNano()) })
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.owners == nil {
		h.owners = make(map[*tracked]struct{})
	}
	h.owners[t] = struct{}{}
	return func() {
		stop()
		h.mu.Lock()
		defer h.mu.Unlock()
		delete(h.owners, t)
	}
}

// tracked returns what h tracks now.
func (h *Health) tracked() []*tracked {
	h.mu.Lock()
	defer h.mu.Unlock()
	ts := make([]*tracked, 0, len(h.owners))
	for t := range h.owners {
		ts = append(ts, t)
	}
	return ts
}

// Check returns nil unless the process still acts on an ownership that ended
// more than Grace ago: then an error wrapping ErrOverdue that names its token
// and how long ago it ended.
func (h *Health) Check() error {
	now := time.Now()
	for _, t := range h.tracked() { // an Owner may be the caller's code: asked with no lock held
		end := t.o.Session().ValidUntil()
		if e := t.ended.Load(); e != 0 && e < end.UnixNano() {
			end = time.Unix(0, e)
		}
		if late := now.Sub(end); late >= h.Grace {
			return fmt.Errorf("guard: health: %w: %v, ended %v ago", ErrOverdue, t.o.Token(), late.Round(time.Millisecond))
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
