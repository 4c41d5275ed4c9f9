package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"reflect"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/leasehold/leasehold/election"
	"github.com/leasehold/leasehold/examples/internal/progtest"
	"github.com/leasehold/leasehold/fencing"
	"github.com/leasehold/leasehold/fencing/fencingtest"
	"github.com/leasehold/leasehold/fencing/inspect"
	"github.com/leasehold/leasehold/internal/testbed/etcdtest"
)

func TestMain(m *testing.M) { progtest.Main(m, main) }

func runInspect(t *testing.T, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	var out, errOut bytes.Buffer
	code = run(fencingtest.Context(t, fencingtest.Wait), args, &out, &errOut)
	return code, out.String(), errOut.String()
}

// queue makes an owner and a waiter of the lock name; the waiter's Lock
// returns when the test ends.
func queue(t *testing.T, c *fencingtest.Cluster, name string) *fencing.Hold {
	owner := fencingtest.Lock(t, fencingtest.Session(t, c.Client(t), fencing.WithIdentity("host-a/1")), name)
	waiter := etcdtest.Mutex(t, fencingtest.Session(t, c.Client(t), fencing.WithIdentity("host-b/2")), name)
	done := make(chan struct{})
	go func() {
		defer close(done)
		h, err := waiter.Lock(t.Context())
		if err == nil {
			<-t.Context().Done() // hold until the test ends: every state stays visible
			h.Unlock(context.Background())
		}
	}()
	t.Cleanup(func() { <-done })
	fencingtest.WaitFor(t, fencingtest.Wait, "the waiter to queue", func() bool {
		prefix, err := inspect.KeyPrefix(fencing.DefaultRoot, fencing.KindLock, name)
		return err == nil && len(etcdtest.Keys(t, c, prefix)) == 2
	})
	return owner
}

func TestNoEndpointsExplainsHowToConnect(t *testing.T) {
	t.Setenv("ETCDCTL_ENDPOINTS", "")
	code, _, stderr := runInspect(t, "jobs/billing")
	if code != 2 || !strings.Contains(stderr, "--endpoints") || !strings.Contains(stderr, "ETCDCTL_ENDPOINTS") {
		t.Fatalf("exit %d, stderr:\n%s", code, stderr)
	}
	if code, _, _ := runInspect(t, "--endpoints", "x", "a", "b"); code != 2 {
		t.Fatalf("two names: exit %d; want 2", code)
	}
	if code, _, _ := runInspect(t, "--endpoints", "x", "-o", "yaml", "a"); code != 2 {
		t.Fatalf("-o yaml: exit %d; want 2", code)
	}
}

func TestTableShowsOwnerFirst(t *testing.T) {
	c := fencingtest.Single(t)
	owner := queue(t, c, "jobs/billing")
	code, out, stderr := runInspect(t, "--endpoints", c.Endpoints()[0], "jobs/billing")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	t.Logf("output:\n%s", out)
	lines := strings.Split(out, "\n")
	var rows []string
	for _, l := range lines {
		if strings.HasPrefix(l, "  owner") || strings.HasPrefix(l, "  waiter") {
			rows = append(rows, l)
		}
	}
	if !strings.Contains(out, `lock "jobs/billing"`) || len(rows) != 2 {
		t.Fatalf("output:\n%s", out)
	}
	if !strings.Contains(rows[0], owner.Token().String()) || !strings.Contains(rows[0], "host-a/1") || !strings.Contains(rows[1], "host-b/2") {
		t.Fatalf("owner not first, or identities missing:\n%s", out)
	}
	if code, out, _ := runInspect(t, "--endpoints", c.Endpoints()[0], "free"); code != 0 || !strings.Contains(out, "free") {
		t.Fatalf("free lock: exit %d, output:\n%s", code, out)
	}
}

// The JSON output decodes into the library's types and encodes back to the
// same bytes.
func TestJSONRoundTrips(t *testing.T) {
	c := fencingtest.Single(t)
	queue(t, c, "jobs/a")
	queue(t, c, "jobs/b")
	code, out, stderr := runInspect(t, "--endpoints", c.Endpoints()[0], "--prefix", "jobs/", "-o", "json")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	var qs []inspect.Queue
	if err := json.Unmarshal([]byte(out), &qs); err != nil {
		t.Fatal(err)
	}
	if len(qs) != 2 || qs[0].Name != "jobs/a" || len(qs[1].Entries) != 2 || qs[1].Entries[1].Value != "host-b/2" {
		t.Fatalf("decoded %+v", qs)
	}
	again, err := json.Marshal(qs)
	if err != nil {
		t.Fatal(err)
	}
	if strings.TrimSpace(out) != string(again) {
		t.Fatalf("round trip changed the JSON:\n%s\n%s", out, again)
	}
}

// --watch redraws when the owner hands over.
func TestWatchRedrawsOnHandover(t *testing.T) {
	c := fencingtest.Single(t)
	owner := queue(t, c, "watched")
	ctx, cancel := context.WithCancel(t.Context())
	var out etcdtest.Buffer
	done := make(chan int)
	go func() { done <- run(ctx, []string{"--endpoints", c.Endpoints()[0], "--watch", "watched"}, &out, &out) }()
	fencingtest.WaitFor(t, fencingtest.Wait, "the first table", func() bool { return strings.Contains(out.String(), "host-b/2") })
	if err := owner.Unlock(t.Context()); err != nil {
		t.Fatal(err)
	}
	fencingtest.WaitFor(t, fencingtest.Wait, "a table with the waiter as owner", func() bool {
		return strings.Contains(out.String(), "1 waiting") && strings.Contains(out.String(), "0 waiting")
	})
	cancel()
	if code := <-done; code != 0 {
		t.Fatalf("watch exit %d:\n%s", code, out.String())
	}
}

func TestExplainPrintsBudget(t *testing.T) {
	code, out, _ := runInspect(t, "--explain")
	if code != 0 || !strings.Contains(out, "≤ 10.5s") || !strings.Contains(out, "safety margin 1s") {
		t.Fatalf("exit %d:\n%s", code, out)
	}
	if code, out, _ := runInspect(t, "--explain", "--ttl", "2500ms"); code != 0 || !strings.Contains(out, "lease TTL 3s") {
		t.Fatalf("TTL rounded up as etcd does: exit %d:\n%s", code, out)
	}
}

func TestBadCommandLinesExitTwo(t *testing.T) {
	for _, args := range [][]string{
		{"--endpoints", "x", "--kind", "mutex", "a"},
		{"--endpoints", "x", "--cert", "c.pem", "a"},
		{"--endpoints", "x", "bad\x00name"},
		{"--endpoints", "x", "--prefix", "p", "a"},
		{"--explain", "--ttl", "1s"},
		{"--explain", "--ttl", "4s", "--margin", "2s"},
		{"--endpoints", "x", "--group", "g", "a"},
		{"--endpoints", "x", "--group", "g", "--prefix", "p"},
		{"--endpoints", "x", "--group", "g", "--kind", "election"},
		{"--endpoints", "x", "--group", "a#b"},
		{"--endpoints", "x", "--group", ""},
	} {
		if code, _, stderr := runInspect(t, args...); code != 2 || stderr == "" {
			t.Errorf("inspect %q: exit %d, stderr %q; want 2 and a reason", args, code, stderr)
		}
	}
}

// Flags may follow the name, and printable values stay on one line.
func TestFlagsAfterName(t *testing.T) {
	c := fencingtest.Single(t)
	queue(t, c, "after")
	code, out, stderr := runInspect(t, "after", "--endpoints", c.Endpoints()[0], "-o", "json")
	if code != 0 || !strings.HasPrefix(out, "[") {
		t.Fatalf("exit %d, stdout %q, stderr %q", code, out, stderr)
	}
	if got := printable(strings.Repeat("é", 50) + "\n"); strings.Contains(got, "\n") || !strings.HasSuffix(got, "…\"") {
		t.Fatalf("printable = %s", got)
	}
}

// An unreachable cluster is a failure to read (exit 1), with the reason.
func TestUnreachableEtcdExitsOne(t *testing.T) {
	for _, what := range [][]string{{"n"}, {"--group", "g"}} {
		code, _, stderr := runInspect(t, append([]string{"--endpoints", "127.0.0.1:1", "--timeout", "300ms"}, what...)...)
		if code != 1 || !strings.Contains(stderr, "inspect:") {
			t.Fatalf("%q: exit %d, stderr %q; want 1 and the reason", what, code, stderr)
		}
	}
}

// As a user runs it: a built program, TLS with client certificates from
// etcdctl's environment variables, --help, a wrong CA, nothing listening.
func TestProgramWithTLS(t *testing.T) {
	c := fencingtest.SingleTLS(t)
	queue(t, c, "jobs/billing")
	env := []string{"ETCDCTL_ENDPOINTS=" + c.Endpoints()[0], "ETCDCTL_CACERT=" + c.TLS.CA,
		"ETCDCTL_CERT=" + c.TLS.Cert, "ETCDCTL_KEY=" + c.TLS.Key}
	code, out, stderr := progtest.Run(t, time.Minute, env, "jobs/billing")
	if code != 0 || !strings.Contains(out, `"host-a/1"`) {
		t.Fatalf("with ETCDCTL_* TLS settings: exit %d\n%s\n%s", code, out, stderr)
	}
	flags := []string{"--endpoints", c.Endpoints()[0], "--cacert", c.TLS.CA, "--cert", c.TLS.Cert, "--key", c.TLS.Key, "jobs/billing"}
	if code, out, stderr := progtest.Run(t, time.Minute, nil, flags...); code != 0 || !strings.Contains(out, `"host-a/1"`) {
		t.Fatalf("with TLS flags: exit %d\n%s\n%s", code, out, stderr)
	}
	group := []string{"--endpoints", c.Endpoints()[0], "--cacert", c.TLS.CA, "--cert", c.TLS.Cert, "--key", c.TLS.Key, "--group", "nobody"}
	if code, out, stderr := progtest.Run(t, time.Minute, nil, group...); code != 0 || !strings.Contains(out, `group "nobody"`) {
		t.Fatalf("--group with TLS flags: exit %d\n%s\n%s", code, out, stderr)
	}
	if code, _, stderr := progtest.Run(t, time.Minute, nil, "--help"); code != 0 || !strings.Contains(stderr, "usage: inspect") {
		t.Fatalf("--help: exit %d\n%s", code, stderr)
	}
	ep := c.Endpoints()[0]
	for _, tc := range []struct {
		name string
		args []string
		want string
	}{
		{"wrong CA", []string{"--endpoints", ep, "--cacert", c.TLS.WrongCA, "--cert", c.TLS.Cert, "--key", c.TLS.Key}, "unknown authority"},
		{"unreachable", []string{"--endpoints", "127.0.0.1:1"}, "127.0.0.1:1"},
	} {
		args := append(tc.args, "--dial-timeout", "2s", "jobs/billing")
		if code, _, stderr := progtest.Run(t, time.Minute, nil, args...); code != 1 || !strings.Contains(stderr, tc.want) {
			t.Errorf("%s: exit %d (want 1), stderr lacks %q:\n%s", tc.name, code, tc.want, stderr)
		}
	}
}

// A name free as the kind asked for, but held or led as the other kind,
// gets a hint that says so, instead of "free" alone.
func TestHintsTheOtherKind(t *testing.T) {
	c := fencingtest.Single(t)
	e, err := election.New(fencingtest.Session(t, c.Client(t)), "reports")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := e.Campaign(fencingtest.Context(t, fencingtest.Wait), "me"); err != nil {
		t.Fatal(err)
	}
	queue(t, c, "jobs/billing")
	ep := c.Endpoints()[0]
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"reports"}, `inspect: no lock named "reports"; an election named "reports" has a leader ("me"): use --kind election`},
		{[]string{"--kind", "election", "jobs/billing"}, `inspect: no election named "jobs/billing"; a lock named "jobs/billing" is held (by "host-a/1"): use --kind lock`},
	} {
		code, out, stderr := runInspect(t, append([]string{"--endpoints", ep}, tc.args...)...)
		if code != 0 || !strings.Contains(out, "free") || !strings.Contains(stderr, tc.want) {
			t.Errorf("inspect %q: exit %d\nstdout:\n%s\nstderr:\n%s\nwant on stderr: %s", tc.args, code, out, stderr, tc.want)
		}
	}
	if _, _, stderr := runInspect(t, "--endpoints", ep, "nothing"); stderr != "" {
		t.Errorf("a name free as both kinds got a hint: %s", stderr)
	}
}

// The JSON output has one naming style (snake_case keys, the token as
// {"name","revision"}), and gives each lease in hex, as the table does.
func TestJSONStyleMatchesTable(t *testing.T) {
	c := fencingtest.Single(t)
	owner := queue(t, c, "jobs/style")
	ep := c.Endpoints()[0]
	_, table, _ := runInspect(t, "--endpoints", ep, "jobs/style")
	code, out, stderr := runInspect(t, "--endpoints", ep, "-o", "json", "jobs/style")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	var doc any
	if err := json.Unmarshal([]byte(out), &doc); err != nil {
		t.Fatal(err)
	}
	snake := regexp.MustCompile(`^[a-z][a-z0-9_]*$`)
	var walk func(v any)
	walk = func(v any) {
		switch v := v.(type) {
		case map[string]any:
			for k, x := range v {
				if !snake.MatchString(k) {
					t.Errorf("JSON key %q is not snake_case:\n%s", k, out)
				}
				walk(x)
			}
		case []any:
			for _, x := range v {
				walk(x)
			}
		}
	}
	walk(doc)
	lease := fmt.Sprintf("%x", int64(owner.Session().Lease()))
	tok := fmt.Sprintf(`"token":{"name":"jobs/style","revision":%d,"cluster":"%d"}`, owner.Token().Revision, owner.Token().Cluster)
	if !strings.Contains(out, `"lease":"`+lease+`"`) || !strings.Contains(table, " "+lease+" ") || !strings.Contains(out, tok) {
		t.Errorf("lease %s, token %s: JSON and table disagree:\n%s\n%s", lease, tok, out, table)
	}
}

// --watch -o json keeps stdout for JSON: a failed redraw is logged on
// stderr, with the reason, and the watch goes on.
func TestWatchJSONLogsProblems(t *testing.T) {
	c := fencingtest.Single(t) // no sessions: their cleanups would wait for the stopped member
	ctx, cancel := context.WithCancel(t.Context())
	var out, errOut etcdtest.Buffer
	done := make(chan int)
	go func() {
		done <- run(ctx, []string{"--endpoints", c.Endpoints()[0], "--watch", "-o", "json", "--timeout", "1s", "watched"}, &out, &errOut)
	}()
	fencingtest.WaitFor(t, fencingtest.Wait, "the first JSON document", func() bool { return strings.Contains(out.String(), `"name":"watched"`) })
	c.Stop(0)
	fencingtest.WaitFor(t, fencingtest.Wait, "a logged problem", func() bool {
		return strings.Contains(errOut.String(), "could not read etcd; retrying")
	})
	cancel()
	if code := <-done; code != 0 {
		t.Fatalf("watch exit %d:\n%s", code, errOut.String())
	}
	for _, line := range strings.Split(strings.TrimSpace(out.String()), "\n") {
		if !json.Valid([]byte(line)) {
			t.Fatalf("stdout line is not JSON: %q", line)
		}
	}
}

// --root reads the queues of services that use fencing.WithRoot; without it,
// inspect looks under leasehold/ and finds nothing. A bad root or a prefix no
// name starts is a usage error.
func TestRootFlag(t *testing.T) {
	c := fencingtest.Single(t)
	s := fencingtest.Session(t, c.Client(t), fencing.WithRoot("billing/locks/"), fencing.WithIdentity("host-r/1"))
	fencingtest.Lock(t, s, "jobs/x")
	code, out, stderr := runInspect(t, "--endpoints", c.Endpoints()[0], "--root", "billing/locks/", "--prefix", "jobs/")
	if code != 0 || !strings.Contains(out, `lock "jobs/x"`) || !strings.Contains(out, "host-r/1") {
		t.Fatalf("--root: exit %d, stderr %s, output:\n%s", code, stderr, out)
	}
	if code, out, _ := runInspect(t, "--endpoints", c.Endpoints()[0], "--prefix", "jobs/"); code != 0 || strings.Contains(out, "host-r/1") {
		t.Fatalf("default root: exit %d, output:\n%s", code, out)
	}
	for _, bad := range [][]string{{"--root", "", "x"}, {"--prefix", "a#"}} {
		if code, _, _ := runInspect(t, append([]string{"--endpoints", c.Endpoints()[0]}, bad...)...); code != 2 {
			t.Errorf("%q: exit %d; want 2", bad, code)
		}
	}
}

// replica runs a RunGroup replica of group over names, with identity id,
// until the test ends.
func replica(t *testing.T, c *fencingtest.Cluster, group, id string, names []string) {
	etcdtest.GroupReplica(t, c.Client(t), group, id, names)
}

// waitGroup waits until group has replicas members and every name is led
// by the replica the group assigns it to, and returns it.
func waitGroup(t *testing.T, c *fencingtest.Cluster, group string, replicas int) election.Group {
	t.Helper()
	var g election.Group
	fencingtest.WaitFor(t, fencingtest.Wait, fmt.Sprintf("%d replicas, balanced", replicas), func() bool {
		var err error
		g, err = election.ReadGroup(t.Context(), c.Admin, fencing.DefaultRoot, group)
		return err == nil && len(g.Replicas) == replicas && g.Misplaced == 0
	})
	return g
}

// As a user runs it: --group shows the replicas and who leads each name,
// as a table and as JSON.
func TestProgramShowsGroup(t *testing.T) {
	c := fencingtest.Single(t)
	names := []string{"jobs/a", "jobs/b", "jobs/c", "jobs/d", "jobs/e"}
	replica(t, c, "jobs", "host-a/1", names)
	replica(t, c, "jobs", "host-b/2", names)
	g := waitGroup(t, c, "jobs", 2)
	ep := c.Endpoints()[0]
	code, out, stderr := progtest.Run(t, time.Minute, nil, "--endpoints", ep, "--group", "jobs")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	t.Logf("output:\n%s", out)
	if !strings.Contains(out, `group "jobs" at revision `) || !strings.Contains(out, ": replicas 2, names 5, cap 3, misplaced 0, excess 0") {
		t.Fatalf("no summary line:\n%s", out)
	}
	for _, r := range g.Replicas {
		row := fmt.Sprintf(`(?m)^  "%s"\s+%x\s+%d\s+%d\s+5\s+0\s+%d\s+1\s+-$`, regexp.QuoteMeta(r.Identity), int64(r.Lease), r.Leads, r.Assigned, r.Cap)
		if !regexp.MustCompile(row).MatchString(out) {
			t.Errorf("no row %s:\n%s", row, out)
		}
	}
	for _, n := range g.Names {
		row := fmt.Sprintf(`(?m)^  "%s"\s+"%s"\s+"%s"\s+%d$`, n.Name, n.Assigned, n.Leader.Value, n.Leader.Token.Revision)
		if !regexp.MustCompile(row).MatchString(out) {
			t.Errorf("no row %s:\n%s", row, out)
		}
	}

	code, out, stderr = progtest.Run(t, time.Minute, nil, "--endpoints", ep, "--group", "jobs", "-o", "json")
	if code != 0 || strings.Count(out, "\n") != 1 {
		t.Fatalf("-o json: exit %d, want one line:\n%s\n%s", code, out, stderr)
	}
	var got election.Group
	if err := json.Unmarshal([]byte(out), &got); err != nil {
		t.Fatal(err)
	}
	got.Revision = g.Revision // nothing the test compares changes between the reads
	if !reflect.DeepEqual(got, g) {
		t.Fatalf("JSON says\n%+v\nReadGroup says\n%+v", got, g)
	}
	if code, out, _ := progtest.Run(t, time.Minute, nil, "--endpoints", ep, "--group", "nobody"); code != 0 ||
		!strings.Contains(out, `group "nobody" at revision`) || !strings.Contains(out, "replicas 0, names 0") {
		t.Fatalf("a group with no members: exit %d:\n%s", code, out)
	}
}

// --watch --group redraws when a replica joins and the names move.
func TestWatchGroupRedrawsOnJoin(t *testing.T) {
	c := fencingtest.Single(t)
	names := []string{"mail/eu", "mail/us"}
	replica(t, c, "mailers", "host-a/1", names)
	waitGroup(t, c, "mailers", 1)
	ctx, cancel := context.WithCancel(t.Context())
	var out etcdtest.Buffer
	done := make(chan int)
	go func() {
		done <- run(ctx, []string{"--endpoints", c.Endpoints()[0], "--watch", "--group", "mailers"}, &out, &out)
	}()
	fencingtest.WaitFor(t, fencingtest.Wait, "a table of one replica", func() bool {
		return strings.Contains(out.String(), "replicas 1, names 2, cap 2, misplaced 0")
	})
	replica(t, c, "mailers", "host-b/2", names)
	fencingtest.WaitFor(t, fencingtest.Wait, "a table of two replicas, balanced", func() bool {
		return strings.Contains(out.String(), "replicas 2, names 2, cap 1, misplaced 0")
	})
	cancel()
	if code := <-done; code != 0 {
		t.Fatalf("watch exit %d:\n%s", code, out.String())
	}
}

// A semaphore shows its limit, permits in use and waiters; a read-write
// lock its readers in and waiting writer; each in the table (the program
// as a user runs it) and in JSON, and a hint names the kind a free NAME
// is held as.
func TestShowsSemaphoreAndRWLock(t *testing.T) {
	c := fencingtest.Single(t)
	hold := func(name string, kind fencing.Kind, n int, id string, acquire func(*fencing.Session) func(context.Context) (*fencing.Hold, error)) {
		t.Helper()
		lock := acquire(fencingtest.Session(t, c.Client(t), fencing.WithIdentity(id)))
		done := make(chan struct{})
		go func() {
			defer close(done)
			if h, err := lock(t.Context()); err == nil {
				<-t.Context().Done()
				h.Unlock(context.Background())
			}
		}()
		t.Cleanup(func() { <-done })
		prefix, err := inspect.KeyPrefix(fencing.DefaultRoot, kind, name)
		if err != nil {
			t.Fatal(err)
		}
		fencingtest.WaitFor(t, fencingtest.Wait, id+" to queue", func() bool { return len(etcdtest.Keys(t, c, prefix)) == n })
	}
	sem := func(s *fencing.Session) func(context.Context) (*fencing.Hold, error) {
		m, err := fencing.NewSemaphore(s, "migrations", 2)
		if err != nil {
			t.Fatal(err)
		}
		return m.Acquire
	}
	rw := func(write bool) func(s *fencing.Session) func(context.Context) (*fencing.Hold, error) {
		return func(s *fencing.Session) func(context.Context) (*fencing.Hold, error) {
			m, err := fencing.NewRWMutex(s, "table")
			if err != nil {
				t.Fatal(err)
			}
			if write {
				return m.Lock
			}
			return m.RLock
		}
	}
	for i, id := range []string{"mig-1", "mig-2", "mig-3"} {
		hold("migrations", fencing.KindSemaphore, i+1, id, sem)
	}
	for i, id := range []string{"reader-1", "reader-2", "writer-1", "reader-3"} {
		hold("table", fencing.KindRWLock, i+1, id, rw(strings.HasPrefix(id, "writer")))
	}
	ep := c.Endpoints()[0]
	code, out, stderr := progtest.Run(t, time.Minute, nil, "--endpoints", ep, "--kind", "semaphore", "migrations")
	if code != 0 || !strings.Contains(out, `semaphore "migrations"`) || !strings.Contains(out, "limit 2, 2 units in use by 2 holds, 1 waiting") {
		t.Fatalf("semaphore: exit %d\n%s\n%s", code, out, stderr)
	}
	rows := func(out string, want ...string) {
		t.Helper()
		var got []string
		for _, l := range strings.Split(out, "\n") {
			if f := strings.Fields(l); len(f) > 0 && strings.HasPrefix(l, "  ") && f[0] != "ROLE" {
				got = append(got, strings.Join(f[:len(f)-4], " ")+" "+f[len(f)-3])
			}
		}
		if strings.Join(got, "\n") != strings.Join(want, "\n") {
			t.Errorf("rows:\n%s\nwant:\n%s\noutput:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"), out)
		}
	}
	rows(out, `holder "mig-1"`, `holder "mig-2"`, `waiter "mig-3"`)
	code, out, stderr = progtest.Run(t, time.Minute, nil, "--endpoints", ep, "--kind", "rwlock", "table")
	if code != 0 || !strings.Contains(out, "2 readers in, 2 waiting") {
		t.Fatalf("rwlock: exit %d\n%s\n%s", code, out, stderr)
	}
	rows(out, `reader "reader-1"`, `reader "reader-2"`, `waiting writer "writer-1"`, `waiting reader "reader-3"`)

	code, out, stderr = runInspect(t, "--endpoints", ep, "--prefix", "", "-o", "json")
	var qs []inspect.Queue
	if err := json.Unmarshal([]byte(out), &qs); code != 0 || err != nil || len(qs) != 2 {
		t.Fatalf("JSON: exit %d, %v\n%s\n%s", code, err, out, stderr)
	}
	if q := qs[1]; q.Kind != fencing.KindSemaphore || q.Limit != 2 || len(q.Holders()) != 2 || len(q.Waiters()) != 1 {
		t.Errorf("semaphore in JSON: %+v", q)
	}
	if q := qs[0]; q.Kind != fencing.KindRWLock || len(q.Holders()) != 2 || q.Waiters()[0].Mode != "write" {
		t.Errorf("read-write lock in JSON: %+v", q)
	}
	want := `inspect: no lock named "migrations"; a semaphore named "migrations" is held (by "mig-1", first): use --kind semaphore`
	if code, _, stderr := runInspect(t, "--endpoints", ep, "migrations"); code != 0 || !strings.Contains(stderr, want) {
		t.Errorf("hint: exit %d, stderr:\n%s\nwant: %s", code, stderr, want)
	}
	if code, _, stderr := runInspect(t, "--endpoints", ep, "--kind", "queue", "x"); code != 2 || !strings.Contains(stderr, "semaphore or rwlock") {
		t.Errorf("--kind queue: exit %d\n%s", code, stderr)
	}
}

// As an operator checks a rolling upgrade: an election's ranked candidates
// are listed with their priority, and only the highest is preferred.
func TestProgramShowsCandidates(t *testing.T) {
	c := fencingtest.Single(t)
	for id, version := range map[string]string{"old": "v1.4.0", "new": "v1.5.0"} {
		cli := c.Client(t)
		fencingtest.Go(t, func(ctx context.Context) error {
			return election.Run(ctx, cli, "svc", id, func(ctx context.Context, _ *election.Term) error {
				<-ctx.Done()
				return nil
			}, election.PriorityVersion(version), election.WithSessionOptions(fencing.WithIdentity(id)))
		})
	}
	fencingtest.WaitFor(t, fencingtest.Wait, "new leading, both candidates live", func() bool {
		o, ok := c.Queue(t, fencing.KindElection, "svc").Owner()
		cs, err := election.ReadCandidates(t.Context(), c.Admin, c.Root, "svc")
		return ok && o.Value == "new" && err == nil && len(cs) == 2
	})
	for _, args := range [][]string{{"--kind", "election", "svc"}, {"--prefix", ""}} { // one name; every queue
		code, out, stderr := progtest.Run(t, time.Minute, nil, append([]string{"--endpoints", c.Endpoints()[0]}, args...)...)
		if code != 0 {
			t.Fatalf("%q: exit %d: %s", args, code, stderr)
		}
		for _, row := range []string{`(?m)^  CANDIDATE\s+PRIORITY\s+DRAINED\s+PREFERRED$`,
			`(?m)^  "new"\s+1\.5\.0\s+false\s+true$`, `(?m)^  "old"\s+1\.4\.0\s+false\s+false$`} {
			if !regexp.MustCompile(row).MatchString(out) {
				t.Errorf("%q: no row %s:\n%s", args, row, out)
			}
		}
	}
}
