package revqueue

import (
	"testing"
	"time"

	"github.com/leasehold/leasehold/internal/sessionlink"
)

// An attempt gets four request times, at least the floor, doubled for each
// unanswered one before it, at most the ceiling.
func TestAttemptTimeout(t *testing.T) {
	fast, slow := new(sessionlink.Latency), new(sessionlink.Latency)
	fast.Observe(2 * time.Millisecond)
	slow.Observe(300 * time.Millisecond)
	for _, c := range []struct {
		lat  *sessionlink.Latency
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
		if got := attemptTimeout(c.lat, c.n); got != c.want {
			t.Errorf("attemptTimeout(%v, %d) = %v; want %v", c.lat.Get(), c.n, got, c.want)
		}
	}
}
