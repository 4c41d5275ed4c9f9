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
// # RunGroup: balance, liveness and cost
//
// Balance: with R replicas listing the same N names, once the replicas have
// seen each other no replica leads more than ⌈N/R⌉ of them. A replica that
// joins takes about N/(R+1) names, and one that leaves gives up only about
// its own: each moves by a handoff, in which the current leader's work
// context ends with a cause wrapping ErrRebalanced, the term is resigned once
// work returns, and the replica the name moves to, already waiting in the
// name's election, leads it one round trip later. A replica that crashes
// gives up its names when its lease expires: within its TTL plus etcd's
// expiry scan.
//
// Liveness: a replica whose terms of a name fail three times in a row (work
// returns an error, or the term is lost) declines the name, and the name
// moves to another replica willing to lead it: within three failed works
// and the backoffs between them (about a second with the default backoff),
// plus one round trip. A decline lasts five minutes and is renewed while the
// replica still fails the name (when every replica has declined a name, it
// is assigned as if none had, and stays where it fails); declines outlive a
// lost session. A replica that fails every name sheds them one at a time,
// each after three failures, since the cap gives it others meanwhile. A
// replica that is partitioned loses its lease, and its names, within its
// TTL plus etcd's expiry scan.
//
// Cost: a replica has one session, so one lease and one keepalive, for its
// membership and all its terms, and learns of changes by watches: at idle
// it sends nothing but keepalives.
//
// Callbacks and values: OnStartedLeading and OnStoppedLeading run in the
// goroutine of their name, so calls for different names may run at once.
// Each term's value, as observers see it, is the session's identity
// (fencing.WithIdentity).
//
// Leaving: when ctx ends, RunGroup removes its membership key, so that the
// others take its names at once, ends every work's context with ctx's
// cause, and resigns each name once its work returns. Once the works have
// returned, it spends at most a second on the membership key, one on the
// resigns (sent together) and one on revoking its lease: an unreachable etcd
// delays it by no more. Bad arguments: fencing.ErrInvalidArgument for a nil
// ctx, client, work or option, no names, or a name twice.
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
