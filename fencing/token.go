package fencing

import (
	"cmp"
	"fmt"
	"strconv"
	"strings"
)

// Token is a fencing token: proof of one ownership of a lock or election
// term. For one name, every later owner's token has a strictly greater
// Revision than every earlier owner's, across crashes, partitions, leader
// changes, compaction and restarts of the same etcd cluster.
//
// Revisions of two different etcd clusters, or of one cluster restored from
// a backup, do not compare: a store fenced by tokens from one cluster must
// not be handed tokens from another. Cluster names the cluster, so that a
// store can refuse a token of another one (fencing/sqlfence does) instead of
// comparing numbers that mean nothing to each other.
type Token struct {
	Name     string `json:"name"`     // the lock or election name, exactly as the caller gave it
	Revision int64  `json:"revision"` // create revision of the owner's key
	// Cluster is the ID of the etcd cluster that issued the token, as its
	// responses' headers report it; 0 when unknown (a token made by hand, or
	// read from text that had none).
	Cluster uint64 `json:"cluster,string,omitempty"`
}

// String returns the token as text that ParseToken reads back: the name,
// with '%', space, control and non-ASCII bytes percent-escaped, then '@' and
// the decimal revision, and, when Cluster is known, '#' and the cluster ID in
// lower-case hex as etcd prints it: "jobs/billing@1234#cdf818194e3a8c32". The
// text is printable ASCII, so it fits in an HTTP header or a log line
// unchanged. ('#' never occurs in a name, so it cannot be mistaken for one.)
func (t Token) String() string {
	var b strings.Builder
	for i := 0; i < len(t.Name); i++ {
		c := t.Name[i]
		if mustEscape(c) {
			fmt.Fprintf(&b, "%%%02X", c)
		} else {
			b.WriteByte(c)
		}
	}
	b.WriteByte('@')
	b.WriteString(strconv.FormatInt(t.Revision, 10))
	if t.Cluster != 0 {
		b.WriteByte('#')
		b.WriteString(strconv.FormatUint(t.Cluster, 16))
	}
	return b.String()
}

func mustEscape(c byte) bool { return c == '%' || c <= ' ' || c > '~' }

// ParseToken reads a token written by Token.String. It accepts exactly the
// texts String produces for valid names and positive revisions; anything
// else returns an error wrapping ErrInvalidToken.
func ParseToken(s string) (Token, error) {
	t, err := parseToken(s)
	if err != nil {
		return Token{}, fmt.Errorf("fencing: ParseToken: %w", err)
	}
	return t, nil
}

func parseToken(s string) (Token, error) {
	s, clusterText, hasCluster := strings.Cut(s, "#")
	var cluster uint64
	if hasCluster {
		c, err := parseCluster(clusterText)
		if err != nil {
			return Token{}, fmt.Errorf("%w: %q: %v", ErrInvalidToken, s+"#"+clusterText, err)
		}
		cluster = c
	}
	at := strings.LastIndexByte(s, '@')
	if at < 0 {
		return Token{}, fmt.Errorf("%w: %q has no '@'", ErrInvalidToken, s)
	}
	rev, err := parseRevision(s[at+1:])
	if err != nil {
		return Token{}, fmt.Errorf("%w: %q: %v", ErrInvalidToken, s, err)
	}
	name, err := unescapeName(s[:at])
	if err != nil {
		return Token{}, fmt.Errorf("%w: %q: %w", ErrInvalidToken, s, err)
	}
	return Token{Name: name, Revision: rev, Cluster: cluster}, nil
}

// parseCluster reads the cluster ID as String writes it: lower-case hex, no
// leading zeros, not zero; one spelling per token keeps tokens comparable as
// text.
func parseCluster(s string) (uint64, error) {
	if s == "" || s[0] == '0' || strings.Trim(s, "0123456789abcdef") != "" {
		return 0, fmt.Errorf("cluster %q is not non-zero lower-case hex without leading zeros", s)
	}
	return strconv.ParseUint(s, 16, 64)
}

func parseRevision(s string) (int64, error) {
	if s == "" || s[0] < '1' || s[0] > '9' {
		return 0, fmt.Errorf("revision %q is not a positive decimal without leading zeros", s)
	}
	return strconv.ParseInt(s, 10, 64)
}

func unescapeName(s string) (string, error) {
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c != '%' {
			if mustEscape(c) {
				return "", fmt.Errorf("byte %#x must be escaped", c)
			}
			b.WriteByte(c)
			continue
		}
		if i+3 > len(s) {
			return "", fmt.Errorf("truncated escape at %d", i)
		}
		v, ok := unhex(s[i+1], s[i+2])
		if !ok || !mustEscape(v) {
			return "", fmt.Errorf("bad escape %q at %d", s[i:i+3], i)
		}
		b.WriteByte(v)
		i += 2
	}
	name := b.String()
	return name, ValidateName(name)
}

func unhex(hi, lo byte) (byte, bool) {
	h, ok1 := hexVal(hi)
	l, ok2 := hexVal(lo)
	return h<<4 | l, ok1 && ok2
}

// hexVal accepts upper-case digits only: String never writes lower case, and
// one spelling per token keeps tokens comparable as text.
func hexVal(c byte) (byte, bool) {
	switch {
	case '0' <= c && c <= '9':
		return c - '0', true
	case 'A' <= c && c <= 'F':
		return c - 'A' + 10, true
	}
	return 0, false
}

// Compare orders tokens of one name by Revision: -1 if t is older than u, 0
// if they are the same ownership, +1 if t is newer. Tokens of different names
// say nothing about each other's ownership; for them Compare returns the
// order of their names, so it stays a total order fit for sorting, and never
// panics. Tokens of one name and revision from different clusters (Cluster
// differs) are different ownerships that do not compare either: Compare
// orders them by Cluster only to stay a total order.
func (t Token) Compare(u Token) int {
	if t.Name != u.Name {
		return cmp.Compare(t.Name, u.Name)
	}
	return cmp.Or(cmp.Compare(t.Revision, u.Revision), cmp.Compare(t.Cluster, u.Cluster))
}
