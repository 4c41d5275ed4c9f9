package fencingtest

import (
	"context"
	"sync"
	"time"

	"github.com/leasehold/leasehold/election"
	"github.com/leasehold/leasehold/fencing"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// Wait is how long the kit waits for a condition before it fails the test:
// the deadline of WaitNewLeader, WaitNoKeys, Receive, Next, Go's stop, and of
// the calls Session and Lock make. Pass it to Ended and WaitFor for the same.
const Wait = 30 * time.Second

// Session returns a new session on cli; t.Cleanup closes it.
func Session(t TB, cli *clientv3.Client, opts ...fencing.SessionOption) *fencing.Session {
	t.Helper()
	s, err := fencing.NewSession(Context(t, Wait), cli, opts...)
	if err != nil {
		t.Fatalf("fencingtest: NewSession: %v", err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		s.Close(ctx)
	})
	return s
}

// Mutex returns the lock name on s.
func Mutex(t TB, s *fencing.Session, name string) *fencing.Mutex {
	t.Helper()
	m, err := fencing.NewMutex(s, name)
	if err != nil {
		t.Fatalf("fencingtest: NewMutex(%q): %v", name, err)
	}
	return m
}

// Lock acquires the lock name on s.
func Lock(t TB, s *fencing.Session, name string) *fencing.Hold {
	t.Helper()
	h, err := Mutex(t, s, name).Lock(Context(t, Wait))
	if err != nil {
		t.Fatalf("fencingtest: Lock(%q): %v", name, err)
	}
	return h
}

// Election returns the election name on s.
func Election(t TB, s *fencing.Session, name string) *election.Election {
	t.Helper()
	e, err := election.New(s, name)
	if err != nil {
		t.Fatalf("fencingtest: election.New(%q): %v", name, err)
	}
	return e
}

// Next receives the next observation from obs, failing t if none comes
// within Wait or obs closes.
func Next(t TB, obs <-chan election.Observation) election.Observation {
	t.Helper()
	return Receive(t, obs, "an observation")
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

// ReturnsBy runs call and waits for it to return, for at most limit: a call
// still running then fails t (its goroutine is left to TestMain's leak
// check). It returns call's error.
func ReturnsBy(t TB, limit time.Duration, what string, call func() error) error {
	t.Helper()
	done := make(chan error, 1)
	go func() { done <- call() }()
	select {
	case err := <-done:
		return err
	case <-time.After(limit):
		t.Fatalf("fencingtest: %s had not returned %v later", what, limit)
		return nil
	}
}
