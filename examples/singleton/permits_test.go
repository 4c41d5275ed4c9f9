package main

import (
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/leasehold/leasehold/examples/internal/progtest"
	"github.com/leasehold/leasehold/fencing"
	"github.com/leasehold/leasehold/fencing/fencingtest"
	"github.com/leasehold/leasehold/fencing/inspect"
	"github.com/leasehold/leasehold/internal/testbed/etcdtest"
)

// jobN is job for --permits: at start, an "overlap" line if PERMITS groups
// of earlier starts are still alive (this start would be one too many).
const jobN = `
trap 'echo "stop $$" >> "$STAMPS"; exit 0' TERM
(trap '' TERM; exec sleep 600) &
sleep 600 &
alive=0
for p in $(awk '$1 == "start" { print $2 }' "$STAMPS"); do
	if kill -0 -"$p" 2>/dev/null; then alive=$((alive+1)); fi
done
if [ "$alive" -ge "$PERMITS" ]; then echo "overlap $$ $alive" >> "$STAMPS"; fi
echo "start $$ $LEASEHOLD_KEY" >> "$STAMPS"
wait
`

// permitReplica starts one singleton running jobN under --permits permits.
func permitReplica(t *testing.T, c *fencingtest.Cluster, stamps, permits string) *progtest.Prog {
	args := append(append(append([]string{"--name", "migrations", "--permits", permits, "-v"}, tlsFlags(c)...), timing...), "--", "sh", "-c", jobN)
	return progtest.Start(t, []string{"STAMPS=" + stamps, "PERMITS=" + permits}, args...)
}

// checkPermitStamps fails t if a command started while PERMITS groups of
// earlier holds were alive, or if a command's process group outlived its
// singleton.
func checkPermitStamps(t *testing.T, stamps string) {
	t.Helper()
	ss := readStamps(t, stamps)
	for _, s := range ss {
		if s.kind == "overlap" {
			t.Errorf("command %d started while %s groups of earlier holds were alive", s.pgid, s.key)
		}
	}
	for _, s := range starts(ss) {
		if groupAlive(s.pgid) {
			t.Errorf("process group %d outlived its singleton", s.pgid)
		}
	}
}

// Four replicas, two permits: two commands run; a holder killed and a
// holder paused past its TTL each let one waiter in, never a third
// command while two groups live; a replica with another limit, or one
// without --permits, refuses to start; all exit 0 on SIGTERM, leaving no
// process and no key.
func TestPermitsAtMostN(t *testing.T) {
	etcdtest.Long(t)
	c := fencingtest.SingleTLS(t)
	stamps := newStamps(t)
	reps := []*progtest.Prog{}
	for range 4 {
		reps = append(reps, permitReplica(t, c, stamps, "2"))
	}
	running := waitStarts(t, stamps, 2, time.Minute)
	killed, _ := leaderOf(t, c, running[0].key, reps...)
	paused, _ := leaderOf(t, c, running[1].key, reps...)
	killed.Signal(t, syscall.SIGKILL)
	waitStarts(t, stamps, 3, time.Minute)
	paused.Signal(t, syscall.SIGSTOP)
	t.Cleanup(func() { syscall.Kill(paused.Pid(), syscall.SIGCONT) })
	waitStarts(t, stamps, 4, time.Minute)
	paused.Signal(t, syscall.SIGCONT)
	paused.WaitStderr(t, time.Minute, "releasing the permit")
	// The paused replica may queue again after the key of the replica of
	// another limit below: it has held a permit, so it waits for that key
	// to go rather than exit (TestPermitsOtherLimitDoesNotEndAHolder).

	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--name", "migrations", "--permits", "3"}, "limit mismatch"},
		{[]string{"--name", "migrations"}, "every replica of a name must give the same --permits"},
	} {
		args := append(append(append(tc.args, tlsFlags(c)...), timing...), "--", "true")
		if code, _, stderr := progtest.Run(t, time.Minute, nil, args...); code != 1 || !strings.Contains(stderr, tc.want) {
			t.Errorf("%q beside two permits held: exit %d (want 1), stderr lacks %q:\n%s", tc.args, code, tc.want, stderr)
		}
	}

	for _, p := range reps {
		switch {
		case p == killed:
		case p.Exited():
			t.Errorf("a replica exited (status %d) before its SIGTERM:\n%s", p.Wait(t, time.Minute), p.Stderr())
		default:
			p.Signal(t, syscall.SIGTERM)
		}
	}
	for _, p := range reps {
		if code := p.Wait(t, time.Minute); p != killed && code != 0 {
			t.Errorf("exit status after SIGTERM: %d\n%s", code, p.Stderr())
		}
	}
	checkPermitStamps(t, stamps)
	noKeysLeft(t, c)
	var stderrs strings.Builder
	for _, p := range reps {
		stderrs.WriteString(p.Stderr())
	}
	if !strings.Contains(stderrs.String(), "taking over the running record") {
		t.Error("no replica took over the killed runner's running record: its permit's record was not waited for")
	}
	if t.Failed() {
		t.Logf("stamps:\n%s", mustRead(t, stamps))
		for i, p := range reps {
			t.Logf("replica %d:\n%s", i, p.Stderr())
		}
	}
}

// A replica that has held a permit under its limit keeps trying when a
// replica with another limit gets into the queue (here while it was paused
// past its TTL): it holds again once that replica is gone, rather than exit
// and leave it the name. A mismatch that outlasts three TTLs ends it with
// status 1, as one on a first acquire does at once.
func TestPermitsOtherLimitDoesNotEndAHolder(t *testing.T) {
	etcdtest.Long(t)
	c := fencingtest.SingleTLS(t)
	stamps := newStamps(t)
	queue, err := inspect.KeyPrefix(fencing.DefaultRoot, fencing.KindSemaphore, "migrations")
	if err != nil {
		t.Fatal(err)
	}
	healthy := permitReplica(t, c, stamps, "1")
	waitStarts(t, stamps, 1, time.Minute)
	t.Cleanup(func() { syscall.Kill(healthy.Pid(), syscall.SIGCONT) })
	// slipIn pauses the healthy replica past its TTL, starts a replica of
	// limit 2 in its place, and resumes it: it meets the other limit.
	slipIn := func(starts int) *progtest.Prog {
		healthy.Signal(t, syscall.SIGSTOP)
		fencingtest.WaitFor(t, time.Minute, "the paused holder's key gone with its lease", func() bool { return len(etcdtest.Keys(t, c, queue)) == 0 })
		other := permitReplica(t, c, stamps, "2")
		waitStarts(t, stamps, starts, time.Minute)
		healthy.Signal(t, syscall.SIGCONT)
		healthy.WaitStderr(t, time.Minute, "limit mismatch")
		return other
	}
	stop := func(p *progtest.Prog, name string) {
		p.Signal(t, syscall.SIGTERM)
		if code := p.Wait(t, time.Minute); code != 0 {
			t.Errorf("%s: exit status after SIGTERM: %d\n%s", name, code, p.Stderr())
		}
	}

	other := slipIn(2)
	stop(other, "the other limit's replica")
	waitStarts(t, stamps, 3, time.Minute) // the healthy replica holds again
	if healthy.Exited() {
		t.Fatalf("the healthy replica exited:\n%s", healthy.Stderr())
	}

	other = slipIn(4)
	if code := healthy.Wait(t, time.Minute); code != 1 || !strings.Contains(healthy.Stderr(), "limit mismatch") {
		t.Errorf("a mismatch lasting beyond three TTLs: exit %d (want 1, for the limit mismatch)\n%s", code, healthy.Stderr())
	}
	stop(other, "the second replica of the other limit")

	checkPermitStamps(t, stamps)
	noKeysLeft(t, c)
	if t.Failed() {
		t.Logf("stamps:\n%s\nhealthy:\n%s", mustRead(t, stamps), healthy.Stderr())
	}
}

// Replicas started with --permits 1 follow the name's own limit once an
// operator raises it (Semaphore.SetLimit) while they run: a second command
// starts with no replica restarted, and the replica says which limit it
// follows.
func TestPermitsFollowTheNamesLimit(t *testing.T) {
	etcdtest.Long(t)
	c := fencingtest.SingleTLS(t)
	stamps := newStamps(t)
	args := append(append(append([]string{"--name", "migrations", "--permits", "1", "-v"}, tlsFlags(c)...), timing...), "--", "sh", "-c", jobN)
	var reps []*progtest.Prog
	for range 3 {
		reps = append(reps, progtest.Start(t, []string{"STAMPS=" + stamps, "PERMITS=2"}, args...))
	}
	waitStarts(t, stamps, 1, time.Minute)
	s, err := fencing.NewSession(fencingtest.Context(t, time.Minute), c.Admin)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close(fencingtest.Context(t, time.Minute))
	m, err := fencing.NewSemaphore(s, "migrations", 1)
	if err != nil {
		t.Fatal(err)
	}
	if err := m.SetLimit(fencingtest.Context(t, time.Minute), 2); err != nil {
		t.Fatal(err)
	}
	waitStarts(t, stamps, 2, time.Minute)
	fencingtest.WaitFor(t, time.Minute, "a replica to log the name's limit", func() bool {
		for _, p := range reps {
			if strings.Contains(p.Stderr(), "following the name's own limit") {
				return true
			}
		}
		return false
	})
	for _, p := range reps {
		p.Signal(t, syscall.SIGTERM)
	}
	for _, p := range reps {
		if code := p.Wait(t, time.Minute); code != 0 {
			t.Errorf("exit status after SIGTERM: %d\n%s", code, p.Stderr())
		}
	}
	checkPermitStamps(t, stamps)
	// The limit is the name's until an operator deletes it.
	if _, err := c.Admin.Delete(fencingtest.Context(t, time.Minute), "leasehold/migrations#semaphore"); err != nil {
		t.Fatal(err)
	}
	noKeysLeft(t, c)
}
