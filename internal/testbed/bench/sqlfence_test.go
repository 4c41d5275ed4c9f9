package bench_test

import (
	"context"
	"database/sql"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	_ "github.com/jackc/pgx/v5/stdlib" // registers "pgx"
	"github.com/leasehold/leasehold/fencing"
	"github.com/leasehold/leasehold/fencing/sqlfence"
	"github.com/leasehold/leasehold/internal/testbed/pgtest"
)

// sqlBench is a PostgreSQL database of srv with a migrated fence and a
// table of accounts, one row per writer.
func sqlBench(b *testing.B, srv *pgtest.Server, rows int) (*sql.DB, *sqlfence.Fence) {
	db := srv.Open(b)
	db.SetMaxOpenConns(64)
	db.SetMaxIdleConns(64)
	ctx := context.Background()
	fence, err := sqlfence.New(db, sqlfence.PostgreSQL)
	if err != nil {
		b.Fatal(err)
	}
	if err := fence.Migrate(ctx); err != nil {
		b.Fatal(err)
	}
	if _, err := db.ExecContext(ctx, "CREATE TABLE accounts (id int PRIMARY KEY, n bigint NOT NULL)"); err != nil {
		b.Fatal(err)
	}
	if _, err := db.ExecContext(ctx, "INSERT INTO accounts SELECT g, 0 FROM generate_series(0, $1) g", rows); err != nil {
		b.Fatal(err)
	}
	return db, fence
}

const updateAccount = "UPDATE accounts SET n = n + 1 WHERE id = $1"

// plainUpdate is the baseline: the same one-row update in a transaction of
// its own, unfenced.
func plainUpdate(ctx context.Context, db *sql.DB, id int) error {
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	if _, err := tx.ExecContext(ctx, updateAccount, id); err != nil {
		tx.Rollback()
		return err
	}
	return tx.Commit()
}

func fencedUpdate(ctx context.Context, fence *sqlfence.Fence, t fencing.Token, id int) error {
	return fence.Tx(ctx, t, func(tx *sql.Tx) error {
		_, err := tx.ExecContext(ctx, updateAccount, id)
		return err
	})
}

// BenchmarkSQLFenceUpdate is a fenced one-row update (sqlfence.Tx: begin,
// raise the fence, update, commit) against the same update in a plain
// transaction (begin, update, commit) on the same PostgreSQL, interleaved:
// every iteration runs one of each, in alternating order, so drift in the
// machine's load falls on both alike. It reports each side's p50/p99 and
// ratio-p50 (fenced over plain). The fence costs one statement in the
// transaction and no request to etcd.
//
// server=durable is PostgreSQL as users run it, every commit flushed to
// disk. server=nofsync is the tests' server (fsync and synchronous_commit
// off): a commit costs no more than a statement's round trip, which makes
// the fence's statement the largest share of the transaction it can be.
func BenchmarkSQLFenceUpdate(b *testing.B) {
	b.Run("server=durable", func(b *testing.B) { benchUpdate(b, pgtest.StartDurable(b)) })
	b.Run("server=nofsync", func(b *testing.B) { benchUpdate(b, pgtest.Shared(b)) })
}

func benchUpdate(b *testing.B, srv *pgtest.Server) {
	db, fence := sqlBench(b, srv, 1)
	ctx := context.Background()
	token := fencing.Token{Name: "bench/update", Revision: 1, Cluster: 1}
	fencedVsPlain(b, [2]func() error{
		func() error { return plainUpdate(ctx, db, 1) },
		func() error { return fencedUpdate(ctx, fence, token, 1) },
	})
}

// fencedVsPlain times sides[0] (plain) and sides[1] (fenced) in alternating
// order, one of each per iteration, after 200 pairs to warm connections and
// caches, and reports each side's p50/p99 and the ratios fenced over plain.
func fencedVsPlain(b *testing.B, sides [2]func() error) {
	took := alternateTimes(b, 200, func(side int) time.Duration {
		start := time.Now()
		if err := sides[side](); err != nil {
			b.Fatal(err)
		}
		return time.Since(start)
	})
	pct := percentileMs
	for i, side := range []string{"plain", "fenced"} {
		b.ReportMetric(pct(took[i], 0.5), side+"-p50-ms")
		b.ReportMetric(pct(took[i], 0.99), side+"-p99-ms")
	}
	b.ReportMetric(pct(took[1], 0.5)/pct(took[0], 0.5), "ratio-p50")
	b.ReportMetric(pct(took[1], 0.99)/pct(took[0], 0.99), "ratio-p99")
}

// BenchmarkSQLFenceWriters is the throughput of W writers at once, each
// updating its own row: plain, fenced each under its own name (distinct),
// and fenced all under one name (shared, which serialises them: every
// transaction of a name holds its fence row). distinct should track plain as
// W grows: the fence adds no contention across names.
func BenchmarkSQLFenceWriters(b *testing.B) {
	for _, writers := range []int{1, 4, 16} {
		for _, mode := range []string{"plain", "distinct", "shared"} {
			b.Run(fmt.Sprintf("writers=%d/%s", writers, mode), func(b *testing.B) {
				db, fence := sqlBench(b, pgtest.Shared(b), writers)
				ctx := context.Background()
				var next atomic.Int64
				var wg sync.WaitGroup
				b.ResetTimer()
				start := time.Now()
				for w := range writers {
					wg.Go(func() {
						name := fmt.Sprintf("bench/writer-%d", w)
						if mode == "shared" {
							name = "bench/shared"
						}
						token := fencing.Token{Name: name, Revision: 1, Cluster: 1}
						for next.Add(1) <= int64(b.N) {
							var err error
							if mode == "plain" {
								err = plainUpdate(ctx, db, w)
							} else {
								err = fencedUpdate(ctx, fence, token, w)
							}
							if err != nil {
								b.Error(err)
								return
							}
						}
					})
				}
				wg.Wait()
				b.StopTimer()
				b.ReportMetric(float64(b.N)/time.Since(start).Seconds(), "tx/s")
			})
		}
	}
}
