package robust_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/leasehold/leasehold/fencing"
	"github.com/leasehold/leasehold/fencing/fencingtest"
	"github.com/leasehold/leasehold/fencing/redisfence"
	"github.com/leasehold/leasehold/internal/testbed/etcdtest"
	"github.com/leasehold/leasehold/internal/testbed/redistest"
	"github.com/redis/go-redis/v9"
)

// The Redis workload's keys share the hash tag of the fence's name.
const (
	redisCounter = "{" + lockName + "}:counter"
	redisHistory = "{" + lockName + "}:history" // "value token worker" per increment
)

// TestRedisUnderFaults is the database workload on Redis: workers in
// subprocesses take the lock and increment a counter with a read, a think
// and a write, each write also appending to a history list, while the suite
// pauses, partitions and kills them and faults etcd. "fenced" reads and
// writes through redisfence (the read raises the mark first) and must come
// out exact, as TestSQLUnderFaults's. "plain" sends the same commands
// unfenced, as users of other lock libraries do, and must lose or
// duplicate increments: the control that shows the faults reach the store.
func TestRedisUnderFaults(t *testing.T) {
	etcdtest.Long(t)
	t.Run("fenced", func(t *testing.T) {
		r := runRedisWorkload(t, "fenced", 1, func(*sqlRun) bool { return false })
		r.log(t)
		for _, v := range r.violations() {
			t.Error(v)
		}
		if r.acked < 20 {
			t.Errorf("only %d acknowledged increments: the workload did not exercise Redis", r.acked)
		}
	})
	t.Run("plain", func(t *testing.T) {
		// Runs until its first violation, within three times the run's length:
		// a violation needs a pause between a read and its write, which the
		// fault mix makes often but not in every stretch of 25 s.
		r := runRedisWorkload(t, "plain", 3, func(r *sqlRun) bool { return len(r.violations()) > 0 })
		r.log(t)
		vs := r.violations()
		for _, v := range vs {
			t.Log("violation without the fence (the control):", v)
		}
		if len(vs) == 0 {
			t.Error("the same writes unfenced lost and duplicated nothing: the faults did not reach Redis, so the fenced run proves nothing")
		}
	})
}

func runRedisWorkload(t *testing.T, mode string, lengths time.Duration, enough func(*sqlRun) bool) *sqlRun {
	c := fencingtest.Three(t)
	srv := redistest.Start(t)
	rdb := redis.NewClient(&redis.Options{Addr: srv.Addr, DisableIdentity: true})
	t.Cleanup(func() { rdb.Close() })
	maxTime, minOwners := runLength()
	maxTime *= lengths
	hist := watchHistory(t, c, "leasehold/")
	h := newHarness(t, c, mode, srv.Addr)
	// SIGSTOP three times as often as in the common mix: a pause between a
	// read and its write is the fault a fence is for.
	h.helper, h.extra = "redis-worker", []func(){h.sigstop, h.sigstop}
	for i := range 4 {
		h.subprocess(fmt.Sprint("s", i))
	}
	events := h.collect()
	start := time.Now()
	var checked time.Time
	h.faultLoop(t.Context(), hist, func() bool {
		if time.Since(start) > maxTime {
			return true
		}
		if time.Since(checked) > 2*time.Second {
			checked = time.Now()
			if enough(readRedis(t, rdb, mode, nil)) {
				return true
			}
		}
		return minOwners > 0 && hist.created() >= minOwners
	})
	h.stopAll()
	r := readRedis(t, rdb, mode, events())
	r.faults, r.duration = h.faults, time.Since(start)
	return r
}

// readRedis returns what Redis holds, with the workers' events counted.
func readRedis(t *testing.T, rdb *redis.Client, mode string, events []event) *sqlRun {
	ctx := fencingtest.Context(t, time.Minute)
	r := &sqlRun{mode: mode, ackedBy: map[[2]int64]bool{}}
	r.count(events)
	n, err := rdb.Get(ctx, redisCounter).Int64()
	if err != nil && !errors.Is(err, redis.Nil) {
		t.Fatal(err)
	}
	r.counter = n
	rows, err := rdb.LRange(ctx, redisHistory, 0, -1).Result()
	if err != nil {
		t.Fatal(err)
	}
	for _, row := range rows {
		f := strings.Fields(row)
		v, _ := strconv.ParseInt(f[0], 10, 64)
		tok, _ := strconv.ParseInt(f[1], 10, 64)
		r.history = append(r.history, sqlRow{value: v, token: tok})
	}
	return r
}

// redisWorkerHelper runs the Redis workload's storeWorker in a subprocess
// until stdin closes. Args: name, mode (fenced or plain), Redis address,
// endpoints... Retries are off (MaxRetries -1): a retried write would be
// counted once and applied twice, by the client and not the fence.
func redisWorkerHelper(args []string) int {
	rdb := redis.NewClient(&redis.Options{Addr: args[2], DisableIdentity: true, MaxRetries: -1})
	defer rdb.Close()
	fence, err := redisfence.New(redistest.GoRedis{Client: rdb})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	name, mode := args[0], args[1]
	w := &storeWorker{name: name, increment: func(ctx context.Context, tok fencing.Token, think time.Duration) (int64, error) {
		// Fenced, the read is a Do that raises the mark, and the write a Do
		// under the same token; plain, the same commands unfenced.
		value, err := redisRead(ctx, rdb, fence, mode, tok)
		if err != nil {
			return value, err
		}
		pause(ctx, think)
		value++
		row := fmt.Sprintf("%d %d %s", value, tok.Revision, name)
		if mode == "plain" {
			_, err = rdb.TxPipelined(ctx, func(p redis.Pipeliner) error {
				p.Set(ctx, redisCounter, value, 0)
				p.RPush(ctx, redisHistory, row)
				return nil
			})
			return value, err
		}
		_, err = fence.Do(ctx, tok, redisfence.Set(redisCounter, strconv.FormatInt(value, 10)), redisfence.RPush(redisHistory, row))
		return value, err
	}}
	return w.run(args[3:], 8)
}

func redisRead(ctx context.Context, rdb *redis.Client, fence *redisfence.Fence, mode string, tok fencing.Token) (int64, error) {
	if mode == "plain" {
		n, err := rdb.Get(ctx, redisCounter).Int64()
		if errors.Is(err, redis.Nil) {
			return 0, nil
		}
		return n, err
	}
	res, err := fence.Do(ctx, tok, redisfence.Get(redisCounter))
	if err != nil || res[0] == nil {
		return 0, err
	}
	return strconv.ParseInt(res[0].(string), 10, 64)
}
