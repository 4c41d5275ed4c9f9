package main

import (
	"bufio"
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"strconv"
	"sync"
	"time"

	"github.com/leasehold/leasehold/election"
	"github.com/leasehold/leasehold/fencing"
	"github.com/leasehold/leasehold/guard"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// worker is one worker process. It reports on stdout, one event a line
// ("leading <token>", "ack <token> <n>", ...), and obeys stdin: "freeze"
// makes it wait before its next write until "go"; end of input stops it.
type worker struct {
	name    string
	counter string // this run's counter key
	cli     *clientv3.Client
	ledger  *ledger
	log     *slog.Logger

	out      sync.Mutex // serialises event lines
	freeze   chan struct{}
	resume   chan struct{}
	freezeMu sync.Once
}

func workerMain(name string, args []string) int {
	// A Ctrl-C on the terminal reaches the whole process group: let the demo
	// stop the workers (end of input), so that they resign on the way out.
	signal.Ignore(os.Interrupt)
	var c config
	var driver string
	fs := flag.NewFlagSet("worker", flag.ContinueOnError)
	c.conn.Register(fs, "")
	fs.DurationVar(&c.ttl, "ttl", 2*time.Second, "lease TTL")
	fs.StringVar(&c.run, "run", "", "the run's id")
	fs.StringVar(&driver, "ledger-driver", "", "the ledger's database/sql driver (its DSN is in "+ledgerEnv+")")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	// The story on stdout tells each loss; the library's own lines (-v)
	// give their causes in full, interleaved with it.
	level := slog.LevelError
	if c.conn.Verbose {
		level = slog.LevelDebug
	}
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: level})).With("worker", name)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	cli, err := c.conn.Dial(ctx)
	if err != nil {
		log.Error("cannot connect", "err", err)
		return 1
	}
	defer cli.Close()
	ledger, err := openLedger(ctx, driver, os.Getenv(ledgerEnv), c.run, false)
	if err != nil {
		log.Error("cannot open the ledger", "err", err)
		return 1
	}
	defer ledger.Close()
	w := &worker{name: name, counter: c.prefix() + "counter", cli: cli, ledger: ledger, log: log, freeze: make(chan struct{}), resume: make(chan struct{})}
	go w.commands(cancel)
	err = election.Run(ctx, cli, c.election(), name, w.work,
		election.WithSessionOptions(fencing.WithTTL(c.ttl), fencing.WithIdentity(name), fencing.WithLogger(log)),
		election.WithBackoff(20*time.Millisecond, 200*time.Millisecond),
		election.OnStoppedLeading(func(t *election.Term, cause error) { w.say("stopped", t.Token(), cause) }))
	if err != nil {
		log.Error("cannot campaign", "err", err)
		return 1
	}
	return 0
}

// commands reads stdin until it ends, then stops the worker.
func (w *worker) commands(stop context.CancelFunc) {
	defer stop()
	in := bufio.NewScanner(os.Stdin)
	for in.Scan() {
		switch in.Text() {
		case "freeze":
			w.freezeMu.Do(func() { close(w.freeze) })
		case "go":
			close(w.resume)
		}
	}
}

func (w *worker) say(event string, args ...any) {
	w.out.Lock()
	defer w.out.Unlock()
	fmt.Println(append([]any{event}, args...)...)
}

// work increments the counter while this worker leads. Each increment is a
// guarded read-modify-write: read the counter, then write n+1 only if this
// term still leads and nobody wrote the counter since the read.
func (w *worker) work(ctx context.Context, t *election.Term) error {
	w.say("leading", t.Token())
	for ctx.Err() == nil {
		n, rev, err := w.read(ctx)
		if err != nil {
			pace(ctx, 50*time.Millisecond) // etcd is away: do not spin
			continue
		}
		select {
		case <-w.freeze:
			// The demo freezes this process here, between read and write: the
			// worst moment. When it resumes it writes on, like any paused
			// process that has not looked at its context since.
			w.say("frozen", t.Token(), n)
			<-w.resume
			w.write(context.Background(), t, n, rev)
			return nil
		default:
		}
		w.write(ctx, t, n, rev)
		pace(ctx, 50*time.Millisecond)
	}
	return nil
}

// callTimeout bounds each call a worker makes to etcd or the ledger.
const callTimeout = 5 * time.Second

func (w *worker) read(ctx context.Context) (n, rev int64, err error) {
	ctx, cancel := context.WithTimeout(ctx, callTimeout)
	defer cancel()
	resp, err := w.cli.Get(ctx, w.counter)
	if err != nil || len(resp.Kvs) == 0 {
		return 0, 0, err
	}
	n, err = strconv.ParseInt(string(resp.Kvs[0].Value), 10, 64)
	return n, resp.Kvs[0].ModRevision, err
}

// write stores n+1 in etcd (guarded) and then in the ledger (fenced).
func (w *worker) write(ctx context.Context, t *election.Term, n, rev int64) {
	wctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), callTimeout)
	defer cancel()
	resp, err := guard.Txn(wctx, t).
		If(clientv3.Compare(clientv3.ModRevision(w.counter), "=", rev)).
		Then(clientv3.OpPut(w.counter, strconv.FormatInt(n+1, 10))).
		Commit()
	switch {
	case errors.Is(err, guard.ErrNotOwner):
		w.say("fenced", t.Token(), n+1)
	case err != nil || !resp.Succeeded:
		return // a network error, or a write we did not expect: read again
	default:
		w.say("ack", t.Token(), n+1)
	}
	// The ledger write does not depend on etcd's answer: a leader that lost
	// its term and has not noticed writes here too, and only the database's
	// fence stops it.
	outcome, err := w.ledger.record(wctx, t.Token(), n+1)
	if err != nil {
		w.log.Warn("ledger write failed", "err", err)
	}
	w.say("ledger", t.Token(), n+1, outcome)
}

func pace(ctx context.Context, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
	case <-ctx.Done():
	}
}
