package fencing

import (
	"fmt"

	"github.com/leasehold/leasehold/internal/keyspace"
)

// DefaultRoot is the key prefix under which a session created without
// WithRoot keeps its locks and elections.
const DefaultRoot = "leasehold/"

// ValidateName returns nil for a name that NewMutex (and election.New)
// accept, and otherwise an error wrapping ErrInvalidName that says why.
//
// A name is 1 to 512 bytes of UTF-8 made of printable characters
// (letters, marks, digits, punctuation, symbols and the ASCII space) other
// than '#'. It is written into its keys as it is, after the session's root:
// the lock "jobs/billing" queues under "leasehold/jobs/billing#lock/", so
// every name starting with "jobs/" has its keys under "leasehold/jobs/", and
// '#', which no name contains, ends the name, so no name reaches another's
// keys ("a" and "a/b" are two independent locks). '/' means nothing special
// to the library; empty segments ("a//b") are names like any other.
func ValidateName(name string) error { return keyspace.ValidateName(name) }

func validRoot(root string) error {
	if err := keyspace.ValidateRoot(root); err != nil {
		return fmt.Errorf("%w: %w", ErrInvalidArgument, err)
	}
	return nil
}
