package sessionlink

import "sync"

// KeyPool hands out slot numbers per queue: a session's next Lock (or
// Campaign) on a name reuses the key of one that has finished. etcd keeps a
// deleted key in its index until a compaction, and every range over the
// name walks it: with a key per call, a name locked N times costs every
// later acquire O(N); with reuse, one entry per session and concurrent call.
// The zero KeyPool is ready to use.
type KeyPool struct {
	mu   sync.Mutex
	free map[string][]uint64 // guarded by mu: finished slots, per queue prefix
	next uint64              // guarded by mu: the next slot never handed out
}

// Get returns a slot for a new key under prefix that no live call of this
// session uses.
func (p *KeyPool) Get(prefix string) uint64 {
	p.mu.Lock()
	defer p.mu.Unlock()
	if f := p.free[prefix]; len(f) > 0 {
		slot := f[len(f)-1]
		p.free[prefix] = f[:len(f)-1]
		return slot
	}
	p.next++
	return p.next
}

// Put hands slot back for reuse. Only call it once the slot's key is known
// deleted and nothing of this process can still write it.
func (p *KeyPool) Put(prefix string, slot uint64) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.free == nil {
		p.free = map[string][]uint64{}
	}
	p.free[prefix] = append(p.free[prefix], slot)
}
