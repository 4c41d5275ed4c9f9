package retry

import (
	"context"
	"errors"
	"testing"
	"time"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"

	"go.uber.org/goleak"
)

// An attempt gets four request times, at least the first attempt's floor or
// the resends' one, doubled for each unanswered one before it, at most the
// ceiling. After a dropped first attempt, a fast link's resends go at
// 100, 200, 400 ms, not 1, 2, 4 s (#29); a slow link's grow as before.
func TestAttemptTimeout(t *testing.T) {
	fast, slow := new(Latency), new(Latency)
	fast.Observe(2 * time.Millisecond)
	slow.Observe(300 * time.Millisecond)
	for _, c := range []struct {
		lat  *Latency
		n    int
		want time.Duration
	}{
		{nil, 0, AttemptFloor},
		{fast, 0, AttemptFloor},
		{nil, 1, 2 * resendFloor},
		{fast, 1, 2 * resendFloor},
		{fast, 3, 8 * resendFloor},
		{slow, 0, 1200 * time.Millisecond},
		{slow, 1, 2400 * time.Millisecond},
		{slow, 2, 4800 * time.Millisecond},
		{slow, 3, attemptCeiling},
		{fast, 1000, attemptCeiling},
	} {
		if got := Timeout(c.lat, c.n); got != c.want {
			t.Errorf("Timeout(%v, %d) = %v; want %v", c.lat.Get(), c.n, got, c.want)
		}
	}
}

// A call whose ctx ends while an attempt is out returns ctx's error, not
// the passing failure that attempt then met: the caller asked to stop, and
// checks errors.Is(err, context.Canceled). Before, Until returned the
// attempt's "request timed out" (seen as a cancelled Lock's error).
func TestUntilEndsWithCtxError(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	var unsure bool
	err := Until(ctx, context.Background(), nil, &unsure, func(context.Context) error {
		cancel() // the caller gives up while the request is out
		return rpctypes.ErrTimeout
	})
	if !errors.Is(err, context.Canceled) || !unsure {
		t.Fatalf("Until = %v (unsure %v); want context.Canceled, unsure", err, unsure)
	}
}

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }
