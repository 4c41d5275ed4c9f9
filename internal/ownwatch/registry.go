package ownwatch

import "sync"

// Registry holds, for each owner key of one session, what must hear of its
// loss: the key's watches and its tenure. Each session has its own, so two
// clients (or two test clusters) in one process never see each other's keys.
// The zero Registry is ready to use.
type Registry struct {
	mu sync.Mutex
	m  map[string]map[*func(error)]struct{} // guarded by mu
}

// Register makes every Lost of key call f with its cause, until unregister
// is called.
func (r *Registry) Register(key string, f func(cause error)) (unregister func()) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.m == nil {
		r.m = map[string]map[*func(error)]struct{}{}
	}
	if r.m[key] == nil {
		r.m[key] = map[*func(error)]struct{}{}
	}
	p := &f
	r.m[key][p] = struct{}{}
	return func() {
		r.mu.Lock()
		defer r.mu.Unlock()
		delete(r.m[key], p)
		if len(r.m[key]) == 0 {
			delete(r.m, key)
		}
	}
}

// Lost tells everything registered for key that it is lost, with cause: a
// watch saw the key go, a guarded txn found the owner compare false (which
// proves the loss before any watch event arrives), or the owner released it.
// The calls are made without the registry's lock, so they may register and
// unregister; the caller must hold no lock of its own, since a tenure's
// report runs the user's observer.
func (r *Registry) Lost(key string, cause error) {
	r.mu.Lock()
	fs := make([]func(error), 0, len(r.m[key]))
	for f := range r.m[key] {
		fs = append(fs, *f)
	}
	r.mu.Unlock()
	for _, f := range fs {
		f(cause)
	}
}

// Len returns the number of keys with something registered: zero once every
// watch and tenure of the session has ended.
func (r *Registry) Len() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.m)
}
