package fencingtest_test

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/leasehold/leasehold/election"
	"github.com/leasehold/leasehold/fencing"
	"github.com/leasehold/leasehold/fencing/fencingtest"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
)

// replica is a user's replica as a subprocess: election.Run of args[1] with
// value args[2] on endpoints args[0], TTL 2 s, printing "leading" when its
// work starts and "stopped <cause>" when the work's context ends. It exits
// when stdin closes.
func replica(args []string) int {
	cli, err := clientv3.New(clientv3.Config{Endpoints: strings.Split(args[0], ","), Logger: zap.NewNop()})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer cli.Close()
	ctx, cancel := signal.NotifyContext(context.Background(), syscall.SIGTERM)
	defer cancel()
	go func() {
		os.Stdin.Read(make([]byte, 1)) // the test closed stdin, or ended
		cancel()
	}()
	err = election.Run(ctx, cli, args[1], args[2], func(ctx context.Context, _ *election.Term) error {
		fmt.Println("leading")
		<-ctx.Done()
		fmt.Println("stopped", context.Cause(ctx))
		return nil
	}, election.WithSessionOptions(fencing.WithTTL(2*time.Second)))
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	return 0
}

// A replica in another process is frozen with SIGSTOP past its TTL: a
// replica in the test takes over, and when the frozen one resumes, its work
// learns at once that its term is over.
func TestPausedReplicaInSubprocess(t *testing.T) {
	c := fencingtest.Single(t)
	p := fencingtest.StartHelper(t, "replica", strings.Join(c.Endpoints(), ","), "nightly", "sub")
	p.Expect(t, fencingtest.Wait, "leading")

	cli := c.Client(t)
	terms := make(chan *election.Term, 1)
	fencingtest.Go(t, func(ctx context.Context) error {
		return election.Run(ctx, cli, "nightly", "here", func(ctx context.Context, term *election.Term) error {
			terms <- term
			<-ctx.Done()
			return nil
		})
	})

	p.Stop(t) // SIGSTOP: it keeps its sockets and runs no code
	if got := c.WaitNewLeader(t, "nightly", "sub").Value; got != "here" {
		t.Fatalf("leader %q after the pause; want here", got)
	}
	fencingtest.Receive(t, terms, "the test's replica to lead")
	p.Cont(t)
	if cause := p.Expect(t, fencingtest.Wait, "stopped"); !strings.Contains(cause, fencing.ErrLeaseUnconfirmed.Error()) &&
		!strings.Contains(cause, fencing.ErrLeaseExpired.Error()) {
		t.Fatalf("the resumed replica's work stopped with %q; want its lease unconfirmed or expired", cause)
	}
	p.Close()
	select {
	case <-p.Exited():
	case <-time.After(fencingtest.Wait):
		t.Fatal("the replica did not exit after its stdin closed")
	}
}
