package fencing

import (
	"fmt"
	"strings"
	"unicode/utf8"
)

// MaxNameLen is the longest name, in bytes, that NewMutex accepts.
const MaxNameLen = 512

// nul cannot appear in a name: C tools, environment variables and HTTP
// headers cannot carry it, and a name is printed in all of them.
const nul = "\x00"

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
	case strings.Contains(name, nul):
		return fmt.Errorf("%w: %q contains a NUL byte", ErrInvalidName, name)
	}
	return nil
}
