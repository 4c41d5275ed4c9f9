package fencingtest_test

import (
	"context"
	"errors"
	"github.com/leasehold/leasehold/internal/testbed/etcdtest"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/leasehold/leasehold/election"
	"github.com/leasehold/leasehold/fencing"
	"github.com/leasehold/leasehold/fencing/fencingtest"
	"github.com/leasehold/leasehold/guard"
)

// StallRenewals holds a session's renewals and nothing else: its other
// requests are answered, its hold's context ends (ErrLeaseUnconfirmed)
// before the server deletes the key, and a guarded write after the expiry
// is refused.
func TestStallRenewals(t *testing.T) {
	c := fencingtest.Single(t)
	cli, link := c.ProxiedClient(t)
	s := fencingtest.Session(t, cli, fencing.WithTTL(2*time.Second))
	h := fencingtest.Lock(t, s, "stalled")
	deletion := etcdtest.Deletion(t, c, h.Key())
	t.Cleanup(link.Restore) // before the session's Close, which revokes
	link.StallRenewals()
	ctx := fencingtest.Context(t, fencingtest.Wait)
	if _, err := cli.Get(ctx, "anything"); err != nil {
		t.Fatalf("a read while renewals stall: %v", err)
	}
	if _, err := etcdtest.StoppedBefore(h.Context().Done(), deletion); err != nil {
		t.Fatal(err)
	}
	if cause := context.Cause(h.Context()); !errors.Is(cause, fencing.ErrLeaseUnconfirmed) {
		t.Fatalf("hold ended with %v; want ErrLeaseUnconfirmed", cause)
	}
	if _, err := guard.Put(ctx, h, "stalled/out", "late"); !errors.Is(err, guard.ErrNotOwner) {
		t.Fatalf("guarded write after the expiry: %v; want ErrNotOwner", err)
	}
}

// A renewal stalled and released in time goes through: the session lives on.
func TestRestoreReleasesRenewals(t *testing.T) {
	c := fencingtest.Single(t)
	cli, link := c.ProxiedClient(t)
	s := fencingtest.Session(t, cli, fencing.WithTTL(5*time.Second))
	before := s.ValidUntil()
	link.StallRenewals()
	link.Restore()
	fencingtest.WaitFor(t, fencingtest.Wait, "a renewal after Restore", func() bool {
		return s.ValidUntil().After(before)
	})
	if err := s.Err(); err != nil {
		t.Fatalf("session ended: %v", err)
	}
}

// The name helpers: a leader is revoked and replaced, then everyone leaves.
func TestNameHelpers(t *testing.T) {
	c := fencingtest.Single(t)
	// campaign starts a candidate on a session of its own; its term comes
	// on the channel once it leads.
	campaign := func(value string) <-chan *election.Term {
		s := fencingtest.Session(t, c.Client(t))
		e := etcdtest.Election(t, s, "helpers")
		terms := make(chan *election.Term, 1)
		fencingtest.Go(t, func(ctx context.Context) error {
			term, err := e.Campaign(ctx, value)
			if err == nil {
				terms <- term
			}
			return err
		})
		return terms
	}
	a := fencingtest.Receive(t, campaign("a"), "a to lead")
	if got := c.WaitNewLeader(t, "helpers", "").Value; got != "a" {
		t.Fatalf("leader %q; want a", got)
	}
	bs := campaign("b")
	fencingtest.WaitFor(t, fencingtest.Wait, "b to queue", func() bool {
		return len(c.Queue(t, fencing.KindElection, "helpers").Entries) == 2
	})
	if old := c.RevokeOwner(t, fencing.KindElection, "helpers"); old.Key != a.Key() {
		t.Fatalf("revoked %s; want a's key %s", old.Key, a.Key())
	}
	if cause := fencingtest.Ended(t, a.Context(), fencingtest.Wait, "a's term"); !errors.Is(cause, fencing.ErrLeaseExpired) {
		t.Fatalf("a's term ended with %v; want ErrLeaseExpired", cause)
	}
	if got := c.WaitNewLeader(t, "helpers", "a").Value; got != "b" {
		t.Fatalf("new leader %q; want b", got)
	}
	b := fencingtest.Receive(t, bs, "b's term")
	if err := b.Resign(fencingtest.Context(t, fencingtest.Wait)); err != nil {
		t.Fatal(err)
	}
	fencingtest.WaitFor(t, fencingtest.Wait, "no key of the election", func() bool {
		return len(c.Queue(t, fencing.KindElection, "helpers").Entries) == 0
	})
}

// Background's TB runs its cleanups last first, and its Fatalf stops the
// caller.
func TestBackground(t *testing.T) {
	s, close := fencingtest.Background()
	ctx := s.Context()
	var order []int
	s.Cleanup(func() { order = append(order, 1) })
	s.Cleanup(func() {
		order = append(order, 2)
		s.Cleanup(func() { order = append(order, 3) })
	})
	close()
	if ctx.Err() == nil || len(order) != 3 || order[0] != 2 || order[1] != 3 || order[2] != 1 {
		t.Fatalf("ctx %v, cleanups ran %v; want ctx ended and [2 3 1]", ctx.Err(), order)
	}
	defer func() {
		if r := recover(); r == nil || !strings.Contains(r.(string), "boom 7") {
			t.Fatalf("Fatalf: recovered %v; want a panic with its message", r)
		}
	}()
	s.Fatalf("boom %d", 7)
}

// The library's packages do not import the kit or the test bed, so no
// production binary links etcd's server through leasehold.
func TestLibraryDoesNotImportKit(t *testing.T) {
	out, err := exec.Command("go", "list", "-deps", "-f", "{{.ImportPath}}",
		"github.com/leasehold/leasehold", "github.com/leasehold/leasehold/fencing",
		"github.com/leasehold/leasehold/fencing/inspect", "github.com/leasehold/leasehold/fencing/sqlfence",
		"github.com/leasehold/leasehold/guard", "github.com/leasehold/leasehold/election").CombinedOutput()
	if err != nil {
		t.Fatalf("go list: %v\n%s", err, out)
	}
	for _, dep := range strings.Fields(string(out)) {
		if strings.HasSuffix(dep, "/fencingtest") || strings.Contains(dep, "/internal/testbed/") ||
			strings.HasPrefix(dep, "go.etcd.io/etcd/server/") {
			t.Errorf("a library package depends on %s", dep)
		}
	}
}

// README.md's "Testing your code" shows readme_test.go as a user's module
// has it: the example a newcomer copies is the test that runs here.
func TestREADMEShowsTheTestThatRuns(t *testing.T) {
	readme, err := os.ReadFile("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	test, err := os.ReadFile("readme_test.go")
	if err != nil {
		t.Fatal(err)
	}
	want := strings.Replace(string(test), "package fencingtest_test", "package myservice_test", 1)
	_, section, ok := strings.Cut(string(readme), "## Testing your code")
	if !ok {
		t.Fatal(`README.md has no "## Testing your code"`)
	}
	_, block, _ := strings.Cut(section, "```go\n")
	block, _, _ = strings.Cut(block, "```")
	if block != want {
		t.Errorf("README.md's example is not readme_test.go:\n%s\nwant:\n%s", block, want)
	}
}

// The kit fails the test, with a message naming what it waited for, when a
// wait cannot end well: a closed channel, a condition that never holds, a
// context that does not end, a replica that returns an error.
func TestKitFailsClearly(t *testing.T) {
	never, cancel := context.WithCancel(context.Background())
	defer cancel()
	closed := make(chan int)
	close(closed)
	for name, call := range map[string]func(tb fencingtest.TB){
		"the values: the channel closed": func(tb fencingtest.TB) { fencingtest.Receive(tb, closed, "the values") },
		"waiting for nothing": func(tb fencingtest.TB) {
			fencingtest.WaitFor(tb, 10*time.Millisecond, "nothing", func() bool { return false })
		},
		"the work: the context had not ended": func(tb fencingtest.TB) {
			fencingtest.Ended(tb, never, 10*time.Millisecond, "the work")
		},
		"returned boom": func(tb fencingtest.TB) {
			fencingtest.Go(tb, func(context.Context) error { return errors.New("boom") })
		},
	} {
		s, close := fencingtest.Background()
		got := func() (r any) {
			defer func() { r = recover() }()
			call(s)
			close() // Go reports at the test's end
			return nil
		}()
		if msg, _ := got.(string); !strings.Contains(msg, name) {
			t.Errorf("%s: recovered %v; want a failure saying so", name, got)
		}
	}
}
