package election

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/leasehold/leasehold/fencing"
	"github.com/leasehold/leasehold/internal/keyspace"
	"github.com/leasehold/leasehold/internal/ownership"
	"github.com/leasehold/leasehold/internal/retry"
	"github.com/leasehold/leasehold/internal/revqueue"
	"github.com/leasehold/leasehold/internal/sessionlink"
	clientv3 "go.etcd.io/etcd/client/v3"
)

var (
	// ErrNotLeader is returned by Proclaim and Resign when the term was
	// already lost or resigned. Nothing was written.
	ErrNotLeader = errors.New("not leader")

	// ErrNoLeader is returned by Leader when nobody leads.
	ErrNoLeader = errors.New("no leader")
)

// Election is one election on a session. It holds no state between calls:
// it is safe for concurrent use, and each Campaign call is a separate
// candidate, even on one session.
type Election struct {
	s     *fencing.Session
	name  string
	q     revqueue.Queue
	cands string // the prefix of the ranked candidates' records
	keys  string // the prefix of every key of the name: queue and records
}

// Leader describes the current leader.
type Leader struct {
	Value string        // the value it campaigned with, or last proclaimed
	Token fencing.Token // its term's fencing token
	Key   string        // its etcd key
}

// New returns the election called name on session s. It accepts the names
// fencing.NewMutex accepts (see fencing.ValidateName) and returns an error
// wrapping fencing.ErrInvalidName for others; a nil s returns
// fencing.ErrInvalidArgument. Elections and locks of the same name are
// independent.
func New(s *fencing.Session, name string) (*Election, error) {
	if s == nil {
		return nil, fmt.Errorf("election: New: %w: nil session", fencing.ErrInvalidArgument)
	}
	if err := fencing.ValidateName(name); err != nil {
		return nil, fmt.Errorf("election: New: %w", err)
	}
	l := sessionlink.Of(s)
	if l == nil {
		return nil, fmt.Errorf("election: New: %w: session not made by fencing.NewSession", fencing.ErrInvalidArgument)
	}
	return &Election{s: s, name: name, q: revqueue.Queue{Client: s.Client(), Prefix: keyspace.Prefix(l.Root, "election", name), Latency: l.Latency, Watches: l.Watches},
		cands: keyspace.Prefix(l.Root, keyspace.KindCandidate, name), keys: keyspace.Prefix(l.Root, "", name)}, nil
}

// Name returns the election's name.
func (e *Election) Name() string { return e.name }

// Campaign blocks until this candidate leads, and returns its Term. It has
// Lock's guarantees (see fencing.Mutex.Lock): on success its key existed on
// the session's live lease at a revision where it was the oldest; it writes
// exactly one key, removed again on every failure; its wait survives
// compaction and reconnects. Its errors wrap fencing.ErrSessionExpired,
// fencing.ErrKeyDeleted or ctx's error.
func (e *Election) Campaign(ctx context.Context, value string) (*Term, error) {
	if err := e.usable(ctx); err != nil {
		return nil, fmt.Errorf("election: campaign: %w", err)
	}
	start := time.Now()
	l := sessionlink.Of(e.s)
	entry, err := e.q.Acquire(ctx, &l.Session, value)
	if err != nil {
		return nil, fmt.Errorf("election: campaign %q: %w", e.name, l.AcquireError(err))
	}
	return e.term(l, entry, value, start), nil
}

// TryCampaign makes this candidate the leader only if nobody leads or waits
// to lead, in one request, as TryLock does for a lock. Otherwise it writes
// nothing and returns an error wrapping fencing.ErrLocked that names the
// leader's value and token. Its other errors are Campaign's.
func (e *Election) TryCampaign(ctx context.Context, value string) (*Term, error) {
	if err := e.usable(ctx); err != nil {
		return nil, fmt.Errorf("election: trycampaign: %w", err)
	}
	start := time.Now()
	l := sessionlink.Of(e.s)
	entry, leader, err := e.q.TryAcquire(ctx, &l.Session, value)
	if err != nil {
		return nil, fmt.Errorf("election: trycampaign %q: %w", e.name, l.AcquireError(err))
	}
	if leader != nil {
		return nil, fmt.Errorf("election: trycampaign %q: %w: led by %q (token %v)", e.name, fencing.ErrLocked, leader.Value,
			fencing.Token{Name: e.name, Revision: leader.CreateRevision, Cluster: l.Cluster})
	}
	return e.term(l, entry, value, start), nil
}

// term makes the Term of a won campaign, started at start.
func (e *Election) term(l *sessionlink.Link, entry *revqueue.Entry, value string, start time.Time) *Term {
	t := fencing.Token{Name: e.name, Revision: entry.Rev, Cluster: l.Cluster}
	life := l.Track(string(fencing.KindElection), e.name, entry.Rev, entry.Key, time.Since(start))
	term := &Term{s: e.s, link: l, token: t, modRev: entry.Rev, also: entry.Also, alsoRev: entry.AlsoRev,
		own: ownership.New(l, entry.Key, entry.Rev, entry.Seen(), life, entry.Free, errResigned)}
	term.value.Store(&value)
	return term
}

// Leader returns the current leader, read linearizably, or an error wrapping
// ErrNoLeader when nobody leads.
func (e *Election) Leader(ctx context.Context) (Leader, error) {
	if err := e.usable(ctx); err != nil {
		return Leader{}, fmt.Errorf("election: leader: %w", err)
	}
	l, _, err := e.leader(ctx)
	if err != nil {
		return Leader{}, err
	}
	if l == nil {
		return Leader{}, fmt.Errorf("election: leader %q: %w", e.name, ErrNoLeader)
	}
	return *l, nil
}

// usable returns fencing.ErrInvalidArgument for a nil ctx, or an election
// New did not make.
func (e *Election) usable(ctx context.Context) error {
	switch {
	case ctx == nil:
		return fmt.Errorf("%w: nil context", fencing.ErrInvalidArgument)
	case e == nil || e.s == nil:
		return fmt.Errorf("%w: election not made by New", fencing.ErrInvalidArgument)
	}
	return nil
}

// leader reads the oldest key of the queue (nil when empty) and the revision
// of the read.
func (e *Election) leader(ctx context.Context) (*Leader, int64, error) {
	resp, err := retry.Once(e.q.Latency, ctx, e.s.Context(), func() (*clientv3.GetResponse, error) {
		return e.s.Client().Get(ctx, e.q.Prefix, clientv3.WithFirstCreate()...)
	})
	if err != nil {
		return nil, 0, fmt.Errorf("election: leader %q: %w", e.name, err)
	}
	if len(resp.Kvs) == 0 {
		return nil, resp.Header.Revision, nil
	}
	kv := resp.Kvs[0]
	return &Leader{Value: string(kv.Value), Token: fencing.Token{Name: e.name, Revision: kv.CreateRevision, Cluster: resp.Header.GetClusterId()}, Key: string(kv.Key)},
		resp.Header.Revision, nil
}

// errWatchBroken marks a watch that Observe resumes without telling the
// caller: compacted, cancelled by the server, or closed with its connection.
var errWatchBroken = errors.New("watch broken")
