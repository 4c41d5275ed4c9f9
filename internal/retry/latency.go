package retry

import (
	"sync/atomic"
	"time"

	"github.com/leasehold/leasehold/internal/admit"
)

// Latency is a smoothed estimate of how long a request to etcd takes, fed
// by a session's keepalives and by the library's own requests, to bound each
// attempt of a retried one. The zero value is ready; a nil *Latency
// estimates zero. It also keeps the bounds that attempts of one session
// share (see shared).
type Latency struct {
	// Places are the session's places for requests in flight, which every
	// attempt waits for; nil: no limit.
	Places *admit.Places
	ns     atomic.Int64
	shared [3]atomic.Pointer[shared]
}

// Observe folds one measured request time in, with weight 1/8 (as TCP
// smooths its round-trip time).
func (l *Latency) Observe(d time.Duration) {
	if l == nil {
		return
	}
	for {
		old := l.ns.Load()
		next := int64(d)
		if old != 0 {
			next = old + (int64(d)-old)/8
		}
		if l.ns.CompareAndSwap(old, next) {
			return
		}
	}
}

// Get returns the estimate.
func (l *Latency) Get() time.Duration {
	if l == nil {
		return 0
	}
	return time.Duration(l.ns.Load())
}
