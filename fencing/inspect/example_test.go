package inspect_test

import (
	"context"
	"fmt"
	"time"

	"github.com/leasehold/leasehold/election"
	"github.com/leasehold/leasehold/fencing"
	"github.com/leasehold/leasehold/fencing/inspect"
)

// This example prints the worst cases of the default session configuration.
func ExampleSafetyBudget() {
	b, err := inspect.SafetyBudget(fencing.DefaultTTL, fencing.DefaultTTL/3, time.Second)
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println("takeover after a crash within", b.Takeover)
	fmt.Println("partitioned holder stops within", b.PartitionedWork)
	fmt.Println("unfenced writes survive pauses up to", b.Pause)
	// Output:
	// takeover after a crash within 10.5s
	// partitioned holder stops within 9s
	// unfenced writes survive pauses up to 1s
}

// This example shows who holds a lock and who waits for it.
func ExampleRead() {
	ctx := context.Background()
	s, err := fencing.NewSession(ctx, exampleClient(), fencing.WithIdentity("worker-1"))
	if err != nil {
		fmt.Println(err)
		return
	}
	defer s.Close(ctx)
	m, _ := fencing.NewMutex(s, "reports")
	h, err := m.Lock(ctx)
	if err != nil {
		fmt.Println(err)
		return
	}
	defer h.Unlock(ctx)

	q, err := inspect.Read(ctx, exampleClient(), fencing.DefaultRoot, fencing.KindLock, "reports")
	if err != nil {
		fmt.Println(err)
		return
	}
	owner, _ := q.Owner()
	fmt.Println(len(q.Entries), "in queue; owner:", owner.Value, "token matches:", owner.Token == h.Token())
	// Output: 1 in queue; owner: worker-1 token matches: true
}

// This example computes what to grant a service that may use every lock and
// election whose name starts with "teamA/", and what to watch for one lock.
func ExampleSubtreePrefix() {
	team, err := inspect.SubtreePrefix(fencing.DefaultRoot, "teamA/")
	if err != nil {
		fmt.Println(err)
		return
	}
	one, _ := inspect.KeyPrefix(fencing.DefaultRoot, fencing.KindLock, "teamA/billing")
	fmt.Println("etcdctl role grant-permission --prefix team-a readwrite", team)
	fmt.Println("etcdctl watch --prefix", one)
	// Output:
	// etcdctl role grant-permission --prefix team-a readwrite leasehold/teamA/
	// etcdctl watch --prefix leasehold/teamA/billing#lock/
}

// This example runs one replica of a RunGroup group over two names and
// shows which replica leads each name, and that the group is balanced.
func ExampleReadGroup() {
	ctx, cancel := context.WithCancel(context.Background())
	started := make(chan string)
	done := make(chan error, 1)
	go func() {
		done <- election.RunGroup(ctx, exampleClient(), "mailers", []string{"mail/eu", "mail/us"},
			func(ctx context.Context, t *election.Term) error {
				select { // a work run again after a lost term is not waited for
				case started <- t.Token().Name:
				case <-ctx.Done():
				}
				<-ctx.Done()
				return nil
			}, election.WithSessionOptions(fencing.WithIdentity("worker-1")))
	}()
	defer func() { cancel(); <-done }()
	<-started // each work starts once its name's election is won
	<-started

	g, err := inspect.ReadGroup(ctx, exampleClient(), fencing.DefaultRoot, "mailers")
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Printf("%d replica, %d names, cap %d, misplaced %d\n", len(g.Replicas), len(g.Names), g.Cap, g.Misplaced)
	for _, n := range g.Names {
		fmt.Println(n.Name, "assigned to", n.Assigned, "led by", n.Leader.Value)
	}
	// Output:
	// 1 replica, 2 names, cap 2, misplaced 0
	// mail/eu assigned to worker-1 led by worker-1
	// mail/us assigned to worker-1 led by worker-1
}
