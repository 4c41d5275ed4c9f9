package redisfence

import (
	"strings"
	"testing"
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
