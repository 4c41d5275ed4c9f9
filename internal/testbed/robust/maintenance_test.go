package robust_test

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/leasehold/leasehold/election"
	"github.com/leasehold/leasehold/fencing"
	"github.com/leasehold/leasehold/fencing/fencingtest"
	"github.com/leasehold/leasehold/guard"
	"github.com/leasehold/leasehold/internal/testbed/etcdtest"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/client/v3/concurrency"
)

// The maintenance scenario: routine etcd operations, not failures. Every
// member is restarted in turn, leadership is moved, and the raft leader's
// member is replaced by an empty one, while 5 workers lock and make guarded
// increments and 3 replicas run an election. What callers see is counted
// by operation and error; the target for leasehold is no error at all
// except the caller's own deadlines, and guarded increments that commit, say
// their outcome is unknown, or are refused with nothing applied: the
// counter's history checks each.
//
// Short by default (one round of restarts, 4 transfers); with
// LEASEHOLD_MAINTENANCE_LONG=1, two rounds and 20 transfers.
func TestMaintenance(t *testing.T) {
	etcdtest.Long(t)
	for _, impl := range []string{"leasehold", "concurrency"} {
		t.Run(impl, func(t *testing.T) {
			m := runMaintenance(t, impl)
			m.report(t)
			if impl != "leasehold" {
				return // the baseline is reported, not judged
			}
			for kind, n := range m.errs {
				t.Errorf("%d× %s", n, kind)
			}
			for _, v := range m.violations[:min(len(m.violations), 10)] {
				t.Errorf("violation: %s", v)
			}
			if len(m.keysLeft) != 0 {
				t.Errorf("keys left: %q", m.keysLeft)
			}
		})
	}
}

const (
	maintTTL     = 10 * time.Second
	maintLock    = "maint/lock"
	maintCounter = "maint-data/counter"
	maintRun     = "maint/run"
	maintElect   = "maint/election"
)

// maintenance is what one run saw.
type maintenance struct {
	impl string

	mu           sync.Mutex
	errs         map[string]int  // "op: error" → count; none of them the caller's own ctx
	ownCtx       int             // calls that ended with the caller's own deadline
	increments   int             // guarded increments acknowledged
	ids          int             // the last increment's id
	acked        map[string]bool // ids of acknowledged increments
	unknown      map[string]bool // ids of increments whose outcome was unknown
	refusedIDs   map[string]bool // ids of increments etcd refused: nothing applied
	refused      map[string]int  // guarded increments refused by etcd, by error
	acquired     int
	terms        int
	runWarnings  int
	releaseStart time.Time     // a holder began to Unlock; zero once the next owner took over
	longestGap   time.Duration // from an Unlock's start to the next owner
	faults       []string

	counter       int      // the counter's final value
	puts          int      // increments in the counter's history
	unknownLanded int      // unknown-outcome increments found in the history
	violations    []string // lost updates, acknowledged writes missing, refused ones applied
	keysLeft      []string
}

func runMaintenance(t *testing.T, impl string) *maintenance {
	c := fencingtest.Three(t)
	m := &maintenance{impl: impl, errs: map[string]int{}, refused: map[string]int{},
		acked: map[string]bool{}, unknown: map[string]bool{}, refusedIDs: map[string]bool{}}
	t.Cleanup(func() {
		if t.Failed() { // what the queue looked like when the test gave up
			logKeys(t, c)
		}
	})
	ctx, stop := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	for i := range 5 {
		cli := c.Client(t)
		wg.Go(func() { m.worker(ctx, cli, fmt.Sprint("w", i)) })
	}
	for i := range 3 {
		cli := c.Client(t)
		wg.Go(func() { m.replica(ctx, cli, fmt.Sprint("r", i)) })
	}
	cli := c.Client(t)
	wg.Go(func() { m.candidate(ctx, cli) })
	m.drive(t, c)
	stop()
	wg.Wait()
	m.settle(t, c)
	return m
}

// drive runs the maintenance: rounds of rolling restarts with leader
// transfers in between, and one member replaced halfway, letting the
// workload make progress after each step.
func (m *maintenance) drive(t *testing.T, c *fencingtest.Cluster) {
	rounds, transfers := 1, 4
	if os.Getenv("LEASEHOLD_MAINTENANCE_LONG") != "" {
		rounds, transfers = 2, 20
	}
	m.progress(t, "the workload to start")
	steps := rounds * len(c.Members)
	moved := 0
	for step := range steps {
		i := step % len(c.Members)
		c.Stop(i)
		m.progress(t, "progress with "+c.Members[i].Name+" down")
		c.Restart(t, i)
		m.fault(fmt.Sprint("restart ", c.Members[i].Name))
		m.progress(t, "progress after a restart")
		for ; moved < transfers*(step+1)/steps; moved++ {
			from, to := c.MoveLeader(t)
			m.fault(fmt.Sprintf("move leader %s → %s", c.Members[from].Name, c.Members[to].Name))
			m.progress(t, "progress after a leader transfer")
		}
		if step == steps/2 {
			// The raft leader's member: the followers forward writes to it
			// until they learn of its removal (#29's finding).
			r := c.WaitLeader(t)
			c.ReplaceMember(t, r)
			m.fault("replace the leader " + c.Members[r].Name + " with an empty member")
			m.progress(t, "progress after a member replacement")
		}
	}
}

// progress waits until the workers have made a few more increments.
func (m *maintenance) progress(t *testing.T, what string) {
	t.Helper()
	m.mu.Lock()
	want := m.increments + 5
	m.mu.Unlock()
	fencingtest.WaitFor(t, time.Minute, what, func() bool {
		m.mu.Lock()
		defer m.mu.Unlock()
		return m.increments >= want
	})
}

func (m *maintenance) fault(what string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.faults = append(m.faults, what)
}

// fail counts err from op, unless the test is over or err is the caller's
// own deadline (opCtx ended).
func (m *maintenance) fail(ctx, opCtx context.Context, op string, err error) {
	if err == nil || ctx.Err() != nil {
		return
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if opCtx.Err() != nil && errors.Is(err, opCtx.Err()) {
		m.ownCtx++
		return
	}
	m.errs[op+": "+normalize(err)]++
}

// normalize drops what differs between two errors of one kind: tokens,
// revisions, leases, keys.
func normalize(err error) string {
	return digits.ReplaceAllString(err.Error(), "N")
}

var digits = regexp.MustCompile(`[0-9a-f]{6,}|[0-9]+`)

// acquiredNow records a new owner, and the time since the last Unlock began.
func (m *maintenance) acquiredNow() {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.acquired++
	if !m.releaseStart.IsZero() {
		m.longestGap = max(m.longestGap, time.Since(m.releaseStart))
		m.releaseStart = time.Time{}
	}
}

func (m *maintenance) releasing() {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.releaseStart = time.Now()
}

// worker locks, increments the counter once under the lock, and unlocks,
// again and again (leasehold tries TryLock first every fourth round), on a
// new session whenever the last one ended.
func (m *maintenance) worker(ctx context.Context, cli *clientv3.Client, name string) {
	for ctx.Err() == nil {
		switch m.impl {
		case "leasehold":
			m.leaseholdWorker(ctx, cli, name)
		default:
			m.concurrencyWorker(ctx, cli)
		}
	}
}

func (m *maintenance) leaseholdWorker(ctx context.Context, cli *clientv3.Client, name string) {
	sctx, cancel := context.WithTimeout(ctx, maintTTL)
	s, err := fencing.NewSession(sctx, cli, fencing.WithTTL(maintTTL), fencing.WithIdentity(name))
	m.fail(ctx, sctx, "NewSession", err)
	cancel()
	if err != nil {
		return
	}
	defer s.Close(context.Background())
	mu, _ := fencing.NewMutex(s, maintLock)
	for round := 0; ctx.Err() == nil; round++ {
		if err := s.Err(); err != nil {
			m.fail(ctx, ctx, "session", err)
			return
		}
		h := m.lock(ctx, mu, round%4 == 0)
		if h == nil {
			continue
		}
		m.acquiredNow()
		m.increment(ctx, cli, func(c context.Context, v string) error {
			_, err := guard.Put(c, h, maintCounter, v)
			return err
		})
		m.releasing()
		uctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		err := h.Unlock(uctx)
		cancel()
		if err != nil {
			// As Unlock's doc says: the key may remain, owning the lock;
			// closing the session (deferred) releases it.
			m.fail(ctx, uctx, "Unlock", err)
			return
		}
	}
}

// lock takes the lock, by TryLock when try is set and the lock is free.
func (m *maintenance) lock(ctx context.Context, mu *fencing.Mutex, try bool) *fencing.Hold {
	if try {
		tctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		h, err := mu.TryLock(tctx)
		cancel()
		if err == nil {
			return h
		}
		if !errors.Is(err, fencing.ErrLocked) {
			m.fail(ctx, tctx, "TryLock", err)
		}
	}
	lctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	h, err := mu.Lock(lctx)
	m.fail(ctx, lctx, "Lock", err)
	return h
}

func (m *maintenance) concurrencyWorker(ctx context.Context, cli *clientv3.Client) {
	s, err := concurrency.NewSession(cli, concurrency.WithTTL(int(maintTTL/time.Second)), concurrency.WithContext(ctx))
	m.fail(ctx, ctx, "NewSession", err)
	if err != nil {
		return
	}
	defer s.Close()
	mu := concurrency.NewMutex(s, "concurrency/"+maintLock+"/")
	for ctx.Err() == nil {
		select {
		case <-s.Done():
			m.fail(ctx, ctx, "session", errors.New("session done"))
			return
		default:
		}
		lctx, cancel := context.WithTimeout(ctx, time.Minute)
		err := mu.Lock(lctx)
		m.fail(ctx, lctx, "Lock", err)
		cancel()
		if err != nil {
			continue
		}
		m.acquiredNow()
		m.increment(ctx, cli, func(c context.Context, v string) error {
			resp, err := cli.Txn(c).If(mu.IsOwner()).Then(clientv3.OpPut(maintCounter, v)).Commit()
			if err == nil && !resp.Succeeded {
				err = guard.ErrNotOwner
			}
			return err
		})
		m.releasing()
		uctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		m.fail(ctx, uctx, "Unlock", mu.Unlock(uctx))
		cancel()
	}
}

// increment reads the counter and writes it plus one with write, under the
// lock, tagged with an id of its own: the counter's history says, at the
// end, which increments landed, whatever their callers were told.
func (m *maintenance) increment(ctx context.Context, cli *clientv3.Client, write func(context.Context, string) error) {
	n, ok := m.read(ctx, cli)
	if !ok {
		return
	}
	m.mu.Lock()
	m.ids++
	id := fmt.Sprint("i", m.ids)
	m.mu.Unlock()
	wctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	err := write(wctx, fmt.Sprint(n+1, " ", id))
	cancel()
	if err != nil && (errors.Is(err, guard.ErrNotOwner) || m.impl != "leasehold") {
		m.fail(ctx, wctx, "guarded put", err)
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	switch {
	case err == nil:
		m.increments++
		m.acked[id] = true
	case errors.Is(err, guard.ErrOutcomeUnknown):
		m.unknown[id] = true // it may land, even later: the history tells
	case errors.Is(err, guard.ErrNotOwner) || m.impl != "leasehold" || ctx.Err() != nil:
		// counted by fail above, or the run is over
	default:
		// A definite failure: nothing may be applied.
		m.refusedIDs[id] = true
		m.refused[normalize(err)]++
	}
}

// read returns the counter, retrying a failed read: the worker's own
// reads are not the library's.
func (m *maintenance) read(ctx context.Context, cli *clientv3.Client) (int, bool) {
	for ctx.Err() == nil {
		rctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		resp, err := cli.Get(rctx, maintCounter)
		cancel()
		if err != nil {
			continue
		}
		if len(resp.Kvs) == 0 {
			return 0, true
		}
		n, _, err := parseIncrement(resp.Kvs[0].Value)
		return n, err == nil
	}
	return 0, false
}

// parseIncrement splits a counter value, "n id".
func parseIncrement(v []byte) (int, string, error) {
	n, id, _ := strings.Cut(string(v), " ")
	i, err := strconv.Atoi(n)
	return i, id, err
}

// replica runs an election.Run (or, for the baseline, a Campaign loop)
// whose work proclaims once and then holds its term.
func (m *maintenance) replica(ctx context.Context, cli *clientv3.Client, name string) {
	if m.impl != "leasehold" {
		m.concurrencyCandidate(ctx, cli, maintRun, name)
		return
	}
	log := slog.New(countingHandler{m})
	work := func(wctx context.Context, t *election.Term) error {
		m.mu.Lock()
		m.terms++
		m.mu.Unlock()
		pctx, cancel := context.WithTimeout(wctx, 5*time.Second)
		m.fail(ctx, pctx, "Proclaim", t.Proclaim(pctx, name+"-leading"))
		cancel()
		<-wctx.Done()
		return nil
	}
	err := election.Run(ctx, cli, maintRun, name, work, election.AfterSuccess(election.Recampaign),
		election.WithSessionOptions(fencing.WithTTL(maintTTL), fencing.WithLogger(log)))
	m.fail(ctx, ctx, "Run", err)
}

// candidate campaigns, proclaims and resigns directly, again and again.
func (m *maintenance) candidate(ctx context.Context, cli *clientv3.Client) {
	if m.impl != "leasehold" {
		m.concurrencyCandidate(ctx, cli, maintElect, "c")
		return
	}
	s, err := fencing.NewSession(ctx, cli, fencing.WithTTL(maintTTL))
	m.fail(ctx, ctx, "NewSession", err)
	if err != nil {
		return
	}
	defer s.Close(context.Background())
	e, _ := election.New(s, maintElect)
	for ctx.Err() == nil && s.Err() == nil {
		cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		t, err := e.Campaign(cctx, "c")
		m.fail(ctx, cctx, "Campaign", err)
		if err == nil {
			m.fail(ctx, cctx, "Proclaim", t.Proclaim(cctx, "c2"))
			m.fail(ctx, cctx, "Resign", t.Resign(cctx))
		}
		cancel()
	}
	m.fail(ctx, ctx, "session", s.Err())
}

func (m *maintenance) concurrencyCandidate(ctx context.Context, cli *clientv3.Client, name, value string) {
	s, err := concurrency.NewSession(cli, concurrency.WithTTL(int(maintTTL/time.Second)), concurrency.WithContext(ctx))
	m.fail(ctx, ctx, "NewSession", err)
	if err != nil {
		return
	}
	defer s.Close()
	e := concurrency.NewElection(s, "concurrency/"+name+"/")
	for ctx.Err() == nil {
		cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		err := e.Campaign(cctx, value)
		m.fail(ctx, cctx, "Campaign", err)
		if err == nil {
			m.fail(ctx, cctx, "Proclaim", e.Proclaim(cctx, value+"2"))
			m.fail(ctx, cctx, "Resign", e.Resign(cctx))
		}
		cancel()
		select {
		case <-s.Done():
			m.fail(ctx, ctx, "session", errors.New("session done"))
			return
		default:
		}
	}
}

// settle checks the counter's history and lists the keys left, once
// everything stopped: every put must be the one before plus one (else an
// update was lost), every acknowledged increment must be there, no refused
// one may be.
func (m *maintenance) settle(t *testing.T, c *fencingtest.Cluster) {
	ctx := fencingtest.Context(t, time.Minute)
	now, err := c.Admin.Get(ctx, maintCounter)
	if err != nil {
		t.Fatal(err)
	}
	seen := map[string]bool{}
	var last int64 // the counter's last write: the history ends there
	if len(now.Kvs) > 0 {
		last = now.Kvs[0].ModRevision
	}
	wch := c.Admin.Watch(ctx, maintCounter, clientv3.WithRev(1))
	for resp := range wch {
		if last == 0 {
			break
		}
		if err := resp.Err(); err != nil {
			t.Fatalf("counter history: %v", err)
		}
		for _, ev := range resp.Events {
			n, id, err := parseIncrement(ev.Kv.Value)
			if err != nil || n != m.counter+1 {
				m.violations = append(m.violations, fmt.Sprintf("put %q at revision %d after %d: an update was lost", ev.Kv.Value, ev.Kv.ModRevision, m.counter))
			}
			m.counter, seen[id] = n, true
			m.puts++
		}
		if n := len(resp.Events); n > 0 && resp.Events[n-1].Kv.ModRevision >= last {
			break
		}
	}
	for id := range m.acked {
		if !seen[id] {
			m.violations = append(m.violations, "acknowledged increment "+id+" is not in the history")
		}
	}
	for id := range m.refusedIDs {
		if seen[id] {
			m.violations = append(m.violations, "refused increment "+id+" was applied")
		}
	}
	for id := range m.unknown {
		if seen[id] {
			m.unknownLanded++
		}
	}
	prefix := fencing.DefaultRoot
	if m.impl != "leasehold" {
		prefix = "concurrency/"
	}
	m.keysLeft = etcdtest.Keys(t, c, prefix)
}

func (m *maintenance) report(t *testing.T) {
	t.Logf("%s: faults: %q", m.impl, m.faults)
	t.Logf("%s: %d acquisitions, %d increments acknowledged, %d in the history (counter %d), %d with an unknown outcome (%d of them landed), %d violations, %d election terms",
		m.impl, m.acquired, m.increments, m.puts, m.counter, len(m.unknown), m.unknownLanded, len(m.violations), m.terms)
	for k, n := range m.refused {
		t.Logf("%s: guarded increment refused %d× (nothing applied): %s", m.impl, n, k)
	}
	t.Logf("%s: %d calls ended by the caller's own deadline; %d Run warnings logged; longest stretch from an Unlock's start to the next owner: %v; keys left: %d",
		m.impl, m.ownCtx, m.runWarnings, m.longestGap.Round(time.Millisecond), len(m.keysLeft))
	kinds := make([]string, 0, len(m.errs))
	for k := range m.errs {
		kinds = append(kinds, k)
	}
	slices.SortFunc(kinds, func(a, b string) int { return cmp.Or(cmp.Compare(m.errs[b], m.errs[a]), cmp.Compare(a, b)) })
	for _, k := range kinds {
		t.Logf("%s: error surfaced %d×: %s", m.impl, m.errs[k], k)
	}
}

// logKeys logs every key of the library, oldest first, with its lease's
// time left.
func logKeys(t *testing.T, c *fencingtest.Cluster) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	resp, err := c.Admin.Get(ctx, fencing.DefaultRoot, clientv3.WithPrefix(), clientv3.WithSort(clientv3.SortByCreateRevision, clientv3.SortAscend))
	if err != nil {
		t.Logf("keys: %v", err)
		return
	}
	t.Logf("keys at revision %d:", resp.Header.Revision)
	for _, kv := range resp.Kvs {
		t.Logf("  %s created %d, lease %x, value %q", kv.Key, kv.CreateRevision, kv.Lease, kv.Value)
	}
}

// countingHandler counts the warnings Run logs (a failed campaign it
// retries): they reach the log, not the caller.
type countingHandler struct{ m *maintenance }

func (h countingHandler) Enabled(_ context.Context, l slog.Level) bool { return l >= slog.LevelWarn }
func (h countingHandler) Handle(context.Context, slog.Record) error {
	h.m.mu.Lock()
	defer h.m.mu.Unlock()
	h.m.runWarnings++
	return nil
}
func (h countingHandler) WithAttrs([]slog.Attr) slog.Handler { return h }
func (h countingHandler) WithGroup(string) slog.Handler      { return h }
