package main

import (
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/leasehold/leasehold/examples/internal/progtest"
	"github.com/leasehold/leasehold/fencing/fencingtest"
	"github.com/leasehold/leasehold/internal/testbed/etcdtest"
	clientv3 "go.etcd.io/etcd/client/v3"
)

func TestMain(m *testing.M) { progtest.Main(m, main) }

// job is the command under test. It forks a grandchild that ignores SIGTERM,
// so only the keeper's SIGKILL ends its group, and it checks at start, in
// band, whether any process of the previous term's group is still alive: an
// "overlap" line in the stamps file is a broken guarantee, observed at the
// very moment it happened.
const job = `
trap 'echo "stop $$" >> "$STAMPS"; exit 0' TERM
(trap '' TERM; exec sleep 600) &
sleep 600 &
prev=$(awk '$1 == "start" { p = $2 } END { print p }' "$STAMPS")
if [ -n "$prev" ] && kill -0 -"$prev" 2>/dev/null; then echo "overlap $$ $prev" >> "$STAMPS"; fi
echo "start $$ $LEASEHOLD_KEY" >> "$STAMPS"
wait
`

// Test timing: TTL 5 s, so the margin (0.5 s + grace) stays under TTL/2.
var timing = []string{"--ttl", "5s", "--grace", "1s"}

func tlsFlags(c *fencingtest.Cluster) []string {
	return []string{"--endpoints", strings.Join(c.Endpoints(), ","), "--cacert", c.TLS.CA, "--cert", c.TLS.Cert, "--key", c.TLS.Key}
}

// newStamps returns an empty stamps file for job.
func newStamps(t *testing.T) string {
	f := filepath.Join(t.TempDir(), "stamps")
	if err := os.WriteFile(f, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	return f
}

// replica starts one singleton running job for name, stamping into stamps.
func replica(t *testing.T, c *fencingtest.Cluster, stamps, name string) *progtest.Prog {
	args := append(append(append([]string{"--name", name, "-v"}, tlsFlags(c)...), timing...), "--", "sh", "-c", job)
	return progtest.Start(t, []string{"STAMPS=" + stamps}, args...)
}

type stamp struct {
	kind string // start, stop, overlap
	pgid int
	key  string // the term's key, on start lines
}

func readStamps(t *testing.T, file string) []stamp {
	b, err := os.ReadFile(file)
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		t.Fatal(err)
	}
	var out []stamp
	for _, line := range strings.Split(strings.TrimSpace(string(b)), "\n") {
		f := strings.Fields(line)
		if len(f) < 2 {
			continue
		}
		pgid, _ := strconv.Atoi(f[1])
		s := stamp{kind: f[0], pgid: pgid}
		if len(f) > 2 {
			s.key = f[2]
		}
		out = append(out, s)
	}
	return out
}

func starts(ss []stamp) []stamp {
	var out []stamp
	for _, s := range ss {
		if s.kind == "start" {
			out = append(out, s)
		}
	}
	return out
}

func waitStarts(t *testing.T, stamps string, n int, d time.Duration) []stamp {
	t.Helper()
	var got []stamp
	fencingtest.WaitFor(t, d, strconv.Itoa(n)+" command starts", func() bool {
		got = starts(readStamps(t, stamps))
		return len(got) >= n
	})
	return got
}

// checkOneAtATime fails t if two commands' lifetimes overlapped: no start
// saw a live process of the previous group, every start but the last was
// followed by its stop before the next start, and every group but the
// current one is empty.
func checkOneAtATime(t *testing.T, stamps string) {
	t.Helper()
	ss := readStamps(t, stamps)
	running := 0
	for _, s := range ss {
		switch s.kind {
		case "overlap":
			t.Errorf("command %d started while group %s of the previous term was alive", s.pgid, s.key)
		case "start":
			if running != 0 {
				t.Errorf("command %d started while command %d had not stopped", s.pgid, running)
			}
			running = s.pgid
		case "stop":
			if s.pgid != running {
				t.Errorf("stop of %d, but %d was running", s.pgid, running)
			}
			running = 0
		}
	}
	all := starts(ss)
	for i, s := range all {
		if i < len(all)-1 && groupAlive(s.pgid) {
			t.Errorf("process group %d of an ended term is still alive", s.pgid)
		}
	}
	if t.Failed() {
		t.Logf("stamps:\n%s", mustRead(t, stamps))
	}
}

func mustRead(t *testing.T, file string) string {
	b, _ := os.ReadFile(file)
	return string(b)
}

// leaderOf returns the replica whose term wrote key, and the key's lease.
func leaderOf(t *testing.T, c *fencingtest.Cluster, key string, reps ...*progtest.Prog) (*progtest.Prog, clientv3.LeaseID) {
	t.Helper()
	resp, err := c.Admin.Get(fencingtest.Context(t, 10*time.Second), key)
	if err != nil || len(resp.Kvs) == 0 {
		t.Fatalf("term key %q: %v (%d keys)", key, err, len(resp.Kvs))
	}
	v := string(resp.Kvs[0].Value)
	for _, p := range reps {
		if strings.HasSuffix(v, "/"+strconv.Itoa(p.Pid())) {
			return p, clientv3.LeaseID(resp.Kvs[0].Lease)
		}
	}
	t.Fatalf("term key %q has value %q: no replica of ours", key, v)
	return nil, 0
}

// Each fault that ends a term: the next command starts only once the
// previous one's whole process group is gone.
func TestAtMostOneCommand(t *testing.T) {
	for _, tc := range []struct {
		name  string
		fault func(t *testing.T, c *fencingtest.Cluster, leader *progtest.Prog, key string, lease clientv3.LeaseID)
	}{
		{"key deleted", func(t *testing.T, c *fencingtest.Cluster, _ *progtest.Prog, key string, _ clientv3.LeaseID) {
			c.Delete(t, key)
		}},
		{"lease revoked", func(t *testing.T, c *fencingtest.Cluster, _ *progtest.Prog, _ string, lease clientv3.LeaseID) {
			c.Revoke(t, lease)
		}},
		{"runner killed", func(t *testing.T, _ *fencingtest.Cluster, leader *progtest.Prog, _ string, _ clientv3.LeaseID) {
			leader.Signal(t, syscall.SIGKILL)
		}},
		{"runner paused past the TTL", func(t *testing.T, _ *fencingtest.Cluster, leader *progtest.Prog, _ string, _ clientv3.LeaseID) {
			leader.Signal(t, syscall.SIGSTOP)
			t.Cleanup(func() { syscall.Kill(leader.Pid(), syscall.SIGCONT) })
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			c := fencingtest.SingleTLS(t)
			stamps := newStamps(t)
			a, b := replica(t, c, stamps, "job"), replica(t, c, stamps, "job")
			first := waitStarts(t, stamps, 1, time.Minute)[0]
			leader, lease := leaderOf(t, c, first.key, a, b)
			tc.fault(t, c, leader, first.key, lease)
			waitStarts(t, stamps, 2, time.Minute)
			checkOneAtATime(t, stamps)
			if t.Failed() {
				t.Logf("replica a:\n%s\nreplica b:\n%s", a.Stderr(), b.Stderr())
			}
		})
	}
}

// A paused runner resumed after another took over does not run its command
// again alongside, and both shut down cleanly, leaving no key.
func TestPausedRunnerResumes(t *testing.T) {
	etcdtest.Long(t)
	c := fencingtest.SingleTLS(t)
	stamps := newStamps(t)
	a, b := replica(t, c, stamps, "job"), replica(t, c, stamps, "job")
	first := waitStarts(t, stamps, 1, time.Minute)[0]
	leader, _ := leaderOf(t, c, first.key, a, b)
	leader.Signal(t, syscall.SIGSTOP)
	waitStarts(t, stamps, 2, time.Minute)
	leader.Signal(t, syscall.SIGCONT)
	leader.WaitStderr(t, time.Minute, "stopped leading")
	for _, p := range []*progtest.Prog{a, b} {
		p.Signal(t, syscall.SIGTERM)
	}
	for _, p := range []*progtest.Prog{a, b} {
		if code := p.Wait(t, time.Minute); code != 0 {
			t.Errorf("exit status after SIGTERM: %d\n%s", code, p.Stderr())
		}
	}
	checkOneAtATime(t, stamps)
	all := starts(readStamps(t, stamps))
	if last := all[len(all)-1]; groupAlive(last.pgid) {
		t.Errorf("the last command's group %d outlived singleton", last.pgid)
	}
	noKeysLeft(t, c)
}

func noKeysLeft(t *testing.T, c *fencingtest.Cluster) {
	t.Helper()
	if keys := etcdtest.Keys(t, c, "leasehold/"); len(keys) != 0 {
		t.Errorf("keys left under leasehold/: %q", keys)
	}
}

// The command sees its token; its success ends singleton with status 0 and
// no key left.
func TestCommandSucceeds(t *testing.T) {
	c := fencingtest.SingleTLS(t)
	args := append(append([]string{"--name", "once"}, tlsFlags(c)...), "--", "sh", "-c", `echo "token=$LEASEHOLD_TOKEN"`)
	code, stdout, stderr := progtest.Run(t, time.Minute, nil, args...)
	if code != 0 || !strings.Contains(stdout, "token=once@") {
		t.Fatalf("exit %d, stdout %q\nstderr:\n%s", code, stdout, stderr)
	}
	for _, want := range []string{"campaigning", "leading", "command succeeded"} {
		if !strings.Contains(stderr, want) {
			t.Errorf("stderr lacks %q:\n%s", want, stderr)
		}
	}
	noKeysLeft(t, c)
}

// SIGTERM stops the command's whole group, resigns and exits 0.
func TestInterruptStopsTheGroup(t *testing.T) {
	c := fencingtest.SingleTLS(t)
	stamps := newStamps(t)
	p := replica(t, c, stamps, "job")
	first := waitStarts(t, stamps, 1, time.Minute)[0]
	p.Signal(t, syscall.SIGTERM)
	if code := p.Wait(t, time.Minute); code != 0 {
		t.Fatalf("exit status %d\n%s", code, p.Stderr())
	}
	if groupAlive(first.pgid) {
		t.Errorf("group %d outlived singleton", first.pgid)
	}
	if !strings.Contains(p.Stderr(), "SIGKILL") {
		t.Errorf("the SIGTERM-ignoring grandchild was not SIGKILLed:\n%s", p.Stderr())
	}
	if ss := readStamps(t, stamps); ss[len(ss)-1].kind != "stop" {
		t.Errorf("the command's own SIGTERM trap did not run (a signal ignored on exec?):\n%s", mustRead(t, stamps))
	}
	checkOneAtATime(t, stamps)
	noKeysLeft(t, c)
}

func TestCommandLine(t *testing.T) {
	c := fencingtest.SingleTLS(t)
	ep := c.Endpoints()[0]
	for _, tc := range []struct {
		name string
		args []string
		code int
		want string
	}{
		{"help", []string{"--help"}, 0, "usage: singleton"},
		{"no name", []string{"--", "true"}, 2, "--name (or --group) is required"},
		{"name and group", []string{"--name", "x", "--group", "g", "--names", "a", "--", "true"}, 2, "not both"},
		{"group without names", []string{"--group", "g", "--", "true"}, 2, "--group needs --names"},
		{"names without group", []string{"--name", "x", "--names", "a", "--", "true"}, 2, "--names needs --group"},
		{"name twice", []string{"--group", "g", "--names", "a,b,a", "--", "true"}, 2, `"a" twice`},
		{"bad name in group", []string{"--group", "g", "--names", "a,b#c", "--", "true"}, 2, "--names"},
		{"no command", []string{"--name", "x"}, 2, "no command"},
		{"no permits", []string{"--name", "x", "--permits", "0", "--", "true"}, 2, "--permits 0: want 1 or more"},
		{"permits and group", []string{"--group", "g", "--names", "a", "--permits", "2", "--", "true"}, 2, "--permits does not go with --group"},
		{"grace too long", []string{"--name", "x", "--ttl", "10s", "--grace", "10s", "--", "true"}, 2, "use --ttl 26s or more"},
		{"grace rule stated", []string{"--name", "x", "--ttl", "5s", "--grace", "5s", "--", "true"}, 2, "max(TTL/10, 500ms)"},
		{"bad name", []string{"--name", "", "--", "true"}, 2, "--name"},
		{"unreachable", []string{"--name", "x", "--endpoints", "127.0.0.1:1", "--dial-timeout", "2s", "--", "true"}, 1, "127.0.0.1:1"},
		{"unreachable with permits", []string{"--name", "x", "--permits", "2", "--endpoints", "127.0.0.1:1", "--dial-timeout", "2s", "--", "true"}, 1, "127.0.0.1:1"},
		{"unreachable group", []string{"--group", "g", "--names", "a,b", "--endpoints", "127.0.0.1:1", "--dial-timeout", "2s", "--", "true"}, 1, "127.0.0.1:1"},
		{"wrong CA", []string{"--name", "x", "--endpoints", ep, "--cacert", c.TLS.WrongCA, "--cert", c.TLS.Cert, "--key", c.TLS.Key,
			"--dial-timeout", "2s", "--", "true"}, 1, "unknown authority"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			code, _, stderr := progtest.Run(t, time.Minute, nil, tc.args...)
			if code != tc.code || !strings.Contains(stderr, tc.want) {
				t.Fatalf("exit %d (want %d), stderr lacks %q:\n%s", code, tc.code, tc.want, stderr)
			}
		})
	}
}

// The environment works like etcdctl's.
func TestEnvironment(t *testing.T) {
	c := fencingtest.SingleTLS(t)
	env := []string{"ETCDCTL_ENDPOINTS=" + c.Endpoints()[0], "ETCDCTL_CACERT=" + c.TLS.CA, "ETCDCTL_CERT=" + c.TLS.Cert, "ETCDCTL_KEY=" + c.TLS.Key}
	code, stdout, stderr := progtest.Run(t, time.Minute, env, "--name", "env", "--", "echo", "ran")
	if code != 0 || strings.TrimSpace(stdout) != "ran" {
		t.Fatalf("exit %d, stdout %q\n%s", code, stdout, stderr)
	}
}

func TestMargin(t *testing.T) {
	for _, tc := range []struct {
		ttl, grace, margin time.Duration
	}{
		{20 * time.Second, 5 * time.Second, 7 * time.Second},
		{5 * time.Second, time.Second, 1500 * time.Millisecond},
		{2500 * time.Millisecond, 100 * time.Millisecond, 600 * time.Millisecond}, // TTL rounds up to 3 s
	} {
		m, err := config{ttl: tc.ttl, grace: tc.grace}.margin()
		if err != nil || m != tc.margin {
			t.Errorf("margin(ttl %v, grace %v) = %v, %v; want %v", tc.ttl, tc.grace, m, err, tc.margin)
		}
	}
	if _, err := (config{ttl: 10 * time.Second, grace: 4 * time.Second}).margin(); err == nil {
		t.Error("grace 4s with TTL 10s: accepted, but 1s + 4s is not under 5s")
	}
}
