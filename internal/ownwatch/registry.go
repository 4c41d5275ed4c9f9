package ownwatch

import (
	"slices"
	"sync"
)

// Registry holds, for each ownership of one session (a key at one create
// revision: a session reuses its keys), what must hear of its loss: its
// watches and its tenure. Each session has its own, so two
// clients (or two test clusters) in one process never see each other's keys.
// The zero Registry is ready to use.
type Registry struct {
	mu sync.Mutex
	// Most owners have one or two registrations (a watch, a tenure): a
	// slice per owner costs a fraction of a map's memory.
	m map[owner][]*func(error) // guarded by mu
}

// owner is one life of a key: a stale owner of a reused key never reaches
// the watches of the key's next owner.
type owner struct {
	key string
	rev int64
}

// Register makes every Lost of key at create revision rev call f with its
// cause, until unregister is called.
func (r *Registry) Register(key string, rev int64, f func(cause error)) (unregister func()) {
	o := owner{key, rev}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.m == nil {
		r.m = map[owner][]*func(error){}
	}
	p := &f
	r.m[o] = append(r.m[o], p)
	return func() {
		r.mu.Lock()
		defer r.mu.Unlock()
		fs := slices.DeleteFunc(r.m[o], func(q *func(error)) bool { return q == p })
		if len(fs) == 0 {
			delete(r.m, o)
		} else {
			r.m[o] = fs
		}
	}
}

// Lost tells everything registered for key that it is lost, with cause: a
// watch saw the key go, a guarded txn found the owner compare false (which
// proves the loss before any watch event arrives), or the owner released it.
// The calls are made without the registry's lock, so they may register and
// unregister. A session's tenure reports (and so runs the user's observer
// and logger) only for a cause wrapping ErrKeyDeleted: a caller may hold a
// lock of its own while it passes any other cause (a release's own notice,
// as ownership.Release does), and must hold none with ErrKeyDeleted.
func (r *Registry) Lost(key string, rev int64, cause error) {
	o := owner{key, rev}
	r.mu.Lock()
	fs := make([]func(error), len(r.m[o]))
	for i, f := range r.m[o] {
		fs[i] = *f
	}
	r.mu.Unlock()
	for _, f := range fs {
		f(cause)
	}
}
