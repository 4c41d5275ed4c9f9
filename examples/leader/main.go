// Command leader is an HTTP service whose replicas elect one leader.
//
//	leader --endpoints 127.0.0.1:2379 --listen 127.0.0.1:8081
//	leader --endpoints 127.0.0.1:2379 --listen 127.0.0.1:8082
//	leader --endpoints https://etcd-0:2379 --cacert ca.pem --cert me.pem --key me-key.pem --listen :8081
//
// Every replica campaigns in the election --name (default leader-example)
// with the address it serves on, through election.Run: when its session is
// lost (a pause past the TTL, a quorum loss, a revoked lease) it makes a new
// one and campaigns again, for as long as it runs.
//
// GET /leader answers, from Observe, who leads now (503 when nobody does or
// when etcd cannot tell), and the replicas ranked by --priority or a drain,
// each with its priority and whether it is preferred. POST /resign makes this replica step down if it
// leads (409 otherwise); it then campaigns again, at the back of the queue.
// POST /drain moves leadership off this replica and keeps it off while
// another replica that is not drained runs (a drained replica alone still
// leads); DELETE /drain ends the drain. --priority V ranks the replica by V,
// a version such as the build's (v1.5.0): while a replica of a higher
// priority runs, the others do not lead, so in a rolling upgrade the first
// replica of the new version takes over once (election.Priority).
// POST /proclaim?value=V changes the value the leader advertises (409 if
// this replica does not lead). GET /metrics serves the replica's Prometheus
// metrics (see metrics.go): leasehold_owner is 1 while it leads, as far as it
// knows. GET /healthz answers 503 while the replica cannot take part in the
// election (the session election.Run campaigns on, as election.OnSession
// reports it, can no longer vouch for its lease: etcd has not renewed it in
// time, as during a quorum loss or a partition, or it was revoked; until Run
// is granted a new one; a replica that just started gets one TTL to make its
// first session) or while it still acts
// as leader past its term's ValidUntil (guard.Health); 200 otherwise.
//
// Connection flags (--endpoints, --cacert, --cert, --key, --user,
// --password, --dial-timeout) and their ETCDCTL_* variables work as for
// etcdctl; --endpoints defaults to 127.0.0.1:2379. The replica logs to
// stderr: the address it serves on ("serving addr=..."), each change of
// leader, each term won and lost, each failed campaign and why; -v adds
// debug detail. SIGINT or SIGTERM resigns (another replica takes over at
// once) and exits 0. Exit status: 0 after a signal, 1 when etcd cannot be
// reached at start or the address cannot be served, 2 for a bad command
// line; --help exits 0.
package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"sync"
	"time"

	"github.com/leasehold/leasehold/election"
	"github.com/leasehold/leasehold/examples/internal/connect"
	"github.com/leasehold/leasehold/examples/internal/program"
	"github.com/leasehold/leasehold/fencing"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	clientv3 "go.etcd.io/etcd/client/v3"
)

func main() { program.Main(run) }

type config struct {
	conn   connect.Config
	listen string
	name   string
	ttl    time.Duration
	// priority ranks the replica (--priority); nil: the lowest, as
	// every replica of an older version of this program is.
	priority []int64
}

func parse(args []string, stderr io.Writer) (config, error) {
	var c config
	fs := program.Flags("leader", stderr, &c.conn, "127.0.0.1:2379",
		"usage: leader [connection flags] [--listen ADDR] [--name NAME] [--ttl D] [--priority V] [-v]")
	fs.StringVar(&c.listen, "listen", "127.0.0.1:8081", "address to serve HTTP on (port 0: any free port); the address served on is this replica's campaign value")
	fs.StringVar(&c.name, "name", "leader-example", "election name")
	fs.DurationVar(&c.ttl, "ttl", fencing.DefaultTTL, "lease TTL: how long a vanished leader blocks the others")
	version := fs.String("priority", "", "rank this replica by a version (1.5.0, v2): the highest live one leads")
	err := program.Parse(fs, args, func(args []string) error {
		switch {
		case len(args) > 0:
			return fmt.Errorf("unexpected argument %q", args[0])
		case c.ttl < fencing.MinTTL:
			return fmt.Errorf("--ttl %v: the minimum is %v", c.ttl, fencing.MinTTL)
		}
		if err := fencing.ValidateName(c.name); err != nil {
			return fmt.Errorf("--name: %w", err)
		}
		if *version != "" {
			p, err := election.ParseVersion(*version)
			if err != nil {
				return fmt.Errorf("--priority: %w", err)
			}
			c.priority = p
		}
		return c.conn.Validate()
	})
	return c, err
}

// run is the command: it serves until ctx ends and returns the exit status.
func run(ctx context.Context, args []string, _, stderr io.Writer) int {
	c, err := parse(args, stderr)
	cli, err := program.Connect(ctx, &c.conn, err)
	if err != nil {
		return program.Exit("leader", stderr, err)
	}
	defer cli.Close()
	ln, err := net.Listen("tcp", c.listen)
	if err != nil {
		return program.Exit("leader", stderr, err)
	}
	serve(ctx, cli, ln, c, c.conn.Logger(stderr))
	return 0
}

// serve runs a replica on ln until ctx ends, then resigns and stops serving.
func serve(ctx context.Context, cli *clientv3.Client, ln net.Listener, c config, log *slog.Logger) {
	reg := prometheus.NewRegistry()
	m := newMetrics(reg)
	r := newReplica(c.name, ln.Addr().String(), c.ttl, log)
	r.priority = c.priority
	srv := &http.Server{Handler: withMetrics(r, reg), ErrorLog: slog.NewLogLogger(log.Handler(), slog.LevelWarn)}
	var wg sync.WaitGroup
	wg.Go(func() { srv.Serve(ln) })
	log.Info("serving", "addr", ln.Addr().String(), "election", c.name)
	r.run(ctx, cli, m.observer())
	log.Info("stopped: resigned if leading")
	srv.Close()
	wg.Wait()
}

// withMetrics serves GET /metrics from g, and every other request from h.
func withMetrics(h http.Handler, g prometheus.Gatherer) http.Handler {
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", promhttp.HandlerFor(g, promhttp.HandlerOpts{}))
	mux.Handle("/", h)
	return mux
}
