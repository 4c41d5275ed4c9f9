package fencing

import (
	"fmt"
	"strings"
	"unicode/utf8"
)

// MaxNameLen is the longest name, in bytes, that NewMutex accepts.
const MaxNameLen = 512

// terminator ends the name part of every key. Names cannot contain it, so
// the keys of one name never start with the key prefix of another: "a" and
// "a/b" own the disjoint ranges "…a\x00…" and "…a/b\x00…".
const terminator = "\x00"

// validName reports, with ErrInvalidName, why name cannot be isolated.
func validName(name string) error {
	switch {
	case name == "":
		return fmt.Errorf("%w: empty", ErrInvalidName)
	case len(name) > MaxNameLen:
		return fmt.Errorf("%w: %d bytes, more than %d", ErrInvalidName, len(name), MaxNameLen)
	case !utf8.ValidString(name):
		return fmt.Errorf("%w: %q is not valid UTF-8", ErrInvalidName, name)
	case strings.Contains(name, terminator):
		return fmt.Errorf("%w: %q contains a NUL byte", ErrInvalidName, name)
	}
	return nil
}

// lockPrefix is the key range that belongs to the lock name alone.
func lockPrefix(name string) string { return "leasehold/lock/" + name + terminator }
