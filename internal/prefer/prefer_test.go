package prefer_test

import (
	"errors"
	"slices"
	"testing"

	"github.com/leasehold/leasehold/internal/prefer"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func TestParseVersion(t *testing.T) {
	for v, want := range map[string][]int64{
		"v1.28.3": {1, 28, 3}, "1.28.3": {1, 28, 3}, "2": {2}, "v0.0.1+linux.amd64": {0, 0, 1}, "v10.02": {10, 2},
	} {
		got, err := prefer.ParseVersion(v)
		if err != nil || !slices.Equal(got, want) {
			t.Errorf("ParseVersion(%q) = %v, %v; want %v", v, got, err, want)
		}
	}
	for _, v := range []string{"", "v", "1..2", "1.2.3-rc.1", "v1.x", "+1", "1.+2", "1.2.3.4.5.6.7.8.9.10.11.12.13.14.15.16.17", "99999999999999999999"} {
		if p, err := prefer.ParseVersion(v); !errors.Is(err, prefer.ErrBadPriority) {
			t.Errorf("ParseVersion(%q) = %v, %v; want ErrBadPriority", v, p, err)
		}
	}
}

func TestCompare(t *testing.T) {
	r := func(drain bool, p ...int64) prefer.Record { return prefer.Record{Priority: p, Drain: drain} }
	for _, c := range []struct {
		a, b prefer.Record
		want int
	}{
		{r(false, 1, 2), r(false, 1, 2), 0},
		{r(false, 1, 2), r(false, 1, 2, 0), -1}, // a prefix ranks lower, as 1.2 < 1.2.0
		{r(false, 2), r(false, 1, 9), 1},
		{r(true, 9), r(false, 1), -1}, // drained ranks below every live one
		{r(true, 1), r(true, 2), -1},
	} {
		if got := prefer.Compare(c.a, c.b); got != c.want {
			t.Errorf("Compare(%+v, %+v) = %d, want %d", c.a, c.b, got, c.want)
		}
		if got := prefer.Compare(c.b, c.a); got != -c.want {
			t.Errorf("Compare(%+v, %+v) = %d, want %d", c.b, c.a, got, -c.want)
		}
	}
}

func TestTopAndPreferred(t *testing.T) {
	rs := map[string]prefer.Record{
		"a": {Key: "a", Priority: []int64{2}},
		"b": {Key: "b", Priority: []int64{2}},
		"c": {Key: "c", Priority: []int64{1}},
		"d": {Key: "d", Priority: []int64{3}, Drain: true},
	}
	if got := prefer.Top(rs); !slices.Equal(got, []string{"a", "b"}) {
		t.Fatalf("Top = %v, want [a b] (equals share the top; drained d is last)", got)
	}
	if prefer.Preferred(rs, rs["c"]) || prefer.Preferred(rs, rs["d"]) || !prefer.Preferred(rs, rs["a"]) {
		t.Fatal("Preferred disagrees with Top")
	}
	only := map[string]prefer.Record{"d": rs["d"]}
	if !prefer.Preferred(only, rs["d"]) {
		t.Fatal("a drained candidate alone is not preferred: the name would have no leader")
	}
}

func TestRecordRoundTrip(t *testing.T) {
	in := prefer.Record{Key: "k", ID: "host/1", Priority: []int64{1, -2, 3}, Drain: true}
	out, err := prefer.Decode("k", []byte(prefer.Encode(in)))
	if err != nil || out.ID != in.ID || !slices.Equal(out.Priority, in.Priority) || !out.Drain || out.Key != "k" {
		t.Fatalf("Decode(Encode(%+v)) = %+v, %v", in, out, err)
	}
	if _, err := prefer.Decode("k", []byte("not json")); err == nil {
		t.Fatal("Decode accepted a value that is not a record")
	}
}

func FuzzParseVersion(f *testing.F) {
	for _, s := range []string{"v1.2.3", "1", "1.2.3-rc1", "v1.2+x", "", "..", "v-1"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, v string) {
		p, err := prefer.ParseVersion(v)
		if err != nil {
			if !errors.Is(err, prefer.ErrBadPriority) {
				t.Fatalf("ParseVersion(%q): %v does not wrap ErrBadPriority", v, err)
			}
			return
		}
		if prefer.Check(p) != nil {
			t.Fatalf("ParseVersion(%q) = %v, which Check refuses", v, p)
		}
		for _, n := range p {
			if n < 0 {
				t.Fatalf("ParseVersion(%q) = %v: a negative part", v, p)
			}
		}
	})
}
