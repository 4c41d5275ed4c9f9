package fencingtest

import (
	"context"
	"time"

	"github.com/leasehold/leasehold/fencing"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// Wait is how long the kit waits for a condition before it fails the test:
// the deadline of WaitNewLeader, Receive, Go's stop, and of
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

// mutex returns the lock name on s.
func mutex(t TB, s *fencing.Session, name string) *fencing.Mutex {
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
	h, err := mutex(t, s, name).Lock(Context(t, Wait))
	if err != nil {
		t.Fatalf("fencingtest: Lock(%q): %v", name, err)
	}
	return h
}
