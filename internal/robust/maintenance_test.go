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
	"sync"
	"testing"
	"time"

	"github.com/leasehold/leasehold/election"
	"github.com/leasehold/leasehold/fencing"
	"github.com/leasehold/leasehold/guard"
	"github.com/leasehold/leasehold/internal/etcdtest"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/client/v3/concurrency"
)

// The maintenance scenario: routine etcd operations, not failures. Every
// member is restarted in turn, leadership is moved, and one member is
// replaced by an empty one, while 5 workers lock and make guarded
// increments and 3 replicas run an election. What callers see is counted
// by operation and error; the target for leasehold is no error at all
// except the caller's own deadlines, and guarded increments that either
// commit or say their outcome is unknown (each then settled by a re-read).
//
// Short by default (one round of restarts, 4 transfers); with
// LEASEHOLD_MAINTENANCE_LONG=1, two rounds and 20 transfers.
func TestMaintenance(t *testing.T) {
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
			if m.counter != m.increments {
				t.Errorf("violation: counter %d, increments committed %d", m.counter, m.increments)
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
	errs         map[string]int // "op: error" → count; none of them the caller's own ctx
	ownCtx       int            // calls that ended with the caller's own deadline
	increments   int            // guarded increments known committed
	unknown      int            // increments whose outcome was unknown (then settled)
	refused      map[string]int // guarded increments refused by etcd, nothing applied, by error
	acquired     int
	terms        int
	runWarnings  int
	releaseStart time.Time     // a holder began to Unlock; zero once the next owner took over
	longestGap   time.Duration // from an Unlock's start to the next owner
	faults       []string

	counter  int
	keysLeft []string
}

func runMaintenance(t *testing.T, impl string) *maintenance {
	c := etcdtest.Three(t)
	m := &maintenance{impl: impl, errs: map[string]int{}, refused: map[string]int{}}
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
func (m *maintenance) drive(t *testing.T, c *etcdtest.Cluster) {
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
			r := (i + 1) % len(c.Members)
			c.ReplaceMember(t, r)
			m.fault("replace " + c.Members[r].Name + " with an empty member")
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
	etcdtest.WaitFor(t, time.Minute, what, func() bool {
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
// lock. An outcome said to be unknown is settled by reading again, as the
// guard documentation asks.
func (m *maintenance) increment(ctx context.Context, cli *clientv3.Client, write func(context.Context, string) error) {
	n, ok := m.read(ctx, cli)
	if !ok {
		return
	}
	wctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	err := write(wctx, strconv.Itoa(n+1))
	cancel()
	switch {
	case err == nil:
		m.mu.Lock()
		m.increments++
		m.mu.Unlock()
	case errors.Is(err, guard.ErrOutcomeUnknown):
		after, ok := m.read(ctx, cli)
		m.mu.Lock()
		m.unknown++
		if ok && after == n+1 {
			m.increments++
		}
		m.mu.Unlock()
	case errors.Is(err, guard.ErrNotOwner) || m.impl != "leasehold":
		m.fail(ctx, wctx, "guarded put", err)
	case ctx.Err() != nil: // the run is over
	default:
		// A definite failure: nothing applied, the counter unchanged.
		m.mu.Lock()
		m.refused[normalize(err)]++
		m.mu.Unlock()
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
		n, err := strconv.Atoi(string(resp.Kvs[0].Value))
		return n, err == nil
	}
	return 0, false
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
	err := election.Run(ctx, cli, maintRun, name, work, election.OnSuccess(election.Recampaign),
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

// settle reads the counter and the keys left once everything stopped.
func (m *maintenance) settle(t *testing.T, c *etcdtest.Cluster) {
	ctx := etcdtest.Context(t, time.Minute)
	resp, err := c.Admin.Get(ctx, maintCounter)
	if err != nil {
		t.Fatal(err)
	}
	if len(resp.Kvs) > 0 {
		m.counter, _ = strconv.Atoi(string(resp.Kvs[0].Value))
	}
	prefix := fencing.DefaultRoot
	if m.impl != "leasehold" {
		prefix = "concurrency/"
	}
	m.keysLeft = c.Keys(t, prefix)
}

func (m *maintenance) report(t *testing.T) {
	t.Logf("%s: faults: %q", m.impl, m.faults)
	t.Logf("%s: %d acquisitions, %d increments committed (counter %d), %d with an unknown outcome (settled by a re-read), %d election terms",
		m.impl, m.acquired, m.increments, m.counter, m.unknown, m.terms)
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
func logKeys(t *testing.T, c *etcdtest.Cluster) {
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
