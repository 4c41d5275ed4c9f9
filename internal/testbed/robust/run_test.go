package robust_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"github.com/leasehold/leasehold/election"
	"github.com/leasehold/leasehold/fencing"
	"github.com/leasehold/leasehold/fencing/fencingtest"
	"github.com/leasehold/leasehold/fencing/inspect"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// runName is the single-name election that every group replica also runs
// with election.Run, ranked as in the group (rankOf): Run's campaigns,
// preemptions, drains and Proclaim, and an Observe, under the group's faults.
// Its counter is checked with the group's names' (groupViolations).
const runName = "robust-run"

// runReplica runs runName's singleton until ctx ends. Each term's work makes
// guarded increments of the name's counter and proclaims now and then; the
// replica drains itself now and then (leadership moves off it while another
// replica runs undrained); an observer on a session of its own follows the
// election all along.
func runReplica(ctx context.Context, id string, cli *clientv3.Client, emit func(event)) {
	rng := rand.New(rand.NewPCG(uint64(time.Now().UnixNano()), 7))
	var mu sync.Mutex // guards rng: the work and the drain switch both draw
	draw := func(n int) int {
		mu.Lock()
		defer mu.Unlock()
		return rng.IntN(n)
	}
	var drain election.Drain
	var wg sync.WaitGroup
	wg.Go(func() { observe(ctx, cli, id) })
	wg.Go(func() {
		for ctx.Err() == nil {
			pause(ctx, time.Duration(2000+draw(3000))*time.Millisecond)
			drain.Set(draw(4) == 0)
		}
	})
	work := func(ctx context.Context, term *election.Term) error {
		emit(event{worker: id, kind: "acquire", token: term.Token().Revision, name: runName})
		for i := 1; ctx.Err() == nil; i++ {
			increment(ctx, cli, term, id, emit)
			if i%8 == 0 {
				pctx, cancel := context.WithTimeout(ctx, ttl)
				term.Proclaim(pctx, fmt.Sprintf("%s/%d", id, i)) // lost or refused: the term is ending
				cancel()
			}
			pause(ctx, time.Duration(20+draw(60))*time.Millisecond)
		}
		return nil
	}
	election.Run(ctx, cli, runName, id, work, append(rankOf(id), election.WithDrain(&drain),
		election.WithBackoff(10*time.Millisecond, 500*time.Millisecond),
		election.WithSessionOptions(fencing.WithTTL(ttl), fencing.WithIdentity(id)))...)
	wg.Wait()
}

// observe follows runName's election until ctx ends, on a session of its
// own, making a new one each time one is lost: what a dashboard does.
func observe(ctx context.Context, cli *clientv3.Client, id string) {
	for ctx.Err() == nil {
		sctx, cancel := context.WithTimeout(ctx, ttl) // a grant through a cut link
		s, err := fencing.NewSession(sctx, cli, fencing.WithTTL(ttl), fencing.WithIdentity(id+"/observer"))
		cancel()
		if err != nil {
			pause(ctx, 100*time.Millisecond)
			continue
		}
		e, err := election.New(s, runName)
		if err != nil {
			panic(err) // a name the library refuses: the test is wrong
		}
		octx, cancel := context.WithCancel(ctx)
		var reading sync.WaitGroup
		reading.Go(func() {
			for range e.Observe(octx) { // closes once octx ends, and at no other time
			}
		})
		select {
		case <-s.Done():
		case <-ctx.Done():
		}
		cancel()
		reading.Wait()
		cctx, cancel := context.WithTimeout(context.Background(), ttl)
		s.Close(cctx)
		cancel()
	}
}

// waitRunLed waits until runName has a leader, as it must once the faults
// stop, whatever the ranks and drains of the replicas that run it.
func waitRunLed(t *testing.T, c *fencingtest.Cluster) {
	fencingtest.WaitFor(t, time.Minute, runName+" led", func() bool {
		ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
		defer cancel()
		q, err := inspect.Read(ctx, c.Admin, fencing.DefaultRoot, fencing.KindElection, runName)
		_, led := q.Owner()
		return err == nil && led
	})
}

// acknowledged counts the acknowledged increments of name in events.
func acknowledged(events []event, name string) int {
	n := 0
	for _, e := range events {
		if e.kind == "write" && e.outcome == "ok" && e.name == name {
			n++
		}
	}
	return n
}

// waitLeases waits until etcd holds exactly n leases: once the faults have
// stopped, one per session the workers hold (a lock worker's; a group
// replica's, its Run's and its observer's). A lease that outlives its
// session, or a session kept past its loss, shows here.
func waitLeases(t *testing.T, c *fencingtest.Cluster, n int) {
	var got int64
	fencingtest.WaitFor(t, time.Minute, fmt.Sprintf("%d leases, one per session", n), func() bool {
		_, leases, err := keysAndLeases(t.Context(), c)
		got = leases
		return err == nil && leases == int64(n)
	})
	t.Logf("%d leases once the faults stopped (%d last read)", n, got)
}
