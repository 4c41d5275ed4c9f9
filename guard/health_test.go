package guard_test

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/leasehold/leasehold/fencing"
	"github.com/leasehold/leasehold/fencing/fencingtest"
	"github.com/leasehold/leasehold/guard"
)

func probe(h *guard.Health) int {
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest("GET", "/healthz", nil))
	return rec.Code
}

// A holder cut off from etcd stays healthy until its ValidUntil passes, then
// fails its probe for as long as its work goes on, and recovers when the work
// stops acting on the hold.
func TestHealthFlipsWhenHolderIsBlackholed(t *testing.T) {
	c := fencingtest.Single(t)
	cli, link := c.ProxiedClient(t)
	s := newSession(t, cli, fencing.WithTTL(2*time.Second))
	t.Cleanup(link.Restore)
	var h guard.Health
	if code := probe(&h); code != http.StatusOK {
		t.Fatalf("probe owning nothing: %d; want 200", code)
	}
	hold := lock(t, s, "health")
	done := h.Track(hold.Context(), hold)
	if err := h.Check(); err != nil {
		t.Fatalf("Check while holding: %v", err)
	}
	link.Blackhole()
	fencingtest.WaitFor(t, wait, "the probe to fail", func() bool { return probe(&h) == http.StatusServiceUnavailable })
	if err := h.Check(); !errors.Is(err, guard.ErrOverdue) {
		t.Fatalf("Check past ValidUntil: %v; want ErrOverdue", err)
	}
	if s.ValidUntil().After(time.Now()) {
		t.Fatal("probe failed before ValidUntil")
	}
	done()
	done()
	if code := probe(&h); code != http.StatusOK {
		t.Fatalf("probe after the work stopped: %d; want 200", code)
	}
}

// A hold whose key is deleted while its session lives on has ended too: the
// probe fails once Grace has passed since its context ended.
func TestHealthFlipsWhenKeyIsDeleted(t *testing.T) {
	c := fencingtest.Single(t)
	s := newSession(t, c.Client(t))
	hold := lock(t, s, "health-deleted")
	patient := guard.Health{Grace: time.Hour}
	var strict guard.Health
	doneStrict := strict.Track(hold.Context(), hold)
	donePatient := patient.Track(hold.Context(), hold)
	c.Delete(t, hold.Key())
	fencingtest.WaitFor(t, wait, "the probe to fail", func() bool { return errors.Is(strict.Check(), guard.ErrOverdue) })
	if err := patient.Check(); err != nil {
		t.Fatalf("Check within Grace: %v", err)
	}
	doneStrict()
	donePatient()
	if err := strict.Check(); err != nil {
		t.Fatalf("Check after done: %v", err)
	}
}

// Nil input tracks what it can and never panics.
func TestHealthTrackNilInput(t *testing.T) {
	c := fencingtest.Single(t)
	hold := lock(t, newSession(t, c.Client(t)), "health-nil")
	var h guard.Health
	h.Track(context.Background(), nil)()
	//lint:ignore SA1012 a nil context is the bad input under test
	done := h.Track(nil, hold)
	if err := h.Check(); err != nil {
		t.Fatalf("Check: %v", err)
	}
	done()
}

// reentrantOwner is a caller's Owner whose methods call back into the
// Health that tracks it.
type reentrantOwner struct {
	guard.Owner
	h *guard.Health
}

func (o reentrantOwner) Token() fencing.Token {
	o.h.Track(context.Background(), o.Owner)() // takes the Health's lock, twice
	return o.Owner.Token()
}

// Check asks a tracked Owner for its session and token with no lock of its
// own held: an Owner that calls back into the Health does not deadlock.
func TestHealthAsksOwnersOutsideItsLock(t *testing.T) {
	c := fencingtest.Single(t)
	hold := lock(t, newSession(t, c.Client(t)), "health-reentrant")
	var h guard.Health
	ended, cancel := context.WithCancel(context.Background())
	cancel() // the work's context ended at once: Check reports it overdue, asking Token
	h.Track(ended, reentrantOwner{Owner: hold, h: &h})
	overdue := make(chan struct{})
	go func() { // the work's end is recorded in the background: poll until Check sees it
		for !errors.Is(h.Check(), guard.ErrOverdue) {
			time.Sleep(time.Millisecond)
		}
		close(overdue)
	}()
	select {
	case <-overdue:
	case <-time.After(wait):
		t.Fatal("Check never reported the overdue owner: it deadlocked on an Owner that calls back into it")
	}
}
