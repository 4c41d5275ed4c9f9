// Package sqlfence makes a database/sql transaction fenced: the database
// itself refuses a fencing token older than one it has already admitted, in
// the same atomic step as the writes the token protects. A former lock holder
// or leader that was paused or partitioned past its lease, and wakes up to
// commit, is stopped by the database, whatever its own clocks and checks
// believed.
//
// The fence is one table (DefaultTable, created by Migrate) with one row per
// fenced name: the highest revision admitted under it and the etcd cluster
// that issued it. Tx begins a transaction, raises the fence row to the token
// in its first statement, runs the caller's statements and commits; Admit
// does the raise inside a transaction the caller manages. The raise is an
// upsert that only ever raises and that holds the fence row's lock until the
// transaction ends. It uses only database/sql: the caller brings the driver.
//
// # The guarantee
//
// Of two transactions fenced under one name with tokens t1 < t2 (one etcd
// cluster), t1's can never commit after t2's: once t2's raise has run, t1's
// raise either waits for t2's transaction to end and then finds the fence at
// t2 (fencing.ErrStaleToken, rolled back), or t1's transaction ended before.
// The same token passes again (a retry). Why, per dialect, at its default
// isolation:
//
//   - PostgreSQL (READ COMMITTED): INSERT ... ON CONFLICT DO UPDATE locks the
//     conflicting row, and an update under READ COMMITTED that waited for a
//     row lock re-reads the row's newest committed version: t1's raise blocks
//     on the row lock t2's raise holds until t2 commits, then sees revision t2
//     and updates nothing. A first insert of a name by two transactions at
//     once is settled by the primary key: the second waits for the first and
//     takes the DO UPDATE path. Under REPEATABLE READ or SERIALIZABLE the
//     same conflict is a serialization failure (SQLSTATE 40001) instead,
//     which also rolls back, and may hit the newer token too when the two
//     overlap: retry it, as any serializable transaction.
//   - SQLite: the raise is a write, and a database has one writer at a time;
//     the write lock is taken by the raise's statement and held until commit,
//     so fenced transactions of any names are serialised and each sees the
//     newest committed fence. Set a busy timeout (modernc.org/sqlite:
//     "_pragma=busy_timeout(10000)") or concurrent writers get SQLITE_BUSY
//     errors (safe, but errors). A transaction that reads before Admit (so
//     it holds a read snapshot) gets SQLITE_BUSY at once, whatever the busy
//     timeout, when another writer holds the lock; "_txlock=immediate" makes
//     every transaction take the write lock at BEGIN and avoids it. A new
//     file turned to WAL ("_pragma=journal_mode(WAL)") refuses, with
//     SQLITE_BUSY, connections that open while its first one converts it.
//
// Tokens carry the ID of the etcd cluster that issued them (fencing.Token's
// Cluster). A token of another cluster than the row's is refused with
// fencing.ErrClusterMismatch, never compared: revisions of two clusters mean
// nothing to each other. After etcd was rebuilt, or restored from a snapshot:
//
//   - restored with 'etcdutl snapshot restore --bump-revision N
//     --mark-compacted' (N above any revision the old cluster reached) and the
//     same cluster ID, new tokens are greater than every old one: nothing to do;
//   - restored without the bump under the same cluster ID, new revisions may
//     be lower than the fence, and new owners get ErrStaleToken; tokens of
//     the old history carry the same ID, so nothing can tell them apart:
//     restore again with the bump, or, once every holder of the old history
//     is stopped, delete the fence rows (DELETE FROM leasehold_fence);
//   - a new cluster ID: every token is refused with ErrClusterMismatch until
//     an operator, once no holder of the old cluster can write, calls Reset
//     with the new cluster's ID (etcdctl endpoint status -w json prints it as
//     cluster_id).
//
// # Limits
//
// Only what is written in a fenced transaction is fenced: a write made
// outside it, or in another database, is not. The database must offer a
// row lock or a single writer held to commit, and an atomic insert-or-update
// (PostgreSQL 9.5+, SQLite 3.35+). Fencing under one name serialises the
// transactions of that name (they hold its fence row); names do not block
// each other in PostgreSQL, while in SQLite every write transaction excludes
// every other, fenced or not. The cost is one statement in the transaction
// and no request to etcd.
//
// A holder paused inside a fenced transaction, after its raise, keeps the
// fence row's lock (SQLite: the database's write lock) while it is paused:
// its successors wait, safely. PostgreSQL ends the paused transaction after
// idle_in_transaction_session_timeout; the holder's Tx then returns an error
// wrapping ErrNotCommitted (nothing was written) and the successor goes on
// (lock_timeout fails the waiter instead). SQLite never ends it: a waiter
// fails with SQLITE_BUSY once its busy timeout passes, and the resumed
// holder commits, which is safe, since no newer token committed meanwhile.
package sqlfence
