// Command demo tells the leasehold story in under a minute, on an embedded
// etcd (no setup) or on a real cluster (--endpoints).
//
// Three worker processes (this program, re-executed) run election.Run. The
// leader increments a counter in etcd with guarded read-modify-write txns and
// records each value in a ledger: an HTTP server in this process behind a
// fencing.Gate. Then the demo freezes the leader with SIGSTOP right after it
// read the counter and before it writes, for longer than the lease TTL.
// Another worker takes over with a greater fencing token and keeps counting.
// When the old leader is resumed (SIGCONT) it carries on with its write, as a
// paused process does: etcd refuses its guarded txn (guard.ErrNotOwner) and
// the ledger refuses its stale token (409). Without the guard, that write
// would have set the counter back and lost every increment made meanwhile.
//
// The demo prints a timeline and a verdict, and exits 0 only if the verdict
// holds: the counter equals the acknowledged increments (lost updates: 0)
// and both stale writes were rejected.
//
// Usage:
//
//	go run ./examples/demo
//	go run ./examples/demo --endpoints https://etcd-0:2379 --cacert ca.pem --cert me.pem --key me-key.pem
//
// Against a real cluster every step is bounded (a step that makes no
// progress in 30 s fails the demo), and the demo writes only under
// leasehold-demo/<run id>/ (plus the library's election keys, which its
// workers remove when they resign), and deletes that prefix when it ends.
// Connection flags and ETCDCTL_* variables work as for etcdctl. Exit
// status: 0 when the verdict holds, 1 when it does not, 2 when the demo
// could not run (etcd unreachable, say).
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/leasehold/leasehold/examples/internal/connect"
)

// workerEnv marks a re-executed worker process; its value is the worker's name.
const workerEnv = "LEASEHOLD_DEMO_WORKER"

type config struct {
	conn    connect.Config
	run     string // this run's id: every key the demo writes is under its prefix
	ttl     time.Duration
	workers int
}

// etcdFlags registers the flags that say how to reach etcd, shared by the
// demo and the workers it starts.
func (c *config) etcdFlags(fs *flag.FlagSet) {
	c.conn.Register(fs, "")
	fs.DurationVar(&c.ttl, "ttl", 2*time.Second, "lease TTL of the workers")
	fs.StringVar(&c.run, "run", "", "(for workers) the run's id")
}

// prefix is where this run keeps its keys; the demo deletes it at the end.
func (c *config) prefix() string { return "leasehold-demo/" + c.run + "/" }

// workerArgs passes the connection to a worker; the password goes by
// environment, not the command line.
func (c *config) workerArgs() []string {
	return []string{"--endpoints", c.conn.Endpoints, "--cacert", c.conn.CACert, "--cert", c.conn.Cert,
		"--key", c.conn.Key, "--user", c.conn.User, "--dial-timeout", c.conn.DialTimeout.String(),
		"--ttl", c.ttl.String(), "--run", c.run}
}

func main() {
	if name := os.Getenv(workerEnv); name != "" {
		os.Exit(workerMain(name, os.Args[1:]))
	}
	var c config
	c.etcdFlags(flag.CommandLine)
	flag.IntVar(&c.workers, "workers", 3, "number of worker processes (at least 2)")
	flag.Parse()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	ok, err := runDemo(ctx, c, os.Stdout)
	if err != nil {
		fmt.Fprintln(os.Stderr, "demo:", err)
		os.Exit(2)
	}
	if !ok {
		os.Exit(1)
	}
}
