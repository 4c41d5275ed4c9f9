package ownwatch

import "time"

// Armed is closed once the watch is established on the server and the key
// was seen alive at or after the watch's start revision, so that a deletion
// from then on is seen within one watch round trip; or once the context is
// done, whichever comes first.
func (w *Watcher) Armed() <-chan struct{} { return w.armed }

// Len returns the number of ownerships with something registered: zero once
// every watch and tenure of the session has ended.
func (r *Registry) Len() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.m)
}

// KeepsCreates reports whether the Mux holds an array for creates not yet
// answered.
func (m *Mux) KeepsCreates() bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.creating != nil
}

// Watches returns the number of watches m serves.
func (m *Mux) Watches() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return len(m.ws)
}

// IdleStart returns the start of the idle watch of key, 0 if none.
func (m *Mux) IdleStart(key string) int64 {
	m.mu.Lock()
	defer m.mu.Unlock()
	if iw := m.idle[key]; iw != nil {
		return iw.start
	}
	return 0
}

// KeepIdle makes idle watches wait d for reuse until the test ends.
func KeepIdle(t interface{ Cleanup(func()) }, d time.Duration) {
	old := idleFor
	idleFor = d
	t.Cleanup(func() { idleFor = old })
}
