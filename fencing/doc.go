// Package fencing gives distributed locks on etcd (Mutex, Semaphore,
// RWMutex) whose holders carry a fencing token: a number that grows with
// every new owner, so that a store can refuse the writes of an owner that
// has been replaced without knowing it.
//
// A Session is one etcd lease, kept alive. It vouches for the lease until
// ValidUntil, computed from the send time of the last acknowledged renewal so
// that it passes before the server can expire the lease; Done closes then, or
// as soon as the lease is revoked or the session closed.
//
// A Mutex is a queue of keys under one name, ordered by create revision. Lock
// queues one key per call and returns a Hold once that key is the oldest;
// the key's create revision is the Hold's Token. Revisions only grow, so
// tokens of successive owners strictly increase.
//
// A Semaphore lets the Limit oldest keys of its queue hold at once (at most
// N workers of a job), and an RWMutex any number of readers or one writer,
// first come, first served; their holds are Holds too, with tokens, watched
// contexts and guarded writes.
//
// What a Hold does not do is stop a process that pauses while it holds: after
// a long GC pause or SIGSTOP, a former owner can still run code that believes
// it owns the lock. Two things make that harmless: writes into etcd guarded by
// Hold.IsOwner (package guard builds them), and writes elsewhere that carry
// the token, so the store can refuse a token older than one it has seen.
//
// # Fencing other stores
//
// Package fencing/sqlfence makes a database/sql transaction fenced:
// PostgreSQL or SQLite itself refuses a token older than one it has
// admitted, in the same transaction as the writes it protects. Another
// store that can compare on write fences itself the same way: keep the
// token's revision beside the data and make each write conditional on it.
// Stores that cannot compare can sit behind a gate.Gate (package
// fencing/gate), which refuses tokens older than one it has admitted and
// carries tokens in contexts and HTTP headers; it orders writes within one
// process only.
//
// Revisions are only comparable within one etcd cluster's history. A cluster
// restored from a backup, or a migration to a new cluster, starts from a
// different revision: tokens from before and after must never meet at one
// fence. Reset the fences (or use new names) when the cluster changes.
//
// # Operating locks
//
// WithObserver reports acquisitions, releases, losses, renewals and refused
// writes for metrics, and WithLogger logs them. WithRoot puts a session's
// keys under a root of the application's own instead of DefaultRoot; names
// are written into keys as they are (see ValidateName), so the names that
// share a prefix share a key range, which one etcd grant covers.
//
// Package fencing/inspect is the operator's view, kept out of this package
// because a program that locks needs none of it: the key ranges of names
// (KeyPrefix, SubtreePrefix), each queue as etcd holds it (Read, ReadPrefix:
// owner first, then waiters, each with its identity and lease TTL left), and
// SafetyBudget, which turns a TTL, renewal interval and margin into worst
// cases: with the defaults, a crashed holder's lock passes on within 10.5 s,
// and a partitioned holder's context ends within 9 s, at least 1 s before
// anyone else can own the lock.
package fencing
