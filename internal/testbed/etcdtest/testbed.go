package etcdtest

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/leasehold/leasehold/election"
	"github.com/leasehold/leasehold/fencing"
	"github.com/leasehold/leasehold/fencing/fencingtest"
	"github.com/leasehold/leasehold/internal/keyspace"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// LockKeys lists the keys queued under the lock name (default root).
func LockKeys(t testing.TB, c *fencingtest.Cluster, name string) []string {
	t.Helper()
	return Keys(t, c, keyspace.Prefix(fencing.DefaultRoot, string(fencing.KindLock), name))
}

// BlackholeTrials runs n trials side by side, each with its own proxied
// client, session (TTL ttl) and hold of the lock "<name>/<i>". setup runs in
// the test's goroutine with the trial's pieces and the channel that reports
// the deletion of the hold's key; the check it returns runs in a goroutine of
// its own, and its error fails t.
func BlackholeTrials(t *testing.T, c *fencingtest.Cluster, n int, ttl time.Duration, name string,
	setup func(s *fencing.Session, h *fencing.Hold, link *fencingtest.Link, deletion <-chan time.Time) (check func() error)) {
	t.Helper()
	BlackholeTrialsOf(t, c, n, ttl, name, lock, setup)
}

func lock(t testing.TB, s *fencing.Session, name string) *fencing.Hold {
	return fencingtest.Lock(t, s, name)
}

// BlackholeTrialsOf is BlackholeTrials with the hold taken by hold (a
// semaphore's permit, a read or write hold) on "<name>/<i>".
func BlackholeTrialsOf(t *testing.T, c *fencingtest.Cluster, n int, ttl time.Duration, name string,
	hold func(t testing.TB, s *fencing.Session, name string) *fencing.Hold,
	setup func(s *fencing.Session, h *fencing.Hold, link *fencingtest.Link, deletion <-chan time.Time) (check func() error)) {
	t.Helper()
	errs := make(chan error, n)
	for i := range n {
		cli, link := c.ProxiedClient(t)
		s := fencingtest.Session(t, cli, fencing.WithTTL(ttl))
		t.Cleanup(link.Restore) // before the session's Close, which revokes
		h := hold(t, s, fmt.Sprintf("%s/%d", name, i))
		check := setup(s, h, link, Deletion(t, c, h.Key()))
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
	if _, err := StoppedBefore(work.Done(), deletion); err != nil {
		return fmt.Errorf("%v: %w", h.Token(), err)
	}
	if cause := context.Cause(work); !errors.Is(cause, fencing.ErrLeaseUnconfirmed) {
		return fmt.Errorf("%v: cause %v; want ErrLeaseUnconfirmed", h.Token(), cause)
	}
	return nil
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
	for _, p := range []string{"fencing", "gate", "guard", "election", "inspect", "revqueue", "ownwatch", "keyspace", "sessionlink"} {
		n := strings.Count(text, p+": ")
		if n > 1 || n == 1 && !slices.Contains([]string{"fencing", "gate", "guard", "election", "inspect"}, p) {
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
	run := fencingtest.Go(t, func(ctx context.Context) error {
		return election.RunGroup(ctx, cli, group, names, func(ctx context.Context, _ *election.Term) error {
			<-ctx.Done()
			return nil
		}, election.WithSessionOptions(fencing.WithIdentity(id)))
	})
	return func() {
		if err := run(); err != nil {
			t.Errorf("RunGroup of %s: %v", id, err)
		}
	}
}
