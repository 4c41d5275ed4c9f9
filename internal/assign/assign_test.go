package assign_test

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/leasehold/leasehold/internal/assign"
	"github.com/leasehold/leasehold/internal/rank"
	"github.com/leasehold/leasehold/internal/testbed/assigntest"
)

func group(r, n int) []assign.Member {
	names := make([]string, n)
	for i := range names {
		names[i] = fmt.Sprintf("job-%d", i)
	}
	ms := make([]assign.Member, r)
	for i := range ms {
		ms[i] = assign.Member{Key: fmt.Sprintf("leasehold/g#group/%016x-0", 0x694d7a1c+i*7919), Names: names}
	}
	return ms
}

func loads(a map[string]string) map[string]int {
	l := map[string]int{}
	for _, k := range a {
		l[k]++
	}
	return l
}

// checkBalanced fails unless every name of ms is assigned to a member listing
// it and, all members listing the same names, none leads more than the cap.
func checkBalanced(t *testing.T, ms []assign.Member, a map[string]string) {
	t.Helper()
	limit := assign.Cap(len(a), len(ms))
	for k, l := range loads(a) {
		if l > limit {
			t.Fatalf("%s leads %d names, cap %d", k, l, limit)
		}
	}
	for _, m := range ms {
		for _, n := range m.Names {
			if _, ok := a[n]; !ok {
				t.Fatalf("name %q unassigned", n)
			}
		}
	}
}

func TestAssignBalancedAndStable(t *testing.T) {
	for _, n := range []int{1, 10, 100, 1000} {
		for r := 1; r <= 5; r++ {
			ms := group(r, n)
			a := assign.Assign(ms)
			checkBalanced(t, ms, a)
			shuffled := slices.Clone(ms)
			rand.Shuffle(len(shuffled), func(i, j int) { shuffled[i], shuffled[j] = shuffled[j], shuffled[i] })
			if b := assign.Assign(shuffled); assigntest.Moved(a, b) != 0 {
				t.Fatalf("n=%d r=%d: the order of members changed %d assignments", n, r, assigntest.Moved(a, b))
			}
		}
	}
}

// TestAssignMovesFew checks that a join or a leave moves close to the fewest
// names it must: at most the optimum plus a quarter of the names' share of
// one replica, or three names for small groups (the cascade of a changed
// cap).
func TestAssignMovesFew(t *testing.T) {
	for _, n := range []int{10, 100, 1000} {
		for r := 1; r <= 4; r++ {
			ms := group(r+1, n)
			before, after := assign.Assign(ms[:r]), assign.Assign(ms)
			join, least := assigntest.Moved(before, after), assigntest.Least(before, ms)
			t.Logf("n=%d %d→%d replicas: join moves %d, least %d", n, r, r+1, join, least)
			if join > least+n/(r+1)/4+3 {
				t.Errorf("n=%d, join of replica %d moved %d names, least %d", n, r+1, join, least)
			}
			leave, least := assigntest.Moved(after, before), assigntest.Least(after, ms[:r])
			t.Logf("n=%d %d→%d replicas: leave moves %d, least %d", n, r+1, r, leave, least)
			if leave > least+n/(r+1)/4+3 {
				t.Errorf("n=%d, leave of replica %d moved %d names, least %d", n, r+1, leave, least)
			}
		}
	}
}

func TestAssignDeclined(t *testing.T) {
	ms := group(3, 30)
	a := assign.Assign(ms)
	owner := a["job-7"]
	for i := range ms {
		if ms[i].Key == owner {
			ms[i].Declined = []string{"job-7"}
		}
	}
	b := assign.Assign(ms)
	if b["job-7"] == owner {
		t.Fatalf("job-7 stays with %s, which declined it", owner)
	}
	checkBalanced(t, ms, b)
	half := group(2, 6) // one member declines half: balance still holds
	half[0].Declined = half[0].Names[:3]
	checkBalanced(t, half, assign.Assign(half))
	for i := range ms { // all decline: someone must still lead it
		ms[i].Declined = []string{"job-7"}
	}
	if c := assign.Assign(ms); c["job-7"] == "" {
		t.Fatal("job-7 unassigned once every member declined it")
	}
}

func TestAssignOnlyToListing(t *testing.T) {
	ms := group(3, 10)
	ms[0].Names = append(slices.Clone(ms[0].Names), "only-0")
	ms[2].Names = ms[2].Names[:5]
	a := assign.Assign(ms)
	if a["only-0"] != ms[0].Key {
		t.Fatalf("only-0 assigned to %q, not to the one member listing it", a["only-0"])
	}
	for n, k := range a {
		if k == ms[2].Key && !slices.Contains(ms[2].Names, n) {
			t.Fatalf("%q assigned to a member not listing it", n)
		}
	}
}

func TestDecodeRejectsGarbage(t *testing.T) {
	if _, err := assign.Decode("k", []byte("{")); err == nil {
		t.Fatal("Decode accepted a truncated value")
	}
	m := assign.Member{Key: "k", ID: "host/1", Names: []string{"a", "b"}, Declined: []string{"b"}}
	got, err := assign.Decode("k", []byte(assign.Encode(m)))
	if err != nil || !slices.Equal(got.Names, m.Names) || got.ID != m.ID || !slices.Equal(got.Declined, m.Declined) {
		t.Fatalf("assign.Decode(assign.Encode(m)) = %+v, %v", got, err)
	}
}

// FuzzAssign checks, for arbitrary groups, that every listed name is
// assigned to a member listing it and that the answer ignores member order.
func FuzzAssign(f *testing.F) {
	f.Add(uint64(1), uint8(3), uint8(10))
	f.Add(uint64(42), uint8(1), uint8(0))
	f.Fuzz(func(t *testing.T, seed uint64, r, n uint8) {
		rng := rand.New(rand.NewPCG(seed, seed))
		ms := make([]assign.Member, int(r%8))
		for i := range ms {
			ms[i].Key = fmt.Sprint("m", i)
			for j := range int(n % 64) {
				if rng.IntN(4) > 0 {
					ms[i].Names = append(ms[i].Names, fmt.Sprint("n", j))
				}
				if rng.IntN(8) == 0 {
					ms[i].Declined = append(ms[i].Declined, fmt.Sprint("n", j))
				}
			}
		}
		a := assign.Assign(ms)
		for _, m := range ms {
			for _, name := range m.Names {
				k, ok := a[name]
				if !ok {
					t.Fatalf("%q unassigned", name)
				}
				if i := slices.IndexFunc(ms, func(m assign.Member) bool { return m.Key == k }); i < 0 || !slices.Contains(ms[i].Names, name) {
					t.Fatalf("%q assigned to %q, which does not list it", name, k)
				}
			}
		}
		rev := slices.Clone(ms)
		slices.Reverse(rev)
		if assigntest.Moved(a, assign.Assign(rev)) != 0 {
			t.Fatal("member order changed the assignment")
		}
	})
}

// A lower tier is given a name only when no higher member lists it; within
// the top tier, names are balanced.
func TestAssignTiers(t *testing.T) {
	ms := group(4, 40)
	ms[3].Priority = []int64{0} // the canary: the same as no priority
	for i := range 3 {
		ms[i].Priority = []int64{1, 2}
	}
	l := loads(assign.Assign(ms))
	if l[ms[3].Key] != 0 {
		t.Fatalf("the canary leads %d names while higher members list them", l[ms[3].Key])
	}
	for i := range 3 {
		if l[ms[i].Key] > assign.Cap(40, 3) {
			t.Fatalf("member %d leads %d, cap %d among the top tier", i, l[ms[i].Key], assign.Cap(40, 3))
		}
	}
	ms[0].Names = append(ms[0].Names, "only-0")
	ms[0].Drain = true // drained: ranks last, but still leads what only it lists
	a := assign.Assign(ms)
	if a["only-0"] != ms[0].Key || loads(a)[ms[0].Key] != 1 {
		t.Fatalf("drained member 0 leads %d names (only-0 to %s)", loads(a)[ms[0].Key], a["only-0"])
	}
}

// Weights share the names out in proportion.
func TestAssignWeights(t *testing.T) {
	ms := group(3, 120)
	ms[0].Weight = 2 // 60, 30, 30
	l := loads(assign.Assign(ms))
	if l[ms[0].Key] != 60 || l[ms[1].Key] != 30 || l[ms[2].Key] != 30 {
		t.Fatalf("loads %d %d %d, want 60 30 30", l[ms[0].Key], l[ms[1].Key], l[ms[2].Key])
	}
}

// Whatever the members, their ranks, weights and declines, every name some
// member lists is assigned to a member that lists it, of the highest rank
// among those willing to lead it.
func FuzzAssignEveryNameLed(f *testing.F) {
	f.Add(uint64(1), uint8(3), uint8(10))
	f.Fuzz(func(t *testing.T, seed uint64, r, n uint8) {
		rng := rand.New(rand.NewPCG(seed, seed>>1))
		ms := make([]assign.Member, int(r%6)+1)
		for i := range ms {
			ms[i].Key = fmt.Sprintf("k%d", i)
			ms[i].Priority = []int64{int64(rng.IntN(3))}
			ms[i].Drain = rng.IntN(4) == 0
			ms[i].Weight = rng.IntN(4)
			for j := range int(n%20) + 1 {
				if rng.IntN(3) > 0 {
					ms[i].Names = append(ms[i].Names, fmt.Sprint("n", j))
				}
				if rng.IntN(5) == 0 {
					ms[i].Declined = append(ms[i].Declined, fmt.Sprint("n", j))
				}
			}
		}
		a := assign.Assign(ms)
		byKey := map[string]assign.Member{}
		for _, m := range ms {
			byKey[m.Key] = m
		}
		for _, m := range ms {
			for _, name := range m.Names {
				got, ok := byKey[a[name]]
				if !ok || !slices.Contains(got.Names, name) {
					t.Fatalf("%s assigned to %q, which does not list it", name, a[name])
				}
				if !slices.Contains(got.Declined, name) && !slices.Contains(m.Declined, name) && outranks(m, got) {
					t.Fatalf("%s went to %+v although %+v, also willing, ranks above", name, got, m)
				}
			}
		}
	})
}

// outranks reports whether a ranks above b, as a name's candidates are
// ranked: drained last, then by priority, none being [0].
func outranks(a, b assign.Member) bool {
	rec := func(m assign.Member) rank.Record {
		if len(m.Priority) == 0 {
			m.Priority = []int64{0}
		}
		return rank.Record{Priority: m.Priority, Drain: m.Drain}
	}
	return rank.Compare(rec(a), rec(b)) > 0
}

// upgrade simulates a rolling upgrade of the members of ms, each replaced by
// a new one (surge: the new one joins, then the old one leaves), the new
// ones ranked by newRank, and returns how often each name moved.
func upgrade(ms []assign.Member, newRank []int64) map[string]int {
	moves := map[string]int{}
	live := slices.Clone(ms)
	prev := assign.Assign(live)
	step := func() {
		next := assign.Assign(live)
		for n, k := range next {
			if prev[n] != k {
				moves[n]++
			}
		}
		prev = next
	}
	for i, old := range ms {
		nu := old
		nu.Key = fmt.Sprintf("new-%d", i)
		nu.Priority = newRank
		live = append(live, nu)
		step()
		live = slices.DeleteFunc(live, func(m assign.Member) bool { return m.Key == old.Key })
		step()
	}
	return moves
}

// TestAssignRollingUpgradeMoves measures the moves of a rolling upgrade of
// three replicas ranked by version: the first new replica takes every name
// (no lower tier leads a name a higher member lists), and each later one
// its share from the new ones, N(1 + 1/2 + 1/3) moves in all and at most
// one per new replica for a name. With equal ranks names move at each join
// and each leave: fewer in all, but up to five times for one name. No rule
// moves every name once: the first new replica must take them all, and
// balance then moves some of them again.
func TestAssignRollingUpgradeMoves(t *testing.T) {
	const n = 300
	ms := group(3, n)
	for i := range ms {
		ms[i].Priority = []int64{1, 4}
	}
	total := func(m map[string]int) (sum, most int) {
		for _, v := range m {
			sum, most = sum+v, max(most, v)
		}
		return sum, most
	}
	ranked, rankedMost := total(upgrade(ms, []int64{1, 5}))
	equal, equalMost := total(upgrade(ms, []int64{1, 4}))
	t.Logf("%d names, 3 replicas: ranked by version %d moves (a name at most %d), equal ranks %d (at most %d)",
		n, ranked, rankedMost, equal, equalMost)
	if ranked > n*11/6+n/20 || rankedMost > 3 {
		t.Fatalf("ranked upgrade: %d moves (at most %d for a name), want about %d and at most 3", ranked, rankedMost, n*11/6)
	}
}
