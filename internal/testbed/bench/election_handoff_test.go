package bench_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/leasehold/leasehold/election"
	"github.com/leasehold/leasehold/fencing"
	"github.com/leasehold/leasehold/fencing/fencingtest"
	"go.etcd.io/etcd/client/v3/concurrency"
)

// BenchmarkElectionHandoff is BenchmarkHandoff for elections: W candidates
// always queued, each on its own session; every one campaigns, resigns and
// campaigns again. The latency is from Resign to the next Campaign
// returning; max-ms is the worst handoff of the run.
func BenchmarkElectionHandoff(b *testing.B) {
	c := cluster(b)
	for _, waiters := range []int{1, 10} {
		for _, impl := range impls {
			b.Run(fmt.Sprintf("waiters=%d/%s", waiters, impl), func(b *testing.B) {
				ls, ctrs := candidates(b, c, impl, fmt.Sprintf("ehandoff-%d", waiters), waiters+1)
				handoffs(b, ls, ctrs)
			})
		}
	}
}

func candidates(b *testing.B, c *fencingtest.Cluster, impl, name string, n int) ([]locker, *counters) {
	b.Helper()
	clis, ctrs := countedClients(b, c, n)
	ctx := context.Background()
	ls := make([]locker, n)
	for i := range ls {
		cli := clis[i%len(clis)]
		switch impl {
		case "leasehold":
			s, err := fencing.NewSession(ctx, cli, fencing.WithTTL(10*time.Second))
			if err != nil {
				b.Fatal(err)
			}
			b.Cleanup(func() { s.Close(ctx) })
			e, err := election.New(s, name)
			if err != nil {
				b.Fatal(err)
			}
			ls[i] = &ourElector{e: e, v: fmt.Sprint(i)}
		default:
			s, err := concurrency.NewSession(cli, concurrency.WithTTL(10))
			if err != nil {
				b.Fatal(err)
			}
			b.Cleanup(func() { s.Close() })
			ls[i] = &theirElector{s: s, name: "concurrency/" + name, v: fmt.Sprint(i)}
		}
	}
	return ls, ctrs
}

// ourElector and theirElector make a candidate look like a locker:
// Campaign locks, Resign unlocks.
type ourElector struct {
	e *election.Election
	v string
}

func (o *ourElector) lock(ctx context.Context) (func(context.Context) error, error) {
	t, err := o.e.Campaign(ctx, o.v)
	if err != nil {
		return nil, err
	}
	return t.Resign, nil
}
func (o *ourElector) tryLock(ctx context.Context) (func(context.Context) error, error) {
	return o.lock(ctx)
}
func (o *ourElector) prefix() string { return "" }
func (o *ourElector) close()         {}

type theirElector struct {
	s    *concurrency.Session
	name string
	v    string
}

func (t *theirElector) lock(ctx context.Context) (func(context.Context) error, error) {
	e := concurrency.NewElection(t.s, t.name)
	if err := e.Campaign(ctx, t.v); err != nil {
		return nil, err
	}
	return e.Resign, nil
}
func (t *theirElector) tryLock(ctx context.Context) (func(context.Context) error, error) {
	return t.lock(ctx)
}
func (t *theirElector) prefix() string { return "" }
func (t *theirElector) close()         {}
