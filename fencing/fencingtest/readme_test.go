package fencingtest_test

import (
	"context"
	"errors"
	"testing"

	"github.com/leasehold/leasehold/election"
	"github.com/leasehold/leasehold/fencing"
	"github.com/leasehold/leasehold/fencing/fencingtest"
)

// client-go#1408 asks how to unit-test the code leaderelection.RunOrDie runs:
// nothing can make a leader lose its lease in a test. Here, "my leader-only
// work stops when its replica is cut off from etcd" is ten lines.
func TestWorkStopsWhenPartitioned(t *testing.T) {
	c := fencingtest.Single(t)      // a real etcd, stopped when the test ends
	cli, link := c.ProxiedClient(t) // this replica's own path to it
	works := make(chan context.Context, 4)
	fencingtest.Go(t, func(ctx context.Context) error { // the replica, stopped at the end
		return election.Run(ctx, cli, "job", "me", func(ctx context.Context, _ *election.Term) error {
			works <- ctx // your leader-only work runs here
			<-ctx.Done()
			return nil
		})
	})
	work := fencingtest.Receive(t, works, "the work to start")
	link.Blackhole() // a partition: no byte passes either way
	cause := fencingtest.Ended(t, work, fencingtest.Wait, "the work")
	if !errors.Is(cause, fencing.ErrLeaseUnconfirmed) {
		t.Fatalf("work ended with %v; want fencing.ErrLeaseUnconfirmed", cause)
	}
}
