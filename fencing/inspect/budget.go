package inspect

import (
	"fmt"
	"github.com/leasehold/leasehold/fencing"
	"math"
	"strings"
	"time"
)

// ExpiryScan is how often etcd looks for expired leases: a lease is revoked
// up to this long after its TTL ran out.
const ExpiryScan = 500 * time.Millisecond

// Budget is the worst-case timing of a session configuration: what an
// operator can promise from TTL, renewal interval and safety margin alone.
// The bounds assume etcd keeps its raft leader; a leader change restarts the
// TTL of every lease, which delays a takeover (never makes it unsafe).
type Budget struct {
	TTL     time.Duration
	Renewal time.Duration // between renewals
	Margin  time.Duration // safety margin

	// Takeover bounds how long after a holder crashes a waiter owns the
	// lock: the TTL counted from the holder's last renewal, plus ExpiryScan
	// (plus a round trip to deliver the deletion).
	Takeover time.Duration
	// PartitionedWork bounds how long a holder cut off from etcd keeps
	// working before its context ends: ValidUntil is at most TTL − Margin
	// after the send of the last acknowledged renewal. Its successor cannot
	// own before Margin more has passed.
	PartitionedWork time.Duration
	// RetryWindow is how long renewals may keep failing, from the send of
	// the first failed one, before the session gives up: TTL − Margin −
	// Renewal.
	RetryWindow time.Duration
	// Pause bounds how long a process may pause between finding itself
	// owner (its context alive, ValidUntil ahead) and a write elsewhere, and
	// still be sure the write was made while the lease existed: Margin. A
	// longer pause needs a fenced write (sqlfence, or a gate.Gate); a guarded
	// etcd txn is checked by etcd itself, whatever the pause.
	Pause time.Duration
}

// SafetyBudget computes the Budget of sessions with lease TTL ttl renewed
// every renewal, with safety margin margin. A fencing.Session renews every
// third of its TTL; its margin is fencing.WithSafetyMargin's, by default
// max(TTL/10, 500 ms). It returns fencing.ErrInvalidArgument
// unless all three are positive, renewal + margin < ttl (otherwise the
// session stops vouching between two renewals) and margin < ttl/2, the
// bound fencing.NewSession sets on the margin: it accepts a configuration
// exactly when a session could be made with it.
func SafetyBudget(ttl, renewal, margin time.Duration) (Budget, error) {
	// Compared without sums, which could overflow.
	if ttl <= 0 || renewal <= 0 || margin <= 0 || margin >= ttl/2 || renewal >= ttl-margin || ttl > math.MaxInt64-ExpiryScan {
		return Budget{}, fmt.Errorf("inspect: SafetyBudget(%v, %v, %v): %w: need positive values with renewal + margin < TTL and margin < TTL/2",
			ttl, renewal, margin, fencing.ErrInvalidArgument)
	}
	return Budget{
		TTL: ttl, Renewal: renewal, Margin: margin,
		Takeover:        ttl + ExpiryScan,
		PartitionedWork: ttl - margin,
		RetryWindow:     ttl - margin - renewal,
		Pause:           margin,
	}, nil
}

// String explains the budget in a few lines, for operators.
func (b Budget) String() string {
	var sb strings.Builder
	fmt.Fprintf(&sb, "lease TTL %v, renewed every %v, safety margin %v:\n", b.TTL, b.Renewal.Round(time.Millisecond), b.Margin)
	for _, l := range [][2]string{
		{"crash → successor owns", fmt.Sprintf("≤ %v  (TTL + etcd's %v expiry scan; an etcd leader change restarts the TTL)", b.Takeover, ExpiryScan)},
		{"partition → holder stops", fmt.Sprintf("≤ %v  (TTL − margin after the last acknowledged renewal was sent)", b.PartitionedWork)},
		{"holder stops → successor owns", fmt.Sprintf("≥ %v  (the margin: never overlapping)", b.Margin)},
		{"renewals may fail for", fmt.Sprintf("%v  (TTL − margin − renewal interval) before the session gives up", b.RetryWindow.Round(time.Millisecond))},
		{"pause after an ownership check", fmt.Sprintf("≤ %v  (the margin) for an unfenced write; fenced writes and guarded txns: any", b.Pause)},
	} {
		fmt.Fprintf(&sb, "  %-31s %s\n", l[0]+":", l[1])
	}
	return sb.String()
}
