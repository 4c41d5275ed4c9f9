// Command demo tells the leasehold story in under a minute, on an embedded
// etcd (no setup) or on a real cluster (--endpoints).
//
// Three worker processes (this program, re-executed) run election.Run. The
// leader increments a counter in etcd with guarded read-modify-write txns and
// records each value in a ledger: a table in a SQL database that every
// worker writes to directly, in transactions fenced by its term's token
// (fencing/sqlfence). The ledger is a SQLite file of the demo's own, or with
// --ledger-dsn a PostgreSQL database, or with --ledger redis://... a Redis
// list fenced by fencing/redisfence. Then the demo freezes the leader with
// SIGSTOP right after it read the counter and before it writes, for longer
// than the lease TTL. Another worker takes over with a greater fencing token
// and keeps counting. When the old leader is resumed (SIGCONT) it carries on
// with its writes, as a paused process does: etcd refuses its guarded txn
// (guard.ErrNotOwner) and the database refuses its stale token
// (fencing.ErrStaleToken). Without the guard and the fence, those writes
// would have set the counter back and put an old leader's row in the ledger
// after its successor's.
//
// The demo prints a timeline on stdout and a verdict, and exits 0 only if
// the verdict holds: the counter equals the acknowledged increments (lost
// updates: 0), both stale writes were rejected, and the ledger's tokens, in
// commit order, never went back.
//
// Usage:
//
//	go run ./examples/demo
//	go run ./examples/demo --ledger-dsn postgres://me@db:5432/scratch
//	go run ./examples/demo --ledger redis://localhost:6379/0
//	go run ./examples/demo --endpoints https://etcd-0:2379 --cacert ca.pem --cert me.pem --key me-key.pem
//
// With --ledger-dsn the demo creates two tables named for the run
// (leasehold_demo_RUN and leasehold_demo_RUN_fence) and drops them at the end;
// with --ledger redis://... it appends to a list, {leasehold_demo_RUN}:rows,
// fenced by redisfence, and deletes the list and its mark at the end. The
// DSN reaches the workers through their environment. The database must
// answer within 5 s.
//
// With neither --endpoints nor ETCDCTL_ENDPOINTS it starts an embedded etcd
// in this process. Connection flags (--endpoints, --cacert, --cert, --key,
// --user, --password, --dial-timeout) and their ETCDCTL_* variables work as
// for etcdctl, and are handed to the workers (the password through their
// environment, not their command line). Against a given cluster every step
// is bounded: connecting takes at most --dial-timeout, each etcd call has a
// deadline, and a step of the story that makes no progress in 30 s fails
// the demo. The demo writes only under leasehold-demo/RUN/ (RUN is new for
// each run) and its election is named leasehold-demo/RUN; when it ends,
// however it ends (verdict, failure, SIGINT or SIGTERM), it stops its
// workers, which resign, and deletes both key ranges.
//
// The workers log their failures to stderr; -v adds the library's own log
// lines (terms, losses and retries, with causes), interleaved with the story.
// A loss's "early" is how long before the session's ValidUntil it was
// noticed: negative when the worker was frozen past it. Exit status: 0 when the verdict holds; 1 when it
// does not, or the demo could not run to the end (etcd unreachable, a step
// without progress, interrupted); 2 for a bad command line; --help exits 0.
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/redis/go-redis/v9"

	"github.com/leasehold/leasehold/examples/internal/connect"
	"github.com/leasehold/leasehold/examples/internal/program"
	"github.com/leasehold/leasehold/fencing"
)

// workerEnv marks a re-executed worker process; its value is the worker's name.
const workerEnv = "LEASEHOLD_DEMO_WORKER"

type config struct {
	conn    connect.Config
	ttl     time.Duration
	workers int
	run     string // this run's id: every key the demo writes is under its prefix
	// ledgerDSN is the ledger's database, PostgreSQL or (redis://) Redis;
	// "" for a SQLite file of the demo's own.
	ledgerDSN string
}

func main() {
	if name := os.Getenv(workerEnv); name != "" {
		os.Exit(workerMain(name, os.Args[1:]))
	}
	program.Main(run)
}

func parse(args []string, stderr io.Writer) (config, error) {
	var c config
	fs := program.Flags("demo", stderr, &c.conn, "",
		"usage: demo [connection flags] [--ttl D] [--workers N] [--ledger redis://... | postgres://...] [-v]",
		"  without --endpoints (or ETCDCTL_ENDPOINTS) the demo runs on an embedded etcd")
	fs.DurationVar(&c.ttl, "ttl", 2*time.Second, "lease TTL of the workers")
	fs.IntVar(&c.workers, "workers", 3, "number of worker processes (at least 2)")
	var ledgerURL string
	fs.StringVar(&ledgerURL, "ledger", "", "the ledger's database, Redis (redis://[user:password@]host:port[/db], rediss:// with TLS: the demo writes one list and one mark, and deletes them at the end) or PostgreSQL (postgres://..., as --ledger-dsn)")
	fs.StringVar(&c.ledgerDSN, "ledger-dsn", "", "PostgreSQL database for the ledger, as postgres://user@host:port/db (default: a SQLite file of the demo's own); the demo creates two tables and drops them at the end")
	err := program.Parse(fs, args, func(args []string) error {
		switch {
		case len(args) > 0:
			return fmt.Errorf("unexpected argument %q", args[0])
		case c.workers < 2:
			return fmt.Errorf("--workers %d: need at least 2", c.workers)
		case c.ttl < fencing.MinTTL:
			return fmt.Errorf("--ttl %v: the minimum is %v", c.ttl, fencing.MinTTL)
		case ledgerURL != "" && c.ledgerDSN != "":
			return errors.New("--ledger and --ledger-dsn: give one")
		case isRedis(ledgerURL):
			if _, err := redis.ParseURL(ledgerURL); err != nil {
				return fmt.Errorf("--ledger: %w", err)
			}
			c.ledgerDSN = ledgerURL
		case ledgerURL != "":
			if _, err := pgx.ParseConfig(ledgerURL); err != nil || !strings.HasPrefix(ledgerURL, "postgres") {
				return fmt.Errorf("--ledger %q: want redis://, rediss://, postgres:// or postgresql://", ledgerURL)
			}
			c.ledgerDSN = ledgerURL
		case c.ledgerDSN != "":
			if _, err := pgx.ParseConfig(c.ledgerDSN); err != nil {
				return fmt.Errorf("--ledger-dsn: %w", err)
			}
		}
		switch {
		case c.conn.Endpoints == "" && (c.conn.CACert != "" || c.conn.Cert != "" || c.conn.Key != "" || c.conn.User != ""):
			return errors.New("TLS and user flags need --endpoints: the embedded etcd uses neither")
		case c.conn.Endpoints == "":
			return nil // embedded
		}
		return c.conn.Validate()
	})
	return c, err
}

// run is the command: it returns the exit status.
func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	c, err := parse(args, stderr)
	if err != nil {
		return program.Exit("demo", stderr, err)
	}
	c.run = strconv.FormatInt(time.Now().UnixNano(), 36)
	ok, err := runDemo(ctx, c, stdout, stderr)
	switch {
	case err != nil && ctx.Err() != nil && !errors.Is(err, connect.ErrUsage):
		err = errors.New("interrupted")
	case err == nil && !ok:
		return 1 // the verdict says why
	}
	return program.Exit("demo", stderr, err)
}

// prefix is where this run keeps its keys; the demo deletes it at the end.
func (c *config) prefix() string { return "leasehold-demo/" + c.run + "/" }

// election is the name of this run's election.
func (c *config) election() string { return strings.TrimSuffix(c.prefix(), "/") }

// workerArgs passes the connection, the run and the ledger to a worker; the
// password and the ledger's DSN go by environment (ETCDCTL_PASSWORD,
// ledgerEnv), not the command line, where any user of the machine could read
// them.
func (c *config) workerArgs(l *ledger) (args, env []string) {
	user, password := c.conn.User, c.conn.Password
	if name, pw, ok := strings.Cut(user, ":"); ok && password == "" {
		user, password = name, pw
	}
	args = []string{"--endpoints", c.conn.Endpoints, "--cacert", c.conn.CACert, "--cert", c.conn.Cert,
		"--key", c.conn.Key, "--user", user, "--dial-timeout", c.conn.DialTimeout.String(),
		"--ttl", c.ttl.String(), "--run", c.run, "--ledger-driver", l.driver}
	if c.conn.Verbose {
		args = append(args, "-v")
	}
	return args, []string{"ETCDCTL_PASSWORD=" + password, ledgerEnv + "=" + l.dsn}
}
