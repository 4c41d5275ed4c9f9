package election

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"

	"github.com/leasehold/leasehold/fencing"
	"github.com/leasehold/leasehold/internal/rank"
)

// ErrPreempted is the cause of a term's context when Run hands the name to a
// candidate preferred to this replica: a live one of higher Priority, or any
// live one not drained while this replica is drained (WithDrain).
var ErrPreempted = errors.New("preempted by a preferred candidate")

// Priority ranks this replica among the candidates for the name that rank
// themselves: of the live ones (their session's lease is), only the highest
// campaign, and a leader gives way (ErrPreempted) when a higher one
// appears. Equal priorities never preempt each other. Levels compare one by
// one, a prefix ranking lower, as versions do: Priority(1, 28) <
// Priority(1, 28, 0) < Priority(2). See PriorityVersion.
//
// Priority orders; it never excludes: the queue alone decides who leads, so
// two leaders never overlap whatever the priorities. A replica with no
// Priority and no WithDrain, or one built with an older leasehold, is not
// ranked: it never gives way, and a ranked replica queues behind it like any
// other. Set one on every replica of a name.
//
// Run returns fencing.ErrInvalidArgument for no levels, more than 16, or
// Priority given again with other levels.
func Priority(levels ...int64) RunOption {
	return func(c *runConfig) { c.setPriority(slices.Clone(levels), nil) }
}

// PriorityVersion is Priority with the levels of a release version:
// "v1.28.3" or "1.28.3" ranks as Priority(1, 28, 3), so that in a rolling
// upgrade that starts each new replica before stopping an old one, the
// first new replica leads, once, and keeps leading while the others are
// replaced (stopped first, the old leader hands over to another old
// replica, and leadership moves twice). Build metadata ("+amd64") is
// ignored; a pre-release ("-rc.1"), or anything else that is not dotted
// numbers, makes Run return fencing.ErrInvalidArgument: rank a canary with
// Priority levels of its own.
func PriorityVersion(version string) RunOption {
	return func(c *runConfig) {
		p, err := rank.ParseVersion(version)
		c.setPriority(p, err)
	}
}

// ParseVersion returns the Priority levels of a release version, as
// PriorityVersion ranks it: "v1.28.3" gives [1 28 3]. Its errors wrap
// fencing.ErrInvalidArgument. Use it to check a version given on a command
// line before starting Run.
func ParseVersion(version string) ([]int64, error) {
	p, err := rank.ParseVersion(version)
	if err != nil {
		return nil, fmt.Errorf("election: %w: %w", fencing.ErrInvalidArgument, err)
	}
	return p, nil
}

func (c *runConfig) setPriority(p []int64, err error) {
	if err == nil {
		err = rank.Check(p)
	}
	switch {
	case err != nil:
		c.badPriority = err
	case c.priority != nil && !slices.Equal(c.priority, p):
		c.badPriority = fmt.Errorf("%w: %v, then %v", rank.ErrBadPriority, c.priority, p)
	default:
		c.priority = p
	}
}

// WithDrain lets d move leadership off this replica: while d is draining,
// the replica ranks below every live candidate that is not drained, gives
// its term to one of them (ErrPreempted) and does not campaign while one is
// live. A drained replica alone still leads: a name is never left without a
// leader for a drain. WithDrain ranks the replica (see Priority; unset, its
// priority is the lowest, Priority(0)); one Drain may serve many Runs. A
// nil d makes Run return fencing.ErrInvalidArgument.
func WithDrain(d *Drain) RunOption {
	return func(c *runConfig) { c.drain, c.drainSet = d, true }
}

// Weight sets this replica's share of a RunGroup's names relative to the
// other replicas': with weights 2, 1 and 1, the first leads half the names.
// Unset: 1. It has no effect on Run. Run and RunGroup return
// fencing.ErrInvalidArgument for w <= 0.
//
// A RunGroup replica of a leasehold from before ranks assigns names without
// ranks or weights: while both versions run, a name each side assigns to the
// other's replica is led by neither. Bring every replica of a group to a
// leasehold with ranks before setting Weight, Priority or WithDrain on any.
func Weight(w int) RunOption {
	return func(c *runConfig) { c.weight, c.weightSet = w, true }
}

// Drain is a switch, shared with the Runs given it by WithDrain, that moves
// leadership off them. The zero value is ready and not draining; it is safe
// for concurrent use.
type Drain struct {
	mu      sync.Mutex
	on      bool
	changed chan struct{} // closed at each change of on
}

// Set starts draining (true) or stops (false). The Runs given d act on it
// within one etcd write: the leader's work context ends with ErrPreempted
// once a preferred candidate is live.
func (d *Drain) Set(draining bool) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.on == draining {
		return
	}
	d.on = draining
	if d.changed != nil {
		close(d.changed)
	}
	d.changed = make(chan struct{})
}

// Draining reports whether d is draining.
func (d *Drain) Draining() bool {
	on, _ := d.state()
	return on
}

// state returns whether d is draining, and a channel closed at its next
// change.
func (d *Drain) state() (bool, <-chan struct{}) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.changed == nil {
		d.changed = make(chan struct{})
	}
	return d.on, d.changed
}

// ranked reports whether Run keeps a candidate record (Priority or WithDrain).
func (c *runConfig) ranked() bool { return c.priority != nil || c.drain != nil }

// rank is the priority a ranked replica's record carries.
func (c *runConfig) rank() []int64 {
	if c.priority == nil {
		return []int64{0}
	}
	return c.priority
}

// checkRank validates what Priority, PriorityVersion and WithDrain set.
func (c *runConfig) checkRank() error {
	switch {
	case c.badPriority != nil:
		return fmt.Errorf("%w: %w", fencing.ErrInvalidArgument, c.badPriority)
	case c.drainSet && c.drain == nil:
		return fmt.Errorf("%w: nil drain", fencing.ErrInvalidArgument)
	case c.weightSet && c.weight <= 0:
		return fmt.Errorf("%w: weight %d", fencing.ErrInvalidArgument, c.weight)
	}
	return nil
}

// preemptedReason is why Run resigns a term on its own: ctx's cause when it
// wraps ErrPreempted.
func preemptedReason(ctx context.Context) error { return causeIs(ctx, ErrPreempted) }

// rebalancedReason is why RunGroup resigns a term on its own.
func rebalancedReason(ctx context.Context) error { return causeIs(ctx, ErrRebalanced) }

// causeIs returns ctx's cause if it wraps target, else nil.
func causeIs(ctx context.Context, target error) error {
	if c := context.Cause(ctx); errors.Is(c, target) {
		return c
	}
	return nil
}
