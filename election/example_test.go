package election_test

import (
	"context"
	"errors"
	"fmt"
	"sync"

	"github.com/leasehold/leasehold/election"
	"github.com/leasehold/leasehold/fencing"
	"github.com/leasehold/leasehold/fencing/inspect"
	"github.com/leasehold/leasehold/guard"
)

// This example wins an election, writes only while leading, and resigns.
func ExampleElection_Campaign() {
	ctx := context.Background()
	s, _ := fencing.NewSession(ctx, exampleClient()) // error checks trimmed
	defer s.Close(ctx)
	e, _ := election.New(s, "scheduler")

	term, err := e.Campaign(ctx, "host-a:8080")
	if err != nil {
		fmt.Println(err)
		return
	}
	_, err = guard.Put(ctx, term, "scheduler/state", "running") // commits only while leading
	fmt.Println(err)
	l, _ := e.Leader(ctx)
	fmt.Println(l.Value, l.Token == term.Token())
	fmt.Println(term.Resign(ctx))
	_, err = e.Leader(ctx)
	fmt.Println(errors.Is(err, election.ErrNoLeader))
	// Output:
	// <nil>
	// host-a:8080 true
	// <nil>
	// true
}

// This example follows who leads: nobody, then a leader, then nobody again.
func ExampleElection_Observe() {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	s, _ := fencing.NewSession(ctx, exampleClient()) // error checks trimmed
	defer s.Close(context.Background())
	e, _ := election.New(s, "api")

	obs := e.Observe(ctx)
	fmt.Println((<-obs).Leader == nil)
	term, _ := e.Campaign(ctx, "host-b")
	fmt.Println((<-obs).Leader.Value)
	term.Resign(ctx)
	fmt.Println((<-obs).Leader == nil)
	// Output:
	// true
	// host-b
	// true
}

// This example runs a singleton worker: the work runs only while this
// replica leads, under a context that ends the moment it stops leading.
func ExampleRun() {
	ctx := context.Background()
	err := election.Run(ctx, exampleClient(), "nightly-report", "host-c",
		func(ctx context.Context, t *election.Term) error {
			// Fence the work's writes with the term: guard.Txn, or t.Token().
			_, err := guard.Put(ctx, t, "reports/nightly", "done")
			fmt.Println("report written:", err == nil)
			return err // nil: done, Run resigns and returns
		})
	fmt.Println(err)
	// Output:
	// report written: true
	// <nil>
}

// This example runs one worker per partition, each on one replica of the
// group: with several replicas running this, each leads its share of the
// partitions, and a replica that stops hands its share to the others.
func ExampleRunGroup() {
	ctx, stop := context.WithCancel(context.Background())
	partitions := []string{"orders/0", "orders/1", "orders/2", "orders/3"}
	var mu sync.Mutex
	running := map[string]bool{}
	err := election.RunGroup(ctx, exampleClient(), "order-consumers", partitions,
		func(ctx context.Context, t *election.Term) error {
			mu.Lock()
			running[t.Token().Name] = true
			if len(running) == len(partitions) { // alone in the group: all are ours
				fmt.Println("consuming", len(running), "partitions")
				stop()
			}
			mu.Unlock()
			<-ctx.Done() // consume, with writes fenced by t, until the name moves
			return nil
		})
	fmt.Println(err)
	// Output:
	// consuming 4 partitions
	// <nil>
}

// This example reads who leads an election, and who would lead next.
func Example_inspect() {
	ctx := context.Background()
	cli := exampleClient()
	s, err := fencing.NewSession(ctx, cli)
	if err != nil {
		fmt.Println(err)
		return
	}
	defer s.Close(ctx)
	e, _ := election.New(s, "inspected-election")
	t, err := e.Campaign(ctx, "replica-a")
	if err != nil {
		fmt.Println(err)
		return
	}
	defer t.Resign(ctx)

	q, err := inspect.Read(ctx, cli, fencing.DefaultRoot, fencing.KindElection, "inspected-election")
	if err != nil {
		fmt.Println(err)
		return
	}
	for i, c := range q.Entries {
		fmt.Println(i, c.Value, c.Token == t.Token())
	}
	// Output: 0 replica-a true
}

// This example takes the lead only if it is free, as a cron job that must
// not queue behind another replica's run would.
func ExampleElection_TryCampaign() {
	ctx := context.Background()
	s, _ := fencing.NewSession(ctx, exampleClient()) // error checks trimmed
	defer s.Close(ctx)
	e, _ := election.New(s, "nightly-report")

	first, err := e.TryCampaign(ctx, "replica-a")
	fmt.Println(err)
	_, err = e.TryCampaign(ctx, "replica-b") // a second candidate, even on one session
	fmt.Println(errors.Is(err, fencing.ErrLocked))
	fmt.Println(first.Resign(ctx))
	// Output:
	// <nil>
	// true
	// <nil>
}

// This example ranks replicas by their build version, as a rolling upgrade
// needs: the replica of v1.4.2 leads until one of v1.5.0 starts, then ends
// its work with ErrPreempted and hands over at once. The replicas run in
// one process here; in production each is a pod.
func ExamplePriorityVersion() {
	ctx, stop := context.WithCancel(context.Background())
	defer stop()
	leading := make(chan string)
	replica := func(version string) {
		election.Run(ctx, exampleClient(), "schema-migrator", version,
			func(ctx context.Context, t *election.Term) error {
				leading <- version
				<-ctx.Done()
				if errors.Is(context.Cause(ctx), election.ErrPreempted) {
					fmt.Println(version, "gave way")
				}
				return nil
			}, election.PriorityVersion(version))
	}
	var wg sync.WaitGroup
	wg.Go(func() { replica("v1.4.2") })
	fmt.Println(<-leading, "leads")
	wg.Go(func() { replica("v1.5.0") })
	fmt.Println(<-leading, "leads")
	stop()
	wg.Wait()
	// Output:
	// v1.4.2 leads
	// v1.4.2 gave way
	// v1.5.0 leads
}

// This example drains a replica before maintenance: leadership moves to
// another replica and stays off the drained one while another runs.
func ExampleDrain() {
	ctx, stop := context.WithCancel(context.Background())
	defer stop()
	leading := make(chan string)
	var drainA election.Drain
	replica := func(id string, d *election.Drain) {
		election.Run(ctx, exampleClient(), "drained-service", id,
			func(ctx context.Context, t *election.Term) error {
				leading <- id
				<-ctx.Done()
				return nil
			}, election.WithDrain(d))
	}
	var wg sync.WaitGroup
	wg.Go(func() { replica("a", &drainA) })
	fmt.Println(<-leading, "leads")
	wg.Go(func() { replica("b", new(election.Drain)) })
	drainA.Set(true) // as an operator's POST /drain does in examples/leader
	fmt.Println(<-leading, "leads")
	stop()
	wg.Wait()
	// Output:
	// a leads
	// b leads
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

	g, err := election.ReadGroup(ctx, exampleClient(), fencing.DefaultRoot, "mailers")
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
