package retry

import (
	"context"
	"time"
)

// shareDiv sets which attempts may join a shared bound: those it leaves
// between seven eighths of their Timeout and all of it. The attempt that
// makes a bound gets its Timeout, one that joins up to an eighth less,
// never more: the time a dropped request costs
// (BenchmarkDroppedDeletesHandoff) does not grow.
const shareDiv = 8

// shared is the bound of the first attempts of one life that start close
// together: a context that ends at the first's deadline, or when the life
// does. Made once for all of them, it spares each attempt a cancelable
// context, a hook on the life and a timer of its own: on a busy session
// most of the bound's cost (BenchmarkAttempt).
type shared struct {
	life context.Context // nil: an attempt whose life is its ctx
	end  time.Time
	ctx  context.Context // ends at end, or with life; no values but its own
}

// newShared starts the bound of first attempts of life from now on, whose
// Timeout is d. What it holds goes at end.
func newShared(life context.Context, d time.Duration, now time.Time) *shared {
	ctx, cancel := context.WithCancel(context.Background())
	stop := func() bool { return false }
	if life != nil {
		stop = context.AfterFunc(life, cancel)
	}
	time.AfterFunc(d, func() { stop(); cancel() })
	return &shared{life: life, end: now.Add(d), ctx: ctx}
}

// sharedFor returns a bound that an attempt of life starting at now may
// join (see shareDiv), making one if there is none. Each life keeps its
// latest bound in a slot of its own; a session's attempts have two lives
// (the session's and the client's), a test's a third (none). A bound made
// when every slot holds another life's live bound is used once; of two
// made at once, the last stays.
func (l *Latency) sharedFor(life context.Context, now time.Time) *shared {
	d := Timeout(l, 0)
	slot := -1
	for i := range l.shared {
		b := l.shared[i].Load()
		if b != nil && b.life == life {
			if left := b.end.Sub(now); left <= d && left >= d-d/shareDiv {
				return b
			}
			slot = i
			break
		}
		if slot < 0 && (b == nil || !now.Before(b.end)) {
			slot = i // free, or over: its life may take a slot again
		}
	}
	b := newShared(life, d, now)
	if slot >= 0 {
		l.shared[slot].Store(b)
	}
	return b
}

// bound returns ctx bounded for attempt n of life, started at now: a
// context with ctx's values that ends when ctx or life ends or its time is
// up, the time it gets, and what frees it. A first attempt joins a shared
// bound (see shared): at its cheapest, under a ctx that never ends, it is a
// view of ctx that ends with the shared bound.
func bound(ctx, life context.Context, lat *Latency, n int, now time.Time) (context.Context, time.Duration, bounded) {
	if life == ctx || life.Done() == nil {
		life = nil // ending with ctx is enough
	}
	// Under a ctx that ends, the attempt needs a cancelable context of its
	// own: a shared bound then saves only a life's hook and a timer for a
	// hook on the bound, no gain without a life.
	if n == 0 && lat != nil && (ctx.Done() == nil || life != nil) {
		b := lat.sharedFor(life, now)
		if ctx.Done() == nil {
			return endsWith{ctx, b.ctx}, b.end.Sub(now), bounded{}
		}
		actx, cancel := context.WithCancel(ctx)
		return actx, b.end.Sub(now), bounded{cancel: cancel, stop: context.AfterFunc(b.ctx, cancel)}
	}
	// A timer that cancels, not a deadline: a deadline travels with the
	// request (grpc-timeout) and costs both ends a timer per request.
	d := Timeout(lat, n)
	actx, cancel := context.WithCancel(ctx)
	r := bounded{cancel: cancel, timer: time.AfterFunc(d, cancel)}
	if life != nil {
		r.stop = context.AfterFunc(life, cancel)
	}
	return actx, d, r
}

// bounded is what an attempt's bound holds until the attempt returns: a
// plain value, as a closure would cost each attempt an allocation.
type bounded struct {
	cancel context.CancelFunc
	stop   func() bool
	timer  *time.Timer
}

func (r bounded) free() {
	if r.timer != nil {
		r.timer.Stop()
	}
	if r.stop != nil {
		r.stop()
	}
	if r.cancel != nil {
		r.cancel()
	}
}

// endsWith is a context with the values (and no deadline) of one that
// never ends, which ends when end does.
type endsWith struct {
	context.Context
	end context.Context
}

func (c endsWith) Done() <-chan struct{} { return c.end.Done() }

func (c endsWith) Err() error { return c.end.Err() }

// Value looks first in end, which has no values but its own cancelable
// context (so a cause is end's), then in the view's context. Found there, end
// has a context made from the view (as gRPC makes one per request) register
// with it directly, as with any cancelable parent, rather than through
// AfterFunc, which allocates a hook and a wrapper for each.
func (c endsWith) Value(key any) any {
	if v := c.end.Value(key); v != nil {
		return v
	}
	return c.Context.Value(key)
}

// AfterFunc runs f once the view ends (context.AfterFunc).
func (c endsWith) AfterFunc(f func()) func() bool { return context.AfterFunc(c.end, f) }
