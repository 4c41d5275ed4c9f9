// Package rank orders the candidates of an election: the record each
// preferring replica keeps next to the election's queue, and which of them
// may campaign. Safety never depends on it: the queue alone decides who
// leads; preference only decides who joins the queue and who gives way.
package rank

import (
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
)

// MaxLevels bounds a priority's length, so that a record stays small.
const MaxLevels = 16

// ErrBadPriority is a priority or version that cannot be used.
var ErrBadPriority = errors.New("bad priority")

// Record is one candidate, as its record key says.
type Record struct {
	Key string `json:"-"`  // its record key: unique per session
	ID  string `json:"id"` // the session's identity, for people
	// Priority is compared level by level; a priority that is a prefix of
	// another is lower (as version 1.2 is lower than 1.2.1).
	Priority []int64 `json:"priority"`
	// Drain asks that every candidate not drained be preferred to it.
	Drain bool `json:"drain,omitempty"`
}

// Encode returns the value of r's record key.
func Encode(r Record) string {
	b, _ := json.Marshal(r) // strings, bools and integers always marshal
	return string(b)
}

// Decode parses the value of the record key key.
func Decode(key string, value []byte) (Record, error) {
	var r Record
	if err := json.Unmarshal(value, &r); err != nil {
		return Record{}, fmt.Errorf("candidate record %q: %w", key, err)
	}
	r.Key = key
	return r, nil
}

// Compare orders a and b: a drained record below every other, then by
// priority.
func Compare(a, b Record) int {
	switch {
	case a.Drain && !b.Drain:
		return -1
	case !a.Drain && b.Drain:
		return 1
	}
	return slices.Compare(a.Priority, b.Priority)
}

// Preferred reports whether no record of rs ranks above self; self's own
// key in rs, perhaps an older copy, is not compared.
func Preferred(rs map[string]Record, self Record) bool {
	for k, r := range rs {
		if k != self.Key && Compare(r, self) > 0 {
			return false
		}
	}
	return true
}

// Top returns the keys of the records of rs that no other ranks above,
// sorted.
func Top(rs map[string]Record) []string {
	var top []string
	for k, r := range rs {
		if Preferred(rs, r) {
			top = append(top, k)
		}
	}
	slices.Sort(top)
	return top
}

// Check returns an error wrapping ErrBadPriority unless p has 1 to
// MaxLevels levels.
func Check(p []int64) error {
	if len(p) == 0 || len(p) > MaxLevels {
		return fmt.Errorf("%w: %d levels, want 1 to %d", ErrBadPriority, len(p), MaxLevels)
	}
	return nil
}

// ParseVersion returns the priority of a version: "v1.28.3" or "1.28.3" is
// [1 28 3]. Build metadata ("+linux") is ignored. A pre-release ("-rc.1")
// is refused: it would rank equal to its release, or above it.
func ParseVersion(v string) ([]int64, error) {
	core, _, _ := strings.Cut(strings.TrimPrefix(v, "v"), "+")
	if strings.Contains(core, "-") {
		return nil, fmt.Errorf("%w: version %q is a pre-release: give Priority levels of your own", ErrBadPriority, v)
	}
	parts := strings.Split(core, ".")
	if len(parts) > MaxLevels {
		return nil, fmt.Errorf("%w: version %q has more than %d parts", ErrBadPriority, v, MaxLevels)
	}
	p := make([]int64, len(parts))
	for i, s := range parts {
		n, err := strconv.ParseInt(s, 10, 64)
		if err != nil || n < 0 || s == "" || (s[0] == '+') {
			return nil, fmt.Errorf("%w: version %q: part %q is not a number", ErrBadPriority, v, s)
		}
		p[i] = n
	}
	return p, nil
}
