package fencing

import (
	"fmt"
	"strings"
	"unicode/utf8"
)

// MaxNameLen is the longest name, in bytes, that NewMutex accepts.
const MaxNameLen = 512

// terminator ends the name part of every key (see revqueue.Prefix). Names
// cannot contain it, so the keys of one name never start with the key prefix
// of another: "a" and "a/b" own the disjoint ranges "…a\x00…" and "…a/b\x00…".
const terminator = "\x00"

// ValidateName returns nil for a name that NewMutex (and election.New)
// accept, and otherwise an error wrapping ErrInvalidName that says why.
func ValidateName(name string) error {
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
