package keyspace

import (
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
)

// Limit is a semaphore name's limit record, at LimitKey: the name's limit
// from its revision on, and the newest create revision of the keys that
// held when it was set. A key created at or before Held holds, whatever
// the limit: lowering a limit never takes a permit back.
type Limit struct {
	Limit int   `json:"limit"`
	Held  int64 `json:"held"`
}

// LimitKey is the key of the limit record of the semaphore whose queue is
// under prefix: the prefix without its slash, outside the queue's range.
func LimitKey(prefix string) string { return strings.TrimSuffix(prefix, "/") }

// MarshalLimit writes l as its record's value.
func MarshalLimit(l Limit) []byte {
	b, _ := json.Marshal(l) // two integers: cannot fail
	return b
}

// UnmarshalLimit reads a record's value; a limit below 1 or a negative
// Held is an error.
func UnmarshalLimit(b []byte) (Limit, error) {
	var l Limit
	if err := json.Unmarshal(b, &l); err != nil {
		return Limit{}, fmt.Errorf("semaphore limit record %q: %w", b, err)
	}
	if l.Limit < 1 || l.Held < 0 {
		return Limit{}, fmt.Errorf("semaphore limit record %q: limit below 1 or held below 0", b)
	}
	return l, nil
}

// UnitsDir is the directory, under a semaphore's prefix, of the keys of
// holds of units units queued with limit: "<limit>/" for one unit, as
// before weights, and "<limit>x<units>/" for more, which a version that
// knows no weights refuses as another limit rather than count as one.
func UnitsDir(limit, units int) string {
	if units == 1 {
		return strconv.Itoa(limit) + "/"
	}
	return strconv.Itoa(limit) + "x" + strconv.Itoa(units) + "/"
}

// ParseUnitsDir reads the limit and units of a semaphore key from rest,
// the key after the semaphore's prefix; ok is false if rest has no
// directory UnitsDir writes.
func ParseUnitsDir(rest string) (limit, units int, ok bool) {
	dir, _, found := strings.Cut(rest, "/")
	if !found {
		return 0, 0, false
	}
	l, u, weighted := strings.Cut(dir, "x")
	limit, err := strconv.Atoi(l)
	if err != nil || limit < 1 || l != strconv.Itoa(limit) {
		return 0, 0, false
	}
	if !weighted {
		return limit, 1, true
	}
	units, err = strconv.Atoi(u)
	if err != nil || units < 2 || u != strconv.Itoa(units) {
		return 0, 0, false
	}
	return limit, units, true
}
