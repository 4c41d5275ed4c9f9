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
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"syscall"
	"time"
)

// workerEnv marks a re-executed worker process; its value is the worker's name.
const workerEnv = "LEASEHOLD_DEMO_WORKER"

type config struct {
	endpoints string
	cacert    string
	cert      string
	key       string
	ttl       time.Duration
	workers   int
}

// etcdFlags registers the flags that say how to reach etcd, shared by the
// demo and the workers it starts.
func (c *config) etcdFlags(fs *flag.FlagSet) {
	fs.StringVar(&c.endpoints, "endpoints", "", "comma-separated etcd endpoints; empty: start an embedded etcd")
	fs.StringVar(&c.cacert, "cacert", "", "CA bundle to verify etcd's certificate")
	fs.StringVar(&c.cert, "cert", "", "client certificate for etcd")
	fs.StringVar(&c.key, "key", "", "client key for etcd")
	fs.DurationVar(&c.ttl, "ttl", 2*time.Second, "lease TTL of the workers")
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
