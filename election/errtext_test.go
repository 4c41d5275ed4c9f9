package election_test

import (
	"context"
	"testing"

	"github.com/leasehold/leasehold/election"
	"github.com/leasehold/leasehold/fencing"
	"github.com/leasehold/leasehold/fencing/fencingtest"
	"github.com/leasehold/leasehold/internal/testbed/etcdtest"
)

// Every error election returns names the package once, first, whatever it
// wraps: "election: trycampaign \"x\": locked: ...", not "election: ...:
// fencing: ...: fencing: ...".
func TestErrorsNamePackageOnce(t *testing.T) {
	c := fencingtest.Single(t)
	cli := c.Client(t)
	ctx := fencingtest.Context(t, wait)
	s := newSession(t, cli)
	term, err := newElection(t, s, "errtext").Campaign(ctx, "v")
	if err != nil {
		t.Fatal(err)
	}
	closed := newSession(t, cli)
	closed.Close(ctx)
	cancelled, cancel := context.WithCancel(ctx)
	cancel()
	resigned := func() *election.Term {
		tm, err := newElection(t, s, "errtext-2").Campaign(ctx, "v")
		if err != nil {
			t.Fatal(err)
		}
		tm.Resign(ctx)
		return tm
	}
	work := func(context.Context, *election.Term) error { return nil }
	errs := map[string]func() error{
		"New(name)": func() error { _, err := election.New(s, "a#b"); return err },
		"TryCampaign(led)": func() error {
			_, err := newElection(t, newSession(t, cli), "errtext").TryCampaign(ctx, "w")
			return err
		},
		"Campaign(closed)":    func() error { _, err := newElection(t, closed, "errtext-3").Campaign(ctx, "v"); return err },
		"Campaign(cancelled)": func() error { _, err := newElection(t, s, "errtext-4").Campaign(cancelled, "v"); return err },
		"Leader(none)":        func() error { _, err := newElection(t, s, "errtext-5").Leader(ctx); return err },
		"Resign(twice)":       func() error { return resigned().Resign(ctx) },
		"Proclaim(resigned)":  func() error { return resigned().Proclaim(ctx, "w") },
		"Run(TTL)": func() error {
			return election.Run(ctx, cli, "r", "v", work, election.WithSessionOptions(fencing.WithTTL(1)))
		},
		"Run(name)": func() error { return election.Run(ctx, cli, "a#b", "v", work) },
		"Observe(nil ctx)": func() error {
			var nilCtx context.Context
			return (<-newElection(t, s, "errtext-6").Observe(nilCtx)).Err
		},
	}
	for name, call := range errs {
		t.Run(name, func(t *testing.T) { etcdtest.NamesPackageOnce(t, "election", call()) })
	}
	if err := term.Resign(ctx); err != nil {
		t.Fatal(err)
	}
}
