package retry

import (
	"context"
	"errors"
	"runtime"
	"testing"
	"time"
)

// shapes are the contexts an attempt runs under: a ctx that never ends
// (Unlock's, a Lock under Background) with a life or without, a caller's
// ctx with the session's life, a wait's ctx that is its own life; and a
// resend, which gets a bound of its own.
func shapes() []struct {
	name      string
	ctx, life context.Context
	n         int
	end       func() // ends ctx or life
} {
	never := context.WithValue(context.Background(), keyT{}, "v")
	life, endLife := context.WithCancel(context.Background())
	caller, endCaller := context.WithCancel(context.WithValue(context.Background(), keyT{}, "v"))
	return []struct {
		name      string
		ctx, life context.Context
		n         int
		end       func()
	}{
		{"never-ending ctx, no life", never, context.Background(), 0, nil},
		{"never-ending ctx, a life", context.WithoutCancel(caller), life, 0, endLife},
		{"caller's ctx, a life", caller, life, 0, endCaller},
		{"own life", caller, caller, 0, endCaller},
		{"resend", never, life, 1, endLife},
	}
}

type keyT struct{}

// An attempt that gets no answer ends with ErrNoAnswer, whether it joined a
// shared bound or has its own: not before its Timeout when it is alone,
// and never more than an eighth before when it shares. Its request sees the
// caller's values, and no deadline travels with it.
func TestAttemptBoundEndsUnansweredAttempt(t *testing.T) {
	for _, c := range shapes() {
		t.Run(c.name, func(t *testing.T) {
			lat := new(Latency)
			start := time.Now()
			second := make(chan time.Duration, 1)
			err := Attempt(c.ctx, c.life, lat, c.n, func(ctx context.Context) error {
				// A second attempt, started while this one is out, may share its bound.
				go func() {
					start := time.Now()
					Attempt(c.ctx, c.life, lat, c.n, func(ctx context.Context) error {
						<-ctx.Done()
						return ctx.Err()
					})
					second <- time.Since(start)
				}()
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
			if took, d := <-second, Timeout(lat, c.n); took < d-d/shareDiv {
				t.Fatalf("a second unanswered attempt ended after %v; its Timeout is %v", took, d)
			}
		})
	}
}

// An attempt ends as soon as its ctx or its life does, not with
// ErrNoAnswer, shared bound or not.
func TestAttemptBoundEndsWithCtxOrLife(t *testing.T) {
	for _, c := range shapes() {
		if c.end == nil {
			continue
		}
		t.Run(c.name, func(t *testing.T) {
			err := Attempt(c.ctx, c.life, new(Latency), c.n, func(ctx context.Context) error {
				c.end()
				<-ctx.Done()
				return ctx.Err()
			})
			if err == nil || errors.Is(err, ErrNoAnswer) {
				t.Fatalf("Attempt = %v; want the end of ctx or life, not ErrNoAnswer", err)
			}
		})
	}
}

// Two lives never share a bound: the end of one session's life (or of a
// caller's ctx used as a life) does not cut short an attempt of another's,
// though both started together on one Latency.
func TestSharedBoundKeepsLivesApart(t *testing.T) {
	lat := new(Latency)
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
	err := Attempt(context.Background(), a, lat, 0, func(ctx context.Context) error {
		endA()
		<-ctx.Done()
		return ctx.Err()
	})
	if err == nil || errors.Is(err, ErrNoAnswer) {
		t.Fatalf("attempt of the ended life = %v; want its end", err)
	}
	if bCtx.Err() != nil {
		t.Fatal("the end of one life ended an attempt of another")
	}
	endB()
	if err := <-bDone; err == nil {
		t.Fatal("attempt of the second life returned nil after its end")
	}
}

// A context made from a shared bound's view (gRPC makes one per request)
// registers with the bound, as with any cancelable parent: no goroutine of
// its own waits for it. And it ends with the bound.
func TestSharedBoundViewNeedsNoGoroutine(t *testing.T) {
	life, end := context.WithCancel(context.Background())
	var children []context.Context
	before := runtime.NumGoroutine()
	Attempt(context.Background(), life, new(Latency), 0, func(ctx context.Context) error {
		for range 100 {
			c, cancel := context.WithCancel(ctx)
			defer cancel()
			children = append(children, c)
		}
		if grew := runtime.NumGoroutine() - before; grew >= 50 {
			t.Errorf("100 contexts made from the view started %d goroutines", grew)
		}
		end()
		<-ctx.Done()
		return ctx.Err()
	})
	for _, c := range children {
		if c.Err() == nil {
			t.Fatal("a context made from the view outlived the bound")
		}
	}
}

// The cheapest bound, an attempt under a ctx that never ends, costs the
// attempt at most one allocation more than the request sent bare (its view;
// the shared bound is made once for many attempts).
func TestSharedBoundAllocs(t *testing.T) {
	life, end := context.WithCancel(context.Background())
	defer end()
	lat := new(Latency)
	send := func(context.Context) error { return nil }
	if n := testing.AllocsPerRun(1000, func() { Attempt(context.Background(), life, lat, 0, send) }); n > 1 {
		t.Fatalf("an attempt under a ctx that never ends allocates %v times; want at most 1", n)
	}
}
