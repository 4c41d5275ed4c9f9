// Package assign decides which replica of a group leads each name. Every
// replica that reads the same members computes the same answer, so the
// replicas agree without talking to each other; no replica gets more than
// ⌈N/R⌉ of N names among R replicas when they all list the same names; and a
// replica joining or leaving moves few names besides its own.
//
// It is rendezvous hashing with bounded loads: names are placed one by one,
// those the fewest replicas may lead first and otherwise in an order fixed by
// their hash, each on the replica that scores highest for it among those
// below the cap. A new replica takes the names it scores
// highest for; a leaving one releases only its own, plus the few that the
// changed cap pushes to their next choice.
//
// Ranks and weights (election.Priority, WithDrain, Weight) refine it: a name
// goes only to the highest-ranked of the members willing to lead it, so a
// lower tier leads a name only while no higher member lists it; and each
// member's cap is its weight's share of the names, among the members given
// any.
package assign

import (
	"cmp"
	"encoding/json"
	"fmt"
	"hash/fnv"
	"slices"

	"github.com/leasehold/leasehold/internal/rank"
)

// Member is one replica of a group, as its membership key says.
type Member struct {
	Key   string   `json:"-"`     // its membership key: unique per session
	ID    string   `json:"id"`    // the session's identity, for people
	Names []string `json:"names"` // the names it is willing to lead
	// Declined lists names it asks not to be given while another replica
	// is willing: its work for them kept failing.
	Declined []string `json:"declined,omitempty"`
	// Priority ranks it (election.Priority): a name goes only to the
	// highest-ranked members willing to lead it. Absent (older replicas,
	// or none set): the lowest, equal to [0].
	Priority []int64 `json:"priority,omitempty"`
	// Drain ranks it below every member not drained (election.WithDrain).
	Drain bool `json:"drain,omitempty"`
	// Weight is its share of names relative to the others' (election.
	// Weight); absent or 0: 1.
	Weight int `json:"weight,omitempty"`
}

// record is m's rank, as package prefer orders candidates.
func (m Member) record() rank.Record {
	p := m.Priority
	if len(p) == 0 {
		p = []int64{0}
	}
	return rank.Record{Priority: p, Drain: m.Drain}
}

func (m Member) weight() int { return max(m.Weight, 1) }

// Encode returns the value of m's membership key.
func Encode(m Member) string {
	b, _ := json.Marshal(m) // strings and slices of strings always marshal
	return string(b)
}

// Decode parses the value of the membership key key.
func Decode(key string, value []byte) (Member, error) {
	var m Member
	if err := json.Unmarshal(value, &m); err != nil {
		return Member{}, fmt.Errorf("membership key %q: %w", key, err)
	}
	m.Key = key
	return m, nil
}

// Cap is the most names a replica leads once n names are balanced over r
// replicas: ⌈n/r⌉.
func Cap(n, r int) int {
	if r == 0 {
		return 0
	}
	return (n + r - 1) / r
}

// Assign maps every name some member lists to the Key of the member that
// should lead it. A name goes only to members that list it; while one of
// those has not declined it, only to those that have not; and of those,
// only to the highest ranked. The result depends on the members' keys,
// names, declines, ranks and weights, not on their order.
func Assign(members []Member) map[string]string {
	names := candidates(members)
	order := make([]string, 0, len(names))
	for n := range names {
		order = append(order, n)
	}
	// The names fewest members may lead go first, while those members still
	// have room; then the rest, in the order of their hash.
	slices.SortFunc(order, func(a, b string) int {
		return cmp.Or(cmp.Compare(len(names[a]), len(names[b])), cmp.Compare(hash(a), hash(b)), cmp.Compare(a, b))
	})
	limit := limits(members, names)
	load := make([]int, len(members))
	out := make(map[string]string, len(names))
	for _, n := range order {
		i := pick(members, names[n], n, load, limit)
		load[i]++
		out[n] = members[i].Key
	}
	return out
}

// Caps returns, by member key, the most names each member leads once the
// group is balanced: its weight's share among the members given any names,
// 0 for the others. With equal weights and ranks, Cap(names, members).
func Caps(members []Member) map[string]int {
	limit := limits(members, candidates(members))
	out := make(map[string]int, len(members))
	for i, m := range members {
		out[m.Key] = limit[i]
	}
	return out
}

// candidates returns, for every name some member lists, the indexes of the
// members that may be given it.
func candidates(members []Member) map[string][]int {
	names := map[string][]int{} // name → indexes of the members willing to lead it
	for i, m := range members {
		declined := map[string]bool{}
		for _, n := range m.Declined {
			declined[n] = true
		}
		for _, n := range m.Names {
			if _, ok := names[n]; !ok {
				names[n] = nil
			}
			if !declined[n] {
				names[n] = append(names[n], i)
			}
		}
	}
	for _, m := range members { // nobody willing: everybody listing it may lead it
		for _, n := range m.Names {
			if len(names[n]) == 0 {
				names[n] = listing(members, n)
			}
		}
	}
	for n, c := range names { // of those, only the highest ranked
		names[n] = top(members, c)
	}
	return names
}

// top returns the candidates no other candidate ranks above.
func top(members []Member, candidates []int) []int {
	best := candidates[:0:0]
	for _, i := range candidates {
		if len(best) > 0 {
			c := rank.Compare(members[i].record(), members[best[0]].record())
			if c < 0 {
				continue
			}
			if c > 0 {
				best = best[:0]
			}
		}
		best = append(best, i)
	}
	return best
}

// limits returns each member's cap: its weight's share of the names, among
// the members that may be given any (a lower-ranked one, given none, takes
// no share), rounded up. Equal weights give Cap(len(names), members).
func limits(members []Member, names map[string][]int) []int {
	eligible := make([]bool, len(members))
	for _, c := range names {
		for _, i := range c {
			eligible[i] = true
		}
	}
	total := 0
	for i, m := range members {
		if eligible[i] {
			total += m.weight()
		}
	}
	limit := make([]int, len(members))
	for i, m := range members {
		if eligible[i] {
			limit[i] = (len(names)*m.weight() + total - 1) / total
		}
	}
	return limit
}

// listing returns the indexes of the members that list name.
func listing(members []Member, name string) []int {
	var out []int
	for i, m := range members {
		if slices.Contains(m.Names, name) {
			out = append(out, i)
		}
	}
	return out
}

// pick returns the candidate scoring highest for name among those below
// their limit, or, when all are at it (names some replicas do not list), the
// least loaded for its weight.
func pick(members []Member, candidates []int, name string, load []int, limit []int) int {
	best, bestScore := -1, uint64(0)
	least := -1
	for _, i := range candidates {
		s := score(name, members[i].Key)
		if load[i] < limit[i] && (best < 0 || s > bestScore) {
			best, bestScore = i, s
		}
		if least < 0 || lighter(members, load, i, least) || (!lighter(members, load, least, i) && s > score(name, members[least].Key)) {
			least = i
		}
	}
	if best >= 0 {
		return best
	}
	return least
}

// lighter reports whether member i carries less load for its weight than j.
func lighter(members []Member, load []int, i, j int) bool {
	return load[i]*members[j].weight() < load[j]*members[i].weight()
}

// score is how much member key wants name: the highest score wins.
func score(name, key string) uint64 { return mix(hash(name) ^ hash(key)*0x9e3779b97f4a7c15) }

func hash(s string) uint64 {
	h := fnv.New64a()
	h.Write([]byte(s))
	return mix(h.Sum64())
}

// mix is splitmix64's finaliser: FNV's low bits alone spread poorly.
func mix(x uint64) uint64 {
	x ^= x >> 30
	x *= 0xbf58476d1ce4e5b9
	x ^= x >> 27
	x *= 0x94d049bb133111eb
	return x ^ x>>31
}
