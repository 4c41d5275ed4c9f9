package redisfence

import (
	"errors"
	"strings"
	"testing"

	"github.com/leasehold/leasehold/fencing"
)

func TestSlot(t *testing.T) {
	// CRC-16/XMODEM's check value is 0x31C3; the rest are Redis Cluster's
	// own examples (its specification and CLUSTER KEYSLOT).
	if got := crc16("123456789"); got != 0x31c3 {
		t.Errorf("crc16(123456789) = %#x; want 0x31c3", got)
	}
	for key, want := range map[string]int{
		"foo": 12182, "somekey": 11058, "{user1000}.following": 3443, "{user1000}.followers": 3443,
		"foo{}{bar}": slot("foo{}{bar}"), "{}": 15257,
	} {
		if got := slot(key); got != want {
			t.Errorf("slot(%q) = %d; want %d", key, got, want)
		}
	}
	if slot("foo{}{bar}") == slot("bar") {
		t.Error(`"foo{}{bar}" hashed by "bar": an empty first tag means the whole key`)
	}
}

func FuzzSlot(f *testing.F) {
	for _, s := range []string{"", "{", "}", "{}", "{a}", "x{a}y", "{{a}}", "a{b", "\xff"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, key string) {
		s := slot(key)
		if s < 0 || s >= 16384 {
			t.Fatalf("slot(%q) = %d, out of range", key, s)
		}
		i := strings.IndexByte(key, '{')
		if i < 0 {
			return
		}
		if j := strings.IndexByte(key[i+1:], '}'); j > 0 && slot(key[i+1:i+1+j]) != s {
			t.Fatalf("slot(%q) = %d, not its tag's %d", key, s, slot(key[i+1:i+1+j]))
		}
	})
}

// Replies the fence's script never gives, from a client that mangles them,
// are an unknown outcome and never a panic; []byte is taken for string.
func TestVerdictOfOddReplies(t *testing.T) {
	tok := fencing.Token{Name: "n", Revision: 5, Cluster: 0xab}
	for _, tc := range []struct {
		reply any
		ops   int
		want  error
	}{
		{[]any{"ok"}, 1, nil},
		{[]any{"cluster"}, 0, nil},
		{[]any{"stale", "nonsense"}, 0, nil},
		{[]any{}, 0, nil},
		{nil, 0, nil},
		{"ok", 0, nil},
		{[]any{[]byte("stale"), []byte("ab 9")}, 0, fencing.ErrStaleToken},
		{[]any{[]byte("cluster"), []byte("cd 9")}, 0, fencing.ErrClusterMismatch},
	} {
		_, err := verdict(tc.reply, "leasehold:fence:{n}", tok, tc.ops)
		switch {
		case err == nil:
			t.Errorf("verdict(%#v) = nil error", tc.reply)
		case tc.want != nil && !errors.Is(err, tc.want):
			t.Errorf("verdict(%#v) = %v; want %v", tc.reply, err, tc.want)
		case tc.want == nil && !strings.Contains(err.Error(), "outcome unknown"):
			t.Errorf("verdict(%#v) = %v; want an unknown outcome", tc.reply, err)
		}
	}
	if res, err := verdict([]any{[]byte("ok"), int64(1)}, "k", tok, 1); err != nil || res[0] != int64(1) {
		t.Errorf("verdict of an ok in []byte = %v, %v", res, err)
	}
}
