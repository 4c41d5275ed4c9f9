// Package election is leader election on the revision mutex: Campaign,
// TryCampaign, Proclaim, Resign, Leader and Observe, and Run, the singleton
// worker.
//
// An election is a queue of keys under one name, ordered by create revision;
// the leader is the oldest key, and its create revision is the term's fencing
// token. A Term is a guard.Owner: guard.Txn makes writes that commit only
// while the term lasts, and Term.Context ends the moment it cannot be proven.
//
// Run makes its own sessions: configure them (TTL, safety margin, identity,
// root, logger, observer) with WithSessionOptions and fencing's session
// options. Run logs its own events to the logger given there.
//
// At most one valid term exists at any moment. A process that paused or lost
// its network may still run code for a term that has ended, until it sees its
// context end; fence the effects of leader-only work with the term's token or
// guarded txns.
package election
