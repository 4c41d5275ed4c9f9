// Package etcdtest holds the parts of the project's test bed that are not for
// users: request counting for benchmarks, the shared cluster of the Example
// functions, and checks of the library's own invariants and error texts. The
// test kit users import is fencing/fencingtest; this package builds on it.
package etcdtest

import (
	"sync"

	"github.com/leasehold/leasehold/fencing/fencingtest"
)

var shared struct {
	once sync.Once
	c    *fencingtest.Cluster
}

// Shared returns a single-member cluster that lives until fencingtest.Main's
// tests end, for Example functions, which get no testing.TB. It panics with
// the reason if the cluster cannot start, which ends the test binary.
func Shared() *fencingtest.Cluster {
	shared.once.Do(func() {
		// Background's TB panics with the reason if the cluster cannot start.
		tb, done := fencingtest.Background()
		fencingtest.AtExit(done)
		shared.c = fencingtest.Single(tb)
	})
	return shared.c
}
