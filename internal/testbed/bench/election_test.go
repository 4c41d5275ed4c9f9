package bench_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/leasehold/leasehold/election"
	"github.com/leasehold/leasehold/fencing"
	"github.com/leasehold/leasehold/internal/keyspace"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/client/v3/concurrency"
)

// candidate is one participant of an election, in either implementation.
type candidate interface {
	campaign(ctx context.Context, v string) error
	proclaim(ctx context.Context, v string) error
	resign(ctx context.Context) error
	observe(ctx context.Context) <-chan string // the leader's value, on each change
	prefix() string                            // where the election's keys live
}

func newCandidate(b *testing.B, impl string, cli *clientv3.Client, name string) candidate {
	ctx := context.Background()
	switch impl {
	case "leasehold":
		s, err := fencing.NewSession(ctx, cli)
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { s.Close(ctx) })
		e, _ := election.New(s, name)
		return &ourCandidate{e: e, name: name}
	default:
		s, err := concurrency.NewSession(cli)
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { s.Close() })
		return &theirCandidate{e: concurrency.NewElection(s, "concurrency/"+name), name: "concurrency/" + name}
	}
}

type ourCandidate struct {
	e    *election.Election
	t    *election.Term
	name string
}

func (c *ourCandidate) prefix() string {
	return keyspace.Prefix(fencing.DefaultRoot, "election", c.name)
}

func (c *ourCandidate) campaign(ctx context.Context, v string) (err error) {
	c.t, err = c.e.Campaign(ctx, v)
	return err
}
func (c *ourCandidate) proclaim(ctx context.Context, v string) error { return c.t.Proclaim(ctx, v) }
func (c *ourCandidate) resign(ctx context.Context) error             { return c.t.Resign(ctx) }
func (c *ourCandidate) observe(ctx context.Context) <-chan string {
	out := make(chan string, 64)
	go func() {
		for o := range c.e.Observe(ctx) {
			if o.Leader != nil {
				out <- o.Leader.Value
			}
		}
	}()
	return out
}

type theirCandidate struct {
	e    *concurrency.Election
	name string
}

func (c *theirCandidate) prefix() string { return c.name + "/" }

func (c *theirCandidate) campaign(ctx context.Context, v string) error { return c.e.Campaign(ctx, v) }
func (c *theirCandidate) proclaim(ctx context.Context, v string) error { return c.e.Proclaim(ctx, v) }
func (c *theirCandidate) resign(ctx context.Context) error             { return c.e.Resign(ctx) }
func (c *theirCandidate) observe(ctx context.Context) <-chan string {
	out := make(chan string, 64)
	go func() {
		for resp := range c.e.Observe(ctx) {
			if len(resp.Kvs) > 0 {
				out <- string(resp.Kvs[0].Value)
			}
		}
	}()
	return out
}

// BenchmarkElection measures an uncontended Campaign+Resign, the handoff
// from one candidate's Resign to the next one's Campaign returning, and the
// delivery of a Proclaim to an observer.
func BenchmarkElection(b *testing.B) {
	c := cluster(b)
	ctx := context.Background()
	for _, impl := range impls {
		b.Run("CampaignResign/"+impl, func(b *testing.B) {
			x := newCandidate(b, impl, c.Client(b), "uncontended")
			var lat latencies
			b.ResetTimer()
			for range b.N {
				start := time.Now()
				if err := x.campaign(ctx, "v"); err != nil {
					b.Fatal(err)
				}
				if err := x.resign(ctx); err != nil {
					b.Fatal(err)
				}
				lat.add(time.Since(start))
			}
			lat.report(b)
		})
	}
	for _, impl := range impls {
		b.Run("ResignHandoff/"+impl, func(b *testing.B) {
			xs := []candidate{newCandidate(b, impl, c.Client(b), "handoff"), newCandidate(b, impl, c.Client(b), "handoff")}
			if err := xs[0].campaign(ctx, "0"); err != nil {
				b.Fatal(err)
			}
			var lat latencies
			b.ResetTimer()
			for i := range b.N {
				leader, next := xs[i%2], xs[(i+1)%2]
				won := make(chan error, 1)
				go func() { won <- next.campaign(ctx, fmt.Sprint(i)) }()
				// The handoff starts at Resign, once the candidate queued.
				for queued(b, c, next.prefix()) < 2 {
				}
				start := time.Now()
				if err := leader.resign(ctx); err != nil {
					b.Fatal(err)
				}
				if err := <-won; err != nil {
					b.Fatal(err)
				}
				lat.add(time.Since(start))
			}
			lat.report(b)
		})
	}
	for _, impl := range impls {
		b.Run("ProclaimObserve/"+impl, func(b *testing.B) {
			leader := newCandidate(b, impl, c.Client(b), "proclaim")
			if err := leader.campaign(ctx, "start"); err != nil {
				b.Fatal(err)
			}
			octx, cancel := context.WithCancel(ctx)
			defer cancel()
			seen := newCandidate(b, impl, c.Client(b), "proclaim").observe(octx)
			for v := range seen {
				if v == "start" {
					break
				}
			}
			var lat latencies
			b.ResetTimer()
			for i := range b.N {
				want := fmt.Sprint(i)
				start := time.Now()
				if err := leader.proclaim(ctx, want); err != nil {
					b.Fatal(err)
				}
				for v := range seen {
					if v == want {
						break
					}
				}
				lat.add(time.Since(start))
			}
			lat.report(b)
		})
	}
}
