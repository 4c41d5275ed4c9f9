package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/leasehold/leasehold/election"
	"github.com/leasehold/leasehold/guard"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// feedEvery is how often the runner looks for a renewed ValidUntil to pass
// to the keeper: a local read, no request to etcd. A renewal reaches the
// keeper at most this late, well within the margin.
const feedEvery = 100 * time.Millisecond

// errTermEnded says the command was stopped because its term ended.
var errTermEnded = errors.New("term ended")

type runner struct {
	cli      *clientv3.Client
	cfg      config
	log      *slog.Logger
	identity string
	exe      string        // this program, re-executed as the keeper
	limit    *atomic.Int64 // with --permits, the name's limit when the permit was taken
}

func newRunner(cli *clientv3.Client, c config, log *slog.Logger) (*runner, error) {
	exe, err := os.Executable()
	if err != nil {
		return nil, err
	}
	host, _ := os.Hostname()
	return &runner{cli: cli, cfg: c, log: log, identity: fmt.Sprintf("%s/%d", host, os.Getpid()), exe: exe,
		limit: new(atomic.Int64)}, nil
}

// term is work for election.Run and RunGroup.
func (r *runner) term(ctx context.Context, t *election.Term) error { return r.work(ctx, t) }

// work is one term (or one permit's hold): wait until no earlier command
// can run in its place, run the command under a keeper, and return once its
// process group is empty.
func (r *runner) work(ctx context.Context, t guard.Owner) error {
	if r.cfg.group != "" { // many names' terms run at once: say which
		named := *r
		named.log = r.log.With("name", t.Token().Name)
		r = &named
	}
	key, mine, err := r.claim(ctx, t)
	defer r.release(t, key, mine) // also after a claim whose reply was lost
	if err != nil {
		return err
	}
	return r.runCommand(ctx, t)
}

// runCommand starts the keeper, feeds it the term's deadline until ctx ends
// or the command exits, and waits for the keeper to exit (the command's
// group is then empty).
func (r *runner) runCommand(ctx context.Context, t guard.Owner) error {
	control, feed, err := os.Pipe()
	if err != nil {
		return err
	}
	cmd := exec.Command(r.exe, append([]string{"--grace", r.cfg.grace.String(), "--"}, r.cfg.argv...)...)
	cmd.Env = append(os.Environ(), keeperEnv+"=1",
		"LEASEHOLD_NAME="+t.Token().Name, "LEASEHOLD_TOKEN="+t.Token().String(), "LEASEHOLD_KEY="+t.Key())
	cmd.Stdout, cmd.Stderr = os.Stdout, os.Stderr
	cmd.ExtraFiles = []*os.File{control}
	// Signals for the runner's job (a terminal's Ctrl-C, kill -9 of its
	// group) must not reach the keeper: it has to outlive the runner.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	err = cmd.Start()
	control.Close()
	if err != nil {
		feed.Close()
		return fmt.Errorf("start keeper: %w", err)
	}
	exited := make(chan struct{})
	go func() {
		cmd.Wait()
		close(exited)
	}()
	r.feed(ctx, t, feed, exited)
	feed.Close()
	<-exited
	status := cmd.ProcessState.ExitCode()
	switch {
	case ctx.Err() != nil:
		return fmt.Errorf("%w: %w", errTermEnded, context.Cause(ctx))
	case status == 0:
		r.log.Info("command succeeded")
		return nil
	case status == exitStopped:
		return fmt.Errorf("%w: the keeper stopped the command at the term's deadline", errTermEnded)
	default:
		r.log.Warn("command failed; resigning", "status", status)
		return fmt.Errorf("command exited with status %d", status)
	}
}

// feed sends the keeper the term's deadline, and every extension of it,
// until ctx ends (then it says stop) or the keeper exits.
func (r *runner) feed(ctx context.Context, t guard.Owner, w io.Writer, exited <-chan struct{}) {
	var sent time.Time
	tick := time.NewTicker(feedEvery)
	defer tick.Stop()
	for {
		if vu := t.Session().ValidUntil(); !vu.Equal(sent) {
			// Read the shared clock first: a pause before time.Until makes
			// the deadline earlier, never later.
			now := monotonicNow()
			fmt.Fprintf(w, "deadline %d\n", now+time.Until(vu))
			sent = vu
		}
		select {
		case <-ctx.Done():
			r.log.Info("stopping the command", "cause", context.Cause(ctx))
			io.WriteString(w, "stop\n")
			return
		case <-exited:
			return
		case <-tick.C:
		}
	}
}
