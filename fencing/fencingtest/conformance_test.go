package fencingtest_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/leasehold/leasehold/fencing"
	"github.com/leasehold/leasehold/fencing/fencingtest"
	"github.com/leasehold/leasehold/internal/testbed/kit"
	_ "modernc.org/sqlite" // registers "sqlite"
)

// tableFence is a fence over one SQLite table written as a user might write
// their own: a row per name holds the mark and the value. Its Write checks
// the mark and writes in one IMMEDIATE transaction (the write lock taken at
// BEGIN), so it is atomic: the suite must pass it.
type tableFence struct{ db *sql.DB }

// splitFence is tableFence with the classic bug: the check in one request,
// the write of value and mark in a second, so a writer between them can
// overwrite a newer token's write. The suite must fail it. Between the two
// it yields, as a client of a store over the network does, waiting for
// replies: SQLite runs in this process, and on one CPU its writers would
// otherwise seldom interleave.
type splitFence struct{ tableFence }

// pausableSplitFence is splitFence saying where it can be paused, between
// its two requests (see fencingtest.Fence).
type pausableSplitFence struct {
	splitFence
	pause func()
}

func (f *pausableSplitFence) SetPause(pause func()) { f.pause = pause }

// processFence checks tokens against marks it keeps in this process, and
// writes while it holds its mutex: right within one process, as a Gate is,
// and blind to writers in others. Only the frozen writer can tell.
type processFence struct {
	tableFence
	mu    *sync.Mutex
	marks map[string]fencing.Token // guarded by mu
}

// sqliteFile is the suite's create for these fences: a new database file.
func sqliteFile(t *testing.T) string { return filepath.Join(t.TempDir(), "fence.db") }

// openTable opens the table of the database file at path, and creates it if
// it is missing.
func openTable(t *testing.T, path string) tableFence {
	db, err := sql.Open("sqlite", "file:"+path+"?_pragma=busy_timeout(20000)&_pragma=journal_mode(WAL)&_txlock=immediate")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	// The first statement turns the file to WAL before another connection opens.
	if _, err := db.ExecContext(t.Context(), `CREATE TABLE IF NOT EXISTS fence (
		name TEXT PRIMARY KEY, cluster TEXT NOT NULL, revision INTEGER NOT NULL, value TEXT NOT NULL)`); err != nil {
		t.Fatal(err)
	}
	return tableFence{db}
}

// querier is a *sql.DB or a *sql.Tx.
type querier interface {
	ExecContext(ctx context.Context, query string, args ...any) (sql.Result, error)
	QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row
}

func (f tableFence) Write(ctx context.Context, t fencing.Token, value string) error {
	if err := valid(ctx, t); err != nil {
		return err
	}
	tx, err := f.db.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	defer tx.Rollback()
	if err := check(ctx, tx, t); err != nil {
		return err
	}
	if err := put(ctx, tx, t, value); err != nil {
		return err
	}
	return tx.Commit()
}

func (f splitFence) Write(ctx context.Context, t fencing.Token, value string) error {
	if err := valid(ctx, t); err != nil {
		return err
	}
	if err := check(ctx, f.db, t); err != nil {
		return err
	}
	runtime.Gosched() // as a client does while its next request goes out
	return put(ctx, f.db, t, value)
}

func (f *pausableSplitFence) Write(ctx context.Context, t fencing.Token, value string) error {
	if err := valid(ctx, t); err != nil {
		return err
	}
	if err := check(ctx, f.db, t); err != nil {
		return err
	}
	f.pause()
	return put(ctx, f.db, t, value)
}

func (f processFence) Write(ctx context.Context, t fencing.Token, value string) error {
	if err := valid(ctx, t); err != nil {
		return err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if m, ok := f.marks[t.Name]; ok {
		if err := refuse(t, strconv.FormatUint(m.Cluster, 16), m.Revision); err != nil {
			return err
		}
	}
	if err := put(ctx, f.db, t, value); err != nil {
		return err
	}
	f.marks[t.Name] = t
	return nil
}

// valid refuses what no fence may write with.
func valid(ctx context.Context, t fencing.Token) error {
	if ctx == nil {
		return fmt.Errorf("%w: nil ctx", fencing.ErrInvalidArgument)
	}
	if err := fencing.ValidateName(t.Name); err != nil {
		return err
	}
	if t.Revision <= 0 || t.Cluster == 0 {
		return fmt.Errorf("%w: %v", fencing.ErrInvalidToken, t)
	}
	return nil
}

// check refuses t if the row of its name holds another cluster or a greater
// revision.
func check(ctx context.Context, q querier, t fencing.Token) error {
	var cluster string
	var rev int64
	err := q.QueryRowContext(ctx, "SELECT cluster, revision FROM fence WHERE name = ?", t.Name).Scan(&cluster, &rev)
	switch {
	case errors.Is(err, sql.ErrNoRows):
		return nil
	case err != nil:
		return err
	}
	return refuse(t, cluster, rev)
}

// refuse refuses t if the mark, of cluster (hex) at rev, is of another
// cluster or greater.
func refuse(t fencing.Token, cluster string, rev int64) error {
	switch {
	case cluster != strconv.FormatUint(t.Cluster, 16):
		return fmt.Errorf("%w: fence of cluster %s", fencing.ErrClusterMismatch, cluster)
	case rev > t.Revision:
		return fmt.Errorf("%w: fence at %d", fencing.ErrStaleToken, rev)
	}
	return nil
}

// put writes value and raises the mark to t, unconditionally.
func put(ctx context.Context, q querier, t fencing.Token, value string) error {
	_, err := q.ExecContext(ctx, `INSERT INTO fence (name, cluster, revision, value) VALUES (?, ?, ?, ?)
		ON CONFLICT (name) DO UPDATE SET cluster = excluded.cluster, revision = excluded.revision, value = excluded.value`,
		t.Name, strconv.FormatUint(t.Cluster, 16), t.Revision, value)
	return err
}

func (f tableFence) Read(ctx context.Context, name string) (fencing.Token, bool, string, error) {
	var cluster, value string
	var rev int64
	err := f.db.QueryRowContext(ctx, "SELECT cluster, revision, value FROM fence WHERE name = ?", name).Scan(&cluster, &rev, &value)
	if errors.Is(err, sql.ErrNoRows) {
		return fencing.Token{}, false, "", nil
	}
	if err != nil {
		return fencing.Token{}, false, "", err
	}
	id, err := strconv.ParseUint(cluster, 16, 64)
	return fencing.Token{Name: name, Revision: rev, Cluster: id}, true, value, err
}

// The suite passes a fence whose check and write are one transaction.
func TestFenceConformanceOfAnAtomicFence(t *testing.T) {
	fencingtest.FenceConformance(t, sqliteFile, func(t *testing.T, path string) fencingtest.Fence {
		return openTable(t, path)
	})
}

// brokenEnv makes TestFenceConformanceFailsBrokenFences run the suite on the
// split fences, in the subprocess the test starts.
const brokenEnv = "FENCINGTEST_BROKEN_FENCES"

// The suite fails the same fence split into two requests, and names the
// cases that catch it: racing writers, and, once the fence says where it can
// be paused, the frozen writer too. It fails the fence that checks in the
// writer's process, in the frozen writer alone. Every other case passes,
// since these fences are right one write at a time. The suite runs in a
// subprocess, whose failures are this test's evidence.
func TestFenceConformanceFailsBrokenFences(t *testing.T) {
	if os.Getenv(brokenEnv) == "1" {
		runOnBrokenFences(t)
		return
	}
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.CommandContext(fencingtest.Context(t, 2*fencingtest.Wait), exe,
		"-test.run=^"+regexp.QuoteMeta(t.Name())+"$", "-test.count=1", "-test.v")
	cmd.Env = append(os.Environ(), brokenEnv+"=1")
	kit.SetDeathSignal(cmd)
	out, err := cmd.CombinedOutput()
	var exit *exec.ExitError
	if !errors.As(err, &exit) || exit.ExitCode() != 1 {
		t.Fatalf("the suite on broken fences: %v; want exit status 1. Output:\n%s", err, out)
	}
	want := map[string]string{
		"split/racing_writers":      "FAIL",
		"split/frozen_writer":       "PASS",
		"pausable/racing_writers":   "FAIL",
		"pausable/frozen_writer":    "FAIL",
		"in-process/racing_writers": "PASS",
		"in-process/frozen_writer":  "FAIL",
	}
	for _, c := range []string{"stale_token_refused", "same_token_passes_again", "newer_token_passes",
		"other_cluster_refused", "bad_input_refused"} {
		for _, fence := range []string{"split", "pausable", "in-process"} {
			want[fence+"/"+c] = "PASS"
		}
	}
	for c, verdict := range want {
		got := "no result"
		if m := regexp.MustCompile(`--- (PASS|FAIL|SKIP): ` + regexp.QuoteMeta(t.Name()+"/"+c) + ` `).FindSubmatch(out); m != nil {
			got = string(m[1])
		}
		if got != verdict {
			t.Errorf("case %s: %s; want %s", c, got, verdict)
		}
	}
	for _, says := range []string{"racing writers, round ", "want mark", "the frozen writer's Write with"} {
		if !strings.Contains(string(out), says) {
			t.Errorf("the suite's output does not say %q", says)
		}
	}
	if t.Failed() {
		t.Logf("the suite's output:\n%s", out)
	}
}

// runOnBrokenFences runs the suite on each broken fence, in the subprocess.
func runOnBrokenFences(t *testing.T) {
	for _, broken := range []struct {
		name  string
		fence func(tableFence) fencingtest.Fence
	}{
		{"split", func(f tableFence) fencingtest.Fence { return splitFence{f} }},
		{"pausable", func(f tableFence) fencingtest.Fence { return &pausableSplitFence{splitFence: splitFence{f}} }},
		{"in-process", func(f tableFence) fencingtest.Fence {
			return processFence{f, new(sync.Mutex), map[string]fencing.Token{}}
		}},
	} {
		t.Run(broken.name, func(t *testing.T) {
			fencingtest.FenceConformance(t, sqliteFile, func(t *testing.T, path string) fencingtest.Fence {
				return broken.fence(openTable(t, path))
			})
		})
	}
}
