package robust_test

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net/http"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/leasehold/leasehold/fencing"
	"github.com/leasehold/leasehold/fencing/gate"
	"github.com/leasehold/leasehold/guard"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/client/v3/concurrency"
	"go.uber.org/zap"
)

const (
	lockName   = "robust"
	counterKey = "robust/counter"
	ttl        = 2 * time.Second
)

// event is one line of the history: what a worker did and how it ended.
type event struct {
	worker  string
	kind    string // acquire, release, attempt (a write about to go out), write (guarded or plain increment), store (fenced write)
	token   int64  // the worker's lock key's create revision
	value   int64  // the counter value written
	rev     int64  // commit revision of a write
	outcome string // ok, notowner, conflict, unknown (the write may or may not have committed), stale
	name    string // the group workload's name whose counter is written ("" for the lock's)
}

func (e event) String() string {
	// "-" keeps the line's eight fields.
	return fmt.Sprintf("ev %s %s %d %d %d %s %s", e.worker, e.kind, e.token, e.value, e.rev, cmp.Or(e.outcome, "-"), cmp.Or(e.name, "-"))
}

func parseEvent(line string) (event, bool) {
	f := strings.Fields(line)
	if len(f) != 8 || f[0] != "ev" {
		return event{}, false
	}
	var e event
	e.worker, e.kind, e.outcome, e.name = f[1], f[2], strings.TrimPrefix(f[6], "-"), strings.TrimPrefix(f[7], "-")
	e.token, _ = strconv.ParseInt(f[3], 10, 64)
	e.value, _ = strconv.ParseInt(f[4], 10, 64)
	e.rev, _ = strconv.ParseInt(f[5], 10, 64)
	return e, true
}

// worker is one contender: it takes the lock, increments the counter a few
// times with read-modify-writes, writes each value to the store, and lets go.
type worker struct {
	name  string
	impl  string // leasehold (guarded, fenced) or concurrency (plain writes)
	cli   *clientv3.Client
	store string
	emit  func(event)
	rng   *rand.Rand
}

// workerHelper runs a worker in a subprocess until stdin closes. Args:
// name, impl, store URL, endpoints...
func workerHelper(args []string) int {
	return asHelper(args[3:], func(ctx context.Context, cli *clientv3.Client) {
		w := &worker{name: args[0], impl: args[1], cli: cli, store: args[2],
			emit: func(e event) { fmt.Println(e) }, rng: rand.New(rand.NewPCG(uint64(os.Getpid()), 1))}
		w.run(ctx)
	})
}

// asHelper runs f in a subprocess helper with a client of endpoints, until
// stdin closes (f's ctx then ends).
func asHelper(endpoints []string, f func(ctx context.Context, cli *clientv3.Client)) int {
	cs := newCensus()
	cfg := clientv3.Config{Endpoints: endpoints, DialTimeout: 2 * time.Second, Logger: zap.NewNop(),
		DialKeepAliveTime: time.Second, DialKeepAliveTimeout: time.Second}
	cs.option(&cfg)
	cli, err := clientv3.New(cfg)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer cli.Close()
	ctx, cancel := context.WithCancel(context.Background())
	go func() {
		os.Stdin.Read(make([]byte, 1))
		cancel()
	}()
	if every, err := time.ParseDuration(os.Getenv(soakEveryEnv)); err == nil {
		go printSamples(ctx, every, cs)
	}
	f(ctx, cli)
	return 0
}

func (w *worker) run(ctx context.Context) {
	for ctx.Err() == nil {
		if w.impl == "leasehold" {
			w.leasehold(ctx)
		} else {
			w.concurrency(ctx)
		}
	}
}

// leasehold holds one session until it is lost, taking the lock again and
// again.
func (w *worker) leasehold(ctx context.Context) {
	holdLoop(ctx, w.cli, w.name, w.rng, w.emit, func(h *fencing.Hold) {
		for range 1 + w.rng.IntN(4) {
			w.increment(ctx, h.Token().Revision, func(c context.Context, rev int64, v string) (*clientv3.TxnResponse, error) {
				return guard.Txn(c, h).If(clientv3.Compare(clientv3.ModRevision(counterKey), "=", rev)).
					Then(clientv3.OpPut(counterKey, v)).Commit()
			})
		}
	})
}

// holdLoop holds one session of worker until it is lost, taking the lock
// again and again and running work with each hold, reporting each acquire
// and release.
func holdLoop(ctx context.Context, cli *clientv3.Client, worker string, rng *rand.Rand, emit func(event), work func(*fencing.Hold)) {
	s, err := fencing.NewSession(ctx, cli, fencing.WithTTL(ttl), fencing.WithIdentity(worker))
	if err != nil {
		pause(ctx, 100*time.Millisecond)
		return
	}
	defer s.Close(context.Background())
	m, _ := fencing.NewMutex(s, lockName)
	for ctx.Err() == nil && s.Err() == nil {
		lctx, cancel := context.WithTimeout(ctx, 5*ttl)
		h, err := m.Lock(lctx)
		cancel()
		if err != nil {
			continue
		}
		emit(event{worker: worker, kind: "acquire", token: h.Token().Revision})
		work(h)
		uctx, cancel := context.WithTimeout(context.Background(), ttl)
		h.Unlock(uctx)
		cancel()
		emit(event{worker: worker, kind: "release", token: h.Token().Revision})
		pause(ctx, time.Duration(rng.IntN(20))*time.Millisecond)
	}
}

// concurrency is the baseline: etcd's concurrency.Mutex with plain writes.
func (w *worker) concurrency(ctx context.Context) {
	s, err := concurrency.NewSession(w.cli, concurrency.WithTTL(int(ttl/time.Second)))
	if err != nil {
		pause(ctx, 100*time.Millisecond)
		return
	}
	defer s.Close()
	for ctx.Err() == nil {
		select {
		case <-s.Done():
			return
		default:
		}
		m := concurrency.NewMutex(s, "concurrency/"+lockName)
		lctx, cancel := context.WithTimeout(ctx, 5*ttl)
		err := m.Lock(lctx)
		cancel()
		if err != nil {
			continue
		}
		// Its token is its key's create revision (Header is not: after a wait
		// it is a later revision).
		k, err := w.cli.Get(ctx, m.Key())
		if err != nil || len(k.Kvs) == 0 {
			continue
		}
		tok := k.Kvs[0].CreateRevision
		w.emit(event{worker: w.name, kind: "acquire", token: tok})
		for range 1 + w.rng.IntN(4) {
			w.increment(ctx, tok, func(c context.Context, _ int64, v string) (*clientv3.TxnResponse, error) {
				return w.cli.Txn(c).Then(clientv3.OpPut(counterKey, v)).Commit()
			})
		}
		uctx, cancel := context.WithTimeout(context.Background(), ttl)
		m.Unlock(uctx)
		cancel()
		w.emit(event{worker: w.name, kind: "release", token: tok})
		pause(ctx, time.Duration(w.rng.IntN(20))*time.Millisecond)
	}
}

type writeFunc func(ctx context.Context, readRev int64, value string) (*clientv3.TxnResponse, error)

// increment reads the counter, waits a random while (the critical section),
// writes n+1 with write, and then writes n+1 to the store with the token.
func (w *worker) increment(ctx context.Context, tok int64, write writeFunc) {
	rctx, cancel := context.WithTimeout(ctx, ttl)
	resp, err := w.cli.Get(rctx, counterKey)
	cancel()
	if err != nil {
		return
	}
	var n, rev int64
	if len(resp.Kvs) > 0 {
		n, _ = strconv.ParseInt(string(resp.Kvs[0].Value), 10, 64)
		rev = resp.Kvs[0].ModRevision
	}
	pause(ctx, time.Duration(w.rng.IntN(30))*time.Millisecond)
	e := event{worker: w.name, kind: "write", token: tok, value: n + 1}
	// A write goes out even if ctx ended meanwhile, as from a process that
	// paused after its last check: fencing has to stop it, not luck.
	wctx, cancel := context.WithTimeout(context.Background(), ttl)
	defer cancel()
	// A worker killed between here and its write event leaves a write of
	// unknown outcome: the attempt says so.
	w.emit(event{worker: w.name, kind: "attempt", token: tok, value: n + 1})
	txn, err := write(wctx, rev, strconv.FormatInt(n+1, 10))
	e.outcome, e.rev = outcome(txn, err)
	w.emit(e)
	// The store write does not depend on etcd's answer: a holder that lost
	// the lock and has not noticed writes here too, and only the token
	// stops it.
	w.emit(event{worker: w.name, kind: "store", token: tok, value: n + 1, outcome: w.post(wctx, tok, n+1)})
}

// outcome is what a write's answer says of it, and its commit revision.
func outcome(txn *clientv3.TxnResponse, err error) (string, int64) {
	switch {
	case errors.Is(err, guard.ErrNotOwner):
		return "notowner", 0
	case err != nil:
		return "unknown", 0
	case !txn.Succeeded:
		return "conflict", 0
	}
	return "ok", txn.Header.Revision
}

// post writes value to the store under the token and returns the outcome.
func (w *worker) post(ctx context.Context, tok, value int64) string {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, w.store, strings.NewReader(strconv.FormatInt(value, 10)))
	if err != nil {
		return "unknown"
	}
	req.Header.Set(gate.Header, fencing.Token{Name: lockName, Revision: tok}.String())
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return "unknown"
	}
	resp.Body.Close()
	if resp.StatusCode == http.StatusConflict {
		return "stale"
	}
	return "ok"
}

func pause(ctx context.Context, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
	case <-ctx.Done():
	}
}
