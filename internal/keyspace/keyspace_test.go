package keyspace_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/leasehold/leasehold/internal/keyspace"
	"go.uber.org/goleak"
)

func TestLayout(t *testing.T) {
	for _, c := range []struct{ kind, name, want string }{
		{"lock", "jobs/billing", "leasehold/jobs/billing#lock/"},
		{"election", "a", "leasehold/a#election/"},
		{"", "a/b", "leasehold/a/b#"},
	} {
		if got := keyspace.Prefix("leasehold/", c.kind, c.name); got != c.want {
			t.Errorf("Prefix(%q, %q) = %q; want %q", c.kind, c.name, got, c.want)
		}
	}
}

// The grammar: printable UTF-8 without '#', 1 to MaxNameLen bytes.
func TestValidateName(t *testing.T) {
	for _, ok := range []string{"a", "a/b", "a//b", "/a/", "π/β", "user@example.com", "with space", "1:a", strings.Repeat("x", keyspace.MaxNameLen)} {
		if err := keyspace.ValidateName(ok); err != nil {
			t.Errorf("ValidateName(%q): %v", ok, err)
		}
	}
	for _, bad := range []string{"", "a#b", "#", "a\x00b", "tab\there", "new\nline", "\xff", "\u200b", strings.Repeat("x", keyspace.MaxNameLen+1)} {
		if err := keyspace.ValidateName(bad); !errors.Is(err, keyspace.ErrInvalidName) {
			t.Errorf("ValidateName(%q) = %v; want ErrInvalidName", bad, err)
		}
	}
	for _, bad := range []string{"", "a\x00", "\xff"} {
		if err := keyspace.ValidateRoot(bad); err == nil {
			t.Errorf("ValidateRoot(%q) = nil", bad)
		}
	}
}

// S6: the keys of one name never fall in another's queue range, whatever
// the names, the kinds and the key's tail.
func FuzzPrefixIsolation(f *testing.F) {
	for _, p := range [][2]string{{"a", "a/b"}, {"a/", "a"}, {"1:a", "a"}, {"a//b", "a/"}, {"π", "π/π"}, {"a", "ab"}} {
		f.Add(p[0], p[1], "lock", "election", "00000000000000ab-1")
	}
	f.Fuzz(func(t *testing.T, a, b, ka, kb, tail string) {
		if keyspace.ValidateName(a) != nil || keyspace.ValidateName(b) != nil || ka == "" || kb == "" ||
			strings.Contains(ka, "/") || strings.Contains(kb, "/") || (a == b && ka == kb) {
			t.Skip()
		}
		pa, pb := keyspace.Prefix("leasehold/", ka, a), keyspace.Prefix("leasehold/", kb, b)
		if strings.HasPrefix(pb+tail, pa) || strings.HasPrefix(pa+tail, pb) {
			t.Fatalf("%s %q and %s %q share keys: %q, %q", ka, a, kb, b, pa, pb)
		}
	})
}

// A name prefix is a key prefix: every name that starts with p has its keys
// under root+p, and no other name does.
func FuzzSubtree(f *testing.F) {
	f.Add("teamA/", "teamA/x")
	f.Add("teamA/", "teamA")
	f.Add("team", "teamB/x")
	f.Fuzz(func(t *testing.T, p, name string) {
		if keyspace.ValidatePrefix(p) != nil || keyspace.ValidateName(name) != nil {
			t.Skip()
		}
		inside := strings.HasPrefix(keyspace.Prefix("r/", "lock", name), "r/"+p)
		if inside != strings.HasPrefix(name, p) {
			t.Fatalf("name %q under subtree %q: keys inside %v", name, p, inside)
		}
	})
}

// ParseKey recovers the kind and name of every key of a queue, and never
// panics on other keys.
func FuzzParseKey(f *testing.F) {
	for _, n := range []string{"a", "a/b", "1:a", "a//b", "π", "x-1-2"} {
		f.Add("leasehold/", "lock", n, "00000000000000ab-3")
	}
	f.Add("r#/", "election", "n", "00000000000000ab-7")
	f.Add("", "", "", "")
	f.Fuzz(func(t *testing.T, root, kind, name, tail string) {
		keyspace.ParseKey(root, kind+name+tail)
		if keyspace.ValidateName(name) != nil || kind == "" || strings.Contains(kind, "/") {
			return
		}
		k, n, ok := keyspace.ParseKey(root, keyspace.Prefix(root, kind, name)+tail)
		if !ok || k != kind || n != name {
			t.Fatalf("ParseKey(Prefix(%q, %q, %q) + %q) = %q, %q, %v", root, kind, name, tail, k, n, ok)
		}
	})
}

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func TestStem(t *testing.T) {
	if got := keyspace.Stem(0x694d7a1c); got != "00000000694d7a1c-" {
		t.Fatalf("Stem = %q, want the lease in 16 hex digits and a dash", got)
	}
}
