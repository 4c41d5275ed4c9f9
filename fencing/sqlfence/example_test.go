package sqlfence_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"github.com/leasehold/leasehold/election"
	"github.com/leasehold/leasehold/fencing"
	"github.com/leasehold/leasehold/fencing/sqlfence"
	"github.com/leasehold/leasehold/internal/testbed/etcdtest"
)

// exampleDB opens a new SQLite database in a temporary directory; done
// closes and removes it. With PostgreSQL it would be
// sql.Open("pgx", "postgres://...") (github.com/jackc/pgx/v5/stdlib) and
// sqlfence.PostgreSQL.
func exampleDB() (db *sql.DB, done func()) {
	dir, _ := os.MkdirTemp("", "sqlfence-example")
	db, _ = sql.Open("sqlite", "file:"+filepath.Join(dir, "jobs.db")+"?_pragma=busy_timeout(10000)")
	return db, func() { db.Close(); os.RemoveAll(dir) }
}

// This example runs a leader-only job under election.Run that records its
// runs in a SQL database. The database refuses the write of a leader that
// lost its term while paused, whatever that leader believes.
func Example() {
	ctx := context.Background()
	db, done := exampleDB()
	defer done()
	fence, err := sqlfence.New(db, sqlfence.SQLite)
	if err != nil {
		fmt.Println(err)
		return
	}
	if err := fence.Migrate(ctx); err != nil { // at every start: creates the fence table once
		fmt.Println(err)
		return
	}
	db.ExecContext(ctx, "CREATE TABLE runs (token TEXT)")

	cli := etcdtest.Shared().Admin // your *clientv3.Client
	err = election.Run(ctx, cli, "jobs/nightly", "worker-1", func(ctx context.Context, term *election.Term) error {
		return fence.Tx(ctx, term.Token(), func(tx *sql.Tx) error {
			_, err := tx.ExecContext(ctx, "INSERT INTO runs (token) VALUES (?)", term.Token().String())
			return err
		})
	})
	fmt.Println("run:", err)
	var runs int
	db.QueryRowContext(ctx, "SELECT count(*) FROM runs").Scan(&runs)
	fmt.Println("runs recorded:", runs)
	// Output:
	// run: <nil>
	// runs recorded: 1
}

// This example shows the fence refusing an older token after a newer one,
// and admitting the newer one again (a retry). Tokens come from a Hold or a
// Term; these are made by hand to show the order.
func ExampleFence_Tx() {
	ctx := context.Background()
	db, done := exampleDB()
	defer done()
	fence, _ := sqlfence.New(db, sqlfence.SQLite) // error checks trimmed
	fence.Migrate(ctx)

	newer := fencing.Token{Name: "jobs/billing", Revision: 42, Cluster: 0xcdf818194e3a8c32}
	older := fencing.Token{Name: "jobs/billing", Revision: 41, Cluster: 0xcdf818194e3a8c32}
	noop := func(*sql.Tx) error { return nil }
	fmt.Println(fence.Tx(ctx, newer, noop))
	fmt.Println(errors.Is(fence.Tx(ctx, older, noop), fencing.ErrStaleToken))
	fmt.Println(fence.Tx(ctx, newer, noop))
	// Output:
	// <nil>
	// true
	// <nil>
}

// This example fences a transaction the caller begins and commits itself.
func ExampleFence_Admit() {
	ctx := context.Background()
	db, done := exampleDB()
	defer done()
	fence, _ := sqlfence.New(db, sqlfence.SQLite) // error checks trimmed
	fence.Migrate(ctx)
	db.ExecContext(ctx, "CREATE TABLE invoices (id INTEGER)")

	token := fencing.Token{Name: "jobs/billing", Revision: 7, Cluster: 0xcdf818194e3a8c32}
	tx, _ := db.BeginTx(ctx, nil)
	if err := fence.Admit(ctx, tx, token); err != nil { // first, before the writes it fences
		fmt.Println(err) // tx is rolled back already
		return
	}
	tx.ExecContext(ctx, "INSERT INTO invoices (id) VALUES (1)")
	fmt.Println(tx.Commit())
	mark, _, _ := fence.Mark(ctx, "jobs/billing")
	fmt.Println(mark.Revision)
	// Output:
	// <nil>
	// 7
}
