// Package election is leader election on the revision mutex: Campaign,
// TryCampaign, Proclaim, Resign, Leader and Observe; Run, the singleton
// worker; and RunGroup, many singletons balanced across replicas.
//
// An election is a queue of keys under one name, ordered by create revision;
// the leader is the oldest key, and its create revision is the term's fencing
// token. A Term is a guard.Owner: guard.Txn makes writes that commit only
// while the term lasts, and Term.Context ends the moment it cannot be proven.
//
// RunGroup gives each replica of a group about its share of the group's
// names, each an election of its own: a replica that joins or leaves moves
// few names, each by a handoff, and all of a replica's names share one
// session.
//
// Run and RunGroup make their own sessions: configure them (TTL, safety margin, identity,
// root, logger, observer) with WithSessionOptions and fencing's session
// options. They log their own events to the logger given there.
//
// At most one valid term exists at any moment. A process that paused or lost
// its network may still run code for a term that has ended, until it sees its
// context end; fence the effects of leader-only work with the term's token or
// guarded txns.
package election
