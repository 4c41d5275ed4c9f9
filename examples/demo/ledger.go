package main

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"

	_ "github.com/jackc/pgx/v5/stdlib" // registers "pgx", for --ledger-dsn
	"github.com/leasehold/leasehold/fencing"
	"github.com/leasehold/leasehold/fencing/sqlfence"
	_ "modernc.org/sqlite" // registers "sqlite", the default ledger
)

// ledgerEnv carries the ledger's DSN to the workers: a PostgreSQL DSN may
// hold a password, which must not be on their command line.
const ledgerEnv = "LEASEHOLD_DEMO_LEDGER_DSN"

// ledger is the store outside etcd: a SQL table that every worker writes to
// directly, each write fenced by the term's token (sqlfence). It lives in a
// SQLite file of the demo's own, or with --ledger-dsn in a PostgreSQL
// database, in two tables named for the run that the demo drops at the end.
type ledger struct {
	db      *sql.DB
	dialect sqlfence.Dialect
	driver  string // database/sql driver: sqlite or pgx
	dsn     string
	table   string // the ledger's rows
	fence   *sqlfence.Fence
	redis   *redisLedger // instead of db, for a redis:// ledger
	where   string       // for the story
	dir     string       // the SQLite file's directory, removed by Close; "" for PostgreSQL
}

// openLedger opens the ledger of run: PostgreSQL at dsn, or with dsn "" a
// new SQLite file. The worker passes create false: the demo made the tables.
func openLedger(ctx context.Context, driver, dsn, run string, create bool) (*ledger, error) {
	l := &ledger{driver: driver, dsn: dsn, dialect: sqlfence.PostgreSQL, table: "leasehold_demo_" + run}
	if driver == "redis" || driver == "" && isRedis(dsn) {
		l.driver, l.where = "redis", "Redis"
		r, err := openRedis(ctx, dsn, l.table)
		if err != nil {
			return nil, err
		}
		l.redis = r
		return l, nil
	}
	if driver == "" {
		l.driver = "pgx"
		if dsn == "" {
			dir, err := os.MkdirTemp("", "leasehold-demo-ledger-")
			if err != nil {
				return nil, err
			}
			l.dir, l.driver = dir, "sqlite"
			// A busy timeout: the workers write one at a time, and a writer
			// that finds the file locked waits instead of failing.
			l.dsn = "file:" + filepath.Join(dir, "ledger.db") + "?_pragma=busy_timeout(10000)"
		}
	}
	if l.driver == "sqlite" {
		l.dialect = sqlfence.SQLite
		l.where = "SQLite"
	} else {
		l.where = "PostgreSQL"
	}
	db, err := sql.Open(l.driver, l.dsn)
	if err != nil {
		return nil, l.fail(err)
	}
	l.db = db
	pctx, cancel := context.WithTimeout(ctx, callTimeout)
	defer cancel()
	if err := db.PingContext(pctx); err != nil {
		return nil, l.fail(fmt.Errorf("cannot reach the ledger database (%s) within %v: %w", l.where, callTimeout, onceEach{err}))
	}
	if l.fence, err = sqlfence.New(db, l.dialect, sqlfence.WithTable(l.table+"_fence")); err != nil {
		return nil, l.fail(err)
	}
	if create {
		if err := l.create(ctx); err != nil {
			return nil, l.fail(fmt.Errorf("create the ledger tables in %s: %w", l.where, err))
		}
	}
	return l, nil
}

// onceEach is an error whose text gives each line once: pgx reports a
// refused connection once per attempt (with and without TLS), alike.
type onceEach struct{ error }

func (e onceEach) Error() string {
	var out []string
	for _, line := range strings.Split(e.error.Error(), "\n") {
		if !slices.Contains(out, line) {
			out = append(out, line)
		}
	}
	return strings.Join(out, "\n")
}

func (e onceEach) Unwrap() error { return e.error }

// describe says where the ledger is, for the story.
func (l *ledger) describe() string {
	if l.redis != nil {
		return fmt.Sprintf("list %s in Redis (redisfence)", l.redis.rows)
	}
	return fmt.Sprintf("table %s in %s (sqlfence)", l.table, l.where)
}

func (l *ledger) fail(err error) error {
	l.Close()
	return err
}

func (l *ledger) create(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, stepTimeout)
	defer cancel()
	if err := l.fence.Migrate(ctx); err != nil {
		return err
	}
	_, err := l.db.ExecContext(ctx, "CREATE TABLE "+l.table+
		" (seq BIGINT PRIMARY KEY, n BIGINT NOT NULL, token TEXT NOT NULL, revision BIGINT NOT NULL)")
	return err
}

// record appends n to the ledger under token t, fenced: it returns "ok", or
// "stale" when the database refused t because a newer token wrote first.
func (l *ledger) record(ctx context.Context, t fencing.Token, n int64) (string, error) {
	if l.redis != nil {
		return outcome(l.redis.record(ctx, t, n))
	}
	// seq is the commit order: every writer holds the fence until it commits.
	insert := "INSERT INTO " + l.table + " (seq, n, token, revision) SELECT COALESCE(MAX(seq), 0) + 1, $1, $2, $3 FROM " + l.table
	if l.dialect == sqlfence.SQLite {
		insert = strings.NewReplacer("$1", "?", "$2", "?", "$3", "?").Replace(insert)
	}
	return outcome(l.fence.Tx(ctx, t, func(tx *sql.Tx) error {
		_, err := tx.ExecContext(ctx, insert, n, t.String(), t.Revision)
		return err
	}))
}

// outcome names a fenced write's result: "ok", "stale" when the store
// refused its token, or "error".
func outcome(err error) (string, error) {
	switch {
	case errors.Is(err, fencing.ErrStaleToken):
		return "stale", nil
	case err != nil:
		return "error", err
	}
	return "ok", nil
}

// tokens returns the revisions of the ledger's rows in commit order.
func (l *ledger) tokens(ctx context.Context) ([]int64, error) {
	if l.redis != nil {
		return l.redis.tokens(ctx)
	}
	rows, err := l.db.QueryContext(ctx, "SELECT revision FROM "+l.table+" ORDER BY seq")
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var revs []int64
	for rows.Next() {
		var r int64
		if err := rows.Scan(&r); err != nil {
			return nil, err
		}
		revs = append(revs, r)
	}
	return revs, rows.Err()
}

// drop removes the run's tables, within a bound, even when ctx has ended.
func (l *ledger) drop() error {
	ctx, cancel := context.WithTimeout(context.Background(), stepTimeout)
	defer cancel()
	if l.redis != nil {
		return l.redis.drop(ctx)
	}
	var errs []error
	for _, t := range []string{l.table, l.table + "_fence"} {
		if _, err := l.db.ExecContext(ctx, "DROP TABLE IF EXISTS "+t); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// Close closes the database and removes a SQLite ledger's file.
func (l *ledger) Close() {
	if l.redis != nil {
		l.redis.rdb.Close()
	}
	if l.db != nil {
		l.db.Close()
	}
	if l.dir != "" {
		os.RemoveAll(l.dir)
	}
}
