package sqlfence_test

import (
	"context"
	"database/sql"
	"path/filepath"
	"regexp"
	"testing"
	"time"

	"github.com/leasehold/leasehold/fencing"
	"github.com/leasehold/leasehold/fencing/fencingtest"
	"github.com/leasehold/leasehold/fencing/sqlfence"
	"github.com/leasehold/leasehold/internal/testbed/pgtest"
	_ "modernc.org/sqlite" // registers "sqlite"
)

func TestMain(m *testing.M) { fencingtest.Main(m) }

// backend is a real database of one dialect, made fresh for each test.
type backend struct {
	name    string
	dialect sqlfence.Dialect
	open    func(t *testing.T) *sql.DB
}

var backends = []backend{
	{"sqlite", sqlfence.SQLite, openSQLite},
	{"postgres", sqlfence.PostgreSQL, func(t *testing.T) *sql.DB { return pgtest.Shared(t).Open(t) }},
}

// openSQLite opens a new database file with a busy timeout, as the package
// doc tells users to, and WAL, as most applications run SQLite.
func openSQLite(t *testing.T) *sql.DB {
	return connectSQLite(t, filepath.Join(t.TempDir(), "fence.db"))
}

// connectSQLite opens the database file at path as openSQLite does.
func connectSQLite(t *testing.T, path string) *sql.DB {
	db, err := sql.Open("sqlite", "file:"+path+"?_pragma=busy_timeout(20000)&_pragma=journal_mode(WAL)")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	// The first connection turns the new file to WAL, which takes an
	// exclusive lock that other connections opening at that moment do not
	// wait for; an application's database file is made once, as here.
	if _, err := db.ExecContext(ctxFor(t), "SELECT 1"); err != nil {
		t.Fatal(err)
	}
	return db
}

// eachBackend runs f on a fresh, migrated fence of every backend, with a
// ledger table to write in.
func eachBackend(t *testing.T, f func(t *testing.T, b backend, db *sql.DB, fence *sqlfence.Fence)) {
	for _, b := range backends {
		t.Run(b.name, func(t *testing.T) {
			db := b.open(t)
			f(t, b, db, ledgerFence(t, b, db))
		})
	}
}

// ledgerFence returns the migrated fence of db, which gets a ledger table.
func ledgerFence(t *testing.T, b backend, db *sql.DB) *sqlfence.Fence {
	t.Helper()
	fence, err := sqlfence.New(db, b.dialect)
	if err != nil {
		t.Fatal(err)
	}
	if err := fence.Migrate(ctxFor(t)); err != nil {
		t.Fatal(err)
	}
	exec(t, b, db, "CREATE TABLE ledger (seq BIGINT PRIMARY KEY, token BIGINT NOT NULL)")
	return fence
}

var placeholder = regexp.MustCompile(`\$[0-9]+`)

// q writes a statement with $n placeholders in b's dialect.
func (b backend) q(stmt string) string {
	if b.dialect == sqlfence.SQLite {
		return placeholder.ReplaceAllString(stmt, "?")
	}
	return stmt
}

func exec(t *testing.T, b backend, db *sql.DB, stmt string, args ...any) {
	t.Helper()
	if _, err := db.ExecContext(ctxFor(t), b.q(stmt), args...); err != nil {
		t.Fatalf("%s: %v", stmt, err)
	}
}

// appendTo appends token to the ledger inside tx, after the last entry: the
// order of the ledger is the order of the commits, since every writer holds
// the fence row (or SQLite's write lock) until it commits.
func appendTo(ctx context.Context, b backend, tx *sql.Tx, token int64) error {
	_, err := tx.ExecContext(ctx, b.q("INSERT INTO ledger (seq, token) SELECT COALESCE(MAX(seq), 0) + 1, $1 FROM ledger"), token)
	return err
}

// ledger returns the ledger's tokens in commit order.
func ledger(t *testing.T, db *sql.DB) []int64 {
	t.Helper()
	rows, err := db.QueryContext(ctxFor(t), "SELECT token FROM ledger ORDER BY seq")
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	var out []int64
	for rows.Next() {
		var v int64
		if err := rows.Scan(&v); err != nil {
			t.Fatal(err)
		}
		out = append(out, v)
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

// cluster is the cluster ID of the tokens tests make by hand.
const cluster = 0xcdf818194e3a8c32

func tok(name string, rev int64) fencing.Token {
	return fencing.Token{Name: name, Revision: rev, Cluster: cluster}
}

func ctxFor(t *testing.T) context.Context { return fencingtest.Context(t, time.Minute) }
