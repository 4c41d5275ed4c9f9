// Package fencingtest holds the test helpers that every package built on
// fencing needs: a session closed at the end of the test, a lock taken or
// failing the test.
package fencingtest

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/leasehold/leasehold/election"
	"github.com/leasehold/leasehold/fencing"
	"github.com/leasehold/leasehold/internal/etcdtest"
	"github.com/leasehold/leasehold/internal/keyspace"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// Wait bounds every blocking call a test makes.
const Wait = 30 * time.Second

// Session returns a new session on cli; t.Cleanup closes it.
func Session(t testing.TB, cli *clientv3.Client, opts ...fencing.SessionOption) *fencing.Session {
	t.Helper()
	s, err := fencing.NewSession(etcdtest.Context(t, Wait), cli, opts...)
	if err != nil {
		t.Fatalf("NewSession: %v", err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		s.Close(ctx)
	})
	return s
}

// Mutex returns the lock name on s.
func Mutex(t testing.TB, s *fencing.Session, name string) *fencing.Mutex {
	t.Helper()
	m, err := fencing.NewMutex(s, name)
	if err != nil {
		t.Fatalf("NewMutex(%q): %v", name, err)
	}
	return m
}

// Lock acquires the lock name on s.
func Lock(t testing.TB, s *fencing.Session, name string) *fencing.Hold {
	t.Helper()
	h, err := Mutex(t, s, name).Lock(etcdtest.Context(t, Wait))
	if err != nil {
		t.Fatalf("Lock(%q): %v", name, err)
	}
	return h
}

// LockKeys lists the keys queued under the lock name (default root).
func LockKeys(t testing.TB, c *etcdtest.Cluster, name string) []string {
	t.Helper()
	return c.Keys(t, keyspace.Prefix(fencing.DefaultRoot, string(fencing.KindLock), name))
}

// Election returns the election name on s.
func Election(t testing.TB, s *fencing.Session, name string) *election.Election {
	t.Helper()
	e, err := election.New(s, name)
	if err != nil {
		t.Fatalf("election.New(%q): %v", name, err)
	}
	return e
}

// Next receives the next observation from obs, failing t if none comes
// within Wait or obs closes.
func Next(t testing.TB, obs <-chan election.Observation) election.Observation {
	t.Helper()
	select {
	case o, ok := <-obs:
		if !ok {
			t.Fatal("Observe's channel closed early")
		}
		return o
	case <-time.After(Wait):
		t.Fatalf("no observation within %v", Wait)
	}
	return election.Observation{}
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

// BlackholeTrials runs n trials side by side, each with its own proxied
// client, session (TTL ttl) and hold of the lock "<name>/<i>". setup runs in
// the test's goroutine with the trial's pieces and the channel that reports
// the deletion of the hold's key; the check it returns runs in a goroutine of
// its own, and its error fails t.
func BlackholeTrials(t *testing.T, c *etcdtest.Cluster, n int, ttl time.Duration, name string,
	setup func(s *fencing.Session, h *fencing.Hold, link *etcdtest.Link, deletion <-chan time.Time) (check func() error)) {
	t.Helper()
	BlackholeTrialsOf(t, c, n, ttl, name, Lock, setup)
}

// BlackholeTrialsOf is BlackholeTrials with the hold taken by hold (a
// semaphore's permit, a read or write hold) on "<name>/<i>".
func BlackholeTrialsOf(t *testing.T, c *etcdtest.Cluster, n int, ttl time.Duration, name string,
	hold func(t testing.TB, s *fencing.Session, name string) *fencing.Hold,
	setup func(s *fencing.Session, h *fencing.Hold, link *etcdtest.Link, deletion <-chan time.Time) (check func() error)) {
	t.Helper()
	errs := make(chan error, n)
	for i := range n {
		cli, link := c.ProxiedClient(t)
		s := Session(t, cli, fencing.WithTTL(ttl))
		t.Cleanup(link.Restore) // before the session's Close, which revokes
		h := hold(t, s, fmt.Sprintf("%s/%d", name, i))
		check := setup(s, h, link, c.Deletion(t, h.Key()))
		go func() { errs <- check() }()
	}
	for range n {
		if err := <-errs; err != nil {
			t.Error(err)
		}
	}
}

// StoppedBeforeDeletion checks that work, h's watched context, ended for
// an unconfirmed lease before the deletion of h's key was seen.
func StoppedBeforeDeletion(h *fencing.Hold, work context.Context, deletion <-chan time.Time) error {
	if _, err := etcdtest.StoppedBefore(work.Done(), deletion); err != nil {
		return fmt.Errorf("%v: %w", h.Token(), err)
	}
	if cause := context.Cause(work); !errors.Is(cause, fencing.ErrLeaseUnconfirmed) {
		return fmt.Errorf("%v: cause %v; want ErrLeaseUnconfirmed", h.Token(), cause)
	}
	return nil
}

// ReturnsBy runs call and waits for it to return, for at most limit: a call
// still running then fails t (its goroutine is left to TestMain's leak
// check). It returns call's error.
func ReturnsBy(t testing.TB, limit time.Duration, what string, call func() error) error {
	t.Helper()
	done := make(chan error, 1)
	go func() { done <- call() }()
	select {
	case err := <-done:
		return err
	case <-time.After(limit):
		t.Fatalf("%s had not returned %v later", what, limit)
		return nil
	}
}

// NamesPackageOnce fails t unless err's text starts with "pkg: " and names
// that package, and every other package of the library, at most once, and
// no internal package at all: "fencing: lock \"x\": session expired: ...",
// not "fencing: lock: fencing: session expired".
func NamesPackageOnce(t testing.TB, pkg string, err error) {
	t.Helper()
	if err == nil {
		t.Errorf("no error; want one from %s", pkg)
		return
	}
	text := err.Error()
	if !strings.HasPrefix(text, pkg+": ") {
		t.Errorf("%q does not start with %q", text, pkg+": ")
	}
	for _, p := range []string{"fencing", "guard", "election", "inspect", "revqueue", "ownwatch", "keyspace", "sessionlink"} {
		n := strings.Count(text, p+": ")
		if n > 1 || n == 1 && !slices.Contains([]string{"fencing", "guard", "election", "inspect"}, p) {
			t.Errorf("%q names %s %d times", text, p, n)
		}
	}
}

// GroupReplica runs an election.RunGroup replica of group with identity id
// over names, on cli, each work blocking until its context ends. The
// returned func stops it and waits for RunGroup to return nil; it also runs
// when the test ends, before the cleanups registered earlier (closing a cli
// made before the call).
func GroupReplica(t testing.TB, cli *clientv3.Client, group, id string, names []string) (stop func()) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		done <- election.RunGroup(ctx, cli, group, names, func(ctx context.Context, _ *election.Term) error {
			<-ctx.Done()
			return nil
		}, election.WithSessionOptions(fencing.WithIdentity(id)))
	}()
	var once sync.Once
	stop = func() {
		once.Do(func() {
			cancel()
			if err := ReturnsBy(t, Wait, "RunGroup of "+id, func() error { return <-done }); err != nil {
				t.Errorf("RunGroup of %s: %v", id, err)
			}
		})
	}
	t.Cleanup(stop)
	return stop
}
