// Package robust is a robustness suite in the spirit of Jepsen: workers
// contend for one lock and make guarded and fenced writes while processes
// are paused and killed, links blackholed, members stopped, history
// compacted, leases revoked and keys deleted; a checker then verifies the
// history. It has no code of its own: see its _test.go files and
// RELIABILITY.md.
package robust
