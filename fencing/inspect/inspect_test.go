package inspect_test

import (
	"context"
	"encoding/json"
	"errors"
	"reflect"
	"strings"
	"testing"

	"github.com/leasehold/leasehold/fencing"
	"github.com/leasehold/leasehold/fencing/fencingtest"
	"github.com/leasehold/leasehold/fencing/inspect"
	"github.com/leasehold/leasehold/internal/testbed/etcdtest"
)

// queueOfThree queues an owner and two waiters on the lock name, each on its
// own session, and returns the sessions in queue order.
func queueOfThree(t *testing.T, c *fencingtest.Cluster, name string) []*fencing.Session {
	t.Helper()
	var ss []*fencing.Session
	for i, id := range []string{"owner", "waiter-1", "waiter-2"} {
		s := newSession(t, c.Client(t), fencing.WithIdentity(id))
		ss = append(ss, s)
		if i == 0 {
			fencingtest.Lock(t, s, name)
			continue
		}
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan struct{})
		go func() {
			defer close(done)
			newMutex(t, s, name).Lock(ctx)
		}()
		t.Cleanup(func() { cancel(); <-done })
		fencingtest.WaitFor(t, wait, id+" to queue", func() bool { return len(etcdtest.LockKeys(t, c, name)) == i+1 })
	}
	return ss
}

// Read shows the owner first, then the waiters in order, each with its
// identity, lease and TTL left.
func TestReadShowsQueueInOrder(t *testing.T) {
	c := fencingtest.Single(t)
	ss := queueOfThree(t, c, "inspected")
	q, err := inspect.Read(fencingtest.Context(t, wait), c.Admin, root, fencing.KindLock, "inspected")
	if err != nil {
		t.Fatal(err)
	}
	if q.Kind != fencing.KindLock || q.Name != "inspected" || len(q.Entries) != 3 || q.Revision == 0 {
		t.Fatalf("queue %+v", q)
	}
	for i, e := range q.Entries {
		if want := []string{"owner", "waiter-1", "waiter-2"}[i]; e.Value != want || e.Lease != ss[i].Lease() {
			t.Errorf("entry %d: value %q lease %x; want %q, %x", i, e.Value, int64(e.Lease), want, int64(ss[i].Lease()))
		}
		if e.Expired || e.TTL <= 0 || e.TTL > e.GrantedTTL || e.GrantedTTL != ss[i].TTL() {
			t.Errorf("entry %d: TTL %v of %v, expired %v", i, e.TTL, e.GrantedTTL, e.Expired)
		}
		if e.Token.Name != "inspected" {
			t.Errorf("entry %d: token %v", i, e.Token)
		}
		if i > 0 && e.Token.Compare(q.Entries[i-1].Token) <= 0 {
			t.Errorf("entry %d: token %v not after %v", i, e.Token, q.Entries[i-1].Token)
		}
	}
	if o, ok := q.Owner(); !ok || o.Value != "owner" {
		t.Errorf("Owner() = %+v, %v", o, ok)
	}
}

// A waiter whose lease is gone by the time its TTL is read is shown expired:
// its key is on its way out, and it owns nothing.
func TestReadMarksExpiredWaiter(t *testing.T) {
	c := fencingtest.Single(t)
	ss := queueOfThree(t, c, "expiring")
	ctx := fencingtest.Context(t, wait)
	qs, _, err := inspect.ReadQueues(ctx, c.Admin, root, lockPrefix(t, "expiring"), fencing.KindLock)
	if err != nil || len(qs) != 1 || len(qs[0].Entries) != 3 {
		t.Fatalf("ReadQueues = %+v, %v", qs, err)
	}
	c.Revoke(t, ss[2].Lease())
	if err := inspect.ReadLeases(ctx, c.Admin, qs); err != nil {
		t.Fatal(err)
	}
	for i, e := range qs[0].Entries {
		if want := i == 2; e.Expired != want {
			t.Errorf("entry %d (%s): expired %v; want %v", i, e.Value, e.Expired, want)
		}
	}
	if e := qs[0].Entries[2]; e.TTL >= 0 {
		t.Errorf("expired entry has TTL %v; want negative", e.TTL)
	}
}

// ReadPrefix groups keys by name and keeps only the names asked for; its
// JSON decodes back to what it returned.
func TestReadPrefixGroupsAndRoundTrips(t *testing.T) {
	c := fencingtest.Single(t)
	s := newSession(t, c.Client(t))
	for _, n := range []string{"jobs/b", "jobs/a", "jobs/a", "other"} {
		go newMutex(t, s, n).Lock(t.Context())
	}
	fencingtest.Lock(t, s, "jobs")
	fencingtest.WaitFor(t, wait, "three keys under jobs/", func() bool {
		return len(etcdtest.LockKeys(t, c, "jobs/a"))+len(etcdtest.LockKeys(t, c, "jobs/b")) == 3
	})
	qs, err := inspect.ReadPrefix(fencingtest.Context(t, wait), c.Admin, root, "", "jobs/")
	if err != nil {
		t.Fatal(err)
	}
	if len(qs) != 2 || qs[0].Name != "jobs/a" || len(qs[0].Entries) != 2 || qs[1].Name != "jobs/b" {
		t.Fatalf("ReadPrefix(jobs/) = %+v", qs)
	}
	b, err := json.Marshal(qs)
	if err != nil {
		t.Fatal(err)
	}
	var back []inspect.Queue
	if err := json.Unmarshal(b, &back); err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(back, qs) {
		t.Fatalf("JSON round trip changed the queues:\n%+v\n%+v", qs, back)
	}
}

func TestReadRejectsBadInput(t *testing.T) {
	c := fencingtest.Single(t)
	ctx := fencingtest.Context(t, wait)
	for _, tc := range []struct {
		kind fencing.Kind
		name string
		want error
	}{{"", "n", fencing.ErrInvalidArgument}, {"mutex", "n", fencing.ErrInvalidArgument}, {fencing.KindLock, "", fencing.ErrInvalidName}} {
		if _, err := inspect.Read(ctx, c.Admin, root, tc.kind, tc.name); !errors.Is(err, tc.want) {
			t.Errorf("Read(%q, %q): %v; want %v", tc.kind, tc.name, err, tc.want)
		}
	}
	if _, err := inspect.Read(ctx, nil, root, fencing.KindLock, "n"); !errors.Is(err, fencing.ErrInvalidArgument) {
		t.Errorf("Read with a nil client: %v", err)
	}
	var nilCtx context.Context
	if _, err := inspect.Read(nilCtx, c.Admin, root, fencing.KindLock, "n"); !errors.Is(err, fencing.ErrInvalidArgument) {
		t.Errorf("Read with a nil context: %v", err)
	}
	if _, err := inspect.ReadPrefix(ctx, nil, root, "", ""); !errors.Is(err, fencing.ErrInvalidArgument) {
		t.Errorf("ReadPrefix with a nil client: %v", err)
	}
	for _, bad := range []string{"", "bad\x00root"} {
		if _, err := inspect.Read(ctx, c.Admin, bad, fencing.KindLock, "n"); !errors.Is(err, fencing.ErrInvalidArgument) {
			t.Errorf("Read under root %q: %v", bad, err)
		}
	}
	if _, err := inspect.ReadPrefix(ctx, c.Admin, root, "", "a#"); !errors.Is(err, fencing.ErrInvalidName) {
		t.Errorf("ReadPrefix of a prefix no name starts: %v", err)
	}
	if _, err := inspect.ReadPrefix(ctx, c.Admin, root, "mutex", ""); !errors.Is(err, fencing.ErrInvalidArgument) {
		t.Errorf("ReadPrefix of a bad kind: %v", err)
	}
	if q, err := inspect.Read(ctx, c.Admin, root, fencing.KindLock, "free"); err != nil || len(q.Entries) != 0 || q.Revision == 0 {
		t.Errorf("Read of a free lock = %+v, %v", q, err)
	}
}

// Without etcd, Read fails with the reason, and never panics.
func TestReadFailsWithoutEtcd(t *testing.T) {
	c := fencingtest.Single(t)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := inspect.Read(ctx, c.Admin, root, fencing.KindLock, "n"); !errors.Is(err, context.Canceled) {
		t.Errorf("Read with a canceled context: %v; want context.Canceled", err)
	}
	cli := fencingtest.NewClient(t, c.Endpoints())
	cli.Close()
	if _, err := inspect.ReadPrefix(fencingtest.Context(t, wait), cli, root, "", ""); err == nil {
		t.Error("ReadPrefix on a closed client succeeded")
	}
}

// JSON has one naming style, and the lease in hex as the table and etcdctl
// show it.
func TestEntryJSON(t *testing.T) {
	e := inspect.Entry{Token: fencing.Token{Name: "jobs/a", Revision: 7}, Key: "k", Lease: 0x694d9a1b2c3d4e5f}
	b, err := json.Marshal(e)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{`"token":{"name":"jobs/a","revision":7}`, `"lease":"694d9a1b2c3d4e5f"`} {
		if !strings.Contains(string(b), want) {
			t.Errorf("JSON %s lacks %s", b, want)
		}
	}
	var back inspect.Entry
	if err := json.Unmarshal(b, &back); err != nil || back != e {
		t.Fatalf("round trip: %+v, %v; want %+v", back, err, e)
	}
	if err := json.Unmarshal([]byte(`{"lease":"zz"}`), &back); err == nil {
		t.Error("a lease that is not hex was accepted")
	}
}

// A semaphore shows its limit, its holders (the limit oldest keys) and its
// waiters; a key queued with another limit holds nothing. A read-write
// lock shows each key's mode: readers ahead of every writer hold, the
// writer and the readers behind it wait.
func TestReadShowsSemaphoreAndRWLock(t *testing.T) {
	c := fencingtest.Single(t)
	ctx := fencingtest.Context(t, wait)
	s := newSession(t, c.Client(t))
	queue := func(kind fencing.Kind, name string, n int, acquire func(context.Context) (*fencing.Hold, error)) {
		t.Helper()
		go acquire(t.Context())
		p, err := inspect.KeyPrefix(root, kind, name)
		if err != nil {
			t.Fatal(err)
		}
		fencingtest.WaitFor(t, wait, name+" queued", func() bool { return len(etcdtest.Keys(t, c, p)) == n })
	}
	sem := func(limit int) *fencing.Semaphore {
		m, err := fencing.NewSemaphore(s, "slots", limit)
		if err != nil {
			t.Fatal(err)
		}
		return m
	}
	for i := range 3 {
		queue(fencing.KindSemaphore, "slots", i+1, sem(2).Acquire)
	}
	// A key of another limit, as a process with another limit writes it
	// (its call would fail at once, and remove it).
	p, err := inspect.KeyPrefix(root, fencing.KindSemaphore, "slots")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Admin.Put(ctx, p+"5/0-1", ""); err != nil {
		t.Fatal(err)
	}
	rw, err := fencing.NewRWMutex(s, "table")
	if err != nil {
		t.Fatal(err)
	}
	for i, lock := range []func(context.Context) (*fencing.Hold, error){rw.RLock, rw.RLock, rw.Lock, rw.RLock} {
		queue(fencing.KindRWLock, "table", i+1, lock)
	}
	qs, err := inspect.ReadPrefix(ctx, c.Admin, root, "", "")
	if err != nil {
		t.Fatal(err)
	}
	if len(qs) != 2 || qs[0].Kind != fencing.KindRWLock || qs[1].Kind != fencing.KindSemaphore {
		t.Fatalf("ReadPrefix = %+v", qs)
	}
	rwq, sq := qs[0], qs[1]
	if len(rwq.Holders()) != 2 || len(rwq.Waiters()) != 2 || rwq.Limit != 0 {
		t.Errorf("read-write lock: %d holders, %d waiters, limit %d; want 2, 2, 0", len(rwq.Holders()), len(rwq.Waiters()), rwq.Limit)
	}
	for i, e := range rwq.Entries {
		if want := []string{"read", "read", "write", "read"}[i]; e.Mode != want || e.Holds != (i < 2) {
			t.Errorf("read-write lock entry %d: mode %q holds %v; want %q %v", i, e.Mode, e.Holds, want, i < 2)
		}
	}
	if sq.Limit != 2 || len(sq.Entries) != 4 || len(sq.Holders()) != 2 || len(sq.Waiters()) != 2 {
		t.Errorf("semaphore: limit %d, %d entries, %d holders; want 2, 4, 2", sq.Limit, len(sq.Entries), len(sq.Holders()))
	}
	for _, e := range sq.Entries {
		if e.Mode != "" {
			t.Errorf("semaphore entry with mode %q", e.Mode)
		}
	}
	b, err := json.Marshal(qs)
	if err != nil {
		t.Fatal(err)
	}
	var back []inspect.Queue
	if err := json.Unmarshal(b, &back); err != nil || !reflect.DeepEqual(back, qs) {
		t.Fatalf("JSON round trip: %v\n%+v\n%+v", err, qs, back)
	}
}

// A weighted semaphore whose limit was lowered: Read shows the name's own
// limit, each entry's units, the holds granted before the lowering as
// holding, and the waiter behind them as waiting.
func TestReadShowsWeightsAndTheNamesLimit(t *testing.T) {
	c := fencingtest.Single(t)
	s := newSession(t, c.Client(t))
	ctx := fencingtest.Context(t, wait)
	m, err := fencing.NewSemaphore(s, "pool", 4)
	if err != nil {
		t.Fatal(err)
	}
	var held []*fencing.Hold
	for _, n := range []int{1, 3} {
		h, err := m.AcquireN(ctx, n)
		if err != nil {
			t.Fatal(err)
		}
		held = append(held, h)
	}
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	go m.AcquireN(wctx, 2)
	fencingtest.WaitFor(t, wait, "the waiter to queue", func() bool {
		q, err := inspect.Read(ctx, c.Admin, root, fencing.KindSemaphore, "pool")
		return err == nil && len(q.Entries) == 3
	})
	if err := m.SetLimit(ctx, 2); err != nil {
		t.Fatal(err)
	}
	q, err := inspect.Read(ctx, c.Admin, root, fencing.KindSemaphore, "pool")
	if err != nil {
		t.Fatal(err)
	}
	if q.Limit != 2 || !q.LimitSet || len(q.Holders()) != 2 || len(q.Waiters()) != 1 {
		t.Errorf("semaphore: limit %d (set %v), %d holders, %d waiters; want 2 (set), 2, 1", q.Limit, q.LimitSet, len(q.Holders()), len(q.Waiters()))
	}
	for i, want := range []int{1, 3, 2} {
		if i < len(q.Entries) && q.Entries[i].Units != want {
			t.Errorf("entry %d: %d units; want %d", i, q.Entries[i].Units, want)
		}
	}
	cancel()
	for _, h := range held {
		if err := h.Unlock(ctx); err != nil {
			t.Fatal(err)
		}
	}
}
