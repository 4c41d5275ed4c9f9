// Package assigntest measures assignments, for the tests and benchmarks of
// RunGroup: how many names moved, and the fewest that had to.
package assigntest

import "github.com/leasehold/leasehold/internal/assign"

// Moved counts the names whose assignee differs between before and after,
// among the names both assign.
func Moved(before, after map[string]string) int {
	n := 0
	for name, to := range after {
		if from, ok := before[name]; ok && from != to {
			n++
		}
	}
	return n
}

// Least is the fewest names that must move from before for no member of
// after to lead more than its cap: the names of members gone, plus each
// remaining member's excess over the cap.
func Least(before map[string]string, after []assign.Member) int {
	present := map[string]bool{}
	for _, m := range after {
		present[m.Key] = true
	}
	load := map[string]int{}
	n := 0
	for _, key := range before {
		if !present[key] {
			n++
			continue
		}
		load[key]++
	}
	limit := assign.Cap(len(before), len(after))
	for _, l := range load {
		n += max(0, l-limit)
	}
	return n
}
