package fencing_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/leasehold/leasehold/fencing"
	"github.com/leasehold/leasehold/fencing/fencingtest"
	"github.com/leasehold/leasehold/fencing/inspect"
	"github.com/leasehold/leasehold/internal/testbed/etcdtest"
)

func newRWMutex(t testing.TB, s *fencing.Session, name string) *fencing.RWMutex {
	t.Helper()
	m, err := fencing.NewRWMutex(s, name)
	if err != nil {
		t.Fatalf("NewRWMutex(%q): %v", name, err)
	}
	return m
}

func rwKeys(t testing.TB, c *fencingtest.Cluster, name string) []string {
	t.Helper()
	p, err := inspect.KeyPrefix(fencing.DefaultRoot, fencing.KindRWLock, name)
	if err != nil {
		t.Fatal(err)
	}
	return etcdtest.Keys(t, c, p)
}

func goLock(ctx context.Context, lock func(context.Context) (*fencing.Hold, error)) <-chan result {
	ch := make(chan result, 1)
	go func() {
		h, err := lock(ctx)
		ch <- result{h, err}
	}()
	return ch
}

// Readers share; a queued writer holds back the readers that come after it
// (no writer starves); readers queued together enter together once the
// writer leaves; tokens follow the rules of the type's doc.
func TestRWMutexFairness(t *testing.T) {
	c := fencingtest.Single(t)
	cli := c.Client(t)
	m := newRWMutex(t, newSession(t, cli), "table")
	ctx := fencingtest.Context(t, wait)
	queued := func(n int) {
		t.Helper()
		fencingtest.WaitFor(t, wait, fmt.Sprintf("%d keys queued", n), func() bool { return len(rwKeys(t, c, "table")) == n })
	}
	r1, err := m.RLock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	r2, err := m.RLock(ctx)
	if err != nil {
		t.Fatalf("a second reader: %v", err)
	}
	writer := goLock(ctx, newRWMutex(t, newSession(t, cli), "table").Lock)
	queued(3)
	late := []<-chan result{goLock(ctx, m.RLock)}
	queued(4)
	late = append(late, goLock(ctx, newRWMutex(t, newSession(t, cli), "table").RLock))
	queued(5)
	pending(t, writer, "the writer")
	for i, l := range late {
		pending(t, l, fmt.Sprintf("late reader %d", i))
	}
	if _, err := m.TryRLock(ctx); !errors.Is(err, fencing.ErrLocked) {
		t.Errorf("TryRLock behind a queued writer: %v; want ErrLocked", err)
	}
	if _, err := m.TryLock(ctx); !errors.Is(err, fencing.ErrLocked) {
		t.Errorf("TryLock with readers in: %v; want ErrLocked", err)
	}
	for _, r := range []*fencing.Hold{r1, r2} {
		if err := r.Unlock(ctx); err != nil {
			t.Fatal(err)
		}
	}
	w := received(t, writer, "the writer")
	for i, l := range late {
		pending(t, l, fmt.Sprintf("late reader %d", i))
	}
	for _, r := range []*fencing.Hold{r1, r2} {
		if w.Token().Compare(r.Token()) <= 0 {
			t.Errorf("write token %v not above earlier read token %v", w.Token(), r.Token())
		}
	}
	if err := w.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	for i, l := range late {
		r := received(t, l, fmt.Sprintf("late reader %d", i))
		if r.Token().Compare(w.Token()) <= 0 {
			t.Errorf("read token %v not above earlier write token %v", r.Token(), w.Token())
		}
		defer r.Unlock(ctx)
	}
}

// TryLock and TryRLock on a free lock take it in one request; a writer
// excludes everyone, readers exclude writers.
func TestRWMutexTry(t *testing.T) {
	c := fencingtest.Single(t)
	var ctr etcdtest.Counter
	m := newRWMutex(t, newSession(t, c.Client(t, etcdtest.WithCounter(&ctr))), "try-rw")
	ctx := fencingtest.Context(t, wait)
	ctr.Reset()
	w, err := m.TryLock(ctx)
	if err != nil {
		t.Fatalf("TryLock on a free lock: %v", err)
	}
	if got := ctr.Requests("Txn"); got != 1 {
		t.Errorf("TryLock sent %d txns; want 1", got)
	}
	if _, err := m.TryRLock(ctx); !errors.Is(err, fencing.ErrLocked) {
		t.Errorf("TryRLock under a writer: %v; want ErrLocked", err)
	}
	if err := w.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	ctr.Reset()
	r, err := m.TryRLock(ctx)
	if err != nil {
		t.Fatalf("TryRLock on a free lock: %v", err)
	}
	if got := ctr.Requests("Txn"); got != 1 {
		t.Errorf("TryRLock sent %d txns; want 1", got)
	}
	r2, err := m.TryRLock(ctx)
	if err != nil {
		t.Fatalf("TryRLock beside a reader: %v", err)
	}
	if _, err := m.TryLock(ctx); !errors.Is(err, fencing.ErrLocked) {
		t.Errorf("TryLock with readers in: %v; want ErrLocked", err)
	}
	for _, h := range []*fencing.Hold{r, r2} {
		if err := h.Unlock(ctx); err != nil {
			t.Fatal(err)
		}
	}
	if keys := rwKeys(t, c, "try-rw"); len(keys) != 0 {
		t.Fatalf("keys left: %v", keys)
	}
}

// Bad input gets a sentinel, writes nothing and never panics.
func TestRWMutexBadInput(t *testing.T) {
	c := fencingtest.Single(t)
	s := newSession(t, c.Client(t))
	var nilCtx context.Context
	ctx := fencingtest.Context(t, wait)
	m := newRWMutex(t, s, "bad-rw")
	for name, call := range map[string]func() error{
		"nil session":   func() error { _, err := fencing.NewRWMutex(nil, "x"); return err },
		"nil ctx Lock":  func() error { _, err := m.Lock(nilCtx); return err },
		"nil ctx RLock": func() error { _, err := m.RLock(nilCtx); return err },
		"nil ctx Try":   func() error { _, err := m.TryLock(nilCtx); return err },
		"nil ctx TryR":  func() error { _, err := m.TryRLock(nilCtx); return err },
		"zero value":    func() error { _, err := new(fencing.RWMutex).RLock(ctx); return err },
	} {
		if err := call(); !errors.Is(err, fencing.ErrInvalidArgument) {
			t.Errorf("%s: %v; want ErrInvalidArgument", name, err)
		}
	}
	if _, err := fencing.NewRWMutex(s, "a#b"); !errors.Is(err, fencing.ErrInvalidName) {
		t.Errorf("invalid name: %v; want ErrInvalidName", err)
	}
	r, err := m.RLock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := r.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	if err := r.Unlock(ctx); !errors.Is(err, fencing.ErrNotHeld) {
		t.Errorf("second Unlock: %v; want ErrNotHeld", err)
	}
	if keys := etcdtest.Keys(t, c, ""); len(keys) != 0 {
		t.Fatalf("keys left: %v", keys)
	}
}

// S1 for read-write locks, under faults (partitions past the TTL, keys
// deleted, leases revoked, calls cancelled): every guarded write under a
// write hold committed while its key was the oldest, and every one under a
// read hold while no writer's key was older than its own.
func TestRWMutexExclusionUnderFaults(t *testing.T) {
	etcdtest.Long(t)
	const (
		workers = 6
		name    = "faulty-rw"
	)
	c := fencingtest.Single(t)
	var log writeLog
	took := underFaults(t, c, workers, &log, func(s *fencing.Session) (picker, error) {
		m, err := fencing.NewRWMutex(s, name)
		return func(rng *rand.Rand) (string, func(context.Context) (*fencing.Hold, error)) {
			if rng.IntN(3) == 0 {
				return "write", m.Lock
			}
			return "read", m.RLock
		}, err
	})
	for _, kind := range []string{"read", "write"} {
		if took[kind] < 2 {
			t.Errorf("only %d workers took a %s hold", took[kind], kind)
		}
	}
	p, _ := inspect.KeyPrefix(fencing.DefaultRoot, fencing.KindRWLock, name)
	log.checkHistory(t, c, p, func(alive []queued, me queued) error {
		writer := strings.HasPrefix(me.key, p+"w/")
		for _, q := range alive {
			switch {
			case q == me:
				return nil
			case writer:
				return fmt.Errorf("writer %s@%d wrote with %s@%d older", me.key, me.rev, q.key, q.rev)
			case strings.HasPrefix(q.key, p+"w/"):
				return fmt.Errorf("reader %s@%d wrote with writer %s@%d older", me.key, me.rev, q.key, q.rev)
			}
		}
		return nil
	})
	fencingtest.WaitFor(t, wait, "no key left", func() bool { return len(rwKeys(t, c, name)) == 0 })
}

// A writer behind readers waits on all of them with one watch: their
// releases, newest first (each one the recipe's writer would re-read and
// re-watch after), cost it no request until the last, which hands over.
// A reader that gives up while an older writer holds does not let it in.
func TestRWMutexWriterBehindReaders(t *testing.T) {
	c := fencingtest.Single(t)
	cli := c.Client(t)
	ctx := fencingtest.Context(t, wait)
	const n = 12
	queued := func(want int) {
		t.Helper()
		fencingtest.WaitFor(t, wait, fmt.Sprintf("%d keys queued", want), func() bool { return len(rwKeys(t, c, "behind")) == want })
	}
	first, err := newRWMutex(t, newSession(t, cli), "behind").Lock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	readers := newRWMutex(t, newSession(t, cli), "behind")
	waiting := make([]<-chan result, n+1)
	giveUp, cancel := context.WithCancel(ctx)
	for i := range waiting {
		lctx := ctx
		if i == n {
			lctx = giveUp
		}
		waiting[i] = goLock(lctx, readers.RLock)
		queued(i + 2)
	}
	var ctr etcdtest.Counter
	writer := goLock(ctx, newRWMutex(t, newSession(t, c.Client(t, etcdtest.WithCounter(&ctr))), "behind").Lock)
	queued(n + 3)
	fencingtest.WaitFor(t, wait, "the writer's watch", func() bool { return ctr.Requests("Watch") > 0 })
	cancel()
	if r := <-waiting[n]; !errors.Is(r.err, context.Canceled) {
		t.Fatalf("the reader that gave up: %v, %v", r.h, r.err)
	}
	queued(n + 2)
	if err := first.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	held := make([]*fencing.Hold, n)
	for i := range held {
		held[i] = received(t, waiting[i], fmt.Sprintf("reader %d", i))
	}
	pending(t, writer, "the writer, with readers in")
	kv := func() int {
		return ctr.Requests("Txn") + ctr.Requests("Range") + ctr.Requests("DeleteRange") + ctr.Requests("Put") + ctr.Requests("Watch")
	}
	before := kv()
	for i := n - 1; i > 0; i-- {
		if err := held[i].Unlock(ctx); err != nil {
			t.Fatal(err)
		}
		queued(i + 1)
	}
	if got := kv() - before; got != 0 {
		t.Errorf("the writer sent %d requests while %d of the readers ahead released, newest first; want 0 (%v)", got, n-1, &ctr)
	}
	pending(t, writer, "the writer, with one reader in")
	if err := held[0].Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	w := received(t, writer, "the writer")
	if got := kv() - before; got > 2 {
		t.Errorf("the writer sent %d requests to take over from the last reader; want at most 2 (a read, a watch cancel): %v", got, &ctr)
	}
	for _, r := range held {
		if w.Token().Compare(r.Token()) <= 0 {
			t.Errorf("write token %v not above earlier read token %v", w.Token(), r.Token())
		}
	}
	if err := w.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	queued(0)
}
