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

// ParseKey recovers the kind and name of every key Acquire can write, and
// never panics on other keys.
func FuzzParseKey(f *testing.F) {
	for _, n := range []string{"a", "a/b", "1:a", "a//b", "π", "x-1-2", ""} {
		f.Add("lock", n, "00000000000000ab-1700000000000-3")
	}
	f.Add("election", "n", "00000000000000ab-7")
	f.Add("", "", "")
	f.Fuzz(func(t *testing.T, kind, name, suffix string) {
		revqueue.ParseKey(kind + name + suffix)
		if kind == "" || strings.Contains(kind, "/") {
			return
		}
		k, n, _, ok := revqueue.ParseKey(revqueue.Prefix(kind, name) + suffix)
		if !ok || k != kind || n != name {
			t.Fatalf("ParseKey(Prefix(%q, %q) + %q) = %q, %q, %v", kind, name, suffix, k, n, ok)
		}
	})
}

func TestParseKeyCreated(t *testing.T) {
	_, _, created, ok := revqueue.ParseKey(revqueue.Prefix("lock", "a") + "00000000000000ab-1700000000123-3")
	if !ok || created.UnixMilli() != 1700000000123 {
		t.Fatalf("created %v, ok %v", created, ok)
	}
	if _, _, created, ok := revqueue.ParseKey(revqueue.Prefix("lock", "a") + "00000000000000ab-3"); !ok || !created.IsZero() {
		t.Fatalf("key without a time: created %v, ok %v", created, ok)
	}
}
