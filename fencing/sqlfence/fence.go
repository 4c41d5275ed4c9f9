package sqlfence

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strconv"

	"github.com/leasehold/leasehold/fencing"
)

// DefaultTable is the fence table's name unless WithTable says otherwise.
const DefaultTable = "leasehold_fence"

// ErrNotCommitted is returned by Tx when the database ended the transaction
// before it committed: nothing it wrote was applied. PostgreSQL does so to
// a holder paused in a transaction past idle_in_transaction_session_timeout
// (SQLSTATE 25P03), as drivers that report SQLSTATEs (pgx) tell it. The
// error also wraps the driver's.
var ErrNotCommitted = errors.New("transaction ended by the database, not committed")

// Fence is a fence table in one database: one row per fenced name, holding
// the highest token admitted under it and the etcd cluster that issued it.
// A Fence is safe for concurrent use; it keeps no state of its own besides
// its configuration, so any number of Fences, in any number of processes,
// may share one table.
type Fence struct {
	db      *sql.DB
	dialect Dialect
	table   string
	name    string // fence every token under this name; "" means the token's own
	sql     statements
}

// Option configures New. A nil Option is ignored.
type Option func(*Fence)

// WithTable names the fence table: a lower-case SQL identifier (letters,
// digits, '_'), schema-qualified ("ops.fences") only in PostgreSQL. Unset:
// DefaultTable, resolved through the connection's search_path; behind a
// pooler (pgbouncer in transaction mode) where a session's search_path may
// differ, qualify it. New refuses any other name with
// fencing.ErrInvalidArgument.
func WithTable(table string) Option { return func(f *Fence) { f.table = table } }

// WithName fences every token under name (a resource, say "ledger") instead
// of under the token's own name. Use it when the resource's writers hold a
// lock whose name is not the resource's; every writer of one resource must
// then fence under the same name, and only the newest ownership among all
// the tokens it is given passes. New refuses a name that
// fencing.ValidateName refuses.
func WithName(name string) Option { return func(f *Fence) { f.name = name } }

// New returns the fence table table of db, in dialect d. It writes nothing
// and does not talk to the database: call Migrate once per start to create
// the table. It returns fencing.ErrInvalidArgument for a nil db, an unknown
// dialect or a bad table name, and fencing.ErrInvalidName for a bad
// WithName.
func New(db *sql.DB, d Dialect, opts ...Option) (*Fence, error) {
	f := &Fence{db: db, dialect: d, table: DefaultTable}
	for _, o := range opts {
		if o != nil {
			o(f)
		}
	}
	if db == nil {
		return nil, fmt.Errorf("sqlfence: New: %w: nil db", fencing.ErrInvalidArgument)
	}
	if !validTable(d, f.table) {
		return nil, fmt.Errorf("sqlfence: New: %w: table %q is not a lower-case SQL identifier (schema-qualified only in PostgreSQL)",
			fencing.ErrInvalidArgument, f.table)
	}
	if f.name != "" {
		if err := fencing.ValidateName(f.name); err != nil {
			return nil, fmt.Errorf("sqlfence: New: %w", err)
		}
	}
	var ok bool
	if f.sql, ok = d.statements(f.table); !ok {
		return nil, fmt.Errorf("sqlfence: New: %w: unknown dialect %v", fencing.ErrInvalidArgument, d)
	}
	return f, nil
}

// Migrate creates the fence table if it does not exist. It is safe to run at
// every start and from many processes at once (PostgreSQL: under an advisory
// lock, as concurrent CREATE TABLE IF NOT EXISTS can fail there; SQLite:
// under its one write lock). It changes no existing row.
func (f *Fence) Migrate(ctx context.Context) error {
	if err := f.usable(ctx); err != nil {
		return fmt.Errorf("sqlfence: Migrate: %w", err)
	}
	tx, err := f.db.BeginTx(ctx, nil)
	if err != nil {
		return fmt.Errorf("sqlfence: Migrate %s: %w", f.table, dbError(err))
	}
	defer tx.Rollback()
	if f.sql.lock != "" {
		if _, err := tx.ExecContext(ctx, f.sql.lock, f.table); err != nil {
			return fmt.Errorf("sqlfence: Migrate %s: %w", f.table, err)
		}
	}
	for _, stmt := range f.sql.create {
		if _, err := tx.ExecContext(ctx, stmt); err != nil {
			return fmt.Errorf("sqlfence: Migrate %s: %w", f.table, err)
		}
	}
	if err := tx.Commit(); err != nil {
		return fmt.Errorf("sqlfence: Migrate %s: %w", f.table, err)
	}
	return nil
}

// Tx runs fn in a transaction fenced by t: it begins, raises the fence of
// t's name to t in the transaction's first statement (which holds the fence
// row's lock until the transaction ends), runs fn, and commits. Of two transactions fenced under
// one name with tokens t1 < t2, t1's never commits after t2's.
//
// A token older than the fence returns an error wrapping
// fencing.ErrStaleToken, and a token of another etcd cluster one wrapping
// fencing.ErrClusterMismatch: fn does not run and nothing is written. The
// same token admitted again passes (a retry). fn's error and ctx's end are
// returned as they are, after a rollback; a transaction the database ended
// returns ErrNotCommitted. Any other error of the commit leaves the outcome
// unknown, as with any transaction. Bad input (an invalid token, a nil ctx
// or fn, a closed db) returns a fencing sentinel and writes nothing.
func (f *Fence) Tx(ctx context.Context, t fencing.Token, fn func(*sql.Tx) error) error {
	if err := f.check(ctx, t); err != nil {
		return fmt.Errorf("sqlfence: Tx %v: %w", t, err)
	}
	if fn == nil {
		return fmt.Errorf("sqlfence: Tx %v: %w: nil func", t, fencing.ErrInvalidArgument)
	}
	tx, err := f.db.BeginTx(ctx, nil)
	if err != nil {
		return fmt.Errorf("sqlfence: Tx %v: begin: %w", t, dbError(err))
	}
	committed := false
	defer func() {
		if !committed {
			tx.Rollback() // also when fn panics
		}
	}()
	if err := f.raise(ctx, tx, t); err != nil {
		if endedByServer(err) {
			return fmt.Errorf("sqlfence: Tx %v: %w: %w", t, ErrNotCommitted, err)
		}
		return fmt.Errorf("sqlfence: Tx %v: %w", t, err)
	}
	if err := fn(tx); err != nil {
		if endedByServer(err) {
			return fmt.Errorf("sqlfence: Tx %v: %w: %w", t, ErrNotCommitted, err)
		}
		return err
	}
	// database/sql rolls a transaction back as soon as its ctx ends, and
	// Commit then says only ErrTxDone: report the ctx's end, which is what
	// happened, and not as a commit of unknown outcome.
	if err := ctx.Err(); err != nil {
		return err
	}
	committed = true
	if err := tx.Commit(); err != nil {
		if errors.Is(err, sql.ErrTxDone) && ctx.Err() != nil {
			return ctx.Err()
		}
		if endedByServer(err) {
			return fmt.Errorf("sqlfence: Tx %v: commit: %w: %w", t, ErrNotCommitted, err)
		}
		return fmt.Errorf("sqlfence: Tx %v: commit: %w", t, err)
	}
	return nil
}

// Admit raises the fence of t's name to t inside tx, a transaction the
// caller began on this Fence's database and commits itself: from here until
// tx ends, no transaction with an older token of the name can commit, and
// none with a newer one can pass its own fence. Run it first in tx, before
// the statements it fences, so that they read what earlier owners committed.
//
// Whenever it returns an error (a refusal, fencing.ErrStaleToken or
// fencing.ErrClusterMismatch; bad input; a failure), Admit has rolled tx
// back, so that a caller that misses the error cannot commit the writes it
// meant to fence. Its bad input errors are Tx's, and a tx that already ended
// returns fencing.ErrInvalidArgument.
func (f *Fence) Admit(ctx context.Context, tx *sql.Tx, t fencing.Token) error {
	if tx == nil {
		return fmt.Errorf("sqlfence: Admit %v: %w: nil tx", t, fencing.ErrInvalidArgument)
	}
	err := f.check(ctx, t)
	if err == nil {
		err = f.raise(ctx, tx, t)
	}
	if err != nil {
		tx.Rollback()
		return fmt.Errorf("sqlfence: Admit %v: %w", t, err)
	}
	return nil
}

// raise is the fence's one statement in the common case (an update of the
// name's row), an upsert when that row is missing or refuses, and, only when
// the upsert refuses too, a read of the row (locked by then) that says why.
func (f *Fence) raise(ctx context.Context, tx *sql.Tx, t fencing.Token) error {
	name := f.nameOf(t)
	cluster := strconv.FormatUint(t.Cluster, 16)
	res, err := tx.ExecContext(ctx, f.sql.bump, name, cluster, t.Revision)
	if err != nil {
		return dbError(err)
	}
	if n, err := res.RowsAffected(); err == nil && n == 1 {
		return nil
	}
	var rev int64
	err = tx.QueryRowContext(ctx, f.sql.raise, name, cluster, t.Revision).Scan(&rev)
	if err == nil {
		return nil
	}
	if !errors.Is(err, sql.ErrNoRows) {
		return dbError(err)
	}
	var rowCluster string
	if err := tx.QueryRowContext(ctx, f.sql.read, name).Scan(&rowCluster, &rev); err != nil {
		return dbError(err)
	}
	if rowCluster != cluster {
		return fmt.Errorf("%w: fence %q of table %s holds tokens of etcd cluster %s, this one is of cluster %s. "+
			"If etcd was rebuilt or restored, restore with 'etcdutl snapshot restore --bump-revision' "+
			"or, once no holder of the old cluster can write, adopt the new cluster with sqlfence's Reset",
			fencing.ErrClusterMismatch, name, f.table, rowCluster, cluster)
	}
	return fmt.Errorf("%w: fence %q is at revision %d", fencing.ErrStaleToken, name, rev)
}

// Mark returns the fence of name: the highest token admitted under it (with
// Revision 0 after Reset), and false if nothing was ever admitted.
func (f *Fence) Mark(ctx context.Context, name string) (fencing.Token, bool, error) {
	if err := f.usable(ctx); err != nil {
		return fencing.Token{}, false, fmt.Errorf("sqlfence: Mark: %w", err)
	}
	if err := fencing.ValidateName(name); err != nil {
		return fencing.Token{}, false, fmt.Errorf("sqlfence: Mark: %w", err)
	}
	var cluster string
	var rev int64
	err := f.db.QueryRowContext(ctx, f.sql.read, name).Scan(&cluster, &rev)
	if errors.Is(err, sql.ErrNoRows) {
		return fencing.Token{}, false, nil
	}
	if err != nil {
		return fencing.Token{}, false, fmt.Errorf("sqlfence: Mark %q: %w", name, dbError(err))
	}
	id, err := strconv.ParseUint(cluster, 16, 64)
	if err != nil {
		return fencing.Token{}, false, fmt.Errorf("sqlfence: Mark %q: cluster %q: %w", name, cluster, err)
	}
	return fencing.Token{Name: name, Revision: rev, Cluster: id}, true, nil
}

// Reset makes the fence of name admit every token of etcd cluster cluster,
// and none of any other: the operator's step after etcd was rebuilt or
// restored under a new cluster ID, with the old cluster's holders stopped
// (from the moment Reset commits, their tokens are refused with
// fencing.ErrClusterMismatch). A fence that already names cluster is left
// as it is, so running Reset twice never reopens it to older tokens; for
// the same reason it cannot help after a restore that kept the cluster ID
// without --bump-revision (see the package doc). Session.Cluster, a Token's
// Cluster, and 'etcdctl endpoint status -w json' (cluster_id) give the ID.
// A zero cluster returns fencing.ErrInvalidArgument.
func (f *Fence) Reset(ctx context.Context, name string, cluster uint64) error {
	if err := f.usable(ctx); err != nil {
		return fmt.Errorf("sqlfence: Reset: %w", err)
	}
	if err := fencing.ValidateName(name); err != nil {
		return fmt.Errorf("sqlfence: Reset: %w", err)
	}
	if cluster == 0 {
		return fmt.Errorf("sqlfence: Reset %q: %w: zero cluster", name, fencing.ErrInvalidArgument)
	}
	if _, err := f.db.ExecContext(ctx, f.sql.reset, name, strconv.FormatUint(cluster, 16)); err != nil {
		return fmt.Errorf("sqlfence: Reset %q: %w", name, dbError(err))
	}
	return nil
}

func (f *Fence) nameOf(t fencing.Token) string {
	if f.name != "" {
		return f.name
	}
	return t.Name
}

// usable refuses a nil ctx and a Fence that New did not make.
func (f *Fence) usable(ctx context.Context) error {
	switch {
	case ctx == nil:
		return fmt.Errorf("%w: nil context", fencing.ErrInvalidArgument)
	case f == nil || f.db == nil:
		return fmt.Errorf("%w: Fence not made by New", fencing.ErrInvalidArgument)
	}
	return nil
}

// check refuses what usable refuses and a token that cannot be compared:
// an invalid name, a revision not positive, no cluster.
func (f *Fence) check(ctx context.Context, t fencing.Token) error {
	if err := f.usable(ctx); err != nil {
		return err
	}
	if err := fencing.ValidateName(t.Name); err != nil {
		return err
	}
	switch {
	case t.Revision <= 0:
		return fmt.Errorf("%w: revision %d is not positive", fencing.ErrInvalidToken, t.Revision)
	case t.Cluster == 0:
		return fmt.Errorf("%w: no cluster ID (use a Hold's or Term's token, or ParseToken of its String)", fencing.ErrInvalidToken)
	}
	return nil
}

// endedByServer tells a transaction the server ended before any commit:
// PostgreSQL's idle_in_transaction_session_timeout (SQLSTATE 25P03), as pgx
// reports it through a SQLState method. lib/pq turns every FATAL error into
// driver.ErrBadConn, which says nothing of a commit, so it is not told.
func endedByServer(err error) bool {
	var coded interface{ SQLState() string }
	return errors.As(err, &coded) && coded.SQLState() == "25P03"
}

// dbError marks the errors of a closed *sql.DB or an ended *sql.Tx as
// fencing.ErrInvalidArgument. database/sql exports no sentinel for a closed
// DB, so its text is the only sign.
func dbError(err error) error {
	switch {
	case errors.Is(err, sql.ErrTxDone):
		return fmt.Errorf("%w: transaction already ended: %w", fencing.ErrInvalidArgument, err)
	case err != nil && err.Error() == "sql: database is closed":
		return fmt.Errorf("%w: %w", fencing.ErrInvalidArgument, err)
	}
	return err
}
