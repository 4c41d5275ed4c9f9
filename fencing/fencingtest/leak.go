package fencingtest

import (
	"time"

	"go.uber.org/goleak"
)

// leakPatience is how long goroutines get to wind down after the last test.
// A stopped etcd member leaves its idle peer HTTP connections to time out on
// their own 5 s read deadline (rafthttp's ConnReadTimeout); goleak's own retry
// gives up after well under a second.
const leakPatience = 15 * time.Second

// findLeaks reports goroutines still running leakPatience after the tests,
// other than the test framework's own.
func findLeaks(opts ...goleak.Option) error {
	end := time.Now().Add(leakPatience)
	for {
		err := goleak.Find(opts...)
		if err == nil || time.Now().After(end) {
			return err
		}
		time.Sleep(100 * time.Millisecond)
	}
}
