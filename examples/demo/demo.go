package main

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/leasehold/leasehold/fencing"
	"github.com/leasehold/leasehold/fencing/inspect"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// stepTimeout bounds every wait of the story; a step that takes longer
// fails the demo instead of hanging it.
const stepTimeout = 30 * time.Second

// event is one line a worker printed.
type event struct {
	worker int
	kind   string   // leading, ack, ledger, frozen, fenced, stopped; exited when its output ends
	args   []string // the rest of the line
}

type demo struct {
	out     io.Writer // the story
	errOut  io.Writer // the workers' logs, and problems
	start   time.Time
	cli     *clientv3.Client
	procs   []*exec.Cmd
	stdins  []io.WriteCloser
	events  chan event
	readers sync.WaitGroup // one per worker, reading its stdout into events
	ledger  *ledger

	acks     int   // guarded increments acknowledged
	lastAck  int64 // the counter value of the last acknowledged increment
	rejected int   // stale writes rejected: by etcd and by the ledger
}

func runDemo(ctx context.Context, c config, out, errOut io.Writer) (bool, error) {
	d := &demo{out: out, errOut: errOut, start: time.Now(), events: make(chan event, 1024)}
	where := c.conn.Endpoints
	if where == "" {
		e, err := startEmbedded()
		if err != nil {
			return false, fmt.Errorf("embedded etcd: %w", err)
		}
		defer e.Close()
		c.conn.Endpoints, where = e.URL, "embedded etcd at "+e.URL
	}
	cli, err := c.conn.Dial(ctx)
	if err != nil {
		return false, err
	}
	defer cli.Close()
	d.cli = cli
	defer d.cleanup(c)
	d.ledger, err = openLedger(ctx, "", c.ledgerDSN, c.run, true)
	if err != nil {
		return false, err
	}
	defer d.ledger.Close()
	defer func() {
		if err := d.ledger.drop(); err != nil {
			fmt.Fprintf(d.errOut, "demo: could not drop the ledger %s: %v\n", d.ledger.table, err)
		}
	}()
	d.printf("leasehold demo: %d workers, lease TTL %v, %s, keys under %s", c.workers, c.ttl, where, c.prefix())
	d.printf("ledger: %s, every write fenced by the writer's token", d.ledger.describe())
	defer d.stopWorkers() // also those started before one failed to start
	if err := d.startWorkers(c); err != nil {
		return false, err
	}
	if err := d.story(ctx, c); err != nil {
		return false, err
	}
	d.stopWorkers()
	return d.verdict(ctx, c)
}

// cleanup deletes every key of this run, the counter and the election's
// (the workers, stopped by now, resigned: any left are a killed worker's),
// within a bound, even when ctx has ended.
func (d *demo) cleanup(c config) {
	ctx, cancel := context.WithTimeout(context.Background(), stepTimeout)
	defer cancel()
	election, err := inspect.KeyPrefix(fencing.DefaultRoot, fencing.KindElection, c.election())
	if err != nil {
		fmt.Fprintf(d.errOut, "demo: %v\n", err)
		return
	}
	for _, prefix := range []string{c.prefix(), election} {
		if _, err := d.cli.Delete(ctx, prefix, clientv3.WithPrefix()); err != nil {
			fmt.Fprintf(d.errOut, "demo: could not delete the demo's keys under %s: %v\n", prefix, err)
		}
	}
}

func (d *demo) printf(format string, args ...any) {
	fmt.Fprintf(d.out, "%6.2fs  %s\n", time.Since(d.start).Seconds(), fmt.Sprintf(format, args...))
}

// story: a leader counts; it is frozen mid-write past its TTL; another
// takes over; the old one resumes and its writes are refused.
func (d *demo) story(ctx context.Context, c config) error {
	first, err := d.until(ctx, "a worker to lead", func(e event) bool { return e.kind == "leading" })
	if err != nil {
		return err
	}
	d.printf("worker %d leads with token %s", first.worker, first.args[0])
	if err := d.acksFrom(ctx, first.worker, 5); err != nil {
		return err
	}
	io.WriteString(d.stdins[first.worker], "freeze\n")
	frozen, err := d.until(ctx, "the leader to stop before its write", func(e event) bool { return e.kind == "frozen" })
	if err != nil {
		return err
	}
	if err := d.procs[first.worker].Process.Signal(syscall.SIGSTOP); err != nil {
		return err
	}
	frozenAt := time.Now()
	d.printf("worker %d frozen (SIGSTOP) after reading counter=%s, before writing %s+1", first.worker, frozen.args[1], frozen.args[1])
	next, err := d.until(ctx, "another worker to lead", func(e event) bool { return e.kind == "leading" && e.worker != first.worker })
	if err != nil {
		return err
	}
	d.printf("worker %d leads with token %s, %.2fs after the freeze (TTL %v): the frozen lease expired",
		next.worker, next.args[0], time.Since(frozenAt).Seconds(), c.ttl)
	if err := d.acksFrom(ctx, next.worker, 5); err != nil {
		return err
	}
	if err := d.procs[first.worker].Process.Signal(syscall.SIGCONT); err != nil {
		return err
	}
	io.WriteString(d.stdins[first.worker], "go\n")
	d.printf("worker %d resumed (SIGCONT); it writes counter=%s+1 as if it still led", first.worker, frozen.args[1])
	if _, err := d.until(ctx, "the resumed worker's write", func(e event) bool { return e.kind == "ledger" && e.worker == first.worker }); err != nil {
		return err
	}
	return nil
}

// acksFrom waits for n acknowledged increments by worker w.
func (d *demo) acksFrom(ctx context.Context, w, n int) error {
	from := d.lastAck + 1
	for i := 0; i < n; i++ {
		if _, err := d.until(ctx, fmt.Sprintf("worker %d to count", w), func(e event) bool { return e.kind == "ack" && e.worker == w }); err != nil {
			return err
		}
	}
	d.printf("worker %d counts %d..%d (guarded increments, each acknowledged)", w, from, d.lastAck)
	return nil
}

// until consumes events, keeping score, until one matches.
func (d *demo) until(ctx context.Context, what string, match func(event) bool) (event, error) {
	timeout := time.After(stepTimeout)
	for {
		select {
		case e := <-d.events:
			d.score(e)
			if match(e) {
				return e, nil
			}
			if e.kind == "exited" {
				return event{}, fmt.Errorf("worker %d exited before the story ended (its log is on stderr)", e.worker)
			}
		case <-timeout:
			return event{}, fmt.Errorf("waiting for %s: no progress within %v", what, stepTimeout)
		case <-ctx.Done():
			return event{}, ctx.Err()
		}
	}
}

func (d *demo) score(e event) {
	switch e.kind {
	case "ack":
		d.acks++
		d.lastAck, _ = strconv.ParseInt(e.args[1], 10, 64)
	case "fenced":
		d.rejected++
		d.printf("worker %d guarded write counter=%s REJECTED by etcd: guard.ErrNotOwner (its token %s is no longer the owner's)",
			e.worker, e.args[1], e.args[0])
		d.printf("         without the guard it would have set the counter back from %d to %s", d.lastAck, e.args[1])
	case "ledger":
		if e.args[2] == "stale" {
			d.rejected++
			d.printf("worker %d ledger write %s REJECTED by %s: fencing.ErrStaleToken (its token %s is older than the ledger's fence)",
				e.worker, e.args[1], d.ledger.where, e.args[0])
		}
	case "stopped":
		d.printf("worker %d stopped leading (token %s): %s", e.worker, e.args[0], strings.Join(e.args[1:], " "))
	}
}

func (d *demo) verdict(ctx context.Context, c config) (bool, error) {
	for len(d.events) > 0 {
		d.score(<-d.events)
	}
	ctx, cancel := context.WithTimeout(ctx, stepTimeout)
	defer cancel()
	resp, err := d.cli.Get(ctx, c.prefix()+"counter")
	if err != nil {
		return false, fmt.Errorf("read the counter %scounter: %w", c.prefix(), err)
	}
	var counter int64
	if len(resp.Kvs) > 0 {
		counter, _ = strconv.ParseInt(string(resp.Kvs[0].Value), 10, 64)
	}
	revs, err := d.ledger.tokens(ctx)
	if err != nil {
		return false, fmt.Errorf("read the ledger %s: %w", d.ledger.table, err)
	}
	monotonic := slices.IsSorted(revs)
	lost := int64(d.acks) - counter
	ok := lost == 0 && d.rejected >= 2 && monotonic
	word := "FAILED"
	if ok {
		word = "OK"
	}
	fmt.Fprintf(d.out, "\nverdict: counter=%d acknowledged=%d lost updates: %d; stale writes rejected: %d; ledger rows %d, their tokens never went back: %v: %s\n",
		counter, d.acks, lost, d.rejected, len(revs), monotonic, word)
	return ok, nil
}

func (d *demo) startWorkers(c config) error {
	exe, err := os.Executable()
	if err != nil {
		return err
	}
	args, env := c.workerArgs(d.ledger)
	for i := range c.workers {
		cmd := exec.Command(exe, args...)
		cmd.Env = append(append(os.Environ(), workerEnv+"="+strconv.Itoa(i)), env...)
		cmd.Stderr = d.errOut
		stdin, err := cmd.StdinPipe()
		if err != nil {
			return err
		}
		stdout, err := cmd.StdoutPipe()
		if err != nil {
			return err
		}
		if err := cmd.Start(); err != nil {
			return err
		}
		d.procs, d.stdins = append(d.procs, cmd), append(d.stdins, stdin)
		d.readers.Go(func() { d.read(i, stdout) })
	}
	return nil
}

// read turns a worker's lines into events, and its end of output into an
// "exited" event.
func (d *demo) read(w int, r io.Reader) {
	sc := bufio.NewScanner(r)
	for sc.Scan() {
		if f := strings.Fields(sc.Text()); len(f) > 0 {
			d.events <- event{worker: w, kind: f[0], args: f[1:]}
		}
	}
	d.events <- event{worker: w, kind: "exited"}
}

// stopWorkers ends every worker: end of input makes it resign and exit. A
// worker still running after 10 s is killed. Events keep being scored
// meanwhile, so that no reader blocks on a full channel.
func (d *demo) stopWorkers() {
	if d.procs == nil {
		return
	}
	for i, cmd := range d.procs {
		cmd.Process.Signal(syscall.SIGCONT) // in case it is still frozen
		d.stdins[i].Close()
	}
	read := make(chan struct{})
	go func() { d.readers.Wait(); close(read) }()
	kill := time.After(10 * time.Second)
	for done := false; !done; {
		select {
		case e := <-d.events:
			d.score(e)
		case <-read:
			done = true
		case <-kill:
			for _, cmd := range d.procs {
				cmd.Process.Kill()
			}
		}
	}
	for _, cmd := range d.procs {
		cmd.Wait() // after the reads: Wait closes the pipes
	}
	d.procs = nil
}
