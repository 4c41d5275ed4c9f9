package fencing_test

import (
	"errors"
	"testing"

	"github.com/leasehold/leasehold/fencing"
)

func TestTokenString(t *testing.T) {
	for _, tc := range []struct {
		tok  fencing.Token
		want string
	}{
		{fencing.Token{Name: "jobs/billing", Revision: 1234}, "jobs/billing@1234"},
		{fencing.Token{Name: "a@b", Revision: 1}, "a@b@1"},
		{fencing.Token{Name: "50% off", Revision: 7}, "50%25%20off@7"},
		{fencing.Token{Name: "π", Revision: 9}, "%CF%80@9"},
		{fencing.Token{Name: "a//b/", Revision: 10}, "a//b/@10"},
		{fencing.Token{Name: "jobs/billing", Revision: 1234, Cluster: 0xcdf818194e3a8c32}, "jobs/billing@1234#cdf818194e3a8c32"},
		{fencing.Token{Name: "a@b", Revision: 1, Cluster: 1}, "a@b@1#1"},
		{fencing.Token{Name: "π", Revision: 9, Cluster: 1<<64 - 1}, "%CF%80@9#ffffffffffffffff"},
	} {
		if got := tc.tok.String(); got != tc.want {
			t.Errorf("%#v.String() = %q; want %q", tc.tok, got, tc.want)
		}
		back, err := fencing.ParseToken(tc.want)
		if err != nil || back != tc.tok {
			t.Errorf("ParseToken(%q) = %#v, %v; want %#v", tc.want, back, err, tc.tok)
		}
	}
}

func TestParseTokenRejects(t *testing.T) {
	for _, s := range []string{
		"", "@", "name", "name@", "@12", "name@0", "name@-1", "name@+1", "name@01", "name@1x",
		"name@99999999999999999999", "a b@1", "a%2@1", "a%zz@1", "a%2f@1", "a%41@1", "a%00@1",
		"%FF@1", "\xff@1", "é@1",
		"a@1#", "a@1#0", "a@1#01", "a@1#ABC", "a@1#x", "a@1#1#2", "a#1@2", "a@1#10000000000000000", "a%23b@1", "#1",
	} {
		if tok, err := fencing.ParseToken(s); !errors.Is(err, fencing.ErrInvalidToken) {
			t.Errorf("ParseToken(%q) = %#v, %v; want ErrInvalidToken", s, tok, err)
		}
	}
}

func TestTokenCompare(t *testing.T) {
	a1 := fencing.Token{Name: "a", Revision: 1}
	a2 := fencing.Token{Name: "a", Revision: 2}
	b1 := fencing.Token{Name: "b", Revision: 1}
	for _, tc := range []struct {
		x, y fencing.Token
		want int
	}{
		{a1, a2, -1}, {a2, a1, 1}, {a1, a1, 0}, {a2, b1, -1}, {b1, a2, 1},
		{a1, fencing.Token{Name: "a", Revision: 1, Cluster: 7}, -1}, {fencing.Token{Name: "a", Revision: 2, Cluster: 7}, a1, 1},
	} {
		if got := tc.x.Compare(tc.y); got != tc.want {
			t.Errorf("%v.Compare(%v) = %d; want %d", tc.x, tc.y, got, tc.want)
		}
	}
}

// Every token of a valid name round-trips through its text, and that text
// is printable ASCII.
func FuzzTokenRoundTrip(f *testing.F) {
	for _, s := range []string{"a", "jobs/billing", "50% off", "π", "a@b", "\x01", "a//b/"} {
		f.Add(s, int64(1), uint64(0))
		f.Add(s, int64(1), uint64(0xcdf818194e3a8c32))
	}
	f.Fuzz(func(t *testing.T, name string, rev int64, cluster uint64) {
		if fencing.ValidateName(name) != nil || rev <= 0 {
			t.Skip()
		}
		tok := fencing.Token{Name: name, Revision: rev, Cluster: cluster}
		s := tok.String()
		for _, c := range []byte(s) {
			if c <= ' ' || c > '~' {
				t.Fatalf("%#v.String() = %q has byte %#x", tok, s, c)
			}
		}
		back, err := fencing.ParseToken(s)
		if err != nil || back != tok {
			t.Fatalf("ParseToken(%q) = %#v, %v; want %#v", s, back, err, tok)
		}
	})
}

// ParseToken never panics, and what it accepts String writes back unchanged.
func FuzzParseToken(f *testing.F) {
	for _, s := range []string{"a@1", "jobs/billing@1234", "%CF%80@9", "a%@1", "@", "a@01", "a@1#cdf8", "a@1#0f", "a@1##"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		tok, err := fencing.ParseToken(s)
		if err != nil {
			if !errors.Is(err, fencing.ErrInvalidToken) {
				t.Fatalf("ParseToken(%q) error %v does not wrap ErrInvalidToken", s, err)
			}
			return
		}
		if got := tok.String(); got != s {
			t.Fatalf("ParseToken(%q).String() = %q", s, got)
		}
	})
}
