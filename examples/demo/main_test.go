package main

import (
	"database/sql"
	"io"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/leasehold/leasehold/internal/testbed/etcdtest"
	"github.com/leasehold/leasehold/internal/testbed/kit"
	"github.com/leasehold/leasehold/internal/testbed/redistest"

	"github.com/leasehold/leasehold/examples/internal/progtest"
	"github.com/leasehold/leasehold/fencing/fencingtest"
	"github.com/leasehold/leasehold/internal/testbed/pgtest"
)

// The demo re-executes itself for its workers: here, the test binary, whose
// main then runs workerMain.
func TestMain(m *testing.M) { progtest.Main(m, main) }

// hang bounds a whole run of the demo: far above what it needs (about ten
// seconds), so it only catches a hang.
const hang = 2 * time.Minute

// noEtcdctlEnv keeps the tester's own ETCDCTL_* settings out of the runs.
var noEtcdctlEnv = []string{"ETCDCTL_ENDPOINTS=", "ETCDCTL_CACERT=", "ETCDCTL_CERT=", "ETCDCTL_KEY=",
	"ETCDCTL_USER=", "ETCDCTL_PASSWORD=", "ETCDCTL_DIAL_TIMEOUT="}

func verdictHolds(t *testing.T, code int, stdout, stderr string) {
	t.Helper()
	t.Logf("stdout:\n%s", stdout)
	if code != 0 {
		t.Fatalf("exit %d; stderr:\n%s", code, stderr)
	}
	for _, want := range []string{"lost updates: 0", "REJECTED by etcd", "fencing.ErrStaleToken", ": OK"} {
		if !strings.Contains(stdout, want) {
			t.Errorf("output lacks %q", want)
		}
	}
}

// With no flags, the whole story runs on an embedded etcd and its verdict
// holds.
func TestDemoEmbedded(t *testing.T) {
	code, stdout, stderr := progtest.Run(t, hang, noEtcdctlEnv)
	verdictHolds(t, code, stdout, stderr)
	if strings.Contains(stderr, "level=") {
		t.Errorf("the workers' log lines interleave with the story without -v:\n%s", stderr)
	}
}

// Against a given cluster (TLS with client certificates, by flags) the demo
// writes only under its own prefix and leaves no key behind; other keys,
// even where the demo used to write, are left alone.
func TestDemoOnTLSClusterLeavesNoKeys(t *testing.T) {
	c := fencingtest.SingleTLS(t)
	for _, k := range []string{"demo/counter", "leasehold-demo/other-run/counter"} {
		if _, err := c.Admin.Put(t.Context(), k, "7"); err != nil {
			t.Fatal(err)
		}
	}
	before := etcdtest.Keys(t, c, "")
	args := []string{"--endpoints", c.Endpoints()[0], "--cacert", c.TLS.CA, "--cert", c.TLS.Cert, "--key", c.TLS.Key, "--workers", "2"}
	code, stdout, stderr := progtest.Run(t, hang, noEtcdctlEnv, args...)
	verdictHolds(t, code, stdout, stderr)
	if after := etcdtest.Keys(t, c, ""); !slices.Equal(after, before) {
		t.Fatalf("keys before the demo: %q\nafter: %q", before, after)
	}
}

// Interrupted mid-story, the demo still stops its workers and deletes its
// keys, and exits 1.
func TestDemoInterruptedLeavesNoKeys(t *testing.T) {
	c := fencingtest.SingleTLS(t)
	args := []string{"--endpoints", c.Endpoints()[0], "--cacert", c.TLS.CA, "--cert", c.TLS.Cert, "--key", c.TLS.Key, "--workers", "2"}
	p := progtest.Start(t, noEtcdctlEnv, args...)
	fencingtest.WaitFor(t, hang, "a worker to lead", func() bool { return strings.Contains(p.Stdout(), "leads with token") })
	p.Signal(t, syscall.SIGINT)
	if code := p.Wait(t, hang); code != 1 || !strings.Contains(p.Stderr(), "interrupted") {
		t.Fatalf("exit %d (want 1); stderr:\n%s", code, p.Stderr())
	}
	if keys := etcdtest.Keys(t, c, ""); len(keys) != 0 {
		t.Fatalf("keys left after the interrupted demo: %q", keys)
	}
}

// A wrong CA or nothing listening fails within the dial timeout, naming the
// endpoint; --help exits 0; a bad command line exits 2.
func TestDemoFailsClearly(t *testing.T) {
	c := fencingtest.SingleTLS(t)
	progtest.CheckConnectFailures(t, c, time.Minute, noEtcdctlEnv)
	if code, _, stderr := progtest.Run(t, time.Minute, noEtcdctlEnv, "--help"); code != 0 || !strings.Contains(stderr, "usage: demo") {
		t.Fatalf("--help: exit %d\n%s", code, stderr)
	}
	t.Setenv("ETCDCTL_ENDPOINTS", "")
	for _, args := range [][]string{
		{"--workers", "1"},
		{"--ttl", "1s"},
		{"--cacert", "ca.pem"},
		{"--endpoints", "127.0.0.1:2379", "--cert", "c.pem"},
		{"--endpoints", "ftp://x"},
		{"--nonsense"},
		{"extra"},
		{"--ledger-dsn", "://bad"},
	} {
		if code := run(t.Context(), args, io.Discard, io.Discard); code != 2 {
			t.Errorf("demo %q: exit %d; want 2", args, code)
		}
	}
}

// Workers get the connection settings, with the password out of their
// command line.
func TestWorkerArgs(t *testing.T) {
	c := config{ttl: 3 * time.Second, run: "r1"}
	c.conn.Endpoints, c.conn.User, c.conn.DialTimeout, c.conn.Verbose = "https://e:2379", "ann:s3cret", 2*time.Second, true
	c.conn.CACert, c.conn.Cert, c.conn.Key = "ca.pem", "c.pem", "k.pem"
	args, env := c.workerArgs(&ledger{driver: "pgx", dsn: "postgres://ann:pgsecret@db/x"})
	got := strings.Join(args, " ")
	for _, want := range []string{"--endpoints https://e:2379", "--cacert ca.pem", "--cert c.pem", "--key k.pem",
		"--user ann ", "--dial-timeout 2s", "--ttl 3s", "--run r1", "--ledger-driver pgx", "-v"} {
		if !strings.Contains(got+" ", want) {
			t.Errorf("worker args %q lack %q", got, want)
		}
	}
	if strings.Contains(got, "s3cret") || !slices.Contains(env, "ETCDCTL_PASSWORD=s3cret") {
		t.Errorf("password: args %q, env %q; want it in the environment only", got, env)
	}
	if strings.Contains(got, "pgsecret") || !slices.Contains(env, ledgerEnv+"=postgres://ann:pgsecret@db/x") {
		t.Errorf("ledger DSN: args %q, env %q; want it in the environment only", got, env)
	}
}

// With --ledger-dsn the ledger is a PostgreSQL database: the database
// refuses the resumed leader's write, and the demo drops the tables it made.
func TestDemoLedgerOnPostgreSQL(t *testing.T) {
	dsn := pgtest.Shared(t).NewDatabase(t)
	code, stdout, stderr := progtest.Run(t, hang, noEtcdctlEnv, "--ledger-dsn", dsn, "--workers", "2")
	verdictHolds(t, code, stdout, stderr)
	if !strings.Contains(stdout, "REJECTED by PostgreSQL") {
		t.Errorf("output lacks the database's refusal")
	}
	db, err := sql.Open("pgx", dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	var left int
	err = db.QueryRowContext(t.Context(),
		"SELECT count(*) FROM information_schema.tables WHERE table_name LIKE 'leasehold%'").Scan(&left)
	if err != nil || left != 0 {
		t.Fatalf("%d tables left after the demo (%v)", left, err)
	}
}

// A ledger database that does not answer fails the demo within its bound,
// saying which, with no key left in etcd.
func TestDemoUnreachableLedger(t *testing.T) {
	c := fencingtest.SingleTLS(t)
	addr, err := kit.FreeAddr() // nothing listens there
	if err != nil {
		t.Fatal(err)
	}
	args := []string{"--endpoints", c.Endpoints()[0], "--cacert", c.TLS.CA, "--cert", c.TLS.Cert, "--key", c.TLS.Key,
		"--ledger-dsn", "postgres://nobody@" + addr + "/x"}
	code, _, stderr := progtest.Run(t, time.Minute, noEtcdctlEnv, args...)
	if code != 1 || !strings.Contains(stderr, "cannot reach the ledger database (PostgreSQL)") {
		t.Fatalf("exit %d (want 1); stderr:\n%s", code, stderr)
	}
	if n := strings.Count(stderr, "connection refused"); n != 1 {
		t.Errorf("the refusal is told %d times; want once:\n%s", n, stderr)
	}
	if keys := etcdtest.Keys(t, c, ""); len(keys) != 0 {
		t.Fatalf("keys left: %q", keys)
	}
}

// With --ledger redis://... the ledger is a Redis list: Redis refuses the
// resumed leader's write, and the demo deletes the list and its mark.
func TestDemoLedgerOnRedis(t *testing.T) {
	srv := redistest.Shared(t)
	code, stdout, stderr := progtest.Run(t, hang, noEtcdctlEnv, "--ledger", "redis://"+srv.Addr+"/0", "--workers", "2")
	verdictHolds(t, code, stdout, stderr)
	if !strings.Contains(stdout, "REJECTED by Redis") {
		t.Errorf("output lacks Redis's refusal")
	}
	if keys, err := srv.Command("KEYS", "*"); err != nil || keys != "" {
		t.Fatalf("keys left in Redis after the demo: %q (%v)", keys, err)
	}
}

// A Redis ledger that does not answer fails the demo within its bound,
// saying which; bad --ledger values are usage errors.
func TestDemoUnreachableRedisLedger(t *testing.T) {
	addr, err := kit.FreeAddr() // nothing listens there
	if err != nil {
		t.Fatal(err)
	}
	code, _, stderr := progtest.Run(t, time.Minute, noEtcdctlEnv, "--ledger", "redis://"+addr)
	if code != 1 || !strings.Contains(stderr, "cannot reach the ledger database (Redis)") {
		t.Fatalf("exit %d (want 1); stderr:\n%s", code, stderr)
	}
	t.Setenv("ETCDCTL_ENDPOINTS", "")
	for _, args := range [][]string{
		{"--ledger", "ftp://x"},
		{"--ledger", "redis://x:notaport"},
		{"--ledger", "redis://x", "--ledger-dsn", "postgres://y/z"},
	} {
		if code := run(t.Context(), args, io.Discard, io.Discard); code != 2 {
			t.Errorf("demo %q: exit %d; want 2", args, code)
		}
	}
}
