package keyspace_test

import (
	"bytes"
	"encoding/json"
	"testing"
	"unicode/utf8"

	"github.com/leasehold/leasehold/internal/keyspace"
)

type leased struct {
	Name  string `json:"name"`
	Lease int64  `json:"-"`
}

// The lease goes last, in hex, and comes back; a bad hex is an error.
func TestLeasedRoundTrips(t *testing.T) {
	b, err := keyspace.MarshalLeased(leased{Name: "a"}, 0x694d7e1f2a)
	if err != nil || string(b) != `{"name":"a","lease":"694d7e1f2a"}` {
		t.Fatalf("MarshalLeased = %s, %v", b, err)
	}
	var back leased
	if lease, err := keyspace.UnmarshalLeased(b, &back); err != nil || lease != 0x694d7e1f2a || back.Name != "a" {
		t.Fatalf("UnmarshalLeased = %x, %+v, %v", lease, back, err)
	}
	if b, err := keyspace.MarshalLeased(struct{}{}, 1); err != nil || string(b) != `{"lease":"1"}` {
		t.Errorf("an empty object = %s, %v", b, err)
	}
	if _, err := keyspace.MarshalLeased([]int{1}, 1); err == nil {
		t.Error("MarshalLeased of a slice: no error")
	}
	if _, err := keyspace.UnmarshalLeased([]byte(`{"lease":"zz"}`), &back); err == nil {
		t.Error("UnmarshalLeased of a bad hex: no error")
	}
}

func FuzzLeased(f *testing.F) {
	f.Add("a", int64(1))
	f.Add("", int64(-5))
	f.Fuzz(func(t *testing.T, name string, lease int64) {
		if !utf8.ValidString(name) {
			return // JSON writes it with U+FFFD: not ours to keep
		}
		b, err := keyspace.MarshalLeased(leased{Name: name}, lease)
		if err != nil || !json.Valid(b) || !bytes.HasSuffix(b, []byte("}")) {
			t.Fatalf("MarshalLeased(%q, %d) = %s, %v", name, lease, b, err)
		}
		var back leased
		got, err := keyspace.UnmarshalLeased(b, &back)
		if err != nil || got != lease || back.Name != name {
			t.Fatalf("round trip of (%q, %d): %d, %+v, %v", name, lease, got, back, err)
		}
	})
}
