package pgtest

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/leasehold/leasehold/fencing/fencingtest"
)

func TestMain(m *testing.M) { fencingtest.Main(m) }

func ctx(t *testing.T) context.Context {
	c, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return c
}

func TestBin(t *testing.T) {
	dir, err := Bin()
	if err != nil {
		skipOrFatal(t, err)
	}
	for _, prog := range []string{"initdb", "postgres", "pg_ctl"} {
		if !isExecutable(filepath.Join(dir, prog)) {
			t.Errorf("Bin() = %s, which has no executable %s", dir, prog)
		}
	}
}

func TestSelectOne(t *testing.T) {
	s := Shared(t)
	if s.Host != "127.0.0.1" || s.User != "leasehold" || s.Port == 0 {
		t.Errorf("server %s@%s:%d, want leasehold@127.0.0.1:PORT", s.User, s.Host, s.Port)
	}
	db := s.Open(t)
	var one int
	if err := db.QueryRowContext(ctx(t), "SELECT 1").Scan(&one); err != nil || one != 1 {
		t.Fatalf("SELECT 1 = %d, %v", one, err)
	}
	var version string
	if err := db.QueryRowContext(ctx(t), "SHOW server_version").Scan(&version); err != nil {
		t.Fatal(err)
	}
	t.Logf("PostgreSQL %s at %s", version, s.DSN("postgres"))
}

// tableExists reports whether db has a table named name.
func tableExists(t *testing.T, db *sql.DB, name string) bool {
	t.Helper()
	var found bool
	if err := db.QueryRowContext(ctx(t), "SELECT to_regclass($1) IS NOT NULL", name).Scan(&found); err != nil {
		t.Fatal(err)
	}
	return found
}

func TestDatabasesAreIndependent(t *testing.T) {
	s := Shared(t)
	a, b := s.Open(t), s.Open(t)
	if _, err := a.ExecContext(ctx(t), "CREATE TABLE only_in_a (id int)"); err != nil {
		t.Fatal(err)
	}
	if !tableExists(t, a, "only_in_a") {
		t.Error("table created in a is absent from a")
	}
	if tableExists(t, b, "only_in_a") {
		t.Error("table created in a is present in b")
	}
}

func TestNewDatabaseCleanupDrops(t *testing.T) {
	s := Shared(t)
	var name string
	t.Run("user", func(t *testing.T) {
		db := s.Open(t)
		if err := db.QueryRowContext(ctx(t), "SELECT current_database()").Scan(&name); err != nil {
			t.Fatal(err)
		}
		// A connection left open does not stop the drop.
		if _, err := db.Conn(ctx(t)); err != nil {
			t.Fatal(err)
		}
	})
	var n int
	if err := s.admin.QueryRowContext(ctx(t), "SELECT count(*) FROM pg_database WHERE datname = $1", name).Scan(&n); err != nil {
		t.Fatal(err)
	}
	if name == "" || n != 0 {
		t.Errorf("database %q: %d left after its test", name, n)
	}
}

func TestParallelDatabases(t *testing.T) {
	s := Shared(t)
	for i := range 8 {
		t.Run(fmt.Sprint(i), func(t *testing.T) {
			t.Parallel()
			db := s.Open(t)
			if _, err := db.ExecContext(ctx(t), "CREATE TABLE t (id int)"); err != nil {
				t.Fatal(err)
			}
		})
	}
}

// TestStartRetriesAndStops starts a second server whose first port is
// taken, then stops it twice.
func TestStartRetriesAndStops(t *testing.T) {
	if _, err := Bin(); err != nil {
		skipOrFatal(t, err)
	}
	taken, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer taken.Close()
	takenPort := taken.Addr().(*net.TCPAddr).Port
	picks := 0
	pick := func() (int, error) {
		picks++
		if picks == 1 {
			return takenPort, nil
		}
		return freePort()
	}
	begin := time.Now()
	s, err := start(pick, false)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("started in %v after %d port picks", time.Since(begin), picks)
	stopped := false
	defer func() {
		if !stopped {
			s.stop()
		}
	}()
	if picks != 2 || s.Port == takenPort {
		t.Errorf("picked %d ports, listening on %d (taken: %d); want a second pick", picks, s.Port, takenPort)
	}
	var one int
	if err := s.admin.QueryRowContext(ctx(t), "SELECT 1").Scan(&one); err != nil {
		t.Fatal(err)
	}
	pid := s.cmd.Process.Pid

	begin = time.Now()
	s.stop()
	stopped = true
	t.Logf("stopped in %v", time.Since(begin))
	s.stop()
	select {
	case <-s.exited:
	default:
		t.Error("postgres still running after stop")
	}
	if processAlive(pid) {
		t.Errorf("process %d still exists after stop", pid)
	}
	if _, err := os.Stat(s.Dir); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("%s after stop: %v, want it gone", s.Dir, err)
	}
}

func TestBinPicksNewest(t *testing.T) {
	root := t.TempDir()
	for _, v := range []string{"9.6", "10", "16", "17", "beta"} {
		dir := filepath.Join(root, v, "bin")
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		progs := []string{"initdb", "postgres"}
		if v == "17" {
			progs = progs[:1] // half installed: not a candidate
		}
		for _, p := range progs {
			if err := os.WriteFile(filepath.Join(dir, p), nil, 0o755); err != nil {
				t.Fatal(err)
			}
		}
	}
	defer func(g string) { binGlob = g }(binGlob)
	binGlob = filepath.Join(root, "*", "bin")
	if got, err := Bin(); got != filepath.Join(root, "16", "bin") || err != nil {
		t.Errorf("Bin() = %q, %v; want %s", got, err, filepath.Join(root, "16", "bin"))
	}
	binGlob = filepath.Join(root, "none", "*", "bin")
	if _, err := Bin(); !errors.Is(err, errNotInstalled) || !strings.Contains(err.Error(), "apt-get install -y postgresql") {
		t.Errorf("Bin() with no binaries: %v; want errNotInstalled saying how to install", err)
	}
}

// recorder is a testing.TB that records Skip and Fatal instead of ending
// the test.
type recorder struct {
	testing.TB
	skipped, failed bool
}

func (r *recorder) Helper()               {}
func (r *recorder) Skip(...any)           { r.skipped = true }
func (r *recorder) Fatal(...any)          { r.failed = true }
func (r *recorder) Fatalf(string, ...any) { r.failed = true }
func (r *recorder) Skipf(string, ...any)  { r.skipped = true }

func TestMissingBinariesSkipOutsideCI(t *testing.T) {
	missing := fmt.Errorf("%w: none here", errNotInstalled)
	for _, c := range []struct {
		ci   string
		err  error
		skip bool
	}{
		{"", missing, true},
		{"false", missing, true},
		{"true", missing, false},
		{"1", missing, false},
		{"", errors.New("initdb failed"), false},
	} {
		t.Setenv("CI", c.ci)
		r := &recorder{TB: t}
		skipOrFatal(r, c.err)
		if r.skipped != c.skip || r.failed == c.skip {
			t.Errorf("CI=%q, %v: skipped %v, failed %v; want skipped %v", c.ci, c.err, r.skipped, r.failed, c.skip)
		}
	}
}
