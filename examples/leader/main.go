// Command leader is an HTTP service whose replicas elect one leader.
//
//	go run ./examples/leader --endpoints 127.0.0.1:2379 --listen 127.0.0.1:8081
//	go run ./examples/leader --endpoints 127.0.0.1:2379 --listen 127.0.0.1:8082
//
// Every replica campaigns with its own address. GET /leader answers, from
// Observe, who leads now (503 when nobody does). POST /resign makes this
// replica step down if it leads (409 otherwise); it then campaigns again, at
// the back of the queue. POST /proclaim?value=V changes the value the leader
// advertises (409 if this replica does not lead). GET /metrics serves the
// replica's Prometheus metrics (see metrics.go): leasehold_owner is 1 while it
// leads, as far as it knows. GET /healthz is a liveness probe (guard.Health):
// 503 while the replica still acts as leader past its term's ValidUntil.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"net/http"
	"os"
	"os/signal"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/leasehold/leasehold/election"
	"github.com/leasehold/leasehold/fencing"
	"github.com/leasehold/leasehold/guard"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
)

func main() {
	endpoints := flag.String("endpoints", "127.0.0.1:2379", "comma-separated etcd endpoints")
	listen := flag.String("listen", "127.0.0.1:8081", "address to serve HTTP on; also this replica's campaign value")
	flag.Parse()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := serve(ctx, *endpoints, *listen); err != nil {
		fmt.Fprintln(os.Stderr, "leader:", err)
		os.Exit(1)
	}
}

func serve(ctx context.Context, endpoints, listen string) error {
	cli, err := clientv3.New(clientv3.Config{Endpoints: strings.Split(endpoints, ","), DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		return err
	}
	defer cli.Close()
	reg := prometheus.NewRegistry()
	m := newMetrics(reg)
	s, err := fencing.NewSession(ctx, cli, fencing.WithObserver(m.observer()))
	if err != nil {
		return err
	}
	defer s.Close(context.WithoutCancel(ctx))
	r, err := newReplica(ctx, s, "leader-example", listen)
	if err != nil {
		return err
	}
	defer r.wait()
	srv := &http.Server{Addr: listen, Handler: withMetrics(r, reg)}
	go func() {
		<-ctx.Done()
		srv.Close()
	}()
	if err := srv.ListenAndServe(); !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}

// withMetrics serves GET /metrics from g, and every other request from h.
func withMetrics(h http.Handler, g prometheus.Gatherer) http.Handler {
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", promhttp.HandlerFor(g, promhttp.HandlerOpts{}))
	mux.Handle("/", h)
	return mux
}

// replica campaigns in the background, follows the election with Observe,
// and serves both over HTTP.
type replica struct {
	e     *election.Election
	value string
	mux   *http.ServeMux
	wg    sync.WaitGroup

	mu   sync.Mutex
	term *election.Term        // guarded by mu: nil unless this replica leads
	seen *election.Observation // guarded by mu: the latest observation

	health guard.Health // fails while this replica acts on a term past its ValidUntil
}

func newReplica(ctx context.Context, s *fencing.Session, name, value string) (*replica, error) {
	e, err := election.New(s, name)
	if err != nil {
		return nil, err
	}
	r := &replica{e: e, value: value, mux: http.NewServeMux()}
	r.mux.HandleFunc("GET /leader", r.leader)
	r.mux.HandleFunc("POST /resign", r.resign)
	r.mux.HandleFunc("POST /proclaim", r.proclaim)
	r.mux.Handle("GET /healthz", &r.health)
	r.wg.Go(func() { r.campaign(ctx) })
	r.wg.Go(func() { r.observe(ctx) })
	return r, nil
}

// wait returns once the background goroutines ended with their ctx.
func (r *replica) wait() { r.wg.Wait() }

func (r *replica) ServeHTTP(w http.ResponseWriter, req *http.Request) { r.mux.ServeHTTP(w, req) }

// campaign leads whenever it can: after a lost or resigned term it queues
// again.
func (r *replica) campaign(ctx context.Context) {
	for ctx.Err() == nil {
		t, err := r.e.Campaign(ctx, r.value)
		if err != nil {
			return // the session ended, or ctx: this example stops campaigning
		}
		untrack := r.health.Track(t.Context(), t)
		r.mu.Lock()
		r.term = t
		r.mu.Unlock()
		select {
		case <-t.Context().Done():
		case <-ctx.Done():
			t.Resign(context.WithoutCancel(ctx))
		}
		r.mu.Lock()
		r.term = nil
		r.mu.Unlock()
		untrack()
	}
}

func (r *replica) observe(ctx context.Context) {
	for o := range r.e.Observe(ctx) {
		r.mu.Lock()
		r.seen = &o
		r.mu.Unlock()
	}
}

type leaderJSON struct {
	Value string `json:"value"`
	Token string `json:"token"`
	Self  bool   `json:"self"`
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
		json.NewEncoder(w).Encode(leaderJSON{Value: seen.Leader.Value, Token: seen.Leader.Token.String(), Self: self})
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

func (r *replica) resign(w http.ResponseWriter, req *http.Request) {
	if t := r.current(w); t != nil {
		reply(w, t.Resign(req.Context()))
	}
}

func (r *replica) proclaim(w http.ResponseWriter, req *http.Request) {
	if t := r.current(w); t != nil {
		reply(w, t.Proclaim(req.Context(), req.URL.Query().Get("value")))
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
