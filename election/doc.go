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
// # Preferred leaders: Priority, WithDrain, Weight
//
// Whichever replica campaigns first leads, unless the replicas rank
// themselves. With Priority (or PriorityVersion, from a build version), Run
// keeps a record next to the name's queue, on its session's lease, and
// campaigns only while no live candidate ranks above it; a leader that sees
// a higher one appear ends its work's context with a cause wrapping
// ErrPreempted, waits up to two seconds for that candidate to queue right
// behind it, and resigns, so that it takes over one round trip later and
// no lower-ranked candidate leads in between (an unranked replica queued
// right behind the leader still does, and keeps leading: see below). Equal
// priorities never preempt each other. In a rolling upgrade with priority = version, where each new
// replica is up before the old one it replaces stops, leadership moves
// once, to the first new replica; when the old leader stops before any new
// replica is up, leadership goes to another old one meanwhile, and moves a
// second time when the first new one comes up. Set the version from the
// build:
//
//	var version = "v1.5.0" // go build -ldflags "-X main.version=$(git describe --tags)"
//	election.Run(ctx, cli, "migrations", host, work, election.PriorityVersion(version))
//
// WithDrain moves leadership off a replica on demand (before maintenance)
// and keeps it off while another replica that is not drained runs. With
// RunGroup, Priority and WithDrain rank the replicas the same way (a name
// goes only to the highest-ranked replicas that list it, balanced among
// them), and Weight sets a replica's share. During a rolling upgrade ranked
// by version, each new replica takes its share from the new ones before it
// (the bounded loads may also move a name between two of those), and a name
// moves at most once per new replica, the first taking them all
// (TestGroupRollingUpgrade). Once in all is not possible with balance: the
// first new replica must lead every name until a second one comes. A
// RunGroup replica of a leasehold from before ranks assigns names without
// ranks or weights, and each replica campaigns only for the names it
// assigns itself: exclusion holds, but while both versions run, a name each
// side assigns to the other's replica is led by neither. Bring every
// replica of a group to a leasehold with ranks before setting Priority,
// WithDrain or Weight on any.
//
// Every name listed by a running replica has a leader within a bound: once
// the last leader's key is gone (at once for a replica that stops or gives
// way; its TTL plus etcd's expiry scan of up to half a second for one that
// crashed or is cut off), the highest-ranked live candidates campaign, and
// one leads within a few round trips, or, when its work keeps failing,
// after its backoff (at most WithBackoff's max, 5 s unset); a preempted
// leader delays the handover by at most two seconds more. With the defaults
// that is: a few round trips after a stop, a handover or a drain; 10.5 s
// plus a few round trips after a crash or a partition (a RunGroup
// replica's names go with its membership key, on the same lease, and the
// others learn of it by a watch event); 2 s more while a preempted leader
// hands over; 5 s more per failed work, and a RunGroup replica declines a
// name after three. The suite's group workload checks only that every name
// is led within a minute once its faults stop (TestGroupUnderFaults, the
// soak).
// Priorities only decide who campaigns and who gives way: the queue alone decides who
// leads, so terms never overlap whatever the priorities, and a replica
// cut off from etcd has no session, so no record, and cannot hold the
// name from a lower one. Replicas that rank nothing, or run a leasehold
// from before ranks, queue as ever and never give way; ranked ones queue
// behind them like any other, so exclusion holds across versions.
// Observe sends the ranked candidates with the leader, each marked
// preferred or not.
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
