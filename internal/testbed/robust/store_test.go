package robust_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"sync"
	"time"

	"github.com/leasehold/leasehold/fencing"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// storeWorker is one contender of a store's workload (TestSQLUnderFaults,
// TestRedisUnderFaults): it takes the lock, increments the store's counter
// one to four times, and lets go, reporting every increment and its outcome.
type storeWorker struct {
	name string
	rng  *rand.Rand
	mu   sync.Mutex // serialises output lines
	// increment reads the counter, thinks for think (the critical section,
	// where a pause hurts most) and writes one more, under tok: fenced or
	// plain. It returns the value it wrote.
	increment func(ctx context.Context, tok fencing.Token, think time.Duration) (int64, error)
}

// run runs w in a subprocess helper until stdin closes.
func (w *storeWorker) run(endpoints []string, seed uint64) int {
	w.rng = rand.New(rand.NewPCG(uint64(os.Getpid()), seed))
	return asHelper(endpoints, func(ctx context.Context, cli *clientv3.Client) {
		for ctx.Err() == nil {
			holdLoop(ctx, cli, w.name, w.rng, w.emit, func(h *fencing.Hold) {
				for range 1 + w.rng.IntN(4) {
					w.attempt(h.Token())
				}
			})
		}
	})
}

func (w *storeWorker) emit(e event) {
	w.mu.Lock()
	defer w.mu.Unlock()
	fmt.Println(e)
}

// attempt makes one increment. It runs even if the lock was lost meanwhile,
// as from a process that paused after its last check: the fence has to stop
// it. A worker killed between its attempt and its write event leaves an
// increment of unknown outcome: the attempt says so.
func (w *storeWorker) attempt(tok fencing.Token) {
	ctx, cancel := context.WithTimeout(context.Background(), 4*ttl)
	defer cancel()
	w.emit(event{worker: w.name, kind: "attempt", token: tok.Revision})
	value, err := w.increment(ctx, tok, time.Duration(w.rng.IntN(30))*time.Millisecond)
	e := event{worker: w.name, kind: "write", token: tok.Revision, value: value, outcome: "ok"}
	switch {
	case errors.Is(err, fencing.ErrStaleToken):
		e.outcome = "stale"
	case err != nil:
		e.outcome = "unknown" // refused, or a write whose answer was lost
	}
	w.emit(e)
}

// count adds the workers' reports to r.
func (r *sqlRun) count(events []event) {
	for _, e := range events {
		switch {
		case e.kind == "attempt":
			r.unknown++
		case e.kind == "write":
			r.unknown--
			switch e.outcome {
			case "ok":
				r.acked++
				r.ackedBy[[2]int64{e.value, e.token}] = true
			case "stale":
				r.stale++
			case "unknown":
				r.unknown++
			}
		}
	}
}
