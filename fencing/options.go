package fencing

import (
	"fmt"
	"log/slog"
	"os"
	"time"

	"github.com/leasehold/leasehold/internal/sessionlink"
)

const (
	// DefaultTTL is the lease TTL of a session created without WithTTL.
	DefaultTTL = 10 * time.Second
	// MinTTL is the shortest TTL NewSession accepts: below it, an etcd
	// leader election alone (which extends leases) dominates the lease.
	MinTTL = 2 * time.Second
	// defaultMaxInFlight is how many requests a session sends to etcd at
	// once without WithMaxInFlight.
	defaultMaxInFlight = 512
	// minMargin is the floor of the default safety margin.
	minMargin = 500 * time.Millisecond
)

// SessionOption configures NewSession.
type SessionOption func(*sessionConfig)

// sessionConfig is what the options set; newSessionConfig is its one parser.
type sessionConfig struct {
	TTL       time.Duration
	Margin    time.Duration
	MarginSet bool // Margin was set by WithSafetyMargin
	Logger    *slog.Logger
	Identity  string
	Root      string
	Observer  Observer
	InFlight  int // at most this many requests out at once
}

func init() {
	sessionlink.Register(func(s *Session) *sessionlink.Link {
		if s == nil {
			return nil
		}
		return s.link
	}, func(opts []SessionOption) (sessionlink.Settings, error) {
		c, err := newSessionConfig(opts)
		return sessionlink.Settings{TTL: c.TTL, Logger: c.Logger}, err
	})
}

// WithTTL sets the lease TTL, rounded up to whole seconds (etcd's unit).
// Longer survives longer pauses and partitions; shorter hands a crashed
// holder's locks over sooner. Unset: DefaultTTL. NewSession returns
// ErrInvalidArgument when d is below MinTTL.
func WithTTL(d time.Duration) SessionOption {
	return func(c *sessionConfig) { c.TTL = d }
}

// WithSafetyMargin sets how long before the server's earliest possible
// expiry of the lease the session stops vouching for it. More absorbs longer
// GC pauses and slower timers; less keeps ownership longer. Unset:
// max(TTL/10, 500 ms). NewSession returns ErrInvalidArgument unless
// 0 < d < TTL/2: the session renews every TTL/3 and, after a failure, tries
// again TTL/12 later; below TTL/2, a failed renewal gets that second try,
// and TTL/12 more for its answer, before the session stops vouching.
// inspect.SafetyBudget accepts exactly the same margins.
func WithSafetyMargin(d time.Duration) SessionOption {
	return func(c *sessionConfig) { c.Margin, c.MarginSet = d, true }
}

// WithLogger makes the session log to l, with log/slog: at Warn, the
// session lost (its cause) and each hold or term lost (kind, name, token,
// how long it was held, its cause, and how long before ValidUntil it was
// noticed); at Debug, the session's start and close, each failed renewal,
// and each acquisition (with its wait) and release. election.Run and
// RunGroup log their own events to the same logger. Unset, or nil: the
// session logs nothing.
func WithLogger(l *slog.Logger) SessionOption {
	return func(c *sessionConfig) { c.Logger = l }
}

// WithIdentity sets the value written into every key the session creates,
// so an operator reading etcd sees who holds or waits. Unset: "host/pid".
func WithIdentity(id string) SessionOption {
	return func(c *sessionConfig) { c.Identity = id }
}

// WithRoot puts the keys of every lock and election made on the session under
// root instead of DefaultRoot, so that an application keeps them in its own
// namespace: with root "billing/locks/", the lock "jobs/x" queues under
// "billing/locks/jobs/x#lock/". Sessions see each other's locks only under
// the same root. Root is used as it is (end it with "/" to keep names
// apart from the rest of the namespace); NewSession returns
// ErrInvalidArgument for an empty root or one with an unprintable character.
// Package inspect computes the key ranges for etcd grants and tools.
func WithRoot(root string) SessionOption {
	return func(c *sessionConfig) { c.Root = root }
}

// WithMaxInFlight lets at most n of the session's requests to etcd be out at
// once: those its locks, semaphores, elections, guarded writes and cleanups
// send; the lease's grant, renewals and revoke are apart and never wait.
// Further requests wait their turn, first come first served, until their
// call's ctx or the session ends; one given up that way was not sent.
// However many calls run on the session at once, a renewal then waits
// behind at most n requests, so a burst (a hundred thousand Locks started
// together) cannot cost the session its lease. Requests sent on the same
// client outside the session are not counted. Unset: 512.
// NewSession returns ErrInvalidArgument when n < 1.
func WithMaxInFlight(n int) SessionOption {
	return func(c *sessionConfig) { c.InFlight = n }
}

func newSessionConfig(opts []SessionOption) (sessionConfig, error) {
	c := sessionConfig{TTL: DefaultTTL, Root: DefaultRoot, InFlight: defaultMaxInFlight}
	for _, o := range opts {
		if o == nil {
			return c, fmt.Errorf("%w: nil option", ErrInvalidArgument)
		}
		o(&c)
	}
	if err := validRoot(c.Root); err != nil {
		return c, err
	}
	if c.InFlight < 1 {
		return c, fmt.Errorf("%w: %d requests in flight, below 1", ErrInvalidArgument, c.InFlight)
	}
	if c.TTL < MinTTL {
		return c, fmt.Errorf("%w: TTL %v below %v", ErrInvalidArgument, c.TTL, MinTTL)
	}
	c.TTL = c.TTL.Round(0)
	if r := c.TTL % time.Second; r != 0 {
		c.TTL += time.Second - r
	}
	if !c.MarginSet {
		c.Margin = max(c.TTL/10, minMargin)
	}
	if c.Margin <= 0 || c.Margin >= c.TTL/2 {
		return c, fmt.Errorf("%w: safety margin %v not in (0, TTL/2 = %v)", ErrInvalidArgument, c.Margin, c.TTL/2)
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	if c.Identity == "" {
		host, _ := os.Hostname()
		c.Identity = fmt.Sprintf("%s/%d", host, os.Getpid())
	}
	return c, nil
}
