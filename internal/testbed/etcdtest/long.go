package etcdtest

import (
	"os"
	"testing"
)

// LongEnv names the environment variable that runs the long tests: the
// fault suites and the faults that wait out TTLs or member restarts. CI sets
// it; without it, go test ./... runs the rest in a few minutes.
const LongEnv = "LEASEHOLD_LONG"

// Long skips t unless LongEnv is set.
func Long(t testing.TB) {
	t.Helper()
	if os.Getenv(LongEnv) == "" {
		t.Skipf("long test: %s=1 runs it, as CI does", LongEnv)
	}
}
