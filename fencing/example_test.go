package fencing_test

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/leasehold/leasehold/fencing"
)

// This example acquires a lock, uses its token, and releases it.
func ExampleMutex_Lock() {
	ctx := context.Background()
	s, err := fencing.NewSession(ctx, exampleClient(), fencing.WithTTL(10*time.Second))
	if err != nil {
		fmt.Println(err)
		return
	}
	defer s.Close(ctx)
	m, err := fencing.NewMutex(s, "jobs/billing")
	if err != nil {
		fmt.Println(err)
		return
	}
	h, err := m.Lock(ctx)
	if err != nil {
		fmt.Println(err)
		return
	}
	// Send h.Token() with every write this owner makes to another store.
	fmt.Println("holding", h.Token().Name)
	fmt.Println(h.Unlock(ctx))
	fmt.Println(errors.Is(h.Unlock(ctx), fencing.ErrNotHeld))
	// Output:
	// holding jobs/billing
	// <nil>
	// true
}

// This example shows a second session failing fast on a held lock, and its
// later owner getting a greater token.
func ExampleMutex_TryLock() {
	ctx := context.Background()
	a, _ := fencing.NewSession(ctx, exampleClient()) // error checks trimmed
	defer a.Close(ctx)
	b, _ := fencing.NewSession(ctx, exampleClient())
	defer b.Close(ctx)
	ma, _ := fencing.NewMutex(a, "reports/daily")
	mb, _ := fencing.NewMutex(b, "reports/daily")

	first, _ := ma.Lock(ctx)
	_, err := mb.TryLock(ctx)
	fmt.Println(errors.Is(err, fencing.ErrLocked))

	first.Unlock(ctx)
	second, _ := mb.TryLock(ctx)
	fmt.Println(second.Token().Compare(first.Token()))
	second.Unlock(ctx)
	// Output:
	// true
	// 1
}

// This example shows a token as text and back, as it travels in an HTTP
// header or a log line.
func ExampleParseToken() {
	tok := fencing.Token{Name: "jobs/billing", Revision: 1234}
	fmt.Println(tok)
	back, err := fencing.ParseToken(tok.String())
	fmt.Println(back == tok, err)
	_, err = fencing.ParseToken("jobs/billing@0")
	fmt.Println(errors.Is(err, fencing.ErrInvalidToken))
	// Output:
	// jobs/billing@1234
	// true <nil>
	// true
}

// This example shows why a session ends: here, the lease was revoked.
func ExampleSession_Done() {
	ctx := context.Background()
	s, _ := fencing.NewSession(ctx, exampleClient(), fencing.WithTTL(2*time.Second))
	exampleClient().Revoke(ctx, s.Lease()) // an operator revokes the lease
	<-s.Done()
	fmt.Println(errors.Is(s.Err(), fencing.ErrLeaseExpired))
	fmt.Println(s.ValidUntil().Before(time.Now()))
	// Output:
	// true
	// true
}

// This example counts acquisitions and losses with an Observer, as a metrics
// library would.
func ExampleWithObserver() {
	ctx := context.Background()
	var acquired, released atomic.Int64
	obs := fencing.Observer{
		OnAcquire: func(e fencing.AcquireEvent) { acquired.Add(1) },
		OnRelease: func(e fencing.ReleaseEvent) { released.Add(1) },
	}
	s, err := fencing.NewSession(ctx, exampleClient(), fencing.WithObserver(obs))
	if err != nil {
		fmt.Println(err)
		return
	}
	defer s.Close(ctx)
	m, _ := fencing.NewMutex(s, "observed")
	h, err := m.Lock(ctx)
	if err != nil {
		fmt.Println(err)
		return
	}
	h.Unlock(ctx)
	fmt.Println("acquired", acquired.Load(), "released", released.Load())
	// Output: acquired 1 released 1
}

// This example lets at most two migrations run at once, whichever process
// starts them: a third waits, or fails fast with TryAcquire.
func ExampleSemaphore() {
	ctx := context.Background()
	s, _ := fencing.NewSession(ctx, exampleClient()) // error checks trimmed
	defer s.Close(ctx)
	sem, _ := fencing.NewSemaphore(s, "migrations", 2)

	first, _ := sem.Acquire(ctx)
	second, _ := sem.Acquire(ctx)
	_, err := sem.TryAcquire(ctx)
	fmt.Println("third:", errors.Is(err, fencing.ErrLocked))

	// Each permit is a Hold: its token fences its writes, its Context ends
	// if the permit is lost.
	first.Unlock(ctx)
	third, _ := sem.TryAcquire(ctx)
	fmt.Println("after a release:", third.Token().Compare(second.Token()))
	second.Unlock(ctx)
	third.Unlock(ctx)
	// Output:
	// third: true
	// after a release: 1
}

// This example shares a table among readers and gives a writer the table to
// itself, with a token greater than every earlier reader's.
func ExampleRWMutex() {
	ctx := context.Background()
	s, _ := fencing.NewSession(ctx, exampleClient()) // error checks trimmed
	defer s.Close(ctx)
	rw, _ := fencing.NewRWMutex(s, "tables/users")

	r1, _ := rw.RLock(ctx)
	r2, _ := rw.RLock(ctx) // readers share
	_, err := rw.TryLock(ctx)
	fmt.Println("writer while read:", errors.Is(err, fencing.ErrLocked))
	r1.Unlock(ctx)
	r2.Unlock(ctx)

	w, _ := rw.Lock(ctx)
	fmt.Println("write token above reads:", w.Token().Compare(r2.Token()) > 0)
	w.Unlock(ctx)
	// Output:
	// writer while read: true
	// write token above reads: true
}

// This example starts a burst of Lock calls on one session: the session
// sends at most WithMaxInFlight of their requests at once, the rest wait
// their turn in the client, and its lease's renewal never waits behind the
// burst.
func ExampleWithMaxInFlight() {
	ctx := context.Background()
	s, _ := fencing.NewSession(ctx, exampleClient(), fencing.WithMaxInFlight(64)) // error checks trimmed
	defer s.Close(ctx)
	var held atomic.Int64
	done := make(chan struct{})
	for i := range 1000 {
		go func() {
			defer func() { done <- struct{}{} }()
			m, _ := fencing.NewMutex(s, fmt.Sprint("shards/", i))
			if h, err := m.Lock(ctx); err == nil {
				held.Add(1)
				h.Unlock(ctx)
			}
		}()
	}
	for range 1000 {
		<-done
	}
	fmt.Println(held.Load(), "shards locked and released, session alive:", s.Err() == nil)
	// Output:
	// 1000 shards locked and released, session alive: true
}
