package sqlfence_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/leasehold/leasehold/fencing"
	"github.com/leasehold/leasehold/fencing/fencingtest"
	"github.com/leasehold/leasehold/fencing/sqlfence"
)

// A token older than the fence is refused before the caller's statements
// run, and nothing is written; the same token again is a retry and passes.
func TestStaleTokenRefusedSameTokenPasses(t *testing.T) {
	eachBackend(t, func(t *testing.T, b backend, db *sql.DB, fence *sqlfence.Fence) {
		ctx := ctxFor(t)
		write := func(rev int64) error {
			return fence.Tx(ctx, tok("jobs/ledger", rev), func(tx *sql.Tx) error { return appendTo(ctx, b, tx, rev) })
		}
		if err := write(10); err != nil {
			t.Fatal(err)
		}
		ran := false
		err := fence.Tx(ctx, tok("jobs/ledger", 5), func(*sql.Tx) error { ran = true; return nil })
		if !errors.Is(err, fencing.ErrStaleToken) || ran {
			t.Fatalf("Tx with token 5 after 10 = %v (fn ran: %v); want ErrStaleToken, fn not run", err, ran)
		}
		if !strings.Contains(err.Error(), "revision 10") {
			t.Errorf("error %q does not name the fence's revision", err)
		}
		for _, rev := range []int64{10, 11} {
			if err := write(rev); err != nil {
				t.Fatalf("Tx with token %d: %v", rev, err)
			}
		}
		if got := ledger(t, db); !slices.Equal(got, []int64{10, 10, 11}) {
			t.Fatalf("ledger = %v; want [10 10 11]", got)
		}
		mark, ok, err := fence.Mark(ctx, "jobs/ledger")
		if err != nil || !ok || mark != tok("jobs/ledger", 11) {
			t.Fatalf("Mark = %v, %v, %v; want %v", mark, ok, err, tok("jobs/ledger", 11))
		}
	})
}

// Two transactions with tokens t1 < t2: whichever reaches the database
// first, t1's never commits after t2's. Newer first: the older waits on the
// fence, then is refused. Older first: the newer waits, then commits after it.
func TestInterleavedTokensCommitInOrder(t *testing.T) {
	eachBackend(t, func(t *testing.T, b backend, db *sql.DB, fence *sqlfence.Fence) {
		for _, newerFirst := range []bool{true, false} {
			exec(t, b, db, "DELETE FROM ledger")
			base := int64(100)
			if !newerFirst {
				base = 200
			}
			older, newer := base+1, base+2
			first, second := older, newer
			if newerFirst {
				first, second = newer, older
			}
			ctx := ctxFor(t)
			// The row exists, so that both raise through the UPDATE: the
			// second's waits on the first's lock and must re-check the row.
			if err := fence.Tx(ctx, tok("order", base), func(*sql.Tx) error { return nil }); err != nil {
				t.Fatal(err)
			}
			raised, release := make(chan struct{}), make(chan struct{})
			firstDone := make(chan error, 1)
			go func() {
				firstDone <- fence.Tx(ctx, tok("order", first), func(tx *sql.Tx) error {
					close(raised)
					<-release
					return appendTo(ctx, b, tx, first)
				})
			}()
			<-raised
			secondDone := make(chan error, 1)
			go func() {
				secondDone <- fence.Tx(ctx, tok("order", second), func(tx *sql.Tx) error { return appendTo(ctx, b, tx, second) })
			}()
			waitBlocked(t, b, db, 1) // the second waits for the first's fence
			close(release)
			if err := <-firstDone; err != nil {
				t.Fatalf("first (token %d): %v", first, err)
			}
			err := <-secondDone
			if newerFirst {
				if !errors.Is(err, fencing.ErrStaleToken) {
					t.Fatalf("older token %d after newer %d committed: %v; want ErrStaleToken", second, first, err)
				}
				if got := ledger(t, db); !slices.Equal(got, []int64{newer}) {
					t.Fatalf("ledger = %v; want only %d", got, newer)
				}
				continue
			}
			if err != nil {
				t.Fatalf("newer token %d after older %d: %v", second, first, err)
			}
			if got := ledger(t, db); !slices.Equal(got, []int64{older, newer}) {
				t.Fatalf("ledger = %v; want %d then %d", got, older, newer)
			}
		}
	})
}

// waitBlocked waits until n sessions of db's database wait for a lock
// (PostgreSQL). SQLite shows no such thing; there the test holds whichever
// way the second transaction runs, and checks the outcome only.
func waitBlocked(t *testing.T, b backend, db *sql.DB, n int) {
	t.Helper()
	if b.dialect != sqlfence.PostgreSQL {
		return
	}
	fencingtest.WaitFor(t, 30*time.Second, fmt.Sprintf("%d transactions to wait on the fence", n), func() bool {
		var got int
		err := db.QueryRowContext(ctxFor(t), `SELECT count(*) FROM pg_stat_activity
			WHERE datname = current_database() AND wait_event_type = 'Lock'`).Scan(&got)
		return err == nil && got >= n
	})
}

// Many writers at once, with tokens that mostly grow but arrive out of
// order in windows of eight: the ledger, in commit order, never goes back to
// an older token, and holds exactly the acknowledged writes.
func TestConcurrentWritersNeverGoBack(t *testing.T) {
	eachBackend(t, func(t *testing.T, b backend, db *sql.DB, fence *sqlfence.Fence) {
		ctx := ctxFor(t)
		var tokens []int
		for w := range 15 {
			for _, i := range rand.Perm(8) {
				tokens = append(tokens, w*8+i)
			}
		}
		var (
			mu    sync.Mutex
			acked []int64
			wg    sync.WaitGroup
			next  = make(chan int64)
		)
		for range 8 {
			wg.Go(func() {
				for rev := range next {
					err := fence.Tx(ctx, tok("concurrent", rev), func(tx *sql.Tx) error { return appendTo(ctx, b, tx, rev) })
					switch {
					case err == nil:
						mu.Lock()
						acked = append(acked, rev)
						mu.Unlock()
					case !errors.Is(err, fencing.ErrStaleToken):
						t.Errorf("Tx %d: %v", rev, err)
					}
				}
			})
		}
		for _, r := range tokens {
			next <- int64(r + 1)
		}
		close(next)
		wg.Wait()
		got := ledger(t, db)
		for i := 1; i < len(got); i++ {
			if got[i] < got[i-1] {
				t.Fatalf("ledger went back from token %d to %d at entry %d: %v", got[i-1], got[i], i, got)
			}
		}
		slices.Sort(acked)
		sorted := slices.Clone(got)
		slices.Sort(sorted)
		if !slices.Equal(sorted, acked) {
			t.Fatalf("ledger %v is not the acknowledged writes %v", got, acked)
		}
		if !slices.Contains(acked, 120) { // the newest token can never be stale
			t.Fatalf("token 120 was not admitted: %v", got)
		}
		t.Logf("%d of 120 admitted", len(got))
	})
}

// Names are independent: a high fence under one name refuses nothing under
// another, and (PostgreSQL) a transaction open under one name does not
// block another name's.
func TestNamesAreIndependent(t *testing.T) {
	eachBackend(t, func(t *testing.T, b backend, db *sql.DB, fence *sqlfence.Fence) {
		ctx := ctxFor(t)
		noop := func(*sql.Tx) error { return nil }
		if err := fence.Tx(ctx, tok("a", 1000), noop); err != nil {
			t.Fatal(err)
		}
		for _, name := range []string{"b", "a/b", "A", "a "} {
			if err := fence.Tx(ctx, tok(name, 1), noop); err != nil {
				t.Fatalf("Tx %q@1 after a@1000: %v", name, err)
			}
		}
		if b.dialect != sqlfence.PostgreSQL {
			return // one writer per SQLite database: names share it, as all writes do
		}
		raised, release := make(chan struct{}), make(chan struct{})
		done := make(chan error, 1)
		go func() {
			done <- fence.Tx(ctx, tok("a", 1001), func(*sql.Tx) error { close(raised); <-release; return nil })
		}()
		<-raised
		if err := fence.Tx(ctx, tok("b", 2), noop); err != nil { // would hang if names shared a lock
			t.Fatal(err)
		}
		close(release)
		if err := <-done; err != nil {
			t.Fatal(err)
		}
	})
}

// WithName fences tokens of any lock name under one resource name.
func TestWithNameFencesUnderTheResource(t *testing.T) {
	eachBackend(t, func(t *testing.T, b backend, db *sql.DB, _ *sqlfence.Fence) {
		ctx := ctxFor(t)
		fence, err := sqlfence.New(db, b.dialect, sqlfence.WithName("ledger"))
		if err != nil {
			t.Fatal(err)
		}
		noop := func(*sql.Tx) error { return nil }
		if err := fence.Tx(ctx, tok("lock-a", 50), noop); err != nil {
			t.Fatal(err)
		}
		if err := fence.Tx(ctx, tok("lock-b", 40), noop); !errors.Is(err, fencing.ErrStaleToken) {
			t.Fatalf("token 40 of another lock after 50, same resource: %v; want ErrStaleToken", err)
		}
		if mark, ok, _ := fence.Mark(ctx, "ledger"); !ok || mark.Revision != 50 {
			t.Fatalf("Mark(ledger) = %v, %v; want revision 50", mark, ok)
		}
		if _, ok, _ := fence.Mark(ctx, "lock-a"); ok {
			t.Fatal("a row for the lock's own name was written")
		}
	})
}

// A token of another etcd cluster is refused with its own error, whatever
// its revision, until Reset adopts the new cluster; then the old cluster's
// tokens are refused.
func TestOtherClusterRefusedUntilReset(t *testing.T) {
	eachBackend(t, func(t *testing.T, b backend, db *sql.DB, fence *sqlfence.Fence) {
		ctx := ctxFor(t)
		noop := func(*sql.Tx) error { return nil }
		if err := fence.Tx(ctx, tok("jobs", 10), noop); err != nil {
			t.Fatal(err)
		}
		other := func(rev int64) fencing.Token { return fencing.Token{Name: "jobs", Revision: rev, Cluster: 0xbeef} }
		for _, rev := range []int64{1, 10, 1 << 40} {
			err := fence.Tx(ctx, other(rev), noop)
			if !errors.Is(err, fencing.ErrClusterMismatch) || errors.Is(err, fencing.ErrStaleToken) {
				t.Fatalf("token of cluster beef at %d: %v; want ErrClusterMismatch only", rev, err)
			}
			if !strings.Contains(err.Error(), "--bump-revision") || !strings.Contains(err.Error(), "Reset") {
				t.Fatalf("error %q does not say what an operator does", err)
			}
		}
		if err := fence.Reset(ctx, "jobs", 0xbeef); err != nil {
			t.Fatal(err)
		}
		if err := fence.Tx(ctx, other(1), noop); err != nil {
			t.Fatalf("new cluster's first token after Reset: %v", err)
		}
		if err := fence.Tx(ctx, tok("jobs", 11), noop); !errors.Is(err, fencing.ErrClusterMismatch) {
			t.Fatalf("old cluster's token after Reset: %v; want ErrClusterMismatch", err)
		}
		// A second Reset to the same cluster (a runbook run twice) keeps the
		// fence where it is: it never reopens to older tokens.
		if err := fence.Tx(ctx, other(500), noop); err != nil {
			t.Fatal(err)
		}
		if err := fence.Reset(ctx, "jobs", 0xbeef); err != nil {
			t.Fatal(err)
		}
		if err := fence.Tx(ctx, other(400), noop); !errors.Is(err, fencing.ErrStaleToken) {
			t.Fatalf("token 400 after 500 and a repeated Reset: %v; want ErrStaleToken", err)
		}
	})
}

// A ctx that ends mid-transaction rolls it back: neither the caller's write
// nor the fence's raise remains.
func TestContextEndingMidTransactionRollsBack(t *testing.T) {
	eachBackend(t, func(t *testing.T, b backend, db *sql.DB, fence *sqlfence.Fence) {
		if err := fence.Tx(ctxFor(t), tok("jobs", 5), func(*sql.Tx) error { return nil }); err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithCancel(ctxFor(t))
		err := fence.Tx(ctx, tok("jobs", 9), func(tx *sql.Tx) error {
			if err := appendTo(ctx, b, tx, 9); err != nil {
				return err
			}
			cancel()
			return nil
		})
		if !errors.Is(err, context.Canceled) {
			t.Fatalf("Tx whose ctx ended before commit = %v; want context.Canceled", err)
		}
		if got := ledger(t, db); len(got) != 0 {
			t.Fatalf("ledger = %v after a cancelled Tx", got)
		}
		if mark, _, _ := fence.Mark(ctxFor(t), "jobs"); mark.Revision != 5 {
			t.Fatalf("fence at %d after a cancelled Tx; want 5", mark.Revision)
		}
		// A ctx that ends while fn runs: database/sql rolls back at once, and
		// Tx reports the ctx's end, not a commit of unknown outcome.
		ctx2, cancel2 := context.WithCancel(ctxFor(t))
		err = fence.Tx(ctx2, tok("jobs", 9), func(tx *sql.Tx) error {
			if err := appendTo(ctx2, b, tx, 9); err != nil {
				return err
			}
			cancel2()
			fencingtest.WaitFor(t, 30*time.Second, "database/sql to roll the transaction back", func() bool {
				_, err := tx.ExecContext(context.Background(), "SELECT 1")
				return errors.Is(err, sql.ErrTxDone)
			})
			return nil
		})
		if !errors.Is(err, context.Canceled) {
			t.Fatalf("Tx whose ctx ended while fn ran = %v; want context.Canceled", err)
		}
		if got := ledger(t, db); len(got) != 0 {
			t.Fatalf("ledger = %v after a cancelled Tx", got)
		}
		// fn's own error rolls back too, and is returned as it is.
		mine := errors.New("mine")
		if err := fence.Tx(ctxFor(t), tok("jobs", 10), func(tx *sql.Tx) error {
			appendTo(ctxFor(t), b, tx, 10)
			return mine
		}); err != mine {
			t.Fatalf("Tx = %v; want fn's error as it is", err)
		}
		if mark, _, _ := fence.Mark(ctxFor(t), "jobs"); mark.Revision != 5 || len(ledger(t, db)) != 0 {
			t.Fatalf("fence at %d, ledger %v after fn failed", mark.Revision, ledger(t, db))
		}
	})
}

// Admit fences a transaction the caller manages; when it refuses, it rolls
// the transaction back, so a caller that ignores the error commits nothing.
func TestAdmitInCallersTransaction(t *testing.T) {
	eachBackend(t, func(t *testing.T, b backend, db *sql.DB, fence *sqlfence.Fence) {
		ctx := ctxFor(t)
		tx, err := db.BeginTx(ctx, nil)
		if err != nil {
			t.Fatal(err)
		}
		if err := fence.Admit(ctx, tx, tok("own", 7)); err != nil {
			t.Fatal(err)
		}
		if err := appendTo(ctx, b, tx, 7); err != nil {
			t.Fatal(err)
		}
		if err := tx.Commit(); err != nil {
			t.Fatal(err)
		}
		tx, err = db.BeginTx(ctx, nil)
		if err != nil {
			t.Fatal(err)
		}
		appendTo(ctx, b, tx, 6) // written before the check: must go with the rollback
		if err := fence.Admit(ctx, tx, tok("own", 6)); !errors.Is(err, fencing.ErrStaleToken) {
			t.Fatalf("Admit 6 after 7 = %v; want ErrStaleToken", err)
		}
		if err := tx.Commit(); !errors.Is(err, sql.ErrTxDone) {
			t.Fatalf("Commit after a refused Admit = %v; want sql.ErrTxDone (rolled back)", err)
		}
		if got := ledger(t, db); !slices.Equal(got, []int64{7}) {
			t.Fatalf("ledger = %v; want [7]", got)
		}
		if err := fence.Admit(ctx, tx, tok("own", 8)); !errors.Is(err, fencing.ErrInvalidArgument) {
			t.Fatalf("Admit in an ended tx = %v; want ErrInvalidArgument", err)
		}
		// Bad input rolls back too: a token without a cluster (ParseToken of
		// text that had none) cannot be checked, so nothing may commit.
		noCluster, err := fencing.ParseToken("own@100")
		if err != nil {
			t.Fatal(err)
		}
		tx, err = db.BeginTx(ctx, nil)
		if err != nil {
			t.Fatal(err)
		}
		appendTo(ctx, b, tx, 100)
		if err := fence.Admit(ctx, tx, noCluster); !errors.Is(err, fencing.ErrInvalidToken) {
			t.Fatalf("Admit of a token without cluster = %v; want ErrInvalidToken", err)
		}
		if err := tx.Commit(); !errors.Is(err, sql.ErrTxDone) {
			t.Fatalf("Commit after Admit refused bad input = %v; want sql.ErrTxDone (rolled back)", err)
		}
		if got := ledger(t, db); !slices.Equal(got, []int64{7}) {
			t.Fatalf("ledger = %v; want [7]", got)
		}
	})
}

// Migrate is safe from many callers at once and at every start, and keeps
// the rows it finds.
func TestMigrateConcurrentlyAndAgain(t *testing.T) {
	for _, b := range backends {
		t.Run(b.name, func(t *testing.T) {
			db := b.open(t)
			ctx := ctxFor(t)
			var wg sync.WaitGroup
			errs := make(chan error, 8)
			for range 8 {
				wg.Go(func() {
					f, err := sqlfence.New(db, b.dialect, sqlfence.WithTable("ops_fence"))
					if err == nil {
						err = f.Migrate(ctx)
					}
					errs <- err
				})
			}
			wg.Wait()
			close(errs)
			for err := range errs {
				if err != nil {
					t.Fatalf("concurrent Migrate: %v", err)
				}
			}
			f, _ := sqlfence.New(db, b.dialect, sqlfence.WithTable("ops_fence"))
			if err := f.Tx(ctx, tok("kept", 3), func(*sql.Tx) error { return nil }); err != nil {
				t.Fatal(err)
			}
			if err := f.Migrate(ctx); err != nil {
				t.Fatal(err)
			}
			if mark, ok, err := f.Mark(ctx, "kept"); err != nil || !ok || mark.Revision != 3 {
				t.Fatalf("after a second Migrate: Mark = %v, %v, %v", mark, ok, err)
			}
		})
	}
}

// A table whose name is an SQL keyword works; a schema-qualified one works
// in PostgreSQL and is refused in SQLite, where it would be another
// database file, not committed atomically with the main one.
func TestTableNames(t *testing.T) {
	eachBackend(t, func(t *testing.T, b backend, db *sql.DB, _ *sqlfence.Fence) {
		ctx := ctxFor(t)
		names := []string{"order", "user"}
		if b.dialect == sqlfence.PostgreSQL {
			exec(t, b, db, "CREATE SCHEMA ops")
			names = append(names, "ops.fence")
		} else if f, err := sqlfence.New(db, b.dialect, sqlfence.WithTable("ops.fence")); !errors.Is(err, fencing.ErrInvalidArgument) {
			t.Fatalf("New with a schema-qualified SQLite table = %v, %v; want ErrInvalidArgument", f, err)
		}
		for _, table := range names {
			f, err := sqlfence.New(db, b.dialect, sqlfence.WithTable(table))
			if err != nil {
				t.Fatal(err)
			}
			if err := f.Migrate(ctx); err != nil {
				t.Fatalf("Migrate %s: %v", table, err)
			}
			if err := f.Tx(ctx, tok("t", 2), func(*sql.Tx) error { return nil }); err != nil {
				t.Fatalf("Tx on %s: %v", table, err)
			}
			if err := f.Tx(ctx, tok("t", 1), func(*sql.Tx) error { return nil }); !errors.Is(err, fencing.ErrStaleToken) {
				t.Fatalf("stale Tx on %s: %v", table, err)
			}
		}
	})
}

// Bad input gets a sentinel error, never a panic, and writes nothing.
func TestBadInput(t *testing.T) {
	eachBackend(t, func(t *testing.T, b backend, db *sql.DB, fence *sqlfence.Fence) {
		ctx := ctxFor(t)
		for _, tc := range []struct {
			name string
			opts []sqlfence.Option
			d    sqlfence.Dialect
			db   *sql.DB
			want error
		}{
			{"nil db", nil, b.dialect, nil, fencing.ErrInvalidArgument},
			{"no dialect", nil, 0, db, fencing.ErrInvalidArgument},
			{"unknown dialect", nil, 99, db, fencing.ErrInvalidArgument},
			{"quoted table", []sqlfence.Option{sqlfence.WithTable(`"x"; DROP TABLE ledger`)}, b.dialect, db, fencing.ErrInvalidArgument},
			{"upper-case table", []sqlfence.Option{sqlfence.WithTable("Fence")}, b.dialect, db, fencing.ErrInvalidArgument},
			{"three-part table", []sqlfence.Option{sqlfence.WithTable("a.b.c")}, b.dialect, db, fencing.ErrInvalidArgument},
			{"empty table", []sqlfence.Option{sqlfence.WithTable("")}, b.dialect, db, fencing.ErrInvalidArgument},
			{"bad name", []sqlfence.Option{sqlfence.WithName("a#b")}, b.dialect, db, fencing.ErrInvalidName},
		} {
			if f, err := sqlfence.New(tc.db, tc.d, tc.opts...); !errors.Is(err, tc.want) || f != nil {
				t.Errorf("New with %s = %v, %v; want %v", tc.name, f, err, tc.want)
			}
		}
		if _, err := sqlfence.New(db, b.dialect, nil); err != nil {
			t.Errorf("New with a nil option: %v", err)
		}
		noop := func(*sql.Tx) error { return nil }
		var zero *sqlfence.Fence
		var nilCtx context.Context
		for _, tc := range []struct {
			name string
			call func() error
			want error
		}{
			{"zero token", func() error { return fence.Tx(ctx, fencing.Token{}, noop) }, fencing.ErrInvalidName},
			{"revision 0", func() error { return fence.Tx(ctx, tok("x", 0), noop) }, fencing.ErrInvalidToken},
			{"negative revision", func() error { return fence.Tx(ctx, tok("x", -1), noop) }, fencing.ErrInvalidToken},
			{"no cluster", func() error { return fence.Tx(ctx, fencing.Token{Name: "x", Revision: 1}, noop) }, fencing.ErrInvalidToken},
			{"invalid name", func() error { return fence.Tx(ctx, tok("a#b", 1), noop) }, fencing.ErrInvalidName},
			{"nil fn", func() error { return fence.Tx(ctx, tok("x", 1), nil) }, fencing.ErrInvalidArgument},
			{"nil ctx", func() error { return fence.Tx(nilCtx, tok("x", 1), noop) }, fencing.ErrInvalidArgument},
			{"nil Fence", func() error { return zero.Tx(ctx, tok("x", 1), noop) }, fencing.ErrInvalidArgument},
			{"nil tx", func() error { return fence.Admit(ctx, nil, tok("x", 1)) }, fencing.ErrInvalidArgument},
			{"Mark bad name", func() error { _, _, err := fence.Mark(ctx, ""); return err }, fencing.ErrInvalidName},
			{"Reset zero cluster", func() error { return fence.Reset(ctx, "x", 0) }, fencing.ErrInvalidArgument},
			{"Reset bad name", func() error { return fence.Reset(ctx, "\n", 1) }, fencing.ErrInvalidName},
			{"Migrate nil ctx", func() error { return fence.Migrate(nilCtx) }, fencing.ErrInvalidArgument},
		} {
			if err := tc.call(); !errors.Is(err, tc.want) {
				t.Errorf("%s: %v; want %v", tc.name, err, tc.want)
			}
		}
		var rows int
		if err := db.QueryRowContext(ctx, "SELECT count(*) FROM "+sqlfence.DefaultTable).Scan(&rows); err != nil || rows != 0 {
			t.Fatalf("fence rows after bad input: %d, %v", rows, err)
		}
		db.Close()
		if err := fence.Tx(ctx, tok("x", 1), noop); !errors.Is(err, fencing.ErrInvalidArgument) {
			t.Fatalf("Tx on a closed db = %v; want ErrInvalidArgument", err)
		}
		if _, _, err := fence.Mark(ctx, "x"); !errors.Is(err, fencing.ErrInvalidArgument) {
			t.Fatalf("Mark on a closed db = %v; want ErrInvalidArgument", err)
		}
	})
}
