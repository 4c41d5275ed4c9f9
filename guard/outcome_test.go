package guard_test

import (
	"errors"
	"sync/atomic"
	"testing"

	"github.com/leasehold/leasehold/internal/testbed/etcdtest"

	"github.com/leasehold/leasehold/fencing/fencingtest"
	"github.com/leasehold/leasehold/guard"
)

// A guarded txn is sent once. When its reply is lost, the error says the
// outcome is unknown (and here the write was applied); when etcd refused it,
// the error is definite (nothing applied); neither is ErrNotOwner.
func TestGuardedTxnTellsUnknownOutcome(t *testing.T) {
	c := fencingtest.Single(t)
	var sent atomic.Int32
	var fault atomic.Int32
	r := &etcdtest.Replies{Decide: func(_ string, req any) etcdtest.Fault {
		if !etcdtest.PutsUnder(req, "outcome/") {
			return etcdtest.Pass
		}
		sent.Add(1)
		return etcdtest.Fault(fault.Load())
	}}
	h := lock(t, newSession(t, c.Client(t, r.Option())), "outcome")
	fault.Store(int32(etcdtest.LoseReply))
	_, err := guard.Put(fencingtest.Context(t, wait), h, "outcome/a", "1")
	if !errors.Is(err, guard.ErrOutcomeUnknown) || errors.Is(err, guard.ErrNotOwner) {
		t.Fatalf("Put with its reply lost: %v; want ErrOutcomeUnknown", err)
	}
	if got := get(t, c, "outcome/a"); got != "1" {
		t.Fatalf("the lost-reply put was applied, but the key holds %q", got)
	}
	fault.Store(int32(etcdtest.Refuse))
	_, err = guard.Put(fencingtest.Context(t, wait), h, "outcome/b", "1")
	if err == nil || errors.Is(err, guard.ErrOutcomeUnknown) || errors.Is(err, guard.ErrNotOwner) {
		t.Fatalf("Put refused by etcd: %v; want a definite error", err)
	}
	if got := get(t, c, "outcome/b"); got != "" {
		t.Fatalf("the refused put wrote %q", got)
	}
	if n := sent.Load(); n != 2 {
		t.Fatalf("%d guarded puts sent; want each sent once, 2", n)
	}
	if err := h.Unlock(fencingtest.Context(t, wait)); err != nil {
		t.Fatal(err)
	}
}
