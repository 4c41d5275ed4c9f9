package election_test

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"testing"

	"github.com/leasehold/leasehold/election"
	"github.com/leasehold/leasehold/fencing"
	"github.com/leasehold/leasehold/fencing/fencingtest"
)

// waitLoads waits until every name runs, on the replicas of want only, each
// leading exactly its count.
func (w *world) waitLoads(want map[string]int) {
	w.t.Helper()
	fencingtest.WaitFor(w.t, wait, fmt.Sprintf("loads %v", want), func() bool {
		l, idle := w.loads(w.names)
		return idle == 0 && maps.Equal(l, want)
	})
	w.checkNoOverlap()
}

// Names go to the highest-ranked replicas, shared by weight; the canary
// (lower priority) leads none while they run and every name once they are
// gone; a drained replica's names move to the others, and it takes its share
// again once undrained.
func TestGroupPrioritiesAndWeights(t *testing.T) {
	c := fencingtest.Single(t)
	w := newWorld(t, c, 30)
	canary := w.start("canary", nil, nil, election.Priority(1))
	w.waitLoads(map[string]int{"canary": 30})
	var drain election.Drain
	a := w.start("a", nil, nil, election.Priority(2), election.Weight(2), election.WithDrain(&drain))
	b := w.start("b", nil, nil, election.Priority(2))
	w.waitLoads(map[string]int{"a": 20, "b": 10})
	drain.Set(true)
	w.waitLoads(map[string]int{"b": 30})
	drain.Set(false)
	w.waitLoads(map[string]int{"a": 20, "b": 10})
	a.stop(t)
	b.stop(t)
	w.waitLoads(map[string]int{"canary": 30})
	canary.stop(t)
}

func TestGroupRejectsBadWeight(t *testing.T) {
	c := fencingtest.Single(t)
	for _, wt := range []int{0, -1} {
		err := election.RunGroup(fencingtest.Context(t, wait), c.Client(t), "g", []string{"n"}, func(context.Context, *election.Term) error { return nil }, election.Weight(wt))
		if !errors.Is(err, fencing.ErrInvalidArgument) {
			t.Errorf("Weight(%d): %v, want ErrInvalidArgument", wt, err)
		}
	}
	if q := c.Queue(t, fencing.KindElection, "n"); len(q.Entries) > 0 {
		t.Fatalf("keys written: %+v", q)
	}
}
