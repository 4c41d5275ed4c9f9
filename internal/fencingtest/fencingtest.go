// Package fencingtest holds the test helpers that every package built on
// fencing needs: a session closed at the end of the test, a lock taken or
// failing the test.
package fencingtest

import (
	"context"
	"testing"
	"time"

	"github.com/leasehold/leasehold/fencing"
	"github.com/leasehold/leasehold/internal/etcdtest"
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
