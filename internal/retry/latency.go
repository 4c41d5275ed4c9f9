package retry

import (
	"sync/atomic"
	"time"
)

// Latency is a smoothed estimate of how long a request to etcd takes, fed
// by a session's keepalives and by the library's own requests, to bound each
// attempt of a retried one. The zero value is ready; a nil *Latency
// estimates zero. It also keeps the bounds that attempts of one session
// share (see shared), and the session's places for attempts in flight (see
// SetLimit).
type Latency struct {
	ns      atomic.Int64
	shared  [3]atomic.Pointer[shared]
	places  chan struct{} // one value per attempt in flight; nil: no limit
	waiting atomic.Int64  // attempts waiting for a place
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
