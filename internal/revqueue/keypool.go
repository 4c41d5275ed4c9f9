package revqueue

import "sync"

// KeyPool hands out slot numbers per queue: a session's next Lock (or
// Campaign) on a name reuses the key of one that has finished. etcd keeps a
// deleted key in its index until a compaction, and every range over the
// name walks it: with a key per call, a name locked N times costs every
// later acquire O(N); with reuse, one entry per session and concurrent call.
// A queue none of whose slots was ever retired needs no memory for that:
// every slot it handed out is in use or known deleted, so it hands out the
// lowest slot not in use, however many queues the session has touched.
// Only a queue with a retired slot (a swept one) keeps its finished slots,
// and takes new ones above every slot handed out so far; once
// MaxSweptQueues queues are, every queue is. Its size is bounded whatever
// the session's age: the slots in use, plus at most MaxFreeQueues queues'
// finished slots (MaxFreePerQueue each), plus at most MaxSweptQueues marks.
// The zero KeyPool is ready to use.
type KeyPool struct {
	mu    sync.Mutex
	free  map[string][]uint64 // guarded by mu: finished slots, per queue prefix
	inUse map[slotOf]struct{} // guarded by mu: slots handed out and not yet back
	swept map[string]bool     // guarded by mu: queues with a retired slot
	all   bool                // guarded by mu: every queue counts as swept
	next  uint64              // guarded by mu: the highest slot handed out, in any queue
}

// slotOf is one slot of one queue; one map of them, not a map per queue,
// keeps a hold on a name of its own at one entry.
type slotOf struct {
	prefix string
	slot   uint64
}

const (
	// MaxFreeQueues bounds the queues with a retired slot whose finished
	// slots are kept for reuse. A queue dropped from the pool costs its next
	// acquire a new slot, one more deleted key until etcd compacts.
	MaxFreeQueues = 1024
	// MaxFreePerQueue bounds one queue's finished slots: as many as the
	// session's concurrent calls on one name.
	MaxFreePerQueue = 16
	// MaxSweptQueues bounds the queues marked as having a retired slot.
	// Past it every queue counts as one: a queue that finished a call since
	// has its finished slot to reuse, but its first acquire then costs a
	// new slot, one more deleted key until etcd compacts.
	MaxSweptQueues = 1024
)

// Get returns a slot for a new key under prefix that no live call of this
// session uses, and that no request of it can still write, and marks it in
// use until Put or Retire.
func (p *KeyPool) Get(prefix string) uint64 {
	p.mu.Lock()
	defer p.mu.Unlock()
	var slot uint64
	if !p.isSwept(prefix) {
		// No slot of this queue was retired, and so none kept: the lowest
		// slot not in use is known deleted.
		for slot = 1; p.used(prefix, slot); slot++ {
		}
		p.next = max(p.next, slot)
	} else if f := p.free[prefix]; len(f) > 0 {
		slot = f[len(f)-1]
		if len(f) == 1 {
			delete(p.free, prefix)
		} else {
			p.free[prefix] = f[:len(f)-1]
		}
	} else { // a retired slot of this queue may be any one up to next
		p.next++
		slot = p.next
	}
	if p.inUse == nil {
		p.inUse = map[slotOf]struct{}{}
	}
	p.inUse[slotOf{prefix, slot}] = struct{}{}
	return slot
}

// Put hands slot back for reuse. Only call it once the slot's key is known
// deleted and nothing of this process can still write it.
func (p *KeyPool) Put(prefix string, slot uint64) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.done(prefix, slot)
	if !p.isSwept(prefix) {
		return // Get finds it by itself
	}
	f, ok := p.free[prefix]
	switch {
	case len(f) >= MaxFreePerQueue:
		return
	case !ok && len(p.free) >= MaxFreeQueues:
		for q := range p.free { // make room: any queue will do
			delete(p.free, q)
			break
		}
	}
	if p.free == nil {
		p.free = map[string][]uint64{}
	}
	p.free[prefix] = append(f, slot)
}

// Retire ends the use of slot without handing it back: its key may yet be
// written again by a request whose reply was lost, so it is never reused.
func (p *KeyPool) Retire(prefix string, slot uint64) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.done(prefix, slot)
	switch {
	case p.isSwept(prefix):
	case len(p.swept) >= MaxSweptQueues:
		p.all = true
	default:
		if p.swept == nil {
			p.swept = map[string]bool{}
		}
		p.swept[prefix] = true
	}
}

// isSwept reports whether a slot of the queue under prefix may have been
// retired; mu is held.
func (p *KeyPool) isSwept(prefix string) bool { return p.all || p.swept[prefix] }

// done marks slot no longer in use; mu is held.
func (p *KeyPool) done(prefix string, slot uint64) {
	delete(p.inUse, slotOf{prefix, slot})
}

// InUse reports whether slot under prefix is handed out to a live call.
func (p *KeyPool) InUse(prefix string, slot uint64) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.used(prefix, slot)
}

// used is InUse with mu held.
func (p *KeyPool) used(prefix string, slot uint64) bool {
	_, ok := p.inUse[slotOf{prefix, slot}]
	return ok
}
