package election_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/leasehold/leasehold/election"
	"github.com/leasehold/leasehold/fencing"
	"github.com/leasehold/leasehold/fencing/fencingtest"
	"github.com/leasehold/leasehold/guard"
)

// A leader whose work ignores its context is reported unhealthy once it is
// cut off past its term's ValidUntil, and healthy again when the work
// returns.
func TestRunHealthFlipsWhenLeaderIsBlackholed(t *testing.T) {
	c := fencingtest.Single(t)
	cli, link := c.ProxiedClient(t)
	t.Cleanup(link.Restore)
	var h guard.Health
	leading := make(chan struct{})
	release := make(chan struct{})
	work := func(ctx context.Context, _ *election.Term) error {
		close(leading)
		<-release // ignores ctx: the bug the probe exists to catch
		return nil
	}
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() {
		done <- election.Run(ctx, cli, "health", "stuck", work, election.WithSessionOptions(fencing.WithTTL(2*time.Second)), election.WithHealth(&h))
	}()
	select {
	case <-leading:
	case <-time.After(wait):
		t.Fatal("Run did not lead")
	}
	if err := h.Check(); err != nil {
		t.Fatalf("Check while leading: %v", err)
	}
	link.Blackhole()
	fencingtest.WaitFor(t, wait, "the leader to be reported overdue", func() bool { return errors.Is(h.Check(), guard.ErrOverdue) })
	close(release)
	fencingtest.WaitFor(t, wait, "health to recover once work returned", func() bool { return h.Check() == nil })
	link.Restore()
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("Run: %v", err)
	}
}

func TestRunRejectsNilHealth(t *testing.T) {
	c := fencingtest.Single(t)
	err := election.Run(t.Context(), c.Client(t), "n", "v", func(context.Context, *election.Term) error { return nil }, election.WithHealth(nil))
	if !errors.Is(err, fencing.ErrInvalidArgument) {
		t.Fatalf("Run with nil health: %v; want ErrInvalidArgument", err)
	}
}
