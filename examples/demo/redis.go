package main

import (
	"context"
	"fmt"
	"strconv"
	"strings"

	"github.com/leasehold/leasehold/fencing"
	"github.com/leasehold/leasehold/fencing/redisfence"
	"github.com/redis/go-redis/v9"
)

// isRedis reports whether a --ledger URL names Redis.
func isRedis(url string) bool {
	return strings.HasPrefix(url, "redis://") || strings.HasPrefix(url, "rediss://")
}

// redisLedger is the ledger as a Redis list, "{TABLE}:rows", that every
// worker appends to with a fenced RPUSH (redisfence), under the fence name
// TABLE so that the list and its mark share a hash slot.
type redisLedger struct {
	rdb   *redis.Client
	fence *redisfence.Fence
	rows  string
	mark  string
}

// goRedis adapts a go-redis client to redisfence.Client.
type goRedis struct{ *redis.Client }

func (c goRedis) Do(ctx context.Context, args ...string) (any, error) {
	a := make([]any, len(args))
	for i, s := range args {
		a[i] = s
	}
	return c.Client.Do(ctx, a...).Result()
}

// openRedis connects to the Redis at url and checks that it answers within
// callTimeout.
func openRedis(ctx context.Context, url, table string) (*redisLedger, error) {
	opts, err := redis.ParseURL(url)
	if err != nil {
		return nil, err
	}
	opts.DisableIdentity = true
	// One try per write: a retried RPUSH could append twice.
	opts.MaxRetries = -1
	r := &redisLedger{rdb: redis.NewClient(opts), rows: "{" + table + "}:rows", mark: "leasehold:fence:{" + table + "}"}
	pctx, cancel := context.WithTimeout(ctx, callTimeout)
	defer cancel()
	if err := r.rdb.Ping(pctx).Err(); err != nil {
		r.rdb.Close()
		return nil, fmt.Errorf("cannot reach the ledger database (Redis) within %v: %w", callTimeout, err)
	}
	if r.fence, err = redisfence.New(goRedis{r.rdb}, redisfence.WithName(table)); err != nil {
		r.rdb.Close()
		return nil, err
	}
	return r, nil
}

func (r *redisLedger) record(ctx context.Context, t fencing.Token, n int64) error {
	_, err := r.fence.Do(ctx, t, redisfence.RPush(r.rows, fmt.Sprintf("%d %s %d", t.Revision, t, n)))
	return err
}

func (r *redisLedger) tokens(ctx context.Context) ([]int64, error) {
	rows, err := r.rdb.LRange(ctx, r.rows, 0, -1).Result()
	if err != nil {
		return nil, err
	}
	revs := make([]int64, 0, len(rows))
	for _, row := range rows {
		rev, err := strconv.ParseInt(strings.Fields(row)[0], 10, 64)
		if err != nil {
			return nil, fmt.Errorf("ledger row %q: %w", row, err)
		}
		revs = append(revs, rev)
	}
	return revs, nil
}

func (r *redisLedger) drop(ctx context.Context) error { return r.rdb.Del(ctx, r.rows, r.mark).Err() }
