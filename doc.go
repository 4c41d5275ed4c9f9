// Package leasehold is leader election and distributed locking on etcd v3
// that stays correct when processes pause, networks split and etcd members
// die.
//
// A lock that only excludes on a good day is not enough: a holder that pauses
// for longer than its lease (GC, SIGSTOP, a slow disk) wakes up believing it
// still owns the lock while another process already does. leasehold is built
// on three ideas that close that gap:
//
//  1. The revision mutex hands out a fencing token. A lock is a queue of keys
//     under one name, ordered by etcd create revision; the owner is the oldest
//     key, and its create revision is its token. Revisions only grow, so each
//     new owner of a lock holds a strictly greater token than every earlier
//     one (package fencing).
//  2. Guarded writes are etcd transactions that check ownership. A write that
//     must only happen while the lock is held is one txn whose first compare
//     is the owner key's create revision: etcd decides atomically at commit
//     time, with no clock involved (package guard).
//  3. Ownership watchers cancel the work context the moment ownership can no
//     longer be proven: key deleted, lease revoked or expired, or the lease
//     not renewed in time, which is checked against the send time of the last
//     acknowledged renewal so the holder stops before the server can give the
//     lock away (packages guard and election).
//
// Writes into stores other than etcd carry the token, and the store rejects
// any token older than one it has already seen, in the same atomic step as
// the write: package fencing/sqlfence makes a database/sql transaction
// fenced, so a PostgreSQL or SQLite database refuses a paused former
// holder's commit; a gate.Gate (fencing/gate) checks tokens within one
// process.
//
// # Quick start
//
//	s, err := fencing.NewSession(ctx, cli, fencing.WithTTL(10*time.Second))
//	m, err := fencing.NewMutex(s, "jobs/billing")
//	h, err := m.Lock(ctx)
//	defer h.Unlock(ctx)
//	// h.Token() goes with every write this holder makes elsewhere;
//	// guard.Txn(ctx, h) makes writes into etcd that commit only while h holds.
//
// For a singleton worker across replicas, use election.Run.
//
// # Operating it
//
// A name is written into its keys as it is, after a root ("leasehold/" unless
// fencing.WithRoot says otherwise): the lock "jobs/billing" queues under
// "leasehold/jobs/billing#lock/", so one etcd grant of "leasehold/jobs/"
// covers every name under "jobs/". Package fencing/inspect is the operator's
// view: inspect.SubtreePrefix and inspect.KeyPrefix compute the key ranges to
// grant, inspect.Read shows a queue as etcd holds it (the owner, then the
// waiters, with identity and lease TTL left), and the command
// examples/inspect prints them. fencing.WithObserver reports every
// acquisition, release, loss, renewal and write refused for a lost
// ownership (guarded txns, Proclaim, Resign), for metrics; a gate.Gate
// reports the tokens it refuses to its own OnReject. fencing.WithLogger logs them
// with log/slog. guard.Health is a liveness
// probe that fails while a process acts on an ownership past its ValidUntil.
// inspect.SafetyBudget computes the worst cases of a TTL and margin: for the
// defaults, a crashed holder's lock is taken over within 10.5 s, and a
// partitioned holder's context ends within 9 s, at least 1 s before anyone
// else can own.
package leasehold
