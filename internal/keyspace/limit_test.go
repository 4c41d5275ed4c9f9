package keyspace_test

import (
	"testing"

	"github.com/leasehold/leasehold/internal/keyspace"
)

// A semaphore key's directory names its limit, and its units when more
// than one: one unit keeps the directory of a version without weights.
func TestUnitsDir(t *testing.T) {
	for _, c := range []struct {
		limit, units int
		dir          string
	}{{3, 1, "3/"}, {3, 2, "3x2/"}, {1, 1, "1/"}, {100, 40, "100x40/"}} {
		if got := keyspace.UnitsDir(c.limit, c.units); got != c.dir {
			t.Errorf("UnitsDir(%d, %d) = %q; want %q", c.limit, c.units, got, c.dir)
		}
		limit, units, ok := keyspace.ParseUnitsDir(c.dir + "0000000000000001-1")
		if !ok || limit != c.limit || units != c.units {
			t.Errorf("ParseUnitsDir(%q) = %d, %d, %v", c.dir, limit, units, ok)
		}
	}
	for _, bad := range []string{"", "3", "x/", "0/", "-1/", "03/", "3x/", "3x1/", "3x0/", "3x02/", "3x-2/", "3y2/", "+3/", "3x2x2/"} {
		if l, u, ok := keyspace.ParseUnitsDir(bad); ok {
			t.Errorf("ParseUnitsDir(%q) = %d, %d, true; want false", bad, l, u)
		}
	}
}

// The limit record round-trips; a limit below 1, a negative Held or a
// value that is not a record is an error.
func TestLimitRecord(t *testing.T) {
	b := keyspace.MarshalLimit(keyspace.Limit{Limit: 3, Held: 42})
	if string(b) != `{"limit":3,"held":42}` {
		t.Fatalf("MarshalLimit = %s", b)
	}
	if l, err := keyspace.UnmarshalLimit(b); err != nil || l != (keyspace.Limit{Limit: 3, Held: 42}) {
		t.Fatalf("UnmarshalLimit(%s) = %+v, %v", b, l, err)
	}
	for _, bad := range []string{"", "3", `{"limit":0}`, `{"limit":2,"held":-1}`, `{"limit":"2"}`} {
		if l, err := keyspace.UnmarshalLimit([]byte(bad)); err == nil {
			t.Errorf("UnmarshalLimit(%q) = %+v, nil; want an error", bad, l)
		}
	}
	if keyspace.LimitKey("leasehold/pool#semaphore/") != "leasehold/pool#semaphore" {
		t.Error("LimitKey is not the prefix without its slash")
	}
}

func FuzzParseUnitsDir(f *testing.F) {
	f.Add("3/x")
	f.Add("3x2/x")
	f.Fuzz(func(t *testing.T, rest string) {
		limit, units, ok := keyspace.ParseUnitsDir(rest)
		if !ok {
			return
		}
		if limit < 1 || units < 1 {
			t.Fatalf("ParseUnitsDir(%q) = %d, %d", rest, limit, units)
		}
		dir := keyspace.UnitsDir(limit, units)
		if len(rest) < len(dir) || rest[:len(dir)] != dir {
			t.Fatalf("ParseUnitsDir(%q) = %d, %d, but UnitsDir writes %q", rest, limit, units, dir)
		}
	})
}

func FuzzUnmarshalLimit(f *testing.F) {
	f.Add([]byte(`{"limit":3,"held":42}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		l, err := keyspace.UnmarshalLimit(b)
		if err != nil {
			return
		}
		if l.Limit < 1 || l.Held < 0 {
			t.Fatalf("UnmarshalLimit(%q) = %+v", b, l)
		}
		if back, err := keyspace.UnmarshalLimit(keyspace.MarshalLimit(l)); err != nil || back != l {
			t.Fatalf("round trip of %+v: %+v, %v", l, back, err)
		}
	})
}
