// Package fencingtest is leasehold's test kit: it runs a real etcd inside
// your test binary and breaks it the way production does, so that you can
// test what your code does when it loses a lock or a leadership: stop its
// work, have its stale writes refused, hand over, campaign again. Nothing in
// it mocks etcd: a partition is a TCP proxy that stops forwarding bytes, an
// expiry is a lease revoked on the server, a paused process is a real
// process sent SIGSTOP. The project's own tests run on it.
//
// Import it from _test.go files only. No package of leasehold imports it,
// and neither should a production binary: it links etcd's server.
//
// # The pieces
//
// A Cluster is one member (Single) or three (Three, for the faults that need
// a quorum), on free loopback ports, with data in temporary directories and
// everything stopped by the test's cleanup. Its Admin client plays the
// operator and the rest of the world.
//
// Each simulated process gets its own client through its own fault point:
// ProxiedClient returns the client and its Link, a TCP proxy per member.
// Faults on a Link hit that process and no other: Blackhole (a partition)
// and Restore (the heal), Delay, StallRenewals (a pause of the renewal
// goroutine only). The faults on a name or a lease are one call on
// the Cluster: Revoke, RevokeOwner and DeleteOwner (expiry and the operator),
// Compact; the member faults are Stop, Restart, StopLeader, ReplaceMember and
// MoveLeader. Each says what the code under test should see.
//
// Waits are on conditions, with a deadline, never on a sleep: Ended (a
// context ends, and why), WaitNewLeader (a name has a leader other than X),
// WaitFor (any condition: no key of a name left is an empty Queue).
//
// For failovers that cross processes, RegisterHelper and StartHelper run a
// function of your test binary in a subprocess (the binary re-executed), and
// its Proc can be paused with SIGSTOP, resumed and killed with SIGKILL. Use
// Main as TestMain: it runs those helpers, and checks that no goroutine
// outlives the tests (go.uber.org/goleak).
//
// # Testing a fence
//
// A fence over a store of your own (as fencing/sqlfence is for SQL
// databases) passes FenceConformance, through an adapter of two methods
// (Fence), or shows which case it fails. The cases, each a subtest:
//
//   - stale token refused: revision 5 after 10 returns ErrStaleToken; value
//     and mark stay 10's.
//   - same token passes again, a retry: the second value wins.
//   - newer token passes: a fresh name reads as nothing admitted; 3, 4 and
//     2^32+5 pass, each the mark after it.
//   - other cluster refused: a token of another cluster, above the mark or
//     below, returns ErrClusterMismatch; nothing is written.
//   - bad input refused: the zero Token, revision 0 or below, no cluster,
//     names ValidateName refuses, a nil ctx: one of the three sentinels, no
//     panic, nothing written.
//   - racing writers: 25 rounds of 8 writers released together, with
//     shuffled tokens above the last round's. From each round's history, one
//     clock for every call and return: no error but ErrStaleToken; the
//     greatest token admitted; no write admitted that was called after a
//     greater token's had returned admitted, none refused unless a greater
//     token was admitted before it returned; then the mark is the greatest
//     token admitted, the value its. A fence that checks in one request and
//     writes in a second loses with odds of about 7 in 8 a round once the
//     checks overlap, as they do when each request waits for a reply.
//   - frozen writer: the test binary runs again (its TestMain too), filtered
//     to this case, with an environment variable that makes the case play
//     the writer. It locks
//     a lock on a real etcd, confirms with a txn that it owns it, says so on
//     stdout and waits on stdin. The test stops it (SIGSTOP), revokes its
//     lease, locks the lock itself with a greater token, writes through its
//     own Fence, and resumes the writer (SIGCONT), whose write with its old
//     token must return ErrStaleToken and leave the successor's value and
//     mark. This catches a fence that checks in the writer's process: marks
//     cached in memory, a gate.Gate.
//
// The writer stops before its Write, unless the Fence has SetPause (see
// Fence): then it stops where Write pauses, between its requests, and the
// racing writers pause there too until each has paused or returned, so
// that every check precedes every write. A fence split in two requests
// then fails both cases, whatever the scheduling.
//
// # Settings and cost
//
// The members trade durability for speed: no fsync unless LEASEHOLD_ETCD_FSYNC=1 is set
// (a crash of the machine loses their data, which the tests delete anyway),
// a 25 ms raft heartbeat and a 250 ms election timeout, so a member fault resolves within
// about half a second, and their logs discarded. Leases still last at least
// their TTL, and etcd's expiry scan still runs every 500 ms. Clients made
// here probe their connections every second.
//
// The first build of a test that imports this package also compiles etcd's
// server and its dependencies (bbolt, raft, gRPC's server side), which takes
// a while on a small machine; the build cache makes later builds as fast as
// any.
//
// Helpers take a TB: a *testing.T, *testing.B or *testing.F. Background
// returns one for code outside a test, such as the examples below.
package fencingtest
