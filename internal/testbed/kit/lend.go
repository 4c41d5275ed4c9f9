package kit

import "sync"

// lent holds what fencingtest lends the test bed (see Lend).
var lent sync.Map

// Lend makes f, a function over fencingtest's unexported state, available
// to the test bed under name: faults and clusters that only the project's
// own tests need, kept out of the kit's public API. fencingtest calls it in
// its init.
func Lend(name string, f any) { lent.Store(name, f) }

// Borrow returns what fencingtest lent under name, as F; it panics if
// nothing of that name and type was lent, a mistake in the test bed.
func Borrow[F any](name string) F {
	f, _ := lent.Load(name)
	return f.(F)
}
