// Package etcdtest holds the parts of the project's test bed that are not for
// users: request counting for benchmarks, the shared cluster of the Example
// functions, and checks of the library's own invariants and error texts. The
// test kit users import is fencing/fencingtest; this package builds on it.
package etcdtest

import (
	"fmt"
	"os"
	"sync"

	"github.com/leasehold/leasehold/fencing/fencingtest"
)

var shared struct {
	once sync.Once
	c    *fencingtest.Cluster
}

// Shared returns a single-member cluster that lives until fencingtest.Main's
// tests end, for Example functions, which get no testing.TB. It exits the
// test binary if the cluster cannot start.
func Shared() *fencingtest.Cluster {
	shared.once.Do(func() {
		c, err := fencingtest.Start(1)
		if err != nil {
			fmt.Fprintf(os.Stderr, "etcdtest: shared cluster: %v\n", err)
			os.Exit(1)
		}
		fencingtest.AtExit(c.Close)
		shared.c = c
	})
	return shared.c
}
