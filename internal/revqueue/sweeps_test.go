package revqueue_test

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"
	"testing"

	"github.com/leasehold/leasehold/internal/revqueue"
)

// Below the limit each queue's range is its own; at it, the two ranges that
// share the longest prefix merge, the new queue's or two others.
func TestPlan(t *testing.T) {
	for _, tc := range []struct {
		ps        []string
		mine      string
		add, drop []string
	}{
		{nil, "r/a#lock/s-", []string{"r/a#lock/s-"}, nil},
		{[]string{"r/a#lock/s-"}, "r/a#lock/s-", nil, nil},
		{[]string{"r/jobs/"}, "r/jobs/7#lock/s-", nil, nil},
		{[]string{"r/a#lock/s-"}, "r/b#lock/s-", []string{"r/b#lock/s-"}, nil},
		{[]string{"r/jobs/1#lock/s-", "r/x#lock/s-"}, "r/jobs/2#lock/s-", []string{"r/jobs/"}, []string{"r/jobs/1#lock/s-"}},
		// Two ranges under teamA/ merge, not teamB's with one of them into
		// r/team: a grant of teamA/ and one of teamB/ both still cover theirs.
		{[]string{"r/teamA/1#lock/s-", "r/teamA/2#lock/s-"}, "r/teamB/1#lock/s-",
			[]string{"r/teamA/", "r/teamB/1#lock/s-"}, []string{"r/teamA/1#lock/s-", "r/teamA/2#lock/s-"}},
	} {
		add, drop := revqueue.Plan(tc.ps, tc.mine, 2)
		if !slices.Equal(add, tc.add) || !slices.Equal(drop, tc.drop) {
			t.Errorf("Plan(%q, %q) = %q, %q; want %q, %q", tc.ps, tc.mine, add, drop, tc.add, tc.drop)
		}
	}
}

// However many queues are covered, in whatever order, the set stays within
// MaxSweeps prefixes, none starting another, that cover every one of them,
// and each replaced sweeper is stopped.
func TestSweepsBounded(t *testing.T) {
	var s revqueue.Sweeps
	running := map[string]bool{}
	var covered []string
	for i := range 2000 {
		mine := fmt.Sprintf("leasehold/tenant%d/job%d#lock/0000000000000001-", i%37, i)
		s.Cover(mine, func(prefix string, armed func()) context.CancelFunc {
			armed() // the sweepers it replaces stop
			running[prefix] = true
			return func() { delete(running, prefix) }
		})
		covered = append(covered, mine)
	}
	checkSweeps(t, running, covered, revqueue.MaxSweeps)
	if got := s.Ranges(); len(got) != len(running) {
		t.Fatalf("ranges %q, %d sweepers running", got, len(running))
	}
}

func FuzzPlan(f *testing.F) {
	f.Add("r/a#lock/s-\nr/b#lock/s-\nr/ab#lock/s-\nq#x/s-", uint8(2))
	f.Add("r/teamA/1\nr/teamA/2\nr/teamB/1\nr/teamB/2\nr/teamA/3", uint8(2))
	f.Fuzz(func(t *testing.T, mines string, limit uint8) {
		var ps, covered []string
		for _, mine := range strings.Split(mines, "\n") {
			add, drop := revqueue.Plan(ps, mine, int(limit))
			covered = append(covered, mine)
			ps = slices.DeleteFunc(ps, func(p string) bool { return slices.Contains(drop, p) })
			ps = append(ps, add...)
		}
		running := map[string]bool{}
		for _, p := range ps {
			running[p] = true
		}
		checkSweeps(t, running, covered, max(int(limit), 1))
	})
}

func checkSweeps(t *testing.T, running map[string]bool, covered []string, limit int) {
	t.Helper()
	if len(running) > limit {
		t.Fatalf("%d ranges swept, more than %d", len(running), limit)
	}
	for p := range running {
		for q := range running {
			if p != q && strings.HasPrefix(q, p) {
				t.Fatalf("range %q starts range %q", p, q)
			}
		}
	}
	for _, mine := range covered {
		if !slices.ContainsFunc(slices.Collect(maps.Keys(running)), func(p string) bool { return strings.HasPrefix(mine, p) }) {
			t.Fatalf("%q no longer covered by %v", mine, running)
		}
	}
}

// The sweepers a new range replaces run until it arms; a range replaced
// before it armed hands those it replaced on to the one replacing it, so
// that arming stops them all.
func TestReplacedSweepersStopOnceArmed(t *testing.T) {
	var s revqueue.Sweeps
	running := map[string]bool{}
	arm := map[string]func(){}
	cover := func(mine string) {
		s.Cover(mine, func(prefix string, armed func()) context.CancelFunc {
			running[prefix], arm[prefix] = true, armed
			return func() { delete(running, prefix) }
		})
	}
	cover("m/aa0/")
	for i := range revqueue.MaxSweeps - 1 {
		cover(fmt.Sprintf("m/%c0/", 'b'+i))
	}
	cover("m/aa1/") // merges with m/aa0/ as m/aa
	if !running["m/aa"] || !running["m/aa0/"] {
		t.Fatalf("running %v: want m/aa started and m/aa0/ still on until it arms", running)
	}
	cover("m/ab0/") // merges with m/aa, not yet armed, as m/a
	if !running["m/a"] || !running["m/aa"] || !running["m/aa0/"] {
		t.Fatalf("running %v: want m/a started, m/aa and m/aa0/ on until it arms", running)
	}
	arm["m/a"]()
	if running["m/aa"] || running["m/aa0/"] {
		t.Fatalf("running %v: m/a armed, m/aa or m/aa0/ still on", running)
	}
	checkSweeps(t, running, []string{"m/aa0/", "m/aa1/", "m/ab0/"}, revqueue.MaxSweeps)
}
