// Command singleton runs a command on exactly one of many machines at a
// time, and stops it the moment that machine stops leading.
//
//	singleton --name nightly-backup --endpoints 10.0.0.1:2379 -- ./backup.sh --full
//
// Every replica campaigns in the election NAME; the leader runs the command
// with LEASEHOLD_TOKEN (the term's fencing token, "name@revision") and
// LEASEHOLD_KEY in its environment, so the command can fence its own writes.
// When the term is lost (lease expired or revoked, partition past the safety
// margin, key deleted), the command gets SIGTERM at once and SIGKILL after
// --grace, and the replica campaigns again. When the command exits 0 while
// leading, singleton resigns and exits 0; when it fails, singleton resigns
// and campaigns again after a backoff. Ctrl-C (or SIGTERM) stops the command,
// resigns at once so another replica takes over without waiting for the TTL,
// and exits.
//
// etcdctl lock runs a command under a lock too, but never stops it when the
// lock is lost.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/leasehold/leasehold/election"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
)

type config struct {
	name      string
	endpoints string
	ttl       time.Duration
	grace     time.Duration
	argv      []string
	stdout    io.Writer
	stderr    io.Writer
}

func main() {
	c := config{stdout: os.Stdout, stderr: os.Stderr}
	flag.StringVar(&c.name, "name", "", "election name (required)")
	flag.StringVar(&c.endpoints, "endpoints", "127.0.0.1:2379", "comma-separated etcd endpoints")
	flag.DurationVar(&c.ttl, "ttl", 10*time.Second, "lease TTL")
	flag.DurationVar(&c.grace, "grace", 10*time.Second, "time between SIGTERM and SIGKILL when the term is lost")
	flag.Usage = func() {
		fmt.Fprintln(os.Stderr, "usage: singleton --name NAME [--endpoints HOSTS] [--ttl D] [--grace D] -- command [args...]")
		flag.PrintDefaults()
	}
	flag.Parse()
	c.argv = flag.Args()
	if c.name == "" || len(c.argv) == 0 {
		flag.Usage()
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	cli, err := clientv3.New(clientv3.Config{Endpoints: strings.Split(c.endpoints, ","), DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		fmt.Fprintln(os.Stderr, "singleton:", err)
		os.Exit(1)
	}
	defer cli.Close()
	if err := run(ctx, cli, c); err != nil {
		fmt.Fprintln(os.Stderr, "singleton:", err)
		os.Exit(1)
	}
}

// run campaigns and runs the command while leading, until ctx ends or the
// command succeeds.
func run(ctx context.Context, cli *clientv3.Client, c config) error {
	host, _ := os.Hostname()
	log := slog.New(slog.NewTextHandler(c.stderr, nil)).With("election", c.name)
	return election.Run(ctx, cli, c.name, fmt.Sprintf("%s/%d", host, os.Getpid()),
		func(ctx context.Context, t *election.Term) error { return command(ctx, t, c, log) },
		election.WithTTL(c.ttl),
		election.OnStartedLeading(func(t *election.Term) { log.Info("leading", "token", t.Token()) }),
		election.OnStoppedLeading(func(t *election.Term, cause error) {
			log.Info("stopped leading", "token", t.Token(), "cause", cause)
		}))
}

// command runs the command for one term and stops it when the term ends.
func command(ctx context.Context, t *election.Term, c config, log *slog.Logger) error {
	cmd := exec.Command(c.argv[0], c.argv[1:]...)
	cmd.Env = append(os.Environ(), "LEASEHOLD_TOKEN="+t.Token().String(), "LEASEHOLD_KEY="+t.Key())
	cmd.Stdin, cmd.Stdout, cmd.Stderr = os.Stdin, c.stdout, c.stderr
	if err := cmd.Start(); err != nil {
		log.Error("command did not start", "err", err)
		return err
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case err := <-done:
		if err != nil {
			log.Warn("command failed while leading: resigning", "err", err)
		}
		return err
	case <-ctx.Done():
	}
	log.Info("term ended: stopping the command", "pid", cmd.Process.Pid, "cause", context.Cause(ctx))
	cmd.Process.Signal(syscall.SIGTERM)
	timer := time.NewTimer(c.grace)
	defer timer.Stop()
	select {
	case <-done:
	case <-timer.C:
		log.Warn("command ignored SIGTERM: killing it", "pid", cmd.Process.Pid)
		cmd.Process.Kill()
		<-done
	}
	return errors.Join(errTermEnded, context.Cause(ctx))
}

var errTermEnded = errors.New("term ended")
