package fencingtest_test

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/leasehold/leasehold/election"
	"github.com/leasehold/leasehold/fencing"
	"github.com/leasehold/leasehold/fencing/fencingtest"
	"github.com/leasehold/leasehold/guard"
)

// A worker under election.Run is cut off from etcd: its work context ends
// before its lease can expire, another replica takes over, and when the
// network heals the old worker's guarded write is refused. In your own test,
// pass its *testing.T where this example has Background's TB.
func Example_partitionedLeader() {
	t, done := fencingtest.Background() // in a test: its *testing.T
	defer done()
	c := fencingtest.Single(t)

	// Each replica is a process of its own: its own client, its own link.
	replica := func(name string) (*fencingtest.Link, <-chan *election.Term) {
		cli, link := c.ProxiedClient(t)
		terms := make(chan *election.Term, 4)
		fencingtest.Go(t, func(ctx context.Context) error {
			return election.Run(ctx, cli, "report", name, func(ctx context.Context, term *election.Term) error {
				terms <- term
				<-ctx.Done() // the leader-only work, until leadership ends
				return nil
			}, election.WithSessionOptions(fencing.WithTTL(2*time.Second)))
		})
		return link, terms
	}
	linkA, termsA := replica("a")
	a := fencingtest.Receive(t, termsA, "a to lead")
	_, termsB := replica("b")

	linkA.Blackhole() // a partition between a and etcd
	cause := fencingtest.Ended(t, a.Context(), fencingtest.Wait, "a's work")
	fmt.Println("a stops:", errors.Is(cause, fencing.ErrLeaseUnconfirmed))
	fmt.Println("leader:", c.WaitNewLeader(t, "report", "a").Value)
	fencingtest.Receive(t, termsB, "b to lead")

	linkA.Restore() // the network heals; a still has its old term
	ctx, cancel := context.WithTimeout(context.Background(), fencingtest.Wait)
	defer cancel()
	_, err := guard.Put(ctx, a, "report/result", "from a")
	fmt.Println("a's write refused:", errors.Is(err, guard.ErrNotOwner))
	// Output:
	// a stops: true
	// leader: b
	// a's write refused: true
}

// An operator deletes the key of a stuck lock: the holder's work context
// ends with ErrKeyDeleted, its guarded writes are refused, and its Unlock
// reports that it no longer held the lock.
func Example_operatorDeletesLock() {
	t, done := fencingtest.Background() // in a test: its *testing.T
	defer done()
	c := fencingtest.Single(t)
	s := fencingtest.Session(t, c.Client(t))
	hold := fencingtest.Lock(t, s, "billing")
	work, stop := guard.Watch(context.Background(), hold)
	defer stop()

	c.DeleteOwner(t, fencing.KindLock, "billing") // etcdctl del, from elsewhere
	cause := fencingtest.Ended(t, work, fencingtest.Wait, "the work")
	fmt.Println("work stops:", errors.Is(cause, fencing.ErrKeyDeleted))

	ctx, cancel := context.WithTimeout(context.Background(), fencingtest.Wait)
	defer cancel()
	_, err := guard.Put(ctx, hold, "billing/invoice", "42")
	fmt.Println("write refused:", errors.Is(err, guard.ErrNotOwner))
	fmt.Println("unlock:", errors.Is(hold.Unlock(ctx), fencing.ErrNotHeld))
	// Output:
	// work stops: true
	// write refused: true
	// unlock: true
}
