package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"maps"
	"net/http"
	"net/http/httptest"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/leasehold/leasehold/election"
	"github.com/leasehold/leasehold/fencing"
	"github.com/leasehold/leasehold/fencing/fencingtest"
	"github.com/leasehold/leasehold/guard"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
)

// scrape returns every sample GET /metrics serves, keyed by its series as the
// text format writes it (labels sorted by name), as in
// `leasehold_owner{kind="election",name="x"}`.
func scrape(t *testing.T, base string) map[string]float64 {
	t.Helper()
	resp, err := httpClient.Get(base + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("GET /metrics: %d", resp.StatusCode)
	}
	samples := map[string]float64{}
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		line := sc.Text()
		if line == "" || line[0] == '#' {
			continue
		}
		i := strings.LastIndexByte(line, ' ')
		v, err := strconv.ParseFloat(line[i+1:], 64)
		if err != nil {
			t.Fatalf("GET /metrics: line %q: %v", line, err)
		}
		samples[line[:i]] = v
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return samples
}

// A replica's terms show on its /metrics as they happen: won, resigned and
// won again, lost to an operator's delete and won again. The gauge reads 1
// after each new win, whatever happened to the term before.
func TestMetrics(t *testing.T) {
	const name = "metrics-test"
	c := fencingtest.Single(t)
	reg := prometheus.NewRegistry()
	m := newMetrics(reg)
	r, _ := startReplica(t, c.Client(t), name, "a", m.observer())
	srv := httptest.NewServer(withMetrics(r, reg))
	t.Cleanup(srv.Close)

	series := func(metric, labels string) string {
		return fmt.Sprintf("%s{%skind=%q,name=%q}", metric, labels, "election", name)
	}
	owner := series("leasehold_owner", "")
	acquired := series("leasehold_transitions_total", `event="acquired",`)
	released := series("leasehold_transitions_total", `event="released",`)
	lost := series("leasehold_transitions_total", `event="lost",`)
	keyGone := series("leasehold_losses_total", `cause="key_gone",`)
	waits := series("leasehold_acquire_wait_seconds_count", "")
	holds := series("leasehold_hold_seconds_count", "")
	early := `leasehold_loss_early_seconds_count{kind="election"}`

	// want waits until /metrics serves every sample in w (a missing sample
	// reads 0); if it gives up, it logs the samples that differed last.
	want := func(what string, w map[string]float64) {
		t.Helper()
		var diff []string
		defer func() {
			if t.Failed() {
				t.Logf("last scrape: %s", strings.Join(diff, "; "))
			}
		}()
		fencingtest.WaitFor(t, 30*time.Second, what, func() bool {
			got := scrape(t, srv.URL)
			diff = diff[:0]
			for _, k := range slices.Sorted(maps.Keys(w)) {
				if got[k] != w[k] {
					diff = append(diff, fmt.Sprintf("%s = %v, want %v", k, got[k], w[k]))
				}
			}
			return len(diff) == 0
		})
	}

	want("the first win", map[string]float64{owner: 1, acquired: 1, waits: 1, released: 0, lost: 0})

	// The win is reported inside Campaign, before the replica stores the
	// term: until then /resign says "not the leader".
	stored := func() *election.Term {
		var term *election.Term
		fencingtest.WaitFor(t, 30*time.Second, "the replica to store its term", func() bool {
			r.mu.Lock()
			defer r.mu.Unlock()
			term = r.term
			return term != nil
		})
		return term
	}
	stored()
	if code := post(t, srv.URL, "/resign"); code != http.StatusOK {
		t.Fatalf("resign: %d", code)
	}
	// Alone in the election, the replica campaigns again and wins again.
	want("the resign and the next win", map[string]float64{owner: 1, acquired: 2, released: 1, holds: 1, lost: 0})

	c.Delete(t, stored().Key())
	want("the loss and the next win", map[string]float64{owner: 1, acquired: 3, released: 1, lost: 1,
		keyGone: 1, holds: 2, early: 1})
}

// The owner gauge counts live ownerships: an older term's loss noticed after
// a newer term was won leaves the name owned.
func TestMetricsOverlappingOwnerships(t *testing.T) {
	m := newMetrics(prometheus.NewRegistry())
	o := m.observer()
	old := fencing.Token{Name: "jobs", Revision: 10}
	cur := fencing.Token{Name: "jobs", Revision: 20}
	owner := m.owner.WithLabelValues("election", "jobs")

	o.OnAcquire(fencing.AcquireEvent{Kind: fencing.KindElection, Token: old})
	o.OnAcquire(fencing.AcquireEvent{Kind: fencing.KindElection, Token: cur})
	o.OnLoss(fencing.LossEvent{Kind: fencing.KindElection, Token: old, Held: time.Second,
		Cause: fmt.Errorf("session: %w", fencing.ErrLeaseUnconfirmed), Early: -time.Millisecond})
	if got := testutil.ToFloat64(owner); got != 1 {
		t.Fatalf("owner after the older term's loss = %v; want 1", got)
	}
	if got := testutil.ToFloat64(m.losses.WithLabelValues("election", "jobs", "lease_unconfirmed")); got != 1 {
		t.Fatalf("lease_unconfirmed losses = %v; want 1", got)
	}
	o.OnRelease(fencing.ReleaseEvent{Kind: fencing.KindElection, Token: cur, Held: time.Second})
	if got := testutil.ToFloat64(owner); got != 0 {
		t.Fatalf("owner after the newer term's release = %v; want 0", got)
	}

	o.OnRenew(fencing.RenewEvent{RoundTrip: time.Millisecond, Left: 8 * time.Second})
	o.OnRenew(fencing.RenewEvent{RoundTrip: time.Second, Left: 3 * time.Second, Err: errors.New("timeout")})
	if got := testutil.ToFloat64(m.margin); got != 3 {
		t.Fatalf("renewal margin = %v; want 3 (the last attempt's)", got)
	}
	if got := testutil.ToFloat64(m.renewFails); got != 1 {
		t.Fatalf("renewal failures = %v; want 1", got)
	}

	o.OnReject(fencing.RejectEvent{Token: old, Cause: fmt.Errorf("txn: %w", guard.ErrNotOwner)})
	if got := testutil.ToFloat64(m.rejections.WithLabelValues("jobs", "not_owner")); got != 1 {
		t.Fatalf("not_owner rejections = %v; want 1", got)
	}
}

func TestCauseLabel(t *testing.T) {
	for _, tc := range []struct {
		err  error
		want string
	}{
		{fmt.Errorf("session: %w", fencing.ErrLeaseExpired), "lease_expired"},
		{fmt.Errorf("session: %w", fencing.ErrLeaseUnconfirmed), "lease_unconfirmed"},
		{fmt.Errorf("session: %w", fencing.ErrSessionClosed), "session_closed"},
		{fmt.Errorf("watch: %w", fencing.ErrKeyDeleted), "key_gone"},
		// A key deleted with its lease: the lease is the cause.
		{fmt.Errorf("%w: lease 1: %w", fencing.ErrLeaseExpired, fencing.ErrKeyDeleted), "lease_expired"},
		{context.Canceled, "other"},
		{nil, "other"},
	} {
		if got := causeLabel(tc.err); got != tc.want {
			t.Errorf("causeLabel(%v) = %q; want %q", tc.err, got, tc.want)
		}
	}
}

func TestRejectLabel(t *testing.T) {
	for _, tc := range []struct {
		err  error
		want string
	}{
		{fmt.Errorf("election: proclaim: %w: %w", election.ErrNotLeader, guard.ErrNotOwner), "not_owner"},
		{fmt.Errorf("gate: %w", fencing.ErrStaleToken), "stale_token"},
		{errors.New("unavailable"), "other"},
	} {
		if got := rejectLabel(tc.err); got != tc.want {
			t.Errorf("rejectLabel(%v) = %q; want %q", tc.err, got, tc.want)
		}
	}
}
