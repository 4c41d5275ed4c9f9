package sessionlink

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
// range each: the session's own keys in that queue. A later one shares a
// range with the queue whose range has the longest prefix in common with
// its own, and the two are swept as that common prefix: every key under it
// is watched, and the session's own are picked out. A session that lost
// replies in any number of queues costs at most MaxSweeps watches.
const MaxSweeps = 16

// Sweeps is the set of key ranges a session sweeps: at most MaxSweeps
// prefixes, none of which starts another. Once a range covers a queue it
// stays covered until the session ends. The zero Sweeps is ready to use.
type Sweeps struct {
	mu   sync.Mutex
	stop map[string]context.CancelFunc // guarded by mu: each swept prefix, and the stop of its sweeper
}

// Cover makes sure mine (a queue's directory and the session's key stem:
// the prefix of every key of the session in that queue) is swept. When no
// range covers it yet, it calls start, with mu held, for the prefix to
// sweep from now on, and stops the sweepers of the ranges that prefix
// replaces. start returns the new sweeper's stop.
func (s *Sweeps) Cover(mine string, start func(prefix string) context.CancelFunc) {
	s.mu.Lock()
	defer s.mu.Unlock()
	ps := make([]string, 0, len(s.stop))
	for p := range s.stop {
		ps = append(ps, p)
	}
	add, drop, covered := Plan(ps, mine, MaxSweeps)
	if covered {
		return
	}
	if s.stop == nil {
		s.stop = map[string]context.CancelFunc{}
	}
	// The new sweeper reads every key already under its prefix once its
	// watch is armed: stopping those it replaces first loses nothing.
	for _, p := range drop {
		s.stop[p]()
		delete(s.stop, p)
	}
	s.stop[add] = start(add)
}

// Ranges returns the prefixes swept.
func (s *Sweeps) Ranges() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Collect(maps.Keys(s.stop))
}

// Plan returns how a set of at most limit prefixes, none starting another,
// comes to cover mine: covered when one of ps already starts it, else add
// is the prefix to add and drop the prefixes add starts, which it replaces. Below
// the limit add is mine itself; at the limit it is the longest prefix mine
// shares with one of ps, which replaces that one (and any other it
// starts). The set stays within the limit and keeps covering everything it
// covered.
func Plan(ps []string, mine string, limit int) (add string, drop []string, covered bool) {
	best := -1
	for i, p := range ps {
		if strings.HasPrefix(mine, p) {
			return "", nil, true
		}
		if best < 0 || common(p, mine) > common(ps[best], mine) {
			best = i
		}
	}
	add = mine
	if len(ps) >= max(limit, 1) {
		add = mine[:common(ps[best], mine)]
	}
	for _, p := range ps {
		if strings.HasPrefix(p, add) {
			drop = append(drop, p)
		}
	}
	return add, drop, false
}

// common returns the length of the longest common prefix of a and b.
func common(a, b string) int {
	n := 0
	for n < len(a) && n < len(b) && a[n] == b[n] {
		n++
	}
	return n
}
