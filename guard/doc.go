// Package guard makes etcd writes that commit only while an owner still
// holds its lock or term, and contexts that end the moment ownership can no
// longer be proven. An owner is anything that owns one etcd key: a
// *fencing.Hold or an *election.Term.
//
// A guarded txn is decided by etcd at commit time, so it stays exact however
// late the process runs: a holder paused past its lease gets ErrNotOwner, not
// a lost update. A watched context is the other half: it tells running work
// to stop, no later than the session's ValidUntil, so that it rarely gets as
// far as a write that would fail. Health is the check for the rest: a
// liveness probe that fails while work goes on past the end of its
// ownership.
//
// A guarded txn is sent once: the caller's writes need not be idempotent,
// so the library never sends them again. Its errors say what the caller may
// conclude: ErrNotOwner (ownership lost, nothing applied), ErrOutcomeUnknown
// (sent, no answer: it may have been applied, or may yet be; re-read before
// retrying), anything else (etcd refused it, or ctx ended before it was
// sent: nothing applied).
//
// A watched context ends with a cause (context.Cause): fencing.ErrKeyDeleted
// when the owner key was deleted or replaced (also wrapping
// fencing.ErrLeaseExpired when it went with its lease), the session's Err,
// fencing.ErrNotHeld or election.ErrNotLeader once the owner gave it up, or
// the parent's cause.
package guard
