package revqueue

import (
	"context"
	"maps"
	"slices"
	"strings"
	"sync"
)

// MaxSweeps bounds the key ranges a session sweeps for keys written by
// requests whose replies were lost (revqueue's sweep), each with one watch
// and one goroutine. The first MaxSweeps queues with a retired slot get a
// range each: the session's own keys in that queue. After that, the two
// ranges (a new queue's among them) that share the longest prefix become
// one, swept as that prefix: every key under it is watched, and the
// session's own are picked out. A session that lost replies in any number
// of queues costs at most MaxSweeps watches once each range has armed.
const MaxSweeps = 16

// Sweeps is the set of key ranges a session sweeps: at most MaxSweeps
// prefixes, none of which starts another. Once a range covers a queue it
// stays covered until the session ends. The zero Sweeps is ready to use.
type Sweeps struct {
	mu   sync.Mutex
	stop map[string]context.CancelFunc // guarded by mu: each swept prefix, and the stop of its sweeper
}

// Cover makes sure mine (a queue's directory and the session's key stem:
// the prefix of every key of the session in that queue) is swept. For each
// prefix the set gains it calls start, with mu held; start calls armed once
// the new sweeper's watch is armed and its first read done, and returns
// the sweeper's stop. The sweepers of the ranges a new prefix replaces stop
// only then: until it arms (a refused watch never does), they go on.
func (s *Sweeps) Cover(mine string, start func(prefix string, armed func()) context.CancelFunc) {
	s.mu.Lock()
	defer s.mu.Unlock()
	ps := slices.Collect(maps.Keys(s.stop))
	add, drop := Plan(ps, mine, MaxSweeps)
	if s.stop == nil {
		s.stop = map[string]context.CancelFunc{}
	}
	for _, a := range add {
		var replaced []context.CancelFunc
		for _, p := range drop {
			if strings.HasPrefix(p, a) {
				replaced = append(replaced, s.stop[p])
			}
		}
		var once sync.Once
		stopReplaced := func() {
			once.Do(func() {
				for _, stop := range replaced {
					stop()
				}
				replaced = nil // nothing of theirs outlives them
			})
		}
		stop := start(a, stopReplaced)
		// Replaced itself before it armed, it hands on those it replaced.
		s.stop[a] = func() { stop(); stopReplaced() }
	}
	for _, p := range drop {
		delete(s.stop, p)
	}
}

// Plan returns how a set of at most limit prefixes, none starting another,
// comes to cover mine: the prefixes to add (none when one of ps already
// starts mine) and those of ps they start, which they replace. Below the
// limit it adds mine. At the limit it merges the two of ps and mine that
// share the longest prefix (the range widens least) into that prefix, and
// adds mine too if the merge left it uncovered. The set stays within the
// limit, none of its prefixes starts another, and it keeps covering
// everything it covered.
func Plan(ps []string, mine string, limit int) (add, drop []string) {
	for _, p := range ps {
		if strings.HasPrefix(mine, p) {
			return nil, nil
		}
	}
	add = []string{mine}
	if len(ps) >= max(limit, 1) {
		all := append(slices.Clone(ps), mine)
		merged, best := "", -1
		for i := range all {
			for _, b := range all[i+1:] {
				if n := common(all[i], b); n > best {
					merged, best = all[i][:n], n
				}
			}
		}
		switch {
		case strings.HasPrefix(mine, merged):
			add = []string{merged}
		case !strings.HasPrefix(merged, mine): // else mine covers the merge
			add = []string{merged, mine}
		}
	}
	for _, p := range ps {
		if slices.ContainsFunc(add, func(a string) bool { return strings.HasPrefix(p, a) }) {
			drop = append(drop, p)
		}
	}
	return add, drop
}

// common returns the length of the longest common prefix of a and b.
func common(a, b string) int {
	n := 0
	for n < len(a) && n < len(b) && a[n] == b[n] {
		n++
	}
	return n
}
