package etcdtest

import (
	"time"

	"github.com/leasehold/leasehold/fencing"
	"github.com/leasehold/leasehold/fencing/fencingtest"
	"github.com/leasehold/leasehold/internal/testbed/kit"
)

// What fencingtest lends the project's tests (kit.Lend): each says what it
// does where fencingtest defines it.

// SingleJWT starts a one-member cluster whose auth tokens are JWTs that
// expire after ttl.
func SingleJWT(t fencingtest.TB, ttl time.Duration) *fencingtest.Cluster {
	return kit.Borrow[func(fencingtest.TB, time.Duration) *fencingtest.Cluster]("SingleJWT")(t, ttl)
}

// SingleTokenTTL starts a one-member cluster whose simple auth tokens expire
// after ttl.
func SingleTokenTTL(t fencingtest.TB, ttl time.Duration) *fencingtest.Cluster {
	return kit.Borrow[func(fencingtest.TB, time.Duration) *fencingtest.Cluster]("SingleTokenTTL")(t, ttl)
}

// WithAuth makes a client log in as user.
func WithAuth(user, password string) fencingtest.ClientOption {
	return kit.Borrow[func(string, string) fencingtest.ClientOption]("WithAuth")(user, password)
}

// EnableAuth turns c's authentication on, with a root user whose client
// replaces c.Admin.
func EnableAuth(t fencingtest.TB, c *fencingtest.Cluster) {
	kit.Borrow[func(*fencingtest.Cluster, fencingtest.TB)]("EnableAuth")(c, t)
}

// Leader returns the index of c's member that currently leads, or -1.
func Leader(c *fencingtest.Cluster) int {
	return kit.Borrow[func(*fencingtest.Cluster) int]("Leader")(c)
}

// NewLinkTo is c.NewLink to the given members only.
func NewLinkTo(t fencingtest.TB, c *fencingtest.Cluster, members ...int) *fencingtest.Link {
	return kit.Borrow[func(*fencingtest.Cluster, fencingtest.TB, ...int) *fencingtest.Link]("NewLinkTo")(c, t, members...)
}

// BlackholeRequests holds what l's client sends and lets replies through.
func BlackholeRequests(l *fencingtest.Link) {
	kit.Borrow[func(*fencingtest.Link)]("BlackholeRequests")(l)
}

// Running reports whether m is serving.
func Running(m *fencingtest.Member) bool {
	return kit.Borrow[func(*fencingtest.Member) bool]("Running")(m)
}

// Mutex returns the lock name on s, failing t if it cannot.
func Mutex(t fencingtest.TB, s *fencing.Session, name string) *fencing.Mutex {
	return kit.Borrow[func(fencingtest.TB, *fencing.Session, string) *fencing.Mutex]("Mutex")(t, s, name)
}
