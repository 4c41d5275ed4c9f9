package sqlfence_test

import (
	"database/sql"
	"errors"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/leasehold/leasehold/fencing"
	"github.com/leasehold/leasehold/fencing/fencingtest"
	"github.com/leasehold/leasehold/fencing/sqlfence"
	"github.com/leasehold/leasehold/internal/testbed/pgtest"
)

// A holder paused inside a fenced transaction, past PostgreSQL's
// idle_in_transaction_session_timeout: the server ends its session, and
// whatever the holder does when it resumes, Tx returns an error wrapping
// sqlfence.ErrNotCommitted, nothing of it was written, and a successor
// writes at once.
func TestPostgresEndsPausedHolder(t *testing.T) {
	b := backends[1]
	db := pgtest.Shared(t).Open(t)
	fence := ledgerFence(t, b, db)
	for _, resumes := range []string{"to commit", "to write"} {
		t.Run(resumes, func(t *testing.T) {
			ctx, name := ctxFor(t), "paused-"+strings.ReplaceAll(resumes, " ", "-")
			err := fence.Tx(ctx, tok(name, 10), func(tx *sql.Tx) error {
				var pid int
				if err := tx.QueryRowContext(ctx, "SELECT pg_backend_pid()").Scan(&pid); err != nil {
					return err
				}
				if _, err := tx.ExecContext(ctx, "SET LOCAL idle_in_transaction_session_timeout = '200ms'"); err != nil {
					return err
				}
				// Paused: the server ends the session while it sends nothing.
				fencingtest.WaitFor(t, 30*time.Second, "PostgreSQL to end the idle transaction's session", func() bool {
					var n int
					err := db.QueryRowContext(ctx, "SELECT count(*) FROM pg_stat_activity WHERE pid = $1", pid).Scan(&n)
					return err == nil && n == 0
				})
				if resumes == "to write" {
					return appendTo(ctx, b, tx, 10)
				}
				return nil
			})
			if !errors.Is(err, sqlfence.ErrNotCommitted) {
				t.Fatalf("Tx of a holder whose session PostgreSQL ended = %v; want ErrNotCommitted", err)
			}
			if got := ledger(t, db); len(got) != 0 {
				t.Fatalf("ledger = %v: the ended transaction wrote", got)
			}
			if err := fence.Tx(ctx, tok(name, 11), func(tx *sql.Tx) error { return appendTo(ctx, b, tx, 11) }); err != nil {
				t.Fatalf("successor's Tx: %v", err)
			}
			exec(t, b, db, "DELETE FROM ledger")
		})
	}
}

// SQLite never ends a paused holder's transaction: a successor fails after
// its busy timeout (SQLITE_BUSY), and the holder, resumed, commits. Safe: no
// newer token committed in between, and the successor wrote nothing.
func TestSQLiteKeepsPausedHolder(t *testing.T) {
	b := backends[0]
	db, err := sql.Open("sqlite", "file:"+filepath.Join(t.TempDir(), "fence.db")+"?_pragma=busy_timeout(100)")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	fence := ledgerFence(t, b, db)
	ctx := ctxFor(t)
	raised, resume := make(chan struct{}), make(chan struct{})
	holder := make(chan error, 1)
	go func() {
		holder <- fence.Tx(ctx, tok("paused", 10), func(tx *sql.Tx) error {
			close(raised)
			<-resume
			return appendTo(ctx, b, tx, 10)
		})
	}()
	<-raised
	err = fence.Tx(ctx, tok("paused", 11), func(tx *sql.Tx) error { return appendTo(ctx, b, tx, 11) })
	if err == nil || !strings.Contains(err.Error(), "SQLITE_BUSY") {
		t.Fatalf("successor's Tx while the holder is paused = %v; want SQLITE_BUSY", err)
	}
	if errors.Is(err, fencing.ErrStaleToken) {
		t.Fatalf("successor refused as stale: %v", err)
	}
	close(resume)
	if err := fencingtest.Receive(t, holder, "the resumed holder's Tx"); err != nil {
		t.Fatalf("resumed holder's Tx: %v", err)
	}
	if got := ledger(t, db); len(got) != 1 || got[0] != 10 {
		t.Fatalf("ledger = %v; want [10]", got)
	}
}
