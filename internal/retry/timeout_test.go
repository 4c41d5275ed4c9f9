package retry

import (
	"testing"
	"time"

	"go.uber.org/goleak"
)

// An attempt gets four request times, at least the floor, doubled for each
// unanswered one before it, at most the ceiling.
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
		{fast, 1, 2 * AttemptFloor},
		{slow, 0, 1200 * time.Millisecond},
		{slow, 2, 4800 * time.Millisecond},
		{slow, 3, attemptCeiling},
		{fast, 1000, attemptCeiling},
	} {
		if got := Timeout(c.lat, c.n); got != c.want {
			t.Errorf("Timeout(%v, %d) = %v; want %v", c.lat.Get(), c.n, got, c.want)
		}
	}
}

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }
