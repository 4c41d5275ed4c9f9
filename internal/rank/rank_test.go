package rank_test

import (
	"errors"
	"slices"
	"testing"

	"github.com/leasehold/leasehold/internal/rank"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func TestParseVersion(t *testing.T) {
	for v, want := range map[string][]int64{
		"v1.28.3": {1, 28, 3}, "1.28.3": {1, 28, 3}, "2": {2}, "v0.0.1+linux.amd64": {0, 0, 1}, "v10.02": {10, 2},
	} {
		got, err := rank.ParseVersion(v)
		if err != nil || !slices.Equal(got, want) {
			t.Errorf("ParseVersion(%q) = %v, %v; want %v", v, got, err, want)
		}
	}
	for _, v := range []string{"", "v", "1..2", "1.2.3-rc.1", "v1.x", "+1", "1.+2", "1.2.3.4.5.6.7.8.9.10.11.12.13.14.15.16.17", "99999999999999999999"} {
		if p, err := rank.ParseVersion(v); !errors.Is(err, rank.ErrBadPriority) {
			t.Errorf("ParseVersion(%q) = %v, %v; want ErrBadPriority", v, p, err)
		}
	}
}

func TestCompare(t *testing.T) {
	r := func(drain bool, p ...int64) rank.Record { return rank.Record{Priority: p, Drain: drain} }
	for _, c := range []struct {
		a, b rank.Record
		want int
	}{
		{r(false, 1, 2), r(false, 1, 2), 0},
		{r(false, 1, 2), r(false, 1, 2, 0), -1}, // a prefix ranks lower, as 1.2 < 1.2.0
		{r(false, 2), r(false, 1, 9), 1},
		{r(true, 9), r(false, 1), -1}, // drained ranks below every live one
		{r(true, 1), r(true, 2), -1},
	} {
		if got := rank.Compare(c.a, c.b); got != c.want {
			t.Errorf("Compare(%+v, %+v) = %d, want %d", c.a, c.b, got, c.want)
		}
		if got := rank.Compare(c.b, c.a); got != -c.want {
			t.Errorf("Compare(%+v, %+v) = %d, want %d", c.b, c.a, got, -c.want)
		}
	}
}

func TestTopAndPreferred(t *testing.T) {
	rs := map[string]rank.Record{
		"a": {Key: "a", Priority: []int64{2}},
		"b": {Key: "b", Priority: []int64{2}},
		"c": {Key: "c", Priority: []int64{1}},
		"d": {Key: "d", Priority: []int64{3}, Drain: true},
	}
	if got := rank.Top(rs); !slices.Equal(got, []string{"a", "b"}) {
		t.Fatalf("Top = %v, want [a b] (equals share the top; drained d is last)", got)
	}
	if rank.Preferred(rs, rs["c"]) || rank.Preferred(rs, rs["d"]) || !rank.Preferred(rs, rs["a"]) {
		t.Fatal("Preferred disagrees with Top")
	}
	only := map[string]rank.Record{"d": rs["d"]}
	if !rank.Preferred(only, rs["d"]) {
		t.Fatal("a drained candidate alone is not preferred: the name would have no leader")
	}
}

func TestRecordRoundTrip(t *testing.T) {
	in := rank.Record{Key: "k", ID: "host/1", Priority: []int64{1, -2, 3}, Drain: true}
	out, err := rank.Decode("k", []byte(rank.Encode(in)))
	if err != nil || out.ID != in.ID || !slices.Equal(out.Priority, in.Priority) || !out.Drain || out.Key != "k" {
		t.Fatalf("Decode(Encode(%+v)) = %+v, %v", in, out, err)
	}
	if _, err := rank.Decode("k", []byte("not json")); err == nil {
		t.Fatal("Decode accepted a value that is not a record")
	}
}

func FuzzParseVersion(f *testing.F) {
	for _, s := range []string{"v1.2.3", "1", "1.2.3-rc1", "v1.2+x", "", "..", "v-1"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, v string) {
		p, err := rank.ParseVersion(v)
		if err != nil {
			if !errors.Is(err, rank.ErrBadPriority) {
				t.Fatalf("ParseVersion(%q): %v does not wrap ErrBadPriority", v, err)
			}
			return
		}
		if rank.Check(p) != nil {
			t.Fatalf("ParseVersion(%q) = %v, which Check refuses", v, p)
		}
		for _, n := range p {
			if n < 0 {
				t.Fatalf("ParseVersion(%q) = %v: a negative part", v, p)
			}
		}
	})
}
