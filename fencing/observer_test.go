package fencing_test

import (
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/leasehold/leasehold/fencing"
	"github.com/leasehold/leasehold/fencing/fencingtest"
	"github.com/leasehold/leasehold/internal/ownwatch"
	"github.com/leasehold/leasehold/internal/testbed/etcdtest"
)

func waitCounts(t *testing.T, r *etcdtest.Recorder, what string, ok func(c [5]int) bool) {
	t.Helper()
	fencingtest.WaitFor(t, wait, what, func() bool { return ok(r.Counts()) })
}

// Each hold reports its acquisition once and then exactly one end, however
// many paths learn of it (the session's end, the hold's watch, Unlock).
func TestObserverSeesEachEventOnce(t *testing.T) {
	c := fencingtest.Single(t)
	var rec etcdtest.Recorder
	s := newSession(t, c.Client(t), fencing.WithTTL(2*time.Second), fencing.WithObserver(rec.Observer()))
	ctx := fencingtest.Context(t, wait)

	released := lock(t, newMutex(t, s, "released"))
	if err := released.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	released.Unlock(ctx)

	deleted := lock(t, newMutex(t, s, "deleted"))
	watched := deleted.Context()
	c.Delete(t, deleted.Key())
	<-watched.Done()
	if err := deleted.Unlock(ctx); !errors.Is(err, fencing.ErrNotHeld) {
		t.Fatalf("Unlock of a deleted hold: %v; want ErrNotHeld", err)
	}

	armed := lock(t, newMutex(t, s, "armed"))
	armed.Context()
	plain := lock(t, newMutex(t, s, "plain"))
	waitCounts(t, &rec, "a renewal", func(c [5]int) bool { return c[3] > 0 })
	c.Revoke(t, s.Lease())
	<-s.Done()
	waitCounts(t, &rec, "three losses", func(c [5]int) bool { return c[2] == 3 })
	armed.Unlock(ctx)
	plain.Unlock(ctx)
	s.Close(ctx)

	// Closing a session gives up its holds: releases, not losses.
	closing := newSession(t, c.Client(t), fencing.WithObserver(rec.Observer()))
	open := lock(t, newMutex(t, closing, "open-at-close"))
	closing.Close(ctx)
	open.Unlock(ctx)
	waitCounts(t, &rec, "the release at Close", func(c [5]int) bool { return c[1] == 2 })

	rec.Snapshot(func(r *etcdtest.Recorder) {
		if len(r.Acquired) != 5 || len(r.Released) != 2 || len(r.Lost) != 3 {
			t.Fatalf("acquired %d, released %d, lost %d; want 5, 2, 3", len(r.Acquired), len(r.Released), len(r.Lost))
		}
		for i, e := range r.Acquired[:4] {
			if e.Kind != fencing.KindLock || e.Lease != s.Lease() || e.Token.Revision <= 0 {
				t.Errorf("acquired[%d] = %+v", i, e)
			}
		}
		if r.Released[0].Token != released.Token() || r.Released[1].Token != open.Token() {
			t.Errorf("released %v, %v; want %v, %v", r.Released[0].Token, r.Released[1].Token, released.Token(), open.Token())
		}
		causes := map[string]error{}
		for _, e := range r.Lost {
			causes[e.Token.Name] = e.Cause
			if e.Early > s.TTL() {
				t.Errorf("loss of %v noticed %v before ValidUntil, more than a TTL", e.Token, e.Early)
			}
		}
		if !errors.Is(causes["deleted"], ownwatch.ErrKeyDeleted) {
			t.Errorf("deleted hold lost with %v; want the key-gone cause", causes["deleted"])
		}
		for _, n := range []string{"armed", "plain"} {
			if !errors.Is(causes[n], fencing.ErrLeaseExpired) {
				t.Errorf("%s hold lost with %v; want ErrLeaseExpired", n, causes[n])
			}
		}
		for _, e := range r.Renewed {
			if e.Err == nil && (e.Left <= 0 || e.RoundTrip < 0) {
				t.Errorf("successful renewal with %v left, round trip %v", e.Left, e.RoundTrip)
			}
		}
	})
}

// Transitions are logged at debug and losses at warn, each with the name,
// token and lease.
func TestLoggerRecordsTransitions(t *testing.T) {
	c := fencingtest.Single(t)
	var buf etcdtest.Buffer
	log := slog.New(slog.NewTextHandler(&buf, &slog.HandlerOptions{Level: slog.LevelDebug}))
	s := newSession(t, c.Client(t), fencing.WithLogger(log))
	h := lock(t, newMutex(t, s, "logged"))
	h.Unlock(fencingtest.Context(t, wait))
	lost := lock(t, newMutex(t, s, "logged"))
	c.Revoke(t, s.Lease())
	<-s.Done()
	// The session logs its own loss after Done closes, and the hold's from a
	// hook on the session's end: either may come first.
	fencingtest.WaitFor(t, wait, "both losses to be logged", func() bool {
		return strings.Contains(buf.String(), "msg=lost") && strings.Contains(buf.String(), "msg=\"session lost\"")
	})
	lease := fmt.Sprintf("lease=%x", int64(s.Lease()))
	for _, want := range []string{
		"level=DEBUG msg=acquired", "level=DEBUG msg=released", "level=WARN msg=lost", "level=WARN msg=\"session lost\"",
		"name=logged", "token=" + h.Token().String(), "token=" + lost.Token().String(), lease,
	} {
		if !strings.Contains(buf.String(), want) {
			t.Errorf("log lacks %q:\n%s", want, buf.String())
		}
	}
}

// Closing the client ends the session on purpose: its holds are reported
// released, not lost.
func TestObserverClosedClientReleases(t *testing.T) {
	c := fencingtest.Single(t)
	var rec etcdtest.Recorder
	cli := fencingtest.NewClient(t, c.Endpoints())
	s := newSession(t, cli, fencing.WithObserver(rec.Observer()))
	lock(t, newMutex(t, s, "client-closed"))
	cli.Close()
	waitCounts(t, &rec, "the release", func(c [5]int) bool { return c[1] == 1 })
	if n := rec.Counts()[2]; n != 0 {
		t.Fatalf("%d losses reported for a closed client", n)
	}
}
