package redisfence_test

import (
	"context"
	"errors"
	"fmt"

	"github.com/leasehold/leasehold/election"
	"github.com/leasehold/leasehold/fencing"
	"github.com/leasehold/leasehold/fencing/redisfence"
	"github.com/leasehold/leasehold/internal/testbed/etcdtest"
	"github.com/leasehold/leasehold/internal/testbed/redistest"
	"github.com/redis/go-redis/v9"
	"github.com/redis/rueidis"
)

// redisAddr is the address of a Redis the examples write to; yours is
// your own.
func redisAddr() string {
	addr, err := redistest.SharedAddr()
	if err != nil {
		panic(err)
	}
	return addr
}

// This example runs a leader-only job under election.Run that counts its
// runs in Redis, through go-redis (goRedis, in this package's tests, is the
// adapter: five lines). Redis refuses the write of a leader whose term was
// taken over, whatever that leader believes.
func Example() {
	ctx := context.Background()
	rdb := redis.NewClient(&redis.Options{Addr: redisAddr(), MaxRetries: -1}) // -1: never resend a write
	defer rdb.Close()
	fence, err := redisfence.New(goRedis{rdb})
	if err != nil {
		fmt.Println(err)
		return
	}
	cli := etcdtest.Shared().Admin // your *clientv3.Client
	var first fencing.Token
	for range 2 { // two terms: the second has the greater token
		err = election.Run(ctx, cli, "jobs/nightly", "worker-1", func(ctx context.Context, term *election.Term) error {
			if first.Revision == 0 {
				first = term.Token()
			}
			res, err := fence.Do(ctx, term.Token(), redisfence.IncrBy("{jobs/nightly}:runs", 1))
			if err == nil {
				fmt.Println("runs:", res[0])
			}
			return err
		})
		fmt.Println("term:", err)
	}
	// The first term's token, replayed by a leader that slept through the
	// second term, writes nothing.
	_, err = fence.Do(ctx, first, redisfence.IncrBy("{jobs/nightly}:runs", 1))
	fmt.Println("stale:", errors.Is(err, fencing.ErrStaleToken))
	// Output:
	// runs: 1
	// term: <nil>
	// runs: 2
	// term: <nil>
	// stale: true
}

// This example fences writes through rueidis; the adapter is three lines
// (rueidisClient, in this package's tests). Every Op returns its result.
func ExampleFence_Do() {
	ctx := context.Background()
	c, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{redisAddr()}, DisableCache: true})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer c.Close()
	fence, err := redisfence.New(rueidisClient{c})
	if err != nil {
		fmt.Println(err)
		return
	}
	token := fencing.Token{Name: "orders", Revision: 42, Cluster: 0xcdf818194e3a8c32} // a Hold's Token()
	res, err := fence.Do(ctx, token,
		redisfence.HSet("{orders}:o-17", "state", "paid"),
		redisfence.IncrBy("{orders}:paid", 1),
		redisfence.RPush("{orders}:log", "o-17 paid"),
	)
	fmt.Println(res, err)
	_, err = fence.Do(ctx, token, redisfence.Set("ledger", "x"))
	fmt.Println(errors.Is(err, redisfence.ErrCrossSlot))
	mark, _, _ := fence.Mark(ctx, "orders")
	fmt.Println(mark.Revision)
	// Output:
	// [1 1 1] <nil>
	// true
	// 42
}
