package revqueue_test

import (
	"strings"
	"testing"

	"github.com/leasehold/leasehold/internal/revqueue"
)

func TestPrefixIsPrintable(t *testing.T) {
	if got := revqueue.Prefix("lock", "jobs/billing"); got != "leasehold/lock/12:jobs/billing/" {
		t.Fatalf("Prefix = %q", got)
	}
}

// S6: the key range of one name never overlaps another's, whatever the
// names: neither prefix starts the other.
func FuzzPrefixIsolation(f *testing.F) {
	for _, p := range [][2]string{{"a", "a/b"}, {"a/", "a"}, {"1:a", "a"}, {"a//b", "a/"}, {"π", "π/π"}, {"3:a/b/", "a"}} {
		f.Add(p[0], p[1])
	}
	f.Fuzz(func(t *testing.T, a, b string) {
		if a == b {
			t.Skip()
		}
		pa, pb := revqueue.Prefix("lock", a), revqueue.Prefix("lock", b)
		if strings.HasPrefix(pa, pb) || strings.HasPrefix(pb, pa) {
			t.Fatalf("names %q and %q share keys: %q, %q", a, b, pa, pb)
		}
	})
}
