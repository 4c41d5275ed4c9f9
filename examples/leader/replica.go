package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/leasehold/leasehold/election"
	"github.com/leasehold/leasehold/fencing"
	"github.com/leasehold/leasehold/guard"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// replica campaigns for as long as it runs, follows the election with
// Observe, and serves both over HTTP.
type replica struct {
	name, value string
	ttl         time.Duration
	log         *slog.Logger
	mux         *http.ServeMux

	mu   sync.Mutex
	term *election.Term        // guarded by mu: nil unless this replica leads
	seen *election.Observation // guarded by mu: the latest observation

	priority []int64        // nil: unranked by priority (the lowest)
	drain    election.Drain // set through /drain

	health   guard.Health // fails while this replica acts on a term past its ValidUntil
	standing standing     // fails while this replica's session cannot vouch for its lease
}

func newReplica(name, value string, ttl time.Duration, log *slog.Logger) *replica {
	r := &replica{name: name, value: value, ttl: ttl, log: log, mux: http.NewServeMux()}
	r.standing.start(ttl)
	r.mux.HandleFunc("GET /leader", r.leader)
	r.mux.HandleFunc("POST /resign", r.resign)
	r.mux.HandleFunc("POST /proclaim", r.proclaim)
	r.mux.HandleFunc("POST /drain", r.setDrain(true))
	r.mux.HandleFunc("DELETE /drain", r.setDrain(false))
	r.mux.HandleFunc("GET /healthz", r.healthz)
	return r
}

func (r *replica) ServeHTTP(w http.ResponseWriter, req *http.Request) { r.mux.ServeHTTP(w, req) }

// run campaigns and observes until ctx ends, then resigns (election.Run
// does, at once) and returns once both have stopped. obs receives the
// events of every session Run makes.
func (r *replica) run(ctx context.Context, cli *clientv3.Client, obs fencing.Observer) {
	var wg sync.WaitGroup
	defer wg.Wait()
	wg.Go(func() { r.observe(ctx, cli) })
	// Run makes a new session whenever the last one is lost and campaigns
	// again: a replica never leaves the election while it runs.
	opts := []election.RunOption{election.WithDrain(&r.drain)}
	if r.priority != nil {
		opts = append(opts, election.Priority(r.priority...))
	}
	err := election.Run(ctx, cli, r.name, r.value, r.lead, append(opts,
		election.WithSessionOptions(fencing.WithTTL(r.ttl), fencing.WithLogger(r.log), fencing.WithObserver(obs)),
		election.WithHealth(&r.health), election.AfterSuccess(election.KeepLeading), election.OnSession(r.standing.session),
		election.OnStartedLeading(func(t *election.Term) { r.log.Info("leading", "token", t.Token()) }),
		election.OnStoppedLeading(func(t *election.Term, cause error) {
			r.log.Info("stopped leading", "token", t.Token(), "cause", cause)
		}))...)
	if err != nil { // only for arguments that parse already refused
		r.log.Error("cannot campaign", "err", err)
	}
}

// lead is Run's work: it makes the term available to the handlers until
// the term ends (lost, resigned through /resign, or ctx ended).
func (r *replica) lead(ctx context.Context, t *election.Term) error {
	r.setTerm(t)
	defer r.setTerm(nil)
	<-ctx.Done()
	return nil
}

func (r *replica) setTerm(t *election.Term) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.term = t
}

// observe keeps the latest observation for /leader. Observe needs an
// Election, and an Election a session, so observe makes one of its own: it
// holds no key. Losing it (a quorum loss) does not stop Observe, which reads
// and watches through the client and whose channel closes only when ctx
// ends; it reports errors meanwhile and the leader again once etcd answers.
func (r *replica) observe(ctx context.Context, cli *clientv3.Client) {
	s := r.observerSession(ctx, cli)
	if s == nil {
		return // ctx ended
	}
	defer func() {
		cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), r.ttl)
		defer cancel()
		s.Close(cctx)
	}()
	e, err := election.New(s, r.name)
	if err != nil {
		r.log.Error("cannot observe", "err", err) // parse validated the name
		return
	}
	var last *election.Observation
	for o := range e.Observe(ctx) {
		r.mu.Lock()
		r.seen = &o
		r.mu.Unlock()
		r.logObservation(last, o)
		last = &o
	}
}

// observerSession makes the observer's session, retrying every second until
// it succeeds or ctx ends (nil then).
func (r *replica) observerSession(ctx context.Context, cli *clientv3.Client) *fencing.Session {
	for {
		sctx, cancel := context.WithTimeout(ctx, r.ttl)
		s, err := fencing.NewSession(sctx, cli, fencing.WithTTL(r.ttl))
		cancel()
		if err == nil {
			return s
		}
		if ctx.Err() != nil {
			return nil
		}
		r.log.Warn("cannot observe the election; retrying", "err", err)
		r.mu.Lock()
		r.seen = &election.Observation{Err: err}
		r.mu.Unlock()
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(time.Second):
		}
	}
}

// logObservation logs a change of leader, and the first of a run of errors
// (the others at debug: Observe retries every few seconds).
func (r *replica) logObservation(last *election.Observation, o election.Observation) {
	switch {
	case o.Err != nil && last != nil && last.Err != nil:
		r.log.Debug("cannot tell who leads; retrying", "err", o.Err)
	case o.Err != nil:
		r.log.Warn("cannot tell who leads; retrying", "err", o.Err)
	case o.Leader == nil:
		r.log.Info("nobody leads")
	default:
		r.log.Info("leader", "value", o.Leader.Value, "token", o.Leader.Token)
	}
}

type leaderJSON struct {
	Value string `json:"value"`
	Token string `json:"token"`
	Self  bool   `json:"self"`
	// Candidates are the replicas run with --priority (or drained).
	Candidates []candidateJSON `json:"candidates,omitempty"`
}

type candidateJSON struct {
	ID        string `json:"id"`
	Priority  string `json:"priority"` // its levels, as in 1.5.0
	Drain     bool   `json:"drain,omitempty"`
	Preferred bool   `json:"preferred"`
}

func candidatesJSON(cs []election.Candidate) []candidateJSON {
	var out []candidateJSON
	for _, c := range cs {
		levels := make([]string, len(c.Priority))
		for i, l := range c.Priority {
			levels[i] = strconv.FormatInt(l, 10)
		}
		out = append(out, candidateJSON{ID: c.ID, Priority: strings.Join(levels, "."), Drain: c.Drain, Preferred: c.Preferred})
	}
	return out
}

func (r *replica) leader(w http.ResponseWriter, _ *http.Request) {
	r.mu.Lock()
	seen, term := r.seen, r.term
	r.mu.Unlock()
	switch {
	case seen == nil:
		http.Error(w, "no observation yet", http.StatusServiceUnavailable)
	case seen.Err != nil:
		http.Error(w, "cannot tell who leads: "+seen.Err.Error(), http.StatusServiceUnavailable)
	case seen.Leader == nil:
		http.Error(w, "nobody leads", http.StatusServiceUnavailable)
	default:
		self := term != nil && term.Token() == seen.Leader.Token
		json.NewEncoder(w).Encode(leaderJSON{Value: seen.Leader.Value, Token: seen.Leader.Token.String(), Self: self,
			Candidates: candidatesJSON(seen.Candidates)})
	}
}

func (r *replica) current(w http.ResponseWriter) *election.Term {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.term == nil {
		http.Error(w, "not the leader", http.StatusConflict)
	}
	return r.term
}

// resign ends this replica's term; Run sees the term end and campaigns
// again, at the back of the queue.
func (r *replica) resign(w http.ResponseWriter, req *http.Request) {
	if t := r.current(w); t != nil {
		ctx, cancel := context.WithTimeout(req.Context(), r.ttl)
		defer cancel()
		err := t.Resign(ctx)
		r.log.Info("resign requested", "token", t.Token(), "err", err)
		reply(w, err)
	}
}

// setDrain starts (on) or ends a drain: election.Run moves leadership off
// this replica while another replica that is not drained runs.
func (r *replica) setDrain(on bool) http.HandlerFunc {
	return func(w http.ResponseWriter, _ *http.Request) {
		r.drain.Set(on)
		r.log.Info("drain set", "draining", on)
		fmt.Fprintln(w, "ok")
	}
}

func (r *replica) proclaim(w http.ResponseWriter, req *http.Request) {
	if t := r.current(w); t != nil {
		ctx, cancel := context.WithTimeout(req.Context(), r.ttl)
		defer cancel()
		reply(w, t.Proclaim(ctx, req.URL.Query().Get("value")))
	}
}

func reply(w http.ResponseWriter, err error) {
	switch {
	case errors.Is(err, election.ErrNotLeader):
		http.Error(w, err.Error(), http.StatusConflict)
	case err != nil:
		http.Error(w, err.Error(), http.StatusServiceUnavailable)
	default:
		fmt.Fprintln(w, "ok")
	}
}

// healthz answers 503 while the replica cannot take part in the election,
// or acts as leader past its term (guard.Health), and 200 "ok" otherwise.
func (r *replica) healthz(w http.ResponseWriter, _ *http.Request) {
	w.Header().Set("Cache-Control", "no-store")
	err := r.standing.check(time.Now())
	if err == nil {
		err = r.health.Check()
	}
	if err != nil {
		http.Error(w, err.Error(), http.StatusServiceUnavailable)
		return
	}
	fmt.Fprintln(w, "ok")
}

// standing tells whether the replica can take part in the election: whether
// the session election.Run campaigns on (election.OnSession) can still vouch
// for its lease. Run makes a new session whenever the last one is lost: from
// the loss until the new one is granted, the replica cannot campaign. What
// it cannot see: a session that lives but whose campaigns fail (say, no
// permission on the election's keys); Run logs those.
type standing struct {
	mu      sync.Mutex
	current *fencing.Session // guarded by mu: Run's latest session; nil before the first
	grace   time.Time        // guarded by mu: until when a replica without a session is not late
}

// start gives a new replica grace to make its first session.
func (s *standing) start(grace time.Duration) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.grace = time.Now().Add(grace)
}

// session records the session Run campaigns on from now on.
func (s *standing) session(current *fencing.Session) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.current = current
}

func (s *standing) check(now time.Time) error {
	s.mu.Lock()
	current, grace := s.current, s.grace
	s.mu.Unlock()
	switch {
	case current == nil && now.Before(grace):
		return nil
	case current == nil:
		return fmt.Errorf("no session for %v: cannot campaign until etcd grants a lease (see the log)",
			now.Sub(grace).Round(time.Millisecond))
	case !now.Before(current.ValidUntil()):
		return fmt.Errorf("no live session for %v: cannot campaign until etcd renews a lease (see the log)",
			now.Sub(current.ValidUntil()).Round(time.Millisecond))
	case current.Err() != nil:
		return fmt.Errorf("no live session: %v: cannot campaign until etcd grants a new lease (see the log)", current.Err())
	}
	return nil
}
