package election_test

import (
	"context"
	"errors"
	"github.com/leasehold/leasehold/internal/testbed/etcdtest"
	"testing"

	"github.com/leasehold/leasehold/election"
	"github.com/leasehold/leasehold/fencing"
	"github.com/leasehold/leasehold/fencing/fencingtest"
	"github.com/leasehold/leasehold/guard"
)

// A term reports its win once and then exactly one end: a resignation, or a
// loss noticed by its watch and again by Proclaim and Resign.
func TestTermReportsEachEventOnce(t *testing.T) {
	c := fencingtest.Single(t)
	var rec etcdtest.Recorder
	s := newSession(t, c.Client(t), fencing.WithObserver(rec.Observer()))
	e := newElection(t, s, "observed")
	ctx := fencingtest.Context(t, wait)

	resigned := campaign(t, e, "a")
	if err := resigned.Resign(ctx); err != nil {
		t.Fatal(err)
	}
	resigned.Resign(ctx)

	lost := campaign(t, e, "b")
	watched := lost.Context()
	c.Delete(t, lost.Key())
	<-watched.Done()
	if err := lost.Proclaim(ctx, "c"); !errors.Is(err, election.ErrNotLeader) {
		t.Fatalf("Proclaim after the key was deleted: %v; want ErrNotLeader", err)
	}
	lost.Resign(ctx)

	rec.Snapshot(func(r *etcdtest.Recorder) {
		if len(r.Acquired) != 2 || len(r.Released) != 1 || len(r.Lost) != 1 || len(r.Rejected) != 2 {
			t.Fatalf("acquired %d, released %d, lost %d, rejected %d; want 2, 1, 1, 2 (Proclaim and Resign refused)",
				len(r.Acquired), len(r.Released), len(r.Lost), len(r.Rejected))
		}
		if k := r.Acquired[0].Kind; k != fencing.KindElection {
			t.Errorf("kind %q; want %q", k, fencing.KindElection)
		}
		if r.Released[0].Token != resigned.Token() || r.Lost[0].Token != lost.Token() {
			t.Errorf("released %v, lost %v; want %v, %v", r.Released[0].Token, r.Lost[0].Token, resigned.Token(), lost.Token())
		}
		if !errors.Is(r.Lost[0].Cause, fencing.ErrKeyDeleted) {
			t.Errorf("loss cause %v; want ErrKeyDeleted", r.Lost[0].Cause)
		}
		if !errors.Is(r.Rejected[0].Cause, guard.ErrNotOwner) || r.Rejected[0].Token != lost.Token() {
			t.Errorf("rejection %+v; want the lost term's ErrNotOwner", r.Rejected[0])
		}
	})
}

// A term Run loses while its session lives on (its key deleted) is reported
// lost once; the term Run then wins is reported released when Run resigns.
func TestRunReportsLostTerm(t *testing.T) {
	c := fencingtest.Single(t)
	var rec etcdtest.Recorder
	terms := make(chan *election.Term, 2)
	work := func(ctx context.Context, term *election.Term) error {
		terms <- term
		<-ctx.Done()
		return nil
	}
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() {
		done <- election.Run(ctx, c.Client(t), "run-observed", "v", work, election.WithSessionOptions(fencing.WithObserver(rec.Observer())))
	}()
	first := <-terms
	c.Delete(t, first.Key())
	second := <-terms
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	rec.Snapshot(func(r *etcdtest.Recorder) {
		if len(r.Acquired) != 2 || len(r.Lost) != 1 || len(r.Released) != 1 {
			t.Fatalf("acquired %d, lost %d, released %d; want 2, 1, 1", len(r.Acquired), len(r.Lost), len(r.Released))
		}
		if r.Lost[0].Token != first.Token() || r.Released[0].Token != second.Token() {
			t.Fatalf("lost %v, released %v; want %v, %v", r.Lost[0].Token, r.Released[0].Token, first.Token(), second.Token())
		}
		if !errors.Is(r.Lost[0].Cause, fencing.ErrKeyDeleted) {
			t.Fatalf("loss cause %v; want ErrKeyDeleted", r.Lost[0].Cause)
		}
	})
}
