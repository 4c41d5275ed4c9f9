// Package pgtest starts a real PostgreSQL server for a test binary: one
// server per binary (Shared), a fresh database per test (NewDatabase, Open).
//
// The server runs from Debian's packaged binaries (/usr/lib/postgresql/*/bin,
// `apt-get install -y postgresql`). initdb and postgres refuse to run as
// root, so when the test runs as root they run as the system user postgres.
// The server dies with the test binary, even one that is killed; Stop, which
// fencingtest.Main runs after the tests, shuts it down and removes its files.
package pgtest

import (
	"bytes"
	"cmp"
	"context"
	"database/sql"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"net/url"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	_ "github.com/jackc/pgx/v5/stdlib" // the "pgx" database/sql driver
	"github.com/leasehold/leasehold/fencing/fencingtest"
)

const (
	// readyTimeout bounds the wait for a started server to accept connections.
	readyTimeout = 30 * time.Second
	// pollInterval is how often that wait tries a connection.
	pollInterval = 50 * time.Millisecond
	// connectTimeout bounds one connection attempt of that wait: a port
	// taken by something else may accept and never answer.
	connectTimeout = 2 * time.Second
	// stopTimeout bounds each step of stopping: the fast shutdown, then
	// SIGQUIT, then SIGKILL.
	stopTimeout = 15 * time.Second
	// portAttempts is how many free ports start tries: another process can
	// take a port between our choosing it and postgres binding it.
	portAttempts = 3
	// dirPrefix starts the name of every server's directory in os.TempDir().
	dirPrefix = "pgtest-"
	// ownerFile, in a server's directory, holds the test binary's pid.
	ownerFile = "owner.pid"
)

// binGlob matches the directories Bin looks in.
var binGlob = "/usr/lib/postgresql/*/bin"

// installHint says how to get the binaries.
const installHint = "install them with `apt-get install -y postgresql`"

// errNotInstalled is the error of Bin, and of Shared's start, when there
// are no PostgreSQL binaries.
var errNotInstalled = errors.New("pgtest: PostgreSQL is not installed")

// errPortInUse is the error of launch when postgres could not bind its port.
var errPortInUse = errors.New("pgtest: port in use")

// Server is one PostgreSQL server started for the test binary. It accepts
// TCP connections on Host:Port as User, a superuser, without a password. Its
// methods are safe for concurrent use.
type Server struct {
	Host string // always 127.0.0.1
	Port int
	User string // always "leasehold"
	Dir  string // holds data/ (the cluster), sock/ (its Unix socket) and postgres.log

	bin     string
	durable bool     // PostgreSQL's own defaults: every commit flushed to disk
	as      *account // nil: run the programs as the current user
	admin   *sql.DB  // connected to the database "postgres", to create and drop databases
	cmd     *exec.Cmd
	exited  chan struct{} // closed once cmd has exited and been reaped
	err     error         // cmd.Wait's result, once exited is closed

	stopOnce sync.Once
}

// account is the user, other than the current one, that runs initdb,
// postgres and pg_ctl.
type account struct {
	name     string
	uid, gid uint32
}

var shared struct {
	once    sync.Once
	mu      sync.Mutex
	srv     *Server
	err     error
	stopped bool
}

// Shared returns the test binary's server, starting it on first use; every
// later call, from any goroutine, returns the same server. A start failure
// is remembered and reported to every caller with t.Fatal. If the PostgreSQL
// binaries are missing, Shared calls t.Skip saying how to install them, or,
// when the environment has CI=true, t.Fatal: in CI a missing server is a
// failure, not a skip. Once the server is started, fencingtest.Main stops it
// after the tests (through fencingtest.AtExit); a binary with another TestMain
// must call Stop itself after m.Run. A binary that dies without Stop takes
// the server with it (on Linux, by a parent-death signal), and the next
// start removes the directory it left.
func Shared(t testing.TB) *Server {
	t.Helper()
	shared.once.Do(func() {
		s, err := start(freePort, false)
		shared.mu.Lock()
		shared.srv, shared.err = s, err
		shared.mu.Unlock()
		if err == nil {
			fencingtest.AtExit(Stop)
		}
	})
	shared.mu.Lock()
	s, err, stopped := shared.srv, shared.err, shared.stopped
	shared.mu.Unlock()
	if err != nil {
		skipOrFatal(t, err)
	}
	if stopped {
		t.Fatal("pgtest: Shared called after Stop")
	}
	return s
}

// StartDurable starts a server of its own for t, with PostgreSQL's default
// durability (fsync and synchronous_commit on: a commit returns once its WAL
// is flushed to disk), for benchmarks that compare what users run in
// production. t.Cleanup stops it. Missing binaries: as Shared.
func StartDurable(t testing.TB) *Server {
	t.Helper()
	s, err := start(freePort, true)
	if err != nil {
		skipOrFatal(t, err)
	}
	t.Cleanup(s.stop)
	return s
}

// skipOrFatal reports err: a skip when it is errNotInstalled outside CI,
// a failure otherwise.
func skipOrFatal(t testing.TB, err error) {
	t.Helper()
	switch {
	case !errors.Is(err, errNotInstalled):
		t.Fatal(err)
	case inCI():
		t.Fatalf("%v (CI is set: a missing PostgreSQL is a failure, not a skip)", err)
	default:
		t.Skip(err)
	}
}

// inCI reports whether the environment says this is a CI run (CI=true).
func inCI() bool {
	ci, _ := strconv.ParseBool(os.Getenv("CI"))
	return ci
}

// Stop stops the shared server if it was started: a fast shutdown with
// pg_ctl, then SIGQUIT and last SIGKILL by pid if it is still running after
// a deadline. It waits until the server has exited, closes the connections
// pgtest holds itself, and removes the server's directory. Stop is safe to
// call when nothing was started, and more than once; Shared fails after it.
func Stop() {
	shared.mu.Lock()
	s := shared.srv
	if s != nil {
		shared.srv, shared.stopped = nil, true
	}
	shared.mu.Unlock()
	if s != nil {
		s.stop()
	}
}

// DSN returns a connection string for database db on the server:
// postgres://leasehold@127.0.0.1:PORT/db?sslmode=disable.
func (s *Server) DSN(db string) string {
	u := url.URL{
		Scheme:   "postgres",
		User:     url.User(s.User),
		Host:     net.JoinHostPort(s.Host, strconv.Itoa(s.Port)),
		Path:     "/" + db,
		RawQuery: "sslmode=disable",
	}
	return u.String()
}

// dbCount makes database names unique within the test binary, and so
// within its server.
var dbCount atomic.Int64

// NewDatabase creates an empty database, under a name no other call in this
// test binary uses, and returns its DSN. t.Cleanup drops it, ending any
// connections to it still open (DROP DATABASE ... WITH (FORCE)).
func (s *Server) NewDatabase(t testing.TB) string {
	t.Helper()
	name := dbName(t.Name(), dbCount.Add(1))
	ctx, cancel := context.WithTimeout(context.Background(), readyTimeout)
	defer cancel()
	if _, err := s.admin.ExecContext(ctx, "CREATE DATABASE "+quoteIdent(name)); err != nil {
		t.Fatalf("pgtest: create database %s: %v", name, err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), readyTimeout)
		defer cancel()
		if _, err := s.admin.ExecContext(ctx, "DROP DATABASE IF EXISTS "+quoteIdent(name)+" WITH (FORCE)"); err != nil {
			t.Errorf("pgtest: drop database %s: %v", name, err)
		}
	})
	return s.DSN(name)
}

// Open creates a database as NewDatabase does and returns a connection pool
// to it (database/sql with pgx's driver) that has answered a ping within
// readyTimeout. t.Cleanup closes the pool, before the database is dropped.
func (s *Server) Open(t testing.TB) *sql.DB {
	t.Helper()
	dsn := s.NewDatabase(t)
	db, err := sql.Open("pgx", dsn)
	if err != nil {
		t.Fatalf("pgtest: open %s: %v", dsn, err)
	}
	// Registered after NewDatabase's cleanup, so it runs before it.
	t.Cleanup(func() {
		if err := db.Close(); err != nil {
			t.Errorf("pgtest: close %s: %v", dsn, err)
		}
	})
	ctx, cancel := context.WithTimeout(context.Background(), readyTimeout)
	defer cancel()
	if err := db.PingContext(ctx); err != nil {
		t.Fatalf("pgtest: ping %s: %v", dsn, err)
	}
	return db
}

// dbName makes a valid, unquoted-style database name (at most 63 bytes,
// PostgreSQL's limit) from a test's name and a number unique in the binary.
func dbName(test string, n int64) string {
	var b strings.Builder
	b.WriteString("t_")
	for _, r := range strings.ToLower(test) {
		if b.Len() >= 44 {
			break
		}
		if r >= 'a' && r <= 'z' || r >= '0' && r <= '9' {
			b.WriteRune(r)
		} else {
			b.WriteByte('_')
		}
	}
	fmt.Fprintf(&b, "_%d", n)
	return b.String()
}

func quoteIdent(s string) string {
	return `"` + strings.ReplaceAll(s, `"`, `""`) + `"`
}

// Bin returns the directory of the newest /usr/lib/postgresql/VERSION/bin
// (by numeric version) that holds both initdb and postgres, or an error that
// says how to install them.
func Bin() (string, error) {
	dirs, _ := filepath.Glob(binGlob)
	type candidate struct {
		version []int
		dir     string
	}
	var cs []candidate
	for _, dir := range dirs {
		var version []int
		for f := range strings.SplitSeq(filepath.Base(filepath.Dir(dir)), ".") {
			n, err := strconv.Atoi(f)
			if err != nil {
				version = nil
				break
			}
			version = append(version, n)
		}
		if version != nil {
			cs = append(cs, candidate{version, dir})
		}
	}
	slices.SortFunc(cs, func(a, b candidate) int { return slices.Compare(b.version, a.version) })
	for _, c := range cs {
		if isExecutable(filepath.Join(c.dir, "initdb")) && isExecutable(filepath.Join(c.dir, "postgres")) {
			return c.dir, nil
		}
	}
	return "", fmt.Errorf("%w: no %s holds initdb and postgres; %s", errNotInstalled, binGlob, installHint)
}

func isExecutable(path string) bool {
	fi, err := os.Stat(path)
	return err == nil && fi.Mode().IsRegular() && fi.Mode().Perm()&0o111 != 0
}

// start initialises a cluster in a new directory and starts a server on it,
// on a port from pick; it returns once the server accepts connections. On
// error nothing is left running and the directory is gone.
func start(pick func() (int, error), durable bool) (_ *Server, err error) {
	bin, err := Bin()
	if err != nil {
		return nil, err
	}
	as, err := runAs()
	if err != nil {
		return nil, err
	}
	removeStale()
	dir, err := os.MkdirTemp("", dirPrefix)
	if err != nil {
		return nil, fmt.Errorf("pgtest: %w", err)
	}
	s := &Server{Host: "127.0.0.1", User: "leasehold", Dir: dir, bin: bin, as: as, durable: durable}
	defer func() {
		if err != nil {
			s.stop()
		}
	}()
	if err := os.WriteFile(filepath.Join(dir, ownerFile), []byte(strconv.Itoa(os.Getpid())+"\n"), 0o644); err != nil {
		return nil, fmt.Errorf("pgtest: %w", err)
	}
	if err := os.Mkdir(filepath.Join(dir, "sock"), 0o700); err != nil {
		return nil, fmt.Errorf("pgtest: %w", err)
	}
	if as != nil {
		err := filepath.WalkDir(dir, func(path string, _ fs.DirEntry, err error) error {
			if err != nil {
				return err
			}
			return os.Lchown(path, int(as.uid), int(as.gid))
		})
		if err != nil {
			return nil, fmt.Errorf("pgtest: give %s to user %s: %w", dir, as.name, err)
		}
	}
	if err := s.initdb(); err != nil {
		return nil, err
	}
	for attempt := 1; ; attempt++ {
		port, err := pick()
		if err != nil {
			return nil, fmt.Errorf("pgtest: choose a port: %w", err)
		}
		err = s.launch(port)
		if err == nil {
			break
		}
		if !errors.Is(err, errPortInUse) || attempt == portAttempts {
			return nil, err
		}
	}
	s.admin, err = sql.Open("pgx", s.DSN("postgres"))
	if err != nil {
		return nil, fmt.Errorf("pgtest: %w", err)
	}
	return s, nil
}

// runAs returns the account to run the PostgreSQL programs as: nil (the
// current user) unless the test runs as root, which initdb and postgres
// refuse; then the system user postgres that the Debian package creates.
func runAs() (*account, error) {
	if os.Geteuid() != 0 {
		return nil, nil
	}
	u, err := user.Lookup("postgres")
	if err != nil {
		return nil, fmt.Errorf("pgtest: running as root, which initdb and postgres refuse, and there is no user postgres to run them as (the package postgresql creates it; %s): %w", installHint, err)
	}
	uid, err := strconv.ParseUint(u.Uid, 10, 32)
	if err != nil {
		return nil, fmt.Errorf("pgtest: user postgres: uid %q: %w", u.Uid, err)
	}
	gid, err := strconv.ParseUint(u.Gid, 10, 32)
	if err != nil {
		return nil, fmt.Errorf("pgtest: user postgres: gid %q: %w", u.Gid, err)
	}
	return &account{name: u.Username, uid: uint32(uid), gid: uint32(gid)}, nil
}

// command returns a command that runs the PostgreSQL program prog in s.Dir,
// as s.as, in a C locale and without PG* variables from the environment,
// sending deathSig to it if the test binary dies first.
func (s *Server) command(ctx context.Context, deathSig syscall.Signal, prog string, args ...string) *exec.Cmd {
	cmd := exec.CommandContext(ctx, filepath.Join(s.bin, prog), args...)
	cmd.Dir = s.Dir
	for _, kv := range os.Environ() {
		if k, _, _ := strings.Cut(kv, "="); !strings.HasPrefix(k, "PG") && !strings.HasPrefix(k, "LC_") && k != "LANG" && k != "LANGUAGE" {
			cmd.Env = append(cmd.Env, kv)
		}
	}
	cmd.Env = append(cmd.Env, "LC_ALL=C")
	setProcAttr(cmd, s.as, deathSig)
	return cmd
}

func (s *Server) dataDir() string { return filepath.Join(s.Dir, "data") }
func (s *Server) logPath() string { return filepath.Join(s.Dir, "postgres.log") }

// initdb creates the cluster in s.Dir/data, with the superuser s.User
// trusted on every connection.
func (s *Server) initdb() error {
	ctx, cancel := context.WithTimeout(context.Background(), 2*readyTimeout)
	defer cancel()
	// --no-sync: the cluster lives only as long as the test binary.
	cmd := s.command(ctx, syscall.SIGKILL, "initdb", "-D", s.dataDir(), "--auth=trust", "-U", s.User,
		"-E", "UTF8", "--locale=C", "--no-sync")
	out, err := cmd.CombinedOutput()
	if err != nil {
		hint := ""
		if s.as != nil {
			hint = fmt.Sprintf(" (it runs as user %s, which must be able to reach %s)", s.as.name, s.Dir)
		}
		return fmt.Errorf("pgtest: %s failed%s: %v\n%s", cmd, hint, err, tail(out))
	}
	return nil
}

// launch starts postgres on port and waits until it accepts connections.
// It returns an error wrapping errPortInUse if postgres could not bind port,
// and on any error leaves no server running.
func (s *Server) launch(port int) error {
	log, err := os.OpenFile(s.logPath(), os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o644)
	if err != nil {
		return fmt.Errorf("pgtest: %w", err)
	}
	args := []string{"-D", s.dataDir(), "-k", filepath.Join(s.Dir, "sock"), "-p", strconv.Itoa(port),
		"-c", "listen_addresses=" + s.Host, "-c", "max_connections=200"}
	if !s.durable {
		// fsync, synchronous_commit and full_page_writes are off for speed
		// only: durability of the test database is not under test. Never set
		// them in anything a user runs.
		args = append(args, "-c", "fsync=off", "-c", "synchronous_commit=off", "-c", "full_page_writes=off")
	}
	cmd := s.command(context.Background(), syscall.SIGQUIT, "postgres", args...)
	cmd.Stdout, cmd.Stderr = log, log
	err = cmd.Start()
	log.Close() // postgres has its own descriptor
	if err != nil {
		return fmt.Errorf("pgtest: start %s: %w", cmd, err)
	}
	s.Port, s.cmd, s.exited = port, cmd, make(chan struct{})
	go func() {
		s.err = cmd.Wait()
		close(s.exited)
	}()
	if err := s.waitReady(); err != nil {
		s.kill()
		s.cmd = nil
		return err
	}
	return nil
}

// waitReady waits until the server accepts a connection as s.User, or has
// exited, or readyTimeout has passed.
func (s *Server) waitReady() error {
	deadline := time.Now().Add(readyTimeout)
	ticker := time.NewTicker(pollInterval)
	defer ticker.Stop()
	var lastErr error
	for {
		lastErr = s.ping(deadline)
		if lastErr == nil {
			return nil
		}
		select {
		case <-s.exited:
			log, _ := os.ReadFile(s.logPath())
			if bytes.Contains(log, []byte("could not create any TCP/IP sockets")) || bytes.Contains(log, []byte("Address already in use")) {
				return fmt.Errorf("%w: postgres could not listen on 127.0.0.1:%d:\n%s", errPortInUse, s.Port, tail(log))
			}
			return fmt.Errorf("pgtest: postgres exited before accepting connections (%v); %s:\n%s", s.err, s.logPath(), tail(log))
		case <-ticker.C:
		}
		if time.Now().After(deadline) {
			log, _ := os.ReadFile(s.logPath())
			return fmt.Errorf("pgtest: postgres on port %d accepted no connection within %v (last: %v); %s:\n%s", s.Port, readyTimeout, lastErr, s.logPath(), tail(log))
		}
	}
}

// ping connects to the server, within connectTimeout and by deadline, and
// checks that it is this server: another one may have taken the port first
// (then ours exits, unable to bind it).
func (s *Server) ping(deadline time.Time) error {
	if d := time.Now().Add(connectTimeout); d.Before(deadline) {
		deadline = d
	}
	ctx, cancel := context.WithDeadline(context.Background(), deadline)
	defer cancel()
	conn, err := pgconn.Connect(ctx, s.DSN("postgres"))
	if err != nil {
		return err
	}
	defer conn.Close(ctx)
	res, err := conn.Exec(ctx, "SHOW data_directory").ReadAll()
	if err != nil {
		return err
	}
	if len(res) != 1 || len(res[0].Rows) != 1 || len(res[0].Rows[0]) != 1 {
		return fmt.Errorf("pgtest: SHOW data_directory: unexpected result %v", res)
	}
	if got := string(res[0].Rows[0][0]); got != s.dataDir() {
		return fmt.Errorf("pgtest: port %d is served from %s, not %s", s.Port, got, s.dataDir())
	}
	return nil
}

// stop shuts the server down, if it runs, closes s.admin and removes s.Dir.
// Only its first call does anything.
func (s *Server) stop() {
	s.stopOnce.Do(func() {
		if s.admin != nil {
			s.admin.Close()
		}
		if s.cmd != nil {
			s.shutdown()
		}
		if err := os.RemoveAll(s.Dir); err != nil {
			fmt.Fprintf(os.Stderr, "pgtest: %v\n", err)
		}
	})
}

// shutdown asks the server for a fast shutdown (pg_ctl stop -m fast: roll
// back open transactions, disconnect clients, exit) and waits for it to
// exit, killing it if that takes longer than stopTimeout.
func (s *Server) shutdown() {
	select {
	case <-s.exited:
		return
	default:
	}
	ctx, cancel := context.WithTimeout(context.Background(), stopTimeout)
	defer cancel()
	// -W: pg_ctl only signals; we wait for our own child below.
	cmd := s.command(ctx, syscall.SIGKILL, "pg_ctl", "stop", "-D", s.dataDir(), "-m", "fast", "-W")
	if out, err := cmd.CombinedOutput(); err != nil {
		fmt.Fprintf(os.Stderr, "pgtest: %s: %v\n%s", cmd, err, tail(out))
	} else if s.waitExit(stopTimeout) {
		return
	}
	s.kill()
}

// kill stops the server with SIGQUIT (PostgreSQL's immediate shutdown) and,
// if it is still running after stopTimeout, SIGKILL; it returns once the
// server has exited.
func (s *Server) kill() {
	for _, sig := range []os.Signal{syscall.SIGQUIT, syscall.SIGKILL} {
		select {
		case <-s.exited:
			return
		default:
		}
		if err := s.cmd.Process.Signal(sig); err != nil && !errors.Is(err, os.ErrProcessDone) {
			fmt.Fprintf(os.Stderr, "pgtest: signal %v to postgres %d: %v\n", sig, s.cmd.Process.Pid, err)
		}
		if s.waitExit(stopTimeout) {
			return
		}
		fmt.Fprintf(os.Stderr, "pgtest: postgres %d still running %v after %v\n", s.cmd.Process.Pid, stopTimeout, sig)
	}
	<-s.exited // after SIGKILL: nothing can keep it
}

// waitExit reports whether the server exits within d.
func (s *Server) waitExit(d time.Duration) bool {
	timer := time.NewTimer(d)
	defer timer.Stop()
	select {
	case <-s.exited:
		return true
	case <-timer.C:
		return false
	}
}

// freePort returns a TCP port on 127.0.0.1 that was free a moment ago.
func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// removeStale removes the directories of servers whose test binary died
// without Stop (a panic, a timeout, a kill): the server died with it, but
// its directory (some 40 MB) stayed. A directory is removed only when
// neither the test binary that made it nor its server is running.
func removeStale() {
	dirs, _ := filepath.Glob(filepath.Join(os.TempDir(), dirPrefix+"*"))
	for _, dir := range dirs {
		owner, err := readPid(filepath.Join(dir, ownerFile))
		if err != nil || processAlive(owner) {
			continue // not ours, being made, or in use
		}
		server, err := readPid(filepath.Join(dir, "data", "postmaster.pid"))
		if err == nil && processAlive(server) {
			continue
		}
		if err != nil && !errors.Is(err, fs.ErrNotExist) {
			continue
		}
		os.RemoveAll(dir)
	}
}

// readPid reads the process id on the first line of file.
func readPid(file string) (int, error) {
	b, err := os.ReadFile(file)
	if err != nil {
		return 0, err
	}
	line, _, _ := strings.Cut(string(b), "\n")
	pid, err := strconv.Atoi(strings.TrimSpace(line))
	if err != nil || pid <= 0 {
		return 0, cmp.Or(err, fmt.Errorf("pgtest: %s: bad pid %d", file, pid))
	}
	return pid, nil
}

// tail returns the end of a log, at most a few dozen lines.
func tail(b []byte) string {
	const max = 4096
	if len(b) > max {
		b = b[len(b)-max:]
		if i := bytes.IndexByte(b, '\n'); i >= 0 {
			b = b[i+1:]
		}
	}
	return string(bytes.TrimRight(b, "\n"))
}
