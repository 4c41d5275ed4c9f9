package fencing_test

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/leasehold/leasehold/fencing"
	"github.com/leasehold/leasehold/fencing/fencingtest"
	"github.com/leasehold/leasehold/guard"
	"github.com/leasehold/leasehold/internal/keyspace"
	"github.com/leasehold/leasehold/internal/testbed/etcdtest"
	"github.com/leasehold/leasehold/internal/testbed/kit"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/server/v3/embed"
	"go.uber.org/zap"
)

func newMulti(t testing.TB, s *fencing.Session, names ...string) *fencing.MultiMutex {
	t.Helper()
	m, err := fencing.NewMultiMutex(s, names...)
	if err != nil {
		t.Fatalf("NewMultiMutex(%q): %v", names, err)
	}
	return m
}

func lockAll(t testing.TB, m *fencing.MultiMutex) *fencing.MultiHold {
	t.Helper()
	h, err := m.Lock(fencingtest.Context(t, wait))
	if err != nil {
		t.Fatalf("MultiMutex.Lock: %v", err)
	}
	return h
}

// lockKeys counts the keys queued under each of names.
func lockKeys(t testing.TB, c *fencingtest.Cluster, names ...string) []int {
	t.Helper()
	n := make([]int, len(names))
	for i, name := range names {
		n[i] = len(etcdtest.LockKeys(t, c, name))
	}
	return n
}

// An uncontended Lock of several names is one request, and its holds, one
// per name in the order given, share one token revision.
func TestMultiLockUncontendedSendsOneRequest(t *testing.T) {
	c := fencingtest.Single(t)
	var ctr etcdtest.Counter
	s := newSession(t, c.Client(t, etcdtest.WithCounter(&ctr)))
	names := []string{"multi/c", "multi/a", "multi/b"}
	m := newMulti(t, s, names...)
	ctx := fencingtest.Context(t, wait)
	ctr.Reset()
	h, err := m.Lock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if got := ctr.Requests("Txn") + ctr.Requests("DeleteRange") + ctr.Requests("Range") + ctr.Requests("Watch"); got != 1 {
		t.Fatalf("uncontended Lock of %d names sent %d requests; want 1 (%v)", len(names), got, &ctr)
	}
	toks := h.Tokens()
	for i, tok := range toks {
		if tok.Name != names[i] || tok.Revision != toks[0].Revision || tok.Revision <= 0 || tok.Cluster != s.Cluster() {
			t.Errorf("Tokens()[%d] = %v; want %s at the revision of %v", i, tok, names[i], toks[0])
		}
		if hold := h.Holds()[i]; hold.Token() != tok || !slices.Equal(etcdtest.LockKeys(t, c, names[i]), []string{hold.Key()}) {
			t.Errorf("hold %d: token %v, key %s; queue %q", i, hold.Token(), hold.Key(), etcdtest.LockKeys(t, c, names[i]))
		}
	}
	if n := len(h.IsOwner()); n != len(names) {
		t.Errorf("IsOwner gave %d compares; want %d", n, len(names))
	}
	if err := h.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	if keys := etcdtest.Keys(t, c, ""); len(keys) != 0 {
		t.Fatalf("keys left: %q", keys)
	}
}

// S1: one Lock's holds share one token, greater than that of every earlier
// owner of each of its names, including owners it waited for.
func TestMultiTokensGrow(t *testing.T) {
	c := fencingtest.Single(t)
	names := []string{"grow/a", "grow/b", "grow/c"}
	other := newSession(t, c.Client(t))
	earlier := fencingtest.Lock(t, other, "grow/b")
	if err := earlier.Unlock(fencingtest.Context(t, wait)); err != nil {
		t.Fatal(err)
	}
	holdA, holdC := fencingtest.Lock(t, other, "grow/a"), fencingtest.Lock(t, other, "grow/c")
	m := newMulti(t, newSession(t, c.Client(t)), names...)
	got := make(chan *fencing.MultiHold, 1)
	go func() {
		h, err := m.Lock(fencingtest.Context(t, wait))
		if err != nil {
			t.Errorf("Lock: %v", err)
		}
		got <- h
	}()
	fencingtest.WaitFor(t, wait, "the Lock's keys queued", func() bool { return slices.Equal(lockKeys(t, c, names...), []int{2, 1, 2}) })
	for _, h := range []*fencing.Hold{holdC, holdA} {
		if err := h.Unlock(fencingtest.Context(t, wait)); err != nil {
			t.Fatal(err)
		}
	}
	h := <-got
	if h == nil {
		t.FailNow()
	}
	for i, tok := range h.Tokens() {
		if tok.Revision != h.Tokens()[0].Revision {
			t.Errorf("token %v; want every name at revision %d", tok, h.Tokens()[0].Revision)
		}
		for _, before := range []fencing.Token{earlier.Token(), holdA.Token(), holdC.Token()} {
			if before.Name == names[i] && tok.Compare(before) <= 0 {
				t.Errorf("token %v not greater than the earlier owner's %v", tok, before)
			}
		}
	}
	if err := h.Unlock(fencingtest.Context(t, wait)); err != nil {
		t.Fatal(err)
	}
}

// S2, S4: a second client deletes one of the keys: the MultiHold's context
// ends with ErrKeyDeleted, a txn guarded by every hold is refused with
// ErrNotOwner naming that hold, and Unlock releases the rest and says one
// was not held.
func TestMultiGuardedTxnRefusedAfterOneKeyDeleted(t *testing.T) {
	c := fencingtest.Single(t)
	h := lockAll(t, newMulti(t, newSession(t, c.Client(t)), "guarded/a", "guarded/b"))
	ctx := fencingtest.Context(t, wait)
	owners := []guard.Owner{h.Holds()[0], h.Holds()[1]}
	if _, err := guard.TxnAll(ctx, owners...).Then(clientv3.OpPut("guarded/data", "1")).Commit(); err != nil {
		t.Fatalf("guarded put while holding: %v", err)
	}
	work := h.Context()
	c.Delete(t, h.Holds()[1].Key())
	if cause := fencingtest.Ended(t, work, wait, "the MultiHold's context"); !errors.Is(cause, fencing.ErrKeyDeleted) {
		t.Fatalf("cause %v; want ErrKeyDeleted", cause)
	}
	if h.Context() != work {
		t.Error("Context returned another context")
	}
	_, err := guard.TxnAll(ctx, owners...).Then(clientv3.OpPut("guarded/data", "2")).Commit()
	if !errors.Is(err, guard.ErrNotOwner) || !strings.Contains(err.Error(), h.Tokens()[1].String()+"] lost") {
		t.Fatalf("guarded put after a delete: %v; want ErrNotOwner naming %v", err, h.Tokens()[1])
	}
	if got, err := c.Admin.Get(ctx, "guarded/data"); err != nil || string(got.Kvs[0].Value) != "1" {
		t.Fatalf("data after the refused write: %v, %v", got, err)
	}
	if err := h.Holds()[0].Context().Err(); err != nil {
		t.Errorf("the other hold's context ended: %v", context.Cause(h.Holds()[0].Context()))
	}
	err = h.Unlock(ctx)
	if !errors.Is(err, fencing.ErrNotHeld) {
		t.Fatalf("Unlock with one key gone: %v; want ErrNotHeld", err)
	}
	etcdtest.NamesPackageOnce(t, "fencing", err)
	if keys := etcdtest.Keys(t, c, fencing.DefaultRoot); len(keys) != 0 {
		t.Fatalf("keys left: %q", keys)
	}
	err = h.Unlock(ctx) // both already released: one error naming both
	if !errors.Is(err, fencing.ErrNotHeld) || !strings.Contains(err.Error(), h.Tokens()[0].String()) || !strings.Contains(err.Error(), h.Tokens()[1].String()) {
		t.Fatalf("second Unlock: %v; want ErrNotHeld for both holds", err)
	}
	etcdtest.NamesPackageOnce(t, "fencing", err)
}

// S8: a Lock cancelled while it waits for one of its names removes the
// keys of all of them.
func TestMultiCancelWhileWaitingLeavesNoKey(t *testing.T) {
	c := fencingtest.Single(t)
	names := []string{"cancel/a", "cancel/b", "cancel/c"}
	holder := fencingtest.Lock(t, newSession(t, c.Client(t)), "cancel/b")
	m := newMulti(t, newSession(t, c.Client(t)), names...)
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() {
		_, err := m.Lock(ctx)
		done <- err
	}()
	fencingtest.WaitFor(t, wait, "the Lock's keys queued", func() bool { return slices.Equal(lockKeys(t, c, names...), []int{1, 2, 1}) })
	cancel()
	if err := fencingtest.Receive(t, done, "the cancelled Lock"); !errors.Is(err, context.Canceled) {
		t.Fatalf("cancelled Lock: %v; want context.Canceled", err)
	}
	if got := lockKeys(t, c, names...); !slices.Equal(got, []int{0, 1, 0}) {
		t.Fatalf("keys per name after the cancel: %v; want only the holder's", got)
	}
	if err := holder.Unlock(fencingtest.Context(t, wait)); err != nil {
		t.Fatal(err)
	}
}

// S9: a Lock whose enqueue was applied but whose reply was lost keeps the
// place of every key it wrote: it owns before a waiter that queued after
// the lost reply, with the keys the lost attempt wrote, one per name.
func TestMultiLockKeepsPlaceAcrossLostReply(t *testing.T) {
	c := fencingtest.Single(t)
	names := []string{"lost/a", "lost/b"}
	owner := fencingtest.Lock(t, newSession(t, c.Client(t)), "lost/b")
	r := &etcdtest.Replies{Decide: once(etcdtest.LoseReply, enqueueOf("lost/a"))}
	m := newMulti(t, newSession(t, c.Client(t, r.Option())), names...)
	got := make(chan *fencing.MultiHold, 1)
	go func() {
		h, err := m.Lock(fencingtest.Context(t, wait))
		if err != nil {
			t.Errorf("Lock across a lost reply: %v", err)
		}
		got <- h
	}()
	fencingtest.WaitFor(t, wait, "the lost enqueue applied", func() bool { return slices.Equal(lockKeys(t, c, names...), []int{1, 2}) })
	written := append(etcdtest.LockKeys(t, c, "lost/a"), slices.DeleteFunc(etcdtest.LockKeys(t, c, "lost/b"), func(k string) bool { return k == owner.Key() })...)
	later := make(chan error, 1)
	go func() {
		h, err := newMutex(t, newSession(t, c.Client(t)), "lost/b").Lock(fencingtest.Context(t, wait))
		if err == nil {
			err = h.Unlock(fencingtest.Context(t, wait))
		}
		later <- err
	}()
	fencingtest.WaitFor(t, wait, "the later waiter queued", func() bool { return slices.Equal(lockKeys(t, c, names...), []int{1, 3}) })
	if err := owner.Unlock(fencingtest.Context(t, wait)); err != nil {
		t.Fatal(err)
	}
	h := <-got
	if h == nil {
		t.FailNow()
	}
	if got := lockKeys(t, c, names...); !slices.Equal(got, []int{1, 2}) {
		t.Errorf("keys per name once the Lock owns: %v; want its own and the later waiter's", got)
	}
	for i, hold := range h.Holds() {
		if hold.Key() != written[i] {
			t.Errorf("hold of %s has key %s; the lost enqueue wrote %s", names[i], hold.Key(), written[i])
		}
	}
	if err := h.Unlock(fencingtest.Context(t, wait)); err != nil {
		t.Fatal(err)
	}
	if err := fencingtest.Receive(t, later, "the later waiter"); err != nil {
		t.Fatalf("later waiter: %v", err)
	}
	fencingtest.WaitFor(t, wait, "no key left", func() bool { return slices.Equal(lockKeys(t, c, names...), []int{0, 0}) })
}

// A TryLock whose write was applied but whose reply was lost finds its own
// keys at the heads and owns with them; a refused or unanswered one is
// sent again.
func TestMultiTryLockAcrossLostAndRefusedReplies(t *testing.T) {
	c := fencingtest.Single(t)
	names := []string{"try-lost/a", "try-lost/b"}
	for _, f := range []etcdtest.Fault{etcdtest.LoseReply, etcdtest.Refuse, etcdtest.Hang} {
		r := &etcdtest.Replies{Decide: once(f, enqueueOf("try-lost/b"))}
		h, err := newMulti(t, newSession(t, c.Client(t, r.Option())), names...).TryLock(fencingtest.Context(t, wait))
		if err != nil {
			t.Fatalf("TryLock across fault %d: %v", f, err)
		}
		for i, hold := range h.Holds() {
			if keys := etcdtest.LockKeys(t, c, names[i]); !slices.Equal(keys, []string{hold.Key()}) {
				t.Fatalf("fault %d: keys of %s %q; want only the hold's %s", f, names[i], keys, hold.Key())
			}
		}
		if err := h.Unlock(fencingtest.Context(t, wait)); err != nil {
			t.Fatal(err)
		}
	}
}

// TryLock writes nothing, in one request, when any of its names is held,
// and names that one; once all are free it takes them all.
func TestMultiTryLockWritesNothingWhenAnyTaken(t *testing.T) {
	c := fencingtest.Single(t)
	names := []string{"try/a", "try/b", "try/c"}
	holder := fencingtest.Lock(t, newSession(t, c.Client(t), fencing.WithIdentity("holder")), "try/b")
	var ctr etcdtest.Counter
	m := newMulti(t, newSession(t, c.Client(t, etcdtest.WithCounter(&ctr))), names...)
	ctr.Reset()
	_, err := m.TryLock(fencingtest.Context(t, wait))
	if !errors.Is(err, fencing.ErrLocked) || !strings.Contains(err.Error(), `"try/b" by "holder"`) {
		t.Fatalf("TryLock with try/b held: %v; want ErrLocked naming try/b and its holder", err)
	}
	etcdtest.NamesPackageOnce(t, "fencing", err)
	if got := ctr.Requests("Txn"); got != 1 || ctr.Requests("") > 1+ctr.Requests("LeaseKeepAlive") {
		t.Fatalf("TryLock sent %v; want one Txn", &ctr)
	}
	if got := lockKeys(t, c, names...); !slices.Equal(got, []int{0, 1, 0}) {
		t.Fatalf("keys per name after the failed TryLock: %v; want only the holder's", got)
	}
	if err := holder.Unlock(fencingtest.Context(t, wait)); err != nil {
		t.Fatal(err)
	}
	h, err := m.TryLock(fencingtest.Context(t, wait))
	if err != nil {
		t.Fatalf("TryLock with every name free: %v", err)
	}
	if h.Tokens()[1].Compare(holder.Token()) <= 0 {
		t.Fatalf("token %v not greater than the earlier owner's %v", h.Tokens()[1], holder.Token())
	}
	if _, err := newMutex(t, newSession(t, c.Client(t)), "try/c").TryLock(fencingtest.Context(t, wait)); !errors.Is(err, fencing.ErrLocked) {
		t.Fatalf("Mutex.TryLock of a name the MultiHold holds: %v; want ErrLocked", err)
	}
	if err := h.Unlock(fencingtest.Context(t, wait)); err != nil {
		t.Fatal(err)
	}
}

// S7: a MultiMutex and Mutexes on names it shares exclude each other: no
// name ever has two holders inside at once (each holder stays inside over a
// guarded write), and every call finishes.
func TestMultiAndMutexExcludeEachOther(t *testing.T) {
	const rounds = 30
	c := fencingtest.Single(t)
	s := newSession(t, c.Client(t))
	ctx := fencingtest.Context(t, 2*wait)
	var inside [3]atomic.Int32 // holders of x/0, x/1, x/2
	var wg sync.WaitGroup
	worker := func(lock func() ([]*fencing.Hold, func(context.Context) error, error), names ...int) {
		wg.Go(func() {
			for range rounds {
				holds, unlock, err := lock()
				if err != nil {
					t.Error(err)
					return
				}
				err = occupy(ctx, inside[:], names, holds)
				if uerr := unlock(ctx); err == nil {
					err = uerr
				}
				if err != nil {
					t.Error(err)
					return
				}
			}
		})
	}
	multi := func(names ...string) func() ([]*fencing.Hold, func(context.Context) error, error) {
		m := newMulti(t, s, names...)
		return func() ([]*fencing.Hold, func(context.Context) error, error) {
			h, err := m.Lock(ctx)
			if err != nil {
				return nil, nil, err
			}
			return h.Holds(), h.Unlock, nil
		}
	}
	single := func(name string) func() ([]*fencing.Hold, func(context.Context) error, error) {
		m := newMutex(t, newSession(t, c.Client(t)), name)
		return func() ([]*fencing.Hold, func(context.Context) error, error) {
			h, err := m.Lock(ctx)
			if err != nil {
				return nil, nil, err
			}
			return []*fencing.Hold{h}, h.Unlock, nil
		}
	}
	worker(multi("x/0", "x/1"), 0, 1)
	worker(multi("x/2", "x/1"), 2, 1)
	worker(single("x/1"), 1)
	worker(single("x/0"), 0)
	wg.Wait()
	if keys := etcdtest.Keys(t, c, fencing.DefaultRoot); len(keys) != 0 {
		t.Fatalf("keys left: %q", keys)
	}
}

// occupy marks the holders of names (indexes into inside) inside, makes a
// guarded write under holds, and leaves: an error if another holder of one
// of the names was inside meanwhile.
func occupy(ctx context.Context, inside []atomic.Int32, names []int, holds []*fencing.Hold) error {
	var err error
	for _, n := range names {
		if k := inside[n].Add(1); k != 1 && err == nil {
			err = fmt.Errorf("%d holders of name %d at once", k, n)
		}
	}
	owners := make([]guard.Owner, len(holds))
	for i, h := range holds {
		owners[i] = h
	}
	if _, werr := guard.TxnAll(ctx, owners...).Then(clientv3.OpPut("inside", "")).Commit(); werr != nil && err == nil {
		err = werr
	}
	for _, n := range names {
		inside[n].Add(-1)
	}
	return err
}

// Two MultiMutexes on the same names in opposite orders, on two sessions,
// both finish every round: no deadlock, as all keys of one Lock share one
// revision and wait only for older keys.
func TestMultiOppositeOrdersBothFinish(t *testing.T) {
	const rounds = 40
	c := fencingtest.Single(t)
	orders := [][]string{{"order/p", "order/q", "order/r"}, {"order/r", "order/q", "order/p"}}
	ctx := fencingtest.Context(t, 2*wait)
	var inside [1]atomic.Int32
	var wg sync.WaitGroup
	done := make([]int, len(orders))
	for i, names := range orders {
		m := newMulti(t, newSession(t, c.Client(t)), names...)
		wg.Go(func() {
			for range rounds {
				h, err := m.Lock(ctx)
				if err != nil {
					t.Errorf("%q: Lock: %v", names, err)
					return
				}
				err = occupy(ctx, inside[:], []int{0}, h.Holds())
				if uerr := h.Unlock(ctx); err == nil {
					err = uerr
				}
				if err != nil {
					t.Errorf("%q: %v", names, err)
					return
				}
				done[i]++
			}
		})
	}
	wg.Wait()
	if !slices.Equal(done, []int{rounds, rounds}) {
		t.Fatalf("rounds finished: %v; want %d each", done, rounds)
	}
}

// Bad input returns its sentinel and writes nothing; 64 names, the bound,
// lock and try-lock on a server with etcd's default --max-txn-ops.
func TestNewMultiMutexRejectsBadInput(t *testing.T) {
	c := fencingtest.Single(t)
	s := newSession(t, c.Client(t))
	many := func(n int) []string {
		names := make([]string, n)
		for i := range names {
			names[i] = fmt.Sprint("bound/", i)
		}
		return names
	}
	for _, tc := range []struct {
		what  string
		s     *fencing.Session
		names []string
		want  error
		text  string
	}{
		{"nil session", nil, []string{"a"}, fencing.ErrInvalidArgument, "nil session"},
		{"zero session", new(fencing.Session), []string{"a"}, fencing.ErrInvalidArgument, ""},
		{"no names", s, nil, fencing.ErrInvalidArgument, "no names"},
		{"duplicate", s, []string{"a", "b", "a"}, fencing.ErrInvalidArgument, `"a" given twice`},
		{"invalid name", s, []string{"a", "b#c"}, fencing.ErrInvalidName, ""},
		{"empty name", s, []string{""}, fencing.ErrInvalidName, ""},
		{"too many", s, many(65), fencing.ErrInvalidArgument, "64"},
	} {
		m, err := fencing.NewMultiMutex(tc.s, tc.names...)
		if m != nil || !errors.Is(err, tc.want) || !strings.Contains(err.Error(), tc.text) {
			t.Errorf("%s: NewMultiMutex = %v, %v; want %v saying %q", tc.what, m, err, tc.want, tc.text)
		}
		etcdtest.NamesPackageOnce(t, "fencing", err)
	}
	var nilCtx context.Context
	zero := new(fencing.MultiMutex)
	zeroHold := new(fencing.MultiHold)
	for what, call := range map[string]func() error{
		"zero MultiMutex Lock":    func() error { _, err := zero.Lock(t.Context()); return err },
		"zero MultiMutex TryLock": func() error { _, err := zero.TryLock(t.Context()); return err },
		"nil MultiMutex Lock":     func() error { _, err := (*fencing.MultiMutex)(nil).Lock(t.Context()); return err },
		"Lock(nil ctx)":           func() error { _, err := newMulti(t, s, "a").Lock(nilCtx); return err },
		"zero MultiHold Unlock":   func() error { return zeroHold.Unlock(t.Context()) },
		"zero MultiHold Context":  func() error { return context.Cause(zeroHold.Context()) },
	} {
		if err := call(); !errors.Is(err, fencing.ErrInvalidArgument) {
			t.Errorf("%s: %v; want ErrInvalidArgument", what, err)
		}
	}
	if keys := etcdtest.Keys(t, c, ""); len(keys) != 0 {
		t.Fatalf("keys written by bad input: %q", keys)
	}
	m := newMulti(t, s, many(64)...)
	for _, lock := range []func(context.Context) (*fencing.MultiHold, error){m.Lock, m.TryLock} {
		h, err := lock(fencingtest.Context(t, wait))
		if err != nil {
			t.Fatalf("64 names: %v", err)
		}
		if err := h.Unlock(fencingtest.Context(t, wait)); err != nil {
			t.Fatal(err)
		}
	}
	if keys := etcdtest.Keys(t, c, ""); len(keys) != 0 {
		t.Fatalf("keys left: %q", keys)
	}
}

// On a server started with --max-txn-ops below what Lock needs (two per
// name), Lock fails with ErrInvalidArgument saying so, and writes nothing;
// fewer names fit and lock.
func TestMultiLockOnServerWithLowerMaxTxnOps(t *testing.T) {
	const maxOps = 8
	cli := etcdWithMaxTxnOps(t, maxOps)
	s := newSession(t, cli)
	names := []string{"ops/a", "ops/b", "ops/c", "ops/d", "ops/e"}
	_, err := newMulti(t, s, names...).Lock(fencingtest.Context(t, wait))
	if !errors.Is(err, fencing.ErrInvalidArgument) || !strings.Contains(err.Error(), "--max-txn-ops") {
		t.Fatalf("Lock of %d names with --max-txn-ops=%d: %v; want ErrInvalidArgument naming --max-txn-ops", len(names), maxOps, err)
	}
	etcdtest.NamesPackageOnce(t, "fencing", err)
	if keys, err := cli.Get(t.Context(), "", clientv3.WithFromKey(), clientv3.WithKeysOnly()); err != nil || len(keys.Kvs) != 0 {
		t.Fatalf("keys after the refused Lock: %v, %v", keys.Kvs, err)
	}
	h := lockAll(t, newMulti(t, s, names[:maxOps/2]...))
	if err := h.Unlock(fencingtest.Context(t, wait)); err != nil {
		t.Fatal(err)
	}
}

// etcdWithMaxTxnOps starts a single embedded etcd member with
// --max-txn-ops=n, stopped when t ends, and returns a client of it.
func etcdWithMaxTxnOps(t *testing.T, n uint) *clientv3.Client {
	t.Helper()
	cfg := embed.NewConfig()
	cfg.Name, cfg.Dir, cfg.MaxTxnOps = "ops", t.TempDir(), n
	var urls [2]url.URL
	for i := range urls {
		addr, err := kit.FreeAddr()
		if err != nil {
			t.Fatal(err)
		}
		urls[i] = url.URL{Scheme: "http", Host: addr}
	}
	cfg.ListenClientUrls, cfg.AdvertiseClientUrls = urls[:1], urls[:1]
	cfg.ListenPeerUrls, cfg.AdvertisePeerUrls = urls[1:], urls[1:]
	cfg.InitialCluster = cfg.Name + "=" + urls[1].String()
	cfg.UnsafeNoFsync = true
	cfg.Logger, cfg.LogLevel = "zap", "error"
	cfg.ZapLoggerBuilder = embed.NewZapLoggerBuilder(zap.NewNop())
	e, err := embed.StartEtcd(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(e.Close)
	select {
	case <-e.Server.ReadyNotify():
	case <-time.After(wait):
		t.Fatal("etcd with a lower --max-txn-ops not ready")
	}
	return fencingtest.NewClient(t, []string{urls[0].String()})
}

// The keys of a MultiMutex are its names' Mutex keys: under each name's
// own prefix, whatever the order of the names.
func TestMultiKeysAreTheMutexKeys(t *testing.T) {
	c := fencingtest.Single(t)
	s := newSession(t, c.Client(t))
	h := lockAll(t, newMulti(t, s, "keys/b", "keys/a"))
	for i, name := range []string{"keys/b", "keys/a"} {
		if k := h.Holds()[i].Key(); !strings.HasPrefix(k, keyspace.Prefix(fencing.DefaultRoot, string(fencing.KindLock), name)) {
			t.Errorf("hold of %s has key %s", name, k)
		}
	}
	if err := h.Unlock(fencingtest.Context(t, wait)); err != nil {
		t.Fatal(err)
	}
}

// Unlock given the MultiHold's own context, or one made from a hold's,
// which it ends first, still deletes every key: the work stops before the
// keys go, and the deletes go on within the context's deadline.
func TestMultiUnlockWithItsOwnContext(t *testing.T) {
	c := fencingtest.Single(t)
	s := newSession(t, c.Client(t))
	names := []string{"own-ctx/a", "own-ctx/b", "own-ctx/c"}
	for _, own := range []func(h *fencing.MultiHold) context.Context{
		func(h *fencing.MultiHold) context.Context { return h.Context() },
		func(h *fencing.MultiHold) context.Context {
			ctx, cancel := context.WithTimeout(h.Holds()[2].Context(), wait)
			t.Cleanup(cancel)
			return ctx
		},
	} {
		h := lockAll(t, newMulti(t, s, names...))
		ctx := own(h)
		if err := h.Unlock(ctx); err != nil {
			t.Fatalf("Unlock with the hold's own context: %v", err)
		}
		if cause := context.Cause(h.Context()); !errors.Is(cause, fencing.ErrNotHeld) {
			t.Errorf("the MultiHold's context ended with %v; want ErrNotHeld", cause)
		}
		if got := lockKeys(t, c, names...); !slices.Equal(got, []int{0, 0, 0}) {
			t.Fatalf("keys per name after Unlock: %v", got)
		}
	}
}
