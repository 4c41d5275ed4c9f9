package fencingtest

import (
	"cmp"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/leasehold/leasehold/fencing"
)

// The racing writers' size: each round, racers writers released together
// with tokens in a shuffled order, all above the rounds' before. A fence that
// checks in one request and writes in a second leaves the greatest token's
// value last with odds of about 1 in racers per round once the checks
// overlap, so rounds rounds make a pass by luck vanishingly rare, while a
// real fence writes them all within a second or two.
const (
	racers = 8
	rounds = 25
)

// racingWrite is one write of a round, as the history records it.
type racingWrite struct {
	rev      int64
	value    string
	inv, ret int64 // the history's clock when Write was called and when it returned
	err      error
}

// 5. Racing writers with interleaved tokens, round after round. After each
// round, from its history: every error is ErrStaleToken; the round's greatest
// token was admitted; no write was admitted that began after a write of a
// greater token had been admitted; no write was refused unless a greater
// token was written before it returned; and the mark is the greatest token
// admitted, the value its.
func racingWriters(s subject) {
	name := s.name("racing")
	var clock atomic.Int64 // one order for every call and return
	var gate atomic.Pointer[racingGate]
	if p, ok := s.f.(pausable); ok {
		p.SetPause(func() { gate.Load().pause(s) })
	}
	for r := range rounds {
		round := make([]racingWrite, racers)
		for i, k := range rand.Perm(racers) {
			round[i].rev = int64(100 + r*racers + k)
			round[i].value = fmt.Sprintf("round %d, writer %d", r, i)
		}
		g := &racingGate{open: make(chan struct{})}
		gate.Store(g)
		s.race(name, round, &clock, g)
		if !s.checkRound(name, r, round) {
			return // the first bad round says it all
		}
	}
}

// race runs the round's writes, each in a goroutine of its own, released
// together, and returns once all have returned.
func (s subject) race(name string, round []racingWrite, clock *atomic.Int64, g *racingGate) {
	var ready, done sync.WaitGroup
	start := make(chan struct{})
	for i := range round {
		ready.Add(1)
		done.Go(func() {
			w := &round[i]
			ready.Done()
			<-start
			w.inv = clock.Add(1)
			w.err = s.write(s.ctx, token(name, w.rev), w.value)
			w.ret = clock.Add(1)
			g.arrive()
		})
	}
	ready.Wait()
	close(start)
	done.Wait()
}

// racingGate holds the writers of a fence with SetPause between its requests
// until every writer of the round has paused or returned: then each check
// precedes every write. Before it opens, no writer has returned from a
// pause, so arrivals count each writer once.
type racingGate struct {
	mu      sync.Mutex
	arrived int
	open    chan struct{} // closed when arrived reaches racers
}

func (g *racingGate) arrive() {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.arrived++; g.arrived == racers {
		close(g.open)
	}
}

func (g *racingGate) pause(s subject) {
	g.arrive()
	select {
	case <-g.open:
	case <-time.After(Wait):
		s.t.Errorf("fencingtest: racing writers paused by SetPause were not all paused or returned after %v: does the fence hold a lock between its requests?", Wait)
	}
}

// checkRound checks round r from its history and the fence's state after
// it, and reports whether all was well.
func (s subject) checkRound(name string, r int, round []racingWrite) bool {
	s.t.Helper()
	var problems []string
	var top, best *racingWrite // the greatest token, the greatest admitted
	for i := range round {
		w := &round[i]
		if top == nil || w.rev > top.rev {
			top = w
		}
		switch {
		case w.err == nil:
			if best == nil || w.rev > best.rev {
				best = w
			}
		case !errors.Is(w.err, fencing.ErrStaleToken):
			problems = append(problems, fmt.Sprintf("revision %d: %v; want nil or an error wrapping fencing.ErrStaleToken", w.rev, w.err))
		}
	}
	if top.err != nil {
		problems = append(problems, fmt.Sprintf("revision %d, the round's greatest, was refused", top.rev))
	}
	problems = append(problems, orderProblems(round)...)
	if best != nil {
		got, ok, value, err := s.f.Read(s.ctx, name)
		if err != nil || !ok || got != token(name, best.rev) || value != best.value {
			problems = append(problems, fmt.Sprintf("Read after the round = mark %v (ok %v), value %q, %v; want mark %v, value %q",
				got, ok, value, err, token(name, best.rev), best.value))
		}
	}
	if len(problems) > 0 {
		s.t.Errorf("fencingtest: racing writers, round %d of %d:\n\t%s\nhistory (revision [called, returned]: outcome):\n\t%s",
			r+1, rounds, strings.Join(problems, "\n\t"), history(round))
	}
	return len(problems) == 0
}

// orderProblems finds admissions and refusals that no order of the writes
// explains: an admitted write that began after a greater token's admission
// had returned, and a refusal with no greater token admitted before it
// returned.
func orderProblems(round []racingWrite) []string {
	var problems []string
	for i := range round {
		a := &round[i]
		refusedRightly := false
		for j := range round {
			b := &round[j]
			if b.err != nil || b.rev <= a.rev {
				continue
			}
			if a.err == nil && b.ret < a.inv {
				problems = append(problems, fmt.Sprintf("revision %d was admitted, called after revision %d had been", a.rev, b.rev))
			}
			refusedRightly = refusedRightly || b.inv < a.ret
		}
		if errors.Is(a.err, fencing.ErrStaleToken) && !refusedRightly {
			problems = append(problems, fmt.Sprintf("revision %d was refused, with no greater token admitted before it returned", a.rev))
		}
	}
	return problems
}

// history lists a round's writes in the order they were called.
func history(round []racingWrite) string {
	ws := make([]*racingWrite, len(round))
	for i := range round {
		ws[i] = &round[i]
	}
	slices.SortFunc(ws, func(a, b *racingWrite) int { return cmp.Compare(a.inv, b.inv) })
	lines := make([]string, len(ws))
	for i, w := range ws {
		outcome := "admitted"
		if w.err != nil {
			outcome = w.err.Error()
		}
		lines[i] = fmt.Sprintf("%d [%d, %d]: %s", w.rev, w.inv, w.ret, outcome)
	}
	return strings.Join(lines, "\n\t")
}
