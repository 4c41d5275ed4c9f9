// Package gate fences a store that cannot compare tokens itself. A Gate
// remembers, per name, the highest fencing.Token it has admitted and refuses
// older ones with fencing.ErrStaleToken: a former owner paused or
// partitioned past its lease is refused once its successor has written.
//
// Gate.Do admits a token and runs the write while no other Do of that name
// runs in this process. That ordering holds within one process only: when
// several processes guard one store, even sharing marks in an EtcdStore, a
// slow write admitted by one can land after a newer one admitted by
// another. Such a store must check the token in the same transaction as
// the write (fencing/sqlfence does). Marks, one per name ever admitted,
// live in memory unless the Gate's Store keeps them elsewhere (EtcdStore).
//
// Tokens travel in a context (WithToken, FromContext) and in the
// Leasehold-Token header: SetHeader on the client, Gate.Middleware on the
// server.
package gate
