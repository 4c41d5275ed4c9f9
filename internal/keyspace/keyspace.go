// Package keyspace is the key layout of locks and elections, and the grammar
// of their names. A queue's keys are
//
//	<root><name>#<kind>/<lease in hex>-<slot>
//
// The name is written as it is, so every name starting with "teamA/" has its
// keys under "<root>teamA/": one etcd grant, one etcdctl get --prefix. No
// name contains '#', which therefore ends the name: the keys of "a" start
// with "<root>a#", those of "a/b" with "<root>a/b#", and no name's keys start
// with another name's queue prefix.
package keyspace

import (
	"errors"
	"fmt"
	"strings"
	"unicode"
	"unicode/utf8"
)

// ErrInvalidName is fencing.ErrInvalidName.
var ErrInvalidName = errors.New("invalid name")

// Sep ends a name in every key; no name contains it.
const Sep = "#"

// MaxNameLen is the longest name, in bytes.
const MaxNameLen = 512

// KindSemaphore names a semaphore's queue (fencing.KindSemaphore), whose
// limit record is beside it (LimitKey).
const KindSemaphore = "semaphore"

// Kinds of keys that are no ownership, beside fencing's kinds of queue.
const (
	// KindGroup names the membership keys of an election.RunGroup group,
	// one per replica.
	KindGroup = "group"
	// KindCandidate names the records of election.Run replicas that rank
	// themselves, one per replica and name, next to the election's queue.
	KindCandidate = "candidate"
)

// Prefix is the key range of the queue of one name of one kind ("lock",
// "election"), under root: "leasehold/jobs/billing#lock/". An empty kind
// gives the range of every kind of the name: "leasehold/jobs/billing#".
func Prefix(root, kind, name string) string {
	if kind == "" {
		return root + name + Sep
	}
	return root + name + Sep + kind + "/"
}

// Stem starts the name of every key a session on lease writes in a queue,
// after the queue's prefix: the lease in 16 hex digits and a dash. A
// session's record or membership key is its stem and "0".
func Stem(lease int64) string { return fmt.Sprintf("%016x-", lease) }

// ParseKey splits a key under root into the kind and name of the queue it
// belongs to. It reports false for a key no Prefix(root, ...) starts.
func ParseKey(root, key string) (kind, name string, ok bool) {
	rest, ok := strings.CutPrefix(key, root)
	if !ok {
		return "", "", false
	}
	name, rest, ok = strings.Cut(rest, Sep)
	if !ok || name == "" {
		return "", "", false
	}
	kind, _, ok = strings.Cut(rest, "/")
	if !ok || kind == "" {
		return "", "", false
	}
	return kind, name, true
}

// ValidateName returns nil for a name, or an error wrapping ErrInvalidName
// that says why not.
func ValidateName(name string) error {
	switch {
	case name == "":
		return fmt.Errorf("%w: empty", ErrInvalidName)
	case len(name) > MaxNameLen:
		return fmt.Errorf("%w: %d bytes, more than %d", ErrInvalidName, len(name), MaxNameLen)
	}
	return ValidatePrefix(name)
}

// ValidatePrefix returns nil for a string that starts some valid name (""
// included), or an error wrapping ErrInvalidName.
func ValidatePrefix(p string) error {
	if strings.Contains(p, Sep) {
		return fmt.Errorf("%w: %q contains %q, which ends a name in its keys", ErrInvalidName, p, Sep)
	}
	if err := printable(p); err != nil {
		return fmt.Errorf("%w: %w", ErrInvalidName, err)
	}
	return nil
}

// ValidateRoot returns nil for a root: non-empty, printable, at most
// MaxNameLen bytes.
func ValidateRoot(root string) error {
	switch {
	case root == "":
		return errors.New("empty root")
	case len(root) > MaxNameLen:
		return fmt.Errorf("root of %d bytes, more than %d", len(root), MaxNameLen)
	}
	if err := printable(root); err != nil {
		return fmt.Errorf("root: %w", err)
	}
	return nil
}

// printable returns nil if s is valid UTF-8 made of printable characters:
// keys are shown by etcdctl, logs and terminals.
func printable(s string) error {
	if !utf8.ValidString(s) {
		return fmt.Errorf("%q is not valid UTF-8", s)
	}
	if i := strings.IndexFunc(s, func(r rune) bool { return !unicode.IsPrint(r) }); i >= 0 {
		return fmt.Errorf("%q has an unprintable character at byte %d", s, i)
	}
	return nil
}
