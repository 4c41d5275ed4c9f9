package retry

import (
	"context"
	"errors"
	"testing"
	"time"
)

type shape struct {
	name      string
	ctx, life context.Context
	n         int
	end       func() // ends ctx or life
}

// shapes are the contexts an attempt runs under, new for each call: a ctx
// that never ends (a Lock or Unlock under Background) with a life or
// without, a caller's ctx with the session's life (either may end), a
// wait's ctx that is its own life; and a resend, which gets a bound of its
// own. A test takes one case of each call (each), so that no case starts
// with a context another case ended.
func shapes(t *testing.T) []shape {
	never := context.WithValue(context.Background(), keyT{}, "v")
	life, endLife := context.WithCancel(context.Background())
	caller, endCaller := context.WithCancel(context.WithValue(context.Background(), keyT{}, "v"))
	t.Cleanup(endLife)
	t.Cleanup(endCaller)
	return []shape{
		{"never-ending ctx, no life", never, context.Background(), 0, nil},
		{"never-ending ctx, a life", context.WithoutCancel(caller), life, 0, endLife},
		{"caller's ctx, a life", caller, life, 0, endCaller},
		{"caller's ctx, a life that ends", caller, life, 0, endLife},
		{"own life", caller, caller, 0, endCaller},
		{"resend", never, life, 1, endLife},
	}
}

type keyT struct{}

// each runs f on every case of shapes, each made fresh.
func each(t *testing.T, f func(t *testing.T, c shape)) {
	for i := range shapes(t) {
		c := shapes(t)[i]
		t.Run(c.name, func(t *testing.T) { f(t, c) })
	}
}

// slow is a Latency whose attempts get attemptCeiling (8 s): a test that
// waits half of that for an attempt to end fails only if the attempt waits
// for its time, not for what should end it.
func slow() *Latency {
	l := new(Latency)
	l.Observe(time.Hour)
	return l
}

// An attempt that gets no answer alone ends with ErrNoAnswer, not before
// its Timeout, whether it made a shared bound or has its own. Its request
// sees the caller's values, and no deadline travels with it.
func TestAttemptBoundEndsUnansweredAttempt(t *testing.T) {
	each(t, func(t *testing.T, c shape) {
		lat := new(Latency)
		start := time.Now()
		err := Attempt(c.ctx, c.life, lat, c.n, func(ctx context.Context) error {
			if v := ctx.Value(keyT{}); v != "v" {
				t.Errorf("request's ctx value = %v; want the caller's", v)
			}
			if _, ok := ctx.Deadline(); ok {
				t.Error("request's ctx has a deadline: it would travel as grpc-timeout")
			}
			<-ctx.Done()
			return ctx.Err()
		})
		if !errors.Is(err, ErrNoAnswer) {
			t.Fatalf("Attempt = %v; want ErrNoAnswer", err)
		}
		if took, min := time.Since(start), Timeout(lat, c.n); took < min {
			t.Fatalf("unanswered attempt ended after %v; its Timeout is %v", took, min)
		}
	})
}

// An attempt joins a life's shared bound only while the bound leaves it
// between seven eighths of its own Timeout and all of it: never another
// life's, never once the window has passed, and not when the estimate has
// moved so that the bound would give it too little or too much.
func TestSharedBoundJoinWindow(t *testing.T) {
	life, end := context.WithCancel(context.Background())
	defer end()
	l := new(Latency)
	d := Timeout(l, 0)
	t0 := time.Now()
	b := l.sharedFor(life, t0)
	if got := b.end.Sub(t0); got != d {
		t.Fatalf("the maker gets %v; want its Timeout %v", got, d)
	}
	if got := l.sharedFor(life, t0.Add(d/shareDiv)); got != b {
		t.Fatalf("an attempt an eighth later made a bound of its own; want it to join")
	}
	other, endOther := context.WithCancel(context.Background())
	defer endOther()
	if got := l.sharedFor(other, t0); got == b {
		t.Fatal("an attempt of another life joined the bound")
	}
	late := t0.Add(d/shareDiv + time.Nanosecond)
	if got := l.sharedFor(life, late); got == b || got.end.Sub(late) != d {
		t.Fatalf("an attempt past the window got %v; want a bound of its own, of %v", got.end.Sub(late), d)
	}

	b = l.sharedFor(life, late) // joins the bound made just above
	l.ns.Store(int64(time.Second))
	if got := l.sharedFor(life, late); got == b || got.end.Sub(late) != Timeout(l, 0) {
		t.Fatal("with the estimate grown, an attempt joined a bound shorter than seven eighths of its Timeout")
	}
	b = l.sharedFor(life, late)
	l.ns.Store(0)
	if got := l.sharedFor(life, late); got == b {
		t.Fatal("with the estimate fallen, an attempt joined a bound longer than its Timeout")
	}
}

// An attempt ends as soon as its ctx or its life does, not with
// ErrNoAnswer, shared bound or not.
func TestAttemptBoundEndsWithCtxOrLife(t *testing.T) {
	each(t, func(t *testing.T, c shape) {
		if c.end == nil {
			return
		}
		lat := slow()
		err := Attempt(c.ctx, c.life, lat, c.n, func(ctx context.Context) error {
			c.end()
			select {
			case <-ctx.Done():
			case <-time.After(Timeout(lat, c.n) / 2):
				t.Error("the attempt outlived the end of its ctx or life")
			}
			return ctx.Err()
		})
		if err == nil || errors.Is(err, ErrNoAnswer) {
			t.Fatalf("Attempt = %v; want the end of ctx or life, not ErrNoAnswer", err)
		}
	})
}

// Two lives never share a bound: the end of one session's life (or of a
// caller's ctx used as a life) does not cut short an attempt of another's,
// though both started together on one Latency.
func TestSharedBoundKeepsLivesApart(t *testing.T) {
	lat := slow()
	a, endA := context.WithCancel(context.Background())
	b, endB := context.WithCancel(context.Background())
	defer endB()
	bOut, bDone := make(chan context.Context), make(chan error)
	go func() {
		bDone <- Attempt(context.Background(), b, lat, 0, func(ctx context.Context) error {
			bOut <- ctx
			<-ctx.Done()
			return ctx.Err()
		})
	}()
	bCtx := <-bOut
	Attempt(context.Background(), a, lat, 0, func(ctx context.Context) error {
		endA()
		<-ctx.Done()
		return ctx.Err()
	})
	if bCtx.Err() != nil {
		t.Fatal("the end of one life ended an attempt of another")
	}
	endB()
	<-bDone
}

// A context made from a shared bound's view (gRPC makes one per request)
// ends with the bound.
func TestSharedBoundEndsContextsMadeFromIt(t *testing.T) {
	life, end := context.WithCancel(context.Background())
	lat := slow()
	Attempt(context.Background(), life, lat, 0, func(ctx context.Context) error {
		child, cancel := context.WithCancel(ctx)
		defer cancel()
		end()
		select {
		case <-child.Done():
		case <-time.After(Timeout(lat, 0) / 2):
			t.Error("a context made from the view outlived the bound")
		}
		return child.Err()
	})
}

// The cheapest bound, an attempt under a ctx that never ends, costs the
// attempt at most one allocation more than its request sent bare (the
// view; the shared bound is made once for many attempts). The request
// makes a context of its own from the view, as gRPC does: it registers
// with the shared bound directly, with no hook or wrapper of its own.
func TestSharedBoundAllocs(t *testing.T) {
	life, end := context.WithCancel(context.Background())
	defer end()
	lat := new(Latency)
	send := func(ctx context.Context) error {
		c, cancel := context.WithCancel(ctx)
		_ = c.Done()
		cancel()
		return nil
	}
	bare := testing.AllocsPerRun(1000, func() { send(context.Background()) })
	bounded := testing.AllocsPerRun(1000, func() { Attempt(context.Background(), life, lat, 0, send) })
	if bounded > bare+1 {
		t.Fatalf("an attempt under a ctx that never ends allocates %v times, its request alone %v; want at most one more", bounded, bare)
	}
}
