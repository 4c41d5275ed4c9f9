// Package election is leader election on the revision mutex, in three
// forms:
//
//   - Campaign or TryCampaign, then the Term: you hold leadership yourself,
//     Proclaim a value, and Resign. Leader and Observe tell anyone who leads.
//   - Run, the singleton worker: it campaigns, runs your work under the
//     term's context, campaigns again after a loss, and resigns when its ctx
//     ends.
//   - RunGroup, many names spread across a group's replicas, each led as by
//     Run: a replica that joins or leaves moves about its share, and its
//     terms share one session.
//
// An election is a queue of keys under one name, ordered by create revision;
// the leader is the oldest key, and its create revision is the term's fencing
// token. A Term is a guard.Owner: guard.Txn makes writes that commit only
// while the term lasts, and Term.Context ends the moment it cannot be proven.
// At most one valid term exists at a time, but a paused or partitioned
// process may run on for an ended term until it sees its context end: fence
// leader-only effects with the token or guarded txns.
//
// The replica of Run or RunGroup that campaigns first leads, unless ranked:
// with Priority or PriorityVersion the highest live ones lead, WithDrain
// moves leadership off a replica on demand, and Weight sets a RunGroup
// replica's share. A rank decides who campaigns and who gives way, never
// who leads: the queue does, so terms never overlap. Ranked by version, a
// rolling upgrade whose new replicas start before the old ones stop moves
// leadership once, to the first new replica:
//
//	var version = "v1.5.0" // go build -ldflags "-X main.version=$(git describe --tags)"
//	election.Run(ctx, cli, "migrations", host, work, election.PriorityVersion(version))
//
// A replica that stops or gives way hands over within a few round trips (a
// ranked one waits up to two seconds for the right candidate to queue
// behind it); one that crashes or is cut off, within its TTL plus etcd's
// expiry scan (10.5 s by default). Run and RunGroup make their own sessions,
// configured by WithSessionOptions, and log to the logger given there: debug
// for normal ends, warn for losses and failures.
package election
