package sqlfence_test

import (
	"context"
	"database/sql"
	"errors"
	"path/filepath"
	"testing"

	"github.com/leasehold/leasehold/fencing"
	"github.com/leasehold/leasehold/fencing/fencingtest"
	"github.com/leasehold/leasehold/fencing/sqlfence"
	"github.com/leasehold/leasehold/internal/testbed/pgtest"
)

// The fence passes the conformance suite every fence must pass, on both
// dialects: each case gets a new database (a file, or a PostgreSQL
// database), which the suite's frozen writer opens again from its process.
func TestFenceConformance(t *testing.T) {
	stores := map[sqlfence.Dialect]struct {
		create  func(t *testing.T) string
		connect func(t *testing.T, addr string) *sql.DB
	}{
		sqlfence.SQLite: {
			func(t *testing.T) string { return filepath.Join(t.TempDir(), "kv.db") },
			connectSQLite,
		},
		sqlfence.PostgreSQL: {
			func(t *testing.T) string { return pgtest.Shared(t).NewDatabase(t) },
			func(t *testing.T, dsn string) *sql.DB {
				db, err := sql.Open("pgx", dsn)
				if err != nil {
					t.Fatal(err)
				}
				t.Cleanup(func() { db.Close() })
				return db
			},
		},
	}
	for _, b := range backends {
		s := stores[b.dialect]
		t.Run(b.name, func(t *testing.T) {
			fencingtest.FenceConformance(t, s.create, func(t *testing.T, addr string) fencingtest.Fence {
				return openKV(t, b, s.connect(t, addr))
			})
		})
	}
}

// kv is the suite's adapter: a table of values, one row per fenced name,
// written in a fenced transaction and read beside the fence's Mark.
type kv struct {
	b     backend
	db    *sql.DB
	fence *sqlfence.Fence
}

// openKV migrates the fence of db and creates the table of values, unless
// they exist.
func openKV(t *testing.T, b backend, db *sql.DB) kv {
	fence, err := sqlfence.New(db, b.dialect)
	if err != nil {
		t.Fatal(err)
	}
	if err := fence.Migrate(ctxFor(t)); err != nil {
		t.Fatal(err)
	}
	exec(t, b, db, "CREATE TABLE IF NOT EXISTS kv (name TEXT PRIMARY KEY, value TEXT NOT NULL)")
	return kv{b, db, fence}
}

func (s kv) Write(ctx context.Context, t fencing.Token, value string) error {
	return s.fence.Tx(ctx, t, func(tx *sql.Tx) error {
		_, err := tx.ExecContext(ctx, s.b.q("INSERT INTO kv (name, value) VALUES ($1, $2) ON CONFLICT (name) DO UPDATE SET value = excluded.value"),
			t.Name, value)
		return err
	})
}

func (s kv) Read(ctx context.Context, name string) (fencing.Token, bool, string, error) {
	mark, ok, err := s.fence.Mark(ctx, name)
	if err != nil {
		return mark, ok, "", err
	}
	var value string
	err = s.db.QueryRowContext(ctx, s.b.q("SELECT value FROM kv WHERE name = $1"), name).Scan(&value)
	if errors.Is(err, sql.ErrNoRows) {
		err = nil
	}
	return mark, ok, value, err
}
