package fencingtest

import "github.com/leasehold/leasehold/internal/testbed/kit"

// The kit lends the project's own tests (internal/testbed/etcdtest) what
// only they need, without a name in its public API.
func init() {
	kit.Lend("SingleJWT", singleJWT)
	kit.Lend("SingleTokenTTL", singleTokenTTL)
	kit.Lend("WithAuth", withAuth)
	kit.Lend("EnableAuth", (*Cluster).enableAuth)
	kit.Lend("Leader", (*Cluster).leader)
	kit.Lend("NewLinkTo", (*Cluster).newLinkTo)
	kit.Lend("BlackholeRequests", (*Link).blackholeRequests)
	kit.Lend("Running", (*Member).running)
	kit.Lend("Mutex", mutex)
}
