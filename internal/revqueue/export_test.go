package revqueue

import (
	"maps"
	"slices"
)

// Sweep and SweepPage are for the external tests.
var Sweep = sweep

const SweepPage = sweepPage

// Size returns the number of queues with finished slots kept, of slots in
// use, and of queues marked swept.
func (p *KeyPool) Size() (free, inUse, swept int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.free), len(p.inUse), len(p.swept)
}

// Ranges returns the prefixes swept.
func (s *Sweeps) Ranges() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Collect(maps.Keys(s.stop))
}
