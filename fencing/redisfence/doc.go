// Package redisfence makes writes into Redis fenced: Redis itself refuses a
// fencing token older than one it has already admitted, in the same atomic
// step as the writes the token protects. A former lock holder or leader that
// was paused or partitioned past its lease, and wakes up to write, is
// stopped by Redis, whatever it believed.
//
// Each fenced name has a mark, the string key "leasehold:fence:{NAME}"
// holding the etcd cluster's ID (hex) and the highest revision admitted.
// Fence.Do runs one Lua script (EVALSHA, and EVAL once when the server does
// not have it): it compares the token with the mark, raises the mark, and
// applies the caller's Ops, with their results. Redis runs a script alone,
// so no other command sees the compare without the writes. Tokens of
// another etcd cluster are refused with fencing.ErrClusterMismatch, as in
// sqlfence, and Reset adopts a new cluster.
//
// Read what a write is computed from inside a Do (Get), or after one under
// the same token: a read made before the token's first Do may predate a
// newer owner's writes, which the write would then overwrite, although it
// passes the fence. The robustness suite's Redis workload loses
// increments exactly so when its read is moved out of the fence.
//
// # Keys and Redis Cluster
//
// A script may touch keys of one hash slot only. The mark's slot is that of
// the hash tag {NAME}, and Do refuses, with ErrCrossSlot, any key in another
// slot, on a single server too, so that code keeps working when the server
// becomes a cluster: name fenced keys with the tag, "{orders}:total" under
// the name "orders". A name that holds '{' or '}' is refused.
//
// # What Redis promises
//
// One primary (Redis 7.0 or newer) is a real fence: its scripts are atomic
// and see every write acknowledged before them, as long as it keeps the
// marks: a maxmemory-policy of noeviction or volatile-* (marks have no
// TTL), never allkeys-*, which evicts an idle name's mark and reopens it. Replication is asynchronous: a primary that
// fails over before its replicas have a mark and the writes after it loses
// both, and the replica promoted may then admit an older token. WAIT
// narrows that window (Redis 7.2's WAITAOF too; Debian's 7.0 lacks it) but
// does not close it, and a pooled client may send it on another connection
// than the script's, where it waits for nothing; send it yourself, on the
// script's connection, where you need it. Without persistence (no AOF, or
// appendfsync other than always) a restart loses marks the same way. Delete
// a mark only when no holder of an older token can write: that reopens the
// fence to every token.
//
// The library links no Redis client: New takes a Client, one method that
// go-redis or rueidis provide in a few lines (see the examples). On a
// cluster the client must route EVALSHA by its first key, as go-redis's
// ClusterClient does; a rueidis adapter then builds the command with Keys.
package redisfence
