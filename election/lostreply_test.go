package election_test

import (
	"sync/atomic"
	"testing"

	"github.com/leasehold/leasehold/internal/testbed/etcdtest"

	"github.com/leasehold/leasehold/fencing"
	"github.com/leasehold/leasehold/fencing/fencingtest"
	"github.com/leasehold/leasehold/internal/keyspace"
)

// Campaign, Proclaim and Resign go through a lost reply or a refusal of
// their write: Campaign keeps the key its lost write made, Proclaim's value
// is set, Resign hands over.
func TestTermCallsRetryPassingFailures(t *testing.T) {
	c := fencingtest.Single(t)
	prefix := keyspace.Prefix(fencing.DefaultRoot, "election", "retry")
	puts := func(req any) bool { return etcdtest.PutsUnder(req, prefix) }
	deletes := func(req any) bool { return etcdtest.DeletesUnder(req, prefix) }
	for _, f := range []etcdtest.Fault{etcdtest.LoseReply, etcdtest.Refuse, etcdtest.Hang} {
		// Each step's first write gets the fault: Campaign's and Proclaim's
		// puts, then Resign's delete.
		var step atomic.Int32
		var hit [3]atomic.Bool
		r := &etcdtest.Replies{Decide: func(_ string, req any) etcdtest.Fault {
			i := step.Load()
			match := puts
			if i == 2 {
				match = deletes
			}
			if match(req) && hit[i].CompareAndSwap(false, true) {
				return f
			}
			return etcdtest.Pass
		}}
		e := newElection(t, newSession(t, c.Client(t, r.Option())), "retry")
		term, err := e.Campaign(fencingtest.Context(t, wait), "a")
		if err != nil {
			t.Fatalf("Campaign across fault %d: %v", f, err)
		}
		if keys := etcdtest.Keys(t, c, prefix); len(keys) != 1 || keys[0] != term.Key() {
			t.Fatalf("keys %q; want only the term's %s", keys, term.Key())
		}
		step.Store(1)
		if err := term.Proclaim(fencingtest.Context(t, wait), "b"); err != nil {
			t.Fatalf("Proclaim across fault %d: %v", f, err)
		}
		if l, err := e.Leader(fencingtest.Context(t, wait)); err != nil || l.Value != "b" {
			t.Fatalf("Leader after Proclaim: %+v, %v", l, err)
		}
		step.Store(2)
		if err := term.Resign(fencingtest.Context(t, wait)); err != nil {
			t.Fatalf("Resign across fault %d: %v", f, err)
		}
		if keys := etcdtest.Keys(t, c, prefix); len(keys) != 0 {
			t.Fatalf("keys left: %q", keys)
		}
	}
}

// An attempt of a Proclaim, given up and applied late, does not undo a later
// Proclaim: it finds the key written since, and writes nothing. Found by
// review: the put compared only the key's create revision.
func TestLateProclaimDoesNotRevertValue(t *testing.T) {
	c := fencingtest.Single(t)
	prefix := keyspace.Prefix(fencing.DefaultRoot, "election", "late-proclaim")
	var armed, hit atomic.Bool
	r := &etcdtest.Replies{Decide: func(_ string, req any) etcdtest.Fault {
		if armed.Load() && etcdtest.PutsUnder(req, prefix) && hit.CompareAndSwap(false, true) {
			return etcdtest.Late
		}
		return etcdtest.Pass
	}}
	e := newElection(t, newSession(t, c.Client(t, r.Option())), "late-proclaim")
	term, err := e.Campaign(fencingtest.Context(t, wait), "a")
	if err != nil {
		t.Fatal(err)
	}
	armed.Store(true)
	if err := term.Proclaim(fencingtest.Context(t, wait), "b"); err != nil { // its first attempt held back, then retried
		t.Fatal(err)
	}
	if err := term.Proclaim(fencingtest.Context(t, wait), "c"); err != nil {
		t.Fatal(err)
	}
	r.Release() // the given-up "b" arrives now
	l, err := e.Leader(fencingtest.Context(t, wait))
	if err != nil {
		t.Fatal(err)
	}
	if l.Value != "c" || term.Value() != "c" {
		t.Errorf("after Proclaim(b), Proclaim(c): observers see %q, Term.Value %q; want c", l.Value, term.Value())
	}
	if err := term.Resign(fencingtest.Context(t, wait)); err != nil {
		t.Fatal(err)
	}
}
