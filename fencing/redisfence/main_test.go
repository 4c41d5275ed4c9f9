package redisfence_test

import (
	"context"
	"flag"
	"fmt"
	"os"
	"strconv"
	"testing"
	"time"

	"github.com/leasehold/leasehold/fencing"
	"github.com/leasehold/leasehold/fencing/fencingtest"
	"github.com/leasehold/leasehold/fencing/redisfence"
	"github.com/leasehold/leasehold/internal/testbed/redistest"
	"github.com/redis/go-redis/v9"
	"github.com/redis/rueidis"
)

func TestMain(m *testing.M) {
	// The examples need a server and cannot skip: without redis-server
	// (outside CI, where it is a failure) run the tests alone, which skip.
	if _, err := redistest.Bin(); err != nil {
		if ci, _ := strconv.ParseBool(os.Getenv("CI")); !ci {
			fmt.Fprintf(os.Stderr, "redisfence: %v: examples not run\n", err)
			flag.Parse()
			flag.Set("test.run", "^Test")
		}
	}
	fencingtest.Main(m)
}

// goRedis adapts a go-redis client (a *redis.Client, *redis.ClusterClient
// or any UniversalClient) to redisfence.Client.
type goRedis struct{ redis.UniversalClient }

func (c goRedis) Do(ctx context.Context, args ...string) (any, error) {
	a := make([]any, len(args))
	for i, s := range args {
		a[i] = s
	}
	return c.UniversalClient.Do(ctx, a...).Result()
}

// rueidisClient adapts a rueidis client to redisfence.Client.
type rueidisClient struct{ rueidis.Client }

func (c rueidisClient) Do(ctx context.Context, args ...string) (any, error) {
	return c.Client.Do(ctx, c.B().Arbitrary(args...).Build()).ToAny()
}

// clients are the two clients the tests run the fence through.
var clients = []struct {
	name string
	open func(t testing.TB, addr string) redisfence.Client
}{
	{"go-redis", openGoRedis},
	{"rueidis", func(t testing.TB, addr string) redisfence.Client {
		c, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{addr}, DisableCache: true})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(c.Close)
		return rueidisClient{c}
	}},
}

func openGoRedis(t testing.TB, addr string) redisfence.Client {
	c := redis.NewClient(&redis.Options{Addr: addr, DisableIdentity: true, MaxRetries: -1})
	t.Cleanup(func() { c.Close() })
	return goRedis{c}
}

// eachClient runs f with a fence through each client on the shared server.
func eachClient(t *testing.T, f func(t *testing.T, c redisfence.Client, fence *redisfence.Fence)) {
	srv := redistest.Shared(t)
	for _, cl := range clients {
		t.Run(cl.name, func(t *testing.T) {
			c := cl.open(t, srv.Addr)
			fence, err := redisfence.New(c)
			if err != nil {
				t.Fatal(err)
			}
			f(t, c, fence)
		})
	}
}

// cluster is the cluster ID of the tokens tests make by hand.
const cluster = 0xcdf818194e3a8c32

func tok(name string, rev int64) fencing.Token {
	return fencing.Token{Name: name, Revision: rev, Cluster: cluster}
}

func ctxFor(t testing.TB) context.Context { return fencingtest.Context(t, time.Minute) }

// unique returns a name no other test of this binary uses.
func unique(t testing.TB) string {
	names++
	return fmt.Sprintf("t%d", names)
}

var names int
