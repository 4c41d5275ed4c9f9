package fencing_test

import (
	"context"
	"errors"
	"fmt"

	"github.com/leasehold/leasehold/fencing"
)

// This example shares 8 GiB of a build farm's memory among jobs that each
// ask for what they need, as with golang.org/x/sync/semaphore.Weighted: a
// job that waits for 6 GiB holds back the smaller jobs behind it.
func ExampleSemaphore_AcquireN() {
	ctx := context.Background()
	s, _ := fencing.NewSession(ctx, exampleClient()) // error checks trimmed
	defer s.Close(ctx)
	mem, _ := fencing.NewSemaphore(s, "farm/memory-gib", 8)

	link, _ := mem.AcquireN(ctx, 3)
	_, err := mem.TryAcquireN(ctx, 6)
	fmt.Println("6 more:", errors.Is(err, fencing.ErrLocked))
	_, err = mem.AcquireN(ctx, 9)
	fmt.Println("9:", errors.Is(err, fencing.ErrOverLimit))

	test, _ := mem.TryAcquireN(ctx, 5) // 3 + 5 fit the 8
	fmt.Println("5 more:", test.Token().Compare(link.Token()))
	link.Unlock(ctx)
	test.Unlock(ctx)
	// Output:
	// 6 more: true
	// 9: true
	// 5 more: 1
}

// This example raises a running semaphore's limit, which admits the
// waiter at once, then lowers it again: no hold is taken back.
func ExampleSemaphore_SetLimit() {
	ctx := context.Background()
	s, _ := fencing.NewSession(ctx, exampleClient()) // error checks trimmed
	defer s.Close(ctx)
	sem, _ := fencing.NewSemaphore(s, "crawlers", 1)

	first, _ := sem.Acquire(ctx)
	waiter := make(chan *fencing.Hold)
	go func() {
		h, _ := sem.Acquire(ctx)
		waiter <- h
	}()
	sem.SetLimit(ctx, 2) // every process using "crawlers" follows it
	second := <-waiter
	fmt.Println("admitted at once:", second.Token().Compare(first.Token()))

	sem.SetLimit(ctx, 1)
	fmt.Println("both still hold:", first.Context().Err() == nil && second.Context().Err() == nil)
	limit, _ := sem.ReadLimit(ctx)
	fmt.Println("limit:", limit)
	first.Unlock(ctx)
	second.Unlock(ctx)
	// Output:
	// admitted at once: 1
	// both still hold: true
	// limit: 1
}
