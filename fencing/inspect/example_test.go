package inspect_test

import (
	"context"
	"fmt"
	"time"

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
