package etcdtest

import (
	"fmt"
	"strconv"
	"strings"
	"sync"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/leasehold/leasehold/election"
	"github.com/leasehold/leasehold/fencing"
	"github.com/leasehold/leasehold/fencing/fencingtest"
	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
)

// Election returns the election name on s.
func Election(t fencingtest.TB, s *fencing.Session, name string) *election.Election {
	t.Helper()
	e, err := election.New(s, name)
	if err != nil {
		t.Fatalf("fencingtest: election.New(%q): %v", name, err)
	}
	return e
}

// Next receives the next observation from obs, failing t if none comes
// within fencingtest.Wait or obs closes.
func Next(t fencingtest.TB, obs <-chan election.Observation) election.Observation {
	t.Helper()
	return fencingtest.Receive(t, obs, "an observation")
}

// Recorder is a fencing.Observer that keeps every event, for tests.
type Recorder struct {
	mu       sync.Mutex
	Acquired []fencing.AcquireEvent
	Released []fencing.ReleaseEvent
	Lost     []fencing.LossEvent
	Renewed  []fencing.RenewEvent
	Rejected []fencing.RejectEvent
}

// Observer returns the observer that records into r.
func (r *Recorder) Observer() fencing.Observer {
	return fencing.Observer{
		OnAcquire: func(e fencing.AcquireEvent) { r.add(func() { r.Acquired = append(r.Acquired, e) }) },
		OnRelease: func(e fencing.ReleaseEvent) { r.add(func() { r.Released = append(r.Released, e) }) },
		OnLoss:    func(e fencing.LossEvent) { r.add(func() { r.Lost = append(r.Lost, e) }) },
		OnRenew:   func(e fencing.RenewEvent) { r.add(func() { r.Renewed = append(r.Renewed, e) }) },
		OnReject:  func(e fencing.RejectEvent) { r.add(func() { r.Rejected = append(r.Rejected, e) }) },
	}
}

func (r *Recorder) add(f func()) {
	r.mu.Lock()
	defer r.mu.Unlock()
	f()
}

// Counts returns how many events of each kind were recorded, in the order
// acquired, released, lost, renewed, rejected.
func (r *Recorder) Counts() [5]int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return [5]int{len(r.Acquired), len(r.Released), len(r.Lost), len(r.Renewed), len(r.Rejected)}
}

// Snapshot runs f with the recorder locked, to read its events.
func (r *Recorder) Snapshot(f func(*Recorder)) {
	r.mu.Lock()
	defer r.mu.Unlock()
	f(r)
}

// PutsUnder reports whether req is a txn that puts a key under prefix: the
// enqueue of a lock or election, a Proclaim, a guarded put.
func PutsUnder(req any, prefix string) bool {
	txn, ok := req.(*pb.TxnRequest)
	if !ok {
		return false
	}
	for _, ops := range [][]*pb.RequestOp{txn.Success, txn.Failure} {
		for _, op := range ops {
			if p := op.GetRequestPut(); p != nil && strings.HasPrefix(string(p.Key), prefix) {
				return true
			}
		}
	}
	return false
}

// DeletesUnder reports whether req is a delete of a key under prefix.
func DeletesUnder(req any, prefix string) bool {
	d, ok := req.(*pb.DeleteRangeRequest)
	return ok && strings.HasPrefix(string(d.Key), prefix)
}

// StoppedBefore waits for the deletion that Cluster.Deletion reports, and returns
// when it was seen and nil if stopped had closed strictly before: the S3
// order, a holder stops before the server gives its key away. Otherwise the
// error says what happened.
func StoppedBefore(stopped <-chan struct{}, deletion <-chan time.Time) (time.Time, error) {
	stoppedAt := When(stopped)
	deletedAt, ok := <-deletion
	if !ok {
		return deletedAt, fmt.Errorf("watch ended without a delete")
	}
	select {
	case at := <-stoppedAt:
		if !at.Before(deletedAt) {
			return deletedAt, fmt.Errorf("stopped at %v, not before the delete seen at %v", at, deletedAt)
		}
		return deletedAt, nil
	default:
		return deletedAt, fmt.Errorf("key deleted by the server (seen at %v) while the holder still went on", deletedAt)
	}
}

// When returns a channel that receives the time at which done closed.
func When(done <-chan struct{}) <-chan time.Time {
	at := make(chan time.Time, 1)
	go func() {
		<-done
		at <- time.Now()
	}()
	return at
}

// adminTimeout bounds each request of the admin client here.
const adminTimeout = 10 * time.Second

// Exists reports whether key exists, read linearizably from the admin client.
func Exists(t fencingtest.TB, c *fencingtest.Cluster, key string) bool {
	t.Helper()
	resp, err := c.Admin.Get(fencingtest.Context(t, adminTimeout), key, clientv3.WithCountOnly())
	if err != nil {
		t.Fatalf("etcdtest: get %q: %v", key, err)
	}
	return resp.Count > 0
}

// Deletion watches key from the admin client and returns a channel that
// receives the time at which the deletion of key was seen. The watch is
// established when Deletion returns. The channel is closed without a value if
// the test ends first.
func Deletion(t fencingtest.TB, c *fencingtest.Cluster, key string) <-chan time.Time {
	t.Helper()
	wch := c.Admin.Watch(fencingtest.Context(t, time.Minute), key, clientv3.WithCreatedNotify(), clientv3.WithFilterPut())
	<-wch
	seen := make(chan time.Time, 1)
	go func() {
		defer close(seen)
		for resp := range wch {
			if len(resp.Events) > 0 {
				seen <- time.Now()
				return
			}
		}
	}()
	return seen
}

// AddUser creates user, with password user, granted read and write on each
// key prefix (none: a user who may touch nothing).
func AddUser(t fencingtest.TB, c *fencingtest.Cluster, user string, prefixes ...string) {
	t.Helper()
	ctx := fencingtest.Context(t, adminTimeout)
	if _, err := c.Admin.UserAdd(ctx, user, user); err != nil {
		t.Fatalf("etcdtest: add user %s: %v", user, err)
	}
	if len(prefixes) == 0 {
		return
	}
	if _, err := c.Admin.RoleAdd(ctx, user); err != nil {
		t.Fatalf("etcdtest: add role %s: %v", user, err)
	}
	for _, p := range prefixes {
		if _, err := c.Admin.RoleGrantPermission(ctx, user, p, clientv3.GetPrefixRangeEnd(p), clientv3.PermissionType(clientv3.PermReadWrite)); err != nil {
			t.Fatalf("etcdtest: grant %s on %q: %v", user, p, err)
		}
	}
	if _, err := c.Admin.UserGrantRole(ctx, user, user); err != nil {
		t.Fatalf("etcdtest: grant role %s: %v", user, err)
	}
}

// CompactWhileDown stops member i of c, runs meanwhile (a release, say) on the
// others, writes a few keys and compacts past them, then restarts i: its
// clients reconnect and must resume their watches from a revision that is
// gone.
func CompactWhileDown(t fencingtest.TB, c *fencingtest.Cluster, i int, meanwhile func()) {
	t.Helper()
	c.Stop(i)
	c.WaitLeader(t)
	meanwhile()
	for n := range 10 {
		if _, err := c.Admin.Put(fencingtest.Context(t, adminTimeout), "fencingtest/filler", strconv.Itoa(n)); err != nil {
			t.Fatalf("etcdtest: filler: %v", err)
		}
	}
	c.Compact(t)
	c.Restart(t, i)
}

// ReturnsBy runs call and waits for it to return, for at most limit: a call
// still running then fails t (its goroutine is left to TestMain's leak
// check). It returns call's error.
func ReturnsBy(t fencingtest.TB, limit time.Duration, what string, call func() error) error {
	t.Helper()
	done := make(chan error, 1)
	go func() { done <- call() }()
	select {
	case err := <-done:
		return err
	case <-time.After(limit):
		t.Fatalf("etcdtest: %s had not returned %v later", what, limit)
		return nil
	}
}

// Keys returns every key under prefix, read from the admin client.
func Keys(t fencingtest.TB, c *fencingtest.Cluster, prefix string) []string {
	t.Helper()
	resp, err := c.Admin.Get(fencingtest.Context(t, fencingtest.Wait), prefix, clientv3.WithPrefix(), clientv3.WithKeysOnly())
	if err != nil {
		t.Fatalf("etcdtest: list %q: %v", prefix, err)
	}
	var keys []string
	for _, kv := range resp.Kvs {
		keys = append(keys, string(kv.Key))
	}
	return keys
}
