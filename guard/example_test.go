package guard_test

import (
	"context"
	"errors"
	"fmt"

	"github.com/leasehold/leasehold/fencing"
	"github.com/leasehold/leasehold/guard"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// This example makes a read-modify-write that commits only while the lock
// is held, and tells a failed compare of its own apart from a lost lock.
func ExampleTxn() {
	ctx := context.Background()
	cli := exampleClient()
	s, _ := fencing.NewSession(ctx, cli) // error checks trimmed
	defer s.Close(ctx)
	m, _ := fencing.NewMutex(s, "counter")
	h, _ := m.Lock(ctx)

	cli.Put(ctx, "counter/value", "41")
	resp, err := guard.Txn(ctx, h).
		If(clientv3.Compare(clientv3.Value("counter/value"), "=", "41")).
		Then(clientv3.OpPut("counter/value", "42")).
		Commit()
	fmt.Println(resp.Succeeded, err)

	h.Unlock(ctx) // from here on, every guarded write fails
	_, err = guard.Put(ctx, h, "counter/value", "43")
	fmt.Println(errors.Is(err, guard.ErrNotOwner))
	// Output:
	// true <nil>
	// true
}

// This example runs work under a context that ends, with a cause, when the
// lock is lost: here an operator deletes the lock's key.
func ExampleWatch() {
	ctx := context.Background()
	cli := exampleClient()
	s, _ := fencing.NewSession(ctx, cli) // error checks trimmed
	defer s.Close(ctx)
	m, _ := fencing.NewMutex(s, "reports/nightly")
	h, _ := m.Lock(ctx)

	work, cancel := guard.Watch(ctx, h)
	defer cancel()
	cli.Delete(ctx, h.Key()) // the operator
	<-work.Done()
	fmt.Println(errors.Is(context.Cause(work), fencing.ErrKeyDeleted))
	// Output: true
}

// This example runs a function under the watched context of a hold.
func ExampleDo() {
	ctx := context.Background()
	s, _ := fencing.NewSession(ctx, exampleClient()) // error checks trimmed
	defer s.Close(ctx)
	m, _ := fencing.NewMutex(s, "compactor")
	h, _ := m.Lock(ctx)
	defer h.Unlock(ctx)

	err := guard.Do(ctx, h, func(ctx context.Context) error {
		_, err := guard.Put(ctx, h, "compactor/last", "done")
		return err
	})
	fmt.Println(err)
	// Output: <nil>
}

// This example serves a liveness probe that fails while work goes on after
// its lock was lost: here the work has stopped in time, so the probe passes.
func ExampleHealth() {
	ctx := context.Background()
	s, _ := fencing.NewSession(ctx, exampleClient()) // error checks trimmed
	defer s.Close(ctx)
	m, _ := fencing.NewMutex(s, "reports/weekly")
	h, _ := m.Lock(ctx)

	var health guard.Health // mount it: http.Handle("/healthz", &health)
	done := health.Track(h.Context(), h)
	fmt.Println(health.Check())

	exampleClient().Delete(ctx, h.Key()) // the lock is lost...
	<-h.Context().Done()
	done() // ...and the work stops acting on it
	fmt.Println(health.Check())
	// Output:
	// <nil>
	// <nil>
}
