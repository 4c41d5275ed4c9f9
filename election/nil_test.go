package election_test

import (
	"context"
	"errors"
	"testing"

	"github.com/leasehold/leasehold/election"
	"github.com/leasehold/leasehold/fencing"
	"github.com/leasehold/leasehold/fencing/fencingtest"
	"github.com/leasehold/leasehold/internal/testbed/etcdtest"
)

// election's functions and methods given a nil or zero value return
// fencing.ErrInvalidArgument (or do their documented no-op), never panic,
// and write nothing.
func TestNilAndZeroInputs(t *testing.T) {
	c := fencingtest.Single(t)
	cli := c.Client(t)
	ctx := fencingtest.Context(t, wait)
	s := newSession(t, cli)
	e := newElection(t, s, "nil-inputs")
	term := campaign(t, e, "v")
	var nilCtx context.Context
	work := func(context.Context, *election.Term) error { return nil }
	invalid := map[string]func() error{
		"New(nil session)":       func() error { _, err := election.New(nil, "x"); return err },
		"zero Election Campaign": func() error { _, err := new(election.Election).Campaign(ctx, "v"); return err },
		"Campaign(nil ctx)":      func() error { _, err := e.Campaign(nilCtx, "v"); return err },
		"TryCampaign(nil ctx)":   func() error { _, err := e.TryCampaign(nilCtx, "v"); return err },
		"zero Election TryCampaign": func() error {
			_, err := new(election.Election).TryCampaign(ctx, "v")
			return err
		},
		"zero Election Leader":  func() error { _, err := new(election.Election).Leader(ctx); return err },
		"Leader(nil ctx)":       func() error { _, err := e.Leader(nilCtx); return err },
		"Observe(nil ctx)":      func() error { return (<-e.Observe(nilCtx)).Err },
		"zero Election Observe": func() error { return (<-new(election.Election).Observe(ctx)).Err },
		"zero Term Proclaim":    func() error { return new(election.Term).Proclaim(ctx, "v") },
		"zero Term Resign":      func() error { return new(election.Term).Resign(ctx) },
		"zero Term Context":     func() error { return context.Cause(new(election.Term).Context()) },
		"Proclaim(nil ctx)":     func() error { return term.Proclaim(nilCtx, "v") },
		"Resign(nil ctx)":       func() error { return term.Resign(nilCtx) },
		"Run(nil ctx)":          func() error { return election.Run(nilCtx, cli, "x", "v", work) },
		"Run(nil client)":       func() error { return election.Run(ctx, nil, "x", "v", work) },
		"Run(nil work)":         func() error { return election.Run(ctx, cli, "x", "v", nil) },
		"Run(nil option)":       func() error { return election.Run(ctx, cli, "x", "v", work, nil) },
		"Run(WithHealth(nil))":  func() error { return election.Run(ctx, cli, "x", "v", work, election.WithHealth(nil)) },
	}
	for name, call := range invalid {
		t.Run(name, func(t *testing.T) {
			err := call()
			if !errors.Is(err, fencing.ErrInvalidArgument) {
				t.Errorf("got %v, want ErrInvalidArgument", err)
			}
			etcdtest.NamesPackageOnce(t, "election", err)
		})
	}
	// Documented no-ops: a nil logger logs nothing, nil callbacks are not
	// called.
	err := election.Run(ctx, cli, "nil-noops", "v", work, election.WithSessionOptions(fencing.WithLogger(nil)),
		election.OnStartedLeading(nil), election.OnStoppedLeading(nil))
	if err != nil {
		t.Errorf("Run with nil logger and callbacks: %v", err)
	}
	if err := term.Resign(ctx); err != nil {
		t.Fatal(err)
	}
	if keys := etcdtest.Keys(t, c, ""); len(keys) != 0 {
		t.Errorf("keys left: %v", keys)
	}
}

// Observe's doc: bad input gets one Observation whose Err wraps
// ErrInvalidArgument, on a channel that is already closed.
func TestObserveBadInputClosesAtOnce(t *testing.T) {
	var nilCtx context.Context
	for name, ch := range map[string]<-chan election.Observation{
		"nil ctx":       newElection(t, newSession(t, etcdtest.Shared().Admin), "observe-bad").Observe(nilCtx),
		"zero Election": new(election.Election).Observe(t.Context()),
	} {
		if o, ok := <-ch; !ok || !errors.Is(o.Err, fencing.ErrInvalidArgument) {
			t.Errorf("%s: first receive %+v, %v; want ErrInvalidArgument", name, o, ok)
		}
		select {
		case o, ok := <-ch:
			if ok {
				t.Errorf("%s: a second observation %+v; want the channel closed", name, o)
			}
		default:
			t.Errorf("%s: the channel is not closed after its one observation", name)
		}
	}
}
