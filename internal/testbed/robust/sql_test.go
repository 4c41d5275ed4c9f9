package robust_test

import (
	"context"
	"database/sql"
	"fmt"
	"os"
	"testing"
	"time"

	_ "github.com/jackc/pgx/v5/stdlib" // registers "pgx"
	"github.com/leasehold/leasehold/fencing"
	"github.com/leasehold/leasehold/fencing/fencingtest"
	"github.com/leasehold/leasehold/fencing/sqlfence"
	"github.com/leasehold/leasehold/internal/testbed/etcdtest"
	"github.com/leasehold/leasehold/internal/testbed/pgtest"
)

// TestSQLUnderFaults is the database workload: workers in subprocesses take
// the lock and increment a counter row in PostgreSQL with read-modify-write
// transactions, each also appending the value to a history table, while the
// suite pauses (SIGSTOP past the TTL), partitions and kills them and faults
// etcd. "fenced" runs every transaction through sqlfence and must come out
// exact: every acknowledged increment present, none applied twice, the
// history 1..N. "plain" runs the same transactions unfenced, as users of
// other lock libraries do; its losses and duplicates are the point, logged,
// not failed on.
func TestSQLUnderFaults(t *testing.T) {
	etcdtest.Long(t)
	pg := pgtest.Shared(t)
	t.Run("fenced", func(t *testing.T) {
		r := runSQLWorkload(t, pg, "fenced")
		r.log(t)
		for _, v := range r.violations() {
			t.Error(v)
		}
		if r.acked < 20 {
			t.Errorf("only %d acknowledged increments: the workload did not exercise the database", r.acked)
		}
	})
	t.Run("plain", func(t *testing.T) {
		if testing.Short() {
			t.Skip("baseline skipped in -short")
		}
		r := runSQLWorkload(t, pg, "plain")
		r.log(t)
		for _, v := range r.violations() {
			t.Log("baseline violation (expected without fencing):", v)
		}
	})
}

// sqlRun is what one workload left in the database, and what its workers
// were told.
type sqlRun struct {
	mode     string
	counter  int64
	history  []sqlRow // in id order
	acked    int      // increments whose commit succeeded
	unknown  int      // attempts with no outcome, or an error that may hide a commit
	stale    int      // refused by the fence
	ackedBy  map[[2]int64]bool
	faults   map[string]int
	duration time.Duration
}

type sqlRow struct{ value, token int64 }

func runSQLWorkload(t *testing.T, pg *pgtest.Server, mode string) *sqlRun {
	c := fencingtest.Three(t)
	dsn := pg.NewDatabase(t)
	db, err := sql.Open("pgx", dsn)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	ctx := fencingtest.Context(t, time.Minute)
	fence, err := sqlfence.New(db, sqlfence.PostgreSQL)
	if err != nil {
		t.Fatal(err)
	}
	if err := fence.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	for _, stmt := range []string{
		"CREATE TABLE counter (id int PRIMARY KEY, n bigint NOT NULL)",
		"INSERT INTO counter VALUES (1, 0)",
		"CREATE TABLE history (id bigserial PRIMARY KEY, value bigint NOT NULL, token bigint NOT NULL, worker text NOT NULL)",
	} {
		if _, err := db.ExecContext(ctx, stmt); err != nil {
			t.Fatal(err)
		}
	}
	maxTime, minOwners := runLength()
	hist := watchHistory(t, c, "leasehold/")
	h := newHarness(t, c, mode, dsn)
	h.helper = "sql-worker"
	for i := range 4 {
		h.subprocess(fmt.Sprint("s", i))
	}
	events := h.collect()
	start := time.Now()
	h.faultLoop(t.Context(), hist, func() bool {
		if time.Since(start) > maxTime {
			return true
		}
		return minOwners > 0 && hist.created() >= minOwners
	})
	h.stopAll()
	r := &sqlRun{mode: mode, faults: h.faults, duration: time.Since(start), ackedBy: map[[2]int64]bool{}}
	r.count(events())
	if err := db.QueryRowContext(ctx, "SELECT n FROM counter WHERE id = 1").Scan(&r.counter); err != nil {
		t.Fatal(err)
	}
	rows, err := db.QueryContext(ctx, "SELECT value, token FROM history ORDER BY id")
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	for rows.Next() {
		var row sqlRow
		if err := rows.Scan(&row.value, &row.token); err != nil {
			t.Fatal(err)
		}
		r.history = append(r.history, row)
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return r
}

// violations checks what the database holds: (1) every acknowledged
// increment is in the history, (2) no value was applied twice, (3) the
// history is exactly 1..N and the counter is N: no committed increment was
// overwritten (lost), (4) the history's tokens never go back.
func (r *sqlRun) violations() []string {
	var out []string
	seen := map[int64]int{}
	in := map[[2]int64]bool{}
	for _, row := range r.history {
		seen[row.value]++
		in[[2]int64{row.value, row.token}] = true
	}
	for k := range r.ackedBy {
		if !in[k] {
			out = append(out, fmt.Sprintf("acknowledged increment to %d (token %d) is not in the history", k[0], k[1]))
		}
	}
	dups := 0
	for v, n := range seen {
		if n > 1 {
			dups += n - 1
			if dups <= 5 {
				out = append(out, fmt.Sprintf("value %d applied %d times", v, n))
			}
		}
	}
	if dups > 0 {
		out = append(out, fmt.Sprintf("%d increments applied twice in all", dups))
	}
	if lost := int64(len(r.history)) - r.counter; lost != 0 {
		out = append(out, fmt.Sprintf("counter %d after %d committed increments: %d lost", r.counter, len(r.history), lost))
	}
	for v := int64(1); v <= r.counter; v++ {
		if seen[v] == 0 {
			out = append(out, fmt.Sprintf("history lacks value %d of 1..%d", v, r.counter))
			break
		}
	}
	for i := 1; i < len(r.history); i++ {
		if r.history[i].token < r.history[i-1].token {
			out = append(out, fmt.Sprintf("history went back from token %d to %d at row %d", r.history[i-1].token, r.history[i].token, i))
			break
		}
	}
	return out
}

func (r *sqlRun) log(t *testing.T) {
	t.Logf("%s: %v, %d acknowledged, %d refused as stale, %d of unknown outcome; history %d rows, counter %d; faults %v",
		r.mode, r.duration.Round(time.Second), r.acked, r.stale, r.unknown, len(r.history), r.counter, r.faults)
}

// sqlWorkerHelper runs the database workload's storeWorker in a subprocess
// until stdin closes. Args: name, mode (fenced or plain), DSN, endpoints...
func sqlWorkerHelper(args []string) int {
	db, err := sql.Open("pgx", args[2])
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer db.Close()
	fence, err := sqlfence.New(db, sqlfence.PostgreSQL)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	name, mode := args[0], args[1]
	w := &storeWorker{name: name, increment: func(ctx context.Context, tok fencing.Token, think time.Duration) (int64, error) {
		// One transaction: read, think, write one more with a history row.
		var value int64
		body := func(tx *sql.Tx) error {
			var n int64
			if err := tx.QueryRowContext(ctx, "SELECT n FROM counter WHERE id = 1").Scan(&n); err != nil {
				return err
			}
			pause(ctx, think)
			value = n + 1
			if _, err := tx.ExecContext(ctx, "UPDATE counter SET n = $1 WHERE id = 1", value); err != nil {
				return err
			}
			_, err := tx.ExecContext(ctx, "INSERT INTO history (value, token, worker) VALUES ($1, $2, $3)", value, tok.Revision, name)
			return err
		}
		if mode == "fenced" {
			return value, fence.Tx(ctx, tok, body)
		}
		return value, plainTx(ctx, db, body)
	}}
	return w.run(args[3:], 7)
}

// plainTx is the same transaction without a fence.
func plainTx(ctx context.Context, db *sql.DB, body func(*sql.Tx) error) error {
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	if err := body(tx); err != nil {
		tx.Rollback()
		return err
	}
	return tx.Commit()
}
