package election_test

import (
	"context"
	"errors"
	"strconv"
	"testing"

	"github.com/leasehold/leasehold/election"
	"github.com/leasehold/leasehold/fencing"
	"github.com/leasehold/leasehold/fencing/fencingtest"
)

// raceRounds is how often the tests below repeat a stop that races a
// replica's view: enough to catch a race lost once in 20 with 95%
// confidence (1 - (19/20)^60).
const raceRounds = 60

// A drained leader whose only other replica has just stopped keeps its
// term: it judges the drain on the view read along with its record's write,
// in which the stopped replica's record has gone, not on a view that may
// still hold it. The stop races the leader's view: repeated.
func TestDrainedLeaderAloneKeepsItsTerm(t *testing.T) {
	c := fencingtest.Single(t)
	for i := range raceRounds {
		t.Run(strconv.Itoa(i), func(t *testing.T) {
			f := newFleet(t, c)
			var dc, da election.Drain
			f.start("c", nil, election.WithDrain(&dc))
			f.waitLeader("c")
			f.start("a", nil, election.WithDrain(&da))
			f.waitQueued("a")
			f.stop("c") // its record went with its session
			da.Set(true)
			f.waitLeader("a")
			// a writes its record at each change of the drain, one after
			// the other: once the second is in etcd, the first's view was
			// judged.
			f.waitDrained("a", true)
			da.Set(false)
			f.waitDrained("a", false)
			f.stop("a")
			f.check("c", "a")
			f.mu.Lock()
			defer f.mu.Unlock()
			if causes := f.causes["a"]; len(causes) != 1 || !errors.Is(causes[0], context.Canceled) {
				t.Fatalf("a's works ended with %v, want once, when its Run was stopped", causes)
			}
		})
	}
}

// waitDrained waits until id's record says drained.
func (f *fleet) waitDrained(id string, drained bool) {
	f.t.Helper()
	fencingtest.WaitFor(f.t, wait, id+"'s record drained="+strconv.FormatBool(drained), func() bool {
		for _, c := range f.c.Queue(f.t, fencing.KindElection, fleetName).Candidates {
			if c.ID == id {
				return c.Drain == drained
			}
		}
		return false
	})
}
